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

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.stream import SteadyProducer, read_all
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from tests.support import unique

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("dump_broker_log_on_failure")]

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
