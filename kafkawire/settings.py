"""kafka-python's client settings from a librdkafka configuration (`client_settings`): the same
servers, security protocol, SASL mechanism, credentials and TLS material, so that a
kafka-python client connects as the librdkafka client of that configuration does, as the same
principal. The operator's per-cluster reads take it from the admin client's configuration
(`staticfleet.observe.clientsettings`), the member's leave and group view from the consumer's
(`consumer_runtime.staticleave.client_config`); each adds its own client id and reconnect
pace.

Each SASL mechanism of the member contract (`member_contract.SASL_MECHANISMS`) has its row in
`SASL_SETTINGS`; tests/unit/test_member_contract.py holds the rows to the contract's table. A
security setting kafka-python cannot honour (a `security.*`, `sasl.*`, `ssl.*` or `https.*`
property not in `TAKEN`, another OAUTHBEARER method) raises `Unsupported`: the caller goes
without this client, never with weaker settings. Other properties (`socket.*`,
`broker.address.*`) tune librdkafka's sockets and are left to kafka-python's defaults. Key
material arrives as PEM text and is never written to a disk (`_memory_file`).
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

REQUEST_TIMEOUT_MS = 5000
"""A request's (and the API versions' at connect, and the token endpoint's) time limit."""


class Unsupported(ValueError):
    """A connection setting kafka-python's client cannot honour: `<property>: <why>[; <what to
    do>]`."""


def _password(conf: Mapping[str, str]) -> dict[str, Any]:
    return {"sasl_plain_username": conf.get("sasl.username", ""),
            "sasl_plain_password": conf.get("sasl.password", "")}


def _oauthbearer(conf: Mapping[str, str]) -> dict[str, Any]:
    return {"sasl_oauth_token_provider": OidcToken.of(conf)}


SASL_SETTINGS: Mapping[str, Callable[[Mapping[str, str]], dict[str, Any]]] = {
    "PLAIN": _password,
    "SCRAM-SHA-256": _password,
    "SCRAM-SHA-512": _password,
    "OAUTHBEARER": _oauthbearer,
}
"""kafka-python's credential settings of each SASL mechanism, from the librdkafka properties."""

SECURITY_PREFIXES = ("security.", "sasl.", "ssl.", "https.")
"""The properties that say how a connection is secured: each one is in `TAKEN`, or refused."""

TAKEN = frozenset({
    "bootstrap.servers", "client.id", "security.protocol", "sasl.mechanism", "sasl.mechanisms",
    "sasl.username", "sasl.password", "sasl.oauthbearer.method",
    "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope", "sasl.oauthbearer.extensions",
    "https.ca.location", "https.ca.pem",
    "ssl.ca.pem", "ssl.ca.location", "ssl.certificate.pem", "ssl.certificate.location",
    "ssl.key.pem", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "ssl.cipher.suites",
})
"""The librdkafka properties these settings carry (`client.id`: the caller names its client)."""


