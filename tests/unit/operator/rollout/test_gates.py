"""The roller's safety checks (`gates`) and the steps they hold back, as tables: every
predicate alone, all of them together (every failing one reported, in table order), and the
failure, fallback and activation steps that issue 20 added to the roller."""

from __future__ import annotations

import typing
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from staticfleet.decisions.conditions import TEMPLATE_CHANGED
from staticfleet.decisions.members.observed import ObservedMember
from staticfleet.decisions.reasons import RestartReason
from staticfleet.decisions.rollout import gates
from staticfleet.decisions.rollout.record import record_step
from staticfleet.decisions.rollout.roller import next_step
from staticfleet.decisions.rollout.state import (
    ACTIVATION_GIVE_UP_S,
    GroupObservation,
    InFlight,
    RolloutLimits,
    RolloutState,
)
from staticfleet.decisions.rollout.steps import (
    FallBackCold,
    HandoffFailed,
    HandOver,
    MarkMemberDone,
    MemberFailed,
    RecreateInstead,
    RestartMembers,
    Wait,
)
from tests.unit.operator.support import NOW, record_given

OLD, NEW, GOOD = "old", "new", "good"
WARM = RolloutLimits(session_timeout_ms=45000, strategy="WarmHandoff")
COLD = RolloutLimits(session_timeout_ms=45000, strategy="Recreate")


def ago(seconds: float) -> Any:
    return NOW - timedelta(seconds=seconds)


def member(o: int, rev: str = OLD, **kw: Any) -> ObservedMember:
    why = () if rev == NEW else (RestartReason(TEMPLATE_CHANGED, f"runs {rev}"),)
    kw.setdefault("restart_reasons", why)
    kw.setdefault("ready", True)
    kw.setdefault("in_group", True)
    kw.setdefault("pod_name", f"orders-{o}")
    kw.setdefault("pod_uid", f"uid-{o}")
    return ObservedMember(ordinal=o, revision=rev, **kw)


def standby(o: int, state: str | None = "ready", rev: str = NEW, **kw: Any) -> ObservedMember:
    kw.setdefault("pod_name", f"orders-{o}-{rev}")
    kw.setdefault("pod_uid", f"uid-{o}-{rev}")
    kw.setdefault("answers", True)
    return member(o, rev, ready=False, in_group=False, standby_state=state, **kw)


def group(*members: ObservedMember, state: str = "Stable", **kw: Any) -> GroupObservation:
    """Lag, where given, is read this pass (age 0) unless `lag_age_s` says otherwise."""
    if kw.get("lag") is not None:
        kw.setdefault("lag_age_s", 0.0)
    return GroupObservation(members=members, group_state=state, **kw)


def preparing(o: int, since: float = 20, rev: str | None = None) -> InFlight:
    name = f"orders-{o}-{rev or NEW}"
    return InFlight(o, None, pod_uid=f"uid-{o}", mode="warm", replacement=name,
                    prepared_at=ago(since), revision=rev)


def rolling(*flights: InFlight, done: tuple[int, ...] = ()) -> RolloutState:
    return RolloutState(revision=NEW, phase="Rolling", started_at=ago(300), in_flight=flights,
                        members_restarted=done, rebalances_at_start=0)


def ctx(state: RolloutState, observed: GroupObservation,
        limits: RolloutLimits = WARM) -> gates.GateContext:
    return gates.GateContext(state, observed, limits, state.in_flight, NEW, NOW)


# --- each predicate alone -------------------------------------------------------------------

