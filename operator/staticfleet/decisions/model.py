"""The ConsumerGroup spec as typed, frozen dataclasses.

`ConsumerGroupSpec.from_body(body)` turns the resource body (a dict, as kopf hands it over) into
the model. Defaults match the CRD (`crds/consumergroups.staticfleet.io.yaml`), so a body that did
not pass through the API server's defaulting parses to the same model. Problems the schema cannot
catch (or that a body bypassing the API server could carry) raise `SpecError` with the field path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from staticfleet.decisions import podsecurity

API_GROUP = "staticfleet.io"
API_VERSION = "v1alpha1"
KIND = "ConsumerGroup"

# Annotations on the ConsumerGroup itself.
RESTARTED_AT_ANNOTATION = "staticfleet.io/restartedAt"
DYNAMIC_MEMBERSHIP_ANNOTATION = "staticfleet.io/dynamic-membership-for-testing"
STOP_HANDOFF_ANNOTATION = "staticfleet.io/handoff-without-drain-for-testing"
"""Test-only: a warm handoff stops the old member and activates the standby once the old process
exited, as before drains (bench/rollout.py's `warm-stop`, measured beside the drain)."""

DEFAULT_COMMAND: tuple[str, ...] = ("python", "-m", "consumer_runtime")
DEFAULT_TRANSFORM = "consumer_runtime.transforms:identity"
MAX_NAME_LENGTH = 50

Protocol = Literal["classic", "consumer"]
RolloutStrategy = Literal["WarmHandoff", "Recreate"]
STRATEGIES: tuple[RolloutStrategy, ...] = ("WarmHandoff", "Recreate")
ON_FAILURE = ("Rollback", "Halt")
FALLBACKS = ("Recreate", "Stop")
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]

_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_GROUP_ID_RE = re.compile(r"^[a-zA-Z0-9._-]{1,200}$")
_TRANSFORM_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$", re.ASCII)
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# clientProperties keys the operator owns, and the field to use instead (mirrors the CRD's CEL).
OWNED_CLIENT_PROPERTIES: Mapping[str, str] = {
    "group.id": "spec.kafka.groupId",
    "group.instance.id": "nothing: the operator gives member i the id <groupId>-<i>",
    "enable.auto.commit": "nothing: members store offsets after processing (at-least-once)",
    "enable.auto.offset.store": "nothing: members store offsets after processing (at-least-once)",
    "session.timeout.ms": "spec.membership.timeouts.sessionTimeoutMs",
    "heartbeat.interval.ms": "spec.membership.timeouts.heartbeatIntervalMs",
    "max.poll.interval.ms": "spec.membership.timeouts.maxPollIntervalMs",
    "bootstrap.servers": "spec.kafka.bootstrapServers",
    "group.protocol": "spec.membership.protocol",
    "partition.assignment.strategy": "spec.membership.assignmentStrategy",
    "auto.offset.reset": "spec.processing.autoOffsetReset",
    "security.protocol": "spec.kafka.security.protocol",
    "enable.ssl.certificate.verification": (
        "nothing: the broker's certificate is always verified (give its CA in "
        "spec.kafka.security.tls.caSecretRef)"),
    "enable.sasl.oauthbearer.unsecure.jwt": (
        "spec.kafka.security.sasl.oauthbearer: tokens come from the token endpoint"),
}
OWNED_CLIENT_PREFIXES: Mapping[str, str] = {
    "sasl.": "spec.kafka.security.sasl (with Secret references)",
}
SSL_TUNING_PROPERTIES = ("ssl.cipher.suites", "ssl.curves.list", "ssl.sigalgs.list")
"""The ssl.* clientProperties a user may set: they tune the TLS handshake and name no file and
no secret. The operator's admin client uses them too."""
SSL_REFUSAL = (
    "is not one of the ssl.* keys clientProperties take ("
    + ", ".join(SSL_TUNING_PROPERTIES)
    + "): certificates and keys come as PEM from Secrets through spec.kafka.security.tls "
    "(a member pod mounts no files, so *.location keys cannot work, and key material is "
    "never written inline), and verification cannot be switched off")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
