"""kafka-python's client settings for the operator's own Kafka connection, from the librdkafka
configuration the admin client takes (`credentials.admin_conf`): the same servers, security
protocol, SASL mechanism, credentials and TLS material, so the per-cluster reads
(`clusterreads`) connect as the admin client does, as the same principal.

Each SASL mechanism of the member contract (`member_contract.SASL_MECHANISMS`) has its row in
`SASL_SETTINGS`; a unit test holds the rows to the contract's table, as it holds the operator's
librdkafka configuration and the member's static leave. A setting kafka-python cannot honour
(an unknown `ssl.*` or `sasl.*` property, another OAUTHBEARER method) raises `Unsupported`: the
cluster's reads are then made per group by the admin client, never with weaker settings.
Key material arrives as PEM text and is never written to a disk (`_memory_file`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import ssl
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kafka.sasl.oauth import AbstractTokenProvider

from member_contract import SASL_MECHANISMS, SECURITY_PROTOCOLS

CLIENT_ID = "staticfleet-operator"
"""The admin client's client.id too: the brokers' request logs count both as the operator."""
REQUEST_TIMEOUT_MS = 5000


class Unsupported(ValueError):
    """A connection setting kafka-python's client cannot honour: `<property>: <why>`."""


def _password(conf: Mapping[str, str]) -> dict[str, Any]:
    return {"sasl_plain_username": conf.get("sasl.username", ""),
            "sasl_plain_password": conf.get("sasl.password", "")}


def _oauthbearer(conf: Mapping[str, str]) -> dict[str, Any]:
    return {"sasl_oauth_token_provider": ClientCredentials.of(conf)}


SASL_SETTINGS: Mapping[str, Callable[[Mapping[str, str]], dict[str, Any]]] = {
    "PLAIN": _password,
    "SCRAM-SHA-256": _password,
    "SCRAM-SHA-512": _password,
    "OAUTHBEARER": _oauthbearer,
}
"""kafka-python's credential settings of each SASL mechanism, from the librdkafka properties."""

TAKEN = frozenset({
    "bootstrap.servers", "client.id", "security.protocol", "sasl.mechanism", "sasl.mechanisms",
    "sasl.username", "sasl.password", "sasl.oauthbearer.method",
    "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope", "sasl.oauthbearer.extensions",
    "ssl.ca.pem", "ssl.ca.location", "ssl.certificate.pem", "ssl.certificate.location",
    "ssl.key.pem", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "ssl.cipher.suites",
})
"""The librdkafka properties these settings carry; any other is `Unsupported`."""


