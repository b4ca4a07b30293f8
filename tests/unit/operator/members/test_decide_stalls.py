"""`plan.decide` as tables: stalled members.

Each case builds a `Snapshot` the way the service gathers one (member pods built by the real
builders, the broker's view of the group, the members' `/status`, the previous status), and
checks the plan (tests/unit/operator/decide_support.py, snapshots.py).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from staticfleet.decisions import conditions as c
from staticfleet.decisions.plan import decide
from staticfleet.decisions.snapshot import Snapshot
from tests.unit.operator.decide_support import reasons
from tests.unit.operator.snapshots import (
    body,
    ordinal_of,
    settled,
    snapshot,
    stalled_fleet,
)
from tests.unit.operator.support import NOW, with_keys

pytestmark = pytest.mark.unit


# --- stalled members ------------------------------------------------------------------------


def test_a_member_that_fetches_nothing_while_records_wait_is_restarted_alone() -> None:
    snap, _ = stalled_fleet(idle_s=90)
    plan = decide(snap)
    (restart,) = plan.delete
    assert restart.name == "orders-1" and restart.why.startswith("restart a stalled member")
    cond = c.get_condition(plan.status["conditions"], c.MEMBERS_STALLED)
    assert cond["status"] == "True" and cond["reason"] == c.RESTARTING_STALLED_MEMBER
    assert "fetched nothing for 90 s (bound 60 s)" in cond["message"]
    assert "orders-" in cond["message"] and "(10)" in cond["message"]
    assert c.RESTARTING_STALLED_MEMBER in reasons(plan)
    assert plan.status["stalledRestarts"] == 1
    assert (plan.metrics.stalled_members, plan.metrics.stalled_restarts) == (1, 1)


@pytest.mark.parametrize(("idle_s", "end", "why"), [
    (50, 50, "inside its bound"),
    (90, 40, "no record waits: an idle topic"),
])
def test_an_idle_member_is_not_stalled(idle_s: float, end: int, why: str) -> None:
    snap, _ = stalled_fleet(idle_s=idle_s, end=end)
    plan = decide(snap)
    assert plan.delete == (), why
    cond = c.get_condition(plan.status["conditions"], c.MEMBERS_STALLED)
    assert cond["status"] == "False"
    assert plan.metrics.stalled_members == 0


def test_a_stalled_member_is_only_reported_when_restarts_are_off() -> None:
    snap, _ = stalled_fleet(idle_s=90, recovery={"restartStalledMembers": False})
    plan = decide(snap)
    assert plan.delete == ()
    cond = c.get_condition(plan.status["conditions"], c.MEMBERS_STALLED)
    assert cond["reason"] == c.MEMBER_STALLED
    assert "spec.recovery.restartStalledMembers is false" in cond["message"]
    assert c.MEMBER_STALLED in reasons(plan)


def test_the_bound_grows_with_the_slowest_batch_and_the_batch_wait() -> None:
    from staticfleet.decisions.members.stalls import bound_s

    assert bound_s(1000, 2.0) == 60.0
    assert bound_s(20000, 10.0) == 70.0
    assert bound_s(1000, 40.0) == 122.0


def _member_1(snap: Snapshot) -> str:
    return next(p["metadata"]["uid"] for p in snap.pods if ordinal_of(p) == 1)


def with_member_1(snap: Snapshot, **fields: Any) -> Snapshot:
    """`snap` with member 1's /status carrying `fields` too."""
    uid = _member_1(snap)
    return replace(snap, statuses={**snap.statuses, uid: with_keys(snap.statuses[uid], **fields)})


