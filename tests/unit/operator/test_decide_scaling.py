"""`plan.decide` as tables: creating, scaling and replacing member pods, and the planned
rebalance of partitions nobody owns.

Each case builds a `Snapshot` the way the service gathers one (member pods built by the real
builders, the broker's view of the group, the members' `/status`, the previous status), and
checks the plan (tests/unit/operator/decide_support.py, snapshots.py).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Plan
from staticfleet.decisions.names import (
    MEMBER_CONTAINER,
    SESSION_ANNOTATION,
)
from staticfleet.decisions.plan import decide, without_nulls
from staticfleet.decisions.pods import (
    WHY_ENDED,
    WHY_ENDED_REPLACEMENT,
    WHY_MISSING,
    WHY_NEW,
)
from staticfleet.decisions.rebalance.planned import WHY_ASK_AGAIN, WHY_SCALE_DOWN, WHY_TAKEN_BACK
from tests.unit.operator.decide_support import deleting, reasons
from tests.unit.operator.snapshots import (
    CG,
    WarmRoll,
    body,
    ordinal_of,
    running,
    settled,
    snapshot,
)
from tests.unit.operator.support import with_path

pytestmark = pytest.mark.unit


# --- creation and scaling -------------------------------------------------------------------


def test_a_new_group_creates_every_member_and_no_rollout() -> None:
    plan = decide(snapshot(CG, state="Dead"))
    assert [(p.ordinal, p.why) for p in plan.create] == [(0, WHY_NEW), (1, WHY_NEW), (2, WHY_NEW)]
    assert plan.delete == ()
    assert "ScaledUp" not in reasons(plan), "creating a new group is not scaling it"
    assert plan.status["rollout"]["phase"] == "Idle"
    assert [ch["kind"] for ch in plan.children] == ["ConfigMap", "Service", "PodDisruptionBudget"]
    pod = plan.create[0].pod
    assert pod["metadata"]["annotations"][SESSION_ANNOTATION] == str(
        plan.status["timeouts"]["sessionTimeoutMs"])


@pytest.mark.parametrize(("missing", "children"), [
    # First pass, or the Secret deleted by hand: created with the token the gather drew.
    (True, ["Secret", "ConfigMap", "Service", "PodDisruptionBudget"]),
    # It exists: left alone, so a token written into it by hand stands.
    (False, ["ConfigMap", "Service", "PodDisruptionBudget"]),
])
def test_the_member_token_secret_is_made_only_while_missing(missing: bool,
                                                             children: list[str]) -> None:
    pods, status = settled(CG)
    snap = replace(snapshot(CG, pods, previous=status), member_token="drawn-by-gather",
                   member_token_missing=missing)
    plan = decide(snap)
    assert [ch["kind"] for ch in plan.children] == children
    if missing:
        secret = plan.children[0]
        assert secret["metadata"]["name"] == "orders-member-token"
        assert base64.b64decode(secret["data"]["token"]) == b"drawn-by-gather"
    assert "drawn-by-gather" not in repr(snap), "the token never shows in a snapshot's repr"
    assert plan.delete == () and plan.create == ()


def test_scaling_up_creates_the_new_members_and_plans_their_joins() -> None:
    pods, status = settled(CG)
    plan = decide(snapshot(with_path(CG, "spec.replicas", 5), pods, previous=status))
    assert [(p.ordinal, p.why) for p in plan.create] == [(3, WHY_NEW), (4, WHY_NEW)]
    assert plan.delete == () and plan.calls == ()
    assert [e for e in reasons(plan) if e.startswith("Scaled")] == ["ScaledUp"]
    assert plan.status["plannedRebalance"]["reason"] == "ScaleUp"
    assert plan.status["plannedRebalance"]["members"] == [3, 4]


def test_nothing_to_scale() -> None:
    pods, status = settled(CG)
    plan = decide(snapshot(CG, pods, previous=status))
    assert plan.create == () and plan.delete == () and plan.calls == ()
    assert not [e for e in reasons(plan) if e.startswith("Scaled")]


def test_the_arrival_rate_compares_only_partitions_read_in_both_samples() -> None:
    """Issue 34 item 5: 2 partitions' end offsets at t=0 and 4 at t=20 s (two more got their
    first commit, or a read had failed) is no arrival on an idle topic."""
    cg = body(replicas=1, autoscaling={"minReplicas": 1, "maxReplicas": 6,
                                       "targetLagSeconds": 10})
    pods, status = settled(cg)
    lag = {("orders", p): 0 for p in range(6)}
    ends = {("orders", p): 50_000 for p in range(6)}
    first = replace(snapshot(cg, pods, previous=status, lag=lag),
                    end_offsets={tp: (0.0, ends[tp]) for tp in list(ends)[:2]})
    plan = decide(first)
    assert plan.status["autoscaling"].get("arrivalRecordsPerSecond") is None
    later = replace(snapshot(cg, pods, previous=without_nulls(dict(plan.status)), lag=lag,
                             now_offset_s=20),
                    end_offsets={tp: (0.0, ends[tp]) for tp in list(ends)[:4]})
    auto = decide(later).status["autoscaling"]
    assert auto["arrivalRecordsPerSecond"] == 0.0, auto


def test_the_autoscaler_sets_replicas_from_the_lag_and_steps_aside_when_removed() -> None:
    cg = body(replicas=1, autoscaling={"minReplicas": 1, "maxReplicas": 6,
                                       "targetLagSeconds": 10})
    pods, status = settled(cg)
    (uid,) = [p["metadata"]["uid"] for p in pods]
    busy = {uid: {"memberId": "m-0", "rebalances": 0, "assignment": [["orders", 0]],
                  "throughput": {"recordsPerSecond": 50.0, "busyRatio": 1.0,
                                 "capacityRecordsPerSecond": 50.0}}}
    lag = {("orders", p): 200 for p in range(6)}  # 1,200 records at 50/s: 24 s
    plan = decide(snapshot(cg, pods, previous=status, statuses=busy, lag=lag))
    # (50 + 1200 / 10) / (50 * 0.8) = 4.25 -> 5 -> 6 (6 partitions: 1, 2, 3, 6)
    assert plan.scale_to == 6
    auto = plan.status["autoscaling"]
    assert (auto["lagSeconds"], auto["desiredReplicas"], auto["budgetLeft"]) == (24.0, 6, 3)
    assert ("Normal", c.SCALING_UP) in [(e.type, e.reason) for e in plan.events]
    cond = c.get_condition(plan.status["conditions"], c.AUTOSCALING)
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", c.SCALING_UP)
    assert plan.metrics.autoscaling is not None
    assert plan.metrics.autoscaling.lag_seconds == 24.0
    # another controller wrote replicas through the scale subresource: it stands aside
    keda = copy.deepcopy(cg)
    keda["metadata"]["managedFields"] = [{
        "manager": "keda-operator", "operation": "Update", "subresource": "scale",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]
    aside = decide(snapshot(keda, pods, previous=without_nulls(dict(plan.status)),
                            statuses=busy, lag=lag))
    assert aside.scale_to is None
    cond = c.get_condition(aside.status["conditions"], c.AUTOSCALING)
    assert cond is not None and cond["reason"] == c.REPLICAS_OWNED_ELSEWHERE
    # spec.autoscaling removed: no decision, no condition, no status, no figures
    off = decide(snapshot(body(replicas=1), pods, previous=without_nulls(dict(plan.status)),
                          statuses=busy, lag=lag))
    assert off.scale_to is None and "autoscaling" not in without_nulls(dict(off.status))
    assert c.get_condition(off.status["conditions"], c.AUTOSCALING) is None
    assert off.metrics.autoscaling is None


def scale_down(replicas: int, *, after_s: float, left: tuple[int, ...] = (),
               took_it: bool = True) -> tuple[Plan, Plan]:
    """The pass that asks the members beyond `replicas` to leave, and a pass `after_s` later
    in which the members `left` are out of the group; `took_it`: the asked members' `/status`
    says they are leaving (False: the call never reached them)."""
    pods, status = settled(CG)
    cg = with_path(CG, "spec.replicas", replicas)
    ask = decide(snapshot(cg, pods, previous=status))
    stays = tuple(o for o in range(3) if o not in left)
    asked = {m.ordinal for m in ask.calls}
    statuses = {p["metadata"]["uid"]: {"memberId": f"m-{ordinal_of(p)}", "rebalances": 0,
                                       "leaving": took_it and ordinal_of(p) in asked}
                for p in pods if ordinal_of(p) in stays}
    later = decide(snapshot(cg, pods, previous=without_nulls(dict(ask.status)),
                            in_group=stays, now_offset_s=after_s, statuses=statuses))
    return ask, later


@pytest.mark.parametrize("replicas", [2, 1])
def test_scaling_down_asks_the_members_to_leave_before_deleting_their_pods(
        replicas: int) -> None:
    """A static member sends no LeaveGroup when it closes: deleting its pod would leave its
    partitions unowned for the whole session timeout."""
    ask, _ = scale_down(replicas, after_s=1)
    gone = list(range(2, replicas - 1, -1))
    assert [(m.ordinal, m.action) for m in ask.calls] == [(o, "leave") for o in gone]
    assert ask.delete == ()
    assert "MemberLeaving" in reasons(ask) and "ScaledDown" not in reasons(ask)
    assert ask.status["plannedRebalance"]["reason"] == "ScaleDown"
    assert ask.status["plannedRebalance"]["members"] == sorted(gone)
    assert ask.requeue_after_s == 1.0


@pytest.mark.parametrize(("after_s", "left", "deleted", "why"), [
    (2, (2,), [2], "the member left the group"),
    (2, (), [], None),
    (31, (), [2], "did not leave the group within 30 s"),
], ids=["left: its pod goes", "still in the group: wait", "never left: deleted anyway"])
def test_a_member_asked_to_leave_is_deleted_once_out_of_the_group(
        after_s: float, left: tuple[int, ...], deleted: list[int], why: str | None) -> None:
    _, later = scale_down(2, after_s=after_s, left=left)
    assert [d.ordinal for d in later.delete] == deleted
    assert later.calls == (), "asked once"
    if why:
        assert why in later.delete[0].why
        assert "ScaledDown" in reasons(later)


@pytest.mark.parametrize("after_s", [2, 31])
def test_a_member_recorded_as_asked_that_is_not_leaving_is_asked_again_within_the_wait(
        after_s: float) -> None:
    """Issue 46, item 5: the planned leave is written to the status before the call
    (`service.execute`); an operator killed between the two leaves a record whose member was
    never asked. Its successor asks again (the record and its window unchanged, so the
    rebalance counts as planned), until `LEAVE_WAIT_S`; after that the pod goes, as for a
    member that did not leave."""
    ask, later = scale_down(2, after_s=after_s, took_it=False)
    if after_s < 30:
        assert [(m.ordinal, m.action, m.why) for m in later.calls] == [
            (2, "leave", WHY_ASK_AGAIN)]
        assert later.delete == ()
        assert later.status["plannedRebalance"] == ask.status["plannedRebalance"]
        assert "MemberLeaving" not in reasons(later), "one Event for the scale-down"
    else:
        assert later.calls == ()
        assert [d.ordinal for d in later.delete] == [2]


def test_a_scale_down_taken_back_remakes_the_members_that_left_as_planned_joins() -> None:
    """3 -> 1 asks members 2 and 1 to leave; member 2 left (its pod went), member 1 is still
    leaving when a scaler sets 2 again. A member asked to leave never joins again: its pod is
    deleted and made again, and its join is planned (CI saw it held out of the group for good,
    the group never Ready)."""
    pods, status = settled(CG)
    ask = decide(snapshot(with_path(CG, "spec.replicas", 1), pods, previous=status))
    assert sorted(m.ordinal for m in ask.calls) == [1, 2]
    kept = [p for p in pods if ordinal_of(p) < 2]
    statuses = {p["metadata"]["uid"]: {"memberId": f"m-{ordinal_of(p)}", "rebalances": 0,
                                       "leaving": ordinal_of(p) == 1} for p in kept}
    back = decide(snapshot(with_path(CG, "spec.replicas", 2), kept,
                           previous=without_nulls(dict(ask.status)), statuses=statuses,
                           now_offset_s=2))
    assert [(d.ordinal, d.why) for d in back.delete] == [(1, WHY_TAKEN_BACK)]
    assert back.create == () and back.calls == ()
    assert "ScaleDownTakenBack" in reasons(back) and "ScaledDown" not in reasons(back)
    assert back.status["plannedRebalance"]["reason"] == "ScaleUp"
    assert back.status["plannedRebalance"]["members"] == [1]
    again = decide(snapshot(with_path(CG, "spec.replicas", 2), kept[:1],
                            previous=without_nulls(dict(back.status)), now_offset_s=4))
    assert [(p.ordinal, p.why) for p in again.create] == [(1, WHY_NEW)]
    assert "ScaledUp" in reasons(again)
    assert again.status["plannedRebalance"]["members"] == [1]
    # A member within replicas that was never asked to leave stays.
    serving = decide(snapshot(with_path(CG, "spec.replicas", 2), kept,
                              previous=without_nulls(dict(ask.status)), now_offset_s=2))
    assert serving.delete == ()


def test_scaling_up_right_after_a_scale_down_plans_the_returning_members_joins() -> None:
    """3 -> 1 removed members 1 and 2; a scaler sets 2 while pod 1 still stops (the status
    lists member 1 again): member 1 is new again, its join planned, not a missing pod (the
    autoscaling e2e saw it made as "its pod is missing")."""
    pods, status = settled(CG)
    cg = with_path(CG, "spec.replicas", 1)
    ask = decide(snapshot(cg, pods, previous=status))
    gone = decide(snapshot(cg, pods, previous=without_nulls(dict(ask.status)), in_group=(0,),
                           now_offset_s=2))
    assert sorted(d.ordinal for d in gone.delete) == [1, 2]
    two = with_path(CG, "spec.replicas", 2)
    stopping = decide(snapshot(two, [pods[0], deleting(pods[1])],
                               previous=without_nulls(dict(gone.status)), in_group=(0,),
                               now_offset_s=3))
    assert stopping.create == ()
    assert 1 in [m["ordinal"] for m in stopping.status["members"]]
    up = decide(snapshot(two, pods[:1], previous=without_nulls(dict(stopping.status)),
                         now_offset_s=4))
    assert [(p.ordinal, p.why) for p in up.create] == [(1, WHY_NEW)]
    assert "ScaledUp" in reasons(up)
    assert up.status["plannedRebalance"]["reason"] == "ScaleUp"


def test_a_member_not_in_the_group_is_deleted_at_once() -> None:
    pods, status = settled(CG)
    plan = decide(snapshot(with_path(CG, "spec.replicas", 2), pods, previous=status,
                           in_group=(0, 1)))
    assert [(d.ordinal, d.why) for d in plan.delete] == [
        (2, f"{WHY_SCALE_DOWN}: the member is not in the group")]
    assert plan.calls == ()


@pytest.mark.parametrize(("after_s", "planned"), [(5, True), (120, False)],
                         ids=["the leave's rebalance", "long after: unexpected"])
def test_the_rebalance_a_leave_asked_for_is_counted_as_planned(after_s: float,
                                                                planned: bool) -> None:
    pods, status = settled(CG)
    cg = with_path(CG, "spec.replicas", 2)
    ask = decide(snapshot(cg, pods, previous=status))
    statuses = {p["metadata"]["uid"]: {"memberId": f"m-{ordinal_of(p)}", "rebalances": 1}
                for p in pods if ordinal_of(p) < 2}
    after = decide(snapshot(cg, pods[:2], previous=without_nulls(dict(ask.status)),
                            statuses=statuses, now_offset_s=after_s))
    assert after.status["rebalances"] == 1, "every rebalance is counted"
    assert after.status.get("plannedRebalances", 0) == (1 if planned else 0)
    assert after.metrics.planned_rebalances == (1 if planned else 0)
    assert ("PlannedRebalance" in reasons(after)) is planned
    assert ("UnexpectedRebalance" in reasons(after)) is not planned


def test_a_member_deleted_outside_a_rollout_is_recreated_and_says_so() -> None:
    pods, status = settled(CG)
    plan = decide(snapshot(CG, [p for p in pods if ordinal_of(p) != 1], previous=status))
    assert [(p.ordinal, p.why) for p in plan.create] == [(1, WHY_MISSING)]
    assert "ScaledUp" not in reasons(plan)


def test_a_member_still_terminating_is_not_created_twice() -> None:
    pods, status = settled(CG)
    pods = [deleting(p) if ordinal_of(p) == 1 else p for p in pods]
    plan = decide(snapshot(CG, pods, previous=status))
    assert plan.create == ()


# --- pods that ended (evicted, node shut down) ----------------------------------------------

EVICTION = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 20Mi."


def evicted(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` as the kubelet leaves one it evicted (its containers stopped for good)."""
    out = copy.deepcopy(pod)
    out["status"] = {**out["status"], "phase": "Failed", "reason": "Evicted",
                     "message": EVICTION,
                     "conditions": [{"type": "Ready", "status": "False"}],
                     "containerStatuses": [{"name": MEMBER_CONTAINER, "state": {
                         "terminated": {"exitCode": 137, "reason": "Error"}}}]}
    return out


