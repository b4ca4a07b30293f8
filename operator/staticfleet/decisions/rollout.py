"""When to restart which member: the roller's pure decision (the "why" is in `reasons`, the
safety checks in `gates`, the typed inputs and `status.rollout` in `rollstate`).

State lives in `status.rollout` (`RolloutState.from_status` / `to_status`), so an operator restart
resumes where it stopped. Each pass `rollactions.rollout_step` calls

    step = next_step(state, observation, update_revision, limits, now)
    state = record_step(state, step, observation, update_revision, now)

and turns the step into the plan's pod deletions, switchovers and Events (one row per
step type in `rollactions.STEP_EFFECTS`, as `RECORDERS` here has one per step type for the state).

Rules:

* A member needs a restart when its pod exists, is not already being deleted and has restart
  reasons (`reasons.restart_reasons`); no reasons, no restart. Missing pods are not restarted:
  `pods.creates` creates them.
* Order (`plan_rollout`): unready members first (restarting them costs nothing), then by ordinal
  descending, as a StatefulSet rolls.
* Before a member is stopped every predicate of `gates.BEFORE_STOP` is evaluated (the group is
  Stable, enough members are available, the restart fits the session timeout, the standby is
  ready, no pod is stuck terminating, the members restarted so far still process); all that fail
  are reported in `status.rollout.blockedBy`.
* A member is done when its pod has the target revision, is ready, holds an assignment in the
  group (the group Stable) and has made progress: it processed a batch, or no record waits on
  its partitions. A restarted member whose container fails (batches failing for good, a crash
  loop, an evicted pod) or that makes no progress within `progressDeadlineSeconds` fails the
  rollout before the next member is touched: `onFailure: Halt` leaves it (phase Halted);
  `Rollback` hands it back, by warm handoff, to the revision the others still run (phase
  RolledBack once it processes there). A new revision starts a new rollout.
* Running late: a member away longer than `at_risk_fraction` of the session timeout -> AtRisk
  (no further member is touched); past the session timeout the broker has rebalanced -> Stopped.
* A warm handoff: the replacement starts in standby beside the old member; once the predicates
  hold the old member is drained and the standby activated the moment the drain answers, then
  the old pod deleted (`actions.Switchover`: the old process's shutdown is off the critical path);
  without a drain (refused, no answer, no address) the old member is stopped and the standby
  activated once the old process closed (and
  only once it is standby-ready: it refuses before, so an old process that went first waits for
  it, within `standbyTimeoutSeconds`); a standby that does not take the activation within
  `ACTIVATION_GIVE_UP_S` of it being sent is replaced by a cold start. A standby that cannot
  be created (quota, admission) or started in `standbyTimeoutSeconds` gets `fallback`: Recreate
  (a cold restart, gated like any stop) or Stop (the rollout stops, the old member keeps
  running).
* Resume: a member already restarted has the new revision, so it is never restarted twice; a pod
  found being deleted is followed as in flight even if the status did not record it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from staticfleet.decisions import gates
from staticfleet.decisions.conditions import (
    WAIT_AVAILABILITY,
    WAIT_GROUP,
    WAIT_MEMBER,
    WAIT_PAUSED,
    WAIT_STOPPED,
    WAIT_UP_TO_DATE,
)
from staticfleet.decisions.gates import GateContext, is_available, replacement_of
from staticfleet.decisions.rollstate import (
    ACTIVATION_GIVE_UP_S,
    AT_RISK_FRACTION,
    MAX_RECHECK_S,
    STABLE_STATES,
    STARTABLE_STATES,
    WARM_HANDOFF,
    Blocker,
    GroupObservation,
    Handoff,
    InFlight,
    ObservedMember,
    Phase,
    RolloutLimits,
    RolloutState,
)

__all__ = [
    "ACTIVATION_GIVE_UP_S", "AT_RISK_FRACTION", "MAX_RECHECK_S", "STABLE_STATES",
    "STARTABLE_STATES", "WARM_HANDOFF", "Blocker", "GroupObservation", "Handoff", "InFlight",
    "ObservedMember", "Phase", "RolloutLimits", "RolloutState", "is_available",
]

ENDED_PHASES = ("AtRisk", "Stopped", "Halted", "RolledBack")
"""A rollout in one of these starts nobody new for its revision."""
WAIT_REASONS = {"NotPaused": WAIT_PAUSED, "GroupStable": WAIT_GROUP,
                "EnoughAvailable": WAIT_AVAILABILITY}
"""The Wait reason of a rollout held back by a predicate (others: WAIT_BLOCKED)."""
WAIT_BLOCKED = "Blocked"
WAIT_FAILED = "RolloutFailed"
MEMBER_FAILING = "MemberFailing"
NO_PROGRESS = "ProgressDeadlineExceeded"


# --- steps ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wait:
    """Nothing to do now. `recheck_after_s`: when to look again (None: on the next event/timer).
    `blocked_by`: the predicates holding the next member back, when that is why."""

    reason: str
    message: str
    recheck_after_s: float | None = None
    blocked_by: tuple[Blocker, ...] = ()


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
    """The replacement is standby-ready and the predicates hold: switch over (drain the old
    member, activate the replacement, delete the old pod: `actions.Switchover`), or stop the old
    member and activate the replacement once the old process has closed (`delete_uid`: the old
    pod, None when it is gone already)."""

    ordinal: int
    delete_uid: str | None
    standby_ready_at: datetime | None


@dataclass(frozen=True)
class HandoffFailed:
    """A replacement failed before it was standby-ready (or could not be made, with fallback
    Stop): delete the replacements still preparing (`ordinals`), keep the old members, stop."""

    ordinal: int
    ordinals: tuple[int, ...]
    message: str


@dataclass(frozen=True)
class RecreateInstead:
    """A standby could not be created or started (quota, admission, timeout) and `fallback` is
    Recreate: restart the old member the cold way (`delete_uid`), its replacement is created
    once it is gone."""

    ordinal: int
    delete_uid: str | None
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
    (`absence_s`, close to rejoin, `at`). It is not done before it has processed."""

    ordinal: int
    absence_s: float
    at: datetime | None = None


