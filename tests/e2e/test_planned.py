"""Rebalances the operator makes on purpose, proven against the whole system.

Found on main: a scale-down left the removed member's partitions unowned for the whole session
timeout (a static member sends no LeaveGroup when it closes), then warned about a rebalance the
operator had caused itself; and a topic added to a running group stayed unowned after a rollout
that ended Complete (a static member that rejoins a Stable group with a new subscription causes
no rebalance).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from staticfleet import failpoints
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.stream import SteadyProducer, read_all
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from tests.support import unique

# exclusive: an e2e module runs the operator, members and a producer; on this machine's two
# cores two of them side by side overloaded it (tests/lanes.py).
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive,
              pytest.mark.usefixtures("dump_broker_log_on_failure")]

SESSION_MS = 30000  # long, so a hand-over that waits for it cannot pass for a fast one
HANDOVER_LIMIT_S = 5.0


@pytest.fixture
def stream(kafka: KafkaBroker, make_topic: Callable[..., str]) -> Iterator[dict[str, Any]]:
    topic, out = make_topic("in", 6), make_topic("out", 6)
    state: dict[str, Any] = {"topic": topic, "out": out, "producers": [
        SteadyProducer(kafka.bootstrap, topic, rate=100).start()]}
    yield state
    for producer in state["producers"]:
        producer.stop()


def no_loss(kafka: KafkaBroker, group: str, stream: dict[str, Any], topics: list[str]) -> None:
    produced: list[bytes] = []
    for producer in stream["producers"]:
        producer.stop()
        assert not producer.failed, producer.failed
        produced += producer.produced
    groups.wait_caught_up(kafka.bootstrap, group, topics)
    missing = set(produced) - set(read_all(kafka.bootstrap, stream["out"]))
    assert produced and not missing, f"{len(missing)} of {len(produced)} records lost"


def scale(kubeconfig: Path, namespace: str, name: str, replicas: int) -> None:
    kubectl(kubeconfig, "-n", namespace, "patch", "cg", name, "--type=merge", "-p",
            f'{{"spec": {{"replicas": {replicas}}}}}')


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_scale_down_hands_partitions_over_at_once_and_scaling_is_planned(
    kafka: KafkaBroker, kafka_admin: AdminClient, kubeconfig: Path, operator: OperatorProcess,
    namespace: str, stream: dict[str, Any], protocol: str, spark_connect: ConnectServer,
) -> None:
    name = unique("scale")
    groups.apply(kubeconfig, namespace, groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=3, out_topic=stream["out"],
        session_ms=SESSION_MS, protocol=protocol, connect_url=spark_connect.url))
    groups.wait_status(kubeconfig, namespace, name, groups.ready, 240, "Ready")
    time.sleep(3)
    formed = groups.get(kubeconfig, namespace, name)["status"]  # the forming rebalances
    everything = {(stream["topic"], p) for p in range(6)}

    scale(kubeconfig, namespace, name, 2)
    handover_s = groups.wait_owned(kafka_admin, name, everything, {f"{name}-0", f"{name}-1"},
                                   SESSION_MS / 1000 + 30)
    print(f"{protocol} 3 -> 2: every partition owned by the two remaining members "
          f"{handover_s:.1f} s "
          f"after the scale-down (session timeout {SESSION_MS} ms)")
    assert handover_s < HANDOVER_LIMIT_S, (
        f"partitions owned again after {handover_s:.1f} s, not within {HANDOVER_LIMIT_S} s")
    down = groups.wait_status(
        kubeconfig, namespace, name,
        lambda o: groups.ready(o) and o["status"].get("replicas") == 2
        and o["status"].get("plannedRebalances", 0) > formed.get("plannedRebalances", 0),
        120, "Ready with 2 and the leave's rebalance counted as planned")
    assert down["status"]["plannedRebalance"]["reason"] == "ScaleDown"

    scale(kubeconfig, namespace, name, 3)
    up = groups.wait_status(
        kubeconfig, namespace, name,
        lambda o: groups.ready(o) and o["status"].get("replicas") == 3
        and o["status"].get("plannedRebalances", 0) > down["status"]["plannedRebalances"],
        240, "Ready with 3 and the join counted as planned")
    groups.wait_owned(kafka_admin, name, everything, {f"{name}-{o}" for o in range(3)}, 60)
    assert up["status"]["rebalances"] - formed["rebalances"] == (
        up["status"]["plannedRebalances"] - formed.get("plannedRebalances", 0)), (
        "every rebalance of the scale-down and the scale-up was planned", formed, up["status"])
    warnings = [(e["reason"], e["message"]) for e in groups.events(kubeconfig, namespace, name)
                if e["type"] == "Warning"]
    assert warnings == []
    no_loss(kafka, name, stream, [stream["topic"]])


def test_an_operator_killed_between_a_leaves_record_and_its_call_leaves_a_planned_scale_down(
    kafka: KafkaBroker, kafka_admin: AdminClient, kubeconfig: Path, operator: OperatorProcess,
    namespace: str, stream: dict[str, Any], spark_connect: ConnectServer, tmp_path: Path,
) -> None:
    """Issue 46, item 5: the scale-down's planned leave is written to the status before the
    member is called. An operator killed between the two (the failpoint `before-member-calls`)
    leaves the record with the member still in the group; its successor asks the member again
    (its `/status` says it is not leaving), the partitions move at once, and the rebalance is
    counted as planned: no UnexpectedRebalance."""
    name = unique("leavekill")
    groups.apply(kubeconfig, namespace, groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=2, out_topic=stream["out"],
        session_ms=SESSION_MS, connect_url=spark_connect.url))
    groups.wait_status(kubeconfig, namespace, name, groups.ready, 240, "Ready")
    time.sleep(3)
    formed = groups.get(kubeconfig, namespace, name)["status"]
    everything = {(stream["topic"], p) for p in range(6)}

    operator.stop()
    crashing = OperatorProcess(kubeconfig=kubeconfig, log=tmp_path / "crashing.log",
                               extra_env={failpoints.ENV: failpoints.BEFORE_MEMBER_CALLS})
    try:
        crashing.launch().wait_healthy()
        scale(kubeconfig, namespace, name, 1)
        assert crashing.proc is not None
        proc = crashing.proc
        wait_for("the operator to kill itself before the leave", lambda: proc.poll() is not None,
                 timeout=60, interval=0.2)
        assert proc.returncode == -9, crashing.log_tail()
    finally:
        crashing.kill()
        operator.start()
    killed = time.monotonic()
    mid = groups.get(kubeconfig, namespace, name)["status"]
    assert mid["plannedRebalance"]["reason"] == "ScaleDown", mid["plannedRebalance"]
    assert mid["plannedRebalance"]["members"] == [1], mid["plannedRebalance"]
    handover_s = groups.wait_owned(kafka_admin, name, everything, {f"{name}-0"},
                                   SESSION_MS / 1000 + 30)
    down = groups.wait_status(
        kubeconfig, namespace, name,
        lambda o: groups.ready(o) and o["status"].get("replicas") == 1
        and o["status"].get("plannedRebalances", 0) > formed.get("plannedRebalances", 0),
        120, "Ready with 1 and the leave's rebalance counted as planned")
    print(f"killed between the leave's record and its call: every partition with member 0 "
          f"{handover_s:.1f} s after the successor started ({time.monotonic() - killed:.1f} s "
          f"to Ready); rebalances {down['status']['rebalances'] - formed['rebalances']}, "
          f"planned {down['status']['plannedRebalances'] - formed.get('plannedRebalances', 0)}")
    assert handover_s < HANDOVER_LIMIT_S + 10, "the partitions waited for the session timeout"
    assert down["status"]["rebalances"] - formed["rebalances"] == (
        down["status"]["plannedRebalances"] - formed.get("plannedRebalances", 0)), down["status"]
    warnings = [(e["reason"], e["message"]) for e in groups.events(kubeconfig, namespace, name)
                if e["type"] == "Warning"]
    assert warnings == []
    no_loss(kafka, name, stream, [stream["topic"]])


def test_a_topic_added_to_a_running_group_is_assigned_by_one_planned_rebalance(
    kafka: KafkaBroker, kafka_admin: AdminClient, kubeconfig: Path, operator: OperatorProcess,
    namespace: str, stream: dict[str, Any], make_topic: Callable[..., str],
    spark_connect: ConnectServer,
) -> None:
    name = unique("topics")
    groups.apply(kubeconfig, namespace, groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=2, out_topic=stream["out"],
        connect_url=spark_connect.url))
    groups.wait_status(kubeconfig, namespace, name, groups.ready, 240, "Ready")
    time.sleep(3)
    formed = groups.get(kubeconfig, namespace, name)["status"]  # the forming rebalances
    added = make_topic("added", 2)
    stream["producers"].append(SteadyProducer(kafka.bootstrap, added, rate=20).start())

    kubectl(kubeconfig, "-n", namespace, "patch", "cg", name, "--type=json", "-p",
            f'[{{"op": "add", "path": "/spec/kafka/topics/-", "value": "{added}"}}]')
    wanted = {(stream["topic"], p) for p in range(6)} | {(added, p) for p in range(2)}
    groups.wait_owned(kafka_admin, name, wanted, {f"{name}-0", f"{name}-1"}, 400)

    obj = groups.wait_status(
        kubeconfig, namespace, name,
        lambda o: groups.ready(o) and any(
            c["type"] == "UnassignedPartitions" and c["status"] == "False"
            for c in o["status"].get("conditions") or []), 60, "every partition owned")
    status = obj["status"]
    assert status["rollout"]["rebalancesDuringRollout"] == 0, status["rollout"]
    assert status["plannedRebalance"]["reason"] == "UnassignedPartitions", status
    planned = status["plannedRebalances"] - formed.get("plannedRebalances", 0)
    assert planned == 1 and status["rebalances"] - formed["rebalances"] == 1, (formed, status)
    reasons = [(e["type"], e["reason"]) for e in groups.events(kubeconfig, namespace, name)]
    assert reasons.count(("Warning", "PartitionsUnassigned")) == 1, reasons
    assert ("Warning", "UnexpectedRebalance") not in reasons
    no_loss(kafka, name, stream, [stream["topic"], added])