def test_an_evicted_member_pod_is_deleted_then_replaced_with_the_same_instance_id() -> None:
    pods, status = settled(CG)
    pods = [evicted(p) if ordinal_of(p) == 1 else p for p in pods]
    first = decide(snapshot(CG, pods, previous=status, in_group=(0, 2)))
    (gone,) = first.delete
    assert (gone.ordinal, gone.name) == (1, "orders-1") and gone.why.startswith(WHY_ENDED)
    assert first.create == (), "its name is taken until it is gone"
    (warning,) = [e for e in first.events if e.reason == c.RECREATING_FAILED_POD]
    assert warning.type == "Warning"
    assert f"Failed (Evicted: {EVICTION})" in warning.message
    assert "same instance id orders-1" in warning.message
    member1 = first.status["members"][1]
    assert (member1["phase"], member1["ready"]) == ("Failed", False)
    assert first.status["readyReplicas"] == 2
    assert first.requeue_after_s is not None and first.requeue_after_s <= 1.0
    # The next pass: the pod is gone; its replacement takes the same name and instance id.
    after = [p for p in pods if ordinal_of(p) != 1]
    second = decide(snapshot(CG, after, previous=without_nulls(dict(first.status)),
                             in_group=(0, 2)))
    (made,) = second.create
    assert made.ordinal == 1 and made.why.startswith(WHY_ENDED_REPLACEMENT)
    assert made.pod["metadata"]["name"] == "orders-1"
    env = {e["name"]: e.get("value") for e in made.pod["spec"]["containers"][0]["env"]}
    assert env["STATICFLEET_GROUP_INSTANCE_ID"] == "orders-1"
    assert "STATICFLEET_STANDBY" not in env, "it joins at once"
    assert c.RECREATING_FAILED_POD not in reasons(second) and second.delete == ()


