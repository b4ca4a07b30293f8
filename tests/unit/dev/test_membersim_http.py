"""The member simulator as the operator meets it: its HTTP server on a loopback port, driven by
the operator's own member client (`staticfleet.observe.memberhttp`) with the seam set
(`route_through`, what `STATICFLEET_MEMBER_HTTP_VIA` sets), and its answers held against the
member runtime's own (`consumer_runtime.metrics.Telemetry`, `consumer_runtime.http.serve`, run
in process without Kafka), and both held to the contract's types (`member_contract.status`;
tests/unit/test_member_status.py holds the operator's reader to them)."""

from __future__ import annotations

import ipaddress
import json
import time
import typing
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from consumer_runtime.http import serve
from consumer_runtime.metrics import Telemetry
from member_contract import ACTIVATE, LEAVE, REJOIN
from member_contract.status import DrainAnswer, MemberStatus
from staticfleet.observe import memberhttp
from staticfleet.observe.memberhttp import POD_IP_HEADER, Drained, Refused
from staticfleet_dev.membersim.members import Pace
from staticfleet_dev.membersim.server import STAND_INS, STATS, Simulator

pytestmark = pytest.mark.unit

PORT = memberhttp.MEMBER_PORT
TOKEN = "group-token"
FAST = Pace(consumer_made_s=0.0, join_s=0.05, first_batch_s=0.05, warm_s=1.0,
            batch_every_s=0.1, drain_s=0.05, leave_s=0.05, rejoin_s=0.05)


def pod(ordinal: int, *, standby: bool = False, kip848: bool = False,
        secret: str = "orders-member-token") -> dict[str, Any]:
    """A running member pod as the watch hands it over (only what `pod_facts` reads)."""
    suffix = "-abcde" if standby else ""
    env = [{"name": "STATICFLEET_CONFIG", "value": json.dumps({
        "groupId": "orders", "topics": ["orders"],
        "consumer": {"group.protocol": "consumer" if kip848 else "classic"}})},
           {"name": "STATICFLEET_GROUP_INSTANCE_ID", "value": f"orders-{ordinal}"}]
    if standby:
        env.append({"name": "STATICFLEET_STANDBY", "value": "true"})
    return {"metadata": {"name": f"orders-{ordinal}{suffix}", "namespace": "shop",
                         "uid": f"uid-{ordinal}{suffix}",
                         "labels": {"staticfleet.io/group": "orders",
                                    "staticfleet.io/ordinal": str(ordinal)},
                         "annotations": {}},
            "spec": {"containers": [{"name": "member", "env": env}],
                     "volumes": [{"name": "member-token", "secret": {"secretName": secret}}]},
            "status": {"phase": "Running",
                       "podIP": f"10.1.0.{ordinal + (100 if standby else 10)}"}}


def ip(ordinal: int, standby: bool = False) -> str:
    return f"10.1.0.{ordinal + (100 if standby else 10)}"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    """A simulator that knows three members, a standby of member 0, a KIP-848 group's member
    and the group's token; the operator's member client routed through it."""
    simulator = Simulator(FAST)
    simulator.pods_listed([pod(0), pod(1), pod(2), pod(0, standby=True)])
    simulator.secrets_listed([{"metadata": {"namespace": "shop",
                                            "name": "orders-member-token"},
                               "data": {"token": "Z3JvdXAtdG9rZW4="}}])  # "group-token"
    port = simulator.start()
    before = memberhttp.route_through(("127.0.0.1", port))
    try:
        yield simulator
    finally:
        memberhttp.route_through(before)
        simulator.stop()