RESERVED_ENV_PREFIX = "STATICFLEET_"
RESERVED_ENV_NAMES = frozenset({"POD_NAME", "POD_NAMESPACE"})
RESERVED_LABELS = frozenset(
    {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by"}
)
RESERVED_PREFIX = "staticfleet.io/"


class SpecError(ValueError):
    """The spec cannot be acted on. `field_path` names the field, e.g. `spec.template.env[2]`."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field_path = field_path
        self.message = message


@dataclass(frozen=True)
class SecretKeyRef:
    """A key in a Secret of the ConsumerGroup's namespace."""

    name: str
    key: str


@dataclass(frozen=True)
class OAuthBearerSpec:
    """OAUTHBEARER with OIDC client credentials: librdkafka fetches a token from the endpoint
    with the client id and secret (HTTP Basic) and refreshes it before it expires."""

    token_endpoint_url: str
    client_id: SecretKeyRef
    client_secret: SecretKeyRef
    scope: str | None = None
    extensions: Mapping[str, str] | None = None
    """SASL extensions sent with the token (e.g. logicalCluster, identityPoolId)."""


@dataclass(frozen=True)
class SaslSpec:
    """A user name and password (PLAIN, SCRAM-*), or OAUTHBEARER's `oauthbearer`."""

    mechanism: str
    username: SecretKeyRef | None = None
    password: SecretKeyRef | None = None
    oauthbearer: OAuthBearerSpec | None = None


@dataclass(frozen=True)
class TlsSpec:
    ca: SecretKeyRef | None = None
    cert: SecretKeyRef | None = None
    key: SecretKeyRef | None = None


@dataclass(frozen=True)
class SecuritySpec:
    protocol: SecurityProtocol = "PLAINTEXT"
    sasl: SaslSpec | None = None
    tls: TlsSpec | None = None


@dataclass(frozen=True)
class KafkaSpec:
    bootstrap_servers: str
    group_id: str
    topics: tuple[str, ...] | None
    topic_pattern: str | None
    security: SecuritySpec
    client_properties: Mapping[str, str]
    admin_security: SecuritySpec | None = None
    """The operator's own connection (`spec.kafka.adminSecurity`), when it is not the members':
    then the members' principal needs rights on its group and topics only."""

    @property
    def operator_security(self) -> SecuritySpec:
        """How the operator's admin client connects: adminSecurity, else the members' own."""
        return self.admin_security or self.security

    @property
    def operator_security_path(self) -> str:
        return "spec.kafka.adminSecurity" if self.admin_security else "spec.kafka.security"


@dataclass(frozen=True)
class TemplateSpec:
    """The member pod template. Complex Kubernetes types stay plain dicts, passed through."""

    image: str
    image_pull_policy: str | None = None
    command: tuple[str, ...] = DEFAULT_COMMAND
    args: tuple[str, ...] = ()
    env: tuple[Mapping[str, Any], ...] = ()
    env_from: tuple[Mapping[str, Any], ...] = ()
    resources: Mapping[str, Any] | None = None
    node_selector: Mapping[str, str] | None = None
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] | None = None
    service_account_name: str | None = None
    termination_grace_period_seconds: int = 30
    pod_labels: Mapping[str, str] | None = None
    pod_annotations: Mapping[str, str] | None = None
    security_context: Mapping[str, Any] | None = None
    """The user's pod securityContext, merged over `podsecurity.DEFAULT_POD` by the builder."""
    container_security_context: Mapping[str, Any] | None = None
    """The user's member container securityContext, merged over
    `podsecurity.DEFAULT_CONTAINER` by the builder."""


@dataclass(frozen=True)
class TimeoutsSpec:
    """Explicit timeouts from the spec; None means automatic."""

    session_timeout_ms: int | None = None
    heartbeat_interval_ms: int | None = None
    max_poll_interval_ms: int | None = None