@pytest.mark.parametrize(("change", "deleted", "says"), [
    (lambda p: deleting(evicted(p)), [], None),
    (lambda p: {**evicted(p), "status": {"phase": "Succeeded"}}, ["orders-1"],
     "ended, Succeeded;"),
], ids=["already being deleted: left to finish", "Succeeded: ended all the same"])
def test_an_ended_pod_is_deleted_once(change: Any, deleted: list[str],
                                      says: str | None) -> None:
    pods, status = settled(CG)
    pods = [change(p) if ordinal_of(p) == 1 else p for p in pods]
    plan = decide(snapshot(CG, pods, previous=status, in_group=(0, 2)))
    assert [d.name for d in plan.delete] == deleted
    assert plan.create == ()
    warnings = [e.message for e in plan.events if e.reason == c.RECREATING_FAILED_POD]
    assert len(warnings) == len(deleted)
    if says:
        assert says in warnings[0]


def test_an_evicted_member_beyond_replicas_is_deleted_and_not_replaced() -> None:
    pods, status = settled(CG)
    pods = [evicted(p) if ordinal_of(p) == 2 else p for p in pods]
    cg = with_path(CG, "spec.replicas", 2)
    plan = decide(snapshot(cg, pods, previous=status, in_group=(0, 1)))
    assert [(d.ordinal, d.why.split(":")[0]) for d in plan.delete] == [(2, WHY_ENDED)]
    assert plan.calls == (), "nobody to ask to leave"
    assert "no replacement" in next(e.message for e in plan.events
                                    if e.reason == c.RECREATING_FAILED_POD)
    later = decide(snapshot(cg, [p for p in pods if ordinal_of(p) != 2],
                            previous=without_nulls(dict(plan.status)), in_group=(0, 1)))
    assert later.create == ()


