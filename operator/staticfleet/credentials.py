"""What a pass reads from Secrets, and what a refusal of those credentials says.

* `admin_conf`: the operator's own Kafka client configuration, its credentials read from the
  Secrets that spec.kafka names (the members' too, to name a missing one early).
* `member_token`: the members' bearer token as the group's Secret holds it, or a new one while
  the Secret is missing.
* `kafka_problem`: the Degraded problem of a cluster that did not answer or refused the
  operator's credentials, with no secret value in it.

Secrets are read through `apply.Kube` (cached there, as every Secret is).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping

from staticfleet import apply
from staticfleet.decisions import builders, kafkaclient
from staticfleet.decisions import conditions as c
from staticfleet.decisions.names import member_token_secret_name
from staticfleet.decisions.snapshot import Problem
from staticfleet.decisions.spec.kafka import SecretKeyRef
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.observe import kafkaadmin

SECRET_RETRY_S = 15.0
"""A missing Secret, or credentials Kafka refused, are looked at again this soon."""


def admin_conf(spec: ConsumerGroupSpec, namespace: str, kube: apply.Kube) -> dict[str, str]:
    """The operator's own Kafka client configuration, credentials read from the Secrets. With
    `adminSecurity` the members' Secrets are looked up too: a missing one is named here rather
    than left to the pods' CreateContainerConfigError. SecretMissing says which field to fix."""
    def reader(path: str) -> Callable[[SecretKeyRef], str]:
        def value(ref: SecretKeyRef) -> str:
            try:
                return kube.secret_value(namespace, ref.name, ref.key)
            except apply.SecretMissing as exc:
                raise apply.SecretMissing(
                    f"{exc}: create it or fix the reference in {path}", exc.status) from None
        return value

    kafka = spec.kafka
    conf = kafkaclient.admin_conf(kafka, reader(kafka.operator_security_path))
    if kafka.admin_security is not None:
        members = reader("spec.kafka.security")
        for sp in kafkaclient.secret_properties(kafka.security):
            members(sp.ref)
    return conf


def kafka_problem(spec: ConsumerGroupSpec, exc: kafkaadmin.KafkaUnavailable,
                  conf: Mapping[str, str]) -> Problem:
    """Degraded for a cluster that did not answer, or that refused the operator's credentials
    or TLS handshake: then the message names the mechanism and the Secrets the credentials came
    from, and no secret value (any that the client's error might echo is redacted)."""
    security = spec.kafka.operator_security
    text = kafkaclient.redact(str(exc), kafkaclient.sensitive_values(security, dict(conf)))
    if not isinstance(exc, kafkaadmin.KafkaAuthFailed):
        return Problem(c.KAFKA_UNREACHABLE, f"Kafka unreachable: {text}")
    whose = ("the operator's own (spec.kafka.adminSecurity; the members use spec.kafka.security)"
             if spec.kafka.admin_security else "the members use the same credentials")
    return Problem(c.KAFKA_AUTHENTICATION_FAILED, (
        f"Kafka refused the {kafkaclient.mechanism(security)} connection made with "
        f"{kafkaclient.credentials(security)}: {text}; check those Secrets and the "
        f"principal on the brokers ({whose})"), SECRET_RETRY_S)


def member_token(spec: ConsumerGroupSpec, kube: apply.Kube) -> tuple[str, bool]:
    """The members' token as the group's Secret holds it, or a new random one while that
    Secret (or its key) is missing, for the plan to create it with; and whether it is missing."""
    held = kube.secret_key(spec.namespace, member_token_secret_name(spec),
                           builders.MEMBER_TOKEN_KEY)
    if held is not None:
        return held, False
    return secrets.token_urlsafe(32), True
