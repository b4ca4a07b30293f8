"""`plan.decide` as tables: what one pass does, from what it saw.

Each case builds a `Snapshot` the way the service gathers one (member pods built by the real
builders, the broker's view of the group, the members' `/status`, the previous status), and
checks the plan: pods to create and to delete with why, group configs, Events, status and
metric values. Fleets are made by the decisions themselves: a first pass over an empty group
says which pods to create, and those pods (made running and ready) are the up-to-date fleet.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from staticfleet.decisions import builders
from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Plan
from staticfleet.decisions.names import (
    ACTIVATED_ANNOTATION,
    MEMBER_CONTAINER,
    SESSION_ANNOTATION,
)
from staticfleet.decisions.plan import decide, without_nulls
from staticfleet.decisions.planned import WHY_ASK_AGAIN, WHY_SCALE_DOWN, WHY_TAKEN_BACK
from staticfleet.decisions.pods import (
    WHY_ENDED,
    WHY_ENDED_REPLACEMENT,
    WHY_MISSING,
    WHY_NEW,
    WHY_REPLACEMENT,
)
from staticfleet.decisions.rollout.effects import WHY_RESTART
from staticfleet.decisions.snapshot import Problem, Snapshot
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.statuspatch import merge_patch
from tests.unit.operator.snapshots import (
    CG,
    WARM,
    WARM_NEW,
    WarmRoll,
    body,
    builders_time,
    member_status,
    ordinal_of,
    running,
    settled,
    snapshot,
    stalled_fleet,
)
from tests.unit.operator.support import NOW, with_keys, with_path

pytestmark = pytest.mark.unit


# --- building snapshots ---------------------------------------------------------------------


def deleting(pod: dict[str, Any], seconds_ago: float = 0) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["metadata"]["deletionTimestamp"] = builders_time(30 - seconds_ago)
    out["metadata"]["deletionGracePeriodSeconds"] = 30
    return out


def reasons(plan: Plan) -> list[str]:
    return [e.reason for e in plan.events]


NEW_IMAGE = with_path(CG, "spec.template.image", "staticfleet/member:0.2.0")


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


# --- rollouts -------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "code"), [
    (("spec.template.image", "staticfleet/member:0.2.0"), "ImageChanged"),
    (("spec.kafka.topics", ["orders", "payments"]), "ClientConfigChanged"),
    (("spec.rollout.restartNonce", "2"), "ManualRestart"),
    (("spec.processing", {"transform": "mymod:fn"}), "ProcessingChanged"),
])
def test_a_change_restarts_the_highest_member_first_with_its_reasons(
        change: tuple[str, Any], code: str) -> None:
    pods, status = settled(CG)
    cg = with_path(CG, *change)
    parts = {"orders": 6, "payments": 6} if "payments" in str(change) else None
    plan = decide(snapshot(cg, pods, previous=status, partitions=parts))
    assert [(d.ordinal, d.why) for d in plan.delete] == [(2, WHY_RESTART)]
    assert [r.code for r in plan.delete[0].reasons] == [code]
    assert reasons(plan) == ["RolloutStarted", "MemberRestarting"]
    assert code in plan.events[1].message
    assert plan.status["rollout"]["phase"] == "Rolling"
    assert [f["ordinal"] for f in plan.status["rollout"]["inFlight"]] == [2]
    assert plan.create == (), "the replacement is made once the old pod is gone"
    assert plan.metrics.rollout_in_progress and plan.requeue_after_s == 1.0


def test_no_reasons_no_restart() -> None:
    pods, status = settled(CG)
    plan = decide(snapshot(CG, pods, previous=status))
    assert plan.delete == () and plan.create == ()
    assert plan.status["rollout"]["phase"] == "Idle"


def rolling_fleet() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Old fleet; the first pass after the image change deleted member 2."""
    pods, status = settled(CG)
    started = decide(snapshot(NEW_IMAGE, pods, previous=status))
    return pods, without_nulls(dict(started.status))


def test_the_restarted_members_replacement_is_created_with_the_new_revision() -> None:
    pods, status = rolling_fleet()
    gone = [p for p in pods if ordinal_of(p) != 2]
    plan = decide(snapshot(NEW_IMAGE, gone, previous=status, now_offset_s=2))
    assert [p.ordinal for p in plan.create] == [2]
    assert plan.create[0].why.startswith(WHY_REPLACEMENT)
    new_revision = plan.status["updateRevision"]
    assert plan.create[0].pod["metadata"]["annotations"]["staticfleet.io/revision"] == (
        new_revision)
    assert plan.delete == (), "one member at a time"
    assert "ScaledUp" not in reasons(plan)


@pytest.mark.parametrize(("situation", "expect_delete", "phase", "event"), [
    ("replacement starting", [], "Rolling", None),
    ("replacement back in the group", [], "Rolling", "MemberBack"),
    ("replacement ready", [], "Rolling", "MemberReady"),
    ("late", [], "AtRisk", "RestartRunningLate"),
    ("too late", [], "Stopped", "SessionTimeoutExceeded"),
])
def test_following_the_member_in_flight(situation: str, expect_delete: list[int], phase: str,
                                        event: str | None) -> None:
    pods, status = rolling_fleet()
    old = [p for p in pods if ordinal_of(p) != 2]
    ready = situation == "replacement ready"
    first = decide(snapshot(NEW_IMAGE, old, previous=status, now_offset_s=1))
    replacement = running(first, ready=ready, tag="b")
    offsets = {"replacement starting": 5, "replacement back in the group": 8,
               "replacement ready": 9, "late": 40, "too late": 50}
    in_group = (0, 1, 2) if situation.startswith("replacement b") or ready else (0, 1)
    status = without_nulls(dict(first.status))
    if ready:  # it was back in the group in the pass before
        back = decide(snapshot(NEW_IMAGE, old + running(first, ready=False, tag="b"),
                               previous=status, in_group=(0, 1, 2), now_offset_s=8))
        status = without_nulls(dict(back.status))
    plan = decide(snapshot(NEW_IMAGE, old + replacement, previous=status, in_group=in_group,
                           now_offset_s=offsets[situation]))
    assert [d.ordinal for d in plan.delete] == expect_delete
    assert plan.status["rollout"]["phase"] == phase
    if event:
        assert event in reasons(plan)
    if situation == "replacement ready":
        assert plan.metrics.absences_s and 5 < plan.metrics.absences_s[0] < 10


def test_a_paused_rollout_restarts_nobody() -> None:
    pods, status = settled(CG)
    plan = decide(snapshot(with_path(NEW_IMAGE, "spec.rollout.paused", True), pods,
                           previous=status))
    assert plan.delete == ()
    assert plan.status["rollout"]["phase"] == "Paused"
    assert c.get_condition(plan.status["conditions"], c.PROGRESSING)["reason"] == (
        c.ROLLOUT_PAUSED)


def test_a_rollout_waits_for_a_stable_group() -> None:
    pods, status = settled(CG)
    plan = decide(snapshot(NEW_IMAGE, pods, previous=status, state="PreparingRebalance"))
    assert plan.delete == ()
    assert "the group is PreparingRebalance" in plan.status["rollout"]["reason"]
    assert [b["name"] for b in plan.status["rollout"]["blockedBy"]] == ["GroupStable"]