def until(what: str, check: Any, timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            assert got, f"timed out waiting for {what}"
            return got
        time.sleep(0.02)


def test_the_status_of_each_pod_comes_from_its_own_simulated_process(sim: Simulator) -> None:
    def serving() -> list[dict[str, Any]]:
        got = [s for o in range(3) if (s := memberhttp.read_member_status(ip(o), PORT))
               and s["state"] == "running" and s["lastBatchAt"]]
        return got if len(got) == 3 else []

    statuses = until("three members serving", serving)
    assert [s["instanceId"] for s in statuses] == ["orders-0", "orders-1", "orders-2"]
    assert [s["assignment"] for s in statuses] == [[["orders", p]] for p in range(3)]
    standby = memberhttp.read_member_status(ip(0, standby=True), PORT)
    assert standby is not None and standby["state"] == "standby"
    assert memberhttp.read_member_status("10.9.9.9", PORT) is None, "no member there"
    report = memberhttp.read_status(ip(1), PORT).status
    assert report is not None and report.missing == frozenset(), "the operator reads it whole"
    assert report.instance_id == "orders-1" and report.assignment == (("orders", 1),)
    assert sim.stats()["requests"]["unknown pod"] == 1


def test_a_switchover_drains_the_old_member_and_activates_the_standby(sim: Simulator) -> None:
    refused = memberhttp.ask_member(ip(0, standby=True), PORT, ACTIVATE, (TOKEN,))
    assert isinstance(refused, Refused) and refused.status == 409, "still warming"
    assert "standby not ready yet" in refused.reason
    until("member 0 serving", lambda: (memberhttp.read_member_status(ip(0), PORT) or {})
          .get("lastBatchAt"))
    drained = memberhttp.drain_member(ip(0), PORT, (TOKEN,), hold_ms=2000, wait_s=1.0)
    assert isinstance(drained, Drained), drained
    assert drained.last_batch_at is not None and drained.last_batch_at < drained.drained_at
    assert drained.static_leave is None, "classic: no static leave to confirm"
    old = memberhttp.read_member_status(ip(0), PORT)
    assert old is not None and old["state"] == "drained" and old["assignment"] == []
    assert old["drainedAt"] == pytest.approx(drained.drained_at.timestamp(), abs=0.001)
    until("the standby ready", lambda: (memberhttp.read_member_status(
        ip(0, standby=True), PORT) or {}).get("standby") == "ready")
    assert memberhttp.ask_member(ip(0, standby=True), PORT, ACTIVATE, (TOKEN,)) is None
    first = memberhttp.wait_first_batch(ip(0, standby=True), PORT, 2.0)
    assert first is not None and first < 1.0
    new = memberhttp.read_member_status(ip(0, standby=True), PORT)
    assert new is not None and new["state"] == "running" and new["standby"] is None
    assert new["assignment"] == [["orders", 0]]


def test_a_drain_slower_than_its_wait_answers_202(sim: Simulator) -> None:
    slow = Simulator(Pace(consumer_made_s=0.0, join_s=0.0, drain_s=5.0))
    slow.pods_listed([pod(5)])
    slow.secrets_listed([{"metadata": {"namespace": "shop", "name": "orders-member-token"},
                           "data": {"token": "Z3JvdXAtdG9rZW4="}}])
    memberhttp.route_through(("127.0.0.1", slow.start()))
    try:
        got = memberhttp.drain_member(ip(5), PORT, (TOKEN,), hold_ms=1000, wait_s=0.2)
        assert got == Refused(202, "HTTP 202: still draining after 0 s")
    finally:
        slow.stop()


@pytest.mark.parametrize(("tokens", "status"), [
    (("wrong",), 403),
    ((), 401),
    (("new-after-rotation", "wrong"), 403),
])
def test_a_request_without_the_groups_token_is_refused_and_changes_nothing(
        sim: Simulator, tokens: tuple[str, ...], status: int) -> None:
    until("member 1 serving", lambda: (memberhttp.read_member_status(ip(1), PORT) or {})
          .get("state") == "running")
    for action in (LEAVE, REJOIN):
        got = memberhttp.ask_member(ip(1), PORT, action, tokens)
        assert isinstance(got, Refused) and got.status == status, got
        assert ("forbidden" if status == 403 else "unauthorized") in got.reason
    drained = memberhttp.drain_member(ip(1), PORT, tokens, hold_ms=1000, wait_s=0.5)
    assert isinstance(drained, Refused) and drained.status == status
    st = memberhttp.read_member_status(ip(1), PORT)
    assert st is not None and st["state"] == "running" and not st["leaving"]


def test_the_token_before_a_rotation_is_tried_after_a_refusal(sim: Simulator) -> None:
    assert memberhttp.ask_member(ip(2), PORT, LEAVE, ("rotated", TOKEN)) is None
    assert until("member 2 left", lambda: (memberhttp.read_member_status(ip(2), PORT) or {})
                 .get("state") == "left")
    got = memberhttp.ask_member(ip(2), PORT, LEAVE, (TOKEN,))
    assert got is not None and got.status == 409 and "left the group" in got.reason


def test_a_member_whose_groups_secret_is_unknown_refuses_every_post(sim: Simulator) -> None:
    sim.pod_changed("ADDED", pod(3, secret="other-member-token"))
    got = memberhttp.ask_member(ip(3), PORT, LEAVE, (TOKEN,))
    assert isinstance(got, Refused) and got.status == 403 and "no token" in got.reason
    sim.secret_changed("ADDED", {"metadata": {"namespace": "shop", "name": "other-member-token"},
                                 "data": {"token": "b3RoZXI="}})  # "other"
    assert memberhttp.ask_member(ip(3), PORT, LEAVE, ("other",)) is None


def test_a_deleted_pod_answers_no_more(sim: Simulator) -> None:
    gone = pod(1)
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    sim.pod_changed("MODIFIED", gone)
    assert memberhttp.read_member_status(ip(1), PORT) is None
    got = memberhttp.ask_member(ip(1), PORT, LEAVE, (TOKEN,))
    assert isinstance(got, Refused) and got.status == 503


def test_the_stats_and_a_request_without_a_pod(sim: Simulator) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{sim.port}{STATS}", timeout=5) as resp:
        stats = json.load(resp)
    assert stats["members"] == 4 and stats["tokens"] == 1 and stats["groups"] == 1
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{sim.port}/status", timeout=5)
    assert refused.value.code == 400 and POD_IP_HEADER in refused.value.read().decode()


# --- the same answers as the runtime's -------------------------------------------------------

def keys(doc: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON document's objects (`startupSeconds.firstBatch`)."""
    if not isinstance(doc, dict):
        return set()
    out = set()
    for key, value in doc.items():
        out.add(prefix + key)
        out |= keys(value, f"{prefix}{key}.")
    return out


def runtime_telemetry() -> Telemetry:
    """The runtime's own /status source, brought to a member that served and drained, with a
    confirmed static leave and a throughput (every optional object filled)."""
    tel = Telemetry(namespace="shop", group="orders", member="orders-0", instance_id="orders-0",
                    session_timeout_s=30.0, max_poll_interval_s=60.0,
                    process_start=1_800_000_000.0, started_at=0.0, max_records=10)
    tel.consumer_made(0.5)
    tel.spark_started(True, 0.5)
    tel.assigned([("orders", 0)], 1.0, "m-1")
    tel.polled(2.0, records=10)
    tel.batch_done(10, 0.2, 2.5)
    tel.batch_started(12.0, 10)
    tel.stats(json.dumps({"topics": {"orders": {"partitions": {"0": {"consumer_lag": 3}}}}}))
    tel.committed(0.01, {("orders", 0): 42})
    tel.static_leave_confirmed({"outcome": "left", "tries": 1, "ms": 8.0, "detail": None})
    return tel


def test_the_simulators_status_has_exactly_the_runtimes_keys(sim: Simulator) -> None:
    runtime = runtime_telemetry().status(12.5)
    assert runtime["throughput"] is not None and runtime["batchInFlight"] is not None
    kip = Simulator(Pace(consumer_made_s=0.0, join_s=0.0, first_batch_s=0.0))
    kip.pods_listed([pod(0, kip848=True)])
    member = kip.table.find(ip(0))
    assert member is not None
    t = member.started + 20.0
    serving = kip.table.status(member, t)
    assert serving["throughput"] is not None
    kip.table.drain(member, 1.0, t)
    drained = kip.table.status(member, t + 1.0)
    assert drained["staticLeave"] is not None
    simulated = keys(serving) | keys(drained)
    # The simulator never has a batch in flight at a read (its batches take no time), nor a
    # wait to join (no broker refuses it).
    assert simulated == keys(runtime) - {"batchInFlight.startedAt", "batchInFlight.records"}
    assert set(serving) == set(runtime), "the top level is the same in every phase"
    assert set(runtime) == set(typing.get_type_hints(MemberStatus)), "the contract's keys"


def test_the_simulators_drain_answer_has_the_runtimes_keys(sim: Simulator) -> None:
    tel = runtime_telemetry()

    def drain(hold_s: float | None, wait_s: float) -> tuple[str | None, bool]:
        tel.drained(1_800_000_003.0, hold_s or 0.0)
        return None, True

    server = serve(tel, "127.0.0.1", 0, lambda action: None, lambda: TOKEN, drain)
    try:
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.server_address[1]}/drain?holdMs=1000&waitMs=1000",
            data=b"", method="POST", headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=5) as resp:
            runtime = json.load(resp)
    finally:
        server.shutdown()
        server.server_close()
    member = sim.table.find(ip(2))
    assert member is not None
    until("member 2 serving", lambda: member.phase == "serving")
    request = urllib.request.Request(
        f"http://127.0.0.1:{sim.port}/drain?holdMs=1000&waitMs=1000", data=b"", method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", POD_IP_HEADER: ip(2)})
    with urllib.request.urlopen(request, timeout=5) as resp:
        simulated = json.load(resp)
    assert set(simulated) == set(runtime) == set(typing.get_type_hints(DrainAnswer))
    assert simulated["drained"] is True and simulated["instanceId"] == "orders-2"



# --- real members beside simulated ones ------------------------------------------------------

REAL_IP = "127.77.0.9"
"""A real member's pod IP (a loopback address: Linux routes all of 127.0.0.0/8 to `lo`)."""


def test_a_pod_outside_the_simulated_network_is_relayed_to_its_own_process() -> None:
    """With `simulate` set, the simulator answers for the pods in that network and relays every
    other pod's request to the pod's own address: here the runtime's own server, whose answers
    (its /status, its token check, its 202) come back as it gave them; such a pod never enters
    the table, and a pod that does not answer is a 502."""
    tel = runtime_telemetry()
    accepted: list[str] = []
    real = serve(tel, REAL_IP, PORT, lambda action: accepted.append(action), lambda: TOKEN)
    simulator = Simulator(FAST, simulate=ipaddress.IPv4Network("10.1.0.0/24"))
    outside = pod(4)
    outside["status"]["podIP"] = REAL_IP
    simulator.pods_listed([pod(0), outside])
    before = memberhttp.route_through(("127.0.0.1", simulator.start()))
    try:
        status = memberhttp.read_member_status(REAL_IP, PORT)
        assert status is not None and status["processStart"] == 1_800_000_000.0, status
        assert memberhttp.ask_member(REAL_IP, PORT, REJOIN, (TOKEN,)) is None
        assert accepted == [REJOIN]
        wrong = memberhttp.ask_member(REAL_IP, PORT, REJOIN, ("wrong",))
        assert isinstance(wrong, Refused) and wrong.status == 403, wrong
        assert accepted == [REJOIN], "the refused request never reached the process"
        silent = memberhttp.ask_member("127.77.0.10", PORT, REJOIN, (TOKEN,))
        assert isinstance(silent, Refused) and silent.status == 502, silent
        simulated = memberhttp.read_member_status(ip(0), PORT)
        assert simulated is not None and simulated["instanceId"] == "orders-0"
        stats = simulator.stats()
        assert stats["members"] == 1, "the real member is not simulated"
        assert stats["requests"]["relayed"] == 4 and stats["requests"]["relay failed"] == 1
    finally:
        memberhttp.route_through(before)
        simulator.stop()
        real.shutdown()
        real.server_close()


def test_a_real_consumer_stands_in_for_a_simulated_member(sim: Simulator) -> None:
    """A bench's real consumer of instance `orders-1` is that member in Kafka: once named, the
    simulated member reports its member id, so the operator takes the pod for the broker's
    member; the others keep their own. A malformed list changes nothing."""
    until("member 1 serving", lambda: (memberhttp.read_member_status(ip(1), PORT) or {})
          .get("memberId"))

    def post(body: bytes) -> int:
        request = urllib.request.Request(f"http://127.0.0.1:{sim.port}{STAND_INS}", data=body,
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    assert post(json.dumps([["orders", "orders-1", "orders-1-real-42"]]).encode()) == 200
    one = memberhttp.read_member_status(ip(1), PORT)
    assert one is not None and one["memberId"] == "orders-1-real-42"
    two = memberhttp.read_member_status(ip(2), PORT)
    assert two is not None and two["memberId"].startswith("orders-2-sim")
    assert post(b'{"not": "a list"}') == 400
    one = memberhttp.read_member_status(ip(1), PORT)
    assert one is not None and one["memberId"] == "orders-1-real-42"