def test_an_old_member_evicted_while_its_replacement_prepares_leaves_the_replacement() -> None:
    """The evicted old pod is deleted; its warm replacement, already there, is the member (no
    second replacement is made); the handoff goes on as if the old pod had been deleted."""
    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    roll.pods = [evicted(p) if p is roll.old2 else p for p in roll.pods]
    plan = roll.step(2, standby="ready", standby_ready_at=roll.at(2))
    assert [(d.name, d.why.split(":")[0]) for d in plan.delete] == [("orders-2", WHY_ENDED)]
    assert plan.create == ()
    warning = next(e.message for e in plan.events if e.reason == c.RECREATING_FAILED_POD)
    assert f"pod {roll.standby['metadata']['name']} runs instance id orders-2" in warning


def test_an_evicted_replacement_is_deleted_and_the_handoff_makes_it_again() -> None:
    roll = WarmRoll()
    roll.standby = evicted(running(roll.step(1), ready=False, tag="b")[0])
    name = roll.standby["metadata"]["name"]
    plan = roll.step(2)
    assert [(d.name, d.why.split(":")[0]) for d in plan.delete] == [(name, WHY_ENDED)]
    assert plan.create == (), "its name is taken until it is gone"
    assert "pod orders-2 runs instance id orders-2" in next(
        e.message for e in plan.events if e.reason == c.RECREATING_FAILED_POD)
    roll.standby = None
    again = roll.step(1)
    assert [(p.ordinal, p.pod["metadata"]["name"]) for p in again.create] == [(2, name)]
    assert again.delete == ()


