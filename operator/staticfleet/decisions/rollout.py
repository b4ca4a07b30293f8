"""When to restart which member: the roller's pure decision (the "why" is in `reasons`).

State lives in `status.rollout` (`RolloutState.from_status` / `to_status`), so an operator restart
resumes where it stopped. Each pass `plan.decide` calls

    step = next_step(state, observation, update_revision, limits, now)
    state = record_step(state, step, observation, update_revision, now)

and turns the step into the plan's pod deletions (each with its member's restart reasons),
Events and status; the service carries the plan out.

Rules:

* A member needs a restart when its pod exists, is not already being deleted and has restart
  reasons (`reasons.restart_reasons`: what of its revision differs from the update revision);
  no reasons, no restart. Missing pods are not restarted: `plan.decide` creates them, and a
  restarted member's replacement is created there too (it is missing once its pod is gone).
* Order (`plan_rollout`): unready members first (restarting them costs nothing), then by ordinal
  descending, as a StatefulSet rolls, so the ordinals a scale-down would remove go first.
* Up to `max_unavailable` members are restarted together, only while the group is Stable (or Empty)
  and the other members are ready and in the group; the roller then waits for all of them.
* A member is done when its pod has the update revision, is ready, holds an assignment in the group
  again, and the group is Stable. Its absence (stop to done) is reported for the measurements.
* Running late: a member away longer than `at_risk_fraction` (0.8) of the session timeout and still
  not back -> StopAtRisk (phase AtRisk): no further member is touched. If it comes back within the
  session timeout the rollout continues; if its absence passes the session timeout the broker has
  rebalanced -> StopAtRisk(expired) (phase Stopped): this revision is not rolled any further. A new
  revision (the measured late restart raises the automatic session timeout, or a restartNonce bump)
  starts a new rollout.
* RefuseToStart when the effective timeouts are not restart-safe (the slowest measured restart does
  not fit the largest session timeout the broker or the spec allows).
* Resume: a member already restarted has the new revision, so it is never restarted twice; a pod
  found being deleted is followed as in flight even if the status did not record it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from staticfleet.decisions.conditions import (
    WAIT_AVAILABILITY,
    WAIT_GROUP,
    WAIT_MEMBER,
    WAIT_PAUSED,
    WAIT_STOPPED,
    WAIT_UP_TO_DATE,
    parse_optional,
    rfc3339,
    rfc3339_ms,
)
from staticfleet.decisions.model import RolloutSpec
from staticfleet.decisions.reasons import RestartReason
from staticfleet.decisions.timeouts import EffectiveTimeouts

Phase = Literal["Idle", "Pending", "Rolling", "Paused", "AtRisk", "Stopped", "Complete"]

STABLE_STATES = frozenset({"Stable"})
STARTABLE_STATES = frozenset({"Stable", "Empty"})
AT_RISK_FRACTION = 0.8
MAX_RECHECK_S = 5.0
WARM_HANDOFF = "WarmHandoff"
GAP_WAIT_MAX_S = 120.0
"""How long a warm replacement back in the group, with records waiting, may go without a first
batch before it is done anyway (its processing gap then stays unknown, and the Event says so)."""
ACTIVATION_GIVE_UP_S = 5.0
"""How long after the old process's close a standby replacement may go without taking the
activation (not answering, or still in standby) before a cold start replaces it."""



@dataclass(frozen=True)
class ObservedMember:
    """One member ordinal as observed this pass (pod from Kubernetes, group from the broker)."""

    ordinal: int
    pod_exists: bool = True
    revision: str | None = None
    ready: bool = False
    stopped_at: datetime | None = None
    """When the pod's deletion was requested (its deletionTimestamp), if it is being deleted."""
    in_group: bool = False
    """The broker lists its instance id with a non-empty assignment."""
    pod_name: str | None = None
    pod_phase: str | None = None
    member_id: str | None = None
    assignment: tuple[tuple[str, int], ...] = ()
    pod_uid: str | None = None
    restart_reasons: tuple[RestartReason, ...] = ()
    """Why its pod must be restarted to run the update revision (`reasons.restart_reasons`,
    computed once per pass); empty when it runs it. No reasons, no restart."""
    standby_state: str | None = None
    """What its process says in /status `standby`: "warming" or "ready" while it waits for
    activation (a warm handoff's replacement), None when active or not answering."""
    failure: str | None = None
    """Its member container's last failed exit, while it is not running again."""
    standby_ready_at: datetime | None = None
    first_batch_at: datetime | None = None
    """When its process finished its first batch (from /status)."""
    answers: bool = False
    """Its process answered /status this pass."""
    standby: ObservedMember | None = None
    """A newer live pod of this ordinal beside it: a warm handoff's replacement."""


