"""When a group's next pass is due (`decisions.pace`): the rules of a group at rest, as a table
over fleets the decisions themselves settled, and the pace that follows from a plan."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from staticfleet.decisions import conditions as c
from staticfleet.decisions import pace
from staticfleet.decisions.actions import UNJUDGED, Plan
from staticfleet.decisions.plan import decide, without_nulls
from staticfleet.decisions.snapshot import Problem, Snapshot
from staticfleet.decisions.timeouts.effective import MAX_POLL, SESSION, EffectiveTimeouts
from staticfleet.decisions.timeouts.hysteresis import lowering_due_s
from staticfleet.decisions.timeouts.inputs import DEFAULT_POLICY
from tests.unit.operator.snapshots import (
    CG,
    body,
    ordinal_of,
    settled,
    snapshot,
    stalled_fleet,
)
from tests.unit.operator.support import NOW, with_path

PODS, STATUS = settled(CG)
AUTOSCALED = body(autoscaling={"minReplicas": 1, "maxReplicas": 6, "targetLagSeconds": 10})


def watched(snap: Snapshot) -> Snapshot:
    """As the service gathers it from a cluster with batched reads (they wake a pass)."""
    return replace(snap, kafka_watched=True)


def at_rest() -> Snapshot:
    return watched(snapshot(CG, PODS, previous=STATUS))


def pods_with(ordinal: int, change: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    pods = copy.deepcopy(PODS)
    change(next(p for p in pods if ordinal_of(p) == ordinal))
    return pods


def not_ready(pod: dict[str, Any]) -> None:
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]


def terminating(pod: dict[str, Any]) -> None:
    pod["metadata"]["deletionTimestamp"] = c.rfc3339(NOW + timedelta(seconds=30))


def ended(pod: dict[str, Any]) -> None:
    pod["status"]["phase"] = "Failed"


def planned(seconds_ago: float) -> Snapshot:
    status = {**STATUS, "plannedRebalance": {"reason": "ScaleDown", "members": [3],
                                             "requestedAt": c.rfc3339(
                                                 NOW - timedelta(seconds=seconds_ago))}}
    return watched(snapshot(CG, PODS, previous=status))


def silent(ordinal: int) -> Snapshot:
    snap = at_rest()
    uid = next(p for p in PODS if ordinal_of(p) == ordinal)["metadata"]["uid"]
    return replace(snap, statuses={k: v for k, v in snap.statuses.items() if k != uid})


def unowned() -> Snapshot:
    """Partition orders-0 owned by nobody."""
    snap = at_rest()
    assert snap.group is not None
    members = tuple(replace(m, partitions=tuple(tp for tp in m.partitions if tp != ("orders", 0)))
                    for m in snap.group.members)
    return replace(snap, group=replace(snap.group, members=members))


def autoscaled() -> Snapshot:
    pods, status = settled(AUTOSCALED)
    return second_pass(watched(snapshot(AUTOSCALED, pods, previous=status)))


def second_pass(snap: Snapshot) -> Snapshot:
    """The same observation a pass later: the status the first pass wrote is the one read."""
    first = decide(snap)
    return replace(snap, body={**snap.body, "status": without_nulls(dict(first.status))})


def stalled(**spec: Any) -> Snapshot:
    snap, _ = stalled_fleet(idle_s=90, **spec)
    return watched(snap)


CASES: list[tuple[str, Callable[[], Snapshot], set[str]]] = [
    ("a settled fleet", at_rest, set()),
    ("its planned rebalance long over", lambda: planned(120), set()),
    ("a cluster read group by group", lambda: snapshot(CG, PODS, previous=STATUS),
     {"KafkaWatched"}),
    ("a gather that failed", lambda: replace(at_rest(), problem=Problem(c.INVALID_SPEC, "bad")),
     {"PassFinished"}),
    ("Degraded: a member stuck terminating", lambda: second_pass(watched(replace(
        snapshot(CG, pods_with(1, terminating), previous=STATUS), now=NOW + timedelta(
            seconds=120)))), {"NotDegraded", "MembersSettled", "MembersAnswer"}),
    ("a member missing", lambda: watched(snapshot(CG, PODS[:2], previous=STATUS)),
     {"NothingDone", "StatusUnchanged", "MembersSettled"}),
    ("the status rebuilt differs", lambda: watched(snapshot(
        CG, PODS, previous={k: v for k, v in STATUS.items() if k != "partitions"})),
     {"StatusUnchanged"}),
    ("a rollout", lambda: watched(snapshot(with_path(CG, "spec.template.image", "m:2"), PODS,
                                           previous=STATUS)),
     {"NothingDone", "StatusUnchanged", "NoRollout"}),
    ("a pod not Ready", lambda: second_pass(watched(snapshot(
        CG, pods_with(1, not_ready), previous=STATUS))), {"MembersSettled"}),
    ("a pod that ended", lambda: second_pass(watched(snapshot(
        CG, pods_with(1, ended), previous=STATUS))), {"NothingDone", "MembersSettled"}),
    ("a member silent on /status", lambda: silent(2), {"MembersAnswer"}),
    ("a rebalance under way", lambda: second_pass(watched(snapshot(
        CG, PODS, previous=STATUS, state="PreparingRebalance"))), {"GroupSettled"}),
    ("a stalled member reported", lambda: second_pass(stalled(
        recovery={"restartStalledMembers": False})), {"NotStalled"}),
    ("a partition nobody owns", lambda: second_pass(unowned()), {"PartitionsAssigned"}),
    ("autoscaled", autoscaled, {"NoAutoscaling"}),
    ("a planned rebalance may still show", lambda: planned(10), {"NoPlannedRebalanceAwaited"}),
]


@pytest.mark.parametrize(("make", "failing"), [(m, f) for _, m, f in CASES],
                         ids=[n for n, _, _ in CASES])
def test_a_group_is_at_rest_when_every_rule_holds(make: Callable[[], Snapshot],
                                                  failing: set[str]) -> None:
    plan = decide(make())
    if "PassFinished" in failing:
        assert plan.busy == (UNJUDGED,)
        return
    assert {line.split(":")[0] for line in plan.busy} == failing, plan.busy


def test_every_rule_has_a_case_that_fails_it() -> None:
    """A rule added to `pace.AT_REST` gets its row in the table above."""
    assert {name for name, _ in pace.AT_REST} == set().union(*(f for _, _, f in CASES))


def test_busy_says_which_rule_and_why() -> None:
    plan = decide(silent(2))
    assert plan.busy == ("MembersAnswer: pods orders-2 did not answer /status",)


RESYNC, REST = 10.0, 60.0


@pytest.mark.parametrize(("plan", "delay", "resting"), [
    (Plan(status={}, busy=()), REST, True),
    (Plan(status={}, busy=("NoRollout: a rollout is Rolling",)), RESYNC, False),
    (Plan(status={}), RESYNC, False),
    (Plan(status={}, busy=(), requeue_after_s=1.0), 1.0, True),
    (Plan(status={}, requeue_after_s=32.0), 32.0, False),
    (Plan(status={}, busy=(), deadline_s=25.0), 25.0, True),
    (Plan(status={}, busy=(), deadline_s=600.0), REST, True),
    (Plan(status={}, busy=("x",), deadline_s=4.0), 4.0, False),
    (Plan(status={}, busy=(), deadline_s=-3.0), pace.MIN_WAIT_S, True),
], ids=["at rest", "busy", "a Degraded pass (not judged)", "the plan asks, at rest",
        "a backoff the plan asks for", "at rest until a deadline", "a deadline past the rest",
        "busy, a deadline sooner", "a deadline just passed"])
def test_the_next_pass(plan: Plan, delay: float, resting: bool) -> None:
    due = pace.next_pass(plan, RESYNC, REST)
    assert (due.delay_s, due.at_rest) == (delay, resting), due


def test_the_rest_interval_is_never_shorter_than_the_resync() -> None:
    assert pace.next_pass(Plan(status={}, busy=()), 30.0, 5.0).delay_s == 30.0


def test_a_member_nearing_its_stall_bound_sets_the_deadline_at_rest() -> None:
    """Member 1 fetched nothing for 30 s while records wait: it would be stalled at its 60 s
    bound, so the pass looks again in 30 s, though the group rests."""
    snap, _ = stalled_fleet(idle_s=30)
    plan = decide(second_pass(watched(snap)))
    assert plan.busy == () and plan.deadline_s == pytest.approx(30.0)
    assert pace.next_pass(plan, RESYNC, REST).delay_s == pytest.approx(30.0)
    later = decide(replace(watched(stalled_fleet(idle_s=30)[0]), now=NOW + timedelta(
        seconds=31), body={**snap.body, "status": without_nulls(dict(plan.status))}))
    cond = c.get_condition(later.status["conditions"], c.MEMBERS_STALLED)
    assert cond["status"] == "True", "the pass at the deadline sees the stall"


def test_no_deadline_for_an_idle_member_with_no_record_waiting() -> None:
    snap, _ = stalled_fleet(idle_s=30, end=40)
    plan = decide(second_pass(watched(snap)))
    assert plan.busy == () and plan.deadline_s is None


def test_a_timeout_held_above_its_need_is_lowered_on_time() -> None:
    held = EffectiveTimeouts(45000, 3000, 300000, {SESSION: "auto"}, lower_candidate_since={
        SESSION: NOW - timedelta(seconds=100), MAX_POLL: NOW - timedelta(seconds=400)})
    assert lowering_due_s(held, NOW) == pytest.approx(DEFAULT_POLICY.lower_hold_s - 400)
    assert lowering_due_s(replace(held, lower_candidate_since={}), NOW) is None

