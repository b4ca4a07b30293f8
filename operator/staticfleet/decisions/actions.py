"""What a pass does, as data: the `Plan` that `plan.decide` returns and its actions (pure).

Each action says what to do and why: a member pod to create (`PodCreate`) or to delete
(`PodDelete`, with the restart reasons when it is a restart), a pod to annotate (`PodAnnotate`),
a member to ask to leave, rejoin or activate (`MemberCall`), a warm handoff's switch
(`Switchover`), an Event, and the metric values the pass exports (`MetricValues`). The service
carries them out in `Plan`'s order and decides nothing; `summarize` is its log of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from staticfleet.decisions.reasons import RestartReason

Action = Literal["leave", "rejoin", "activate"]
UNJUDGED = "the pass stopped before it judged whether the group is at rest"


@dataclass(frozen=True)
class MemberCall:
    """Ask the member of pod `pod` (its `/leave`, `/rejoin` or `/activate` endpoint) to act."""

    ordinal: int
    pod: str
    action: Action
    why: str


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str  # a `conditions` constant
    message: str


@dataclass(frozen=True)
class PodCreate:
    ordinal: int
    pod: Mapping[str, Any]
    why: str
    standby: bool = False
    """A warm handoff's replacement: a refusal of it is the roller's to handle (a fallback),
    not the pass's failure."""


@dataclass(frozen=True)
class PodDelete:
    ordinal: int
    name: str
    uid: str
    why: str
    reasons: tuple[RestartReason, ...] = ()
    """For a restart: what of the member's revision changed."""


@dataclass(frozen=True)
class Switchover:
    """A warm handoff's switch, carried out in one go (`switchover`): drain the old member
    (`old`: its pod; it finishes and commits its batch and closes its consumer the static way,
    and answers), then, the moment it answers, mark the standby activated, activate it and
    delete the old pod once the replacement finished its first batch or `first_batch_wait_s`
    passed: the old member's shutdown (Spark, the JVM, the exit: about a second of CPU) is off
    the critical path and does not run beside the replacement's first batch. A drain refused or
    not answered within `wait_s` (`DRAIN_WAIT_MAX_S`) deletes the old pod all the same (its
    SIGTERM drains it) and the standby is activated once its close is seen, as before drains
    existed; a drained process that is not replaced within `hold_ms` subscribes again by
    itself (no rebalance)."""

    ordinal: int
    old: PodDelete
    standby: str
    standby_uid: str
    hold_ms: int
    wait_s: float
    first_batch_wait_s: float = 0.0


@dataclass(frozen=True)
class PodAnnotate:
    """Annotations to merge into a live member pod (exactly the pod of this uid)."""

    ordinal: int
    name: str
    uid: str
    annotations: Mapping[str, str]
    why: str


@dataclass(frozen=True)
class AutoscalingFigures:
    """What the autoscaler exports: the lag in seconds (None: unknown or never drained), its
    target, the replicas it wants and its budget left this hour."""

    lag_seconds: float | None
    target_lag_seconds: float
    desired_replicas: int
    budget_left: int


@dataclass(frozen=True)
class MetricValues:
    """What the pass exports (`metrics.py` names them); None: leave the gauge as it is."""

    members_desired: int | None = None
    members_ready: int | None = None
    partitions: int | None = None
    idle_members: int | None = None
    timeouts_s: Mapping[str, float] = field(default_factory=dict)
    rollout_in_progress: bool | None = None
    rollout_at_risk: bool | None = None
    rebalances: int = 0
    """Rebalances seen since the previous pass."""
    planned_rebalances: int = 0
    """Of those, the ones the operator asked for (`rebalance.planned`)."""
    rebalance_causes: Mapping[str, int] = field(default_factory=dict)
    """The rebalances given a cause this pass (`rebalance.ledger`), by cause."""
    unassigned_partitions: int | None = None
    lag: Mapping[tuple[str, int], int] | None = None
    """Each committed partition's lag as the broker sees it (None: not read this pass)."""
    lag_age_s: float | None = None
    group_id: str | None = None
    """The Kafka group id (the `consumergroup` label of the lag series)."""
    timeout_changes: tuple[str, ...] = ()
    absences_s: tuple[float, ...] = ()
    processing_gaps_s: tuple[float, ...] = ()
    rollout_finished: tuple[float, str] | None = None
    """(seconds, phase) of a rollout that ended this pass."""
    stalled_members: int | None = None
    overdue_batches: int | None = None
    """Members whose batch in flight runs past its bound (`stalls.overdue_batches`)."""
    stalled_restarts: int = 0
    slow_members: int | None = None
    """Members whose /status did not answer in time this pass (`members.slow`)."""
    autoscaling: AutoscalingFigures | None = None
    """The autoscaler's figures (None: spec.autoscaling is off)."""
    error: str | None = None
    """The Degraded reason of a pass that could not finish."""