@dataclass(frozen=True)
class GroupObservation:
    """The whole group this pass."""

    members: tuple[ObservedMember, ...]
    group_state: str
    rebalances: int = 0
    """The operator's running count of rebalances of this group (status.rebalances)."""
    closures: Mapping[str, datetime] = field(default_factory=dict)
    """When each stopped member pod's process closed, by pod uid (as far as seen)."""
    last_batches: Mapping[str, datetime] = field(default_factory=dict)
    """When each member pod's process last finished a batch, by pod uid (as last read)."""
    replacement_names: Mapping[int, str] = field(default_factory=dict)
    """The name a warm replacement of each ordinal gets for the update revision."""
    lag: Mapping[tuple[str, int], int] | None = None
    """Each committed partition's lag as the broker sees it (None: not read this pass)."""

    def member(self, ordinal: int) -> ObservedMember | None:
        return next((m for m in self.members if m.ordinal == ordinal), None)


HandoffPhase = Literal["Preparing", "Stopping", "Activating", "Rejoining", "Serving"]


@dataclass(frozen=True)
class InFlight:
    """A member being restarted: its old pod deleted at `stopped_at`, its process closed at
    `closed_at` (once seen), back in the group at `rejoined_at`. A warm handoff starts earlier:
    its replacement `replacement` is created at `prepared_at` and the old pod is deleted once
    the replacement is standby-ready (`stopped_at` is None until then)."""

    ordinal: int
    stopped_at: datetime | None
    rejoined_at: datetime | None = None
    pod_uid: str | None = None
    """The uid of the old pod (deleted, or to be deleted by a warm handoff)."""
    closed_at: datetime | None = None
    mode: Literal["warm", "cold"] = "cold"
    replacement: str | None = None
    prepared_at: datetime | None = None
    standby_ready_at: datetime | None = None
    old_last_batch_at: datetime | None = None

    @property
    def away_since(self) -> datetime | None:
        """When the member stopped heartbeating: its process's close (the old pod's drain is
        not absence), or the deletion while the close is not known; None before the stop."""
        return self.closed_at or self.stopped_at

    def absence_s(self, now: datetime) -> float:
        """Close to rejoin (or to now, while it is still away); 0 before the stop."""
        since = self.away_since
        if since is None:
            return 0.0
        return max(0.0, ((self.rejoined_at or now) - since).total_seconds())

    @property
    def phase(self) -> HandoffPhase:
        if self.stopped_at is None:
            return "Preparing"
        if self.rejoined_at is not None:
            return "Serving"
        if self.closed_at is None:
            return "Stopping"
        return "Activating" if self.mode == "warm" else "Rejoining"

    @property
    def order(self) -> tuple[datetime, int]:
        return (self.stopped_at or self.prepared_at or datetime.min.replace(tzinfo=UTC),
                self.ordinal)


@dataclass(frozen=True)
class Handoff:
    """What one member's restart in this rollout cost."""

    ordinal: int
    mode: str
    absence_ms: int
    processing_gap_ms: int | None = None
    standby_ready_ms: int | None = None

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ordinal": self.ordinal, "mode": self.mode,
                               "absenceMs": self.absence_ms}
        if self.processing_gap_ms is not None:
            out["processingGapMs"] = self.processing_gap_ms
        if self.standby_ready_ms is not None:
            out["standbyReadyMs"] = self.standby_ready_ms
        return out

    @classmethod
    def from_status(cls, raw: Mapping[str, Any]) -> Handoff:
        return cls(int(raw["ordinal"]), str(raw.get("mode") or "cold"),
                   int(raw.get("absenceMs") or 0), raw.get("processingGapMs"),
                   raw.get("standbyReadyMs"))