READY2 = replace(member(2), standby=standby(2))
PREDICATES: list[tuple[str, gates.GateContext, str | None]] = [
    ("all hold", ctx(rolling(preparing(2)), group(member(0), member(1), READY2)), None),
    ("GroupStable", ctx(rolling(preparing(2)),
                        group(member(0), member(1), READY2, state="PreparingRebalance")),
     "PreparingRebalance"),
    ("EnoughAvailable", ctx(rolling(preparing(2)),
                            group(member(0), member(1, ready=False), READY2)), "member(s) 1"),
    ("EnoughAvailable", ctx(rolling(preparing(2), InFlight(0, ago(3))),
                            group(member(0, NEW, ready=False), member(1), READY2)),
     "member(s) 0"),
    ("EnoughAvailable", ctx(rolling(preparing(2)),
                            group(member(0), member(1, pod_failed="Failed (Evicted)"), READY2)),
     "Failed"),
    ("EnoughAvailable", ctx(rolling(preparing(2)), group(member(0), READY2, replicas=3)),
     "member(s) 1"),
    ("RestartFitsSessionTimeout", ctx(rolling(preparing(2)), group(member(0), READY2),
                                      replace(WARM, restart_safe=False, needed_session_ms=9e4)),
     "90000"),
    ("SessionTimeoutWidened", ctx(rolling(preparing(2)), group(member(0), READY2),
                                  replace(WARM, widening_wait="raised to 62000 ms first")),
     "62000"),
    ("ReplacementStandbyReady", ctx(rolling(preparing(2)), group(
        member(0), replace(member(2), standby=standby(2, "warming")))), "warming"),
    ("ReplacementStandbyReady", ctx(rolling(preparing(2)), group(member(0), member(2))),
     "does not exist"),
    ("ReplacementStandbyReady", ctx(rolling(preparing(2)), group(
        member(0), member(2), refused={"orders-2-new": "quota"})),
     "could not be created: quota"),
    ("NoMemberStuckTerminating", ctx(rolling(preparing(2)), group(
        member(0, stopped_at=ago(60)), READY2), replace(WARM, max_unavailable=2)),
     "still terminating"),
    ("PreviousMemberProgressed", ctx(rolling(preparing(2), done=(0,)), group(
        member(0, NEW, failure="exit code 1: ValueError: bad"), member(1), READY2)),
     "ValueError: bad"),
    ("NotPaused", ctx(rolling(preparing(2)), group(member(0), READY2),
                      replace(WARM, paused=True)), "paused"),
]


@pytest.mark.parametrize(("name", "context", "said"), PREDICATES,
                         ids=[f"{p[0]}-{i}" for i, p in enumerate(PREDICATES)])
def test_each_predicate(name: str, context: gates.GateContext, said: str | None) -> None:
    blocked = gates.blockers(context, 2)
    if said is None:
        assert blocked == ()
    else:
        assert [b.name for b in blocked] == [name], blocked
        assert said in blocked[0].message


def test_a_pod_terminating_within_its_grace_is_not_stuck() -> None:
    context = ctx(rolling(preparing(2)), group(member(0, stopped_at=ago(20)), READY2),
                  replace(WARM, max_unavailable=2))
    assert gates.blockers(context, 2) == ()
    closed = ctx(rolling(preparing(2)), group(member(0, stopped_at=ago(90)), READY2,
                                              closed_by_pod={"uid-0": ago(80)}))
    assert gates.none_stuck_terminating(closed, 2) is None


def test_every_failing_predicate_is_reported_in_table_order() -> None:
    context = ctx(rolling(preparing(2)), group(
        member(0, stopped_at=ago(90)), member(1, ready=False),
        replace(member(2), standby=standby(2, "warming")), state="CompletingRebalance"),
        replace(WARM, paused=True))
    names = [b.name for b in gates.blockers(context, 2)]
    assert names == ["NotPaused", "GroupStable", "EnoughAvailable", "ReplacementStandbyReady",
                     "NoMemberStuckTerminating"]


def test_the_roller_reports_every_blocker_in_the_rollout_status() -> None:
    state = rolling(preparing(2))
    observed = group(member(0), member(1, ready=False), READY2, state="PreparingRebalance")
    decided = next_step(state, observed, NEW, WARM, NOW)
    step = decided.step
    assert isinstance(step, Wait)
    assert [b.name for b in step.blocked_by] == ["GroupStable", "EnoughAvailable"]
    after = record_step(state, decided, observed, NEW, NOW)
    assert [b["name"] for b in after.to_status(0)["blockedBy"]] == ["GroupStable",
                                                                    "EnoughAvailable"]
    # Once they hold, the handoff goes on and blockedBy is empty again.
    go_decided = next_step(after, group(member(0), member(1), READY2), NEW, WARM, NOW)
    go = go_decided.step
    assert isinstance(go, HandOver)
    assert record_step(after, go_decided, group(member(0), member(1), READY2), NEW,
                       NOW).blocked_by == ()