@dataclass(frozen=True)
class Plan:
    status: Mapping[str, Any]
    group_configs: Mapping[str, str] = field(default_factory=dict)
    """Broker-side group configs to set (KIP-848 groups) before anything else."""
    children: tuple[Mapping[str, Any], ...] = ()
    create: tuple[PodCreate, ...] = ()
    delete: tuple[PodDelete, ...] = ()
    events: tuple[Event, ...] = ()
    metrics: MetricValues = field(default_factory=MetricValues)
    requeue_after_s: float | None = None
    """When to look again (None: on the next change or the periodic resync)."""
    calls: tuple[MemberCall, ...] = ()
    """Members to ask to leave the group or to rejoin it (`rebalance.planned`), before any
    deletion."""
    annotate: tuple[PodAnnotate, ...] = ()
    """Pods to annotate before the calls: a standby is marked activated
    (`names.ACTIVATED_ANNOTATION`) before it is asked to activate, so that a restart of its
    container joins directly whether or not the operator is there to activate it again."""
    switchovers: tuple[Switchover, ...] = ()
    """Warm handoffs to switch now: drain the old member, activate the standby, delete the old
    pod (after the calls, before the creations and deletions)."""
    scale_to: int | None = None
    """The autoscaler's new `spec.replicas`, written through the scale subresource last; the
    next pass makes the change (planned leaves and joins)."""
    busy: tuple[str, ...] = (UNJUDGED,)
    """Why the group is not at rest after this pass: each rule of `pace.AT_REST` that fails
    (empty: at rest, the next pass comes after the rest interval, `pace.next_pass`)."""
    deadline_s: float | None = None
    """The longest the next pass may wait, for a decision that waits on the clock while nothing
    wakes a pass (a member nearing its stall bound, a timeout's lowering that comes due);
    unlike `requeue_after_s` it never delays a pass that is due sooner."""


def summarize(plan: Plan) -> Sequence[str]:
    """One line per action of the plan, with its reasons (the operator's INFO log)."""
    lines = [f"set group configs {dict(plan.group_configs)}"] if plan.group_configs else []
    lines += [f"annotate pod {a.name} (member {a.ordinal}) "
              f"{', '.join(f'{k}={v}' for k, v in sorted(a.annotations.items()))}: {a.why}"
              for a in plan.annotate]
    lines += [f"ask member {m.ordinal} (pod {m.pod}) to {m.action}: {m.why}"
              for m in plan.calls]
    lines += [f"switch member {w.ordinal} over: drain pod {w.old.name}, activate pod "
              f"{w.standby}, delete pod {w.old.name}: {w.old.why}" for w in plan.switchovers]
    for d in plan.delete:
        why = "; ".join(f"{r.code}: {r.message}" for r in d.reasons)
        lines.append(f"delete pod {d.name} (member {d.ordinal}): {d.why}"
                     + (f": {why}" if why else ""))
    for p in plan.create:
        lines.append(f"create pod {p.pod['metadata']['name']} (member {p.ordinal}): {p.why}")
    if plan.scale_to is not None:
        lines.append(f"set spec.replicas to {plan.scale_to} (the autoscaler)")
    lines += [f"event {e.type} {e.reason}: {e.message}" for e in plan.events]
    return lines


def soonest(*delays: float | None) -> float | None:
    """The shortest of the delays given (None: none was)."""
    known = [d for d in delays if d is not None]
    return min(known) if known else None
