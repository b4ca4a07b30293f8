"""The operator's side of member control: `observe.memberhttp.ask_member` sends the group's token,
and the one before it to a member whose mounted Secret is not updated yet; `memory.Tokens`
keeps those two. The member is the runtime's own HTTP server, in process on a loopback port."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest

from consumer_runtime.http import serve
from consumer_runtime.metrics import Telemetry
from staticfleet import apply, service, switchover
from staticfleet.decisions.memberreport import LeaveReport
from staticfleet.memory import Memory
from staticfleet.observe import memberhttp
from staticfleet.observe.memberhttp import Refused

pytestmark = pytest.mark.unit


class LiveMember:
    """A member HTTP server whose token the test sets (`holds`) and whose requests it lists."""

    def __init__(self) -> None:
        self.holds: str | None = "new"
        self.taken: list[str] = []
        self.telemetry = Telemetry(namespace="ns", group="g", member="g-0", instance_id="g-0",
                                   session_timeout_s=30.0, max_poll_interval_s=60.0,
                                   process_start=0.0, started_at=0.0)
        self.drains: list[tuple[float | None, float]] = []
        self.drained = True
        self.server = serve(self.telemetry, "127.0.0.1", 0, self.request, lambda: self.holds,
                            self.drain)
        self.port = self.server.server_address[1]

    def drain(self, hold_s: float | None, wait_s: float) -> tuple[str | None, bool]:
        self.drains.append((hold_s, wait_s))
        if self.drained:
            self.telemetry.drained(1_700_000_000.125, hold_s or 0.0)
        return None, self.drained

    def request(self, action: str) -> str | None:
        if action == "rejoin":
            return "not in the group"
        self.taken.append(action)
        return None


@pytest.fixture(scope="module")
def live() -> Iterator[LiveMember]:
    member = LiveMember()
    yield member
    member.server.shutdown()
    member.server.server_close()


@pytest.mark.parametrize(("holds", "tokens", "answer"), [
    ("new", ("new",), None),
    ("new", ("new", "old"), None),
    # Rotated: the member's file still has the token before (a kubelet's delay).
    ("old", ("new", "old"), None),
    ("other", ("new", "old"), Refused(403, "")),
    ("new", (), Refused(401, "")),
    (None, ("new",), Refused(403, "")),
])
def test_the_operator_sends_its_token_and_falls_back_to_the_one_before(
        live: LiveMember, holds: str | None, tokens: tuple[str, ...],
        answer: Refused | None) -> None:
    live.holds, live.taken = holds, []
    got = memberhttp.ask_member("127.0.0.1", live.port, "leave", tokens)
    if answer is None:
        assert got is None and live.taken == ["leave"]
    else:
        assert got is not None and got.status == answer.status and live.taken == []
        assert str(got).startswith(f"HTTP {answer.status}: ") and "refused" in str(got)


def test_a_refusal_that_is_not_about_the_token_is_not_tried_again(live: LiveMember) -> None:
    live.holds, live.taken = "new", []
    got = memberhttp.ask_member("127.0.0.1", live.port, "rejoin", ("new", "old"))
    assert got is not None and got.status == 409 and "not in the group" in got.reason


def test_no_answer_and_no_address(live: LiveMember) -> None:
    assert memberhttp.ask_member("", live.port, "leave", ("new",)) == Refused(
        0, "the pod has no IP yet")
    gone = memberhttp.ask_member("127.0.0.1", 1, "leave", ("new",), timeout=1.0)
    assert gone is not None and gone.status == 0


def test_the_operator_keeps_the_current_token_and_the_one_before() -> None:
    tokens = Memory().tokens
    assert tokens.member_tokens("uid-a", "t1") == ("t1",)
    assert tokens.member_tokens("uid-a", "t1") == ("t1",)
    assert tokens.member_tokens("uid-a", "t2") == ("t2", "t1")
    assert tokens.member_tokens("uid-a", "t3") == ("t3", "t2"), "at most two"
    assert tokens.member_tokens("uid-b", "b1") == ("b1",), "per ConsumerGroup"
    tokens.forget("uid-a")  # a deleted group (`Memory.forget`)
    assert tokens.member_tokens("uid-a", "t3") == ("t3",)



def test_a_drain_answers_with_the_members_close_time_and_a_slow_one_is_refused(
        live: LiveMember) -> None:
    """`observe.memberhttp.drain_member`: the hold and the wait go in the query; the answer's
    drainedAt (the member's own clock) is the close; 202 (still draining after the wait) is no
    drain; a rotated token is retried with the one before, as for every request."""
    from datetime import UTC, datetime

    live.holds, live.drains, live.drained = "old", [], True
    got = memberhttp.drain_member("127.0.0.1", live.port, ("new", "old"), hold_ms=15_000,
                                  wait_s=2.5)
    assert isinstance(got, memberhttp.Drained), got
    assert got.drained_at == datetime.fromtimestamp(1_700_000_000.125, UTC)
    assert live.drains == [(15.0, 2.5)]
    live.drained = False
    slow = memberhttp.drain_member("127.0.0.1", live.port, ("old",), hold_ms=15_000, wait_s=0.1)
    assert isinstance(slow, Refused) and slow.status == 202, slow
    assert memberhttp.drain_member("", live.port, ("old",), 1000, 1.0) == Refused(
        0, "the pod has no IP yet")


def test_a_drains_close_is_not_moved_later_by_the_pod_watch() -> None:
    """The drain's answer saw the consumer close to the millisecond; the kubelet's finishedAt
    (whole seconds, after the JVM's shutdown) must not replace it."""
    from datetime import UTC, datetime, timedelta

    memory = Memory()
    drained = datetime(2026, 11, 24, 12, 0, 0, 250000, tzinfo=UTC)
    memory.note_drained("uid-1", drained)
    finished = (drained + timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for uid in ("uid-1", "uid-2"):
        memory.exits.note_closed({"metadata": {"uid": uid, "deletionTimestamp": finished},
                           "status": {"containerStatuses": [{
                               "name": "member", "state": {"terminated": {
                                   "exitCode": 0, "finishedAt": finished}}}]}})
    assert memory.exits.closed["uid-1"] == drained
    assert memory.exits.closed["uid-2"] == drained.replace(microsecond=0) + timedelta(seconds=3)


def test_each_status_answer_is_stamped_with_its_own_read_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34 item 6: an answer stamped with the pass's start (here 10 s before the read) made
    the silence before a close look longer than it was."""
    from datetime import UTC, datetime, timedelta

    monkeypatch.setattr(memberhttp, "read_status",
                        lambda ip, port: memberhttp.StatusRead({"memberId": "m"}))
    clients, memory = service.Clients(kube=cast(apply.Kube, object())), Memory()
    pod = {"metadata": {"uid": "uid-1"}, "status": {"podIP": "10.0.0.1"}}
    before = datetime.now(UTC)
    statuses, slow = service._member_statuses([pod], clients, memory)
    answers = memory.note_answers(list(statuses), [pod], before - timedelta(seconds=10))
    assert answers["uid-1"] >= before and not slow
    clients.member_reads.close()


def test_a_drains_answer_is_an_answer_kept_after_its_pod_is_gone() -> None:
    from datetime import UTC, datetime, timedelta

    memory = Memory()
    pod = {"metadata": {"uid": "uid-1"}}
    start = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
    memory.note_answers(["uid-1"], [pod], start)
    memory.note_drained("uid-1", start + timedelta(seconds=12))
    assert memory.note_answers([], [], start + timedelta(seconds=13)) == {
        "uid-1": start + timedelta(seconds=12)}


def exited(uid: str, message: str, exit_code: int = 0,
           finished: str = "2026-11-24T12:00:04Z") -> dict[str, object]:
    """A member pod being deleted whose container exited with `message` as its termination
    message."""
    return {"metadata": {"uid": uid, "deletionTimestamp": finished},
            "status": {"containerStatuses": [{"name": "member", "state": {"terminated": {
                "exitCode": exit_code, "finishedAt": finished, "message": message}}}]}}


def test_a_clean_exits_report_gives_the_close_and_last_batch_to_the_millisecond() -> None:
    """What the runtime writes at a clean exit (`close_report`) is what the operator reads: a
    Recreate's absence and processing gap come from the member's clock, even when the process
    exited before a pass read its /status; a failed exit's message or anything else is not a
    report, and the kubelet's finishedAt (whole seconds) stands in for the close."""
    from datetime import UTC, datetime

    from consumer_runtime.termination import close_report
    from staticfleet.decisions.members.observed import member_closed_at, member_last_batch_at

    closed, last = 1795867201.437, 1795867200.912
    memory = Memory()
    memory.exits.note_closed(exited("uid-1", close_report(closed, last)))
    assert memory.exits.closed["uid-1"] == datetime.fromtimestamp(closed, UTC)
    assert memory.exits.final_batches["uid-1"] == datetime.fromtimestamp(last, UTC)
    assert memory.exits.closed["uid-1"].microsecond // 1000 == 437

    never_batched = exited("uid-2", close_report(closed, None))
    assert member_closed_at(never_batched) == datetime.fromtimestamp(closed, UTC)
    assert member_last_batch_at(never_batched) is None
    for message, code in ((close_report(closed, last), 1), ("consumer_runtime: member stops: "
                                                            "boom", 1), ("not json", 0),
                          ("[1, 2]", 0), ('{"closedAt": true}', 0)):
        pod = exited("uid-3", message, code)
        assert member_closed_at(pod) == datetime(2026, 11, 24, 12, 0, 4, tzinfo=UTC), message
        assert member_last_batch_at(pod) is None, message
    # A drain's answer came first: the exit's report neither moves its close nor its batch.
    memory.note_drained("uid-4", datetime.fromtimestamp(closed - 5, UTC),
                      datetime.fromtimestamp(last - 5, UTC))
    memory.exits.note_closed(exited("uid-4", close_report(closed, last)))
    assert memory.exits.closed["uid-4"] == datetime.fromtimestamp(closed - 5, UTC)
    assert memory.exits.final_batches["uid-4"] == datetime.fromtimestamp(last - 5, UTC)


class RecordingKube:
    """The two API calls a switchover makes, recorded in order, with when they were made."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.at: dict[str, float] = {}

    def annotate_pod(self, namespace: str, name: str, uid: str,
                     annotations: dict[str, str]) -> bool:
        self.calls.append(("annotate", name))
        return True

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append(("delete", name))
        self.at["delete"] = time.monotonic()

    def post_event(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.calls.append(("event", f"{type_} {reason}"))


class Switching:
    """An old member and its standby, each the runtime's own HTTP server on the member port of
    a loopback address of its own (the switchover calls the pods' IPs on that port). Activated,
    the standby reports its first batch `first_batch_after_s` later (None: never)."""

    def __init__(self, drained: bool, first_batch_after_s: float | None = 0.0,
                 leave: dict[str, Any] | None = None) -> None:
        self.order: list[str] = []
        self.drained = drained
        self.leave = leave
        self.first_batch_after_s = first_batch_after_s
        self.first_batch_at: float | None = None
        self.servers = []
        self.telemetry = []
        for ip, drain in (("127.0.9.2", self.drain), ("127.0.9.3", None)):
            tel = Telemetry(namespace="ns", group="g", member="g-0", instance_id="g-0",
                            session_timeout_s=30.0, max_poll_interval_s=60.0,
                            process_start=0.0, started_at=0.0)
            self.telemetry.append(tel)
            self.servers.append(serve(tel, ip, memberhttp.MEMBER_PORT, self.request,
                                      lambda: "token", drain))

    def drain(self, hold_s: float | None, wait_s: float) -> tuple[str | None, bool]:
        self.order.append(f"drain hold={hold_s}")
        if self.drained and self.leave is not None:
            self.telemetry[0].static_leave_confirmed(self.leave)
        return None, self.drained

    def request(self, action: str) -> str | None:
        self.order.append(action)
        if action == "activate" and self.first_batch_after_s is not None:
            threading.Timer(self.first_batch_after_s, self._first_batch).start()
        return None

    def _first_batch(self) -> None:
        self.first_batch_at = time.monotonic()
        self.telemetry[1].batch_done(10, 0.1, time.monotonic())

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


def _switch(members: Switching, first_batch_wait_s: float = 0.0) -> tuple[
        RecordingKube, Memory, float]:
    """Run one switchover of member 0 (pod g-0 -> standby g-0-abcde) against `members`; the
    kube calls, the memory and when it began."""
    from datetime import UTC, datetime

    from staticfleet.decisions.actions import Plan, PodDelete, Switchover
    from staticfleet.decisions.snapshot import Snapshot

    kube, memory = RecordingKube(), Memory()
    pods = tuple({"metadata": {"name": name, "uid": uid}, "status": {"podIP": ip}}
                 for name, uid, ip in (("g-0", "u-old", "127.0.9.2"),
                                       ("g-0-abcde", "u-new", "127.0.9.3")))
    snap = Snapshot(body={"metadata": {"name": "g", "namespace": "ns", "uid": "cg"}},
                    now=datetime.now(UTC), pods=pods, member_token="token")
    switch = Switchover(0, PodDelete(0, "g-0", "u-old", "restart"), "g-0-abcde", "u-new",
                        hold_ms=22_500, wait_s=0.2, first_batch_wait_s=first_batch_wait_s)
    began = time.monotonic()
    try:
        switchover.switch_over(snap, Plan(status={}, switchovers=(switch,)),
                               cast(apply.Kube, kube), memory)
    finally:
        members.close()
    return kube, memory, began


@pytest.mark.parametrize("drained", [True, False])
def test_a_switchover_activates_the_standby_the_moment_the_drain_answers(
        drained: bool) -> None:
    """Drained: the close is noted, the standby marked and activated, then the old pod
    deleted. Not drained in time (202): the old pod is deleted all the same and the standby is
    not activated (it is once its close is seen: test_decide)."""
    members = Switching(drained)
    kube, memory, _ = _switch(members)
    if drained:
        assert members.order == ["drain hold=22.5", "activate"]
        assert kube.calls == [("annotate", "g-0-abcde"), ("delete", "g-0")]
        assert "u-old" in memory.exits.closed
    else:
        assert members.order == ["drain hold=22.5"]
        assert kube.calls == [("delete", "g-0")]
        assert "u-old" not in memory.exits.closed


def test_the_old_pod_is_deleted_once_the_replacement_processed_its_first_batch() -> None:
    """The old process's shutdown must not run beside the replacement's first batch: the
    deletion waits for that batch (read from the replacement's /status), not for the bound."""
    members = Switching(drained=True, first_batch_after_s=0.4)
    kube, _, began = _switch(members, first_batch_wait_s=5.0)
    assert kube.calls == [("annotate", "g-0-abcde"), ("delete", "g-0")]
    assert members.first_batch_at is not None
    assert kube.at["delete"] >= members.first_batch_at, "deleted before the first batch"
    assert kube.at["delete"] - members.first_batch_at < 1.0, "waited on after the first batch"
    assert kube.at["delete"] - began < 3.0


def test_a_replacement_without_a_batch_gets_the_old_pod_deleted_after_the_bound() -> None:
    members = Switching(drained=True, first_batch_after_s=None)
    kube, _, began = _switch(members, first_batch_wait_s=0.5)
    assert kube.calls == [("annotate", "g-0-abcde"), ("delete", "g-0")]
    assert 0.5 <= kube.at["delete"] - began < 2.0


@pytest.mark.parametrize(("outcome", "event"), [
    ("left", None),
    ("unconfirmed", "Warning StaticLeaveUnconfirmed"),
    ("gone", "Warning StaticLeaveExpired"),
])
def test_a_drained_members_static_leave_comes_with_its_answer_and_a_lost_one_is_a_warning(
        outcome: str, event: str | None) -> None:
    """A KIP-848 member's drain answer carries its confirmed static leave
    (consumer_runtime/staticleave.py); one no coordinator confirmed, or one the group had
    already forgotten, is a Warning Event: the replacement may wait, or join as a new member.
    The activation goes ahead either way (nothing better can be done for the group)."""
    leave = {"outcome": outcome, "tries": 3, "ms": 20000.0, "detail": "error 15: loading"}
    members = Switching(drained=True, leave=leave)
    kube, _, _ = _switch(members)
    assert members.order == ["drain hold=22.5", "activate"]
    expected = [("annotate", "g-0-abcde"), ("delete", "g-0")]
    if event is not None:
        expected.insert(0, ("event", event))
    assert kube.calls == expected


def test_a_drain_answer_carries_the_static_leave_as_the_member_reported_it(
        live: LiveMember) -> None:
    live.holds, live.drains, live.drained = "new", [], True
    live.telemetry.static_leave_confirmed({"outcome": "left", "tries": 1, "ms": 8.7,
                                           "detail": None})
    got = memberhttp.drain_member("127.0.0.1", live.port, ("new",), hold_ms=1000, wait_s=1.0)
    assert isinstance(got, memberhttp.Drained), got
    assert got.static_leave == LeaveReport(outcome="left", tries=1, ms=8.7, detail=None)


class JournalingKube(RecordingKube):
    """A RecordingKube whose status writes (and their refusals) go into the members' own order,
    so the test reads one timeline of API writes and member calls."""

    def __init__(self, order: list[str], refuse: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.order = order
        self.refuse = refuse
        self.statuses: list[dict[str, Any]] = []

    def patch_status(self, owner: dict[str, Any], patch: dict[str, Any]) -> None:
        if "status" in self.refuse:
            raise apply.ApplyError("the API server is gone", 503)
        self.order.append("status")
        self.statuses.append(dict(patch))

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        if "delete" in self.refuse:
            raise apply.ApplyError("the API server is gone", 503)
        super().delete_pod(namespace, name, uid)


def _execute(members: Switching, refuse: tuple[str, ...] = ()) -> tuple[
        JournalingKube, Any]:
    """One pass's execute of a plan whose one action is member 0's switchover and whose status
    records it (inFlight stoppedAt); the kube and the plan carried out."""
    from datetime import UTC, datetime

    from staticfleet.decisions.actions import Plan, PodDelete, Switchover
    from staticfleet.decisions.snapshot import Snapshot

    kube = JournalingKube(members.order, refuse)
    clients = service.Clients(kube=cast(apply.Kube, kube))
    pods = tuple({"metadata": {"name": name, "uid": uid}, "status": {"podIP": ip}}
                 for name, uid, ip in (("g-0", "u-old", "127.0.9.2"),
                                       ("g-0-abcde", "u-new", "127.0.9.3")))
    before = {"rollout": {"phase": "Rolling", "inFlight": [{"ordinal": 0, "phase": "Preparing"}]}}
    snap = Snapshot(body={"apiVersion": "staticfleet.io/v1alpha1",
                          "metadata": {"name": "g", "namespace": "ns", "uid": "cg"},
                          "status": before},
                    now=datetime.now(UTC), pods=pods, member_token="token")
    journal = {"rollout": {"phase": "Rolling", "inFlight": [
        {"ordinal": 0, "phase": "Stopping", "stoppedAt": "2026-01-01T12:00:00Z"}]}}
    switch = Switchover(0, PodDelete(0, "g-0", "u-old", "restart"), "g-0-abcde", "u-new",
                        hold_ms=2500, wait_s=0.2)
    try:
        done = service.execute(snap, Plan(status=journal, switchovers=(switch,)), None,
                               clients, Memory(), time.monotonic())
    finally:
        members.close()
    return kube, done


def test_the_handover_is_in_the_status_before_the_old_member_is_drained() -> None:
    """Issue 34, item 2: an operator that died after the drain left a status saying the
    handoff was still Preparing; its successor failed the handoff at the standby timeout and
    deleted the working replacement. The status is written ahead of the drain."""
    members = Switching(drained=True)
    kube, _ = _execute(members)
    assert members.order == ["status", "drain hold=2.5", "activate"]
    assert kube.statuses[0]["rollout"]["inFlight"][0]["stoppedAt"] == "2026-01-01T12:00:00Z"
    assert kube.calls[-1] == ("delete", "g-0")
    assert len(kube.statuses) == 1, "the same status is not written twice"


def test_no_drain_starts_when_the_journal_cannot_be_written() -> None:
    members = Switching(drained=True)
    kube, done = _execute(members, refuse=("status",))
    assert members.order == [], "nothing drained without a journal"
    assert ("delete", "g-0") not in kube.calls
    assert done.status["conditions"][0]["reason"] == "ApiError"


def test_a_refused_delete_after_the_switchover_keeps_the_journal() -> None:
    """The old pod's DELETE is refused after the drain and the activation: the Degraded pass's
    status keeps the handover (the next pass finishes it), not the Preparing before it."""
    members = Switching(drained=True)
    _, done = _execute(members, refuse=("delete",))
    assert members.order[:3] == ["status", "drain hold=2.5", "activate"]
    flight = done.status["rollout"]["inFlight"][0]
    assert flight["phase"] == "Stopping" and flight["stoppedAt"] == "2026-01-01T12:00:00Z"
    degraded = next(x for x in done.status["conditions"] if x["type"] == "Degraded")
    assert degraded["status"] == "True"


def _execute_restart(refuse: tuple[str, ...] = ()) -> tuple[JournalingKube, Any]:
    """One pass's execute of a cold restart: the plan deletes member 0's pod and its status
    records member 0 in flight, stopped now."""
    from datetime import UTC, datetime

    from staticfleet.decisions.actions import Plan, PodDelete
    from staticfleet.decisions.snapshot import Snapshot

    order: list[str] = []

    class Ordered(JournalingKube):
        def delete_pod(self, namespace: str, name: str, uid: str) -> None:
            super().delete_pod(namespace, name, uid)
            self.order.append(f"delete {name}")

    kube = Ordered(order, refuse)
    snap = Snapshot(body={"apiVersion": "staticfleet.io/v1alpha1",
                          "metadata": {"name": "g", "namespace": "ns", "uid": "cg"},
                          "status": {"rollout": {"phase": "Idle"}}},
                    now=datetime.now(UTC), pods=(), member_token="token")
    journal = {"rollout": {"phase": "Rolling", "inFlight": [
        {"ordinal": 0, "phase": "Rejoining", "stoppedAt": "2026-01-01T12:00:00Z"}]}}
    done = service.execute(snap, Plan(status=journal,
                                      delete=(PodDelete(0, "g-0", "u-old", "restart"),)),
                           None, service.Clients(kube=cast(apply.Kube, kube)), Memory(),
                           time.monotonic())
    return kube, done


def test_a_restarts_in_flight_record_is_in_the_status_before_its_pod_is_deleted() -> None:
    """CI, once: the operator was killed between a cold restart's DELETE and the status that
    recorded it; its successor found the pod gone, recreated it as a missing pod, and the
    rollout finished without counting that member's restart (membersRestarted [0, 2] of 3).
    The status is written ahead of the DELETE, once."""
    kube, _ = _execute_restart()
    assert kube.order == ["status", "delete g-0"]
    assert kube.statuses[0]["rollout"]["inFlight"][0]["stoppedAt"] == "2026-01-01T12:00:00Z"
    assert len(kube.statuses) == 1, "the same status is not written twice"


def test_no_pod_is_deleted_when_its_journal_cannot_be_written() -> None:
    kube, done = _execute_restart(refuse=("status",))
    assert ("delete", "g-0") not in kube.calls
    assert done.status["conditions"][0]["reason"] == "ApiError"