@dataclass(frozen=True)
class MarkMemberDone:
    """The member is back and processing; `absence_s` (stop to rejoin) is a restart
    measurement."""

    ordinal: int
    absence_s: float
    processing_gap_s: float | None = None


@dataclass(frozen=True)
class MemberFailed:
    """A restarted member fails on the new revision (`reason`: MEMBER_FAILING or NO_PROGRESS)
    and `message` says how, quoting its own error. `rollback`: hand it back to the revision the
    other members run (onFailure Rollback); else the rollout halts."""

    ordinal: int
    reason: str
    message: str
    rollback: bool = False


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


Step = (Wait | RestartMembers | PrepareReplacements | HandOver | HandoffFailed | RecreateInstead
        | FallBackCold | MemberRejoined | MarkMemberDone | MemberFailed | StopAtRisk | Complete
        | RefuseToStart)


@dataclass(frozen=True)
class RolloutPlan:
    """Ordinals needing a restart, in the order they will be restarted."""

    ordinals: tuple[int, ...]


# --- decisions -----------------------------------------------------------------------------------


def needs_restart(member: ObservedMember) -> bool:
    """A live pod (not being deleted, not Failed) with reasons to restart."""
    return (member.pod_exists and member.stopped_at is None and member.pod_failed is None
            and bool(member.restart_reasons))


def has_rejoined(member: ObservedMember | None, revision: str) -> bool:
    """The replacement (of `revision`) is in the group with an assignment: the broker no longer
    holds its place against the session timeout."""
    return (
        member is not None
        and member.pod_exists
        and member.stopped_at is None
        and member.revision == revision
        and member.in_group
    )


def is_done(member: ObservedMember | None, revision: str, group_state: str) -> bool:
    """Back after a restart: `revision`, ready, assigned again, and the group is Stable."""
    return (has_rejoined(member, revision) and member is not None and member.ready
            and group_state in STABLE_STATES)


