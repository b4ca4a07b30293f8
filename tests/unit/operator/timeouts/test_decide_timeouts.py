"""`plan.decide` as tables: the timeouts: what they learn from, and that a change of theirs is
never a rollout of its own.

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

from staticfleet.decisions import builders
from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Plan
from staticfleet.decisions.names import (
    MEMBER_CONTAINER,
)
from staticfleet.decisions.plan import decide, without_nulls
from staticfleet.decisions.pods import (
    WHY_MISSING,
)
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from tests.unit.operator.decide_support import NEW_IMAGE, reasons, rolling_fleet
from tests.unit.operator.snapshots import (
    CG,
    body,
    builders_time,
    ordinal_of,
    running,
    settled,
    snapshot,
)
from tests.unit.operator.support import NOW, with_path

pytestmark = pytest.mark.unit


# --- timeouts -------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_timeout_change_is_announced_and_sent_to_the_broker_for_kip848(protocol: str) -> None:
    cg = with_path(CG, "spec.membership", {"protocol": protocol})
    config = {"group.consumer.max.session.timeout.ms": 120000}
    pods, status = settled(cg)
    plan = decide(snapshot(cg, pods, previous=status, broker_config=config))
    assert plan.group_configs == {}, "nothing changed, nothing sent"
    changed = with_path(cg, "spec.membership.timeouts", {"sessionTimeoutMs": 90000})
    plan = decide(snapshot(changed, pods, previous=status, broker_config=config))
    assert "TimeoutsChanged" in reasons(plan)
    assert "sessionTimeoutMs 45000 -> 90000 ms" in plan.events[0].message
    assert plan.metrics.timeout_changes == ("session",)
    if protocol == "consumer":
        assert plan.group_configs["consumer.session.timeout.ms"] == "90000"
    else:
        assert plan.group_configs == {}


# --- what the timeouts learn from -------------------------------------------------------------


def crashed(pod: dict[str, Any], *, restarts: int, age_s: float) -> dict[str, Any]:
    """A pod `age_s` old whose member container restarted in place `restarts` times."""
    out = copy.deepcopy(pod)
    out["metadata"]["creationTimestamp"] = builders_time(-age_s)
    out["status"]["containerStatuses"] = [{"name": MEMBER_CONTAINER,
                                           "restartCount": restarts, "state": {"running": {
                                               "startedAt": builders_time(-10)}}}]
    return out


def test_a_crash_restarted_in_place_teaches_the_timeouts_nothing() -> None:
    """Seen on main: a 3-day-old pod's process killed; its in-place restart was taken as a
    259,144 s restart, the timeout went to the broker's maximum and a rollout started."""
    pods, status = settled(CG)
    pods = [crashed(p, restarts=1, age_s=3 * 86400) if ordinal_of(p) == 1 else p for p in pods]
    statuses = {p["metadata"]["uid"]: {"memberId": f"m-{ordinal_of(p)}", "rebalances": 0,
                                       "processStart": (NOW - timedelta(seconds=10)).timestamp(),
                                       "startupSeconds": {"firstAssignment": 1.7}}
                for p in pods}
    plan = decide(snapshot(CG, pods, previous=status, statuses=statuses))
    assert plan.status["timeouts"]["sessionTimeoutMs"] == 45000
    assert plan.status["timeouts"]["maxPollIntervalMs"] == 300000
    assert plan.status["updateRevision"] == status["updateRevision"], "no rollout by itself"
    assert plan.delete == () and "TimeoutsChanged" not in reasons(plan)
    assert "restartSecondsRecent" not in plan.status.get("measurements", {})


def roll_member_2(*, closed_after_s: float | None, replacement: dict[str, Any] | None = None
                  ) -> Plan:
    """Member 2 deleted at t=0, its process closed at `closed_after_s`, the replacement back
    in the group at t=8 and ready at t=9."""
    pods, status = rolling_fleet()
    old = [p for p in pods if ordinal_of(p) != 2]
    uid2 = next(p for p in pods if ordinal_of(p) == 2)["metadata"]["uid"]
    closed_by_pod = ({} if closed_after_s is None
                     else {uid2: NOW + timedelta(seconds=closed_after_s)})
    first = decide(replace(snapshot(NEW_IMAGE, old, previous=status, now_offset_s=1),
                           closed_by_pod=closed_by_pod))
    new = running(first, ready=False, tag="b")
    if replacement is not None:
        new = [replacement(new[0])]
    back = decide(replace(snapshot(NEW_IMAGE, old + new, previous=without_nulls(
        dict(first.status)), in_group=(0, 1, 2), now_offset_s=8), closed_by_pod=closed_by_pod))
    for pod in new:
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return decide(replace(snapshot(NEW_IMAGE, old + new, previous=without_nulls(
        dict(back.status)), in_group=(0, 1, 2), now_offset_s=9), closed_by_pod=closed_by_pod))


