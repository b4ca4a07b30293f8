"""How a client of the group's cluster connects: `spec.kafka.security` as librdkafka properties.

`secret_properties` says which Secret reference fills which librdkafka property, under which
environment variable a member receives it (the member contract's table,
`member_contract.SECRET_ENV`, which the member runtime reads back the same way); the member
pod's env (builders), the operator's own admin client (`admin_conf`) and the messages that name
the credentials (`credentials`) are all read from it. A unit test holds each SASL mechanism's
credentials to the contract's `MECHANISM_CREDENTIALS`.
Secrets travel as PEM text and strings, never as files: a member pod mounts none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from member_contract import (
    OAUTHBEARER_CLIENT_ID_ENV,
    OAUTHBEARER_CLIENT_SECRET_ENV,
    SASL_PASSWORD_ENV,
    SASL_USERNAME_ENV,
    SECRET_ENV,
    SSL_CA_PEM_ENV,
    SSL_CERT_PEM_ENV,
    SSL_KEY_PEM_ENV,
)
from staticfleet.decisions.spec.kafka import KafkaSpec, SecretKeyRef, SecuritySpec


@dataclass(frozen=True)
class SecretProperty:
    """A librdkafka property whose value is read from a Secret key."""

    env: str
    """The member's environment variable (valueFrom.secretKeyRef)."""
    prop: str
    """The librdkafka property."""
    ref: SecretKeyRef
    what: str
    """What the value is, for messages ("SASL password")."""
    sensitive: bool = True
    """A secret proper (a password, a key): never shown, redacted from messages."""


def _secret(env: str, ref: SecretKeyRef, what: str, sensitive: bool = True) -> SecretProperty:
    """The Secret reference `ref` as the member's variable `env`, filling the property the
    member contract gives that variable."""
    return SecretProperty(env, SECRET_ENV[env], ref, what, sensitive)


def secret_properties(security: SecuritySpec) -> list[SecretProperty]:
    """Every Secret reference of `security`, with its variable and property, in a stable order."""
    out: list[SecretProperty] = []
    sasl = security.sasl
    if sasl is not None and sasl.username is not None and sasl.password is not None:
        out += [_secret(SASL_USERNAME_ENV, sasl.username, "SASL user name", sensitive=False),
                _secret(SASL_PASSWORD_ENV, sasl.password, "SASL password")]
    if sasl is not None and sasl.oauthbearer is not None:
        ob = sasl.oauthbearer
        out += [_secret(OAUTHBEARER_CLIENT_ID_ENV, ob.client_id, "OAuth client id",
                        sensitive=False),
                _secret(OAUTHBEARER_CLIENT_SECRET_ENV, ob.client_secret, "OAuth client secret")]
    tls = security.tls
    if tls is not None:
        for env, ref, what, sensitive in (
                (SSL_CA_PEM_ENV, tls.ca, "CA certificate", False),
                (SSL_CERT_PEM_ENV, tls.cert, "client certificate", False),
                (SSL_KEY_PEM_ENV, tls.key, "client key", True)):
            if ref is not None:
                out.append(_secret(env, ref, what, sensitive))
    return out


def security_properties(security: SecuritySpec) -> dict[str, str]:
    """The librdkafka properties of `security` that hold no secret (the member's config.json)."""
    props: dict[str, str] = {"security.protocol": security.protocol}
    sasl = security.sasl
    if sasl is not None:
        props["sasl.mechanism"] = sasl.mechanism
    if sasl is not None and sasl.oauthbearer is not None:
        ob = sasl.oauthbearer
        props["sasl.oauthbearer.method"] = "oidc"
        props["sasl.oauthbearer.token.endpoint.url"] = ob.token_endpoint_url
        if ob.scope:
            props["sasl.oauthbearer.scope"] = ob.scope
        if ob.extensions:
            props["sasl.oauthbearer.extensions"] = ",".join(
                f"{k}={v}" for k, v in sorted(ob.extensions.items()))
    return props


def admin_conf(kafka: KafkaSpec,
               secret_value: Callable[[SecretKeyRef], str]) -> dict[str, str]:
    """The operator's admin client configuration for the group's cluster: the members'
    bootstrap servers and TLS tuning clientProperties, with `adminSecurity` when it is set (an
    operator principal, so the members' needs no cluster rights), else the members' security;
    credentials read through `secret_value`."""
    security = kafka.operator_security
    conf = {"bootstrap.servers": kafka.bootstrap_servers, **security_properties(security)}
    conf.update({k: v for k, v in kafka.client_properties.items() if k.startswith("ssl.")})
    for sp in secret_properties(security):
        conf[sp.prop] = secret_value(sp.ref)
    return conf


def sensitive_values(security: SecuritySpec, conf: dict[str, str]) -> list[str]:
    """The values in `conf` (an `admin_conf`) that must never appear in a message."""
    return [conf[sp.prop] for sp in secret_properties(security)
            if sp.sensitive and conf.get(sp.prop)]


def mechanism(security: SecuritySpec) -> str:
    """How the client authenticates, in a few words: "SASL_SSL/SCRAM-SHA-512", "SSL with a
    client certificate (mutual TLS)", "SSL"."""
    if security.sasl is not None:
        return f"{security.protocol}/{security.sasl.mechanism}"
    if security.tls is not None and security.tls.cert is not None:
        return f"{security.protocol} with a client certificate (mutual TLS)"
    return security.protocol


def credentials(security: SecuritySpec) -> str:
    """Where the credentials are, never what they are: "the SASL user name and SASL password
    from Secret creds (keys username, password)"."""
    refs = secret_properties(security)
    if not refs:
        return "no credentials"
    by_secret: dict[str, list[SecretProperty]] = {}
    for sp in refs:
        by_secret.setdefault(sp.ref.name, []).append(sp)
    parts = []
    for name, sps in by_secret.items():
        whats = [sp.what for sp in sps]
        listed = whats[0] if len(whats) == 1 else ", ".join(whats[:-1]) + " and " + whats[-1]
        keys = ", ".join(sp.ref.key for sp in sps)
        parts.append(f"the {listed} from Secret {name} (key{'s' if len(sps) > 1 else ''} "
                     f"{keys})")
    return "; ".join(parts)


def redact(text: str, secrets: list[str]) -> str:
    """`text` with every occurrence of each of `secrets` replaced by "***"."""
    for value in sorted(secrets, key=len, reverse=True):
        text = text.replace(value, "***")
    return text
