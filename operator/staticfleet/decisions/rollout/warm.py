"""A warm handoff's own steps, for `roller.next_step`: the replacement failed, cannot be
made or is late (fall back, or stop), it is standby-ready (stop the old member once the
predicates hold), or it does not take the activation (fall back to a cold start).

A warm handoff: the replacement starts in standby beside the old member; once the predicates
(`gates`) hold, the old member is drained and the standby activated, then the old pod deleted
(`effects`, `actions.Switchover`).
"""

from __future__ import annotations

from dataclasses import replace

from staticfleet.decisions.conditions import WAIT_MEMBER
from staticfleet.decisions.members.observed import ObservedMember
from staticfleet.decisions.rollout import gates
from staticfleet.decisions.rollout.gates import GateContext, replacement_of
from staticfleet.decisions.rollout.state import ACTIVATION_GIVE_UP_S, Blocker, InFlight
from staticfleet.decisions.rollout.steps import (
    FallBackCold,
    HandoffFailed,
    HandOver,
    RecreateInstead,
    Step,
    Wait,
    blocked_wait,
)


def follow_warm(ctx: GateContext) -> Step | None:
    """A warm handoff's own steps: the replacement failed, cannot be made or is late (fall
    back, or stop), it is standby-ready (stop the old member once the predicates hold), or it
    does not take the activation (fall back to a cold start). Each warm handoff in flight is
    looked at in turn (`_preparing` before the old member stops, `_activating` after): the
    first step found is taken; a handoff the predicates hold back does not hold the others."""
    soonest: float | None = None
    held: Wait | None = None  # the first member the predicates hold back; others may go on
    for f in ctx.in_flight:
        if f.mode != "warm":
            continue
        seen = _preparing(ctx, f) if f.stopped_at is None else _activating(ctx, f)
        if isinstance(seen, Wait):
            held = held or seen
        elif isinstance(seen, float):
            soonest = seen if soonest is None else min(soonest, seen)
        elif seen is not None:
            return seen
    if held is not None:
        return held
    if soonest is not None:
        return Wait(WAIT_MEMBER, "warm handoff under way", soonest)
    return None


def _preparing(ctx: GateContext, f: InFlight) -> Step | float | None:
    """The replacement prepares beside the old member: it cannot be made (`fallback`, or the
    handoff fails), the old member went first, or it is standby-ready (hand over, or a `Wait`
    naming the predicates that hold it back); else the seconds until a look again."""
    member = ctx.observed.member(f.ordinal)
    rep = replacement_of(f, member)
    if (rep is not None and member is not None and rep is not member and rep.in_group
            and rep.standby_state is None):
        # The replacement already holds the instance id (the broker lists it under the
        # replacement's own member id and its /status says it is active): a switchover was
        # carried out that the status does not record (an operator that died before it wrote
        # it). It is finished, not failed at the standby timeout.
        return HandOver(f.ordinal, member.pod_uid, rep.standby_ready_at or ctx.now,
                        resumed=True)
    cannot, no_room = _cannot_prepare(f, rep, ctx)
    if cannot is not None:
        if (no_room and ctx.limits.fallback == "Recreate" and f.revision is None
                and member is not None and member is not rep):
            cold = replace(ctx, in_flight=tuple(
                replace(x, mode="cold") if x.ordinal == f.ordinal else x
                for x in ctx.in_flight))
            blocked = gates.blockers(cold, f.ordinal)
            if blocked:
                return blocked_wait((Blocker(gates.REPLACEMENT_CREATED, cannot), *blocked))
            return RecreateInstead(f.ordinal, member.pod_uid, cannot + (
                f"; spec.rollout.fallback is Recreate: member {f.ordinal} is restarted "
                "the cold way instead, inside the session timeout"))
        preparing = tuple(x.ordinal for x in ctx.in_flight if x.stopped_at is None)
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
            return blocked_wait(blocked, 1.0)
        return HandOver(f.ordinal, member.pod_uid, rep.standby_ready_at or ctx.now)
    return max(0.5, min(1.0, _standby_left_s(ctx, f)))


def _activating(ctx: GateContext, f: InFlight) -> Step | float | None:
    """The old member was stopped: once its process closed, the replacement takes the
    activation, or is replaced by a cold start when it does not in time; else the seconds
    until a look again (None: nothing to follow here)."""
    if f.rejoined_at is not None:
        return None
    interrupted = _interrupted(ctx, f)
    if interrupted is not None:
        return interrupted
    if f.closed_at is None:
        return None
    rep = replacement_of(f, ctx.observed.member(f.ordinal))
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
        left = _standby_left_s(ctx, f)
        if left > 0:
            return max(0.5, min(1.0, left))
        return FallBackCold(f.ordinal, (
            f"the standby replacement of member {f.ordinal} (pod {rep.pod_name}) was not "
            f"standby-ready within spec.rollout.standbyTimeoutSeconds "
            f"({ctx.limits.standby_timeout_s:.0f} s) and its old process is gone; it is "
            "replaced by a cold start, which must fit in the session timeout"))
    waited = (ctx.now - (sent or f.closed_at)).total_seconds()
    if not active and rep is not None and rep.slow is not None:
        # Its process is there and took the connection: a slow /status is not a failed
        # activation, and deleting a member that may serve for being slow to answer is the
        # one thing not to do. The handoff waits for an answer, and says why.
        return blocked_wait((Blocker(gates.REPLACEMENT_ANSWERS, (
            f"the replacement of member {f.ordinal} (pod {rep.pod_name}) does not answer "
            f"/status in time ({rep.slow[:120]}): its activation is confirmed once it "
            "answers; it is not replaced for being slow")),), 1.0)
    if not active and waited > ACTIVATION_GIVE_UP_S:
        who = f"pod {rep.pod_name}" if rep is not None else "its pod"
        what = (f"within {ACTIVATION_GIVE_UP_S:.0f} s of the activation"
                if sent is not None else "(it could not be sent)")
        return FallBackCold(f.ordinal, (
            f"the standby replacement of member {f.ordinal} ({who}) did not take the "
            f"activation {what}; it is replaced by a cold start, which must fit in the "
            "session timeout"))
    return 0.5


def _interrupted(ctx: GateContext, f: InFlight) -> HandOver | None:
    """A switchover the status records (`stopped_at`, written ahead of the drain) whose old pod
    is still there and not being deleted: the pass that started it did not finish (the
    operator died, or a write failed after the drain). It is handed over again: the old member
    is drained (a drained one answers at once), the replacement activated (an active one
    already holds the instance id), then the old pod deleted. Nothing else may happen to the
    ordinal meanwhile: the drained old process holds its partitions only for the drain's hold,
    then subscribes again as the same static member."""
    member = ctx.observed.member(f.ordinal)
    if (member is None or f.stopped_at is None or f.pod_uid is None
            or member.pod_uid != f.pod_uid or member.pod_name == f.replacement
            or member.stopped_at is not None
            or not member.pod_exists):
        return None
    return HandOver(f.ordinal, member.pod_uid, f.standby_ready_at, resumed=True)


def _standby_left_s(ctx: GateContext, f: InFlight) -> float:
    """What is left of `standbyTimeoutSeconds` for `f`'s replacement to be standby-ready."""
    return ctx.limits.standby_timeout_s - (ctx.now - (f.prepared_at or ctx.now)).total_seconds()


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
