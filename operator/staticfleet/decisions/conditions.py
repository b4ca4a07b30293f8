"""Condition types, every reason constant, and a pure `set_condition`.

Conditions follow metav1.Condition: type, status ("True"/"False"/"Unknown"), reason (CamelCase),
message, lastTransitionTime, observedGeneration. Reasons are also used as Kubernetes Event reasons,
so every reason the operator can emit is defined here, once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

Status = Literal["True", "False", "Unknown"]
Cond = tuple[Status, str, str]
"""A condition's status, reason and message, as the decisions derive it."""

# --- condition types ---
READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
ROLLOUT_AT_RISK = "RolloutAtRisk"
IDLE_MEMBERS = "IdleMembers"
UNASSIGNED_PARTITIONS = "UnassignedPartitions"
BROKER_BOUNDS_KNOWN = "BrokerBoundsKnown"
MEMBERS_STALLED = "MembersStalled"
AUTOSCALING = "Autoscaling"
"""Only with spec.autoscaling: True while the autoscaler is free to act, False while something
holds it (its reason says what, its message what it would do)."""
TESTING_ANNOTATIONS = "TestingAnnotations"
"""Only while the ConsumerGroup sets a test-only annotation this operator does not honour:
False, saying which and why."""
CONDITION_TYPES = (READY, PROGRESSING, DEGRADED, ROLLOUT_AT_RISK, IDLE_MEMBERS,
                   UNASSIGNED_PARTITIONS, BROKER_BOUNDS_KNOWN, MEMBERS_STALLED, AUTOSCALING,
                   TESTING_ANNOTATIONS)

# --- reasons: MembersStalled ---
MEMBERS_PROGRESSING = "MembersProgressing"
MEMBER_STALLED = "MemberStalled"
RESTARTING_STALLED_MEMBER = "RestartingStalledMember"
WAITING_ON_LEADER = "WaitingOnPartitionLeader"
STALL_RESTARTS_EXHAUSTED = "StallRestartsExhausted"
BATCH_OVERDUE = "BatchOverdue"

# --- reasons: Ready ---
ALL_MEMBERS_READY = "AllMembersReady"
MEMBERS_NOT_READY = "MembersNotReady"
GROUP_NOT_STABLE = "GroupNotStable"
SCALED_TO_ZERO = "ScaledToZero"

# --- reasons: Progressing ---
ROLLOUT_IDLE = "RolloutIdle"
ROLLOUT_PENDING = "RolloutPending"
ROLLING = "Rolling"
ROLLOUT_PAUSED = "RolloutPaused"
ROLLOUT_COMPLETE = "RolloutComplete"
ROLLOUT_REFUSED = "RolloutRefused"
ROLLOUT_STOPPED = "RolloutStopped"

# --- reasons: Degraded ---
AS_EXPECTED = "AsExpected"
INVALID_SPEC = "InvalidSpec"
MEMBER_POD_REFUSED = "MemberPodRefused"
INVALID_TIMEOUTS = "InvalidTimeouts"
KAFKA_UNREACHABLE = "KafkaUnreachable"
COORDINATOR_MOVING = "CoordinatorMoving"
KAFKA_AUTHENTICATION_FAILED = "KafkaAuthenticationFailed"
TOPIC_MISSING = "TopicMissing"
SECRET_MISSING = "SecretMissing"
API_ERROR = "ApiError"
GROUP_ID_IN_USE = "GroupIdInUse"
MEMBER_STUCK_TERMINATING = "MemberStuckTerminating"
MEMBER_FAILING = "MemberFailing"
MEMBER_STATUS_SLOW = "MemberStatusSlow"
"""Event: members whose /status did not answer within its deadline (`members.slow`)."""
RESTART_UNSAFE = "RestartUnsafe"
UNEXPECTED_REBALANCE = "UnexpectedRebalance"
REBALANCED = "Rebalanced"

# --- reasons: RolloutAtRisk ---
RESTARTS_ON_TIME = "RestartsOnTime"
RESTART_RUNNING_LATE = "RestartRunningLate"
SESSION_TIMEOUT_EXCEEDED = "SessionTimeoutExceeded"

# --- reasons: IdleMembers ---
NO_IDLE_MEMBERS = "NoIdleMembers"
MORE_MEMBERS_THAN_PARTITIONS = "MoreMembersThanPartitions"
PARTITIONS_UNKNOWN = "PartitionsUnknown"

# --- reasons: UnassignedPartitions ---
ALL_PARTITIONS_ASSIGNED = "AllPartitionsAssigned"
PARTITIONS_UNASSIGNED = "PartitionsUnassigned"

# --- reasons: BrokerBoundsKnown ---
READ_FROM_BROKER = "ReadFromBroker"
DESCRIBE_CONFIGS_DENIED = "DescribeConfigsDenied"

# --- reasons: TestingAnnotations ---
TESTING_ANNOTATIONS_IGNORED = "TestingAnnotationsIgnored"

