"""The token endpoint that stands in for an identity provider in the local environment."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from staticfleet_dev.oauth import TokenEndpoint, basic_credentials, unsecured_jwt


def claims(token: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    header, payload, signature = token.split(".")
    def decode(part: str) -> dict[str, Any]:
        return dict(json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))))
    return decode(header), decode(payload), signature


def test_a_token_is_an_unsigned_jws_as_kafkas_unsecured_validator_wants_it() -> None:
    header, payload, signature = claims(unsecured_jwt("member", 1000.5, 60, "kafka"))
    assert header == {"alg": "none"} and signature == ""
    assert payload == {"sub": "member", "iat": 1000, "exp": 1060, "scope": "kafka"}


def basic(client: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{client}:{secret}".encode()).decode()


@pytest.mark.parametrize(("authorization", "grant", "status"), [
    (basic("member", "pw"), "client_credentials", 200),
    (basic("member", "wrong"), "client_credentials", 401),
    (basic("stranger", "pw"), "client_credentials", 401),
    (None, "client_credentials", 401),
    ("Basic not-base64!", "client_credentials", 401),
    (basic("member", "pw"), "password", 400),
])
def test_only_a_known_client_with_its_secret_gets_a_token(
        authorization: str | None, grant: str, status: int) -> None:
    endpoint = TokenEndpoint({"member": "pw"})
    got, body = endpoint.answer("/token", authorization, {"grant_type": [grant]})
    assert got == status
    assert ("access_token" in body) == (status == 200)
    assert "pw" not in json.dumps(body)


def test_basic_credentials_are_form_decoded() -> None:
    assert basic_credentials(basic("a%3Ab", "c+d")) == ("a:b", "c d")


def test_it_serves_over_http() -> None:
    endpoint = TokenEndpoint({"member": "pw"}).start()
    try:
        request = urllib.request.Request(endpoint.url, data=b"grant_type=client_credentials",
                                         headers={"Authorization": basic("member", "pw")})
        with urllib.request.urlopen(request, timeout=5) as resp:
            assert claims(json.load(resp)["access_token"])[1]["sub"] == "member"
        request.headers["Authorization"] = basic("member", "nope")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=5)
        assert err.value.code == 401
        assert endpoint.issued == {"member": 1} and endpoint.refused == 1
    finally:
        endpoint.stop()
