"""The member simulator's pure parts (`staticfleet_dev.membersim.members`, `.pods`): a simulated
member's life under time and the operator's requests, as the runtime's would go, and what it
reads from the operator's own pods and token Secret. Time is an argument: no test sleeps."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from member_contract import ACTIVATE, LEAVE, REJOIN
from staticfleet.decisions.builders import (
    build_member_pod,
    build_member_token_secret,
    member_spec_view,
)
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet_dev.membersim import members, server
from staticfleet_dev.membersim.members import Member, Pace, PodFacts, Table
from staticfleet_dev.membersim.pods import pod_facts, process_gone, secret_token
from tests.unit.operator.support import TIMEOUTS, body, with_path

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0
PACE = Pace()
JOINED = T0 + PACE.consumer_made_s + PACE.join_s
"""When a member that is no standby, seen at T0, is assigned."""


def facts(ordinal: int = 0, *, uid: str | None = None, standby: bool = False,
          new: bool = False, kip848: bool = False) -> PodFacts:
    return PodFacts(uid=uid or f"uid-{ordinal}{'-s' if standby else ''}",
                    name=f"orders-{ordinal}", namespace="shop", group="orders",
                    ordinal=ordinal, ip=f"10.0.0.{ordinal + (50 if standby else 2)}",
                    instance_id=f"orders-{ordinal}", group_id="orders", topics=("orders",),
                    kip848=kip848, standby=standby, joined_as_new=new,
                    token_secret="orders-member-token")


def fleet(n: int = 3, *, at: float = T0, new: bool = False) -> tuple[Table, list[Member]]:
    table = Table(Pace(partitions=6))
    return table, [table.upsert(facts(o, new=new), at) for o in range(n)]


# --- a member's life ---------------------------------------------------------------------------

def test_a_member_starts_joins_and_serves_its_share() -> None:
    table, (m0, _, _) = fleet()
    st = table.status(m0, T0 + 0.1)
    assert (st["state"], st["memberId"], st["assignment"], st["lastPollAt"]) == (
        "starting", "", [], None)
    st = table.status(m0, JOINED + 0.01)
    assert st["state"] == "running" and st["memberId"].startswith("orders-0-sim1-")
    assert st["assignment"] == [("orders", 0), ("orders", 3)]
    assert st["startupSeconds"]["firstAssignment"] == pytest.approx(0.8)
    assert st["startupSeconds"]["firstBatch"] is None and st["lastBatchAt"] is None
    later = JOINED + PACE.first_batch_s + 2.5
    st = table.status(m0, later)
    assert st["startupSeconds"]["firstBatch"] == pytest.approx(1.1)
    assert st["batchesProcessed"] == 3 and st["recordsProcessed"] == 300
    assert st["lastBatchAt"] == pytest.approx(JOINED + PACE.first_batch_s + 2.0)
    assert st["lastFetchAt"] < st["lastBatchAt"] <= later
    assert st["lastPollAt"] == pytest.approx(later, abs=0.01)
    assert st["lag"] == [("orders", 0, 0), ("orders", 3, 0)]
    assert st["committed"] == [("orders", 0, 150), ("orders", 3, 150)]
    assert st["rebalances"] == 0 and st["processingReady"] and st["throughput"] is None
    assert table.status(m0, JOINED + 11)["throughput"]["recordsPerSecond"] == 100.0


def test_a_standby_is_activated_only_once_ready_and_then_processes() -> None:
    table = Table()
    sb = table.upsert(facts(0, standby=True), T0)
    st = table.status(sb, T0 + 1.0)
    assert (st["state"], st["standby"], st["processingReady"]) == ("standby", "warming", False)
    refused = table.request(sb, ACTIVATE, T0 + 1.0)
    assert refused is not None and "standby not ready yet" in refused
    for action in (LEAVE, REJOIN):
        assert table.request(sb, action, T0 + 1.0) == "in standby: not in the group (POST " \
                                                      "/activate first)"
    assert table.drain(sb, 1.0, T0 + 1.0)[0] is not None
    ready = T0 + PACE.warm_s
    assert table.status(sb, ready)["standby"] == "ready"
    assert table.request(sb, ACTIVATE, ready + 0.5) is None
    st = table.status(sb, ready + 0.5)
    assert (st["state"], st["standby"], st["startupSeconds"]["activated"]) == (
        "starting", None, pytest.approx(2.5))
    assert st["startupSeconds"]["standbyReady"] == pytest.approx(2.0)
    assert table.request(sb, ACTIVATE, ready + 0.6) == "not in standby: already active"
    first = ready + 0.5 + PACE.join_s + PACE.first_batch_s
    assert table.status(sb, first - 0.01)["startupSeconds"]["firstBatch"] is None
    assert table.status(sb, first)["startupSeconds"]["firstBatch"] == pytest.approx(
        first - T0)


@pytest.mark.parametrize("kip848", [False, True])
def test_a_drain_closes_the_member_and_a_replacement_keeps_it_out(kip848: bool) -> None:
    table = Table()
    old = table.upsert(facts(0, kip848=kip848), T0)
    serving = JOINED + 3.4
    refused, ready_at = table.drain(old, 2.5, serving)
    assert refused is None and ready_at == pytest.approx(serving + PACE.drain_s)
    code, answer = table.drain_answer(old, serving)
    assert (code, answer["drained"], answer["staticLeave"]) == (202, False, None)
    code, answer = table.drain_answer(old, ready_at)
    assert code == 200 and answer["drained"] and answer["drainedAt"] == pytest.approx(ready_at)
    assert answer["lastBatchAt"] == pytest.approx(JOINED + PACE.first_batch_s + 3.0)
    assert answer["instanceId"] == "orders-0"
    assert answer["staticLeave"] == ({"outcome": "left", "tries": 1, "ms": 8.5, "detail": None}
                                     if kip848 else None)
    st = table.status(old, ready_at + 1)
    assert (st["state"], st["memberId"], st["assignment"]) == ("drained", "", [])
    assert st["batchesProcessed"] == 4, "no batch after the drain"
    assert st["drainHoldSeconds"] == 2.5
    # Asked again: answered at once, the same drainedAt.
    assert table.drain(old, 2.5, ready_at + 1) == (None, ready_at + 1)
    assert table.drain_answer(old, ready_at + 1)[1]["drainedAt"] == answer["drainedAt"]
    # The replacement joins; the old process never comes back.
    new = table.upsert(facts(0, uid="uid-0-new", standby=True), T0)
    assert table.request(new, ACTIVATE, ready_at + 1) is None
    table.advance(ready_at + 60)
    assert table.status(old, ready_at + 60)["state"] == "drained"
    assert table.status(new, ready_at + 60)["state"] == "running"
    assert old.drain_resubscribes == 0


def test_a_drained_member_not_replaced_subscribes_again_after_its_hold() -> None:
    table, (m0, m1, _) = fleet()
    at = JOINED + 2
    _, ready_at = table.drain(m0, 2.0, at)
    table.advance(ready_at)
    assert table.assignment(m0) == [], "drained: holds nothing"
    assert table.assignment(m1) == [("orders", 1), ("orders", 4)], \
        "the broker keeps a drained static member's share for it: no one else takes it"
    # A second drain while drained renews the hold from then.
    table.drain(m0, 2.0, ready_at + 1.5)
    table.advance(ready_at + 2.5)
    assert m0.phase == "drained"
    table.advance(ready_at + 3.5 + PACE.join_s)
    st = table.status(m0, ready_at + 3.5 + PACE.join_s)
    assert (st["state"], st["drainResubscribes"], st["drainedAt"]) == ("running", 1, None)
    assert st["rebalances"] == 0, "a static member's return is no rebalance"
    assert table.status(m1, ready_at + 10)["rebalances"] == 0


def test_a_leave_takes_the_member_out_and_rebalances_the_others() -> None:
    table, (m0, m1, m2) = fleet()
    at = JOINED + 2
    assert table.request(m0, LEAVE, at) is None
    assert table.request(m0, LEAVE, at) == "already leaving the group"
    st = table.status(m0, at)
    assert (st["state"], st["leaving"]) == ("draining", True)
    assert table.drain(m0, 1.0, at) == ("leaving the group", at)
    assert table.request(m0, REJOIN, at) == "leaving the group"
    done = at + PACE.leave_s
    st = table.status(m0, done)
    assert (st["state"], st["memberId"], st["assignment"], st["leaving"]) == (
        "left", "", [], True)
    assert st["lastPollAt"] == pytest.approx(done)
    assert table.request(m0, LEAVE, done) == "left the group"
    for other in (m1, m2):
        st = table.status(other, done)
        assert (st["rebalances"], st["assigns"]) == (1, 2)
    assert table.assignment(m1) == [("orders", 0), ("orders", 2), ("orders", 4)]


def test_a_rejoin_is_one_rebalance_of_the_whole_group() -> None:
    table, (m0, m1, _) = fleet()
    at = JOINED + 2
    assert table.request(m0, REJOIN, at) is None
    assert table.request(m0, REJOIN, at) == "a rejoin is already under way"
    assert table.status(m0, at)["state"] == "running"
    table.advance(at + PACE.rejoin_s)
    st = table.status(m0, at + PACE.rejoin_s)
    assert (st["rejoins"], st["rebalances"], st["assigns"]) == (1, 1, 2)
    assert table.status(m1, at + PACE.rejoin_s)["rebalances"] == 1


def test_a_rejoin_before_the_assignment_is_refused() -> None:
    table, (m0, *_) = fleet()
    assert table.request(m0, REJOIN, T0 + 0.1) == "not in the group"


def test_a_scale_up_join_is_a_rebalance_for_the_members_in_the_group() -> None:
    table, (m0, m1, m2) = fleet()
    at = JOINED + 5
    m3 = table.upsert(facts(3, new=True), at)
    table.advance(at + 1)
    assert [m.rebalances for m in (m0, m1, m2, m3)] == [1, 1, 1, 0]
    assert table.assignment(m3) == [("orders", 3)]
    restarted = table.upsert(facts(4), at + 2)  # not joined as new: a static member's return
    table.advance(at + 3)
    assert [m.rebalances for m in (m0, m1, m2, m3)] == [1, 1, 1, 0]
    assert restarted.phase == "serving"


def test_a_pod_gone_is_forgotten_and_its_ip_may_come_back_as_another_pod() -> None:
    table, (m0, m1, _) = fleet()
    table.remove(m0.facts.uid)
    assert table.find(m0.facts.ip) is None
    again = table.upsert(facts(0, uid="uid-0-again"), JOINED + 1)
    assert table.find(m0.facts.ip) is again and again.started == JOINED + 1
    table.keep_only({m1.facts.uid})
    assert list(table.members) == [m1.facts.uid] and table.find(again.facts.ip) is None
    assert table.upsert(m1.facts, T0 + 50) is m1 and m1.started == T0, "a known pod keeps its state"


def test_the_status_document_has_the_runtimes_keys_in_every_phase() -> None:
    """The simulator's and the runtime's /status keys are compared in test_membersim_http; here
    every phase gives the same keys."""
    table = Table()
    keys = set()
    sb = table.upsert(facts(0, standby=True), T0)
    m1 = table.upsert(facts(1), T0)
    m2 = table.upsert(facts(2), T0)
    table.request(m1, LEAVE, JOINED + 1)
    table.drain(m2, 1.0, JOINED + 1)
    for at in (T0, JOINED + 1, JOINED + 1.3, JOINED + 30):
        for m in (sb, m1, m2):
            keys.add(frozenset(table.status(m, at)))
    assert len(keys) == 1


@pytest.mark.parametrize(("active", "standby"), [
    (True, None), (False, "warming"), (False, "ready"), (False, None)])
def test_the_simulators_answers_are_the_runtimes_own(active: bool, standby: str | None) -> None:
    """Spelled again, not imported: the runtime's modules bring pandas and pyarrow (test_membersim
    is where a change on either side fails)."""
    from consumer_runtime import http, steering

    assert members.activation_refused(active=active, standby=standby) == \
        steering.activation_refused(active=active, stopping=False, standby=standby)
    assert (members.DRAIN_HOLD_S, members.DRAIN_HOLD_MAX_S) == (
        steering.DRAIN_HOLD_S, steering.DRAIN_HOLD_MAX_S)
    assert (server.DRAIN_WAIT_MS, server.MAX_BODY) == (http.DRAIN_WAIT_MS, http.MAX_BODY)
    telemetry = members_telemetry()
    requests = steering.Requests(telemetry, standby=True)
    assert requests.take(LEAVE, joined=False, left=False) == members.IN_STANDBY
    requests.activation.set()
    requests.drained.set()
    assert requests.take(REJOIN, joined=False, left=False) == members.DRAINED


def members_telemetry() -> Any:
    from consumer_runtime.metrics import Telemetry

    return Telemetry(namespace="shop", group="orders", member="orders-0", instance_id="orders-0",
                     session_timeout_s=30.0, max_poll_interval_s=60.0, process_start=T0,
                     started_at=0.0, standby=True)


def test_the_simulator_does_not_load_the_runtimes_data_libraries() -> None:
    import subprocess
    import sys

    code = ("import sys, staticfleet_dev.membersim.server, staticfleet_dev.membersim.watch; "
            "print(sorted({'pandas', 'pyarrow', 'pyspark'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


# --- what the pods and Secrets say ----------------------------------------------------------

def group(b: dict[str, Any] | None = None) -> ConsumerGroupSpec:
    return ConsumerGroupSpec.from_body(b or body())


def running(pod: dict[str, Any], ip: str = "10.0.3.7", uid: str = "u-7") -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["uid"] = uid
    pod["status"] = {"phase": "Running", "podIP": ip}
    return pod


def test_a_member_pod_built_by_the_operator_reads_as_its_process_would() -> None:
    g = group(with_path(body(), "spec.kafka.groupId", "orders-v2"))
    pod = running(build_member_pod(g, 2, member_spec_view(g, TIMEOUTS)))
    assert pod_facts(pod) == PodFacts(
        uid="u-7", name="orders-2", namespace="shop", group="orders", ordinal=2, ip="10.0.3.7",
        instance_id="orders-v2-2", group_id="orders-v2", topics=("orders",), kip848=False,
        standby=False, joined_as_new=False, token_secret="orders-member-token")


def test_a_standby_pod_is_a_standby_until_it_is_marked_activated() -> None:
    kip848 = with_path(body(), "spec.membership", {"protocol": "consumer"})
    g = group(kip848)
    pod = running(build_member_pod(g, 1, member_spec_view(g, TIMEOUTS), standby=True))
    got = pod_facts(pod)
    assert got is not None and got.standby and got.kip848
    pod["metadata"]["annotations"]["staticfleet.io/activated"] = "true"
    assert pod_facts(pod) == got.__class__(**{**got.__dict__, "standby": False})


@pytest.mark.parametrize("change", ["no ip", "deleting", "evicted", "no ordinal"])
def test_a_pod_without_a_running_process_has_no_facts(change: str) -> None:
    g = group()
    pod = running(build_member_pod(g, 0, member_spec_view(g, TIMEOUTS)))
    if change == "no ip":
        del pod["status"]["podIP"]
    elif change == "deleting":
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    elif change == "evicted":
        pod["status"]["phase"] = "Failed"
    else:
        del pod["metadata"]["labels"]["staticfleet.io/ordinal"]
    assert pod_facts(pod) is None
    assert process_gone(pod) is (change in ("deleting", "evicted"))


def test_the_token_is_read_from_the_operators_secret() -> None:
    assert secret_token(build_member_token_secret(group(), "s3cr3t-token_x")) == "s3cr3t-token_x"
    assert secret_token({"data": {}}) is None
    assert secret_token({"data": {"token": "not base64!"}}) is None
    assert secret_token({"data": {"token": "ICAK"}}) is None, "whitespace only"
