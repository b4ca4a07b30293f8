"""The per-cluster reads' kafka-python settings (`observe.clientsettings`) from the operator's
librdkafka configuration: what each setting becomes, and what is refused rather than dropped.
Each SASL mechanism and TLS credential against the member contract's tables:
tests/unit/test_member_contract.py."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest

from staticfleet.observe.clientsettings import (
    CLIENT_ID,
    ClientCredentials,
    Unsupported,
    client_settings,
    tls_context,
)
from staticfleet_dev.certs import KafkaTlsFiles, generate_kafka

BOOTSTRAP = {"bootstrap.servers": "k1:9092, k2:9092"}


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> KafkaTlsFiles:
    return generate_kafka(tmp_path_factory.mktemp("tls"), ("member",))


def test_plaintext_is_the_servers_and_the_operators_client_id() -> None:
    settings = client_settings(BOOTSTRAP)
    assert settings["bootstrap_servers"] == ["k1:9092", "k2:9092"]
    assert (settings["security_protocol"], settings["client_id"]) == ("PLAINTEXT", CLIENT_ID)
    assert not settings["allow_auto_create_topics"]
    assert "sasl_mechanism" not in settings and "ssl_context" not in settings


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_password_mechanism_takes_the_user_and_password(mechanism: str) -> None:
    settings = client_settings({**BOOTSTRAP, "security.protocol": "sasl_plaintext",
                                "sasl.mechanism": mechanism, "sasl.username": "u",
                                "sasl.password": "p"})
    assert (settings["sasl_mechanism"], settings["sasl_plain_username"],
            settings["sasl_plain_password"]) == (mechanism, "u", "p")
    assert "ssl_context" not in settings


def test_oauthbearer_asks_the_token_endpoint_with_the_clients_credentials() -> None:
    settings = client_settings({
        **BOOTSTRAP, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": "http://i/t",
        "sasl.oauthbearer.client.id": "id", "sasl.oauthbearer.client.secret": "s",
        "sasl.oauthbearer.extensions": "a=1, b=2"})
    provider = settings["sasl_oauth_token_provider"]
    assert provider == ClientCredentials("http://i/t", "id", "s", "", "a=1, b=2")
    assert provider.extensions() == {"a": "1", "b": "2"}


@pytest.mark.parametrize(("conf", "refused"), [
    ({"ssl.curves.list": "X25519"}, r"^ssl\.curves\.list: "),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}, r"^sasl\.mechanism: "),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"},
     r"^sasl\.oauthbearer\.method: "),
    ({"security.protocol": "QUIC"}, r"^security\.protocol: "),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"},
     r"^ssl\.endpoint\.identification\.algorithm: "),
    ({"security.protocol": "SSL", "ssl.key.location": "/k"}, r"^ssl\.certificate\.\*"),
], ids=["an ssl property it does not carry", "a mechanism kafka-python lacks",
        "OAUTHBEARER without OIDC", "an unknown protocol", "another identification",
        "a key without its certificate"])
def test_what_it_cannot_honour_is_refused_not_dropped(conf: dict[str, str], refused: str) -> None:
    with pytest.raises(Unsupported, match=refused):
        client_settings({**BOOTSTRAP, **conf})


def test_tls_trusts_the_ca_and_checks_the_brokers_name_unless_told_not_to(
        tls: KafkaTlsFiles) -> None:
    ca = tls.ca_cert.read_text()
    context = client_settings({**BOOTSTRAP, "security.protocol": "SSL",
                               "ssl.ca.pem": ca})["ssl_context"]
    assert [dict(s[0] for s in c["subject"])["commonName"] for c in context.get_ca_certs()] == [
        "staticfleet-kafka-ca"]
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    unchecked = tls_context({"ssl.ca.pem": ca, "ssl.endpoint.identification.algorithm": "NONE"})
    assert not unchecked.check_hostname and unchecked.verify_mode == ssl.CERT_REQUIRED
    tuned = tls_context({"ssl.ca.pem": ca, "ssl.cipher.suites": "ECDHE-ECDSA-AES256-GCM-SHA384"})
    below_tls13 = {c["name"] for c in tuned.get_ciphers() if c["protocol"] != "TLSv1.3"}
    assert below_tls13 == {"ECDHE-ECDSA-AES256-GCM-SHA384"}


def test_a_client_certificate_in_pem_text_loads_from_memory(tls: KafkaTlsFiles,
                                                            tmp_path: Path) -> None:
    cert, key = tls.client_pems("member")
    fds = set(os.listdir("/proc/self/fd"))
    tls_context({"ssl.ca.pem": tls.ca_cert.read_text(), "ssl.certificate.pem": cert,
                 "ssl.key.pem": key})
    assert set(os.listdir("/proc/self/fd")) <= fds, "the memory files are closed once read"
    with pytest.raises(ssl.SSLError):  # a key of another certificate
        tls_context({"ssl.certificate.pem": cert, "ssl.key.pem": tls.keystore.read_text()})
    (tmp_path / "c.pem").write_text(cert)
    (tmp_path / "k.pem").write_text(key)
    tls_context({"ssl.certificate.location": str(tmp_path / "c.pem"),
                 "ssl.key.location": str(tmp_path / "k.pem")})
