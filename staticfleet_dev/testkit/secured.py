"""The secured broker of the test session and the credentials of each of its listeners, as a
ConsumerGroup names them (`spec.kafka.security` with Secret references) and as the Secrets hold
them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from staticfleet_dev import certs
from staticfleet_dev.kafka import (
    SCRAM_MECHANISM,
    SECURED_LISTENERS,
    KafkaBroker,
    KafkaSettings,
    start_kafka,
)
from staticfleet_dev.oauth import TokenEndpoint
from staticfleet_dev.procs import stop

IDENTITIES = ("member", "other")
"""Every listener knows these two principals (a certificate CN, a SCRAM user, an OAuth client);
a test grants its topic and group to `member` alone."""
SCRAM_PASSWORDS = {"member": "scram-member-pw", "other": "scram-other-pw"}
OAUTH_SECRETS = {"member": "oauth-member-secret", "other": "oauth-other-secret"}


@dataclass(frozen=True)
class Credentials:
    """How a client of one listener connects, as a ConsumerGroup says it."""

    listener: str
    bootstrap: str
    security: dict[str, Any]
    """`spec.kafka.security`, referring to the Secrets of `secrets`."""
    secrets: dict[str, dict[str, str]]
    """Secret name -> key -> value."""
    principal: str | None
    """The principal the broker sees (None: ANONYMOUS, a super user)."""

    def secret_value(self, name: str, key: str) -> str:
        return self.secrets[name][key]


@dataclass
class SecuredKafka:
    broker: KafkaBroker
    tls: certs.KafkaTlsFiles
    untrusted: certs.KafkaTlsFiles
    """Client certificates of another CA, which the broker does not trust."""
    tokens: TokenEndpoint
    _admin: AdminClient | None = None

    def admin(self) -> AdminClient:
        """An admin client on the PLAINTEXT listener (ANONYMOUS, a super user), kept: a
        client's pending results fail when it is destroyed."""
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        return self._admin

    def make_topic(self, name: str, partitions: int) -> str:
        for fut in self.admin().create_topics([NewTopic(name, partitions, 1)]).values():
            fut.result(timeout=30)
        return name

    def grant(self, principal: str, topic: str, group: str) -> None:
        """Let `principal` alone read `topic` and use `group` (the broker then refuses both to
        any other principal but the super user)."""
        bindings = [AclBinding(kind, name, ResourcePatternType.LITERAL, principal, "*", op,
                               AclPermissionType.ALLOW)
                    for kind, name, op in ((ResourceType.TOPIC, topic, AclOperation.READ),
                                           (ResourceType.TOPIC, topic, AclOperation.DESCRIBE),
                                           (ResourceType.GROUP, group, AclOperation.READ))]
        for fut in self.admin().create_acls(bindings, request_timeout=30).values():
            fut.result(timeout=30)

    def grant_write(self, principal: str, topic: str) -> None:
        """Let `principal` alone write `topic` (a Kafka sink)."""
        bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal,
                               "*", op, AclPermissionType.ALLOW)
                    for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
        for fut in self.admin().create_acls(bindings, request_timeout=30).values():
            fut.result(timeout=30)

    def credentials(self, listener: str, identity: str = "member", *,
                    wrong: bool = False) -> Credentials:
        """The credentials of `identity` on `listener`; `wrong`: ones the listener refuses (a
        wrong password or client secret, a certificate of another CA; on SSL, another CA to
        check the broker's certificate with)."""
        bootstrap = self.broker.listeners[listener]
        ca = (self.untrusted if wrong and listener == "SSL" else self.tls).ca_cert.read_text()
        tls_secret = f"{listener.lower()}-tls"
        secrets: dict[str, dict[str, str]] = {tls_secret: {"ca.crt": ca}}
        security: dict[str, Any] = {"tls": {"caSecretRef": {"name": tls_secret, "key": "ca.crt"}}}
        principal: str | None = f"User:{identity}"
        if listener == "SSL":
            security["protocol"], principal = "SSL", None
        elif listener == "MTLS":
            cert, key = (self.untrusted if wrong else self.tls).client_pems(identity)
            secrets[tls_secret].update({"tls.crt": cert, "tls.key": key})
            security["protocol"] = "SSL"
            security["tls"].update({"certSecretRef": {"name": tls_secret, "key": "tls.crt"},
                                    "keySecretRef": {"name": tls_secret, "key": "tls.key"}})
        elif listener == "SCRAM":
            password = "not-the-password" if wrong else SCRAM_PASSWORDS[identity]
            secrets["scram-login"] = {"username": identity, "password": password}
            security.update(protocol="SASL_SSL", sasl={
                "mechanism": SCRAM_MECHANISM,
                "usernameSecretRef": {"name": "scram-login", "key": "username"},
                "passwordSecretRef": {"name": "scram-login", "key": "password"}})
        elif listener == "OAUTH":
            secret = "not-the-client-secret" if wrong else OAUTH_SECRETS[identity]
            secrets["oauth-client"] = {"client-id": identity, "client-secret": secret}
            security.update(protocol="SASL_SSL", sasl={
                "mechanism": "OAUTHBEARER", "oauthbearer": {
                    "tokenEndpointUrl": self.tokens.url,
                    "clientIdSecretRef": {"name": "oauth-client", "key": "client-id"},
                    "clientSecretSecretRef": {"name": "oauth-client", "key": "client-secret"}}})
        else:
            raise ValueError(f"no listener {listener!r} (one of {SECURED_LISTENERS})")
        return Credentials(listener, bootstrap, security, secrets, principal)


@contextmanager
def secured_kafka(workdir: Path) -> Iterator[SecuredKafka]:
    """Start the broker of `KafkaSettings.with_secured_listeners` and the token endpoint of its
    OAUTHBEARER listener; stop both on exit."""
    tls = certs.generate_kafka(workdir / "pki", IDENTITIES)
    untrusted = certs.generate_kafka(workdir / "pki-untrusted", IDENTITIES)
    tokens = TokenEndpoint(OAUTH_SECRETS).start()
    try:
        broker = start_kafka(workdir / "kafka",
                             KafkaSettings.with_secured_listeners(tls, SCRAM_PASSWORDS))
        try:
            yield SecuredKafka(broker, tls, untrusted, tokens)
        finally:
            stop(broker.record, grace=10)
    finally:
        tokens.stop()