def test_restarts_that_cannot_fit_the_session_timeout_are_refused() -> None:
    pods, status = settled(CG)
    status["measurements"] = {"restartSecondsRecent": [2000.0], "restartSecondsMax": 2000.0}
    plan = decide(snapshot(NEW_IMAGE, pods, previous=status))
    assert plan.delete == ()
    assert "RestartUnsafe" in reasons(plan)
    assert c.get_condition(plan.status["conditions"], c.DEGRADED)["reason"] == c.RESTART_UNSAFE


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "not-recorded"])
def test_operator_restart_mid_rollout_never_restarts_a_member_twice(recorded: bool) -> None:
    """The operator died after deleting member 2's pod; the new one reads the status it left
    (with or without the in-flight member recorded) and the pod being deleted."""
    pods, status = settled(CG)
    if not recorded:
        status = without_nulls(dict(decide(snapshot(NEW_IMAGE, pods, previous=status,
                                                    state="PreparingRebalance")).status))
    else:
        status = rolling_fleet()[1]
    pods = [deleting(p, seconds_ago=3) if ordinal_of(p) == 2 else p for p in pods]
    plan = decide(snapshot(NEW_IMAGE, pods, previous=status, now_offset_s=3))
    assert plan.delete == ()
    assert [f["ordinal"] for f in plan.status["rollout"]["inFlight"]] == [2]


def test_a_journaled_restart_whose_delete_never_happened_is_deleted_again() -> None:
    """The status recorded member 2's restart ahead of its DELETE (service.execute) and the
    DELETE was refused, or the operator died in between: the old pod still runs. The next
    pass deletes it again (the journal is finished, not waited on until the session timeout),
    and once it is gone its replacement follows as any restart's."""
    pods, status = rolling_fleet()
    assert [f["ordinal"] for f in status["rollout"]["inFlight"]] == [2]
    plan = decide(snapshot(NEW_IMAGE, pods, previous=status, now_offset_s=1))
    old2 = next(p for p in pods if ordinal_of(p) == 2)
    assert [(d.ordinal, d.uid) for d in plan.delete] == [(2, old2["metadata"]["uid"])]
    assert plan.create == ()
    assert plan.status["rollout"]["inFlight"][0]["stoppedAt"] == (
        status["rollout"]["inFlight"][0]["stoppedAt"]), "the restart keeps its first stop"
    deleted = [deleting(p, seconds_ago=0) if ordinal_of(p) == 2 else p for p in pods]
    assert decide(snapshot(NEW_IMAGE, deleted, previous=status, now_offset_s=1)).delete == ()


def test_a_completed_rollout_reports_its_figures() -> None:
    _, status = settled(CG)
    new_pods, _ = settled(NEW_IMAGE)
    status["rollout"] = {**status["rollout"], "revision": decide(
        snapshot(NEW_IMAGE, new_pods, previous=status)).status["updateRevision"],
        "phase": "Rolling", "startedAt": builders_time(-100), "rebalancesAtStart": 0,
        "membersRestarted": [2, 1, 0], "longestAbsenceMs": 900}
    plan = decide(snapshot(NEW_IMAGE, new_pods, previous=status))
    assert plan.status["rollout"]["phase"] == "Complete"
    assert "RolloutComplete" in reasons(plan)
    assert plan.metrics.rollout_finished == (100.0, "Complete")


# --- idle members ---------------------------------------------------------------------------


def test_more_members_than_partitions_warns_once() -> None:
    cg = with_path(CG, "spec.replicas", 4)
    first = decide(snapshot(cg, partitions={"orders": 2}))
    pods = running(first)
    plan = decide(snapshot(cg, pods, previous=without_nulls(dict(first.status)),
                           partitions={"orders": 2}))
    idle = c.get_condition(plan.status["conditions"], c.IDLE_MEMBERS)
    assert idle["status"] == "True" and "2 of 4" in idle["message"]
    assert plan.metrics.idle_members == 2
    again = decide(snapshot(cg, pods, previous=without_nulls(dict(plan.status)),
                            partitions={"orders": 2}))
    assert reasons(plan).count(c.MORE_MEMBERS_THAN_PARTITIONS) + reasons(first).count(
        c.MORE_MEMBERS_THAN_PARTITIONS) == 1
    assert c.MORE_MEMBERS_THAN_PARTITIONS not in reasons(again)


# --- errors and Degraded --------------------------------------------------------------------


@pytest.mark.parametrize(("problem", "retry"), [
    (Problem(c.KAFKA_UNREACHABLE, "Kafka unreachable: describing group at k:9092: timed out"),
     2.0),
    (Problem(c.TOPIC_MISSING, "topic(s) orders do not exist", 10.0), 10.0),
    (Problem(c.SECRET_MISSING, "Secret shop/creds does not exist", 15.0), 15.0),
    (Problem(c.INVALID_SPEC, "spec.kafka.topicPattern: is not a valid regex"), None),
])
def test_a_problem_degrades_without_touching_children(problem: Problem,
                                                      retry: float | None) -> None:
    pods, status = settled(CG)
    snap = replace(snapshot(CG, pods, previous=status), problem=problem)
    plan = decide(snap)
    assert plan.create == plan.delete == plan.children == ()
    degraded = c.get_condition(plan.status["conditions"], c.DEGRADED)
    assert (degraded["status"], degraded["reason"], degraded["message"]) == (
        "True", problem.reason, problem.message)
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", problem.reason)]
    assert plan.requeue_after_s == retry
    assert plan.metrics.error == problem.reason
    assert plan.status["members"] == status["members"], "what was observed before is kept"
    again = decide(replace(snap, body={**snap.body, "status": without_nulls(dict(plan.status))}))
    assert again.events == (), "the same problem is not announced twice"
    assert again.status["consecutiveFailures"] == 2


def test_kafka_unreachable_backs_off_exponentially_to_a_minute() -> None:
    problem = Problem(c.KAFKA_UNREACHABLE, "Kafka unreachable")
    delays = []
    status: dict[str, Any] = {}
    for _ in range(8):
        plan = decide(replace(snapshot(CG, previous=status), problem=problem))
        delays.append(plan.requeue_after_s)
        status = dict(plan.status)
    assert delays == [2, 4, 8, 16, 32, 60, 60, 60]


def test_explicit_timeouts_outside_the_brokers_bounds_are_degraded() -> None:
    cg = with_path(CG, "spec.membership", {"timeouts": {"sessionTimeoutMs": 3000}})
    plan = decide(snapshot(cg, broker_config={"group.min.session.timeout.ms": 6000}))
    degraded = c.get_condition(plan.status["conditions"], c.DEGRADED)
    assert degraded["reason"] == c.INVALID_TIMEOUTS and "6000" in degraded["message"]
    assert plan.create == ()


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


# --- status writes --------------------------------------------------------------------------


def test_a_pass_that_changes_nothing_writes_nothing() -> None:
    pods, status = settled(CG)
    later = decide(snapshot(CG, pods, previous=status, now_offset_s=600))
    assert merge_patch(status, without_nulls(dict(later.status))) == {}
    assert later.events == ()


def test_rebalances_are_counted_from_the_members_counters() -> None:
    pods, status = settled(CG)
    statuses = {p["metadata"]["uid"]: {"memberId": f"m-{ordinal_of(p)}", "rebalances": 1}
                for p in pods}
    plan = decide(snapshot(CG, pods, previous=status, statuses=statuses))
    assert plan.metrics.rebalances == 1 and plan.status["rebalances"] == 1
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", c.UNEXPECTED_REBALANCE)]