def test_max_surge_2_with_max_unavailable_1_stops_one_member_at_a_time() -> None:
    limits = replace(WARM, max_surge=2, max_unavailable=1)
    state = rolling(InFlight(2, ago(2), pod_uid="uid-2", mode="warm", replacement="orders-2-new",
                             prepared_at=ago(30)), preparing(1))
    observed = group(member(0), replace(member(1), standby=standby(1)),
                     member(2, NEW, ready=False, in_group=False, pod_name="orders-2-new"))
    step = next_step(state, observed, NEW, limits, NOW).step
    assert isinstance(step, Wait) and [b.name for b in step.blocked_by] == ["EnoughAvailable"]
    # Member 2 processes again: member 1 is stopped next.
    done = group(member(0), replace(member(1), standby=standby(1)),
                 member(2, NEW, pod_name="orders-2-new", first_batch_at=ago(1)), lag={})
    assert isinstance(next_step(state, done, NEW, limits, NOW).step, MarkMemberDone)
    state = record_given(state, MarkMemberDone(2, 1.0), done, NEW, NOW)
    assert next_step(state, done, NEW, limits, NOW).step == HandOver(1, "uid-1", NOW)


def test_recreate_counts_the_members_it_picks_against_max_unavailable() -> None:
    observed = group(member(0), member(1), member(2))
    state = RolloutState()
    assert next_step(state, observed, NEW, replace(COLD, max_unavailable=2), NOW).step == (
        RestartMembers((2, 1)))
    assert next_step(state, observed, NEW, COLD, NOW).step == RestartMembers((2,))


# --- progress gates -------------------------------------------------------------------------

def stopped(o: int, seconds: float, rev: str | None = None, **kw: Any) -> InFlight:
    return InFlight(o, ago(seconds), pod_uid=f"uid-{o}", closed_at=ago(seconds - 1),
                    rejoined_at=ago(seconds - 2), **kw)


PROGRESS: list[tuple[str, ObservedMember, GroupObservation | None, float, type | None]] = [
    ("processed a batch: done", member(2, NEW, first_batch_at=ago(1)), None, 10, MarkMemberDone),
    ("nothing waits on its partitions: done",
     member(2, NEW, assignment=(("t", 0),)), group(member(0), lag={("t", 0): 0}), 10,
     MarkMemberDone),
    ("records wait, no batch yet: wait", member(2, NEW, assignment=(("t", 0),)),
     group(member(0), lag={("t", 0): 5}), 10, Wait),
    ("lag unknown, no batch yet: wait", member(2, NEW, assignment=(("t", 0),)),
     group(member(0), lag=None), 10, Wait),
    # Read before it came back (end offsets cached a minute): no evidence that nothing waits.
    ("lag 0 read before it rejoined: wait", member(2, NEW, assignment=(("t", 0),)),
     group(member(0), lag={("t", 0): 0}, lag_age_s=30.0), 10, Wait),
    ("lag 0 of unknown age: wait", member(2, NEW, assignment=(("t", 0),)),
     group(member(0), lag={("t", 0): 0}, lag_age_s=None), 10, Wait),
    ("lag 0 read after it rejoined: done", member(2, NEW, assignment=(("t", 0),)),
     group(member(0), lag={("t", 0): 0}, lag_age_s=5.0), 10, MarkMemberDone),
    ("no progress within the deadline: failed", member(2, NEW, assignment=(("t", 0),)),
     group(member(0), lag={("t", 0): 5}), 601, MemberFailed),
    ("its container exited with an error: failed",
     member(2, NEW, ready=False, failure="exit code 1: ValueError: bad record"), None, 10,
     MemberFailed),
    ("it crashed and runs again: failed",
     member(2, NEW, crash="exit code 1: ValueError: bad record"), None, 10, MemberFailed),
    ("its pod was evicted: failed",
     member(2, NEW, ready=False, in_group=False, pod_failed="Failed (Evicted: low memory)"),
     None, 10, MemberFailed),
]


@pytest.mark.parametrize(("what", "replacement", "observed", "seconds", "expect"), PROGRESS,
                         ids=[p[0] for p in PROGRESS])
def test_a_member_is_done_only_once_it_processed(
        what: str, replacement: ObservedMember, observed: GroupObservation | None,
        seconds: float, expect: type) -> None:
    base = observed or group(member(0), lag={})
    observed = replace(base, members=(*base.members, member(1), replacement))
    step = next_step(rolling(stopped(2, seconds)), observed, NEW, COLD, NOW).step
    assert isinstance(step, expect), step


