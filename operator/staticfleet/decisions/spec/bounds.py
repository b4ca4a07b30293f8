"""The bounds of every string, list, map and number of a ConsumerGroup's spec that the operator
copies, probes or iterates, written once for the spec parser; the CRD carries the same as
`maxLength`, `maxItems`, `maxProperties` and `maximum` (a unit test, test_crd_schema.py, holds
the two equal and finds a field of the CRD's spec without a bound).

Every field is written by a tenant the operator does not trust: a list of a thousand bootstrap
addresses, a map of a million labels or a replica count of a billion would cost the operator
(probes, pod writes, per-member reads) for every group beside it. The API server refuses them
with the CRD's bounds; the parser refuses them again (`check`) for a body that never passed
this CRD (an operator running against a CRD applied before the bounds were).

A row's path is the field's, with `[]` for a list's items and `{}` for a map's values; a map's
row bounds its keys too (`max_key_length`, a CEL rule in the CRD). Adding a field to the CRD's
spec means adding its row here. What is not bounded: the contents of the fields that are core/v1
types passed through (`resources`, `affinity`, each toleration, each envFrom entry,
`env[].valueFrom`): the operator copies them into the member pod, whose own API validation
bounds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from staticfleet.decisions.spec.fields import SpecError

MAX_BOOTSTRAP_ADDRESSES = 16
"""Most addresses in `spec.kafka.bootstrapServers`: a few brokers to find the cluster by (the
client learns the others from them). Each is probed on a group's passes."""
MAX_ADDRESS_LENGTH = 261
"""Most characters of one bootstrap address: a DNS name (253), a colon and a port (5), and the
brackets of an IPv6 literal."""
MAX_BOOTSTRAP_LENGTH = MAX_BOOTSTRAP_ADDRESSES * (MAX_ADDRESS_LENGTH + 1)
"""The whole `bootstrapServers` string: every address at its longest, with a comma each."""
TOPIC_PATTERN_MAX_LENGTH = 256
"""The longest `topicPattern` (an RE2 pattern's cost is linear in it: decisions/spec/kafka.py)."""
MAX_REPLICAS = 1000


@dataclass(frozen=True)
class Bound:
    """The bound of one field: a string's length, a list's items, a map's entries (and its
    keys' length) or a number's maximum."""

    max_length: int | None = None
    max_items: int | None = None
    max_properties: int | None = None
    max_key_length: int | None = None
    maximum: int | None = None


def _s(n: int) -> Bound:
    return Bound(max_length=n)


def _l(n: int) -> Bound:
    return Bound(max_items=n)


def _m(n: int, key: int) -> Bound:
    return Bound(max_properties=n, max_key_length=key)


def _n(n: int) -> Bound:
    return Bound(maximum=n)


NAME = 253
"""A Kubernetes object name (a Secret's, a service account's) and a Secret's key."""
LABEL_KEY = 317
"""A label or annotation key: a DNS prefix (253), a slash and a name (63)."""
LABEL_VALUE = 63
ID_MAX = 2_147_483_647
"""A user or group id (the CRD's, since the securityContext fields came; `podsecurity`)."""
HOUR_MS = 3_600_000
DAY_S = 86_400


def _security(path: str) -> dict[str, Bound]:
    sasl = f"{path}.sasl"
    ob = f"{sasl}.oauthbearer"
    refs = [f"{sasl}.usernameSecretRef", f"{sasl}.passwordSecretRef",
            f"{ob}.clientIdSecretRef", f"{ob}.clientSecretSecretRef",
            f"{path}.tls.caSecretRef", f"{path}.tls.certSecretRef", f"{path}.tls.keySecretRef"]
    rows = {f"{ob}.tokenEndpointUrl": _s(2048), f"{ob}.scope": _s(1024),
            f"{ob}.extensions": _m(16, 256), f"{ob}.extensions{{}}": _s(1024)}
    for ref in refs:
        rows[f"{ref}.name"] = _s(NAME)
        rows[f"{ref}.key"] = _s(NAME)
    return rows