def progressed(member: ObservedMember, lag: Mapping[tuple[str, int], int] | None,
               lag_read_at: datetime | None = None, since: datetime | None = None) -> bool:
    """It processed real records (its process committed a batch), or none waits on its
    partitions (the broker's lag is 0 there, or it holds none) by figures read after `since`
    (its return to the group): lag read before it came back, or end offsets cached from a
    minute ago, says nothing of the records that wait for it now."""
    if member.first_batch_at is not None:
        return True
    if lag is None:
        return False
    if since is not None and (lag_read_at is None or lag_read_at < since):
        return False
    return not any(lag.get(tp, 0) for tp in member.assignment)


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
    phase = state.phase if same_rollout else "Pending"
    ctx = GateContext(state if same_rollout else RolloutState(), observed, limits,
                      _in_flight(state, observed, update_revision, now), update_revision, now)

    # 1: A restarted member fails, or makes no progress in time: the rollout fails.
    failed = _failed(ctx)
    if failed is not None:
        return failed
    # 2: A member in flight is done: back, ready and processing on its revision.
    for f in ctx.in_flight:
        member = observed.member(f.ordinal)
        if (is_done(member, _target(f, update_revision), observed.group_state)
                and member is not None
                and progressed(member, observed.lag, observed.lag_read_at(now),
                               f.rejoined_at or f.stopped_at)):
            return (_expired(ctx, f, phase)
                    or MarkMemberDone(f.ordinal, f.absence_s(_rejoined_at(f, member, now)),
                                      _gap_s(f, member)))
    # 3: A member in flight is back in the group: its absence ends (an absence seen only now
    # to be longer than the session timeout, a frozen old process's, is a rebalance).
    for f in ctx.in_flight:
        if (f.stopped_at is not None and f.rejoined_at is None
                and has_rejoined(observed.member(f.ordinal), _target(f, update_revision))):
            at = _rejoined_at(f, observed.member(f.ordinal), now)
            return _expired(ctx, f, phase) or MemberRejoined(f.ordinal, f.absence_s(at), at)
    # 4: A warm handoff's own steps (the standby failed, cannot be made, is ready, is late).
    warm = _follow_warm(ctx)
    if warm is not None and not isinstance(warm, Wait):
        return warm
    # 5: A member away too long against the session timeout: stop touching others.
    late = _late(ctx, phase)
    if isinstance(late, StopAtRisk):
        return late
    recheck = min(MAX_RECHECK_S, late or MAX_RECHECK_S,
                  (warm.recheck_after_s if warm is not None else None) or MAX_RECHECK_S)
    # 6: Members still in flight: wait for them (and say which predicates hold a stop back).
    if warm is not None and warm.blocked_by:
        return replace(warm, recheck_after_s=recheck)
    if ctx.in_flight:
        return Wait(WAIT_MEMBER, _waiting_for(ctx.in_flight), recheck)
    # 7: Nothing in flight: finished, ended, or start the next restart(s) the predicates allow.
    plan = plan_rollout(observed.members)
    if not plan.ordinals:
        if same_rollout and phase in ("Complete", "Idle"):
            return Wait(WAIT_UP_TO_DATE, f"every member runs revision {update_revision}")
        if same_rollout and phase == "RolledBack":
            return Wait(WAIT_FAILED, state.reason)
        return Complete()
    if same_rollout and phase in ENDED_PHASES:
        code = WAIT_STOPPED if phase in ("AtRisk", "Stopped") else WAIT_FAILED
        return Wait(code, state.reason or "the rollout stopped: a restart ran late",
                    blocked_by=(Blocker(f"Rollout{phase}", state.reason),))
    if not limits.restart_safe and not limits.paused:
        return RefuseToStart(limits.needed_session_ms or limits.session_timeout_ms,
                             refusal_message(limits))
    return _start(ctx, plan)


def _target(f: InFlight, update_revision: str) -> str:
    return f.revision or update_revision


def _start(ctx: GateContext, plan: RolloutPlan) -> Step:
    """The next member(s) to restart (Recreate) or to prepare a standby for (WarmHandoff), as
    many as `maxUnavailable` / `maxSurge` allow and the predicates let through."""
    limits, warm = ctx.limits, ctx.limits.strategy == WARM_HANDOFF
    predicates = gates.BEFORE_PREPARE if warm else gates.BEFORE_STOP
    at_once = limits.max_surge if warm else limits.max_unavailable
    pick: list[int] = []
    first_blockers: tuple[Blocker, ...] = ()
    for ordinal in plan.ordinals:
        if len(pick) >= at_once:
            break
        blocked = gates.blockers(ctx, ordinal, predicates)
        if blocked:
            first_blockers = first_blockers or blocked
            continue
        pick.append(ordinal)
        if not warm:  # the next candidate sees this one stopped
            ctx = replace(ctx, in_flight=(*ctx.in_flight, InFlight(ordinal, ctx.now)))
    if not pick:
        return _blocked_wait(first_blockers)
    return PrepareReplacements(tuple(pick)) if warm else RestartMembers(tuple(pick))


def _blocked_wait(blocked: tuple[Blocker, ...], recheck: float = 2.0) -> Wait:
    first = blocked[0]
    return Wait(WAIT_REASONS.get(first.name, WAIT_BLOCKED),
                "; ".join(f"{b.name}: {b.message}" for b in blocked), recheck, blocked)