@dataclass(frozen=True)
class RolloutState:
    """`status.rollout`, typed."""

    revision: str | None = None
    phase: Phase = "Idle"
    reason: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    members_restarted: tuple[int, ...] = ()
    pending: tuple[int, ...] = ()
    in_flight: tuple[InFlight, ...] = ()
    longest_absence_ms: int = 0
    rebalances_at_start: int | None = None
    rebalances_during: int | None = None
    """Fixed when the rollout finished: rebalances after it (a planned rejoin that assigns a
    topic the rollout added, say) are not the rollout's."""
    strategy: str | None = None
    handoffs: tuple[Handoff, ...] = ()
    longest_gap_ms: int | None = None

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> RolloutState:
        if not status:
            return cls()
        return cls(
            revision=status.get("revision"),
            phase=status.get("phase") or "Idle",
            reason=status.get("reason") or "",
            started_at=parse_optional(status.get("startedAt")),
            finished_at=parse_optional(status.get("finishedAt")),
            members_restarted=tuple(status.get("membersRestarted") or ()),
            pending=tuple(status.get("pending") or ()),
            in_flight=tuple(
                InFlight(int(f["ordinal"]), parse_optional(f.get("stoppedAt")),
                         parse_optional(f.get("rejoinedAt")), f.get("podUid"),
                         parse_optional(f.get("closedAt")), f.get("mode") or "cold",
                         f.get("replacementPod"), parse_optional(f.get("preparedAt")),
                         parse_optional(f.get("standbyReadyAt")),
                         parse_optional(f.get("oldLastBatchAt")))
                for f in status.get("inFlight") or ()
            ),
            strategy=status.get("strategy"),
            handoffs=tuple(Handoff.from_status(h) for h in status.get("handoffs") or ()),
            longest_gap_ms=status.get("longestProcessingGapMs"),
            longest_absence_ms=int(status.get("longestAbsenceMs") or 0),
            rebalances_at_start=status.get("rebalancesAtStart"),
            rebalances_during=(status.get("rebalancesDuringRollout")
                               if status.get("finishedAt") else None),
        )

    def to_status(self, rebalances_now: int) -> dict[str, Any]:
        """`status.rollout`; `rebalances_now` gives rebalancesDuringRollout."""
        first = min(self.in_flight, key=lambda f: f.order, default=None)
        status: dict[str, Any] = {
            "revision": self.revision,
            "phase": self.phase,
            "reason": self.reason,
            "membersRestarted": list(self.members_restarted),
            "pending": list(self.pending),
            "current": first.ordinal if first else None,
            "currentStoppedAt": (rfc3339(first.stopped_at) if first and first.stopped_at
                                 else None),
            "inFlight": [_in_flight_status(f) for f in self.in_flight],
            "longestAbsenceMs": self.longest_absence_ms,
            "longestProcessingGapMs": self.longest_gap_ms,
            "strategy": self.strategy,
            "handoffs": [h.to_status() for h in self.handoffs],
        }
        if self.started_at is not None:
            status["startedAt"] = rfc3339(self.started_at)
        if self.finished_at is not None:
            status["finishedAt"] = rfc3339(self.finished_at)
        if self.rebalances_at_start is not None:
            status["rebalancesAtStart"] = self.rebalances_at_start
            status["rebalancesDuringRollout"] = (
                self.rebalances_during if self.rebalances_during is not None
                else max(0, rebalances_now - self.rebalances_at_start))
        return status


@dataclass(frozen=True)
class RolloutLimits:
    """What bounds the roller. `session_timeout_ms` is the session timeout the members being
    restarted joined with (the broker holds their place that long): pass the smaller of the
    running and the new effective value when they differ."""

    session_timeout_ms: int
    restart_safe: bool = True
    needed_session_ms: int | None = None
    running_session_ms: int | None = None
    """The shortest session timeout a member runs with, when below the effective one."""
    slowest_restart: str | None = None
    """Which measured restart needs the timeout (for the refusal's message)."""
    capped: bool = False
    """The needed timeout is above what the effective one may be (not only the running one)."""
    effective_session_ms: int | None = None
    max_unavailable: int = 1
    paused: bool = False
    at_risk_fraction: float = AT_RISK_FRACTION
    strategy: str = "Recreate"
    max_surge: int = 1
    standby_timeout_s: float = 600.0

    @classmethod
    def from_timeouts(
        cls,
        timeouts: EffectiveTimeouts,
        rollout: RolloutSpec,
        running_session_timeout_ms: int | None = None,
        slowest_restart: str | None = None,
    ) -> RolloutLimits:
        session = timeouts.session_timeout_ms
        if running_session_timeout_ms is not None:
            session = min(session, running_session_timeout_ms)
        needed = timeouts.needed_session_timeout_ms
        return cls(
            session_timeout_ms=session,
            # The broker holds a restarting member to the timeout it joined with: a restart
            # must fit that one, not only the new effective value.
            restart_safe=timeouts.restart_safe and (needed is None or needed <= session),
            running_session_ms=running_session_timeout_ms,
            slowest_restart=slowest_restart,
            capped=not timeouts.restart_safe,
            effective_session_ms=timeouts.session_timeout_ms,
            needed_session_ms=needed,
            max_unavailable=rollout.max_unavailable,
            paused=rollout.paused,
            strategy=rollout.strategy,
            max_surge=rollout.max_surge,
            standby_timeout_s=float(rollout.standby_timeout_s),
        )