def test_a_failure_quotes_the_members_own_error_and_halts_with_halt() -> None:
    observed = group(member(0), member(1), member(2, NEW, ready=False,
                                                  failure="exit code 1: ValueError: bad record"))
    limits = replace(COLD, on_failure="Halt")
    state = rolling(stopped(2, 10))
    decided = next_step(state, observed, NEW, limits, NOW)
    step = decided.step
    assert step == MemberFailed(2, "MemberFailing", "member 2 fails on revision new: exit code "
                                "1: ValueError: bad record", rollback=False)
    after = record_step(state, decided, observed, NEW, NOW)
    assert after.phase == "Halted" and after.in_flight == () and after.finished_at == NOW
    assert "ValueError: bad record" in after.reason and "Halt" in after.reason
    # Nothing further for this revision: the members on the old one keep serving.
    wait = next_step(after, observed, NEW, limits, NOW).step
    assert isinstance(wait, Wait) and [b.name for b in wait.blocked_by] == ["RolloutHalted"]


def test_rollback_hands_the_failed_member_back_by_warm_handoff_and_ends_rolled_back() -> None:
    failing = member(2, NEW, ready=False, crash="exit code 1: ValueError: bad record")
    observed = group(member(0, GOOD), member(1, GOOD), failing, rollback_revision=GOOD,
                     rollback_names={2: "orders-2-good"}, lag={})
    state = rolling(stopped(2, 10))
    decided = next_step(state, observed, NEW, WARM, NOW)
    step = decided.step
    assert isinstance(step, MemberFailed) and step.rollback
    state = record_step(state, decided, observed, NEW, NOW)
    (back,) = state.in_flight
    assert (back.mode, back.revision, back.replacement, back.stopped_at) == (
        "warm", GOOD, "orders-2-good", None)
    assert state.rolled_back_to == GOOD and state.phase == "Rolling"
    # Its standby of the good revision is ready: the failing pod is stopped (it is unavailable
    # already, so maxUnavailable does not hold it back).
    ready = replace(observed, members=(member(0, GOOD), member(1, GOOD), replace(
        failing, standby=standby(2, rev=GOOD, pod_name="orders-2-good"))))
    decided = next_step(state, ready, NEW, WARM, NOW)
    step = decided.step
    assert step == HandOver(2, "uid-2", NOW)
    state = record_step(state, decided, ready, NEW, NOW)
    # The good revision's member processes: the rollout ends RolledBack.
    serving = replace(observed, members=(member(0, GOOD), member(1, GOOD), member(
        2, GOOD, pod_name="orders-2-good", first_batch_at=NOW)))
    decided = next_step(state, serving, NEW, WARM, NOW + timedelta(seconds=3))
    step = decided.step
    assert isinstance(step, MarkMemberDone)
    state = record_step(state, decided, serving, NEW, NOW + timedelta(seconds=3))
    assert state.phase == "RolledBack" and "handed back to revision good" in state.reason
    assert state.members_restarted == ()
    assert isinstance(next_step(state, serving, NEW, WARM, NOW).step, Wait), "never rolled on"


def hand_back(state: RolloutState, o: int, others: tuple[ObservedMember, ...],
              failing: ObservedMember, at: float) -> RolloutState:
    """Member `o`'s handback to GOOD, from its standby being ready to its first batch there."""
    base = group(*others, rollback_revision=GOOD,
                  rollback_names={0: "orders-0-good", 1: "orders-1-good", 2: "orders-2-good"},
                  lag={})
    now = NOW + timedelta(seconds=at)
    ready = replace(base, members=tuple(sorted(
        (*others, replace(failing, standby=standby(o, rev=GOOD, pod_name=f"orders-{o}-good"))),
        key=lambda m: m.ordinal)))
    decided = next_step(state, ready, NEW, WARM, now)
    step = decided.step
    assert step == HandOver(o, f"uid-{o}", now), step
    state = record_step(state, decided, ready, NEW, now)
    serving = replace(base, members=tuple(sorted(
        (*others, member(o, GOOD, pod_name=f"orders-{o}-good", first_batch_at=now)),
        key=lambda m: m.ordinal)))
    later = now + timedelta(seconds=3)
    decided = next_step(state, serving, NEW, WARM, later)
    step = decided.step
    assert isinstance(step, MarkMemberDone) and step.ordinal == o, step
    return record_step(state, decided, serving, NEW, later)


