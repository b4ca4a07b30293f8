"""Pods, the broker's view and /status as the roller's inputs (`decisions.members`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from staticfleet.decisions.members import observed
from staticfleet.decisions.names import (
    JOINED_AS_NEW_ANNOTATION,
    MEMBER_CONTAINER,
    ORDINAL_LABEL,
    REVISION_ANNOTATION,
    SESSION_ANNOTATION,
)
from staticfleet.decisions.reasons import MemberSpecView
from staticfleet.decisions.snapshot import GroupMemberView, GroupView
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts.measurements import cold_start_s, join_latency_s
from tests.unit.operator.support import body, report, reports

SPEC = ConsumerGroupSpec.from_body(body())
VIEW = MemberSpecView(revision="new", parts={}, image="img")


def pod(ordinal: int, *, revision: str = "old", ready: bool = True, ip: str = "127.0.1.2",
        deleting: str | None = None, session: str | None = None,
        created: str = "2026-01-01T11:59:50Z") -> dict[str, Any]:
    annotations = {REVISION_ANNOTATION: revision}
    if session:
        annotations[SESSION_ANNOTATION] = session
    meta: dict[str, Any] = {"name": f"orders-{ordinal}", "uid": f"uid-{ordinal}-{revision}",
                            "labels": {ORDINAL_LABEL: str(ordinal)},
                            "annotations": annotations, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = deleting
        meta["deletionGracePeriodSeconds"] = 30
    return {"metadata": meta, "spec": {"terminationGracePeriodSeconds": 30},
            "status": {"podIP": ip, "phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def member(ordinal: int, instance: str | None, parts: int = 2) -> GroupMemberView:
    return GroupMemberView(member_id=f"m-{ordinal}", instance_id=instance, client_id="c",
                           host="h", partitions=tuple(("orders", p) for p in range(parts)))


def collect(pods: list[dict[str, Any]], group: GroupView,
            statuses: dict[str, Any] | None = None,
            partitions: int | None = None) -> observed.MemberTable:
    return observed.observe_members(spec=SPEC, view=VIEW, pods=pods,
                                   statuses=reports(statuses or {}), group=group,
                                   partitions=partitions)


def test_static_members_are_found_by_instance_id() -> None:
    group = GroupView("Stable", "classic", (member(0, "orders-0"), member(1, "orders-1", 0)))
    obs = collect([pod(0), pod(1)], group)
    by = {m.ordinal: m for m in obs.members}
    assert by[0].in_group and by[0].assignment == (("orders", 0), ("orders", 1))
    assert not by[1].in_group, "a member without partitions is not back yet"


def test_dynamic_members_are_found_by_the_member_id_they_report() -> None:
    group = GroupView("Stable", "classic", (member(0, None),))
    obs = collect([pod(0)], group, {"uid-0-old": {"memberId": "m-0"}})
    assert obs.members[0].in_group and obs.members[0].member_id == "m-0"


def test_a_deleting_pod_stopped_when_its_grace_period_began() -> None:
    obs = collect([pod(2, deleting="2026-01-01T12:00:30Z")], GroupView("Stable", "classic"))
    assert obs.members[0].stopped_at == datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert 2 in obs.stopping and 2 not in obs.live and not obs.members[0].ready
    assert obs.members[0].restart_reasons == (), "a pod being deleted is not restarted again"


def test_counts_ignore_ordinals_beyond_replicas() -> None:
    obs = collect([pod(0), pod(1), pod(2), pod(3)], GroupView("Stable", "classic"))
    assert obs.ready_count(SPEC.replicas) == 3
    assert obs.ordinals() == [0, 1, 2, 3]


def test_restart_reasons_are_computed_once_per_member_and_only_for_outdated_ones() -> None:
    obs = collect([pod(0, revision="new"), pod(1)], GroupView("Stable", "classic"))
    by = {m.ordinal: m for m in obs.members}
    assert by[0].restart_reasons == ()
    assert [r.code for r in by[1].restart_reasons] == ["TemplateChanged"]
    assert "orders-1" in by[1].restart_reasons[0].message


@pytest.mark.parametrize(("sessions", "expected"), [
    ([None, None], None), (["30000", None], 30000), (["45000", "30000"], 30000),
    (["garbage", "45000"], 45000)])
def test_running_session_timeout_is_the_shortest_a_member_joined_with(
        sessions: list[str | None], expected: int | None) -> None:
    pods = [pod(i, session=s) for i, s in enumerate(sessions)]
    pods.append(pod(9, session="1000", deleting="2026-01-01T12:00:30Z"))
    assert observed.running_session_timeout_ms(pods) == expected


@pytest.mark.parametrize(("status", "expected"), [
    (None, None),
    ({"startupSeconds": {"firstAssignment": None}, "processStart": 1.0}, None),
    ({"startupSeconds": {"firstAssignment": 2.5},
      "processStart": datetime(2026, 1, 1, 11, 59, 55, tzinfo=UTC).timestamp()}, 7.5),
])
def test_join_latency_counts_from_pod_creation(status: dict[str, Any] | None,
                                               expected: float | None) -> None:
    value = join_latency_s(pod(0), None if status is None else report(status))
    assert value == (pytest.approx(expected) if expected is not None else None)


def test_an_idle_member_is_in_the_group_when_there_are_more_members_than_partitions() -> None:
    group = GroupView("Stable", "classic", (member(0, "orders-0", 2), member(1, "orders-1", 0)))
    pods = [pod(0), pod(1)]
    assert not collect(pods, group).members[1].in_group
    idle = collect(pods, group, partitions=2)
    assert idle.members[1].in_group, "3 replicas on 2 partitions: one member holds nothing"


def test_an_absent_static_members_registration_is_not_its_replacement() -> None:
    """During a restart the broker still lists the old process under the instance id."""
    group = GroupView("Stable", "classic", (member(1, "orders-1"),))
    starting = pod(1, revision="new", ready=False)
    old_process = {"uid-1-new": {"memberId": ""}}
    assert not collect([starting], group, old_process).members[0].in_group
    assert not collect([starting], group).members[0].in_group, "no answer and not Ready"
    joined = {"uid-1-new": {"memberId": "m-1"}}
    assert collect([starting], group, joined).members[0].in_group
    other = {"uid-1-new": {"memberId": "someone-else"}}
    assert not collect([pod(1, revision="new")], group, other).members[0].in_group
    assert collect([pod(1, revision="new")], group).members[0].in_group, "Ready, no answer"


def test_a_standby_process_start_leaves_out_its_wait_for_the_activation() -> None:
    """Seen on main: a warm replacement's 20.6 s (container start -> first assignment, its
    standby wait included) was taken as its cold start and refused the next rollout."""
    p = pod(1)
    p["status"]["containerStatuses"] = [{
        "name": MEMBER_CONTAINER, "restartCount": 0,
        "state": {"running": {"startedAt": "2026-01-01T12:00:00Z"}}}]
    start = datetime(2026, 1, 1, 12, 0, 1, tzinfo=UTC).timestamp()
    cold = {"processStart": start, "startupSeconds": {"firstAssignment": 2.5}}
    warm = {"processStart": start, "startupSeconds": {
        "consumerMade": 1.5, "standbyReady": 12.0, "activated": 19.5, "firstAssignment": 19.6}}
    assert cold_start_s(p, report(cold)) == 3.5
    assert cold_start_s(p, report(warm)) == pytest.approx(2.6)
    assert join_latency_s(p, report(warm)) is None


@pytest.mark.parametrize(("joined_as_new", "phases", "expected"), [
    (False, {"consumerMade": 1.5, "firstAssignment": 40.0}, 41.0),
    (True, {"consumerMade": 1.5, "firstAssignment": 40.0}, 2.5),
    (True, {"firstAssignment": 40.0}, None),
    (True, {"consumerMade": 1.5}, None),
], ids=["coming back with its instance id: to its first assignment",
        "joined as new: to its consumer, not its wait for the rebalance",
        "joined as new, its consumer's moment unknown: no sample",
        "joined as new, not assigned yet: no sample"])
def test_only_a_member_coming_back_is_a_restart_sample(
        joined_as_new: bool, phases: dict[str, float], expected: float | None) -> None:
    """Issue 34 item 8: a scale-up's member waited for the others' revokes before its first
    assignment; that wait is no restart's."""
    p = pod(1)
    if joined_as_new:
        p["metadata"].setdefault("annotations", {})[JOINED_AS_NEW_ANNOTATION] = "true"
    p["status"]["containerStatuses"] = [{
        "name": MEMBER_CONTAINER, "restartCount": 0,
        "state": {"running": {"startedAt": "2026-01-01T12:00:00Z"}}}]
    start = datetime(2026, 1, 1, 12, 0, 1, tzinfo=UTC).timestamp()
    assert cold_start_s(p, report({"processStart": start, "startupSeconds": phases})) == expected


