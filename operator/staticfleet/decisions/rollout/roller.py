"""When to restart which member: the roller's pure decision, `next_step`.

The roller is the room `rollout/`: this module decides the next step; `steps` types the steps
it may decide; `warm` follows a warm handoff's own steps; `record` says what state follows a
step; `state` types the inputs and the memory (`status.rollout`). The "why" of a restart is
in `decisions.reasons`, the safety checks in `gates`.

State lives in `status.rollout` (`RolloutState.from_status` / `to_status`), so an operator restart
resumes where it stopped. Each pass `effects.rollout_step` calls

    decided = roller.next_step(state, observation, update_revision, limits, now)
    state = record.record_step(state, decided, observation, update_revision, now)

and turns the step into the plan's pod deletions, switchovers and Events (one row per step type
in `effects.effects`, as `record.state_after` has one per step type for the state).
`next_step` hands over what it derived (the members in flight, the order), so the record
derives nothing again.

Rules:

* A member needs a restart when its pod exists, is not already being deleted and has restart
  reasons (`reasons.restart_reasons`); no reasons, no restart. Missing pods are not restarted:
  `pods.creates` creates them.
* Order (`plan_rollout`): unready members first (restarting them costs nothing), then by ordinal
  descending, as a StatefulSet rolls.
* Before a member is stopped every predicate of `gates.BEFORE_STOP` is evaluated (the group is
  Stable, enough members are available, the restart fits the session timeout, a KIP-848
  group's session timeout is widened for the rollout, the standby is ready, no pod is stuck
  terminating, the members restarted so far still process); all that fail are reported in
  `status.rollout.blockedBy`.
* A member is done when its pod has the target revision, is ready, holds an assignment in the
  group (the group Stable) and has made progress: it processed a batch, or no record waits on
  its partitions. A restarted member whose container fails (batches failing for good, a crash
  loop, an evicted pod) or that makes no progress within `progressDeadlineSeconds` fails the
  rollout before the next member is touched: `onFailure: Halt` leaves it (phase Halted);
  `Rollback` hands it back, by warm handoff, to the revision the others still run, then every
  member this rollout restarted, newest first, one at a time (`record`; phase RolledBack
  once the last processes there). A new revision starts a new rollout.
* Running late: a member away longer than `at_risk_fraction` of the session timeout -> AtRisk
  (no further member is touched); past the session timeout the broker has rebalanced -> Stopped.
* A warm handoff (its own steps in `warm`): the replacement starts in standby beside the old
  member; once the predicates hold the old member is drained and the standby activated the
  moment the drain answers, then the old pod deleted (`actions.Switchover`: the old process's
  shutdown is off the critical path); without a drain (refused, no answer, no address) the old
  member is stopped and the standby activated once the old process closed (and only once it is
  standby-ready: it refuses before, so an old process that went first waits for it, within
  `standbyTimeoutSeconds`); a standby that does not take the activation within
  `ACTIVATION_GIVE_UP_S` of it being sent is replaced by a cold start. A standby that cannot
  be created (quota, admission) or started in `standbyTimeoutSeconds` gets `fallback`: Recreate
  (a cold restart, gated like any stop) or Stop (the rollout stops, the old member keeps
  running).
* Resume: a member already restarted has the new revision, so it is never restarted twice; a pod
  found being deleted is followed as in flight even if the status did not record it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from staticfleet.decisions.conditions import (
    MEMBER_FAILING,
    NO_PROGRESS,
    WAIT_FAILED,
    WAIT_MEMBER,
    WAIT_STOPPED,
    WAIT_UP_TO_DATE,
)
from staticfleet.decisions.members.observed import ObservedMember
from staticfleet.decisions.rollout import gates
from staticfleet.decisions.rollout.gates import GateContext
from staticfleet.decisions.rollout.state import (
    MAX_RECHECK_S,
    STABLE_STATES,
    WARM_HANDOFF,
    Blocker,
    GroupObservation,
    InFlight,
    RolloutLimits,
    RolloutState,
)
from staticfleet.decisions.rollout.steps import (
    Complete,
    Decided,
    MarkMemberDone,
    MemberFailed,
    MemberRejoined,
    PrepareReplacements,
    RefuseToStart,
    RestartMembers,
    Step,
    StopAtRisk,
    Wait,
    blocked_wait,
)
from staticfleet.decisions.rollout.warm import follow_warm

ENDED_PHASES = ("AtRisk", "Stopped", "Halted", "RolledBack")
"""A rollout in one of these starts nobody new for its revision."""


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
    if limits.widen_cap_ms is not None:
        return (
            f"restarts need a session timeout of {needed} ms{which} but a rollout may widen "
            f"it to at most {limits.widen_cap_ms} ms (the broker's "
            "group.consumer.max.session.timeout.ms or "
            "spec.membership.autoTuning.maxSessionTimeoutMs): restarting would cause "
            "rebalances. Look at why that restart was slow, raise the broker's maximum or "
            "maxSessionTimeoutMs, or make members start faster")
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
) -> Decided:
    """What the roller should do now, with what it derived on the way: the members in flight
    and the order of the restarts (`Decided`, which `record.record_step` records). Pure:
    same inputs, same step."""
    same_rollout = state.revision == update_revision
    in_flight = members_in_flight(state, observed, update_revision, now)
    order = plan_rollout(observed.members).ordinals
    ctx = GateContext(state if same_rollout else RolloutState(), observed, limits, in_flight,
                      update_revision, now)
    step = _step(ctx, state, same_rollout, order)
    # A new revision starts a new rollout, which records of the members in flight only the
    # outdated pods found being deleted (this pass's step still waited for the old ones).
    recorded = (in_flight if same_rollout
                else members_in_flight(RolloutState(), observed, update_revision, now))
    return Decided(step, recorded, order)


def _step(ctx: GateContext, state: RolloutState, same_rollout: bool,
          order: tuple[int, ...]) -> Step:
    """`next_step`'s decision, in numbered steps."""
    observed, limits, now = ctx.observed, ctx.limits, ctx.now
    update_revision = ctx.update_revision
    phase = state.phase if same_rollout else "Pending"

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
    warm = follow_warm(ctx)
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
    if not order:
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
    return _start(ctx, order)


def _target(f: InFlight, update_revision: str) -> str:
    return f.revision or update_revision


def _start(ctx: GateContext, order: tuple[int, ...]) -> Step:
    """The next member(s) to restart (Recreate) or to prepare a standby for (WarmHandoff), as
    many as `maxUnavailable` / `maxSurge` allow and the predicates let through."""
    limits, warm = ctx.limits, ctx.limits.strategy == WARM_HANDOFF
    predicates = gates.BEFORE_PREPARE if warm else gates.BEFORE_STOP
    at_once = limits.max_surge if warm else limits.max_unavailable
    pick: list[int] = []
    first_blockers: tuple[Blocker, ...] = ()
    for ordinal in order:
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
        return blocked_wait(first_blockers)
    return PrepareReplacements(tuple(pick)) if warm else RestartMembers(tuple(pick))



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


def members_in_flight(state: RolloutState, observed: GroupObservation, update_revision: str,
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
        closed = observed.closed_by_pod.get(uid)
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

