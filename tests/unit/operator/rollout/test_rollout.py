"""The roller's decisions over observed combinations, including resume after an operator restart."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from staticfleet.decisions.conditions import TEMPLATE_CHANGED
from staticfleet.decisions.members.observed import ObservedMember
from staticfleet.decisions.reasons import RestartReason
from staticfleet.decisions.rollout.record import record_step
from staticfleet.decisions.rollout.roller import next_step, plan_rollout
from staticfleet.decisions.rollout.state import (
    GroupObservation,
    InFlight,
    RolloutLimits,
    RolloutState,
)
from staticfleet.decisions.rollout.steps import (
    Complete,
    MarkMemberDone,
    MemberRejoined,
    RefuseToStart,
    RestartMembers,
    Step,
    StopAtRisk,
    Wait,
)
from staticfleet.decisions.spec.model import RolloutSpec
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from staticfleet.decisions.timeouts.widening import Hold
from tests.unit.operator.support import NOW, record_given

OLD, NEW = "old", "new"
LIMITS = RolloutLimits(session_timeout_ms=45000)


def member(
    o: int, rev: str = OLD, ready: bool = True, in_group: bool = True, **kw: Any
) -> ObservedMember:
    why = () if rev == NEW else (RestartReason(TEMPLATE_CHANGED, f"runs {rev}, not {NEW}"),)
    kw.setdefault("restart_reasons", why)
    # A member on the new revision has processed a batch, unless the case says otherwise.
    kw.setdefault("first_batch_at", NOW - timedelta(seconds=1) if rev == NEW else None)
    return ObservedMember(ordinal=o, revision=rev, ready=ready, in_group=in_group, **kw)


def group(*members: ObservedMember, state: str = "Stable", rebalances: int = 0) -> GroupObservation:
    return GroupObservation(members=members, group_state=state, rebalances=rebalances)


def rolling(
    *in_flight: tuple[int, float], phase: str = "Rolling", done: tuple[int, ...] = ()
) -> RolloutState:
    return RolloutState(
        revision=NEW,
        phase=phase,  # type: ignore[arg-type]
        started_at=NOW - timedelta(minutes=5),
        in_flight=tuple(InFlight(o, NOW - timedelta(seconds=ago)) for o, ago in in_flight),
        members_restarted=done,
        rebalances_at_start=0,
    )


THREE_OLD = group(member(0), member(1), member(2))

PLANS = [
    ("all ready: highest ordinal first", [member(0), member(1), member(2)], (2, 1, 0)),
    ("unready first", [member(0), member(1, ready=False), member(2)], (1, 2, 0)),
    ("already new is skipped", [member(0), member(1, NEW), member(2)], (2, 0)),
    ("missing pod is skipped", [member(0), member(1, pod_exists=False), member(2)], (2, 0)),
    ("pod being deleted is skipped", [member(0, stopped_at=NOW), member(1)], (1,)),
    ("nothing to do", [member(0, NEW)], ()),
]


@pytest.mark.parametrize(("what", "members", "order"), PLANS, ids=[p[0] for p in PLANS])
def test_plan_order(what: str, members: list[ObservedMember], order: tuple[int, ...]) -> None:
    assert plan_rollout(members).ordinals == order


CASES: list[tuple[str, RolloutState, GroupObservation, RolloutLimits, Step | type]] = [
    ("start: restart the highest ordinal", RolloutState(), THREE_OLD, LIMITS, RestartMembers((2,))),
    (
        "start with maxUnavailable 2",
        RolloutState(),
        THREE_OLD,
        replace(LIMITS, max_unavailable=2),
        RestartMembers((2, 1)),
    ),
    (
        "unready old member goes first and is free",
        RolloutState(),
        group(member(0), member(1, ready=False, in_group=False), member(2)),
        LIMITS,
        RestartMembers((1,)),
    ),
    (
        "another member unready (new revision): wait",
        RolloutState(),
        group(member(0), member(1), member(2, NEW, ready=False)),
        LIMITS,
        Wait,
    ),
    (
        "group rebalancing: wait",
        RolloutState(),
        group(member(0), state="PreparingRebalance"),
        LIMITS,
        Wait,
    ),
    ("paused: wait", RolloutState(), THREE_OLD, replace(LIMITS, paused=True), Wait),
    (
        "restarts unsafe: refuse",
        RolloutState(),
        THREE_OLD,
        replace(LIMITS, restart_safe=False, needed_session_ms=90000),
        RefuseToStart,
    ),
    (
        "in flight, away 10 s: wait",
        rolling((2, 10)),
        group(member(0), member(1), member(2, NEW, ready=False, in_group=False)),
        LIMITS,
        Wait,
    ),
    (
        "in flight, pod still terminating: wait",
        rolling((2, 3)),
        group(member(0), member(1), member(2, stopped_at=NOW - timedelta(seconds=3))),
        LIMITS,
        Wait,
    ),
    (
        "in flight and back: done",
        rolling((2, 12)),
        group(member(0), member(1), member(2, NEW)),
        LIMITS,
        MarkMemberDone(2, 12.0),
    ),
    (
        "back in the group but group not Stable: rejoined, not done",
        rolling((2, 12)),
        group(member(0), member(1), member(2, NEW), state="CompletingRebalance"),
        LIMITS,
        MemberRejoined,
    ),
    (
        "back and ready but no assignment yet: wait",
        rolling((2, 12)),
        group(member(0), member(1), member(2, NEW, in_group=False)),
        LIMITS,
        Wait,
    ),
    (
        "running late: stop at risk",
        rolling((2, 37)),
        group(member(0), member(1), member(2, NEW, ready=False, in_group=False)),
        LIMITS,
        StopAtRisk,
    ),
    (
        "already at risk, not yet expired: wait",
        rolling((2, 40), phase="AtRisk"),
        group(member(0), member(1), member(2, NEW, ready=False, in_group=False)),
        LIMITS,
        Wait,
    ),
    (
        "at risk and back in time: done",
        rolling((2, 44), phase="AtRisk"),
        group(member(0), member(1), member(2, NEW)),
        LIMITS,
        MarkMemberDone(2, 44.0),
    ),
    (
        "past the session timeout: stopped",
        rolling((2, 46), phase="AtRisk"),
        group(member(0), member(1), member(2, NEW, ready=False, in_group=False)),
        LIMITS,
        StopAtRisk,
    ),
    (
        "stopped: no further member",
        rolling(phase="Stopped", done=(2,)),
        group(member(0), member(1), member(2, NEW)),
        LIMITS,
        Wait,
    ),
    (
        "next member after one done",
        rolling(done=(2,)),
        group(member(0), member(1), member(2, NEW)),
        LIMITS,
        RestartMembers((1,)),
    ),
    (
        "all new: complete",
        rolling(done=(2, 1, 0)),
        group(member(0, NEW), member(1, NEW), member(2, NEW)),
        LIMITS,
        Complete(),
    ),
    (
        "complete already: up to date",
        replace(rolling(), phase="Complete"),
        group(member(0, NEW)),
        LIMITS,
        Wait,
    ),
    (
        "new pods on creation: complete",
        RolloutState(),
        group(member(0, NEW), member(1, NEW)),
        LIMITS,
        Complete(),
    ),
    (
        "resume: restarted member is not restarted again",
        RolloutState(revision=NEW, phase="Rolling"),
        group(member(0), member(1), member(2, NEW)),
        LIMITS,
        RestartMembers((1,)),
    ),
    (
        "resume: pod found being deleted is followed, not doubled",
        RolloutState(revision=NEW, phase="Rolling"),
        group(member(0), member(1), member(2, stopped_at=NOW - timedelta(seconds=5))),
        LIMITS,
        Wait,
    ),
    (
        "resume: unrecorded deletion running late",
        RolloutState(revision=NEW, phase="Rolling"),
        group(member(0), member(1), member(2, stopped_at=NOW - timedelta(seconds=40))),
        LIMITS,
        StopAtRisk,
    ),
    (
        "empty group: restart",
        RolloutState(),
        group(member(0, in_group=False), state="Empty"),
        LIMITS,
        RestartMembers((0,)),
    ),
    (
        "new revision during a stopped rollout starts again",
        replace(rolling(phase="Stopped"), revision="older"),
        THREE_OLD,
        LIMITS,
        RestartMembers((2,)),
    ),
]


@pytest.mark.parametrize(
    ("what", "state", "observed", "limits", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_next_step(
    what: str,
    state: RolloutState,
    observed: GroupObservation,
    limits: RolloutLimits,
    expected: Step | type,
) -> None:
    step = next_step(state, observed, NEW, limits, NOW).step
    if isinstance(expected, type):
        assert isinstance(step, expected), step
    else:
        assert step == expected


def test_stop_at_risk_details() -> None:
    late = next_step(
        rolling((2, 37)),
        group(member(0), member(2, NEW, ready=False, in_group=False)),
        NEW,
        replace(LIMITS, needed_session_ms=60000),
        NOW,
    ).step
    assert isinstance(late, StopAtRisk) and not late.expired
    assert late.ordinal == 2 and late.absence_s == 37 and late.needed_session_ms == 60000
    assert "80%" in late.message
    expired = next_step(
        rolling((2, 46), phase="AtRisk"), group(member(2, NEW, ready=False, in_group=False)),
        NEW, LIMITS, NOW,
    ).step
    assert isinstance(expired, StopAtRisk) and expired.expired


def test_wait_recheck_aims_at_the_at_risk_mark() -> None:
    step = next_step(rolling((2, 34)), group(member(2, NEW, ready=False, in_group=False)), NEW,
                     LIMITS, NOW).step
    assert isinstance(step, Wait) and step.recheck_after_s == pytest.approx(2.0)


def test_a_whole_rollout_through_record_step() -> None:
    """Drive three members from old to new; the status round-trips on every pass (resume)."""
    revs = {0: OLD, 1: OLD, 2: OLD}
    down: set[int] = set()
    state = RolloutState()
    now = NOW
    restarted: list[int] = []
    for _ in range(30):
        observed = group(
            *(member(o, revs[o], ready=o not in down, in_group=o not in down) for o in range(3)),
            rebalances=0,
        )
        decided = next_step(state, observed, NEW, LIMITS, now)
        step = decided.step
        state = record_step(state, decided, observed, NEW, now)
        state = RolloutState.from_status(state.to_status(0))  # as if the operator restarted
        if isinstance(step, RestartMembers):
            for o in step.ordinals:
                revs[o], down = NEW, down | {o}
                restarted.append(o)
        elif isinstance(step, MarkMemberDone):
            assert step.absence_s == 10
        elif isinstance(step, Complete):
            break
        now += timedelta(seconds=10)
        down = set()  # members come back 10 s later
    assert restarted == [2, 1, 0]
    assert state.phase == "Complete" and state.members_restarted == (2, 1, 0)
    assert state.longest_absence_ms == 10000 and state.in_flight == ()
    status = state.to_status(0)
    assert status["rebalancesDuringRollout"] == 0 and status["current"] is None


def test_record_step_phases() -> None:
    observed = group(member(0), member(1), member(2, NEW, ready=False))
    at_risk = record_given(rolling((2, 37)), StopAtRisk(2, 37.0, 60000, "late"), observed, NEW,
                           NOW)
    assert at_risk.phase == "AtRisk" and at_risk.reason == "late" and at_risk.finished_at is None
    stopped = record_given(
        at_risk, StopAtRisk(2, 46.0, 60000, "too late", expired=True), observed, NEW, NOW
    )
    assert stopped.phase == "Stopped" and stopped.finished_at == NOW
    assert stopped.longest_absence_ms == 46000
    back = record_given(at_risk, MarkMemberDone(2, 44.0), observed, NEW, NOW)
    assert back.phase == "Rolling" and back.in_flight == ()
    still_stopped = record_given(stopped, MarkMemberDone(2, 50.0), observed, NEW, NOW)
    assert still_stopped.phase == "Stopped"
    paused = record_given(RolloutState(), Wait("Paused", "paused"), observed, NEW, NOW)
    assert paused.phase == "Paused" and paused.pending == (1, 0)
    refused = record_given(RolloutState(), RefuseToStart(90000, "no"), observed, NEW, NOW)
    assert refused.phase == "Pending" and refused.revision == NEW


def test_restart_records_start_and_rebalances() -> None:
    observed = group(member(0), member(1), member(2), rebalances=7)
    state = record_given(RolloutState(), RestartMembers((2,)), observed, NEW, NOW)
    assert state.started_at == NOW and state.rebalances_at_start == 7
    status = state.to_status(9)
    assert status["current"] == 2 and status["currentStoppedAt"] == "2026-01-01T12:00:00Z"
    assert status["rebalancesDuringRollout"] == 2 and status["pending"] == [1, 0]



@pytest.mark.parametrize("step, finished", [
    (Complete(), True),
    (StopAtRisk(2, 46.0, 60000, "too late", expired=True), True),
    (StopAtRisk(2, 37.0, 60000, "late"), False),
])
def test_rebalances_after_a_rollout_finished_are_not_its_own(step: Any, finished: bool) -> None:
    """A planned rejoin after the rollout (it assigns a topic the rollout added) is counted in
    status.rebalances, not in the finished rollout's rebalancesDuringRollout."""
    started = record_given(RolloutState(), RestartMembers((2,)),
                           group(member(0), member(1), member(2), rebalances=7), NEW, NOW)
    ended = record_given(started, step, group(member(0), member(1), member(2, NEW),
                                              rebalances=8), NEW, NOW)
    later = RolloutState.from_status(ended.to_status(8))  # the next pass reads it back
    assert later.to_status(10)["rebalancesDuringRollout"] == (1 if finished else 3)
    observed = group(member(0), member(1), member(2, NEW), rebalances=10)
    resumed = record_given(later, RestartMembers((1,)), observed, NEW, NOW)
    assert resumed.to_status(10)["rebalancesDuringRollout"] == 3  # one rollout, from its start
    following = record_given(later, RestartMembers((1,)), observed, "0123456789", NOW)
    assert following.to_status(10)["rebalancesDuringRollout"] == 0