# --- reasons: Autoscaling (decisions.autoscaler; the changes are also Events) ---
LAG_ON_TARGET = "LagOnTarget"
SCALING_UP = "ScalingUp"
SCALING_DOWN = "ScalingDown"
SCALING_TO_VALID_COUNT = "ScalingToEvenCount"
INEFFECTIVE_SCALE_UP = "IneffectiveScaleUp"
CHECKING_SCALE_UP = "CheckingScaleUp"
AT_MAX_REPLICAS = "AtMaxReplicas"
SCALING_BUDGET_SPENT = "ScalingBudgetSpent"
AUTOSCALING_HELD = "AutoscalingHeld"
REPLICAS_OWNED_ELSEWHERE = "ReplicasOwnedElsewhere"
NO_EVEN_REPLICA_COUNT = "NoEvenReplicaCount"

# --- Event-only reasons (the roller and the timeout tuner) ---
ROLLOUT_STARTED = "RolloutStarted"
MEMBER_RESTARTING = "MemberRestarting"
MEMBER_BACK = "MemberBack"
MEMBER_READY = "MemberReady"
HANDOFF_STARTED = "HandoffStarted"
HANDOFF_FAILED = "HandoffFailed"
HANDOFF_FALLBACK = "HandoffFellBackToColdStart"
ROLLOUT_HALTED = "RolloutHalted"
ROLLING_BACK = "RollingBack"
ROLLED_BACK = "RolledBack"
TIMEOUTS_CHANGED = "TimeoutsChanged"
SESSION_WIDENED = "SessionWidened"
"""A KIP-848 group's session timeout raised for a rollout (`timeouts.widening`)."""
SESSION_RESTORED = "SessionRestored"
"""A KIP-848 group's session timeout set back to the tuned value (`timeouts.widening`)."""
SCALED_DOWN = "ScaledDown"
SCALED_UP = "ScaledUp"
MEMBER_LEAVING = "MemberLeaving"
SCALE_DOWN_TAKEN_BACK = "ScaleDownTakenBack"
PLANNED_REBALANCE = "PlannedRebalance"
REBALANCE_UNEXPLAINED = "RebalanceUnexplained"
"""A rebalance the ledger found no cause for (`rebalance.ledger`, cause unknown)."""
FOREIGN_MEMBER = "ForeignMember"
"""A rebalance a member that is none of the ConsumerGroup's made, joining or leaving."""
RECREATING_FAILED_POD = "RecreatingFailedPod"

# --- why the roller waits (status.rollout.reason's code, Progressing's message) ---
WAIT_MEMBER = "WaitingForMember"
WAIT_GROUP = "GroupNotStable"
WAIT_AVAILABILITY = "WaitingForAvailability"
WAIT_PAUSED = "Paused"
WAIT_STOPPED = "RolloutStopped"
WAIT_UP_TO_DATE = "UpToDate"
WAIT_BLOCKED = "Blocked"
"""Held back by a predicate without a reason of its own above."""
WAIT_FAILED = "RolloutFailed"

# --- a drained KIP-848 member's static leave (decisions.members.static_leave_event) ---
STATIC_LEAVE_UNCONFIRMED = "StaticLeaveUnconfirmed"
STATIC_LEAVE_EXPIRED = "StaticLeaveExpired"

# --- why a restarted member failed on the new revision (rollsteps.MemberFailed) ---
# MEMBER_FAILING (a Degraded reason above), or:
NO_PROGRESS = "ProgressDeadlineExceeded"

# --- restart reasons (decisions.reasons; each restart's Event names its codes) ---
IMAGE_CHANGED = "ImageChanged"
COMMAND_CHANGED = "CommandChanged"
ENV_CHANGED = "EnvChanged"
SPARK_CONF_CHANGED = "SparkConfChanged"
PROCESSING_CHANGED = "ProcessingChanged"
CLIENT_CONFIG_CHANGED = "ClientConfigChanged"
TEMPLATE_CHANGED = "TemplateChanged"
MANUAL_RESTART = "ManualRestart"


def rfc3339(moment: datetime) -> str:
    """Format an aware datetime as the RFC 3339 UTC string Kubernetes uses (second precision)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_ms(moment: datetime) -> str:
    """Like `rfc3339`, with milliseconds (for measurements made of differences of moments)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{moment.astimezone(UTC).microsecond // 1000:03d}Z")


def parse_rfc3339(value: str) -> datetime:
    """Parse a Kubernetes timestamp ("2024-01-02T03:04:05Z", fractions allowed) to aware UTC."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def parse_optional(value: Any) -> datetime | None:
    """`parse_rfc3339` of a status field that may be absent or null."""
    return parse_rfc3339(str(value)) if value else None


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: Status,
    reason: str,
    message: str,
    now: datetime,
    generation: int,
) -> list[dict[str, Any]]:
    """Return `conditions` with the condition `type_` set; the input is not modified.

    lastTransitionTime changes only when the status changes, so it tells how long the condition has
    held. Other conditions keep their order; a new type is appended.
    """
    new = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": rfc3339(now),
        "observedGeneration": generation,
    }
    result: list[dict[str, Any]] = []
    found = False
    for cond in conditions:
        if cond.get("type") == type_:
            found = True
            if cond.get("status") == status and cond.get("lastTransitionTime"):
                new["lastTransitionTime"] = cond["lastTransitionTime"]
            result.append(new)
        else:
            result.append(dict(cond))
    if not found:
        result.append(new)
    return result


def get_condition(conditions: Sequence[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    """The condition of type `type_`, or None."""
    return next((c for c in conditions if c.get("type") == type_), None)