# --- partitions nobody owns: one planned rebalance --------------------------------------------

TWO_TOPICS = {"orders": 6, "payments": 2}


def unowned_passes(*offsets: float, state: str | Sequence[str] = "Stable") -> list[Plan]:
    """Passes at `offsets` seconds over a group whose members own `orders` but not the
    `payments` topic added to the subscription (a static rejoin in a Stable group); `state`:
    the group's state, one for all passes or one per pass."""
    pods, status = settled(CG)
    plans = []
    states = [state] * len(offsets) if isinstance(state, str) else list(state)
    for offset, seen in zip(offsets, states, strict=True):
        plan = decide(snapshot(CG, pods, previous=status, partitions=TWO_TOPICS,
                               state=seen, now_offset_s=offset))
        plans.append(plan)
        status = without_nulls(dict(plan.status))
    return plans


def test_unowned_partitions_are_a_condition_and_a_warning_at_once() -> None:
    (first,) = unowned_passes(0)
    cond = c.get_condition(first.status["conditions"], c.UNASSIGNED_PARTITIONS)
    assert cond["status"] == "True" and cond["reason"] == c.PARTITIONS_UNASSIGNED
    assert "payments-0, payments-1" in cond["message"]
    assert first.metrics.unassigned_partitions == 2
    assert [e.type for e in first.events if e.reason == c.PARTITIONS_UNASSIGNED] == ["Warning"]
    assert first.calls == (), "the group may be assigning them right now"