def test_a_member_in_a_long_first_batch_is_working_not_stalled() -> None:
    # Issue 34, item 1: a fresh member whose first batch runs long pauses its partitions on
    # purpose (its buffer is full), so its polls return nothing; it was restarted every
    # bound, and its batch never committed.
    snap, _ = stalled_fleet(idle_s=70)
    started = (NOW - timedelta(seconds=68)).timestamp()
    snap = with_member_1(snap, batchInFlight={"startedAt": started, "records": 1000},
                         pausedWithWork=True)
    plan = decide(snap)
    assert plan.delete == ()
    cond = c.get_condition(plan.status["conditions"], c.MEMBERS_STALLED)
    assert cond["status"] == "False"
    assert plan.metrics.stalled_members == 0


@pytest.mark.parametrize(("running_s", "member_slowest_s", "group_slowest_s", "overdue"), [
    (3600, 2.0, None, True),      # an hour in a hung sink call: past max.poll.interval.ms
    (250, 2.0, None, False),      # within max.poll.interval.ms (300 s)
    (450, 100.0, None, False),    # 5 x its own slowest batch (500 s) ...
    (700, 100.0, None, True),     # ... then past it
    (550, 2.0, 120.0, False),     # 5 x the group's slowest measured (600 s) ...
    (650, 2.0, 120.0, True),      # ... then past it
], ids=["hung-hour", "within-max-poll", "within-own", "past-own", "within-group",
        "past-group"])
def test_a_batch_that_never_ends_is_reported_not_restarted(
        running_s: float, member_slowest_s: float, group_slowest_s: float | None,
        overdue: bool) -> None:
    """Issue 46, item 6: a batch in flight was never judged, however long (a member stuck in
    a hung sink call for an hour was MembersStalled=False). Past its bound (`overdue_bound_s`)
    it is reported: the condition (reason BatchOverdue), a Warning Event, the metric; its
    member is never restarted for it (restartStalledMembers is on here)."""
    snap, _ = stalled_fleet(idle_s=running_s)
    started = (NOW - timedelta(seconds=running_s)).timestamp()
    snap = with_member_1(snap, batchInFlight={"startedAt": started, "records": 1000},
                         batchSecondsMax=member_slowest_s)
    if group_slowest_s is not None:
        status = copy.deepcopy(dict(snap.body["status"]))
        status["measurements"] = {**status.get("measurements", {}),
                                  "batchSecondsMax": group_slowest_s}
        snap = replace(snap, body={**snap.body, "status": status})
    plan = decide(snap)
    assert plan.status["timeouts"]["maxPollIntervalMs"] == 300000
    assert plan.delete == (), "never restarted for a long batch"
    cond = c.get_condition(plan.status["conditions"], c.MEMBERS_STALLED)
    assert plan.metrics.overdue_batches == int(overdue)
    if overdue:
        assert (cond["status"], cond["reason"]) == ("True", c.BATCH_OVERDUE)
        assert f"for {running_s:.1f} s, past its bound" in cond["message"]
        assert "member 1 (pod orders-1)" in cond["message"] and "1000 records" in cond["message"]
        assert ("Warning", c.BATCH_OVERDUE) in [(e.type, e.reason) for e in plan.events]
    else:
        assert cond["status"] == "False"
        assert c.BATCH_OVERDUE not in reasons(plan)
        bound = max(300.0, 5 * max(member_slowest_s, group_slowest_s or 0.0))
        assert plan.deadline_s is not None and plan.deadline_s <= bound - running_s + 0.5, (
            "a pass is due when the batch would pass its bound")


def test_the_overdue_bound() -> None:
    from staticfleet.decisions.members.stalls import overdue_bound_s

    assert overdue_bound_s(300000, 2.0) == 300.0
    assert overdue_bound_s(10000, 2.0) == 60.0
    assert overdue_bound_s(300000, 100.0) == 500.0


def test_idleness_counts_from_the_last_finished_batch_too() -> None:
    snap, _ = stalled_fleet(idle_s=90)
    snap = with_member_1(snap, lastBatchAt=(NOW - timedelta(seconds=20)).timestamp())
    assert decide(snap).delete == ()