def test_rollback_hands_back_every_restarted_member_newest_first() -> None:
    """Issue 34 item 4: member 2 completed on the new revision, then member 1 failed. Rollback
    hands back member 1, then member 2, each by warm handoff; only then is it RolledBack."""
    failing = member(1, NEW, ready=False, crash="exit code 1: ValueError: bad record")
    done2 = member(2, NEW)
    observed = group(member(0, GOOD), failing, done2, rollback_revision=GOOD,
                     rollback_names={1: "orders-1-good", 2: "orders-2-good"}, lag={})
    state = rolling(stopped(1, 10), done=(2,))
    decided = next_step(state, observed, NEW, WARM, NOW)
    step = decided.step
    assert isinstance(step, MemberFailed) and step.ordinal == 1 and step.rollback
    state = record_step(state, decided, observed, NEW, NOW)
    assert [(f.ordinal, f.revision, f.replacement) for f in state.in_flight] == [
        (1, GOOD, "orders-1-good")]
    said = state.reason
    # Member 1 processes on the good revision: member 2 is handed back next (not RolledBack).
    state = hand_back(state, 1, (member(0, GOOD), done2), failing, at=1)
    assert state.phase == "Rolling", state.reason
    assert [(f.ordinal, f.revision, f.replacement, f.mode, f.stopped_at) for f in
            state.in_flight] == [(2, GOOD, "orders-2-good", "warm", None)]
    # Member 2 processes on the good revision: the rollout ends RolledBack, naming both.
    back1 = member(1, GOOD, pod_name="orders-1-good")
    state = hand_back(state, 2, (member(0, GOOD), back1), done2, at=10)
    assert state.phase == "RolledBack" and state.in_flight == ()
    assert "Members 1, 2 were handed back to revision good" in state.reason, state.reason
    assert [h.ordinal for h in state.handoffs] == [1, 2] and state.members_restarted == ()
    serving = group(member(0, GOOD), back1, member(2, GOOD, pod_name="orders-2-good"))
    assert isinstance(next_step(state, serving, NEW, WARM, NOW).step, Wait), "never rolled on"
    assert "rolling member(s) 1, 2 back to revision good" in said, said


def test_a_rollback_in_progress_survives_a_status_round_trip() -> None:
    state = RolloutState(revision=NEW, phase="Rolling", rolled_back_to=GOOD,
                         rollback_pending=(2, 0))
    assert RolloutState.from_status(state.to_status(0)).rollback_pending == (2, 0)


def test_a_failing_member_on_the_failed_revision_does_not_hold_a_rollback_back() -> None:
    """PreviousMemberProgressed guards a rollout going forward; a rollback is the remedy for a
    failing revision, so members failing there do not hold its handovers back."""
    state = replace(rolling(preparing(1, rev=GOOD), done=(2,)), rolled_back_to=GOOD,
                    rollback_pending=(2,))
    observed = group(member(0, GOOD), replace(member(1, NEW), standby=standby(
        1, rev=GOOD, pod_name="orders-1-good")), member(2, NEW, failure="exit code 1: boom"))
    assert gates.previous_progressed(ctx(state, observed), 1) is None


def test_without_a_revision_to_go_back_to_rollback_halts() -> None:
    observed = group(member(0), member(1), member(2, NEW, failure="exit code 1: boom"))
    state = rolling(stopped(2, 10))
    decided = next_step(state, observed, NEW, WARM, NOW)
    step = decided.step
    assert isinstance(step, MemberFailed) and step.rollback
    after = record_step(state, decided, observed, NEW, NOW)
    assert after.phase == "Halted" and "no revision to roll back to" in after.reason


# --- a standby with no room, and the activation -----------------------------------------------