def client_settings(conf: Mapping[str, Any], client_id: str) -> dict[str, Any]:
    """kafka-python's `KafkaClient` settings for the librdkafka configuration `conf`, as the
    client `client_id`; `Unsupported` for what they cannot carry."""
    other = sorted(k for k in set(conf) - TAKEN if k.startswith(SECURITY_PREFIXES))
    if other:
        raise Unsupported(f"{other[0]}: not a setting kafka-python's client carries; leave it "
                          "out of the client's properties")
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise Unsupported(f"security.protocol: {protocol!r} is not one of "
                          f"{', '.join(SECURITY_PROTOCOLS)}; use one of them")
    settings: dict[str, Any] = {
        "bootstrap_servers": [s.strip() for s in str(conf["bootstrap.servers"]).split(",")
                              if s.strip()],
        "client_id": client_id,
        "security_protocol": protocol,
        "request_timeout_ms": REQUEST_TIMEOUT_MS,
        "api_version_auto_timeout_ms": REQUEST_TIMEOUT_MS,
        "allow_auto_create_topics": False,
    }
    if protocol.startswith("SASL_"):
        mechanism = str(conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI"))).upper()
        if mechanism not in SASL_SETTINGS:
            raise Unsupported(f"sasl.mechanism: {mechanism!r} is not one of "
                              f"{', '.join(SASL_MECHANISMS)}; use one of them")
        settings["sasl_mechanism"] = mechanism
        settings.update(SASL_SETTINGS[mechanism](conf))
    if protocol.endswith("SSL"):
        settings["ssl_context"] = tls_context(conf)
    return settings


def tls_context(conf: Mapping[str, str]) -> ssl.SSLContext:
    """The TLS context of the `ssl.*` properties: the CA to trust (PEM or a file; else the
    system's), a client certificate and key (both PEM or both files, the key's password),
    whether the broker's name is checked (librdkafka's default, `https`, checks it) and the
    cipher suites. Python's ssl module cannot set `ssl.curves.list` or `ssl.sigalgs.list`:
    those are `Unsupported` (`client_settings`). A key that does not load raises ssl's error."""
    context = ssl.create_default_context(cafile=conf.get("ssl.ca.location") or None,
                                         cadata=conf.get("ssl.ca.pem") or None)
    check = str(conf.get("ssl.endpoint.identification.algorithm", "https")).lower()
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
        raise Unsupported("ssl.certificate.*/ssl.key.*: a client certificate needs both the "
                          "certificate and its key, both as PEM or both as files; give both "
                          "or neither")
    return context


@contextlib.contextmanager
def _memory_file(text: str) -> Iterator[str]:
    """A path that reads `text` and names no file on any disk: an anonymous memory file
    (memfd_create) through /proc/self/fd, closed on exit. `load_cert_chain` takes paths only,
    and the CRD promises that key material is never written."""
    if not hasattr(os, "memfd_create"):
        raise Unsupported("ssl.key.pem: this platform cannot read a key from memory (no "
                          "memfd_create); run on Linux")
    fd = os.memfd_create("kafkawire-pem", os.MFD_CLOEXEC)
    try:
        data = memoryview(text.encode())
        while data:  # a write may take part of it
            data = data[os.write(fd, data):]
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


@dataclass
class OidcToken(AbstractTokenProvider):
    """An OAUTHBEARER token from the OIDC token endpoint by client credentials, as librdkafka's
    `sasl.oauthbearer.method=oidc` gets it: a form POST with the client's id and secret as
    HTTP Basic authentication, trusting `https.ca.*` (else the system's CAs)."""

    url: str
    client_id: str
    client_secret: str
    scope: str = ""
    extension_pairs: str = ""
    ca: ssl.SSLContext | None = None

    @classmethod
    def of(cls, conf: Mapping[str, str]) -> OidcToken:
        method = str(conf.get("sasl.oauthbearer.method", "default")).lower()
        if method != "oidc":
            raise Unsupported(f"sasl.oauthbearer.method: {method!r}; only oidc (client "
                              "credentials with a token endpoint) is supported for OAUTHBEARER")
        url = conf.get("sasl.oauthbearer.token.endpoint.url")
        if not url:
            raise Unsupported("sasl.oauthbearer.token.endpoint.url: not set; OIDC needs the "
                              "token endpoint")
        cafile = conf.get("https.ca.location") or None
        ca_pem = conf.get("https.ca.pem") or None
        return cls(url=str(url),
                   client_id=conf.get("sasl.oauthbearer.client.id", ""),
                   client_secret=conf.get("sasl.oauthbearer.client.secret", ""),
                   scope=conf.get("sasl.oauthbearer.scope", ""),
                   extension_pairs=conf.get("sasl.oauthbearer.extensions", ""),
                   ca=ssl.create_default_context(cafile=cafile, cadata=ca_pem)
                   if (cafile or ca_pem) else None)

    def token(self) -> str:
        form = {"grant_type": "client_credentials"}
        if self.scope:
            form["scope"] = self.scope
        basic = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
        request = urllib.request.Request(
            self.url, data=urllib.parse.urlencode(form).encode(), method="POST",
            headers={"Authorization": f"Basic {basic}",
                     "Content-Type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_MS / 1000,
                                    context=self.ca) as answer:
            return str(json.load(answer)["access_token"])

    def extensions(self) -> dict[str, str]:
        """`sasl.oauthbearer.extensions`: comma-separated `key=value` pairs, trimmed as
        librdkafka trims them; a part without `=` is skipped."""
        pairs = (p.split("=", 1) for p in self.extension_pairs.split(",") if "=" in p)
        return {k.strip(): v.strip() for k, v in pairs}