def _security_context(path: str, *, pod: bool) -> dict[str, Bound]:
    rows = {f"{path}.seccompProfile.localhostProfile": _s(1024),
            f"{path}.appArmorProfile.localhostProfile": _s(1024),
            **{f"{path}.seLinuxOptions.{k}": _s(256) for k in ("level", "role", "type", "user")},
            f"{path}.runAsUser": _n(ID_MAX), f"{path}.runAsGroup": _n(ID_MAX)}
    if pod:
        rows.update({f"{path}.fsGroup": _n(ID_MAX), f"{path}.supplementalGroups[]": _n(ID_MAX),
                     f"{path}.supplementalGroups": _l(64), f"{path}.sysctls": _l(32),
                     f"{path}.sysctls[].name": _s(256), f"{path}.sysctls[].value": _s(1024)})
    else:
        rows.update({f"{path}.capabilities.add": _l(64), f"{path}.capabilities.add[]": _s(64),
                     f"{path}.capabilities.drop": _l(64), f"{path}.capabilities.drop[]": _s(64)})
    return rows


BOUNDS: Mapping[str, Bound] = {
    # spec.kafka
    "spec.kafka.bootstrapServers": _s(MAX_BOOTSTRAP_LENGTH),
    "spec.kafka.topics": _l(100),
    "spec.kafka.topics[]": _s(249),
    "spec.kafka.topicPattern": _s(TOPIC_PATTERN_MAX_LENGTH),
    "spec.kafka.groupId": _s(200),
    **_security("spec.kafka.security"),
    **_security("spec.kafka.adminSecurity"),
    "spec.kafka.clientProperties": _m(64, 128),
    "spec.kafka.clientProperties{}": _s(1024),
    "spec.replicas": _n(MAX_REPLICAS),
    # spec.template
    "spec.template.image": _s(1024),
    "spec.template.command": _l(64),
    "spec.template.command[]": _s(4096),
    "spec.template.args": _l(64),
    "spec.template.args[]": _s(4096),
    "spec.template.env": _l(128),
    "spec.template.env[].name": _s(256),
    "spec.template.env[].value": _s(8192),
    "spec.template.envFrom": _l(32),
    "spec.template.nodeSelector": _m(32, LABEL_KEY),
    "spec.template.nodeSelector{}": _s(LABEL_VALUE),
    "spec.template.tolerations": _l(64),
    "spec.template.serviceAccountName": _s(NAME),
    "spec.template.terminationGracePeriodSeconds": _n(3600),
    "spec.template.podLabels": _m(64, LABEL_KEY),
    "spec.template.podLabels{}": _s(LABEL_VALUE),
    "spec.template.podAnnotations": _m(64, LABEL_KEY),
    "spec.template.podAnnotations{}": _s(4096),
    **_security_context("spec.template.securityContext", pod=True),
    **_security_context("spec.template.containerSecurityContext", pod=False),
    # spec.membership
    "spec.membership.timeouts.sessionTimeoutMs": _n(HOUR_MS),
    "spec.membership.timeouts.heartbeatIntervalMs": _n(HOUR_MS),
    "spec.membership.timeouts.maxPollIntervalMs": _n(24 * HOUR_MS),
    "spec.membership.autoTuning.restartMarginPercent": _n(1000),
    "spec.membership.autoTuning.maxSessionTimeoutMs": _n(HOUR_MS),
    # spec.processing
    "spec.processing.transform": _s(512),
    "spec.processing.spark.connectUrl": _s(2048),
    "spec.processing.spark.master": _s(256),
    "spec.processing.spark.conf": _m(128, 256),
    "spec.processing.spark.conf{}": _s(4096),
    "spec.processing.batch.maxRecords": _n(1_000_000),
    "spec.processing.batch.maxWaitMs": _n(600_000),
    "spec.processing.batch.maxBytes": _n(1 << 30),
    "spec.processing.sink.topic": _s(249),
    "spec.processing.sink.path": _s(4096),
    "spec.processing.deadLetterTopic": _s(249),
    "spec.processing.retry.attempts": _n(100),
    "spec.processing.retry.backoffMs": _n(HOUR_MS),
    "spec.processing.retry.maxBackoffMs": _n(HOUR_MS),
    # spec.autoscaling
    "spec.autoscaling.minReplicas": _n(MAX_REPLICAS),
    "spec.autoscaling.maxReplicas": _n(MAX_REPLICAS),
    "spec.autoscaling.targetLagSeconds": _n(DAY_S),
    "spec.autoscaling.maxMembershipChangesPerHour": _n(60),
    "spec.autoscaling.scaleDownWindowSeconds": _n(DAY_S),
    "spec.autoscaling.scaleUpCheckSeconds": _n(DAY_S),
    # spec.rollout
    "spec.rollout.maxUnavailable": _n(MAX_REPLICAS),
    "spec.rollout.restartNonce": _s(256),
    "spec.rollout.maxSurge": _n(MAX_REPLICAS),
    "spec.rollout.standbyTimeoutSeconds": _n(DAY_S),
    "spec.rollout.progressDeadlineSeconds": _n(DAY_S),
}