# --- steps ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wait:
    """Nothing to do now. `recheck_after_s`: when to look again (None: on the next event/timer)."""

    reason: str
    message: str
    recheck_after_s: float | None = None


@dataclass(frozen=True)
class RestartMembers:
    """Delete these members' pods (the reconcile recreates them with the update revision)."""

    ordinals: tuple[int, ...]


@dataclass(frozen=True)
class PrepareReplacements:
    """Warm handoff: start these members' replacements in standby beside them (nothing stops)."""

    ordinals: tuple[int, ...]


@dataclass(frozen=True)
class HandOver:
    """The replacement is standby-ready: stop the old member (`delete_uid`: its pod, None when
    it is gone already). The replacement is activated once the old process has closed."""

    ordinal: int
    delete_uid: str | None
    standby_ready_at: datetime | None


@dataclass(frozen=True)
class HandoffFailed:
    """A replacement failed before it was standby-ready: delete the replacements still
    preparing (`ordinals`), keep the old members, stop the rollout."""

    ordinal: int
    ordinals: tuple[int, ...]
    message: str


@dataclass(frozen=True)
class FallBackCold:
    """The old process closed but its standby replacement did not take the activation in
    time: delete the replacement; a cold one is started in its place."""

    ordinal: int
    message: str


@dataclass(frozen=True)
class MemberRejoined:
    """The member's replacement is back in the group with its partitions: its absence ended
    (`absence_s`, stop to rejoin). It is not done before it can process again (ready)."""

    ordinal: int
    absence_s: float


@dataclass(frozen=True)
class MarkMemberDone:
    """The member is back and serving; `absence_s` (stop to rejoin) is a restart measurement."""

    ordinal: int
    absence_s: float
    processing_gap_s: float | None = None


@dataclass(frozen=True)
class StopAtRisk:
    """A restart runs late (expired=False: past at_risk_fraction of the session timeout) or too
    late (expired=True: past the session timeout, the broker rebalanced). Touch no further
    member."""

    ordinal: int
    absence_s: float
    needed_session_ms: int
    message: str
    expired: bool = False


@dataclass(frozen=True)
class Complete:
    """Every member runs the update revision and is back."""


@dataclass(frozen=True)
class RefuseToStart:
    """Restarts are predicted to outlast the session timeout: do not start."""

    needed_session_ms: int
    message: str


Step = (Wait | RestartMembers | PrepareReplacements | HandOver | HandoffFailed | FallBackCold
        | MemberRejoined | MarkMemberDone | StopAtRisk | Complete | RefuseToStart)


@dataclass(frozen=True)
class RolloutPlan:
    """Ordinals needing a restart, in the order they will be restarted."""

    ordinals: tuple[int, ...]


# --- decisions -----------------------------------------------------------------------------------


def needs_restart(member: ObservedMember) -> bool:
    """A live pod (not being deleted) with reasons to restart."""
    return member.pod_exists and member.stopped_at is None and bool(member.restart_reasons)


def is_available(member: ObservedMember, group_state: str) -> bool:
    """Ready and serving: in the group (an Empty group has nobody to be in)."""
    return (
        member.pod_exists
        and member.stopped_at is None
        and member.ready
        and (member.in_group or group_state == "Empty")
    )


def has_rejoined(member: ObservedMember | None, update_revision: str) -> bool:
    """The replacement (new revision) is in the group with an assignment: the broker no longer
    holds its place against the session timeout."""
    return (
        member is not None
        and member.pod_exists
        and member.stopped_at is None
        and member.revision == update_revision
        and member.in_group
    )


def is_done(member: ObservedMember | None, update_revision: str, group_state: str) -> bool:
    """Back after a restart: new revision, ready, assigned again, and the group is Stable."""
    return (
        member is not None
        and member.pod_exists
        and member.stopped_at is None
        and member.revision == update_revision
        and member.ready
        and member.in_group
        and group_state in STABLE_STATES
    )


def plan_rollout(members: Sequence[ObservedMember]) -> RolloutPlan:
    """Members needing a restart: unready ones first (ascending), then ready ones by ordinal
    descending."""
    needing = [m for m in members if needs_restart(m)]
    unready = sorted(m.ordinal for m in needing if not m.ready)
    ready = sorted((m.ordinal for m in needing if m.ready), reverse=True)
    return RolloutPlan(tuple(unready + ready))


