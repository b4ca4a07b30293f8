"""`plan.decide` as tables: rollouts, cold and warm.

Each case builds a `Snapshot` the way the service gathers one (member pods built by the real
builders, the broker's view of the group, the members' `/status`, the previous status), and
checks the plan (tests/unit/operator/decide_support.py, snapshots.py).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from staticfleet.decisions import conditions as c
from staticfleet.decisions.names import (
    ACTIVATED_ANNOTATION,
    MEMBER_CONTAINER,
)
from staticfleet.decisions.plan import decide, without_nulls
from staticfleet.decisions.pods import (
    WHY_REPLACEMENT,
)
from staticfleet.decisions.rollout.effects import WHY_RESTART
from staticfleet.decisions.snapshot import Problem
from tests.unit.operator.decide_support import NEW_IMAGE, deleting, reasons, rolling_fleet
from tests.unit.operator.snapshots import (
    CG,
    WARM,
    WARM_NEW,
    WarmRoll,
    builders_time,
    member_status,
    ordinal_of,
    running,
    settled,
    snapshot,
)
from tests.unit.operator.support import NOW, with_path

pytestmark = pytest.mark.unit


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