def client_settings(conf: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python's `KafkaClient` settings for the librdkafka configuration `conf`."""
    other = sorted(set(conf) - TAKEN)
    if other:
        raise Unsupported(f"{other[0]}: not a setting the per-cluster reads carry")
    protocol = conf.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise Unsupported(f"security.protocol: {protocol!r} is not one of {SECURITY_PROTOCOLS}")
    settings: dict[str, Any] = {
        "bootstrap_servers": [s.strip() for s in conf["bootstrap.servers"].split(",")
                              if s.strip()],
        "client_id": CLIENT_ID,
        "security_protocol": protocol,
        "request_timeout_ms": REQUEST_TIMEOUT_MS,
        "api_version_auto_timeout_ms": REQUEST_TIMEOUT_MS,
        "reconnect_backoff_ms": 100,
        "reconnect_backoff_max_ms": 2000,
        "allow_auto_create_topics": False,
    }
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI")).upper()
        if mechanism not in SASL_SETTINGS:
            raise Unsupported(f"sasl.mechanism: {mechanism!r} is not one of {SASL_MECHANISMS}")
        settings["sasl_mechanism"] = mechanism
        settings.update(SASL_SETTINGS[mechanism](conf))
    if protocol in ("SSL", "SASL_SSL"):
        settings["ssl_context"] = tls_context(conf)
    return settings


def tls_context(conf: Mapping[str, str]) -> ssl.SSLContext:
    """The TLS context of the `ssl.*` properties: the CA to trust (PEM or a file; else the
    system's), a client certificate and key (both PEM or both files), whether the broker's
    name is checked (librdkafka's default, `https`, checks it) and the cipher suites. Python's
    ssl module cannot set `ssl.curves.list` or `ssl.sigalgs.list`: those are `Unsupported`."""
    context = ssl.create_default_context(cafile=conf.get("ssl.ca.location") or None,
                                         cadata=conf.get("ssl.ca.pem") or None)
    check = conf.get("ssl.endpoint.identification.algorithm", "https").lower()
    if check not in ("https", "none"):
        raise Unsupported(f"ssl.endpoint.identification.algorithm: {check!r} is not https "
                          "or none")
    context.check_hostname = check == "https"
    if conf.get("ssl.cipher.suites"):
        context.set_ciphers(conf["ssl.cipher.suites"])  # OpenSSL's list, as librdkafka's
    password = conf.get("ssl.key.password") or None
    files = conf.get("ssl.certificate.location"), conf.get("ssl.key.location")
    pems = conf.get("ssl.certificate.pem"), conf.get("ssl.key.pem")
    if all(files):
        context.load_cert_chain(str(files[0]), str(files[1]), password)
    elif all(pems):
        with _memory_file(str(pems[0])) as cert, _memory_file(str(pems[1])) as key:
            context.load_cert_chain(cert, key, password)
    elif any(files) or any(pems):
        raise Unsupported("ssl.certificate.*, ssl.key.*: a client certificate comes with its "
                          "key, both as PEM or both as files")
    return context


@contextlib.contextmanager
def _memory_file(text: str) -> Iterator[str]:
    """A path to `text` in an anonymous memory file (no disk sees it): `load_cert_chain` reads
    only paths."""
    if not hasattr(os, "memfd_create"):
        raise Unsupported("ssl.key.pem: no memory files here (memfd_create) to read it from")
    fd = os.memfd_create("staticfleet-tls", os.MFD_CLOEXEC)
    try:
        os.write(fd, text.encode())
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


@dataclass
class ClientCredentials(AbstractTokenProvider):
    """An OAUTHBEARER token by OIDC client credentials, as librdkafka's
    `sasl.oauthbearer.method=oidc` asks the token endpoint for it: a form POST with the
    client's id and secret as HTTP Basic authentication."""

    endpoint: str
    client_id: str
    client_secret: str
    scope: str = ""
    extension_text: str = ""

    @classmethod
    def of(cls, conf: Mapping[str, str]) -> ClientCredentials:
        method = conf.get("sasl.oauthbearer.method", "default").lower()
        if method != "oidc" or not conf.get("sasl.oauthbearer.token.endpoint.url"):
            raise Unsupported(f"sasl.oauthbearer.method: {method!r}; the per-cluster reads "
                              "take OIDC client credentials with a token endpoint only")
        return cls(endpoint=conf["sasl.oauthbearer.token.endpoint.url"],
                   client_id=conf.get("sasl.oauthbearer.client.id", ""),
                   client_secret=conf.get("sasl.oauthbearer.client.secret", ""),
                   scope=conf.get("sasl.oauthbearer.scope", ""),
                   extension_text=conf.get("sasl.oauthbearer.extensions", ""))

    def token(self) -> str:
        fields = {"grant_type": "client_credentials", **({"scope": self.scope}
                                                         if self.scope else {})}
        login = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
        request = urllib.request.Request(
            self.endpoint, method="POST", data=urllib.parse.urlencode(fields).encode(),
            headers={"Authorization": f"Basic {login}",
                     "Content-Type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_MS / 1000) as answer:
            return str(json.load(answer)["access_token"])

    def extensions(self) -> dict[str, str]:
        pairs = [p.split("=", 1) for p in self.extension_text.split(",") if "=" in p]
        return {k.strip(): v.strip() for k, v in pairs}