def test_a_new_groups_members_joining_one_after_another_are_planned_rebalances() -> None:
    """A new group's members join as their processes start: the group rebalances while it
    forms (a KIP-848 group once per member). The operator created them: those rebalances are
    planned (reason Create) and stay out of the rebalance alert; once the group was Ready, a
    rebalance is unexpected again (the test above)."""
    first = decide(snapshot(CG))
    assert first.status["plannedRebalance"]["reason"] == "Create"
    assert not [e for e in first.events if e.reason == c.SCALED_UP], "not a scale-up"
    pods = running(first, ready=False)
    statuses = {p["metadata"]["uid"]: {"memberId": f"m-{ordinal_of(p)}", "rebalances": 1}
                for p in pods}
    forming = decide(snapshot(CG, pods, previous=without_nulls(dict(first.status)),
                              statuses=statuses, now_offset_s=20))
    assert forming.metrics.rebalances == 1 and forming.metrics.planned_rebalances == 1
    assert [(e.type, e.reason) for e in forming.events] == [("Normal", c.PLANNED_REBALANCE)]
    # Formed (Ready once): the record is dropped, so a rebalance a minute later, while the
    # group is not Ready (a member restarting, say), is not the forming's.
    pods = running(first)
    ready = without_nulls(dict(decide(snapshot(
        CG, pods, previous=without_nulls(dict(forming.status)), statuses=statuses,
        now_offset_s=30)).status))
    assert c.get_condition(ready["conditions"], c.READY)["status"] == "True"
    ready = without_nulls(dict(decide(snapshot(CG, pods, previous=ready, statuses=statuses,
                                               now_offset_s=31)).status))
    assert ready.get("plannedRebalance") is None
    not_ready = with_path(ready, "conditions", [
        {**cond, "status": "False"} if cond["type"] == c.READY else cond
        for cond in ready["conditions"]])
    again = {uid: {**st, "rebalances": 2} for uid, st in statuses.items()}
    later = decide(snapshot(CG, pods, previous=not_ready, statuses=again, now_offset_s=90))
    assert later.metrics.rebalances == 1 and later.metrics.planned_rebalances == 0


def test_a_restart_that_fits_the_new_timeout_but_not_the_running_one_is_refused() -> None:
    """Measured restarts of 60 s raise the automatic timeout to 92 s, but the members joined
    with 45 s: the broker would evict a restarting member at 45 s."""
    pods, status = settled(CG)
    assert all(p["metadata"]["annotations"][SESSION_ANNOTATION] == "45000"
               for p in pods)
    status["measurements"] = {"restartSecondsRecent": [60.0], "restartSecondsMax": 60.0}
    plan = decide(snapshot(NEW_IMAGE, pods, previous=status))
    assert plan.status["timeouts"]["sessionTimeoutMs"] > 90000
    assert plan.delete == ()
    refused = [e for e in plan.events if e.reason == c.RESTART_UNSAFE]
    assert refused and "members run with 45000 ms" in refused[0].message
    assert c.get_condition(plan.status["conditions"], c.DEGRADED)["reason"] == c.RESTART_UNSAFE
    assert c.get_condition(plan.status["conditions"], c.PROGRESSING)["reason"] == (
        c.ROLLOUT_REFUSED)