def rejoined(ordinal: int, stopped_ago: float, rejoined_ago: float) -> RolloutState:
    return RolloutState(
        revision=NEW, phase="Rolling", started_at=NOW - timedelta(minutes=5),
        in_flight=(InFlight(ordinal, NOW - timedelta(seconds=stopped_ago),
                            NOW - timedelta(seconds=rejoined_ago)),),
    )


def test_back_in_the_group_ends_the_absence_before_the_member_is_ready() -> None:
    decided = next_step(rolling((2, 6)),
                        group(member(0), member(1), member(2, NEW, ready=False)), NEW, LIMITS,
                        NOW)
    step = decided.step
    assert isinstance(step, MemberRejoined) and step.absence_s == 6
    state = record_step(rolling((2, 6)), decided, group(member(0), member(1),
                                                        member(2, NEW, ready=False)), NEW, NOW)
    assert state.in_flight[0].rejoined_at == NOW and state.longest_absence_ms == 6000
    assert state.to_status(0)["inFlight"][0]["rejoinedAt"]


def test_a_rejoined_member_is_never_at_risk_while_it_gets_ready() -> None:
    # 40 s after the stop (past 80 % of the session), but back in the group after 5 s.
    step = next_step(rejoined(2, 40, 35), group(member(0), member(1), member(2, NEW, ready=False)),
                     NEW, LIMITS, NOW).step
    assert isinstance(step, Wait) and "to process on the new revision" in step.message


