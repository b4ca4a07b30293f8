"""A member whose first batch takes 120 s (issue 34, item 1), on the whole system: the real API
server, the local node running a real member, the real broker, the operator as its own process,
with the default recovery settings (`spec.recovery.restartStalledMembers` on).

The member starts on a backlog, so its buffer fills while its first batch runs and it pauses its
partitions on purpose: its polls return nothing for two minutes. The stall detector used to take
that for a member that stopped fetching: it deleted the pod after its 60 s bound, the new
process began the same slow batch, and the group made no progress, one restart a minute. Now the
member reports its batch in flight (`/status` `batchInFlight`) and the detector leaves it be: the
batch is processed once, the pod is never replaced, nothing is written twice, and no stall Event
appears.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import get_json, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from tests.conftest import unique
from tests.e2e.test_rollout import drain

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("dump_broker_log_on_failure")]

REPO = Path(__file__).resolve().parents[2]
FIRST_BATCH_S = 120
BACKLOG = 6000


def test_a_two_minute_first_batch_is_processed_once_and_its_member_never_restarted(
    kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess, namespace: str,
    stream: dict[str, Any], spark_connect: ConnectServer,
) -> None:
    name = unique("slow")
    backlog = [f"{name}-backlog-{i:06d}".encode() for i in range(BACKLOG)]
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True})
    for value in backlog:
        producer.produce(stream["topic"], value=value)
    assert producer.flush(30) == 0, "the backlog was not delivered"
    spec = groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=1, out_topic=stream["out"],
        max_records=1000, connect_url=spark_connect.url,
        env=[{"name": "SLOW_FIRST_BATCH_S", "value": str(FIRST_BATCH_S)},
             {"name": "PYTHONPATH", "value": str(REPO)}])
    spec["spec"]["processing"]["transform"] = (
        "tests.integration.spark_test_transforms:slow_first_real_batch")
    groups.apply(kubeconfig, namespace, spec)
    pod = wait_for("the member's pod", lambda: next(
        iter(groups.pods(kubeconfig, namespace, name)), None), timeout=60)
    uid = pod["metadata"]["uid"]
    began = time.monotonic()

    def first_batch() -> dict[str, Any] | None:
        obj = groups.get(kubeconfig, namespace, name)
        measured = (obj.get("status") or {}).get("measurements") or {}
        return obj if measured.get("batchSecondsMax", 0) >= FIRST_BATCH_S - 5 else None

    wait_for("the slow first batch to be processed", first_batch,
             timeout=FIRST_BATCH_S + 180, interval=2)
    took = time.monotonic() - began
    obj = groups.wait_status(kubeconfig, namespace, name, groups.ready_and_idle, 120, "Ready")
    now = get_json(kubeconfig, "-n", namespace, "pod", pod["metadata"]["name"])
    restarts = [c.get("restartCount", 0) for c in now["status"].get("containerStatuses") or ()]
    events = json.loads(kubectl(kubeconfig, "-n", namespace, "get", "events", "-o",
                                "json").stdout)["items"]
    stall_events = [e.get("message") for e in events
                    if e.get("reason") in ("MemberStalled", "RestartingStalledMember")]
    _, out = drain(kafka, name, stream)
    expected = set(stream["producer"].produced) | set(backlog)
    missing = expected - set(out)
    duplicates = len(out) - len(set(out))
    print(f"slow first batch: processed {took:.1f} s after the pod was made; pod replaced: "
          f"{now['metadata']['uid'] != uid}, container restarts {restarts}; stall Events "
          f"{stall_events}; status.stalledRestarts {obj['status'].get('stalledRestarts')}; "
          f"{len(expected)} records, {len(missing)} lost, {duplicates} written twice")
    assert now["metadata"]["uid"] == uid and restarts == [0], "the member was restarted"
    assert not stall_events, stall_events
    assert not obj["status"].get("stalledRestarts")
    assert not missing, f"{len(missing)} records lost"
    assert duplicates == 0, f"{duplicates} records written twice"