@dataclass(frozen=True)
class AutoTuningSpec:
    enabled: bool = True
    restart_margin_percent: int = 150
    max_session_timeout_ms: int | None = None
    """Cap of the automatic session timeout; None: 120 000 ms for classic groups, the broker's
    maximum for KIP-848 groups (`timeouts.DEFAULT_CLASSIC_SESSION_CAP_MS`)."""


@dataclass(frozen=True)
class MembershipSpec:
    protocol: Protocol = "classic"
    assignment_strategy: str | None = "range"  # None with protocol consumer
    timeouts: TimeoutsSpec = TimeoutsSpec()
    auto_tuning: AutoTuningSpec = AutoTuningSpec()


@dataclass(frozen=True)
class SparkSpec:
    mode: str = "local"
    connect_url: str | None = None
    master: str = "local[2]"
    conf: Mapping[str, str] | None = None


@dataclass(frozen=True)
class BatchSpec:
    max_records: int = 10000
    max_wait_ms: int = 1000
    max_bytes: int = 67108864


@dataclass(frozen=True)
class SinkSpec:
    type: str = "null"
    topic: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class RetrySpec:
    attempts: int = 3
    backoff_ms: int = 500
    max_backoff_ms: int = 10000


@dataclass(frozen=True)
class ProcessingSpec:
    transform: str = DEFAULT_TRANSFORM
    spark: SparkSpec = SparkSpec()
    batch: BatchSpec = BatchSpec()
    sink: SinkSpec = SinkSpec()
    dead_letter_topic: str | None = None
    auto_offset_reset: str = "earliest"
    retry: RetrySpec = RetrySpec()


@dataclass(frozen=True)
class RolloutSpec:
    max_unavailable: int = 1
    restart_nonce: str | None = None
    paused: bool = False
    strategy: RolloutStrategy = "WarmHandoff"
    """WarmHandoff: the replacement starts in standby beside the old member and joins once the
    old one closed. Recreate: stop the old member, then start the replacement."""
    max_surge: int = 1
    """WarmHandoff: most replacement pods running beside their old members at once."""
    standby_timeout_s: int = 600
    """WarmHandoff: how long a replacement may take to be standby-ready before the rollout
    stops (the old member keeps running)."""
    progress_deadline_s: int = 600
    """How long a restarted member may take to process real records on the new revision (a
    committed batch, or nothing waiting on its partitions) before the rollout fails."""
    on_failure: str = "Rollback"
    """What a failed member gets: Rollback (handed back to the last revision that processed,
    by warm handoff) or Halt (left as it is; the other members keep their revision)."""
    fallback: str = "Recreate"
    """WarmHandoff: what a member whose standby cannot be created or started gets: Recreate
    (a cold restart inside the session timeout) or Stop (the rollout stops)."""


@dataclass(frozen=True)
class RecoverySpec:
    """`spec.recovery`: what the operator does about a member that stopped making progress."""

    restart_stalled_members: bool = True