def _failed(ctx: GateContext) -> MemberFailed | None:
    """A member stopped in this rollout whose replacement fails on its revision, or has not
    processed within the progress deadline."""
    limits, rollback = ctx.limits, ctx.limits.on_failure == "Rollback"
    for f in ctx.in_flight:
        if f.stopped_at is None:
            continue
        member = ctx.observed.member(f.ordinal)
        target = _target(f, ctx.update_revision)
        back_to = rollback and f.revision is None  # a rollback that fails is not rolled back
        if member is not None and member.revision == target and member.stopped_at is None:
            trouble = member.pod_failed or member.failure or member.crash
            if trouble is not None:
                return MemberFailed(f.ordinal, MEMBER_FAILING, (
                    f"member {f.ordinal} fails on revision {target}: {trouble}"), back_to)
        waited = (ctx.now - f.stopped_at).total_seconds()
        if waited > limits.progress_deadline_s:
            return MemberFailed(f.ordinal, NO_PROGRESS, (
                f"member {f.ordinal} has not processed on revision {target} within "
                f"spec.rollout.progressDeadlineSeconds ({limits.progress_deadline_s:.0f} s) "
                "while records wait on its partitions"), back_to)
    return None


def _expired(ctx: GateContext, f: InFlight, phase: str) -> StopAtRisk | None:
    """A member whose absence, not yet ended when first seen, is past the session timeout."""
    if f.rejoined_at is not None or phase == "Stopped":
        return None
    late = _late(replace(ctx, in_flight=(f,)), phase)
    return late if isinstance(late, StopAtRisk) and late.expired else None


def _late(ctx: GateContext, phase: str) -> StopAtRisk | float | None:
    """A member away past the at-risk mark or the session timeout, or when to look again."""
    limits, now = ctx.limits, ctx.now
    session_ms = limits.session_timeout_ms
    risk_ms = session_ms * limits.at_risk_fraction
    needed = limits.needed_session_ms or session_ms
    recheck: float | None = None
    for f in ctx.in_flight:
        if f.rejoined_at is not None or f.stopped_at is None:
            continue  # back in the group, or not stopped yet: the session timeout is not running
        absence_s = f.absence_s(now)
        absence_ms = absence_s * 1000
        if absence_ms > session_ms and phase != "Stopped":
            return StopAtRisk(
                f.ordinal, absence_s, needed,
                f"member {f.ordinal} has been away {absence_s:.1f} s, longer than the session "
                f"timeout {session_ms} ms: the broker has rebalanced the group. The rollout stops; "
                "a new revision (raised timeouts or a restartNonce change) starts a new one",
                expired=True)
        if absence_ms > risk_ms and phase not in ("AtRisk", "Stopped"):
            return StopAtRisk(
                f.ordinal, absence_s, needed,
                f"member {f.ordinal} has been away {absence_s:.1f} s, more than "
                f"{limits.at_risk_fraction:.0%} of the session timeout {session_ms} ms, and is not "
                "back in the group: no further member will be restarted until it is")
        next_mark = risk_ms if absence_ms <= risk_ms else session_ms
        wait = max(0.5, (next_mark - absence_ms) / 1000)
        recheck = wait if recheck is None else min(recheck, wait)
    return recheck


def _waiting_for(in_flight: Sequence[InFlight]) -> str:
    preparing = [str(f.ordinal) for f in in_flight if f.stopped_at is None]
    away = [str(f.ordinal) for f in in_flight if f.rejoined_at is None and f.stopped_at is not None]
    back = [str(f.ordinal) for f in in_flight if f.rejoined_at is not None]
    parts = []
    if preparing:
        parts.append(f"the standby replacement(s) of member(s) {', '.join(preparing)} to be ready")
    if away:
        parts.append(f"member(s) {', '.join(away)} to rejoin the group")
    if back:
        parts.append(f"member(s) {', '.join(back)} (back in the group) to process on the new "
                     "revision")
    return "waiting for " + " and ".join(parts)


def _rejoined_at(f: InFlight, member: ObservedMember | None, now: datetime) -> datetime:
    """When the member came back: as recorded, else its process's own first assignment (to the
    millisecond, from its clock) when that falls between its absence's start and now, else
    now (the pass that sees it back)."""
    if f.rejoined_at is not None:
        return f.rejoined_at
    joined = member.first_assignment_at if member is not None else None
    since = f.away_since
    if joined is not None and since is not None and since <= joined <= now:
        return joined
    return now