def test_a_kip848_groups_timeout_applies_at_once_so_the_new_one_counts() -> None:
    """Without widening (the automatic session timeout then covers the restarts;
    tests/unit/operator/test_widening.py has the group that widens)."""
    unwidened = with_path(CG, "spec.rollout.widenSessionTimeout", False)
    cg = with_path(with_path(unwidened, "spec.template.image", "staticfleet/member:0.2.0"),
                   "spec.membership", {"protocol": "consumer"})
    config = {"group.consumer.max.session.timeout.ms": 120000}
    pods, status = settled(with_path(unwidened, "spec.membership", {"protocol": "consumer"}))
    status["measurements"] = {"restartSecondsRecent": [40.0], "restartSecondsMax": 40.0}
    plan = decide(snapshot(cg, pods, previous=status, broker_config=config))
    assert [d.ordinal for d in plan.delete] == [2]


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
    tests/unit/operator/test_widening.py)."""
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


# --- what stops a group -----------------------------------------------------------------------


def test_a_member_stuck_terminating_is_reported_and_not_started_twice() -> None:
    pods, status = settled(CG)
    stuck = deleting(next(p for p in pods if ordinal_of(p) == 1), seconds_ago=120)
    others = [p for p in pods if ordinal_of(p) != 1]
    plan = decide(snapshot(CG, [*others, stuck], previous=status, in_group=(0, 2)))
    assert plan.create == (), "a second process with member 1's instance id could fence it"
    degraded = c.get_condition(plan.status["conditions"], c.DEGRADED)
    assert degraded["reason"] == c.MEMBER_STUCK_TERMINATING
    assert "orders-1" in degraded["message"] and "--force" in degraded["message"]
    assert reasons(plan).count(c.MEMBER_STUCK_TERMINATING) == 1
    again = decide(snapshot(CG, [*others, stuck], previous=without_nulls(dict(plan.status)),
                            in_group=(0, 2), now_offset_s=30))
    assert c.MEMBER_STUCK_TERMINATING not in reasons(again), "said once"
    third = decide(snapshot(CG, [*others, stuck], previous=without_nulls(dict(again.status)),
                            in_group=(0, 2), now_offset_s=60))
    assert merge_patch(without_nulls(dict(again.status)),
                       without_nulls(dict(third.status))) == {}, "no status write each pass"
    fresh = deleting(next(p for p in pods if ordinal_of(p) == 1), seconds_ago=10)
    ok = decide(snapshot(CG, [*others, fresh], previous=status, in_group=(0, 2)))
    assert c.get_condition(ok.status["conditions"], c.DEGRADED)["reason"] != (
        c.MEMBER_STUCK_TERMINATING)


def claimant(namespace: str, name: str, created: str, uid: str) -> Any:
    from staticfleet.decisions.snapshot import Claimant

    return Claimant(namespace, name, created, uid)


@pytest.mark.parametrize(("mine", "other", "refused"), [
    ("2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z", True),
    ("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", False),
])
def test_two_groups_with_one_kafka_group_id_the_younger_is_refused(
        mine: str, other: str, refused: bool) -> None:
    cg = with_path(CG, "metadata.uid", "me")
    pods, status = settled(cg)
    claimants = (claimant("shop", "orders", mine, "me"),
                 claimant("billing", "orders", other, "them"))
    plan = decide(replace(snapshot(cg, pods, previous=status), claimants=claimants))
    degraded = c.get_condition(plan.status["conditions"], c.DEGRADED)
    if refused:
        assert degraded["reason"] == c.GROUP_ID_IN_USE
        assert "billing/orders" in degraded["message"]
        assert "spec.kafka.groupId" in degraded["message"]
        assert sorted(d.ordinal for d in plan.delete) == [0, 1, 2] and plan.create == ()
        assert plan.children == ()
    else:
        assert degraded["status"] == "False" and plan.delete == ()


def member_0_crash_looping(restarts: int, terminated: dict[str, Any]) -> tuple[Plan,
                                                                             dict[str, Any]]:
    """The plan for a settled fleet whose member 0 crash-loops, its last exit `terminated`; and
    member 0's pod."""
    pods, status = settled(CG)
    failing = copy.deepcopy(next(p for p in pods if ordinal_of(p) == 0))
    failing["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    failing["status"]["containerStatuses"] = [{
        "name": MEMBER_CONTAINER, "restartCount": restarts,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": terminated}}]
    others = [p for p in pods if ordinal_of(p) != 0]
    return decide(snapshot(CG, [failing, *others], previous=status, in_group=(1, 2))), failing


@pytest.mark.parametrize(("said", "field"), [
    ("consumer_runtime: configuration refused: processing.transform: cannot import module "
     "'nosuch' (No module named 'nosuch'); install it in the image or fix the name",
     "spec.processing.transform"),
    ("consumer_runtime: configuration refused: consumer: librdkafka refused the settings "
     "(No such configuration property: \"fetch.max.bites\"); fix the consumer properties",
     "spec.kafka.clientProperties"),
    ("Traceback (most recent call last):\nValueError: boom", None),
])
def test_a_member_that_refuses_to_start_is_quoted_in_the_status(said: str,
                                                               field: str | None) -> None:
    plan, _ = member_0_crash_looping(
        3, {"exitCode": 2, "message": "some start-up noise\n" + said})
    degraded = c.get_condition(plan.status["conditions"], c.DEGRADED)
    assert degraded["reason"] == c.MEMBER_FAILING
    assert "member 0" in degraded["message"] and "exited with code 2" in degraded["message"]
    assert said.splitlines()[-1] in degraded["message"]
    assert (f"fix {field}" in degraded["message"]) if field else (
        "see the pod's log" in degraded["message"])
    assert [e.reason for e in plan.events if e.type == "Warning"] == [c.MEMBER_FAILING]


OWN_WORDS = ("consumer_runtime: member stops: batch 4 failed 3 times and no dead-letter topic is "
             "set: SparkRuntimeException: [USER_RAISED_EXCEPTION] bad record SQLSTATE: P0001")
JVM_LOG_END = (
    "26/01/01 12:00:00 ERROR Executor: Exception in task 0.0 in stage 3.0 (TID 3)\n"
    "org.apache.spark.SparkRuntimeException: [USER_RAISED_EXCEPTION] bad record SQLSTATE: P0001\n"
    "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.raiseError(QueryExecutionErrors"
    ".scala:2761)\n"
    "\tat org.apache.spark.util.SparkErrorUtils.tryWithSafeFinally$(SparkErrorUtils.scala:83)\n"
    "\t... 17 more")


@pytest.mark.parametrize(("message", "quoted"), [
    (OWN_WORDS, OWN_WORDS),
    ("2026-01-01 12:00:00,000 ERROR consumer_runtime.member: member stops: ...\n"
     f"{OWN_WORDS}\n{JVM_LOG_END}", OWN_WORDS),
    (JVM_LOG_END, "org.apache.spark.SparkRuntimeException: [USER_RAISED_EXCEPTION] bad record "
                  "SQLSTATE: P0001"),
], ids=["its termination message", "its own words in a log end", "a log end without them"])
def test_a_failing_member_is_quoted_by_its_own_error_never_a_stack_frame(
        message: str, quoted: str) -> None:
    """The member writes its error as its termination message; a log end (a member that died
    before it could write one) is read for the error, never a frame of a JVM stack trace."""
    pods, status = settled(CG)
    failing = copy.deepcopy(next(p for p in pods if ordinal_of(p) == 0))
    failing["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    failing["status"]["containerStatuses"] = [{
        "name": MEMBER_CONTAINER, "restartCount": 1,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "message": message}}}]
    others = [p for p in pods if ordinal_of(p) != 0]
    plan = decide(snapshot(CG, [failing, *others], previous=status, in_group=(1, 2)))
    degraded = c.get_condition(plan.status["conditions"], c.DEGRADED)
    assert degraded["reason"] == c.MEMBER_FAILING
    assert degraded["message"] == (f"member 0 (pod {failing['metadata']['name']}) exited with "
                                   f"code 1: {quoted} (see the pod's log)")


INFO_LOG_END = ("2026-01-01 12:00:00,000 INFO consumer_runtime.member: joined, 2 partitions\n"
                "2026-01-01 12:00:19,300 INFO consumer_runtime.member: first batch processed "
                "19.300 s after process start")


@pytest.mark.parametrize(("code", "reason", "message", "says", "never"), [
    (137, "Error", INFO_LOG_END,
     "was killed by SIGKILL (exit code 137): usually an OOM kill (its memory limit), a kill by "
     "hand, or the liveness probe; its log's end shows no error (see the pod's log and Events)",
     "first batch processed"),
    (137, "OOMKilled", INFO_LOG_END,
     "was killed by SIGKILL (exit code 137): OOM-killed, it reached its memory limit "
     "(spec.template.resources.limits.memory); its log's end shows no error", "first batch"),
    (137, "Error", INFO_LOG_END + "\n2026-01-01 12:00:20,000 ERROR py4j: connection refused",
     "was killed by SIGKILL (exit code 137): usually an OOM kill (its memory limit), a kill by "
     "hand, or the liveness probe; its log's last error: 2026-01-01 12:00:20,000 ERROR py4j: "
     "connection refused", "first batch"),
    (134, "Error", "", "was killed by SIGABRT (exit code 134)", "exited with code"),
], ids=["SIGKILL, an INFO line last", "OOMKilled", "SIGKILL, an error line in the log's end",
        "SIGABRT, no message"])
def test_a_member_killed_by_a_signal_is_named_by_it_never_by_its_last_info_line(
        code: int, reason: str, message: str, says: str, never: str) -> None:
    """Issue 34 item 10: a member killed by SIGKILL (exit 137) got a MemberFailing Warning that
    quoted the last INFO line of its log as if it were the error."""
    plan, failing = member_0_crash_looping(
        1, {"exitCode": code, "reason": reason, "message": message})
    degraded = c.get_condition(plan.status["conditions"], c.DEGRADED)
    assert degraded["reason"] == c.MEMBER_FAILING
    said = degraded["message"]
    assert said.startswith(f"member 0 (pod {failing['metadata']['name']}) {says}"), said
    assert never not in said, said


def test_a_deleted_up_to_date_pod_is_not_a_rollout_and_stops_none() -> None:
    """Someone deletes member 1's pod (or its node goes) while every member is up to date: it
    is recreated; no rollout is followed, so none can stop at the session timeout."""
    pods, status = settled(CG)
    gone = [deleting(p) if ordinal_of(p) == 1 else p for p in pods]  # 50 s before now
    plan = decide(snapshot(CG, gone, previous=status, in_group=(0, 2), now_offset_s=50))
    assert plan.status["rollout"]["phase"] == "Idle" and plan.status["rollout"]["inFlight"] == []
    assert c.get_condition(plan.status["conditions"], c.DEGRADED)["status"] == "False"
    assert "SessionTimeoutExceeded" not in reasons(plan)