def test_done_measures_the_absence_until_the_rejoin() -> None:
    step = next_step(rejoined(2, 40, 35), group(member(0), member(1), member(2, NEW)), NEW,
                     LIMITS, NOW).step
    assert isinstance(step, MarkMemberDone) and step.absence_s == 5


def test_the_next_member_waits_for_a_rejoined_one_to_be_ready() -> None:
    members = group(member(0), member(1), member(2, NEW, ready=False))
    step = next_step(rejoined(2, 10, 5), members, NEW, LIMITS, NOW).step
    assert not isinstance(step, RestartMembers)


def test_a_member_away_is_judged_against_the_widened_session_timeout() -> None:
    """A KIP-848 group widened for the rollout: a member away 46 s ran out of the tuned 45 s
    but not of the widened 62 s (its timer was armed with it: `timeouts.widening`)."""
    tuned = EffectiveTimeouts(45000, 5000, 300000, {}, needed_session_timeout_ms=62000,
                              restart_safe=True)
    widened = RolloutLimits.from_timeouts(tuned, RolloutSpec(strategy="Recreate"),
                                          widening=(Hold(session_ms=62000), 120000))
    assert widened.session_timeout_ms == 62000 and widened.restart_safe
    assert widened.widening_wait is None and widened.widen_cap_ms == 120000
    away = (rolling((2, 46)), group(member(2, NEW, ready=False, in_group=False)))
    assert isinstance(next_step(*away, NEW, widened, NOW).step, Wait)
    unwidened = RolloutLimits.from_timeouts(tuned, RolloutSpec(strategy="Recreate"))
    assert not unwidened.restart_safe, "62 s needed, 45 s without the widening"
    late = next_step(*away, NEW, replace(unwidened, restart_safe=True), NOW).step
    assert isinstance(late, StopAtRisk) and late.expired


def test_a_stopped_rollout_keeps_the_reason_it_stopped_with() -> None:
    """The member whose late restart stopped the rollout is still in flight: the passes that
    wait for it, and the one that sees it back, leave the stop's reason (CI read 'waiting for
    member(s) 1 to rejoin the group' where the rollout had stopped on the session timeout)."""
    observed = group(member(0), member(1), member(2, NEW, ready=False, in_group=False))
    stopped = record_given(rolling((2, 46)), StopAtRisk(2, 46.0, 60000, "too late",
                                                        expired=True), observed, NEW, NOW)
    waited = record_given(stopped, Wait("WaitingForMember", "waiting for member(s) 2"),
                          observed, NEW, NOW)
    assert waited.phase == "Stopped" and waited.reason == "too late"
    back = record_given(waited, MemberRejoined(2, 50.0, NOW), observed, NEW, NOW)
    assert back.phase == "Stopped" and back.reason == "too late"
    paused = record_given(back, Wait("Paused", "paused"), observed, NEW, NOW)
    assert paused.phase == "Paused" and paused.reason == "paused"
    rolling_on = record_given(rolling((2, 10)), Wait("WaitingForMember", "waiting"), observed,
                              NEW, NOW)
    assert rolling_on.reason == "waiting"