def evicted(p: dict[str, Any]) -> dict[str, Any]:
    """`p` as the kubelet leaves a pod it evicted under memory pressure."""
    p["status"] = {**p["status"], "phase": "Failed", "reason": "Evicted",
                   "message": "The node was low on resource: memory. ",
                   "conditions": [{"type": "Ready", "status": "False"}],
                   "containerStatuses": [{"name": MEMBER_CONTAINER, "state": {
                       "terminated": {"exitCode": 137, "reason": "Error"}}}]}
    return p


def named(p: dict[str, Any], name: str, created: str = "2026-01-01T11:59:55Z"
          ) -> dict[str, Any]:
    p["metadata"] = {**p["metadata"], "name": name, "creationTimestamp": created}
    return p


@pytest.mark.parametrize(("pods", "member_pod", "live", "ended"), [
    ([evicted(pod(1))], "orders-1", {}, {1: ["orders-1"]}),
    ([evicted(pod(1)), named(pod(1, revision="new"), "orders-1-new")],
     "orders-1-new", {1: "orders-1-new"}, {1: ["orders-1"]}),
    ([pod(1), evicted(named(pod(1, revision="new"), "orders-1-new"))],
     "orders-1", {1: "orders-1"}, {1: ["orders-1-new"]}),
    ([evicted(pod(1)), named(pod(1, revision="new", deleting="2026-01-01T12:00:30Z"),
                             "orders-1-new")],
     "orders-1-new", {}, {1: ["orders-1"]}),
], ids=["alone: it is the member, unavailable",
        "beside its warm replacement: the replacement is the member",
        "a warm replacement that ended: the member stays",
        "beside a pod being deleted: that one is the member"])