def _gap_s(f: InFlight, member: ObservedMember | None) -> float | None:
    """Old process's last batch (as last read) -> replacement's first batch."""
    if member is None or member.first_batch_at is None or f.old_last_batch_at is None:
        return None
    return max(0.0, (member.first_batch_at - f.old_last_batch_at).total_seconds())


# Long: one loop over the handoffs in flight, one branch per warm-handoff step it may return.
def _follow_warm(ctx: GateContext) -> Step | None:
    """A warm handoff's own steps: the replacement failed, cannot be made or is late (fall
    back, or stop), it is standby-ready (stop the old member once the predicates hold), or it
    does not take the activation (fall back to a cold start)."""
    observed, limits, now = ctx.observed, ctx.limits, ctx.now
    preparing = tuple(f.ordinal for f in ctx.in_flight if f.stopped_at is None)
    soonest: float | None = None
    held: Wait | None = None  # the first member the predicates hold back; others may go on
    for f in ctx.in_flight:
        if f.mode != "warm":
            continue
        member = observed.member(f.ordinal)
        rep = replacement_of(f, member)
        if f.stopped_at is None:
            cannot, no_room = _cannot_prepare(f, rep, ctx)
            if cannot is not None:
                if (no_room and limits.fallback == "Recreate" and f.revision is None
                        and member is not None and member is not rep):
                    cold = replace(ctx, in_flight=tuple(
                        replace(x, mode="cold") if x.ordinal == f.ordinal else x
                        for x in ctx.in_flight))
                    blocked = gates.blockers(cold, f.ordinal)
                    if blocked:
                        held = held or _blocked_wait((Blocker("ReplacementCreated", cannot),
                                                      *blocked))
                        continue
                    return RecreateInstead(f.ordinal, member.pod_uid, cannot + (
                        f"; spec.rollout.fallback is Recreate: member {f.ordinal} is restarted "
                        "the cold way instead, inside the session timeout"))
                return HandoffFailed(f.ordinal, preparing, cannot + (
                    f". Member {f.ordinal} keeps running on its old revision and nothing "
                    "rebalanced; fix the cause and change the spec (or spec.rollout.restartNonce) "
                    "to roll again"))
            if rep is not None and member is not None and rep is member:
                # The old member went first (deleted, or lost with its node): nothing to stop.
                return HandOver(f.ordinal, None, rep.standby_ready_at)
            if member is None:
                return HandOver(f.ordinal, None, None)
            if rep is not None and rep.standby_state == "ready":
                blocked = gates.blockers(ctx, f.ordinal)
                if blocked:
                    held = held or _blocked_wait(blocked, 1.0)
                    continue
                return HandOver(f.ordinal, member.pod_uid, rep.standby_ready_at or now)
            left = limits.standby_timeout_s - (now - (f.prepared_at or now)).total_seconds()
            soonest = min(soonest or 1.0, max(0.5, min(1.0, left)))
            continue
        if f.rejoined_at is not None or f.closed_at is None:
            continue
        active = rep is not None and rep.standby_state is None and rep.answers
        # The deadline for taking the activation runs from when it was first sent (so never
        # in the pass that sends it), or from the close when it could not be sent (no pod, no
        # address).
        sent = f.activated_at
        if (not active and sent is None and rep is not None and rep.answers
                and rep.standby_state == "warming"):
            # The old process went first (deleted, lost with its node) while the standby still
            # warms up: it refuses an activation until it is standby-ready, and gets it then,
            # within standbyTimeoutSeconds of its preparation like any standby.
            left = limits.standby_timeout_s - (now - (f.prepared_at or now)).total_seconds()
            if left > 0:
                soonest = min(soonest or 1.0, max(0.5, min(1.0, left)))
                continue
            return FallBackCold(f.ordinal, (
                f"the standby replacement of member {f.ordinal} (pod {rep.pod_name}) was not "
                f"standby-ready within spec.rollout.standbyTimeoutSeconds "
                f"({limits.standby_timeout_s:.0f} s) and its old process is gone; it is "
                "replaced by a cold start, which must fit in the session timeout"))
        waited = (now - (sent or f.closed_at)).total_seconds()
        if not active and waited > ACTIVATION_GIVE_UP_S:
            who = f"pod {rep.pod_name}" if rep is not None else "its pod"
            what = (f"within {ACTIVATION_GIVE_UP_S:.0f} s of the activation"
                    if sent is not None else "(it could not be sent)")
            return FallBackCold(f.ordinal, (
                f"the standby replacement of member {f.ordinal} ({who}) did not take the "
                f"activation {what}; it is replaced by a cold start, which must fit in the "
                "session timeout"))
        soonest = min(soonest or 0.5, 0.5)
    if held is not None:
        return held
    if soonest is not None:
        return Wait(WAIT_MEMBER, "warm handoff under way", soonest)
    return None


