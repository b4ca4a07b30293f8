"""A minimal OAuth 2.0 token endpoint (client-credentials grant) for a broker's OAUTHBEARER
listener in the local environment.

It stands in for an identity provider: a client that authenticates with HTTP Basic (its client
id and secret, as librdkafka's `sasl.oauthbearer.method=oidc` sends them) gets an *unsigned* JWT
(JWS with alg "none") whose `sub` is the client id. Kafka's unsecured JWS validator (the broker's
default for OAUTHBEARER, see `KafkaSettings.with_secured_listeners`) accepts exactly such tokens.
Nothing here signs a token or publishes keys: a broker that validates signatures (JWKS) is not
served by it. Plain HTTP on loopback.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN_LIFETIME_S = 3600


def unsecured_jwt(subject: str, now: float, lifetime_s: int = TOKEN_LIFETIME_S,
                  scope: str | None = None) -> str:
    """An unsigned JWS (`header.claims.`, empty signature) for `subject`."""
    def part(obj: Mapping[str, Any]) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    claims: dict[str, Any] = {"sub": subject, "iat": int(now), "exp": int(now) + lifetime_s}
    if scope:
        claims["scope"] = scope
    return f"{part({'alg': 'none'})}.{part(claims)}."


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """(client id, secret) from an `Authorization: Basic ...` header (RFC 6749 2.3.1: both
    form-encoded), or None."""
    if not header or not header.startswith("Basic "):
        return None
    try:
        decoded = base64.b64decode(header[len("Basic "):], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    client_id, sep, secret = decoded.partition(":")
    if not sep:
        return None
    return urllib.parse.unquote_plus(client_id), urllib.parse.unquote_plus(secret)


@dataclass
class TokenEndpoint:
    """`clients`: client id -> secret. `url` once started; `issued` counts tokens per client and
    `refused` the requests answered 401."""

    clients: Mapping[str, str]
    lifetime_s: int = TOKEN_LIFETIME_S
    issued: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the endpoint first"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/token"

    def start(self) -> TokenEndpoint:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(length).decode(errors="replace"))
                status, body = endpoint.answer(self.path, self.headers.get("Authorization"),
                                               form)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 401:
                    self.send_header("WWW-Authenticate", 'Basic realm="staticfleet"')
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name="token-endpoint",
                         daemon=True).start()
        return self

    def answer(self, path: str, authorization: str | None,
               form: Mapping[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """The status and JSON body for one token request."""
        if path.split("?")[0] != "/token":
            return 404, {"error": "not_found"}
        if form.get("grant_type") != ["client_credentials"]:
            return 400, {"error": "unsupported_grant_type"}
        creds = basic_credentials(authorization)
        known = None if creds is None else self.clients.get(creds[0])
        if creds is None or known is None or not secrets.compare_digest(known, creds[1]):
            with self._lock:
                self.refused += 1
            return 401, {"error": "invalid_client",
                         "error_description": "unknown client or wrong secret"}
        scope = (form.get("scope") or [""])[0] or None
        with self._lock:
            self.issued[creds[0]] = self.issued.get(creds[0], 0) + 1
        return 200, {"access_token": unsecured_jwt(creds[0], time.time(), self.lifetime_s,
                                                   scope),
                     "token_type": "Bearer", "expires_in": self.lifetime_s}

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