def refusal_message(limits: RolloutLimits) -> str:
    """Why restarts are unsafe and what to do."""
    needed, session = limits.needed_session_ms, limits.session_timeout_ms
    which = f" ({limits.slowest_restart})" if limits.slowest_restart else ""
    if not limits.capped and limits.running_session_ms is not None:
        return (
            f"restarts need a session timeout of {needed} ms{which} but the members run with "
            f"{session} ms (the value they joined with; the broker holds a restarting member "
            "to it, whatever the new value): restarting would rebalance the group once per "
            "member. Make members start faster, or accept those rebalances by deleting the "
            "member pods yourself; members that rejoin then run with the new timeout")
    return (
        f"restarts need a session timeout of {needed} ms{which} but the session timeout can "
        f"be at most {limits.effective_session_ms or session} ms (capped by the broker, "
        "spec.membership.autoTuning.maxSessionTimeoutMs or set in the spec): restarting would "
        "cause rebalances. Look at why that restart was slow, raise the broker's group max "
        "session timeout, spec.membership.autoTuning.maxSessionTimeoutMs or "
        "spec.membership.timeouts.sessionTimeoutMs, or make members start faster")


def next_step(
    state: RolloutState,
    observed: GroupObservation,
    update_revision: str,
    limits: RolloutLimits,
    now: datetime,
) -> Step:
    """What the roller should do now. Pure: same inputs, same step."""
    same_rollout = state.revision == update_revision
    session_ms = limits.session_timeout_ms
    risk_ms = session_ms * limits.at_risk_fraction
    needed = limits.needed_session_ms or session_ms
    in_flight = _in_flight(state, observed, update_revision)

    # 1. Follow members being restarted: done, back in the group, late, too late, or wait.
    for f in in_flight:
        member = observed.member(f.ordinal)
        if (is_done(member, update_revision, observed.group_state)
                and _settled(f, member, observed.lag, now)):
            return MarkMemberDone(f.ordinal, f.absence_s(now), _gap_s(f, member))
    for f in in_flight:
        if (f.stopped_at is not None and f.rejoined_at is None
                and has_rejoined(observed.member(f.ordinal), update_revision)):
            return MemberRejoined(f.ordinal, f.absence_s(now))
    phase = state.phase if same_rollout else "Pending"
    recheck = MAX_RECHECK_S
    warm = _follow_warm(in_flight, observed, limits, now)
    if isinstance(warm, Wait):
        recheck = min(recheck, warm.recheck_after_s or recheck)
    elif warm is not None:
        return warm
    for f in in_flight:
        if f.rejoined_at is not None or f.stopped_at is None:
            continue  # back in the group, or not stopped yet: the session timeout is not running
        absence_s = f.absence_s(now)
        absence_ms = absence_s * 1000
        if absence_ms > session_ms and phase != "Stopped":
            return StopAtRisk(
                f.ordinal,
                absence_s,
                needed,
                f"member {f.ordinal} has been away {absence_s:.1f} s, longer than the session "
                f"timeout {session_ms} ms: the broker has rebalanced the group. The rollout stops; "
                "a new revision (raised timeouts or a restartNonce change) starts a new one",
                expired=True,
            )
        if absence_ms > risk_ms and phase not in ("AtRisk", "Stopped"):
            return StopAtRisk(
                f.ordinal,
                absence_s,
                needed,
                f"member {f.ordinal} has been away {absence_s:.1f} s, more than "
                f"{limits.at_risk_fraction:.0%} of the session timeout {session_ms} ms, and is not "
                "back in the group: no further member will be restarted until it is",
            )
        next_mark = risk_ms if absence_ms <= risk_ms else session_ms
        recheck = min(recheck, max(0.5, (next_mark - absence_ms) / 1000))
    if in_flight:
        preparing = [str(f.ordinal) for f in in_flight if f.stopped_at is None]
        away = [str(f.ordinal) for f in in_flight
                if f.rejoined_at is None and f.stopped_at is not None]
        back = [str(f.ordinal) for f in in_flight if f.rejoined_at is not None]
        parts = []
        if preparing:
            parts.append(f"the standby replacement(s) of member(s) {', '.join(preparing)} to be "
                         "ready")
        if away:
            parts.append(f"member(s) {', '.join(away)} to rejoin the group")
        if back:
            parts.append(f"member(s) {', '.join(back)} (back in the group) to be ready to process")
        return Wait(WAIT_MEMBER, "waiting for " + " and ".join(parts), recheck)

    # 2. Nothing in flight: finished, halted, or start the next restart(s).
    plan = plan_rollout(observed.members)
    if not plan.ordinals:
        if same_rollout and phase in ("Complete", "Idle"):
            return Wait(WAIT_UP_TO_DATE, f"every member runs revision {update_revision}")
        return Complete()
    if same_rollout and phase in ("AtRisk", "Stopped"):
        return Wait(WAIT_STOPPED, state.reason or "the rollout stopped: a restart ran late")
    if limits.paused:
        return Wait(WAIT_PAUSED, "spec.rollout.paused is true")
    if not limits.restart_safe:
        return RefuseToStart(needed, refusal_message(limits))
    if observed.group_state not in STARTABLE_STATES:
        return Wait(WAIT_GROUP, f"the group is {observed.group_state}", 2.0)

    by_ordinal = {m.ordinal: m for m in observed.members}
    unavailable = [m for m in observed.members if not is_available(m, observed.group_state)]
    free = [o for o in plan.ordinals if not is_available(by_ordinal[o], observed.group_state)]
    at_once = limits.max_surge if limits.strategy == WARM_HANDOFF else limits.max_unavailable
    budget = at_once - (len(unavailable) - len(free))
    pick = free[:at_once]
    ready = [o for o in plan.ordinals if o not in free]
    pick += ready[: max(0, budget - len(pick))]
    if not pick:
        others = ", ".join(str(m.ordinal) for m in unavailable if m.ordinal not in free)
        return Wait(WAIT_AVAILABILITY, f"waiting for member(s) {others} to be ready", 2.0)
    if limits.strategy == WARM_HANDOFF:
        return PrepareReplacements(tuple(pick))
    return RestartMembers(tuple(pick))