def test_a_pod_that_ended_is_never_live_and_holds_its_ordinal(
        pods: list[dict[str, Any]], member_pod: str, live: dict[int, str],
        ended: dict[int, list[str]]) -> None:
    group = GroupView("Stable", "classic", (member(1, "orders-1"),))
    obs = collect(pods, group)
    assert {o: p["metadata"]["name"] for o, p in obs.live.items()} == live
    assert {o: [p["metadata"]["name"] for p in ps] for o, ps in obs.ended.items()} == ended
    assert obs.standby == {} and obs.extra == {}, "an ended pod is no standby"
    assert obs.ordinals() == [1], "no other pod is made while one holds the ordinal"
    (m,) = obs.members
    assert m.pod_name == member_pod


def test_an_ended_member_is_unavailable_and_not_failing() -> None:
    """The roller counts it against maxUnavailable (not ready, not in the group, pod_phase
    Failed); it has nothing to restart, and its container's exit is not the member's failure."""
    group = GroupView("Stable", "classic", (member(1, "orders-1"),))
    (m,) = collect([evicted(pod(1))], group).members
    assert (m.pod_phase, m.ready, m.in_group, m.pod_exists) == ("Failed", False, False, True)
    assert m.failure is None and m.restart_reasons == () and m.stopped_at is None