@pytest.mark.parametrize(("closed_after_s", "absence_s"), [(None, 8.0), (3.0, 5.0)],
                         ids=["close unknown: from the deletion", "from the old process's close"])
def test_a_roller_restart_is_measured_from_the_old_process_close(
        closed_after_s: float | None, absence_s: float) -> None:
    plan = roll_member_2(closed_after_s=closed_after_s)
    assert "MemberReady" in reasons(plan)
    m = plan.status["measurements"]
    assert m["restartSecondsRecent"] == [absence_s] and m["restartMembersRecent"] == [2]


@pytest.mark.parametrize(("change", "why"), [
    (lambda p: crashed(p, restarts=1, age_s=9), "restarted in place"),
    (lambda p: {**p, "status": {**p["status"], "containerStatuses": [
        {"name": MEMBER_CONTAINER, "restartCount": 0,
         "state": {"running": {"startedAt": builders_time(7)}}}]},
        "metadata": {**p["metadata"], "creationTimestamp": builders_time(-20)}},
     "waited 27.0 s for scheduling or an image pull"),
])
def test_a_restart_that_measures_something_else_is_not_a_sample(change: Any, why: str) -> None:
    plan = roll_member_2(closed_after_s=None, replacement=change)
    m = plan.status["measurements"]
    assert "restartSecondsRecent" not in m
    assert m["ignoredRestarts"][0]["member"] == 2 and why in m["ignoredRestarts"][0]["why"]
    later = decide(snapshot(NEW_IMAGE, [], previous=without_nulls(dict(plan.status)),
                            state="Dead"))
    assert any("ignored the restart of member 2" in r
               for r in later.status["timeouts"]["reasons"])


def test_a_restart_above_the_cap_refuses_and_names_the_member() -> None:
    pods, status = settled(CG)
    status["measurements"] = {"restartSecondsRecent": [12.0, 168.0],
                              "restartMembersRecent": [0, 3]}
    plan = decide(snapshot(NEW_IMAGE, pods, previous=status))
    assert plan.status["timeouts"]["sessionTimeoutMs"] == 120000, "capped, not 254000"
    assert plan.delete == ()
    refused = next(e for e in plan.events if e.reason == c.RESTART_UNSAFE)
    assert "member 3, 168.0 s" in refused.message
    assert "at most 120000 ms" in refused.message and "maxSessionTimeoutMs" in refused.message