def _cannot_prepare(f: InFlight, rep: ObservedMember | None,
                    ctx: GateContext) -> tuple[str | None, bool]:
    """Why the standby replacement of `f` will not be standby-ready, and whether that is a
    lack of room (the API server refused it, or it is still Pending or missing at the standby
    timeout: `fallback` applies) rather than the revision failing (it failed, or it runs and
    did not get ready: the rollout stops). (None, False) while it may still get there."""
    if rep is not None and rep.failure is not None:
        return (f"the replacement of member {f.ordinal} (pod {rep.pod_name}) failed before it "
                f"was standby-ready: {rep.failure}"), False
    refusal = ctx.observed.refused.get(f.replacement or "")
    if refusal is not None:
        return (f"the replacement of member {f.ordinal} (pod {f.replacement}) could not be "
                f"created: {refusal}"), True
    waited = (ctx.now - (f.prepared_at or ctx.now)).total_seconds()
    if waited > ctx.limits.standby_timeout_s and not (rep is not None
                                                        and rep.standby_state == "ready"):
        where = (f"pod {rep.pod_name} is {rep.pod_phase}" if rep is not None
                 else "its pod does not exist")
        pending = rep is None or rep.pod_phase in (None, "Pending")
        return (f"the replacement of member {f.ordinal} was not standby-ready within "
                f"spec.rollout.standbyTimeoutSeconds ({ctx.limits.standby_timeout_s:.0f} s; "
                f"{where}); see the replacement's Events and log for what took the time"
                ), pending
    return None, False


# --- the state after a step ----------------------------------------------------------------------


@dataclass(frozen=True)
class Recording:
    """What `record_step`'s rows see besides the state and the step."""

    observed: GroupObservation
    update_revision: str
    now: datetime
    plan: tuple[int, ...]


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
    state = replace(state, in_flight=_in_flight(state, observed, update_revision, now),
                    blocked_by=())
    rec = Recording(observed, update_revision, now, plan_rollout(observed.members).ordinals)
    return RECORDERS[type(step)](state, step, rec)


def _record_start(state: RolloutState, step: Step, rec: Recording) -> RolloutState:
    assert isinstance(step, RestartMembers | PrepareReplacements)
    warm = isinstance(step, PrepareReplacements)
    added = tuple(
        InFlight(o, None, pod_uid=_uid(rec.observed, o), mode="warm",
                 replacement=rec.observed.replacement_names.get(o), prepared_at=rec.now)
        if warm else InFlight(o, rec.now, pod_uid=_uid(rec.observed, o))
        for o in step.ordinals)
    doing = ("starting the standby replacement(s) of member(s) " if warm
             else "restarting member(s) ")
    return replace(
        state, phase="Rolling", reason=doing + ", ".join(map(str, step.ordinals)),
        started_at=state.started_at or rec.now, finished_at=None, rebalances_during=None,
        rebalances_at_start=(rec.observed.rebalances if state.rebalances_at_start is None
                             else state.rebalances_at_start),
        strategy=state.strategy or (WARM_HANDOFF if warm else "Recreate"),
        in_flight=state.in_flight + added,
        pending=tuple(o for o in rec.plan if o not in set(step.ordinals)))


def _record_hand_over(state: RolloutState, step: Step, rec: Recording) -> RolloutState:
    assert isinstance(step, HandOver)
    return replace(
        state,
        reason=f"member {step.ordinal}: replacement standby-ready, stopping the old member",
        in_flight=tuple(
            replace(f, stopped_at=rec.now, standby_ready_at=step.standby_ready_at,
                    pod_uid=step.delete_uid or f.pod_uid)
            if f.ordinal == step.ordinal else f for f in state.in_flight),
        pending=rec.plan)


def _record_handoff_failed(state: RolloutState, step: Step, rec: Recording) -> RolloutState:
    assert isinstance(step, HandoffFailed)
    dropped = set(step.ordinals) | {step.ordinal}
    return replace(
        state, phase="Stopped", reason=step.message, finished_at=rec.now,
        rebalances_during=_during(state, rec.observed),
        in_flight=tuple(f for f in state.in_flight if f.ordinal not in dropped),
        pending=rec.plan)


