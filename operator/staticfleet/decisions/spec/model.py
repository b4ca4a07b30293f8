"""The ConsumerGroup spec as typed, frozen dataclasses, and its parsing.

`ConsumerGroupSpec.from_body(body)` turns the resource body (a dict, as kopf hands it over) into
the model. Defaults match the CRD (`crds/consumergroups.staticfleet.io.yaml`), so a body that did
not pass through the API server's defaulting parses to the same model. Problems the schema cannot
catch (or that a body bypassing the API server could carry) raise `SpecError` with the field path.

Here: the group's identity and annotations, and the sections template, membership, processing,
rollout and recovery. `spec.kafka` is in `kafka`; the typed field readers, and `SpecError`,
in `fields`; the bounds of every field (the CRD's maxLength, maxItems, maxProperties and
maximum, checked first), in `bounds`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from staticfleet.decisions.spec import bounds, kafka, podsecurity
from staticfleet.decisions.spec.autoscaling import AutoscalingSpec, parse_autoscaling
from staticfleet.decisions.spec.fields import (
    SpecError,
    as_obj,
    choice,
    int_or,
    obj_list,
    opt_int,
    opt_str,
    req_str,
    str_list,
    str_map,
)
from staticfleet.decisions.spec.kafka import KafkaSpec

API_GROUP = "staticfleet.io"
API_VERSION = "v1alpha1"
KIND = "ConsumerGroup"
PLURAL = "consumergroups"
"""The ConsumerGroup's API coordinates, the CRD's, spelled here only (a unit test,
test_prose.py, holds them to the CRD and finds any other spelling): the handlers watch them,
the apply layer writes to them, the test kit makes and waits for ConsumerGroups by them."""

# Annotations on the ConsumerGroup itself.
RESTARTED_AT_ANNOTATION = "staticfleet.io/restartedAt"
DYNAMIC_MEMBERSHIP_ANNOTATION = "staticfleet.io/dynamic-membership-for-testing"
STOP_HANDOFF_ANNOTATION = "staticfleet.io/handoff-without-drain-for-testing"
"""Test-only: a warm handoff stops the old member and activates the standby once the old process
exited, as before drains (bench/rollout.py's `warm-stop`, measured beside the drain)."""
TESTING_ANNOTATIONS = (DYNAMIC_MEMBERSHIP_ANNOTATION, STOP_HANDOFF_ANNOTATION)
"""Honoured only by an operator started with `settings.ALLOW_TESTING_ANNOTATIONS_ENV`."""

DEFAULT_COMMAND: tuple[str, ...] = ("python", "-m", "consumer_runtime")
DEFAULT_TRANSFORM = "consumer_runtime.transforms:identity"
MAX_NAME_LENGTH = 50

Protocol = Literal["classic", "consumer"]
RolloutStrategy = Literal["WarmHandoff", "Recreate"]
STRATEGIES: tuple[RolloutStrategy, ...] = ("WarmHandoff", "Recreate")
ON_FAILURE = ("Rollback", "Halt")
FALLBACKS = ("Recreate", "Stop")
WIDEN_CLASSIC_MESSAGE = (
    "applies to membership.protocol consumer (KIP-848) only: a classic member sends its session "
    "timeout in its JoinGroup, so the operator cannot raise it for a rollout without restarting "
    "every member; leave it out, or set it to false")

_TRANSFORM_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$", re.ASCII)
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

RESERVED_ENV_PREFIX = "STATICFLEET_"
RESERVED_ENV_NAMES = frozenset({"POD_NAME", "POD_NAMESPACE"})
RESERVED_LABELS = frozenset(
    {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by"}
)
RESERVED_PREFIX = "staticfleet.io/"


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
    automount_service_account_token: bool = False
    """Mount the pod's ServiceAccount token: only when the spec asks (the runtime never calls
    the Kubernetes API)."""
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
    maximum for KIP-848 groups (`timeouts.rules.DEFAULT_CLASSIC_SESSION_CAP_MS`)."""


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
    widen_session_timeout: bool = False
    """KIP-848 groups: raise the group's session timeout (a broker-side group config) for the
    rollout's stops, and set the tuned value back once it ends (`timeouts.widening`). Absent in
    the spec: on with protocol consumer; refused with protocol classic."""


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
    autoscaling: AutoscalingSpec | None = None
    """`spec.autoscaling`; None: off (replicas are what spec.replicas says)."""
    restarted_at: str | None = None
    """Value of the `staticfleet.io/restartedAt` annotation: changing it restarts every member."""
    dynamic_membership_for_testing: bool = False
    """Test-only: members run without group.instance.id (to show the rebalances static avoids)."""
    handoff_without_drain_for_testing: bool = False
    """Test-only: warm handoffs stop the old member instead of draining it (`Switchover`)."""
    ignored_testing_annotations: tuple[str, ...] = ()
    """Test-only annotations the ConsumerGroup sets to "true" that this operator does not
    honour (it was not started to allow them)."""

    @property
    def group_id(self) -> str:
        return self.kafka.group_id

    @classmethod
    def from_body(cls, body: Mapping[str, Any], *,
                  allow_testing: bool = False) -> ConsumerGroupSpec:
        """Parse a ConsumerGroup body. Raises `SpecError` naming the first offending field.
        `allow_testing`: honour the test-only annotations (`TESTING_ANNOTATIONS`); without it
        they are listed in `ignored_testing_annotations` and change nothing."""
        meta = as_obj(body.get("metadata"), "metadata")
        name = req_str(meta, "name", "metadata")
        if len(name) > MAX_NAME_LENGTH or not _DNS_LABEL_RE.match(name):
            raise SpecError(
                "metadata.name",
                f"must be a DNS label of at most {MAX_NAME_LENGTH} characters "
                "(member pods are named <name>-<ordinal>)",
            )
        annotations = as_obj(meta.get("annotations"), "metadata.annotations")
        spec = as_obj(body.get("spec"), "spec")
        bounds.check(spec)
        replicas = int_or(spec, "replicas", "spec", default=1, minimum=0)
        testing = {key for key in TESTING_ANNOTATIONS
                   if str(annotations.get(key, "")).lower() == "true"}
        membership = _parse_membership(as_obj(spec.get("membership"), "spec.membership"))
        honoured = testing if allow_testing else set()
        return cls(
            name=name,
            namespace=str(meta.get("namespace") or "default"),
            generation=int(meta.get("generation") or 0),
            kafka=kafka.parse(as_obj(spec.get("kafka"), "spec.kafka", required=True), name),
            template=_parse_template(as_obj(spec.get("template"), "spec.template", required=True)),
            replicas=replicas,
            membership=membership,
            processing=_parse_processing(as_obj(spec.get("processing"), "spec.processing")),
            rollout=_parse_rollout(as_obj(spec.get("rollout"), "spec.rollout"), membership),
            recovery=_parse_recovery(as_obj(spec.get("recovery"), "spec.recovery")),
            autoscaling=parse_autoscaling(spec.get("autoscaling")),
            restarted_at=opt_str(annotations, RESTARTED_AT_ANNOTATION, "metadata.annotations"),
            dynamic_membership_for_testing=DYNAMIC_MEMBERSHIP_ANNOTATION in honoured,
            handoff_without_drain_for_testing=STOP_HANDOFF_ANNOTATION in honoured,
            ignored_testing_annotations=tuple(k for k in TESTING_ANNOTATIONS
                                              if k in testing - honoured),
        )


# --- parsing the sections -----------------------------------------------------------------------


def _parse_template(tpl: Mapping[str, Any]) -> TemplateSpec:
    path = "spec.template"
    env = obj_list(tpl, "env", path)
    for i, var in enumerate(env):
        var_name = var.get("name")
        if not isinstance(var_name, str) or not var_name:
            raise SpecError(f"{path}.env[{i}].name", "is required")
        if var_name.startswith(RESERVED_ENV_PREFIX) or var_name in RESERVED_ENV_NAMES:
            raise SpecError(
                f"{path}.env[{i}]", f"{var_name} is set by the operator and cannot be overridden"
            )
    labels = str_map(tpl, "podLabels", path)
    for key in sorted(labels or {}):
        if key in RESERVED_LABELS or key.startswith(RESERVED_PREFIX):
            raise SpecError(f"{path}.podLabels[{key}]", "is reserved for the operator's selector")
    annotations = str_map(tpl, "podAnnotations", path)
    for key in sorted(annotations or {}):
        if key.startswith(RESERVED_PREFIX):
            raise SpecError(f"{path}.podAnnotations[{key}]", "staticfleet.io/* keys are reserved")
    policy = opt_str(tpl, "imagePullPolicy", path)
    if policy is not None and policy not in ("Always", "IfNotPresent", "Never"):
        raise SpecError(f"{path}.imagePullPolicy", f"unknown policy {policy!r}")
    resources = tpl.get("resources")
    affinity = tpl.get("affinity")
    automount = tpl.get("automountServiceAccountToken", False)
    if not isinstance(automount, bool):
        raise SpecError(f"{path}.automountServiceAccountToken", "must be a boolean")
    try:
        security, container_security = podsecurity.parse(
            tpl.get("securityContext"), tpl.get("containerSecurityContext"), path)
    except podsecurity.SecurityContextError as exc:
        raise SpecError(exc.field_path, exc.message) from None
    return TemplateSpec(
        image=req_str(tpl, "image", path),
        image_pull_policy=policy,
        command=str_list(tpl, "command", path) or DEFAULT_COMMAND,
        args=str_list(tpl, "args", path),
        env=env,
        env_from=obj_list(tpl, "envFrom", path),
        resources=as_obj(resources, f"{path}.resources") if resources is not None else None,
        node_selector=str_map(tpl, "nodeSelector", path),
        tolerations=obj_list(tpl, "tolerations", path),
        affinity=as_obj(affinity, f"{path}.affinity") if affinity is not None else None,
        service_account_name=opt_str(tpl, "serviceAccountName", path),
        automount_service_account_token=automount,
        termination_grace_period_seconds=int_or(
            tpl, "terminationGracePeriodSeconds", path, default=30, minimum=0
        ),
        pod_labels=labels,
        pod_annotations=annotations,
        security_context=security,
        container_security_context=container_security,
    )


def _parse_membership(mem: Mapping[str, Any]) -> MembershipSpec:
    path = "spec.membership"
    protocol = opt_str(mem, "protocol", path) or "classic"
    if protocol not in ("classic", "consumer"):
        raise SpecError(f"{path}.protocol", f"must be classic or consumer, got {protocol!r}")
    strategy = opt_str(mem, "assignmentStrategy", path)
    if protocol == "consumer" and strategy is not None:
        raise SpecError(
            f"{path}.assignmentStrategy",
            "applies to protocol classic only; with protocol consumer the broker assigns",
        )
    if strategy is not None and strategy not in ("range", "roundrobin", "cooperative-sticky"):
        raise SpecError(f"{path}.assignmentStrategy", f"unknown strategy {strategy!r}")
    t = as_obj(mem.get("timeouts"), f"{path}.timeouts")
    tp = f"{path}.timeouts"
    timeouts = TimeoutsSpec(
        session_timeout_ms=opt_int(t, "sessionTimeoutMs", tp, minimum=1, maximum=3600000),
        heartbeat_interval_ms=opt_int(t, "heartbeatIntervalMs", tp, minimum=1, maximum=3600000),
        max_poll_interval_ms=opt_int(t, "maxPollIntervalMs", tp, minimum=1, maximum=86400000),
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
    a = as_obj(mem.get("autoTuning"), f"{path}.autoTuning")
    enabled = a.get("enabled", True)
    if not isinstance(enabled, bool):
        raise SpecError(f"{path}.autoTuning.enabled", "must be a boolean")
    auto = AutoTuningSpec(
        enabled=enabled,
        restart_margin_percent=int_or(
            a, "restartMarginPercent", f"{path}.autoTuning", default=150, minimum=100, maximum=1000
        ),
        max_session_timeout_ms=opt_int(
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
    transform = opt_str(proc, "transform", path) or DEFAULT_TRANSFORM
    if not _TRANSFORM_RE.match(transform):
        raise SpecError(f"{path}.transform", f"{transform!r} must look like module.path:function")
    s = as_obj(proc.get("spark"), f"{path}.spark")
    mode = opt_str(s, "mode", f"{path}.spark") or "local"
    connect_url = opt_str(s, "connectUrl", f"{path}.spark")
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
        master=opt_str(s, "master", f"{path}.spark") or "local[2]",
        conf=str_map(s, "conf", f"{path}.spark"),
    )
    b = as_obj(proc.get("batch"), f"{path}.batch")
    bp = f"{path}.batch"
    batch = BatchSpec(
        max_records=int_or(b, "maxRecords", bp, default=10000, minimum=1, maximum=1000000),
        max_wait_ms=int_or(b, "maxWaitMs", bp, default=1000, minimum=1, maximum=600000),
        max_bytes=int_or(b, "maxBytes", bp, default=67108864, minimum=1),
    )
    k = as_obj(proc.get("sink"), f"{path}.sink")
    sink = SinkSpec(
        type=opt_str(k, "type", f"{path}.sink") or "null",
        topic=opt_str(k, "topic", f"{path}.sink"),
        path=opt_str(k, "path", f"{path}.sink"),
    )
    if sink.type not in ("kafka", "parquet", "null"):
        raise SpecError(f"{path}.sink.type", f"must be kafka, parquet or null, got {sink.type!r}")
    if (sink.type == "kafka") != (sink.topic is not None):
        raise SpecError(f"{path}.sink.topic", "is required with type kafka and only then")
    if (sink.type == "parquet") != (sink.path is not None):
        raise SpecError(f"{path}.sink.path", "is required with type parquet and only then")
    r = as_obj(proc.get("retry"), f"{path}.retry")
    rp = f"{path}.retry"
    retry = RetrySpec(
        attempts=int_or(r, "attempts", rp, default=3, minimum=0, maximum=100),
        backoff_ms=int_or(r, "backoffMs", rp, default=500, minimum=0),
        max_backoff_ms=int_or(r, "maxBackoffMs", rp, default=10000, minimum=0),
    )
    if retry.max_backoff_ms < retry.backoff_ms:
        raise SpecError(f"{rp}.maxBackoffMs", "must be at least backoffMs")
    reset = opt_str(proc, "autoOffsetReset", path) or "earliest"
    if reset not in ("earliest", "latest"):
        raise SpecError(f"{path}.autoOffsetReset", f"must be earliest or latest, got {reset!r}")
    return ProcessingSpec(
        transform=transform,
        spark=spark,
        batch=batch,
        sink=sink,
        dead_letter_topic=opt_str(proc, "deadLetterTopic", path),
        auto_offset_reset=reset,
        retry=retry,
    )


def _parse_recovery(rec: Mapping[str, Any]) -> RecoverySpec:
    restart = rec.get("restartStalledMembers", True)
    if not isinstance(restart, bool):
        raise SpecError("spec.recovery.restartStalledMembers", "must be a boolean")
    return RecoverySpec(restart_stalled_members=restart)


def _parse_rollout(ro: Mapping[str, Any], membership: MembershipSpec) -> RolloutSpec:
    path = "spec.rollout"
    paused = ro.get("paused", False)
    if not isinstance(paused, bool):
        raise SpecError(f"{path}.paused", "must be a boolean")
    widen = ro.get("widenSessionTimeout")
    if widen is not None and not isinstance(widen, bool):
        raise SpecError(f"{path}.widenSessionTimeout", "must be a boolean")
    # The CRD's CEL rule, repeated for bodies that did not pass the API server.
    if widen and membership.protocol != "consumer":
        raise SpecError(f"{path}.widenSessionTimeout", WIDEN_CLASSIC_MESSAGE)
    strategy = ro.get("strategy", "WarmHandoff")
    if strategy not in STRATEGIES:
        raise SpecError(f"{path}.strategy",
                        f"must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    return RolloutSpec(
        max_unavailable=int_or(ro, "maxUnavailable", path, default=1, minimum=1),
        restart_nonce=opt_str(ro, "restartNonce", path),
        paused=paused,
        strategy=strategy,
        max_surge=int_or(ro, "maxSurge", path, default=1, minimum=1),
        standby_timeout_s=int_or(ro, "standbyTimeoutSeconds", path, default=600, minimum=10),
        progress_deadline_s=int_or(ro, "progressDeadlineSeconds", path, default=600, minimum=10),
        on_failure=choice(ro, "onFailure", path, ON_FAILURE),
        fallback=choice(ro, "fallback", path, FALLBACKS),
        widen_session_timeout=(membership.protocol == "consumer" if widen is None else widen),
    )

