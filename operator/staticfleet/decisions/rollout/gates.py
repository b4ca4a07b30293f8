"""The roller's safety checks: named predicates over one pass's observation (pure).

Before a member is stopped (a Recreate restart, or a warm handoff's stop of the old member)
every predicate of `BEFORE_STOP` is evaluated, and every one that fails becomes a `Blocker`
(its name and why, now). The roller stops the member only when none fails; otherwise all of
them go to `status.rollout.blockedBy`, so "why not member 3, now" has a complete answer.
Starting a standby replacement stops nobody and is held back only by `BEFORE_PREPARE`.

A predicate is `(name, check)`: `check(ctx, ordinal)` returns None when it holds for that
member, else the message. Adding a rule is adding a row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from staticfleet.decisions.members.observed import ObservedMember
from staticfleet.decisions.rollout.state import (
    STARTABLE_STATES,
    Blocker,
    GroupObservation,
    InFlight,
    RolloutLimits,
    RolloutState,
)
from staticfleet.decisions.timeouts import widening

STUCK_MARGIN_S = 15.0
"""A pod still terminating this long after its grace period is stuck (a node gone, a
finalizer, a process that ignores SIGKILL on a broken node)."""


@dataclass(frozen=True)
class GateContext:
    """What the predicates look at."""

    state: RolloutState
    observed: GroupObservation
    limits: RolloutLimits
    in_flight: tuple[InFlight, ...]
    update_revision: str
    now: datetime

    def member(self, ordinal: int) -> ObservedMember | None:
        return self.observed.member(ordinal)


Check = Callable[[GateContext, int], str | None]


def is_available(member: ObservedMember, group_state: str) -> bool:
    """Ready and serving: in the group (an Empty group has nobody to be in), its pod not
    Failed."""
    return (
        member.pod_exists
        and member.stopped_at is None
        and member.pod_failed is None
        and member.ready
        and (member.in_group or group_state == "Empty")
    )


def unavailable(ctx: GateContext) -> set[int]:
    """Members not serving now: not available, or restarted and not done yet (a member in
    handoff counts until it has processed on the new revision), or with a Failed pod."""
    out = {m.ordinal for m in ctx.observed.members
           if not is_available(m, ctx.observed.group_state)}
    out |= {f.ordinal for f in ctx.in_flight if f.stopped_at is not None}
    if ctx.observed.replicas is not None:
        seen = {m.ordinal for m in ctx.observed.members}
        out |= set(range(ctx.observed.replicas)) - seen
    return out


def group_stable(ctx: GateContext, ordinal: int) -> str | None:
    state = ctx.observed.group_state
    if state in STARTABLE_STATES:
        return None
    return f"the group is {state}, not Stable: a stop now would add to a rebalance under way"


def enough_available(ctx: GateContext, ordinal: int) -> str | None:
    others = sorted(unavailable(ctx) - {ordinal})
    if len(others) + 1 <= ctx.limits.max_unavailable:
        return None
    return (f"member(s) {', '.join(map(str, others))} unavailable (restarting, in handoff, not "
            f"ready or Failed); stopping member {ordinal} too would exceed maxUnavailable "
            f"{ctx.limits.max_unavailable}")


def restart_fits_session(ctx: GateContext, ordinal: int) -> str | None:
    if ctx.limits.restart_safe:
        return None
    return (f"restarts need a session timeout of {ctx.limits.needed_session_ms} ms, the members "
            f"run with {ctx.limits.session_timeout_ms} ms")


def session_widened(ctx: GateContext, ordinal: int) -> str | None:
    """A KIP-848 group that widens its session timeout for rollouts: the widened value is in
    force and every member has heartbeated since (`timeouts.widening.hold`)."""
    return ctx.limits.widening_wait


def replacement_standby_ready(ctx: GateContext, ordinal: int) -> str | None:
    flight = next((f for f in ctx.in_flight if f.ordinal == ordinal), None)
    if flight is None or flight.mode != "warm":
        return None  # a cold restart (fallback) has no standby to wait for
    rep = replacement_of(flight, ctx.member(ordinal))
    if rep is not None and rep.standby_state == "ready":
        return None
    name = flight.replacement or "its replacement"
    refusal = ctx.observed.refused.get(name)
    if refusal is not None:
        return f"the replacement pod {name} could not be created: {refusal}"
    if rep is None:
        return f"the replacement pod {name} does not exist yet"
    if rep.failure is not None:
        return f"the replacement pod {name} failed: {rep.failure}"
    state = rep.standby_state or ("not answering" if not rep.answers else "not in standby")
    return f"the replacement pod {name} is {state}, not standby-ready"


def none_stuck_terminating(ctx: GateContext, ordinal: int) -> str | None:
    limit = ctx.limits.termination_grace_s + STUCK_MARGIN_S
    stuck = []
    for m in ctx.observed.members:
        if m.stopped_at is None or m.pod_uid in ctx.observed.closed_by_pod:
            continue
        if (ctx.now - m.stopped_at).total_seconds() > limit:
            stuck.append(f"{m.ordinal} (pod {m.pod_name})")
    if not stuck:
        return None
    return (f"member(s) {', '.join(stuck)} still terminating more than {limit:.0f} s after "
            "their deletion: a node or finalizer holds them")


def previous_progressed(ctx: GateContext, ordinal: int) -> str | None:
    if ctx.state.rolled_back_to is not None:
        return None  # a rollback is the remedy for members failing on the new revision
    failing = []
    for o in ctx.state.members_restarted:
        m = ctx.member(o)
        if m is not None and (m.failure or m.pod_failed):
            failing.append(f"member {o}: {m.failure or m.pod_failed}")
    if not failing:
        return None
    return ("a member restarted in this rollout is failing on the new revision: "
            + "; ".join(failing))


def not_paused(ctx: GateContext, ordinal: int) -> str | None:
    return "spec.rollout.paused is true" if ctx.limits.paused else None


BEFORE_STOP: tuple[tuple[str, Check], ...] = (
    ("NotPaused", not_paused),
    ("GroupStable", group_stable),
    ("EnoughAvailable", enough_available),
    ("RestartFitsSessionTimeout", restart_fits_session),
    (widening.PREDICATE, session_widened),
    ("ReplacementStandbyReady", replacement_standby_ready),
    ("NoMemberStuckTerminating", none_stuck_terminating),
    ("PreviousMemberProgressed", previous_progressed),
)
"""Every rule that must hold before a member is stopped, in the order they are reported."""

BEFORE_PREPARE: tuple[tuple[str, Check], ...] = (
    ("NotPaused", not_paused),
    ("RestartFitsSessionTimeout", restart_fits_session),
    ("PreviousMemberProgressed", previous_progressed),
)
"""What holds back starting a standby replacement (it stops nobody)."""

REPLACEMENT_ANSWERS = "ReplacementAnswers"
"""Not a predicate but reported with them: an activated replacement's process takes the
operator's connection and does not answer /status in time, so its activation cannot be
confirmed; the handoff waits (a slow answer alone never replaces a member, `warm`)."""
REPLACEMENT_CREATED = "ReplacementCreated"
"""Not a predicate but reported with them: the API server did not create a warm handoff's
standby, and the cold restart that `spec.rollout.fallback: Recreate` would make instead is held
back by the predicates beside it (`warm`)."""


def blockers(ctx: GateContext, ordinal: int,
             predicates: Sequence[tuple[str, Check]] = BEFORE_STOP) -> tuple[Blocker, ...]:
    """Every predicate that fails for stopping member `ordinal` now, in table order."""
    out = []
    for name, check in predicates:
        message = check(ctx, ordinal)
        if message is not None:
            out.append(Blocker(name, message))
    return tuple(out)


def replacement_of(f: InFlight, member: ObservedMember | None) -> ObservedMember | None:
    """The replacement pod of in-flight `f`: beside the old member (a standby), or the member
    itself once the old pod is gone."""
    if member is None or f.replacement is None:
        return None
    if member.pod_name == f.replacement:
        return member
    if member.standby is not None and member.standby.pod_name == f.replacement:
        return member.standby
    return None