def _record_recreate_instead(state: RolloutState, step: Step, rec: Recording) -> RolloutState:
    assert isinstance(step, RecreateInstead)
    return replace(
        state, reason=step.message,
        in_flight=tuple(replace(f, mode="cold", stopped_at=rec.now, replacement=None,
                                pod_uid=step.delete_uid or f.pod_uid)
                        if f.ordinal == step.ordinal else f for f in state.in_flight),
        pending=rec.plan)


def _record_fall_back(state: RolloutState, step: Step, rec: Recording) -> RolloutState:
    assert isinstance(step, FallBackCold)
    return replace(
        state, reason=step.message,
        in_flight=tuple(replace(f, mode="cold") if f.ordinal == step.ordinal else f
                        for f in state.in_flight),
        pending=rec.plan)


def _record_rejoined(state: RolloutState, step: Step, rec: Recording) -> RolloutState:
    assert isinstance(step, MemberRejoined)
    return replace(
        state,
        # Back before the session timeout: a rollout at risk is no longer at risk.
        phase="Rolling" if state.phase == "AtRisk" else state.phase,
        reason=f"member {step.ordinal} back in the group after {step.absence_s:.1f} s",
        in_flight=tuple(replace(f, rejoined_at=step.at or rec.now)
                        if f.ordinal == step.ordinal else f for f in state.in_flight),
        longest_absence_ms=max(state.longest_absence_ms, round(step.absence_s * 1000)),
        pending=rec.plan)


def _record_done(state: RolloutState, step: Step, rec: Recording) -> RolloutState:
    assert isinstance(step, MarkMemberDone)
    absence_ms = round(step.absence_s * 1000)
    done = next((f for f in state.in_flight if f.ordinal == step.ordinal), None)
    gap_ms = None if step.processing_gap_s is None else round(step.processing_gap_s * 1000)
    handoff = Handoff(
        step.ordinal, done.mode if done else "cold", absence_ms, gap_ms,
        _ms_between(done.prepared_at, done.standby_ready_at) if done else None,
        absent_from=done.away_since if done else None,
        gap_from=done.old_last_batch_at if done else None)
    after = replace(
        state,
        handoffs=(*state.handoffs, handoff),
        longest_gap_ms=(state.longest_gap_ms if gap_ms is None
                        else max(state.longest_gap_ms or 0, gap_ms)),
        in_flight=tuple(f for f in state.in_flight if f.ordinal != step.ordinal),
        longest_absence_ms=max(state.longest_absence_ms, absence_ms),
        pending=rec.plan)
    if done is not None and done.revision is not None:
        # A rollback finished: the member processes on the revision it was handed back to.
        return replace(after, phase="RolledBack", finished_at=rec.now,
                       rebalances_during=_during(state, rec.observed),
                       reason=(f"{state.failure or 'the rollout failed'}. Member "
                               f"{step.ordinal} was handed back to "
                               f"revision {done.revision} and processes again (it was away "
                               f"{step.absence_s:.1f} s); fix the spec to roll again"))
    if state.phase in ("Stopped", "Halted", "RolledBack"):
        return after
    return replace(after, phase="Rolling",
                   members_restarted=(*state.members_restarted, step.ordinal),
                   reason=f"member {step.ordinal} processing again (it was away "
                          f"{step.absence_s:.1f} s)")


def _record_failed(state: RolloutState, step: Step, rec: Recording) -> RolloutState:
    assert isinstance(step, MemberFailed)
    failed = next(f for f in state.in_flight if f.ordinal == step.ordinal)
    if step.rollback and rec.observed.rollback_revision is not None:
        back = rec.observed.rollback_revision
        handback = InFlight(step.ordinal, None, pod_uid=_uid(rec.observed, step.ordinal),
                            mode="warm", prepared_at=rec.now, revision=back,
                            replacement=rec.observed.rollback_names.get(step.ordinal),
                            old_last_batch_at=failed.old_last_batch_at)
        return replace(
            state, phase="Rolling", rolled_back_to=back, failure=step.message,
            reason=(f"{step.message}; rolling member {step.ordinal} back to revision {back} "
                    "(spec.rollout.onFailure: Rollback) by warm handoff"),
            in_flight=(handback,), pending=rec.plan)
    why = step.message + ("" if not step.rollback else (
        "; no revision to roll back to is known (no rollout completed before), so it halts"))
    return replace(
        state, phase="Halted", finished_at=rec.now, failure=step.message,
        rebalances_during=_during(state, rec.observed),
        reason=(f"{why}. The rollout halted (spec.rollout.onFailure: Halt); the members on the "
                "old revision keep serving. Fix the spec (or the transform) to roll again"
                if not step.rollback else why + ". The members on the old revision keep "
                "serving. Fix the spec (or the transform) to roll again"),
        in_flight=(), pending=rec.plan)


