"""`plan.decide` as tables: idle members, errors and Degraded, status writes, what stops a
group, broker bounds that cannot be read.

Each case builds a `Snapshot` the way the service gathers one (member pods built by the real
builders, the broker's view of the group, the members' `/status`, the previous status), and
checks the plan (tests/unit/operator/decide_support.py, snapshots.py).
"""

from __future__ import annotations

import copy
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
from staticfleet.decisions.snapshot import Problem
from staticfleet.statuspatch import merge_patch
from tests.unit.operator.decide_support import NEW_IMAGE, deleting, reasons
from tests.unit.operator.snapshots import (
    CG,
    ordinal_of,
    running,
    settled,
    snapshot,
)
from tests.unit.operator.support import with_path

pytestmark = pytest.mark.unit


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
    tests/unit/operator/timeouts/test_widening.py has the group that widens)."""
    unwidened = with_path(CG, "spec.rollout.widenSessionTimeout", False)
    cg = with_path(with_path(unwidened, "spec.template.image", "staticfleet/member:0.2.0"),
                   "spec.membership", {"protocol": "consumer"})
    config = {"group.consumer.max.session.timeout.ms": 120000}
    pods, status = settled(with_path(unwidened, "spec.membership", {"protocol": "consumer"}))
    status["measurements"] = {"restartSecondsRecent": [40.0], "restartSecondsMax": 40.0}
    plan = decide(snapshot(cg, pods, previous=status, broker_config=config))
    assert [d.ordinal for d in plan.delete] == [2]


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
