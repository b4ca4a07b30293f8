"""The rollout state after a step (pure): `record_step`, one row per step type in
`state_after` (a `functools.singledispatch`: each row is registered for its step type). Call it
after the apply layer acted on the step `roller.next_step` decided; the state it returns is
what `status.rollout` records (`state.RolloutState`). It derives nothing of its own: the
members in flight and the order come with the step (`steps.Decided`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from datetime import datetime

from staticfleet.decisions.conditions import WAIT_PAUSED
from staticfleet.decisions.rollout.state import (
    WARM_HANDOFF,
    Blocker,
    GroupObservation,
    Handoff,
    InFlight,
    Phase,
    RolloutState,
)
from staticfleet.decisions.rollout.steps import (
    Complete,
    Decided,
    FallBackCold,
    HandoffFailed,
    HandOver,
    MarkMemberDone,
    MemberFailed,
    MemberRejoined,
    PrepareReplacements,
    RecreateInstead,
    RefuseToStart,
    RestartMembers,
    Step,
    StopAtRisk,
    Wait,
)

FINISHED = ("Stopped", "Halted", "RolledBack")
"""The phases a rollout ends in: its reason says why, until a new revision starts a new one."""


@dataclass(frozen=True)
class Recording:
    """What `record_step`'s rows see besides the state and the step."""

    observed: GroupObservation
    update_revision: str
    now: datetime
    order: tuple[int, ...]
    """The members that still need a restart, in order (`steps.Decided.order`)."""


def record_step(
    state: RolloutState,
    decided: Decided,
    observed: GroupObservation,
    update_revision: str,
    now: datetime,
) -> RolloutState:
    """The rollout state after `decided.step` was carried out (call after the apply layer
    acted)."""
    if state.revision != update_revision:
        state = RolloutState(revision=update_revision, phase="Pending")
    state = replace(state, in_flight=decided.in_flight, blocked_by=())
    return state_after(decided.step, state, Recording(observed, update_revision, now,
                                                      decided.order))


@functools.singledispatch
def state_after(step: Step, state: RolloutState, rec: Recording) -> RolloutState:
    """The rollout state after `step`: one row per step type, registered below."""
    raise TypeError(f"no row in state_after for the step {type(step).__name__}")


@state_after.register
def _record_restart(step: RestartMembers, state: RolloutState, rec: Recording) -> RolloutState:
    return _record_start(step.ordinals, False, state, rec)


@state_after.register
def _record_prepare(step: PrepareReplacements, state: RolloutState,
                    rec: Recording) -> RolloutState:
    return _record_start(step.ordinals, True, state, rec)


def _record_start(ordinals: tuple[int, ...], warm: bool, state: RolloutState,
                  rec: Recording) -> RolloutState:
    """Members restarted (`warm`: their standby replacements started) now."""
    added = tuple(
        InFlight(o, None, pod_uid=_uid(rec.observed, o), mode="warm",
                 replacement=rec.observed.replacement_names.get(o), prepared_at=rec.now)
        if warm else InFlight(o, rec.now, pod_uid=_uid(rec.observed, o))
        for o in ordinals)
    doing = ("starting the standby replacement(s) of member(s) " if warm
             else "restarting member(s) ")
    return replace(
        state, phase="Rolling", reason=doing + ", ".join(map(str, ordinals)),
        started_at=state.started_at or rec.now, finished_at=None, rebalances_during=None,
        rebalances_at_start=(rec.observed.rebalances if state.rebalances_at_start is None
                             else state.rebalances_at_start),
        strategy=state.strategy or (WARM_HANDOFF if warm else "Recreate"),
        in_flight=state.in_flight + added,
        pending=tuple(o for o in rec.order if o not in set(ordinals)))


@state_after.register
def _record_hand_over(step: HandOver, state: RolloutState, rec: Recording) -> RolloutState:
    return replace(
        state,
        reason=f"member {step.ordinal}: replacement standby-ready, stopping the old member",
        in_flight=tuple(
            replace(f, stopped_at=f.stopped_at if step.resumed and f.stopped_at else rec.now,
                    standby_ready_at=step.standby_ready_at,
                    pod_uid=step.delete_uid or f.pod_uid)
            if f.ordinal == step.ordinal else f for f in state.in_flight),
        pending=rec.order)