def _record_at_risk(state: RolloutState, step: Step, rec: Recording) -> RolloutState:
    assert isinstance(step, StopAtRisk)
    return replace(
        state,
        phase="Stopped" if step.expired else "AtRisk",
        reason=step.message,
        finished_at=rec.now if step.expired else None,
        rebalances_during=_during(state, rec.observed) if step.expired else None,
        longest_absence_ms=max(state.longest_absence_ms, round(step.absence_s * 1000)),
        pending=rec.plan)


def _record_complete(state: RolloutState, step: Step, rec: Recording) -> RolloutState:
    return replace(
        state, phase="Complete", reason=f"every member runs revision {rec.update_revision}",
        finished_at=rec.now, rebalances_during=_during(state, rec.observed),
        in_flight=(), pending=())


def _record_refusal(state: RolloutState, step: Step, rec: Recording) -> RolloutState:
    assert isinstance(step, RefuseToStart)
    return replace(state, phase="Pending", reason=step.message, pending=rec.plan,
                   blocked_by=(Blocker("RestartFitsSessionTimeout", step.message),))


def _record_wait(state: RolloutState, step: Step, rec: Recording) -> RolloutState:
    assert isinstance(step, Wait)
    phase: Phase = state.phase
    if step.reason == WAIT_PAUSED:
        phase = "Paused"
    elif state.phase == "Paused":
        phase = "Rolling" if state.started_at else "Pending"
    return replace(state, phase=phase, reason=step.message, pending=rec.plan,
                   blocked_by=step.blocked_by)


RECORDERS: Mapping[type, Callable[[RolloutState, Step, Recording], RolloutState]] = {
    Wait: _record_wait,
    RestartMembers: _record_start,
    PrepareReplacements: _record_start,
    HandOver: _record_hand_over,
    HandoffFailed: _record_handoff_failed,
    RecreateInstead: _record_recreate_instead,
    FallBackCold: _record_fall_back,
    MemberRejoined: _record_rejoined,
    MarkMemberDone: _record_done,
    MemberFailed: _record_failed,
    StopAtRisk: _record_at_risk,
    Complete: _record_complete,
    RefuseToStart: _record_refusal,
}
"""One row per step type: the rollout state after it."""


def _in_flight(state: RolloutState, observed: GroupObservation, update_revision: str,
               now: datetime) -> tuple[InFlight, ...]:
    """The recorded in-flight members plus any outdated pod found being deleted (resume after a
    crash between deleting a pod and recording it), oldest first, with what this pass saw of
    them: the old process's close, last batch and last answer, the activation sent. A pod of
    the update revision being deleted is not a restart of the roller's (someone deleted it,
    or its node went): the member is recreated, and no rollout stops because of it."""
    known = {f.ordinal: f for f in state.in_flight}
    for m in observed.members:
        if (m.stopped_at is not None and m.ordinal not in known
                and m.revision != update_revision):
            known[m.ordinal] = InFlight(m.ordinal, m.stopped_at, pod_uid=m.pod_uid)
    for ordinal, f in known.items():
        uid = f.pod_uid or ""
        closed = observed.closures.get(uid)
        last = observed.last_batches.get(uid)
        known[ordinal] = replace(
            f,
            closed_at=f.closed_at or closed,
            old_last_batch_at=(last if last is not None and (
                f.old_last_batch_at is None or last > f.old_last_batch_at)
                else f.old_last_batch_at),
            old_last_seen_at=_latest(f.old_last_seen_at, observed.last_seen.get(uid)),
            activated_at=(f.activated_at or (now if ordinal in observed.activating else None)))
    return tuple(sorted(known.values(), key=lambda f: f.order))


def _latest(*moments: datetime | None) -> datetime | None:
    known = [m for m in moments if m is not None]
    return max(known) if known else None


def _uid(observed: GroupObservation, ordinal: int) -> str | None:
    member = observed.member(ordinal)
    return member.pod_uid if member else None


def _ms_between(start: datetime | None, end: datetime | None) -> int | None:
    if start is None or end is None:
        return None
    return max(0, round((end - start).total_seconds() * 1000))


def _during(state: RolloutState, observed: GroupObservation) -> int | None:
    """The rebalances of a rollout that finishes now."""
    if state.rebalances_at_start is None:
        return None
    return max(0, observed.rebalances - state.rebalances_at_start)