@dataclass(frozen=True)
class ConsumerGroupSpec:
    """A ConsumerGroup: identity (name, namespace, generation) plus its parsed spec."""

    name: str
    namespace: str
    generation: int
    kafka: KafkaSpec
    template: TemplateSpec
    replicas: int = 1
    membership: MembershipSpec = MembershipSpec()
    processing: ProcessingSpec = ProcessingSpec()
    rollout: RolloutSpec = RolloutSpec()
    recovery: RecoverySpec = RecoverySpec()
    restarted_at: str | None = None
    """Value of the `staticfleet.io/restartedAt` annotation: changing it restarts every member."""
    dynamic_membership_for_testing: bool = False
    """Test-only: members run without group.instance.id (to show the rebalances static avoids)."""
    handoff_without_drain_for_testing: bool = False
    """Test-only: warm handoffs stop the old member instead of draining it (`Switchover`)."""

    @property
    def group_id(self) -> str:
        return self.kafka.group_id

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ConsumerGroupSpec:
        """Parse a ConsumerGroup body. Raises `SpecError` naming the first offending field."""
        meta = _obj(body.get("metadata"), "metadata")
        name = _req_str(meta, "name", "metadata")
        if len(name) > MAX_NAME_LENGTH or not _DNS_LABEL_RE.match(name):
            raise SpecError(
                "metadata.name",
                f"must be a DNS label of at most {MAX_NAME_LENGTH} characters "
                "(member pods are named <name>-<ordinal>)",
            )
        annotations = _obj(meta.get("annotations"), "metadata.annotations")
        spec = _obj(body.get("spec"), "spec")
        replicas = _int(spec, "replicas", "spec", default=1, minimum=0)
        return cls(
            name=name,
            namespace=str(meta.get("namespace") or "default"),
            generation=int(meta.get("generation") or 0),
            kafka=_parse_kafka(_obj(spec.get("kafka"), "spec.kafka", required=True), name),
            template=_parse_template(_obj(spec.get("template"), "spec.template", required=True)),
            replicas=replicas,
            membership=_parse_membership(_obj(spec.get("membership"), "spec.membership")),
            processing=_parse_processing(_obj(spec.get("processing"), "spec.processing")),
            rollout=_parse_rollout(_obj(spec.get("rollout"), "spec.rollout")),
            recovery=_parse_recovery(_obj(spec.get("recovery"), "spec.recovery")),
            restarted_at=_opt_str(annotations, RESTARTED_AT_ANNOTATION, "metadata.annotations"),
            dynamic_membership_for_testing=(
                str(annotations.get(DYNAMIC_MEMBERSHIP_ANNOTATION, "")).lower() == "true"
            ),
            handoff_without_drain_for_testing=(
                str(annotations.get(STOP_HANDOFF_ANNOTATION, "")).lower() == "true"
            ),
        )


# --- parsing helpers -----------------------------------------------------------------------------


def _obj(value: Any, path: str, *, required: bool = False) -> Mapping[str, Any]:
    if value is None:
        if required:
            raise SpecError(path, "is required")
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(path, "must be an object")
    return value