@state_after.register
def _record_handoff_failed(step: HandoffFailed, state: RolloutState,
                           rec: Recording) -> RolloutState:
    dropped = set(step.ordinals) | {step.ordinal}
    return replace(
        state, phase="Stopped", reason=step.message, finished_at=rec.now,
        rebalances_during=_during(state, rec.observed),
        in_flight=tuple(f for f in state.in_flight if f.ordinal not in dropped),
        pending=rec.order)


@state_after.register
def _record_recreate_instead(step: RecreateInstead, state: RolloutState,
                             rec: Recording) -> RolloutState:
    return replace(
        state, reason=step.message,
        in_flight=tuple(replace(f, mode="cold", stopped_at=rec.now, replacement=None,
                                pod_uid=step.delete_uid or f.pod_uid)
                        if f.ordinal == step.ordinal else f for f in state.in_flight),
        pending=rec.order)


@state_after.register
def _record_fall_back(step: FallBackCold, state: RolloutState, rec: Recording) -> RolloutState:
    return replace(
        state, reason=step.message,
        in_flight=tuple(replace(f, mode="cold") if f.ordinal == step.ordinal else f
                        for f in state.in_flight),
        pending=rec.order)


@state_after.register
def _record_rejoined(step: MemberRejoined, state: RolloutState, rec: Recording) -> RolloutState:
    return replace(
        state,
        # Back before the session timeout: a rollout at risk is no longer at risk.
        phase="Rolling" if state.phase == "AtRisk" else state.phase,
        reason=_unless_ended(state, state.phase, f"member {step.ordinal} back in the group "
                                                 f"after {step.absence_s:.1f} s"),
        in_flight=tuple(replace(f, rejoined_at=step.at or rec.now)
                        if f.ordinal == step.ordinal else f for f in state.in_flight),
        longest_absence_ms=max(state.longest_absence_ms, round(step.absence_s * 1000)),
        pending=rec.order)


@state_after.register
def _record_done(step: MarkMemberDone, state: RolloutState, rec: Recording) -> RolloutState:
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
        pending=rec.order)
    if done is not None and done.revision is not None:
        # A member of a rollback processes on the revision it was handed back to: hand back
        # the next one, or the rollback is finished.
        after = replace(after,
                        members_restarted=tuple(o for o in state.members_restarted
                                                if o != step.ordinal),
                        members_rolled_back=(*state.members_rolled_back, step.ordinal))
        handback, rest = _next_handback(state.rollback_pending, rec, done.revision)
        if handback is not None:
            return replace(after, phase="Rolling", in_flight=(*after.in_flight, handback),
                           rollback_pending=rest,
                           reason=(f"{state.failure or 'the rollout failed'}. Member "
                                   f"{step.ordinal} was handed back to revision "
                                   f"{done.revision} (it was away {step.absence_s:.1f} s); "
                                   f"rolling member {handback.ordinal} back next"))
        back = after.members_rolled_back
        who = (f"Member {back[0]} was" if len(back) == 1
               else f"Members {', '.join(map(str, back))} were")
        return replace(after, phase="RolledBack", finished_at=rec.now, rollback_pending=(),
                       rebalances_during=_during(state, rec.observed),
                       reason=(f"{state.failure or 'the rollout failed'}. {who} handed back "
                               f"to revision {done.revision} and process again (the last "
                               f"was away {step.absence_s:.1f} s); fix the spec to roll "
                               "again"))
    if state.phase in FINISHED:
        return after
    return replace(after, phase="Rolling",
                   members_restarted=(*state.members_restarted, step.ordinal),
                   reason=f"member {step.ordinal} processing again (it was away "
                          f"{step.absence_s:.1f} s)")