def _settled(f: InFlight, member: ObservedMember | None,
             lag: Mapping[tuple[str, int], int] | None, now: datetime) -> bool:
    """A warm replacement is done once its processing gap is known (its first batch), or once
    no record of its partitions waits (the broker's lag is 0: nothing to process, no gap to
    measure). It waits at most GAP_WAIT_MAX_S. A cold member is done once ready."""
    if f.mode != "warm" or member is None or member.first_batch_at is not None:
        return True
    if f.rejoined_at is None:
        return False
    if lag is not None and not any(lag.get(tp, 0) for tp in member.assignment):
        return True
    return (now - f.rejoined_at).total_seconds() >= GAP_WAIT_MAX_S


def _gap_s(f: InFlight, member: ObservedMember | None) -> float | None:
    """Old process's last batch (as last read) -> replacement's first batch."""
    if member is None or member.first_batch_at is None or f.old_last_batch_at is None:
        return None
    return max(0.0, (member.first_batch_at - f.old_last_batch_at).total_seconds())


def _replacement(f: InFlight, member: ObservedMember | None) -> ObservedMember | None:
    if member is None or f.replacement is None:
        return None
    if member.pod_name == f.replacement:
        return member
    if member.standby is not None and member.standby.pod_name == f.replacement:
        return member.standby
    return None


def _follow_warm(in_flight: Sequence[InFlight], observed: GroupObservation,
                 limits: RolloutLimits, now: datetime) -> Step | None:
    """A warm handoff's own steps: the replacement failed or is late (stop), it is
    standby-ready (stop the old member), or it does not take the activation (fall back)."""
    preparing = tuple(f.ordinal for f in in_flight if f.stopped_at is None)
    soonest: float | None = None
    for f in in_flight:
        if f.mode != "warm":
            continue
        member = observed.member(f.ordinal)
        rep = _replacement(f, member)
        if f.stopped_at is None:
            if rep is not None and rep.failure is not None:
                return HandoffFailed(f.ordinal, preparing, (
                    f"the replacement of member {f.ordinal} (pod {rep.pod_name}) failed before "
                    f"it was standby-ready: {rep.failure}. Member {f.ordinal} keeps running on "
                    "its old revision and nothing rebalanced; fix the cause and change the spec "
                    "(or spec.rollout.restartNonce) to roll again"))
            waited = (now - (f.prepared_at or now)).total_seconds()
            if waited > limits.standby_timeout_s:
                return HandoffFailed(f.ordinal, preparing, (
                    f"the replacement of member {f.ordinal} was not standby-ready within "
                    f"spec.rollout.standbyTimeoutSeconds ({limits.standby_timeout_s:.0f} s); it "
                    "was deleted, the member keeps running on its old revision and nothing "
                    "rebalanced. See the replacement's log for what took the time"))
            if rep is not None and member is not None and rep is member:
                # The old member went first (deleted, or lost with its node): nothing to stop.
                return HandOver(f.ordinal, None, rep.standby_ready_at)
            if rep is not None and rep.standby_state == "ready" and member is not None:
                return HandOver(f.ordinal, member.pod_uid, rep.standby_ready_at or now)
            if member is None:
                return HandOver(f.ordinal, None, None)
            left = limits.standby_timeout_s - waited
            soonest = min(soonest or 1.0, max(0.5, min(1.0, left)))
            continue
        if f.rejoined_at is not None or f.closed_at is None:
            continue
        since_close = (now - f.closed_at).total_seconds()
        active = rep is not None and rep.standby_state is None and rep.answers
        if not active and since_close > ACTIVATION_GIVE_UP_S:
            who = f"pod {rep.pod_name}" if rep is not None else "its pod"
            return FallBackCold(f.ordinal, (
                f"the standby replacement of member {f.ordinal} ({who}) did not take the "
                f"activation within {ACTIVATION_GIVE_UP_S:.0f} s of the old process's close; "
                "it is replaced by a cold start, inside the session timeout"))
        soonest = min(soonest or 0.5, 0.5)
    if soonest is not None:
        return Wait(WAIT_MEMBER, "warm handoff under way", soonest)
    return None