def _prefixes(rows: Mapping[str, Bound]) -> frozenset[str]:
    found = set()
    for row in rows:
        for i, ch in enumerate(row):
            if ch in ".[{":
                found.add(row[:i])
        found.add(row)
    return frozenset(found)


_ROWS_UNDER = _prefixes(BOUNDS)
"""Every path with a row at or below it: the walk goes no deeper than the rows (a passed-
through core/v1 object may nest deeper than a recursion would like)."""


def check(spec: Mapping[str, Any]) -> None:
    """Raise `SpecError` naming the first field of `spec` (a body's `spec`) past its bound."""
    _walk(spec, "spec", "spec")


def _walk(value: Any, row: str, shown: str) -> None:
    if row not in _ROWS_UNDER:
        return
    bound = BOUNDS.get(row)
    if bound is not None:
        _check(bound, value, shown)
    if isinstance(value, Mapping):
        is_map = bound is not None and bound.max_properties is not None
        for key, child in value.items():
            if is_map:
                _walk(child, f"{row}{{}}", f"{shown}[{key}]")
            else:
                _walk(child, f"{row}.{key}", f"{shown}.{key}")
    elif isinstance(value, list):
        for i, child in enumerate(value):
            _walk(child, f"{row}[]", f"{shown}[{i}]")


def _check(bound: Bound, value: Any, shown: str) -> None:
    if bound.max_length is not None and isinstance(value, str) and len(value) > bound.max_length:
        raise SpecError(shown, f"may have at most {bound.max_length} characters, "
                               f"got {len(value)}")
    if bound.max_items is not None and isinstance(value, list) and len(value) > bound.max_items:
        raise SpecError(shown, f"may have at most {bound.max_items} items, got {len(value)}")
    if isinstance(value, Mapping) and bound.max_properties is not None:
        if len(value) > bound.max_properties:
            raise SpecError(shown, f"may have at most {bound.max_properties} entries, "
                                   f"got {len(value)}")
        long = sorted(str(k) for k in value if len(str(k)) > (bound.max_key_length or 0))
        if bound.max_key_length is not None and long:
            raise SpecError(shown, f"keys may have at most {bound.max_key_length} characters: "
                                   f"{long[0][:64]}... has {len(long[0])}")
    if (bound.maximum is not None and isinstance(value, int) and not isinstance(value, bool)
            and value > bound.maximum):
        raise SpecError(shown, f"may be at most {bound.maximum}, got {value}")


def bootstrap_addresses(bootstrap: str, path: str = "spec.kafka.bootstrapServers"
                        ) -> tuple[str, ...]:
    """The addresses of a `bootstrapServers` string (stripped, empty entries dropped); raises
    `SpecError` when there are more than `MAX_BOOTSTRAP_ADDRESSES` or one is longer than
    `MAX_ADDRESS_LENGTH`."""
    addresses = tuple(a.strip() for a in bootstrap.split(",") if a.strip())
    if not addresses:
        raise SpecError(path, "names no address (a comma-separated host:port list)")
    if len(addresses) > MAX_BOOTSTRAP_ADDRESSES:
        raise SpecError(path, f"may name at most {MAX_BOOTSTRAP_ADDRESSES} addresses, got "
                              f"{len(addresses)}: a few brokers are enough to find the cluster")
    for i, address in enumerate(addresses):
        if len(address) > MAX_ADDRESS_LENGTH:
            raise SpecError(path, f"address {i + 1} has {len(address)} characters, at most "
                                  f"{MAX_ADDRESS_LENGTH} are taken (host:port)")
    return addresses