def test_a_member_waiting_on_an_offline_leader_is_reported_not_restarted() -> None:
    snap, _ = stalled_fleet(idle_s=90)
    owned = next(m.partitions for m in snap.group.members  # type: ignore[union-attr]
                 if m.instance_id == "orders-1")
    plan = decide(replace(snap, leaderless=frozenset(owned)))
    assert plan.delete == ()
    cond = c.get_condition(plan.status["conditions"], c.MEMBERS_STALLED)
    assert (cond["status"], cond["reason"]) == ("True", c.WAITING_ON_LEADER)
    assert "leader is offline" in cond["message"] and "a restart cannot help" in cond["message"]
    assert plan.status.get("stallRecovery") is None


def test_a_leader_offline_for_only_some_waiting_partitions_still_restarts() -> None:
    snap, _ = stalled_fleet(idle_s=90)
    owned = next(m.partitions for m in snap.group.members  # type: ignore[union-attr]
                 if m.instance_id == "orders-1")
    plan = decide(replace(snap, leaderless=frozenset(owned[:1])))
    assert [d.name for d in plan.delete] == ["orders-1"]


def recovered(restarts: int, ago_s: float) -> list[dict[str, Any]]:
    return [{"member": 1, "restarts": restarts,
             "lastRestartAt": c.rfc3339(NOW - timedelta(seconds=ago_s))}]


@pytest.mark.parametrize(("restarts", "idle_s", "restarted"), [
    (0, 90, True),     # no memory: the bound, 60 s
    (1, 90, False),    # the second restart waits for twice the bound
    (1, 130, True),
    (2, 200, False),   # the third for four times
    (2, 250, True),
    (3, 10_000, False),  # after three, never
])
def test_stall_restarts_of_one_member_back_off_and_stop(restarts: int, idle_s: float,
                                                        restarted: bool) -> None:
    snap, status = stalled_fleet(idle_s=idle_s)
    if restarts:
        status = {**status, "stallRecovery": recovered(restarts, idle_s + 1)}
        snap = replace(snap, body={**snap.body, "status": status})
    plan = decide(snap)
    assert bool(plan.delete) == restarted
    memory = plan.status.get("stallRecovery")
    if restarted:
        assert memory == [{"member": 1, "restarts": restarts + 1,
                           "lastRestartAt": c.rfc3339(NOW)}]
    elif restarts:
        assert memory == recovered(restarts, idle_s + 1)
    cond = c.get_condition(plan.status["conditions"], c.MEMBERS_STALLED)
    assert cond["status"] == "True"
    if restarts >= 3:
        assert cond["reason"] == c.STALL_RESTARTS_EXHAUSTED
        assert "stalled again after 3 restarts" in cond["message"]


def test_a_member_that_finished_a_batch_after_its_restart_is_forgotten() -> None:
    snap, status = stalled_fleet(idle_s=10)
    status = {**status, "stallRecovery": recovered(3, 300)}
    snap = replace(snap, body={**snap.body, "status": status})
    assert decide(snap).status.get("stallRecovery") == recovered(3, 300)  # nothing finished yet
    snap = with_member_1(snap, lastBatchAt=(NOW - timedelta(seconds=5)).timestamp())
    assert decide(snap).status.get("stallRecovery") is None


def test_a_refused_member_pod_is_a_degraded_problem_that_quotes_the_refusal() -> None:
    cg = body()
    pods, status = settled(cg)
    snap = replace(snapshot(cg, pods, previous=status), refused_members={
        "orders-3": 'pods "orders-3" is forbidden: exceeded quota: compute, requested: pods=1'})
    plan = decide(snap)
    cond = c.get_condition(plan.status["conditions"], c.DEGRADED)
    assert (cond["status"], cond["reason"]) == ("True", c.MEMBER_POD_REFUSED)
    assert "refused to create member pod orders-3" in cond["message"]
    assert "exceeded quota: compute" in cond["message"]
    assert c.MEMBER_POD_REFUSED in reasons(plan)