def test_a_refused_standby_falls_back_to_a_cold_restart_or_stops() -> None:
    observed = group(member(0), member(1), member(2), refused={"orders-2-new": "exceeded quota"})
    state = rolling(preparing(2, since=1))
    decided = next_step(state, observed, NEW, WARM, NOW)
    step = decided.step
    assert isinstance(step, RecreateInstead) and step.delete_uid == "uid-2"
    assert "exceeded quota" in step.message
    after = record_step(state, decided, observed, NEW, NOW)
    assert after.in_flight[0].mode == "cold" and after.in_flight[0].stopped_at == NOW
    stop = next_step(state, observed, NEW, replace(WARM, fallback="Stop"), NOW).step
    assert isinstance(stop, HandoffFailed) and "exceeded quota" in stop.message


def test_a_refused_standby_waits_for_the_predicates_before_the_cold_restart() -> None:
    observed = group(member(0), member(1, ready=False), member(2),
                     refused={"orders-2-new": "exceeded quota"})
    step = next_step(rolling(preparing(2, since=1)), observed, NEW, WARM, NOW).step
    assert isinstance(step, Wait)
    assert [b.name for b in step.blocked_by] == ["ReplacementCreated", "EnoughAvailable"]


@pytest.mark.parametrize(("phase", "expect"), [("Pending", RecreateInstead),
                                               ("Running", HandoffFailed)])
def test_a_standby_not_ready_in_time_falls_back_only_when_it_found_no_room(
        phase: str, expect: type) -> None:
    observed = group(member(0), member(1), replace(
        member(2), standby=standby(2, None, pod_phase=phase, answers=False)))
    step = next_step(rolling(preparing(2, since=601)), observed, NEW, WARM, NOW).step
    assert isinstance(step, expect), step


def test_a_standby_that_fails_never_falls_back_to_a_cold_restart() -> None:
    observed = group(member(0), member(1), replace(
        member(2), standby=standby(2, None, failure="exit code 2: cannot import shop.jobs")))
    step = next_step(rolling(preparing(2, since=5)), observed, NEW, WARM, NOW).step
    assert isinstance(step, HandoffFailed)


def handing_over(closed_s: float, activated_s: float | None) -> RolloutState:
    return rolling(InFlight(2, ago(closed_s + 1), pod_uid="uid-2", closed_at=ago(closed_s),
                            mode="warm", replacement="orders-2-new", prepared_at=ago(60),
                            activated_at=None if activated_s is None else ago(activated_s)))


ACTIVATION = [
    ("a late first pass sends the activation: no fallback in that pass", 30, None, True, Wait),
    ("activation sent 1 s ago: wait", 30, 1, False, Wait),
    ("activation sent longer ago than the give-up: fall back", 30,
     ACTIVATION_GIVE_UP_S + 1, False, FallBackCold),
    ("never sent, closed long ago (no address): fall back", 30, None, False, FallBackCold),
]


@pytest.mark.parametrize(("what", "closed_s", "activated_s", "sending", "expect"), ACTIVATION,
                         ids=[a[0] for a in ACTIVATION])
def test_the_fallback_never_races_the_activation(what: str, closed_s: float,
                                                 activated_s: float | None, sending: bool,
                                                 expect: type) -> None:
    observed = group(member(0), member(1), standby(2, pod_name="orders-2-new"),
                     activating=frozenset({2}) if sending else frozenset())
    state = handing_over(closed_s, activated_s)
    decided = next_step(state, observed, NEW, WARM, NOW)
    step = decided.step
    assert isinstance(step, expect), step
    if sending:
        assert record_step(state, decided, observed, NEW, NOW).in_flight[0].activated_at == NOW


def test_a_replacement_slow_to_answer_is_not_replaced_for_it() -> None:
    """Issue 46 item 1: on main an activated replacement whose /status timed out for
    `ACTIVATION_GIVE_UP_S` got `FallBackCold` and was deleted: a working member killed for
    being slow to answer."""
    slow = standby(2, None, pod_name="orders-2-new", answers=False,
                   slow="no whole answer within 2 s")
    state = handing_over(30, ACTIVATION_GIVE_UP_S + 10)
    step = next_step(state, group(member(0), member(1), slow), NEW, WARM, NOW).step
    assert isinstance(step, Wait) and "not replaced for being slow" in step.message, step
    gone = replace(slow, slow=None)  # no answer at all (connection refused): as before
    step = next_step(state, group(member(0), member(1), gone), NEW, WARM, NOW).step
    assert isinstance(step, FallBackCold), step


# --- absence as the broker sees it ----------------------------------------------------------