def test_why_a_pod_ended_is_quoted_from_its_status() -> None:
    assert observed.ended_reason(evicted(pod(1))) == (
        "Failed (Evicted: The node was low on resource: memory.)")
    shutdown = pod(1)
    shutdown["status"] = {"phase": "Failed", "reason": "Terminated",
                          "message": "Pod was terminated in response to imminent node shutdown."}
    assert observed.ended_reason(shutdown).startswith("Failed (Terminated: Pod was terminated")
    assert observed.ended_reason({"status": {"phase": "Succeeded"}}) == "Succeeded"
    assert not observed.pod_ended(pod(1)) and observed.pod_ended(evicted(pod(1)))


@pytest.mark.parametrize(("leave", "reason", "says"), [
    (None, None, None),
    ({"outcome": "left", "tries": 1, "ms": 8.5, "detail": None}, None, None),
    ({"outcome": "taken", "tries": 1, "ms": 3.0, "detail": "error 82: fenced"}, None, None),
    ({"outcome": "unconfirmed", "tries": 14, "ms": 20011.0, "detail": "error 15: not available"},
     "StaticLeaveUnconfirmed", "no coordinator confirmed its static leave in 14 tries"),
    ({"outcome": "unconfirmed", "tries": 1, "ms": 5.0, "detail": None},
     "StaticLeaveUnconfirmed", "(last: no error given)"),
    ({"outcome": "gone", "tries": 1, "ms": 2.0, "detail": "error 25: unknown"},
     "StaticLeaveExpired", "joins as a new member"),
])
def test_a_drained_members_static_leave_is_a_warning_only_when_it_keeps_no_place(
        leave: dict[str, Any] | None, reason: str | None, says: str | None) -> None:
    got = observed.static_leave_event(2, "g-2", report({"staticLeave": leave}).static_leave)
    if reason is None:
        assert got is None
    else:
        assert got is not None and got[0] == reason, got
        assert says is not None and says in got[1] and "member 2 (pod g-2)" in got[1], got


def test_a_wait_for_the_instance_id_to_be_released_is_no_part_of_a_start() -> None:
    """Issue 46 item 10: a KIP-848 replacement of a member that died without leaving waited
    the dead registration's session timeout (44 s here) before its first assignment; that was
    taken as its cold start and raised the session timeout, every such crash a step up."""
    from consumer_runtime.metrics import UNRELEASED_WAIT, Telemetry

    p = pod(1)
    p["status"]["containerStatuses"] = [{
        "name": MEMBER_CONTAINER, "restartCount": 0,
        "state": {"running": {"startedAt": "2026-01-01T12:00:00Z"}}}]
    start = datetime(2026, 1, 1, 12, 0, 1, tzinfo=UTC).timestamp()
    telemetry = Telemetry(namespace="ns", group="g", member="g-1", instance_id="g-1",
                          session_timeout_s=45.0, max_poll_interval_s=60.0,
                          process_start=start, started_at=0.0)
    telemetry.wait_began(UNRELEASED_WAIT, "the broker still holds instance id g-1", 2.0)
    telemetry.wait_over(46.0)
    telemetry.wait_began(UNRELEASED_WAIT, "a later wait (fenced): not the start's", 100.0)
    telemetry.wait_over(130.0)
    phases = telemetry.status(131.0)["startupSeconds"]
    assert phases["instanceReleaseWait"] == 44.0
    status = {"processStart": start,
              "startupSeconds": {**phases, "firstAssignment": 46.5, "consumerMade": 1.0}}
    assert cold_start_s(p, report(status)) == pytest.approx(3.5)