def record_step(
    state: RolloutState,
    step: Step,
    observed: GroupObservation,
    update_revision: str,
    now: datetime,
) -> RolloutState:
    """The rollout state after `step` was carried out (call after the apply layer acted)."""
    if state.revision != update_revision:
        state = RolloutState(revision=update_revision, phase="Pending")
    state = replace(state, in_flight=_in_flight(state, observed, update_revision))
    plan = plan_rollout(observed.members).ordinals
    if isinstance(step, RestartMembers | PrepareReplacements):
        picked = set(step.ordinals)
        warm = isinstance(step, PrepareReplacements)
        added = tuple(
            InFlight(o, None, pod_uid=_uid(observed, o), mode="warm",
                     replacement=observed.replacement_names.get(o), prepared_at=now)
            if warm else InFlight(o, now, pod_uid=_uid(observed, o))
            for o in step.ordinals)
        doing = ("starting the standby replacement(s) of member(s) " if warm
                 else "restarting member(s) ")
        return replace(
            state,
            phase="Rolling",
            reason=doing + ", ".join(map(str, step.ordinals)),
            started_at=state.started_at or now,
            finished_at=None,
            rebalances_during=None,
            rebalances_at_start=(
                observed.rebalances
                if state.rebalances_at_start is None
                else state.rebalances_at_start
            ),
            strategy=state.strategy or (WARM_HANDOFF if warm else "Recreate"),
            in_flight=state.in_flight + added,
            pending=tuple(o for o in plan if o not in picked),
        )
    if isinstance(step, HandOver):
        return replace(
            state,
            reason=f"member {step.ordinal}: replacement standby-ready, stopping the old member",
            in_flight=tuple(
                replace(f, stopped_at=now, standby_ready_at=step.standby_ready_at,
                        pod_uid=step.delete_uid or f.pod_uid)
                if f.ordinal == step.ordinal else f for f in state.in_flight),
            pending=plan,
        )
    if isinstance(step, HandoffFailed):
        dropped = set(step.ordinals) | {step.ordinal}
        return replace(
            state, phase="Stopped", reason=step.message, finished_at=now,
            rebalances_during=_during(state, observed),
            in_flight=tuple(f for f in state.in_flight if f.ordinal not in dropped),
            pending=plan,
        )
    if isinstance(step, FallBackCold):
        return replace(
            state, reason=step.message,
            in_flight=tuple(replace(f, mode="cold") if f.ordinal == step.ordinal else f
                            for f in state.in_flight),
            pending=plan,
        )
    if isinstance(step, MemberRejoined):
        return replace(
            state,
            # Back before the session timeout: a rollout at risk is no longer at risk.
            phase="Rolling" if state.phase == "AtRisk" else state.phase,
            reason=f"member {step.ordinal} back in the group after {step.absence_s:.1f} s",
            in_flight=tuple(replace(f, rejoined_at=now) if f.ordinal == step.ordinal else f
                            for f in state.in_flight),
            longest_absence_ms=max(state.longest_absence_ms, round(step.absence_s * 1000)),
            pending=plan,
        )
    if isinstance(step, MarkMemberDone):
        absence_ms = round(step.absence_s * 1000)
        done = next((f for f in state.in_flight if f.ordinal == step.ordinal), None)
        gap_ms = None if step.processing_gap_s is None else round(step.processing_gap_s * 1000)
        handoff = Handoff(
            step.ordinal, done.mode if done else "cold", absence_ms, gap_ms,
            _ms_between(done.prepared_at, done.standby_ready_at) if done else None)
        return replace(
            state,
            handoffs=(*state.handoffs, handoff),
            longest_gap_ms=(state.longest_gap_ms if gap_ms is None
                            else max(state.longest_gap_ms or 0, gap_ms)),
            phase="Stopped" if state.phase == "Stopped" else "Rolling",
            reason=state.reason
            if state.phase == "Stopped"
            else f"member {step.ordinal} serving again (it was away {step.absence_s:.1f} s)",
            in_flight=tuple(f for f in state.in_flight if f.ordinal != step.ordinal),
            members_restarted=(*state.members_restarted, step.ordinal),
            longest_absence_ms=max(state.longest_absence_ms, absence_ms),
            pending=plan,
        )
    if isinstance(step, StopAtRisk):
        return replace(
            state,
            phase="Stopped" if step.expired else "AtRisk",
            reason=step.message,
            finished_at=now if step.expired else None,
            rebalances_during=_during(state, observed) if step.expired else None,
            longest_absence_ms=max(state.longest_absence_ms, round(step.absence_s * 1000)),
            pending=plan,
        )
    if isinstance(step, Complete):
        return replace(
            state,
            phase="Complete",
            reason=f"every member runs revision {update_revision}",
            finished_at=now,
            rebalances_during=_during(state, observed),
            in_flight=(),
            pending=(),
        )
    if isinstance(step, RefuseToStart):
        return replace(state, phase="Pending", reason=step.message, pending=plan)
    # Wait
    phase: Phase = state.phase
    if step.reason == WAIT_PAUSED:
        phase = "Paused"
    elif state.phase == "Paused":
        phase = "Rolling" if state.started_at else "Pending"
    return replace(state, phase=phase, reason=step.message, pending=plan)