def test_a_frozen_old_member_is_absent_from_its_last_answer_not_its_close() -> None:
    frozen = InFlight(2, ago(40), pod_uid="uid-2", closed_at=ago(1), old_last_seen_at=ago(41),
                      rejoined_at=NOW)
    assert frozen.absence_s(NOW) == 41
    healthy = replace(frozen, old_last_seen_at=ago(2))
    assert healthy.absence_s(NOW) == 1


SILENCES: list[tuple[str, float, float | None, float, float]] = [
    # (what, stopped, last answer, closed: seconds ago; the absence's start, seconds ago)
    ("issue 34 item 6: the last pass read it 4 s before the stop; it closed 2 s after: no "
     "silence after the stop began", 10, 14, 8, 8),
    ("a drain of 6 s, its answer the last answer: absent from its close", 10, 4, 4, 4),
    ("a drain of 12 s, no answer stamped after the stop: silent 12 s after it, frozen", 20,
     20, 8, 20),
    ("frozen before the stop: absent from its last answer", 40, 41, 1, 41),
    ("frozen after the stop (answered 1 s after it, closed 30 s later)", 40, 39, 9, 39),
    ("closed within 5 s of the stop with no answer since: not frozen", 10, 30, 6, 6),
    ("no answer ever seen: from its close", 10, None, 2, 2),
]


@pytest.mark.parametrize(("what", "stopped", "seen", "closed", "away"), SILENCES,
                         ids=[s[0] for s in SILENCES])
def test_silence_counts_only_after_the_stop_began(what: str, stopped: float,
                                                  seen: float | None, closed: float,
                                                  away: float) -> None:
    flight = InFlight(2, ago(stopped), pod_uid="uid-2", closed_at=ago(closed),
                      old_last_seen_at=None if seen is None else ago(seen))
    assert flight.away_since == ago(away)


def test_a_frozen_old_member_past_the_session_timeout_stops_the_rollout() -> None:
    state = rolling(InFlight(2, ago(44), pod_uid="uid-2", closed_at=ago(0.5),
                             old_last_seen_at=ago(46), mode="cold"))
    observed = group(member(0), member(1), member(2, NEW, ready=False, in_group=False))
    step = next_step(state, observed, NEW, COLD, NOW).step
    assert step.__class__.__name__ == "StopAtRisk" and getattr(step, "expired", False)


def test_the_old_members_answers_are_remembered_until_its_close() -> None:
    state = rolling(InFlight(2, ago(3), pod_uid="uid-2", mode="cold"))
    observed = group(member(0), member(1), member(2, stopped_at=ago(3)),
                     last_seen={"uid-2": NOW})
    after = record_given(state, Wait("x", "y"), observed, NEW, NOW)
    assert after.in_flight[0].old_last_seen_at == NOW
    silent = replace(observed, last_seen={"uid-2": ago(30)})
    later = record_given(after, Wait("x", "y"), silent, NEW, NOW + timedelta(seconds=9))
    assert later.in_flight[0].old_last_seen_at == NOW


def test_an_absence_first_seen_past_the_session_timeout_is_a_rebalance_not_a_rejoin() -> None:
    """The frozen old process closed 1 s ago, its replacement is back: counted from the close
    that is a 1 s absence, but the process last answered 50 s ago."""
    state = rolling(InFlight(2, ago(10), pod_uid="uid-2", closed_at=ago(1),
                             old_last_seen_at=ago(50), mode="warm"))
    observed = group(member(0), member(1), member(2, NEW, first_batch_at=ago(0.5)), lag={})
    decided = next_step(state, observed, NEW, COLD, NOW)
    step = decided.step
    assert step.__class__.__name__ == "StopAtRisk" and getattr(step, "expired", False)
    after = record_step(state, decided, observed, NEW, NOW)
    assert after.phase == "Stopped" and after.longest_absence_ms == 50000


def test_every_step_type_has_one_row_in_each_table() -> None:
    """The roller's steps are dispatched from tables: a new step adds a row to each, and a
    step without one fails here, not in a pass."""
    from staticfleet.decisions.rollout import effects, record, steps

    kinds = set(typing.get_args(steps.Step))
    assert set(record.state_after.registry) - {object} == kinds
    assert set(effects.effects.registry) - {object} == kinds