def test_within_one_second_the_group_already_on_the_id_keeps_it() -> None:
    cg = with_path(CG, "metadata.uid", "me")
    pods, status = settled(cg)
    same = "2026-01-01T00:00:00Z"
    claimants = (claimant("zz", "orders", same, "me"),
                 replace(claimant("aa", "orders", same, "them"), holding=False))
    mine = replace(claimants[0], holding=True)
    plan = decide(replace(snapshot(cg, pods, previous=status), claimants=(mine, claimants[1])))
    assert c.get_condition(plan.status["conditions"], c.DEGRADED)["status"] == "False"
    plan = decide(replace(snapshot(cg, pods, previous=status), claimants=claimants))
    assert c.get_condition(plan.status["conditions"], c.DEGRADED)["reason"] == c.GROUP_ID_IN_USE


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


# --- broker bounds that cannot be read --------------------------------------------------------


def test_bounds_the_principal_may_not_read_fall_back_to_kafkas_defaults() -> None:
    denied = ("describing broker 1 configuration at kafka:9092: Cluster authorization failed")
    plan = decide(replace(snapshot(CG, state="Dead"), bounds_denied=denied))
    assert [p.ordinal for p in plan.create] == [0, 1, 2], "the group still reconciles"
    cond = c.get_condition(plan.status["conditions"], c.BROKER_BOUNDS_KNOWN)
    assert cond["status"] == "False" and cond["reason"] == c.DESCRIBE_CONFIGS_DENIED
    assert denied in cond["message"] and "DescribeConfigs on the Cluster" in cond["message"]
    assert plan.status["timeouts"]["sessionTimeoutMs"] == 45000
    assert [e.type for e in plan.events if e.reason == c.DESCRIBE_CONFIGS_DENIED] == ["Warning"]
    later = decide(replace(snapshot(CG, running(plan), previous=without_nulls(
        dict(plan.status))), bounds_denied=denied))
    assert c.DESCRIBE_CONFIGS_DENIED not in reasons(later), "said once"
    known = decide(snapshot(CG, running(plan), previous=without_nulls(dict(later.status))))
    assert c.get_condition(known.status["conditions"], c.BROKER_BOUNDS_KNOWN)["status"] == (
        "True")


# --- warm handoff ---------------------------------------------------------------------------


def test_a_warm_handoff_starts_the_replacement_in_standby_beside_the_member() -> None:
    roll = WarmRoll()
    plan = roll.step(1)
    (create,) = plan.create
    revision = plan.status["updateRevision"]
    env = {e["name"]: e.get("value") for e in create.pod["spec"]["containers"][0]["env"]}
    assert create.ordinal == 2 and create.pod["metadata"]["name"] == f"orders-2-{revision[:5]}"
    assert env["STATICFLEET_STANDBY"] == "true"
    assert env["STATICFLEET_GROUP_INSTANCE_ID"] == "orders-2", "the same instance id"
    assert plan.delete == (), "make before break: nothing stops yet"
    assert reasons(plan)[:2] == [c.ROLLOUT_STARTED, c.HANDOFF_STARTED]
    assert roll.flight()["phase"] == "Preparing" and roll.flight()["mode"] == "warm"
    assert roll.status["rollout"]["strategy"] == "WarmHandoff"
    assert plan.metrics.rollout_in_progress is True