def started(pods: list[dict[str, Any]], start_s: dict[int, float], restarts: int = 0,
            join_wait_s: dict[int, float] | None = None
            ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Pods whose member containers started 60 s ago and whose members took `start_s[ordinal]`
    seconds from there to their first assignment (as their `/status` reports), of which
    `join_wait_s[ordinal]` (default 0) after their consumer was made."""
    out, statuses = [], {}
    for pod in pods:
        o = ordinal_of(pod)
        pod = copy.deepcopy(pod)
        pod["status"]["containerStatuses"] = [{
            "name": MEMBER_CONTAINER, "restartCount": restarts,
            "state": {"running": {"startedAt": builders_time(-60)}}}]
        out.append(pod)
        statuses[pod["metadata"]["uid"]] = {
            "memberId": f"m-{o}", "rebalances": 0,
            "processStart": (NOW - timedelta(seconds=59)).timestamp(),
            "startupSeconds": {"firstAssignment": start_s.get(o, 1.0) - 1.0,
                               "consumerMade": start_s.get(o, 1.0) - 1.0 - (
                                   join_wait_s or {}).get(o, 0.0)}}
    return out, statuses


@pytest.mark.parametrize(("session_ms", "start_s", "restarts", "refused"), [
    (6000, {1: 10.0}, 0, True),
    (6000, {1: 3.0}, 0, False),
    (6000, {1: 10.0}, 2, False),
    (None, {1: 30.0}, 0, False),
    (None, {0: 50.0}, 0, True),
], ids=["a 10 s start cannot restart inside 6 s", "a 3 s start fits 6 s",
        "a container that restarted in place says nothing",
        "a 30 s start fits the default 45 s (no margin on a bound)",
        "a 50 s start cannot restart inside the 45 s the members joined with"])
def test_a_member_start_is_a_floor_for_a_restart(session_ms: int | None, start_s: dict[int, float],
                                                 restarts: int, refused: bool) -> None:
    """Before any restart is measured, a member that took longer from its container's start to
    its first assignment than the session timeout it runs with cannot restart inside it: the
    rollout is refused before the first restart, not stopped after a rebalance."""
    cg = CG if session_ms is None else with_path(
        CG, "spec.membership.timeouts", {"sessionTimeoutMs": session_ms,
                                         "heartbeatIntervalMs": session_ms // 3})
    pods, status = settled(cg)
    pods, statuses = started(pods, start_s, restarts)
    changed = with_path(cg, "spec.template.image", "staticfleet/member:0.2.0")
    plan = decide(snapshot(changed, pods, previous=status, statuses=statuses))
    unsafe = [e for e in plan.events if e.reason == c.RESTART_UNSAFE]
    assert bool(unsafe) is refused
    assert (plan.delete == ()) is refused
    if refused:
        slowest = max(start_s, key=start_s.__getitem__)
        assert f"the slowest member start: member {slowest}, {start_s[slowest]:.1f} s" in (
            unsafe[0].message)
        needed = round(start_s[slowest] * 1000) + 2000
        assert f"need a session timeout of {needed} ms" in unsafe[0].message


def test_a_scale_up_join_is_not_a_restart_sample() -> None:
    """Issue 34 item 8: a member added by a scale-up joins as a new member (in an eager group
    it waits 45 s for the others' revokes): that wait says nothing of a restart, so a 50 s
    container start -> first assignment refuses no rollout under the 45 s the members run with;
    only its process start up to its consumer (5 s), which a restart repeats, is a floor. The
    same 50 s of a member coming back with its instance id (its pod made again) does refuse."""
    cg = body(replicas=3)
    pods, status = settled(cg)
    up = body(replicas=4)
    plan = decide(snapshot(up, pods, previous=status))
    (join,) = running(plan, tag="b")
    pods, statuses = started([*pods, join], {3: 50.0}, join_wait_s={3: 45.0})
    status = without_nulls(dict(decide(snapshot(
        up, pods, previous=without_nulls(dict(plan.status)), statuses=statuses)).status))
    changed = with_path(up, "spec.template.image", "staticfleet/member:0.2.0")
    plan = decide(snapshot(changed, pods, previous=status, statuses=statuses))
    assert c.RESTART_UNSAFE not in reasons(plan), [e.message for e in plan.events]
    assert plan.delete != ()
    # Member 1's pod deleted outside a rollout and made again: it comes back as member 1.
    others = [p for p in pods if ordinal_of(p) != 1]
    plan = decide(snapshot(up, others, previous=status))
    (back,) = running(plan, tag="c")
    assert [p.why for p in plan.create] == [WHY_MISSING]
    pods, statuses = started([*others, back], {1: 50.0, 3: 50.0},
                             join_wait_s={1: 45.0, 3: 45.0})
    plan = decide(snapshot(changed, pods, previous=status, statuses=statuses))
    assert c.RESTART_UNSAFE in reasons(plan)


# --- a timeout change is never a rollout of its own ------------------------------------------


def fleet_for(cg: dict[str, Any], status: dict[str, Any]) -> list[dict[str, Any]]:
    """Running, ready pods of `cg` with the timeouts in force in `status` (a finished rollout)."""
    from staticfleet.decisions.timeouts.effective import EffectiveTimeouts

    spec = ConsumerGroupSpec.from_body(cg)
    in_force = EffectiveTimeouts.from_status(status["timeouts"])
    assert in_force is not None
    view = builders.member_spec_view(spec, in_force)
    plan = replace(decide(snapshot(cg)), create=tuple(
        replace(p, pod=builders.build_member_pod(spec, p.ordinal, view,
                                                 in_force.session_timeout_ms))
        for p in decide(snapshot(cg)).create))
    return running(plan, tag=view.revision)


def batch_statuses(pods: list[dict[str, Any]], batch_s: float) -> dict[str, Any]:
    return {p["metadata"]["uid"]: {"memberId": f"m-{ordinal_of(p)}", "rebalances": 0,
                                   "batchSecondsMax": batch_s} for p in pods}


def test_a_slow_batch_waits_for_the_next_rollout_and_then_rides_with_it() -> None:
    pods, status = settled(CG)
    slow = decide(snapshot(CG, pods, previous=status, statuses=batch_statuses(pods, 200.0)))
    assert slow.delete == () and slow.status["updateRevision"] == status["updateRevision"]
    assert slow.status["timeouts"]["maxPollIntervalMs"] == 300000
    assert slow.status["timeouts"]["pending"] == {"maxPollIntervalMs": 450000}
    assert any("rides with the next rollout" in r for r in slow.status["timeouts"]["reasons"])
    # The user changes the image: the pending value comes with that rollout.
    rollout = decide(snapshot(NEW_IMAGE, pods, previous=without_nulls(dict(slow.status)),
                              statuses=batch_statuses(pods, 200.0)))
    assert rollout.status["timeouts"]["maxPollIntervalMs"] == 450000
    assert "pending" not in rollout.status["timeouts"]
    assert [d.ordinal for d in rollout.delete] == [2]
    assert "TimeoutsChanged" in reasons(rollout)


def test_a_restart_measured_mid_rollout_does_not_change_the_revision() -> None:
    pods, status = rolling_fleet()
    revision = status["updateRevision"]
    status["measurements"] = {"restartSecondsRecent": [60.0], "restartMembersRecent": [2]}
    plan = decide(snapshot(NEW_IMAGE, [p for p in pods if ordinal_of(p) != 2], previous=status,
                           now_offset_s=2))
    assert plan.status["updateRevision"] == revision
    assert plan.status["timeouts"]["sessionTimeoutMs"] == 45000
    assert plan.status["timeouts"]["pending"]["sessionTimeoutMs"] == 120000
    assert [p.ordinal for p in plan.create] == [2]
    assert plan.create[0].pod["metadata"]["annotations"]["staticfleet.io/revision"] == revision


def test_a_kip848_groups_session_follows_at_once_without_a_rollout() -> None:
    """Without widening (with it, the tuned value does not follow the restarts:
    tests/unit/operator/timeouts/test_widening.py)."""
    cg = with_path(with_path(CG, "spec.membership", {"protocol": "consumer"}),
                   "spec.rollout.widenSessionTimeout", False)
    config = {"group.consumer.max.session.timeout.ms": 300000}
    pods, status = settled(cg)
    status["measurements"] = {"restartSecondsRecent": [40.0]}
    plan = decide(snapshot(cg, pods, previous=status, broker_config=config))
    assert plan.group_configs["consumer.session.timeout.ms"] == "75000"
    assert plan.delete == () and plan.status["updateRevision"] == status["updateRevision"]


# A day: slow batches come and go, restarts are measured in the user's rollouts, idle hours.
DAY = [
    # (hour, slowest batch the members report (s), user changes the image to this tag)
    (0, 1.0, None), (1, 1.0, None), (2, 200.0, None), (3, 0.0, None), (4, 230.0, None),
    (5, 0.0, None), (6, 0.0, "0.2.0"), (8, 180.0, None), (9, 0.0, None), (12, 260.0, None),
    (13, 0.0, None), (14, 0.0, None), (15, 150.0, "0.3.0"), (18, 0.0, None), (20, 300.0, None),
    (21, 0.0, None), (23, 0.0, None),
]


def test_a_day_of_measurements_makes_only_the_users_revisions() -> None:
    cg = CG
    pods, status = settled(cg)
    revisions = [status["updateRevision"]]
    for hour, batch_s, tag in DAY:
        if tag is not None:
            cg = with_path(CG, "spec.template.image", f"staticfleet/member:{tag}")
        for minute in (0, 20, 40):  # three passes an hour
            snap = snapshot(cg, pods, previous=status, statuses=batch_statuses(pods, batch_s),
                            now_offset_s=hour * 3600 + minute * 60)
            status = without_nulls(dict(decide(snap).status))
            if status["updateRevision"] != revisions[-1]:
                revisions.append(status["updateRevision"])
                status["rollout"] = {"revision": status["updateRevision"], "phase": "Complete"}
                pods = fleet_for(cg, status)  # the rollout ran
    assert len(revisions) == 3, "the first revision and one per image change, nothing more"
    assert status["timeouts"]["maxPollIntervalMs"] == 450000, "raised once, in a coarse step"