@state_after.register
def _record_failed(step: MemberFailed, state: RolloutState, rec: Recording) -> RolloutState:
    failed = next(f for f in state.in_flight if f.ordinal == step.ordinal)
    if step.rollback and rec.observed.rollback_revision is not None:
        back = rec.observed.rollback_revision
        # Every member this rollout put on the failing revision goes back, newest first: the
        # failed one, the others stopped beside it, then the ones done, last done first.
        stopped = sorted((f for f in state.in_flight if f.ordinal != step.ordinal
                          and f.stopped_at is not None and f.revision is None),
                         key=lambda f: f.order, reverse=True)
        queue = tuple(dict.fromkeys((*(f.ordinal for f in stopped),
                                     *reversed(state.members_restarted))))
        handback = InFlight(step.ordinal, None, pod_uid=_uid(rec.observed, step.ordinal),
                            mode="warm", prepared_at=rec.now, revision=back,
                            replacement=rec.observed.rollback_names.get(step.ordinal),
                            old_last_batch_at=failed.old_last_batch_at)
        queue = tuple(o for o in queue if o != step.ordinal)
        return replace(
            state, phase="Rolling", rolled_back_to=back, failure=step.message,
            reason=(f"{step.message}; rolling member(s) "
                    f"{', '.join(map(str, (step.ordinal, *queue)))} back to revision {back} "
                    "(spec.rollout.onFailure: Rollback) by warm handoff, one at a time"),
            in_flight=(handback,), rollback_pending=queue, members_rolled_back=(),
            pending=rec.order)
    why = step.message + ("" if not step.rollback else (
        "; no revision to roll back to is known (no rollout completed before), so it halts"))
    if state.rollback_pending or state.members_restarted:
        on_it = sorted({*state.rollback_pending, *state.members_restarted})
        why += (f" (member(s) {', '.join(map(str, on_it))} still run revision "
                f"{rec.update_revision})")
    return replace(
        state, phase="Halted", finished_at=rec.now, failure=step.message,
        rebalances_during=_during(state, rec.observed),
        reason=(f"{why}. The rollout halted (spec.rollout.onFailure: Halt); the members on the "
                "old revision keep serving. Fix the spec (or the transform) to roll again"
                if not step.rollback else why + ". The members on the old revision keep "
                "serving. Fix the spec (or the transform) to roll again"),
        in_flight=(), rollback_pending=(), pending=rec.order)


def _next_handback(queue: tuple[int, ...], rec: Recording,
                   back: str) -> tuple[InFlight | None, tuple[int, ...]]:
    """The next member of a rollback's `queue` to hand back to revision `back` (a warm
    handoff: its standby of `back` is created by `pods.creates`), and the rest; members gone
    (scaled away) or already on `back` are skipped."""
    for i, ordinal in enumerate(queue):
        member = rec.observed.member(ordinal)
        if member is None or not member.pod_exists or member.revision == back:
            continue
        return (InFlight(ordinal, None, pod_uid=member.pod_uid, mode="warm",
                         prepared_at=rec.now, revision=back,
                         replacement=rec.observed.rollback_names.get(ordinal),
                         old_last_batch_at=rec.observed.last_batches.get(member.pod_uid or "")),
                queue[i + 1:])
    return None, ()


@state_after.register
def _record_at_risk(step: StopAtRisk, state: RolloutState, rec: Recording) -> RolloutState:
    return replace(
        state,
        phase="Stopped" if step.expired else "AtRisk",
        reason=step.message,
        finished_at=rec.now if step.expired else None,
        rebalances_during=_during(state, rec.observed) if step.expired else None,
        longest_absence_ms=max(state.longest_absence_ms, round(step.absence_s * 1000)),
        pending=rec.order)


@state_after.register
def _record_complete(step: Complete, state: RolloutState, rec: Recording) -> RolloutState:
    return replace(
        state, phase="Complete", reason=f"every member runs revision {rec.update_revision}",
        finished_at=rec.now, rebalances_during=_during(state, rec.observed),
        in_flight=(), pending=())


@state_after.register
def _record_refusal(step: RefuseToStart, state: RolloutState, rec: Recording) -> RolloutState:
    return replace(state, phase="Pending", reason=step.message, pending=rec.order,
                   blocked_by=(Blocker("RestartFitsSessionTimeout", step.message),))


@state_after.register
def _record_wait(step: Wait, state: RolloutState, rec: Recording) -> RolloutState:
    phase: Phase = state.phase
    if step.reason == WAIT_PAUSED:
        phase = "Paused"
    elif state.phase == "Paused":
        phase = "Rolling" if state.started_at else "Pending"
    return replace(state, phase=phase, reason=_unless_ended(state, phase, step.message),
                   pending=rec.order, blocked_by=step.blocked_by)


def _unless_ended(state: RolloutState, phase: Phase, reason: str) -> str:
    """The rollout's reason after a step that does not end it: a rollout that ended keeps the
    reason it ended with (why it stopped is what its users read; a member in flight that
    comes back, or is waited for, after the stop does not answer that)."""
    ended = state.phase in FINISHED and phase == state.phase
    return state.reason if ended and state.reason else reason


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

