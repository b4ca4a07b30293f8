"""KIP-848 (`membership.protocol: consumer`) groups end to end.

Found on main: a ConsumerGroup with protocol `consumer` could not start one member (the runtime
required the session timeout and heartbeat, which librdkafka refuses with group.protocol=consumer
and the broker owns), every pod crash-looped, and the ConsumerGroup said only "the group is Dead".
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from staticfleet.decisions.builders import HTTP_PORT
from staticfleet.observe import memberhttp
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.prometheus import Prometheus
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.stream import read_all
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import get_json, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from tests.e2e.support import (
    check_dashboard,
    crash,
    restart_count,
    switchovers,
)
from tests.support import unique

# exclusive: an e2e module runs the operator, members and a producer; on this machine's two
# cores two of them side by side overloaded it (tests/lanes.py).
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive,
              pytest.mark.usefixtures("dump_broker_log_on_failure")]

REPLICAS = 3
SESSION_MS = 20000  # a KIP-848 group config; the test broker allows 1-60 s
START_LIMIT_S = 90  # a member's start here (process, Spark) is 30-45 s on a loaded machine
PROCESSING_AGAIN_LIMIT_S = 15.0
"""After a kill -9 of a KIP-848 member, its restart processes again within this (issue 38)."""



def test_a_kip848_group_processes_rolls_without_moving_a_partition_and_survives_kill_9(
    kafka: KafkaBroker, kafka_admin: AdminClient, kubeconfig: Path, operator: OperatorProcess,
    namespace: str, stream: dict[str, Any], prometheus: Prometheus,
    spark_connect: ConnectServer,
) -> None:
    name = unique("k848")
    ready = groups.start(kubeconfig, namespace, groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=REPLICAS, out_topic=stream["out"],
        session_ms=SESSION_MS, protocol="consumer", strategy="WarmHandoff",
        connect_url=spark_connect.url), timeout=300)
    assert ready["status"]["timeouts"]["sessionTimeoutMs"] == SESSION_MS
    time.sleep(5)

    # A rolling restart by warm handoff: every partition keeps its owner (absent for a moment,
    # never moved); each replacement joined after its old member's leave with epoch -2.
    started = time.time()
    with groups.OwnerWatch(kafka_admin, name) as watch:
        kubectl(kubeconfig, "-n", namespace, "patch", "cg", name, "--type=json", "-p",
                '[{"op": "add", "path": "/spec/template/env/-", '
                '"value": {"name": "ROLLOUT_MARK", "value": "1"}}]')
        done = groups.wait_rollout(kubeconfig, namespace, name, 600)
        time.sleep(2)
    assert watch.history, "the broker's assignment was never seen"
    assert watch.moved() == {}, f"partitions changed owner: {watch.moved()}"
    assert done["status"]["rollout"]["rebalancesDuringRollout"] == 0, done["status"]["rollout"]
    assert sorted(done["status"]["rollout"]["membersRestarted"]) == list(range(REPLICAS))
    handoffs = done["status"]["rollout"]["handoffs"]
    print(f"warm handoffs (ordinal, absence ms, processing gap ms): "
          f"{[(h['ordinal'], h['absenceMs'], h.get('processingGapMs')) for h in handoffs]}")
    assert {h["mode"] for h in handoffs} == {"warm"}, handoffs
    # Drained, then replaced: each standby joined after its old member's static leave (-2),
    # activated the moment the drain answered.
    assert len(switchovers(operator, namespace, name)) == REPLICAS, operator.log_tail(80)
    assert done["status"]["rollout"]["longestAbsenceMs"] < 1000, handoffs
    # What a Grafana user sees of a KIP-848 group: every panel of the shipped dashboard has
    # data with its legend's labels, and the rollout panel moved.
    time.sleep(6)
    check_dashboard(prometheus, namespace, name, started)

    # kill -9 of a replacement after its activation, under load: its container restarts in
    # place and joins directly (the pod is marked activated). The new process finds the dead
    # member's id in the pod's directory and releases it with the static leave
    # (consumer_runtime/predecessor.py): it takes the instance id over at once, with its
    # partitions, instead of being refused until the dead member's session expires (42 s
    # before, with the default 45 s).
    pod = member_pod(kubeconfig, namespace, name, 1)
    assert pod != f"{name}-1", "member 1 runs in its warm replacement pod"
    ip = get_json(kubeconfig, "-n", namespace, "pod", pod)["status"]["podIP"]
    before = restart_count(kubeconfig, namespace, pod)

    def processing_again() -> dict[str, Any] | None:
        status = memberhttp.read_member_status(ip, HTTP_PORT)
        started = status and status.get("processStart")
        first = status and (status.get("startupSeconds") or {}).get("firstBatch")
        return status if started and first is not None and started > killed else None

    with groups.OwnerWatch(kafka_admin, name) as watch:
        killed = time.time()
        crash(kubeconfig, namespace, pod)
        status = wait_for(f"{pod} processing again", processing_again,
                          SESSION_MS / 1000 + START_LIMIT_S, interval=0.2)
        phases = status["startupSeconds"]
        processing_s = status["processStart"] + phases["firstBatch"] - killed
        in_group_s = status["processStart"] + phases["firstAssignment"] - killed
        wait_for_pod_ready(kubeconfig, namespace, pod, 60)
        groups.wait_status(kubeconfig, namespace, name, groups.ready, 60, "Ready again")
    released = member_metric(ip, "staticfleet_member_predecessor_releases_total", "left")
    print(f"kill -9 of {pod} under load: processing again after {processing_s:.1f} s (in the "
          f"group after {in_group_s:.1f} s; session timeout {SESSION_MS} ms); dead member's "
          f"id released: {released}")
    assert released == 1.0, "the restart did not release the dead member's id"
    assert status["waiting"] is None and status["rebalances"] == 0, status
    assert watch.moved() == {}, f"partitions changed owner after the kill: {watch.moved()}"
    assert processing_s < PROCESSING_AGAIN_LIMIT_S, status

    produced = stream["producer"].stop()
    groups.wait_caught_up(kafka.bootstrap, name, [stream["topic"]])
    missing = set(stream["producer"].produced) - set(read_all(kafka.bootstrap, stream["out"]))
    assert produced > 0 and not missing, f"{len(missing)} of {produced} records lost"
    assert restart_count(kubeconfig, namespace, pod) == before + 1, "no restart loop"


def member_metric(ip: str, name: str, outcome: str) -> float | None:
    """A member's counter `name` with `outcome`, from its /metrics."""
    with urllib.request.urlopen(f"http://{ip}:{HTTP_PORT}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return next((float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
                 if ln.startswith(name + "{") and f'outcome="{outcome}"' in ln), None)


def member_pod(kubeconfig: Path, namespace: str, name: str, ordinal: int) -> str:
    """The live pod of member `ordinal` (a warm handoff's replacement has a name of its own)."""
    pods = get_json(kubeconfig, "-n", namespace, "pods", "-l",
                    f"staticfleet.io/group={name},staticfleet.io/ordinal={ordinal}")["items"]
    live = [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert len(live) == 1, live
    return str(live[0])


def wait_for_pod_ready(kubeconfig: Path, namespace: str, pod: str, timeout: float) -> None:
    def conditions() -> list[dict[str, Any]]:
        return list((get_json(kubeconfig, "-n", namespace, "pod", pod).get("status") or {}).get(
            "conditions") or [])

    wait_for(f"{pod} Ready after the kill", lambda: any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions()), timeout,
        describe=lambda: f"conditions: {conditions()}")