def _opt_str(obj: Mapping[str, Any], key: str, path: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise SpecError(f"{path}.{key}", "must be a string")
    return value


def _req_str(obj: Mapping[str, Any], key: str, path: str) -> str:
    value = _opt_str(obj, key, path)
    if not value:
        raise SpecError(f"{path}.{key}", "is required")
    return value


def _int(
    obj: Mapping[str, Any],
    key: str,
    path: str,
    *,
    default: int,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    value = _opt_int(obj, key, path, minimum=minimum, maximum=maximum)
    return default if value is None else value


def _opt_int(
    obj: Mapping[str, Any],
    key: str,
    path: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{path}.{key}", "must be an integer")
    if minimum is not None and value < minimum:
        raise SpecError(f"{path}.{key}", f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise SpecError(f"{path}.{key}", f"must be at most {maximum}, got {value}")
    return value


def _str_list(obj: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    value = obj.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{path}.{key}", "must be a list of strings")
    return tuple(value)


def _obj_list(obj: Mapping[str, Any], key: str, path: str) -> tuple[Mapping[str, Any], ...]:
    value = obj.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise SpecError(f"{path}.{key}", "must be a list of objects")
    return tuple(value)


def _str_map(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, str] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise SpecError(f"{path}.{key}", "must be a map of strings to strings")
    return dict(value)


def _secret_ref(obj: Mapping[str, Any], key: str, path: str) -> SecretKeyRef | None:
    raw = obj.get(key)
    if raw is None:
        return None
    ref = _obj(raw, f"{path}.{key}")
    return SecretKeyRef(
        name=_req_str(ref, "name", f"{path}.{key}"), key=_req_str(ref, "key", f"{path}.{key}")
    )


def _req_secret_ref(obj: Mapping[str, Any], key: str, path: str) -> SecretKeyRef:
    ref = _secret_ref(obj, key, path)
    if ref is None:
        raise SpecError(f"{path}.{key}", "is required")
    return ref


def _parse_kafka(kafka: Mapping[str, Any], name: str) -> KafkaSpec:
    path = "spec.kafka"
    bootstrap = _req_str(kafka, "bootstrapServers", path)
    topics = kafka.get("topics")
    pattern = _opt_str(kafka, "topicPattern", path)
    if (topics is None) == (pattern is None):
        raise SpecError(path, "set exactly one of topics or topicPattern")
    parsed_topics: tuple[str, ...] | None = None
    if topics is not None:
        parsed_topics = _str_list(kafka, "topics", path)
        if not parsed_topics:
            raise SpecError(f"{path}.topics", "must name at least one topic")
        for i, topic in enumerate(parsed_topics):
            if not _TOPIC_RE.match(topic):
                raise SpecError(f"{path}.topics[{i}]", f"{topic!r} is not a valid topic name")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SpecError(f"{path}.topicPattern", f"is not a valid regex: {exc}") from None
    group_id = _opt_str(kafka, "groupId", path) or name
    if not _GROUP_ID_RE.match(group_id):
        raise SpecError(f"{path}.groupId", f"{group_id!r} must match {_GROUP_ID_RE.pattern}")
    client = _str_map(kafka, "clientProperties", path) or {}
    for key in sorted(client):
        instead = OWNED_CLIENT_PROPERTIES.get(key) or next(
            (v for p, v in OWNED_CLIENT_PREFIXES.items() if key.startswith(p)), None
        )
        if instead is not None:
            raise SpecError(
                f"{path}.clientProperties[{key}]", f"is set by the operator; use {instead}"
            )
        if key.startswith("ssl.") and key not in SSL_TUNING_PROPERTIES:
            raise SpecError(f"{path}.clientProperties[{key}]", SSL_REFUSAL)
    return KafkaSpec(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        topics=parsed_topics,
        topic_pattern=pattern,
        security=_parse_security(_obj(kafka.get("security"), f"{path}.security"),
                                 f"{path}.security"),
        client_properties=client,
        admin_security=(None if kafka.get("adminSecurity") is None else _parse_security(
            _obj(kafka["adminSecurity"], f"{path}.adminSecurity"), f"{path}.adminSecurity")),
    )


def _parse_security(sec: Mapping[str, Any], path: str) -> SecuritySpec:
    protocol = _opt_str(sec, "protocol", path) or "PLAINTEXT"
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise SpecError(f"{path}.protocol", f"unknown protocol {protocol!r}")
    sasl: SaslSpec | None = None
    raw_sasl = sec.get("sasl")
    if protocol.startswith("SASL_") and raw_sasl is None:
        raise SpecError(f"{path}.sasl", f"is required with protocol {protocol}")
    if raw_sasl is not None:
        if not protocol.startswith("SASL_"):
            raise SpecError(f"{path}.sasl", f"is only used with SASL_* protocols, not {protocol}")
        sasl = _parse_sasl(_obj(raw_sasl, f"{path}.sasl"), f"{path}.sasl")
    tls: TlsSpec | None = None
    if sec.get("tls") is not None:
        t = _obj(sec["tls"], f"{path}.tls")
        tls = TlsSpec(
            ca=_secret_ref(t, "caSecretRef", f"{path}.tls"),
            cert=_secret_ref(t, "certSecretRef", f"{path}.tls"),
            key=_secret_ref(t, "keySecretRef", f"{path}.tls"),
        )
        if (tls.cert is None) != (tls.key is None):
            raise SpecError(f"{path}.tls", "certSecretRef and keySecretRef must be set together")
    return SecuritySpec(protocol=protocol, sasl=sasl, tls=tls)  # type: ignore[arg-type]


def _parse_sasl(s: Mapping[str, Any], path: str) -> SaslSpec:
    mechanism = _req_str(s, "mechanism", path)
    if mechanism not in SASL_MECHANISMS:
        raise SpecError(f"{path}.mechanism", f"unknown mechanism {mechanism!r} (one of "
                                             f"{', '.join(SASL_MECHANISMS)})")
    if mechanism != "OAUTHBEARER":
        if s.get("oauthbearer") is not None:
            raise SpecError(f"{path}.oauthbearer", "is only used with mechanism OAUTHBEARER")
        return SaslSpec(mechanism=mechanism,
                        username=_req_secret_ref(s, "usernameSecretRef", path),
                        password=_req_secret_ref(s, "passwordSecretRef", path))
    for key in ("usernameSecretRef", "passwordSecretRef"):
        if s.get(key) is not None:
            raise SpecError(f"{path}.{key}", "is not used with mechanism OAUTHBEARER (the "
                                             "client id and secret are in sasl.oauthbearer)")
    ob_path = f"{path}.oauthbearer"
    ob = _obj(s.get("oauthbearer"), ob_path, required=True)
    url = _req_str(ob, "tokenEndpointUrl", ob_path)
    if not url.startswith(("https://", "http://")):
        raise SpecError(f"{ob_path}.tokenEndpointUrl", f"must be an https:// (or http://) URL, "
                                                       f"got {url!r}")
    extensions = _str_map(ob, "extensions", ob_path)
    for key, value in (extensions or {}).items():
        if not key or any(ch in key + value for ch in ",="):
            raise SpecError(f"{ob_path}.extensions[{key}]",
                            "keys must be non-empty and keys and values may not contain , or =")
    return SaslSpec(mechanism=mechanism, oauthbearer=OAuthBearerSpec(
        token_endpoint_url=url,
        client_id=_req_secret_ref(ob, "clientIdSecretRef", ob_path),
        client_secret=_req_secret_ref(ob, "clientSecretSecretRef", ob_path),
        scope=_opt_str(ob, "scope", ob_path) or None,
        extensions=extensions or None,
    ))


def _parse_template(tpl: Mapping[str, Any]) -> TemplateSpec:
    path = "spec.template"
    env = _obj_list(tpl, "env", path)
    for i, var in enumerate(env):
        var_name = var.get("name")
        if not isinstance(var_name, str) or not var_name:
            raise SpecError(f"{path}.env[{i}].name", "is required")
        if var_name.startswith(RESERVED_ENV_PREFIX) or var_name in RESERVED_ENV_NAMES:
            raise SpecError(
                f"{path}.env[{i}]", f"{var_name} is set by the operator and cannot be overridden"
            )
    labels = _str_map(tpl, "podLabels", path)
    for key in sorted(labels or {}):
        if key in RESERVED_LABELS or key.startswith(RESERVED_PREFIX):
            raise SpecError(f"{path}.podLabels[{key}]", "is reserved for the operator's selector")
    annotations = _str_map(tpl, "podAnnotations", path)
    for key in sorted(annotations or {}):
        if key.startswith(RESERVED_PREFIX):
            raise SpecError(f"{path}.podAnnotations[{key}]", "staticfleet.io/* keys are reserved")
    policy = _opt_str(tpl, "imagePullPolicy", path)
    if policy is not None and policy not in ("Always", "IfNotPresent", "Never"):
        raise SpecError(f"{path}.imagePullPolicy", f"unknown policy {policy!r}")
    resources = tpl.get("resources")
    affinity = tpl.get("affinity")
    try:
        security, container_security = podsecurity.parse(
            tpl.get("securityContext"), tpl.get("containerSecurityContext"), path)
    except podsecurity.SecurityContextError as exc:
        raise SpecError(exc.field_path, exc.message) from None
    return TemplateSpec(
        image=_req_str(tpl, "image", path),
        image_pull_policy=policy,
        command=_str_list(tpl, "command", path) or DEFAULT_COMMAND,
        args=_str_list(tpl, "args", path),
        env=env,
        env_from=_obj_list(tpl, "envFrom", path),
        resources=_obj(resources, f"{path}.resources") if resources is not None else None,
        node_selector=_str_map(tpl, "nodeSelector", path),
        tolerations=_obj_list(tpl, "tolerations", path),
        affinity=_obj(affinity, f"{path}.affinity") if affinity is not None else None,
        service_account_name=_opt_str(tpl, "serviceAccountName", path),
        termination_grace_period_seconds=_int(
            tpl, "terminationGracePeriodSeconds", path, default=30, minimum=0
        ),
        pod_labels=labels,
        pod_annotations=annotations,
        security_context=security,
        container_security_context=container_security,
    )


def _parse_membership(mem: Mapping[str, Any]) -> MembershipSpec:
    path = "spec.membership"
    protocol = _opt_str(mem, "protocol", path) or "classic"
    if protocol not in ("classic", "consumer"):
        raise SpecError(f"{path}.protocol", f"must be classic or consumer, got {protocol!r}")
    strategy = _opt_str(mem, "assignmentStrategy", path)
    if protocol == "consumer" and strategy is not None:
        raise SpecError(
            f"{path}.assignmentStrategy",
            "applies to protocol classic only; with protocol consumer the broker assigns",
        )
    if strategy is not None and strategy not in ("range", "roundrobin", "cooperative-sticky"):
        raise SpecError(f"{path}.assignmentStrategy", f"unknown strategy {strategy!r}")
    t = _obj(mem.get("timeouts"), f"{path}.timeouts")
    tp = f"{path}.timeouts"
    timeouts = TimeoutsSpec(
        session_timeout_ms=_opt_int(t, "sessionTimeoutMs", tp, minimum=1, maximum=3600000),
        heartbeat_interval_ms=_opt_int(t, "heartbeatIntervalMs", tp, minimum=1, maximum=3600000),
        max_poll_interval_ms=_opt_int(t, "maxPollIntervalMs", tp, minimum=1, maximum=86400000),
    )
    # The CRD's CEL rules, repeated for bodies that did not pass the API server.
    if timeouts.session_timeout_ms is not None:
        hb, mp = timeouts.heartbeat_interval_ms, timeouts.max_poll_interval_ms
        if hb is not None and hb * 3 > timeouts.session_timeout_ms:
            raise SpecError(
                f"{tp}.heartbeatIntervalMs", "must be at most a third of sessionTimeoutMs"
            )
        if mp is not None and mp < timeouts.session_timeout_ms:
            raise SpecError(f"{tp}.maxPollIntervalMs", "must be at least sessionTimeoutMs")
    a = _obj(mem.get("autoTuning"), f"{path}.autoTuning")
    enabled = a.get("enabled", True)
    if not isinstance(enabled, bool):
        raise SpecError(f"{path}.autoTuning.enabled", "must be a boolean")
    auto = AutoTuningSpec(
        enabled=enabled,
        restart_margin_percent=_int(
            a, "restartMarginPercent", f"{path}.autoTuning", default=150, minimum=100, maximum=1000
        ),
        max_session_timeout_ms=_opt_int(
            a, "maxSessionTimeoutMs", f"{path}.autoTuning", minimum=1, maximum=3600000),
    )
    return MembershipSpec(
        protocol=protocol,  # type: ignore[arg-type]
        assignment_strategy=(strategy or "range") if protocol == "classic" else None,
        timeouts=timeouts,
        auto_tuning=auto,
    )


def _parse_processing(proc: Mapping[str, Any]) -> ProcessingSpec:
    path = "spec.processing"
    transform = _opt_str(proc, "transform", path) or DEFAULT_TRANSFORM
    if not _TRANSFORM_RE.match(transform):
        raise SpecError(f"{path}.transform", f"{transform!r} must look like module.path:function")
    s = _obj(proc.get("spark"), f"{path}.spark")
    mode = _opt_str(s, "mode", f"{path}.spark") or "local"
    connect_url = _opt_str(s, "connectUrl", f"{path}.spark")
    if mode not in ("local", "connect"):
        raise SpecError(f"{path}.spark.mode", f"must be local or connect, got {mode!r}")
    if mode == "connect" and not connect_url:
        raise SpecError(f"{path}.spark.connectUrl", "is required with mode connect")
    if mode == "local" and connect_url is not None:
        raise SpecError(f"{path}.spark.connectUrl", "is only used with mode connect")
    if connect_url is not None and not connect_url.startswith("sc://"):
        raise SpecError(f"{path}.spark.connectUrl", "must start with sc://")
    spark = SparkSpec(
        mode=mode,
        connect_url=connect_url,
        master=_opt_str(s, "master", f"{path}.spark") or "local[2]",
        conf=_str_map(s, "conf", f"{path}.spark"),
    )
    b = _obj(proc.get("batch"), f"{path}.batch")
    bp = f"{path}.batch"
    batch = BatchSpec(
        max_records=_int(b, "maxRecords", bp, default=10000, minimum=1, maximum=1000000),
        max_wait_ms=_int(b, "maxWaitMs", bp, default=1000, minimum=1, maximum=600000),
        max_bytes=_int(b, "maxBytes", bp, default=67108864, minimum=1),
    )
    k = _obj(proc.get("sink"), f"{path}.sink")
    sink = SinkSpec(
        type=_opt_str(k, "type", f"{path}.sink") or "null",
        topic=_opt_str(k, "topic", f"{path}.sink"),
        path=_opt_str(k, "path", f"{path}.sink"),
    )
    if sink.type not in ("kafka", "parquet", "null"):
        raise SpecError(f"{path}.sink.type", f"must be kafka, parquet or null, got {sink.type!r}")
    if (sink.type == "kafka") != (sink.topic is not None):
        raise SpecError(f"{path}.sink.topic", "is required with type kafka and only then")
    if (sink.type == "parquet") != (sink.path is not None):
        raise SpecError(f"{path}.sink.path", "is required with type parquet and only then")
    r = _obj(proc.get("retry"), f"{path}.retry")
    rp = f"{path}.retry"
    retry = RetrySpec(
        attempts=_int(r, "attempts", rp, default=3, minimum=0, maximum=100),
        backoff_ms=_int(r, "backoffMs", rp, default=500, minimum=0),
        max_backoff_ms=_int(r, "maxBackoffMs", rp, default=10000, minimum=0),
    )
    if retry.max_backoff_ms < retry.backoff_ms:
        raise SpecError(f"{rp}.maxBackoffMs", "must be at least backoffMs")
    reset = _opt_str(proc, "autoOffsetReset", path) or "earliest"
    if reset not in ("earliest", "latest"):
        raise SpecError(f"{path}.autoOffsetReset", f"must be earliest or latest, got {reset!r}")
    return ProcessingSpec(
        transform=transform,
        spark=spark,
        batch=batch,
        sink=sink,
        dead_letter_topic=_opt_str(proc, "deadLetterTopic", path),
        auto_offset_reset=reset,
        retry=retry,
    )


def _parse_recovery(rec: Mapping[str, Any]) -> RecoverySpec:
    restart = rec.get("restartStalledMembers", True)
    if not isinstance(restart, bool):
        raise SpecError("spec.recovery.restartStalledMembers", "must be a boolean")
    return RecoverySpec(restart_stalled_members=restart)


def _parse_rollout(ro: Mapping[str, Any]) -> RolloutSpec:
    path = "spec.rollout"
    paused = ro.get("paused", False)
    if not isinstance(paused, bool):
        raise SpecError(f"{path}.paused", "must be a boolean")
    strategy = ro.get("strategy", "WarmHandoff")
    if strategy not in STRATEGIES:
        raise SpecError(f"{path}.strategy",
                        f"must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    return RolloutSpec(
        max_unavailable=_int(ro, "maxUnavailable", path, default=1, minimum=1),
        restart_nonce=_opt_str(ro, "restartNonce", path),
        paused=paused,
        strategy=strategy,
        max_surge=_int(ro, "maxSurge", path, default=1, minimum=1),
        standby_timeout_s=_int(ro, "standbyTimeoutSeconds", path, default=600, minimum=10),
        progress_deadline_s=_int(ro, "progressDeadlineSeconds", path, default=600, minimum=10),
        on_failure=_choice(ro, "onFailure", path, ON_FAILURE),
        fallback=_choice(ro, "fallback", path, FALLBACKS),
    )


def _choice(obj: Mapping[str, Any], key: str, path: str, choices: tuple[str, ...]) -> str:
    """`obj[key]`, one of `choices` (the first is the default)."""
    value = obj.get(key, choices[0])
    if value not in choices:
        raise SpecError(f"{path}.{key}", f"must be one of {', '.join(choices)}, got {value!r}")
    return str(value)