def _in_flight(state: RolloutState, observed: GroupObservation,
               update_revision: str) -> tuple[InFlight, ...]:
    """The recorded in-flight members plus any outdated pod found being deleted (resume after a
    crash between deleting a pod and recording it), oldest first. A pod of the update revision
    being deleted is not a restart of the roller's (someone deleted it, or its node went): the
    member is recreated, and no rollout stops because of it."""
    known = {f.ordinal: f for f in state.in_flight}
    for m in observed.members:
        if (m.stopped_at is not None and m.ordinal not in known
                and m.revision != update_revision):
            known[m.ordinal] = InFlight(m.ordinal, m.stopped_at, pod_uid=m.pod_uid)
    for ordinal, f in known.items():
        closed = observed.closures.get(f.pod_uid or "")
        if f.closed_at is None and closed is not None:
            known[ordinal] = replace(f, closed_at=closed)
    for ordinal, f in known.items():
        last = observed.last_batches.get(f.pod_uid or "")
        if last is not None and (f.old_last_batch_at is None or last > f.old_last_batch_at):
            known[ordinal] = replace(f, old_last_batch_at=last)
    return tuple(sorted(known.values(), key=lambda f: f.order))


def _uid(observed: GroupObservation, ordinal: int) -> str | None:
    member = observed.member(ordinal)
    return member.pod_uid if member else None


def _ms_between(start: datetime | None, end: datetime | None) -> int | None:
    if start is None or end is None:
        return None
    return max(0, round((end - start).total_seconds() * 1000))


def _in_flight_status(f: InFlight) -> dict[str, Any]:
    out: dict[str, Any] = {"ordinal": f.ordinal, "phase": f.phase, "mode": f.mode}
    if f.stopped_at is not None:
        out["stoppedAt"] = rfc3339(f.stopped_at)
    for key, value in (("preparedAt", f.prepared_at), ("standbyReadyAt", f.standby_ready_at),
                       ("oldLastBatchAt", f.old_last_batch_at)):
        if value is not None:
            out[key] = rfc3339_ms(value)
    if f.replacement is not None:
        out["replacementPod"] = f.replacement
    if f.pod_uid is not None:
        out["podUid"] = f.pod_uid
    if f.closed_at is not None:
        out["closedAt"] = rfc3339_ms(f.closed_at)
    if f.rejoined_at is not None:
        out["rejoinedAt"] = rfc3339_ms(f.rejoined_at)
    return out


def _during(state: RolloutState, observed: GroupObservation) -> int | None:
    """The rebalances of a rollout that finishes now."""
    if state.rebalances_at_start is None:
        return None
    return max(0, observed.rebalances - state.rebalances_at_start)