@pytest.mark.parametrize(("offsets", "calls"), [
    ((0, 11), [[], [0]]),
    ((0, 11, 30), [[], [0], []]),
    ((0, 11, 30, 75), [[], [0], [], [0]]),
], ids=["after the grace: member 0 rejoins", "asked once", "asked again a minute later"])
def test_unowned_partitions_make_one_member_rejoin(offsets: tuple[float, ...],
                                                   calls: list[list[int]]) -> None:
    plans = unowned_passes(*offsets)
    assert [[m.ordinal for m in p.calls if m.action == "rejoin"] for p in plans] == calls
    asked = plans[1]
    assert asked.status["plannedRebalance"]["reason"] == "UnassignedPartitions"
    assert "member 0 was asked to rejoin" in c.get_condition(
        asked.status["conditions"], c.UNASSIGNED_PARTITIONS)["message"]
    warnings = [e for p in plans for e in p.events if e.reason == c.PARTITIONS_UNASSIGNED]
    assert len(warnings) == 1, "the Warning is posted once"


def test_partitions_are_not_judged_while_the_group_is_not_stable() -> None:
    (plan,) = unowned_passes(0, state="PreparingRebalance")
    assert c.get_condition(plan.status["conditions"], c.UNASSIGNED_PARTITIONS)["status"] == (
        "False")
    assert plan.calls == ()


def test_a_pass_that_cannot_judge_keeps_the_condition_and_its_start() -> None:
    """A rebalance seen between two Stable passes neither clears the condition (no second
    Warning when it shows again) nor restarts the grace."""
    plans = unowned_passes(0, 5, 8, 11, state=("Stable", "PreparingRebalance", "Stable", "Stable"))
    conds = [c.get_condition(p.status["conditions"], c.UNASSIGNED_PARTITIONS) for p in plans]
    assert [cond["status"] for cond in conds] == ["True"] * 4
    warnings = [e for p in plans for e in p.events if e.reason == c.PARTITIONS_UNASSIGNED]
    assert len(warnings) == 1
    assert [[m.ordinal for m in p.calls] for p in plans] == [[], [], [], [0]]


def test_owned_again_clears_the_condition() -> None:
    pods, status = settled(CG)
    first = decide(snapshot(CG, pods, previous=status, partitions=TWO_TOPICS))
    again = decide(snapshot(CG, pods, previous=without_nulls(dict(first.status)),
                            now_offset_s=20))
    assert c.get_condition(again.status["conditions"], c.UNASSIGNED_PARTITIONS)["status"] == (
        "False")
    assert "unassignedSince" not in without_nulls(dict(again.status))