def test_a_warm_handoff_stops_the_old_member_only_once_the_replacement_is_standby_ready() -> None:
    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    warming = roll.step(5)
    assert warming.delete == () and warming.create == () and warming.calls == ()
    assert warming.requeue_after_s is not None and warming.requeue_after_s <= 1.0
    ready = roll.step(5, standby="ready", standby_ready_at=roll.at(10))
    (switch,) = ready.switchovers
    stop = switch.old
    assert stop.name == "orders-2" and stop.uid == roll.old2["metadata"]["uid"]
    assert stop.reasons and stop.why.startswith("restart")
    assert (switch.standby, switch.standby_uid) == (roll.standby["metadata"]["name"],
                                                    roll.standby["metadata"]["uid"])
    # The drained process waits half the session timeout, at most 2.5 s, to be replaced, then
    # comes back unless another process holds its instance id: an operator that dies between
    # the drain and the activation leaves its partitions without a processing owner that long.
    session_ms = roll.status["timeouts"]["sessionTimeoutMs"]
    assert switch.hold_ms == min(session_ms // 2, 2500) == 2500
    # It waits for the old member's batch an eighth of the session timeout (2-15 s), then
    # stops it instead, leaving the rest of the session timeout for the replacement.
    assert switch.wait_s == min(15.0, max(2.0, session_ms / 8000))
    # The old pod's deletion waits for the replacement's first batch a quarter of the session
    # timeout (at most 5 s); the drained process, if its hold ends first, sees the
    # replacement holding its instance id and stays out.
    assert switch.first_batch_wait_s == min(5.0, session_ms / 4000)
    assert roll.flight()["phase"] == "Stopping"
    assert ready.delete == (), "the old pod is deleted by the switch, after the activation"
    assert ready.calls == (), "activated by the switch, once the drain answered"


def test_a_warm_handoff_whose_standby_has_no_address_stops_the_old_member_instead() -> None:
    """No address to activate the standby at the moment the drain answers: no switch; the old
    member is stopped (it drains on SIGTERM) and the standby activated once its close is seen,
    as before drains existed."""
    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    del roll.standby["status"]["podIP"]
    ready = roll.step(5, standby="ready", standby_ready_at=roll.at(5))
    (stop,) = ready.delete
    assert ready.switchovers == () and stop.uid == roll.old2["metadata"]["uid"]
    assert roll.flight()["phase"] == "Stopping"


def test_after_a_switchover_the_drain_is_the_close_and_a_refused_activation_is_sent_again(
        ) -> None:
    """The switch's drain answer is recorded as the old process's close (`Memory.note_drained`).
    Next pass: a standby that took the activation is followed to its rejoin (nothing sent
    again); one that still says standby-ready is asked again; and an operator that restarted
    before it wrote the Stopping status switches over again (a drained member answers a
    second drain at once)."""
    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    before = roll.status
    (switch,) = roll.step(5, standby="ready", standby_ready_at=roll.at(5)).switchovers
    redone = decide(replace(snapshot(
        WARM_NEW, [*roll.pods, roll.standby], previous=before, in_group=(0, 1, 2),
        now_offset_s=roll.t + 1, statuses=roll.statuses(standby="ready")), closed_by_pod={}))
    assert [w.old.uid for w in redone.switchovers] == [switch.old.uid], "restart: switch again"
    roll.pods = [deleting(p, 0) if p is roll.old2 else p for p in roll.pods]
    roll.closed_by_pod[switch.old.uid] = NOW + timedelta(seconds=roll.t + 0.1)
    taken = roll.step(0.3, standby=None, member_id="")
    assert taken.calls == () and taken.switchovers == () and taken.delete == ()
    assert roll.flight()["phase"] == "Activating"
    refused = roll.step(0.3, standby="ready")
    (call,) = refused.calls
    assert (call.action, call.pod) == ("activate", switch.standby)


def test_a_warm_handoff_activates_the_replacement_once_the_old_process_closed() -> None:
    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    roll.step(5, standby="ready", standby_ready_at=roll.at(5))
    roll.pods = [deleting(p, 0) if p is roll.old2 else p for p in roll.pods]
    draining = roll.step(0.5, standby="ready")
    assert draining.calls == () and roll.flight()["phase"] == "Stopping"
    # The kubelet reports the exit to the second (finishedAt): 7 s.
    roll.closed_by_pod[roll.old2["metadata"]["uid"]] = NOW + timedelta(seconds=roll.t + 0.5)
    closed = roll.step(0.5, standby="ready")
    (call,) = closed.calls
    assert (call.action, call.pod) == ("activate", roll.standby["metadata"]["name"])
    assert roll.flight()["phase"] == "Activating"
    # In the group with its partitions, ready, its first batch done 0.8 s after the close.
    roll.pods = [p for p in roll.pods if p is not roll.old2]
    roll.standby["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    last_old = roll.status["rollout"]["inFlight"][0]["oldLastBatchAt"]
    first = roll.at(roll.t + 0.8)
    done = roll.step(0.8, standby=None, member_id="m-2", first_batch_at=first)
    assert c.MEMBER_READY in reasons(done) and "processing gap" in " ".join(
        e.message for e in done.events)
    (handoff,) = roll.status["rollout"]["handoffs"]
    gap_ms = round((first - c.parse_rfc3339(last_old).timestamp()) * 1000)
    assert handoff["mode"] == "warm" and handoff["processingGapMs"] == gap_ms == 2300
    assert handoff["absenceMs"] == 800 and handoff["standbyReadyMs"] == 4000
    assert roll.status["rollout"]["longestProcessingGapMs"] == gap_ms
    assert done.metrics.processing_gaps_s == (2.3,)
    assert done.metrics.absences_s == (0.8,)


def test_a_switchovers_figures_come_from_the_members_clocks_to_the_millisecond() -> None:
    """Absence: the old process's close (its drain's answer) to the replacement's own first
    assignment; processing gap: the old process's last batch (its drain's answer, not the
    last /status read before it) to the replacement's first batch. Not when a pass happens
    to see them: here the next pass comes 1.1 s later."""
    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    (switch,) = roll.step(5, standby="ready", standby_ready_at=roll.at(5)).switchovers
    uid = switch.old.uid
    last_batch, closed = roll.at(roll.t + 0.05), roll.at(roll.t + 0.1)
    roll.pods = [p for p in roll.pods if p is not roll.old2]  # gone by the next pass
    roll.closed_by_pod[uid] = datetime.fromtimestamp(closed, UTC)
    drained = {uid: datetime.fromtimestamp(last_batch, UTC)}
    roll.standby["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assigned, first_batch = closed + 0.014, closed + 0.31
    roll.t += 1.1
    plan = decide(replace(snapshot(
        WARM_NEW, [*roll.pods, roll.standby], previous=roll.status, in_group=(0, 1, 2),
        now_offset_s=roll.t, statuses=roll.statuses(
            standby=None, member_id="m-2", first_assignment_at=assigned,
            first_batch_at=first_batch)), closed_by_pod=roll.closed_by_pod,
        final_batches=drained))
    roll.status = without_nulls(dict(plan.status))
    (handoff,) = roll.status["rollout"]["handoffs"]
    assert handoff["absenceMs"] == 14, handoff
    assert handoff["processingGapMs"] == round((first_batch - last_batch) * 1000) == 360
    # Where each span begins, to the millisecond (the demo's plot shades these).
    assert c.parse_rfc3339(handoff["absentFrom"]).timestamp() == closed
    assert c.parse_rfc3339(handoff["processingGapFrom"]).timestamp() == last_batch


@pytest.mark.parametrize("drain_s", [6.0, 12.0])
@pytest.mark.parametrize("old_pod_seen_next", [True, False])
def test_a_long_drain_is_not_absence(drain_s: float, old_pod_seen_next: bool) -> None:
    """Issue 34 item 6: drains of 6 s and 12 s were recorded as absences of 6,050 and
    12,050 ms: the last /status answer was the switchover pass's read, the close the drain's
    answer, more than 5 s apart, so the old process was taken as frozen. The drain's answer is
    an answer (`Memory.note_drained`), stamped with its own time, and is kept after the old pod
    is gone; the member was in the group throughout: 50 ms away."""
    from staticfleet.memory import Memory

    memory = Memory()
    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    roll.t += 5
    pods = [*roll.pods, roll.standby]
    statuses = roll.statuses(standby="ready", standby_ready_at=roll.at(5))
    switch_at = NOW + timedelta(seconds=roll.t)
    plan = decide(replace(snapshot(
        WARM_NEW, pods, previous=roll.status, in_group=(0, 1, 2), now_offset_s=roll.t,
        statuses=statuses), last_answers=memory.note_answers(list(statuses), pods, switch_at)))
    (switch,) = plan.switchovers
    roll.status = without_nulls(dict(plan.status))
    closed = switch_at + timedelta(seconds=drain_s)  # the drain's answer
    memory.note_drained(switch.old.uid, closed, closed - timedelta(seconds=0.2))
    roll.pods = [deleting(p, 0) if p is roll.old2 else p for p in roll.pods]
    if not old_pod_seen_next:
        roll.pods = [p for p in roll.pods if p["metadata"]["uid"] != switch.old.uid]
    roll.standby["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assigned = closed + timedelta(seconds=0.05)
    roll.t = (closed - NOW).total_seconds() + 1.1
    pods = [*roll.pods, roll.standby]
    statuses = {roll.standby["metadata"]["uid"]: member_status(
        2, standby=None, member_id="m-2", first_assignment_at=assigned.timestamp(),
        first_batch_at=assigned.timestamp() + 0.3),
        **{p["metadata"]["uid"]: member_status(ordinal_of(p)) for p in roll.pods
           if not p["metadata"].get("deletionTimestamp")}}
    for pod in pods:
        memory.exits.note_closed(pod)
    plan = decide(replace(snapshot(
        WARM_NEW, pods, previous=roll.status, in_group=(0, 1, 2), now_offset_s=roll.t,
        statuses=statuses), closed_by_pod=dict(memory.exits.closed),
        final_batches=dict(memory.exits.final_batches),
        last_answers=memory.note_answers(list(statuses), pods, NOW + timedelta(seconds=roll.t))))
    status = without_nulls(dict(plan.status))
    (handoff,) = status["rollout"]["handoffs"]
    assert handoff["absenceMs"] == 50, handoff


def test_a_handoff_in_stopping_gets_its_activation_while_the_coordinator_moves() -> None:
    """The broker coordinating the group died while member 2's old process stopped: the group
    cannot be described (CoordinatorMoving), yet the standby is activated once the old process
    closed, so it joins when the new coordinator answers, inside the session timeout. Nothing
    else is steered; the pass is retried in a second, not with a backoff."""
    roll = WarmRoll()
    roll.to_the_old_members_exit()
    pods = [*roll.pods, roll.standby]
    moving = Problem(c.COORDINATOR_MOVING, "describing group orders: NOT_COORDINATOR", 1.0)
    snap = replace(snapshot(WARM_NEW, pods, previous=roll.status, in_group=(0, 1),
                            now_offset_s=roll.t + 0.5,
                            statuses=roll.statuses(standby="ready")),
                   closed_by_pod=roll.closed_by_pod, problem=moving)
    plan = decide(snap)
    (call,) = plan.calls
    (mark,) = plan.annotate
    assert (call.action, call.pod) == ("activate", roll.standby["metadata"]["name"])
    assert mark.name == call.pod
    assert plan.create == () and plan.delete == ()
    assert plan.requeue_after_s == 1.0
    degraded_cond = c.get_condition(plan.status["conditions"], c.DEGRADED)
    assert degraded_cond["reason"] == c.COORDINATOR_MOVING
    # The old process still running: nothing is activated (two processes would fence).
    still = decide(replace(snap, closed_by_pod={}, pods=(*pods, roll.old2)))
    assert still.calls == () and still.annotate == ()
    # Any other Kafka failure steers nothing.
    other = decide(replace(snap, problem=Problem(c.KAFKA_UNREACHABLE, "no broker")))
    assert other.calls == ()


def test_a_standby_is_marked_activated_before_it_is_asked_to_activate() -> None:
    """The mark is the annotation the standby pod's STATICFLEET_ACTIVATED reads at each container
    start: set before the activation (execute annotates before it calls), a restart of the
    activated member's container joins the group directly, with the operator up or not. A
    standby never activated is never marked: it must wait while the old member may run."""
    from staticfleet.decisions.actions import summarize

    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    ready = roll.step(5, standby="ready", standby_ready_at=roll.at(5))
    assert ready.annotate == () and ready.calls == (), "the old member still runs"
    roll.pods = [p for p in roll.pods if p is not roll.old2]
    roll.closed_by_pod[roll.old2["metadata"]["uid"]] = NOW + timedelta(seconds=roll.t)
    asked = roll.step(0.5, standby="ready")
    (call,) = asked.calls
    (mark,) = asked.annotate
    assert call.action == "activate"
    assert (mark.ordinal, mark.name, mark.uid) == (2, call.pod, roll.standby["metadata"]["uid"])
    assert mark.annotations == {ACTIVATED_ANNOTATION: "true"}
    lines = list(summarize(asked))
    said = [i for i, line in enumerate(lines) if line.startswith(f"annotate pod {call.pod}")]
    assert said and said[0] < lines.index(f"ask member 2 (pod {call.pod}) to activate: {call.why}")
    # Marked (the watch shows it): a pass that asks again does not mark it again.
    roll.standby["metadata"]["annotations"][ACTIVATED_ANNOTATION] = "true"
    again = roll.step(0.5, standby="ready")
    assert again.annotate == ()


@pytest.mark.parametrize("how", ["replacement exits", "standby timeout"])
def test_a_replacement_that_never_gets_standby_ready_stops_the_rollout_and_keeps_the_member(
        how: str) -> None:
    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    if how == "replacement exits":
        roll.standby["status"]["containerStatuses"] = [{
            "name": MEMBER_CONTAINER, "restartCount": 0,
            "state": {"terminated": {"exitCode": 2, "message": (
                "consumer_runtime: configuration refused: processing.transform: cannot "
                "import module 'shop.jobs'")}}}]
        plan = roll.step(3)
    else:
        plan = roll.step(601)
    (gone,) = plan.delete
    assert gone.name == roll.standby["metadata"]["name"], "only the replacement goes"
    assert roll.status["rollout"]["phase"] == "Stopped"
    warning = next(e for e in plan.events if e.reason == c.HANDOFF_FAILED)
    assert warning.type == "Warning"
    assert ("cannot import module 'shop.jobs'" if how == "replacement exits"
            else "standbyTimeoutSeconds") in warning.message
    assert "keeps running" in warning.message
    assert roll.status["rollout"]["rebalancesDuringRollout"] == 0
    # Nothing more happens for this revision: the old member keeps serving.
    roll.standby = None
    after = roll.step(2)
    assert after.create == () and after.delete == () and after.calls == ()


def test_a_standby_that_does_not_take_the_activation_is_replaced_by_a_cold_start() -> None:
    roll = WarmRoll()
    roll.to_the_old_members_exit()
    asked = roll.step(0.5, standby="ready")
    assert [call.action for call in asked.calls] == ["activate"]
    still = roll.step(6, standby="ready")
    (gone,) = still.delete
    assert gone.name == roll.standby["metadata"]["name"]
    assert c.HANDOFF_FALLBACK in reasons(still) and roll.flight()["mode"] == "cold"
    roll.standby = None
    cold = roll.step(1)
    (create,) = cold.create
    env = {e["name"] for e in create.pod["spec"]["containers"][0]["env"]}
    assert create.pod["metadata"]["name"] == "orders-2" and "STATICFLEET_STANDBY" not in env
    assert create.why.startswith(WHY_REPLACEMENT)


def test_a_replacement_restarted_in_place_after_its_activation_is_activated_again() -> None:
    """Its container restarts in standby (the pod's environment): the operator activates the
    only member process of the ordinal again, outside any rollout step, once it is
    standby-ready (it refuses an activation before)."""
    pods, status = settled(WARM)
    standby = copy.deepcopy(next(p for p in pods if ordinal_of(p) == 1))
    statuses = {p["metadata"]["uid"]: member_status(ordinal_of(p)) for p in pods}
    statuses[standby["metadata"]["uid"]] = member_status(1, standby="warming", member_id="")
    warming = decide(snapshot(WARM, pods, previous=status, statuses=statuses, in_group=(0, 2)))
    assert warming.calls == () and warming.create == () and warming.delete == ()
    statuses[standby["metadata"]["uid"]] = member_status(1, standby="ready", member_id="")
    plan = decide(snapshot(WARM, pods, previous=status, statuses=statuses, in_group=(0, 2)))
    assert [(call.ordinal, call.action) for call in plan.calls] == [(1, "activate")]
    assert plan.create == () and plan.delete == ()


def test_an_old_member_gone_while_its_replacement_prepares_hands_over_without_a_stop() -> None:
    """Killed mid-handoff (its pod deleted by someone, or lost with its node): nothing is left
    to stop; the replacement is activated once the old process is known to be gone and it is
    standby-ready (a warming standby refuses the activation, so it is not sent before)."""
    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    roll.pods = [p for p in roll.pods if p is not roll.old2]
    plan = roll.step(2)
    assert plan.delete == (), "nothing to stop"
    assert roll.flight()["phase"] in ("Stopping", "Activating")
    assert plan.calls == (), "warming: not activated yet"
    ready = roll.step(3, standby="ready", standby_ready_at=roll.at(roll.t))
    assert [(call.ordinal, call.action) for call in ready.calls] == [(2, "activate")]


def old_member_closed_while_the_standby_warms() -> WarmRoll:
    """Member 2's old process closed (its pod deleted by someone) 2 s into the handoff, its
    standby replacement still warming."""
    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    roll.pods = [p for p in roll.pods if p is not roll.old2]
    roll.closed_by_pod[roll.old2["metadata"]["uid"]] = NOW + timedelta(seconds=2)
    roll.step(1)
    return roll


def test_a_warming_standby_whose_old_member_closed_is_activated_once_ready() -> None:
    """No deadline for taking an activation runs while none can be sent (it would have fallen
    back to a cold start 5 s after the close): the standby's own timeout bounds the wait."""
    roll = old_member_closed_while_the_standby_warms()
    still = roll.step(20)
    assert still.calls == () and still.delete == () and still.create == ()
    assert c.HANDOFF_FALLBACK not in reasons(still) and roll.flight()["mode"] == "warm"
    assert still.requeue_after_s is not None and still.requeue_after_s <= 1.0
    ready = roll.step(1, standby="ready", standby_ready_at=roll.at(roll.t))
    assert [(call.ordinal, call.action) for call in ready.calls] == [(2, "activate")]


def test_a_standby_not_ready_within_its_timeout_after_the_old_member_closed_falls_back_cold(
        ) -> None:
    roll = old_member_closed_while_the_standby_warms()
    assert roll.step(590).delete == ()
    late = roll.step(10)
    (gone,) = late.delete
    assert gone.name == roll.standby["metadata"]["name"]
    assert c.HANDOFF_FALLBACK in reasons(late) and roll.flight()["mode"] == "cold"
    assert "standbyTimeoutSeconds (600 s)" in " ".join(e.message for e in late.events)


def test_an_operator_restarted_mid_handoff_resumes_from_the_status_alone() -> None:
    """The pass after a restart knows no old process's close (they are kept in memory): the old
    pod gone is enough to activate, and the handoff is followed to its end from status.rollout."""
    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    roll.step(5, standby="ready", standby_ready_at=roll.at(5))
    assert roll.flight()["phase"] == "Stopping"
    roll.pods = [p for p in roll.pods if p is not roll.old2]  # gone while the operator was down
    resumed = roll.step(3, standby="ready")
    assert [(call.ordinal, call.action) for call in resumed.calls] == [(2, "activate")]
    assert resumed.create == () and resumed.delete == ()
    roll.standby["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    done = roll.step(1, standby=None, member_id="m-2", first_batch_at=roll.at(roll.t + 1))
    assert c.MEMBER_READY in reasons(done)
    assert [h["ordinal"] for h in roll.status["rollout"]["handoffs"]] == [2]
    assert roll.status["rollout"]["inFlight"] == []


def test_a_spec_changed_while_a_replacement_prepares_drops_that_replacement() -> None:
    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    newer = with_path(WARM, "spec.template.image", "staticfleet/member:0.3.0")
    pods = [*roll.pods, roll.standby]
    statuses = roll.statuses()
    plan = decide(replace(snapshot(newer, pods, previous=roll.status, in_group=(0, 1, 2),
                                   now_offset_s=3, statuses=statuses), closed_by_pod={}))
    gone = [d for d in plan.delete if d.name == roll.standby["metadata"]["name"]]
    assert len(gone) == 1 and "no handoff waits for" in gone[0].why
    assert all(d.name != "orders-2" for d in plan.delete), "the member keeps running"


def test_a_warm_member_is_done_at_its_first_batch_while_records_wait_for_it() -> None:
    """Seen in the demo: done 5 s after the rejoin without a first batch, the gap went
    unmeasured ("n/a") exactly when it was long. Records waiting: wait for the first batch;
    nothing waiting: done, with no gap to measure."""
    roll = WarmRoll()
    roll.to_the_old_members_exit()
    roll.standby["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    waiting = {("orders", p): 40 for p in range(6)}
    roll.step(0.5, lag=waiting, standby=None, member_id="m-2")
    assert roll.flight()["phase"] == "Serving"
    later = roll.step(30, lag=waiting, standby=None, member_id="m-2")
    assert c.MEMBER_READY not in reasons(later) and roll.flight()["phase"] == "Serving"
    first = roll.at(roll.t + 1)
    done = roll.step(1, lag=waiting, standby=None, member_id="m-2", first_batch_at=first)
    assert c.MEMBER_READY in reasons(done)
    assert roll.status["rollout"]["handoffs"][0]["processingGapMs"] > 30000


def crashed_after_the_activation(journaled: bool) -> WarmRoll:
    """A WarmRoll whose pass decided the switchover, drained member 2 and activated its
    replacement, then died before the old pod's DELETE: with the status written ahead of the
    drain (`journaled`, what service.execute does), or not written at all."""
    roll = WarmRoll()
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    before = roll.status
    (switch,) = roll.step(5, standby="ready", standby_ready_at=roll.at(6)).switchovers
    assert switch.old.uid == roll.old2["metadata"]["uid"]
    if not journaled:
        roll.status = before
    return roll


@pytest.mark.parametrize("journaled", [True, False])
def test_a_switchover_an_operator_crash_interrupted_is_finished_not_failed(
        journaled: bool) -> None:
    # Issue 34, item 2: the replacement is active and holds the instance id; the old pod is
    # drained and still there. The roller used to wait for a standby-ready replacement until
    # spec.rollout.standbyTimeoutSeconds, then delete the working replacement (HandoffFailed).
    roll = crashed_after_the_activation(journaled)
    active = {"standby": None, "member_id": "m-2", "first_batch_at": roll.at(roll.t + 1)}
    for dt in (7, 60, 300):  # (a resumed switchover deletes the old pod at once)
        plan = roll.step(dt, **active)
        assert c.HANDOFF_FAILED not in reasons(plan), dt
        assert roll.standby["metadata"]["uid"] not in {d.uid for d in plan.delete}, dt
        (switch,) = plan.switchovers
        assert (switch.old.uid, switch.standby) == (roll.old2["metadata"]["uid"],
                                                    roll.standby["metadata"]["name"])
        started = next(e for e in plan.events if e.reason == c.MEMBER_RESTARTING)
        assert "resuming its switchover" in started.message
        assert roll.status["rollout"]["phase"] != "Stopped"
        assert roll.flight()["phase"] == "Stopping"
    # The resumed switchover deleted the old pod: the handoff completes as any other.
    roll.pods = [p for p in roll.pods if p is not roll.old2]
    roll.closed_by_pod[roll.old2["metadata"]["uid"]] = NOW + timedelta(seconds=roll.t)
    roll.standby["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    idle = {("orders", p): 0 for p in range(6)}
    seen = reasons(roll.step(0.5, lag=idle, **active)) + reasons(roll.step(0.5, lag=idle,
                                                                            **active))
    assert c.MEMBER_READY in seen and c.HANDOFF_FAILED not in seen


def test_the_journal_keeps_when_the_old_member_was_stopped() -> None:
    roll = crashed_after_the_activation(journaled=True)
    stopped_at = roll.flight()["stoppedAt"]
    roll.step(7, standby=None, member_id="m-2")
    assert roll.flight()["stoppedAt"] == stopped_at, "a resumed switchover keeps the first stop"


def test_a_drained_member_whose_replacement_never_activated_is_drained_again() -> None:
    # The operator died between the drain and the activation: the replacement is still in
    # standby, the drained member subscribes again after its hold. The next pass hands over
    # again (the member drains once more, or answers at once while still drained).
    roll = crashed_after_the_activation(journaled=True)
    plan = roll.step(20, standby="ready", standby_ready_at=roll.at(6))
    (switch,) = plan.switchovers
    assert switch.old.uid == roll.old2["metadata"]["uid"]
    assert switch.hold_ms == 2500


def test_a_warm_member_with_nothing_to_process_is_done_without_a_gap() -> None:
    roll = WarmRoll()
    roll.to_the_old_members_exit()
    roll.standby["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    idle = {("orders", p): 0 for p in range(6)}
    done = roll.step(0.5, lag=idle, standby=None, member_id="m-2")
    assert c.MEMBER_READY in reasons(done)
    assert "not measured" in next(e.message for e in done.events if e.reason == c.MEMBER_READY)
    assert "processingGapMs" not in roll.status["rollout"]["handoffs"][0]


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
