"""A group at rest is looked at once a rest interval, and a change on the broker's side wakes it
at once (issue 37 item 3, `decisions.pace` and `observe.clusterpool`): the real API server, the
real broker and the operator as its own process, with a resync of 1 s and a rest of 15 s.

The group has no member (`replicas: 0`): at rest as soon as its status stops changing, with no
member whose `/status` would keep it busy. A consumer that is none of the operator's then joins
its Kafka group: the cluster's next batched read (every second here) sees the group Stable with
a member, and wakes the group's pass well before its rest interval is over.

Its own operator: the session's would reconcile the group at its own pace.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from tests.integration.support import PLACEHOLDER, consumer_group
from tests.support import unique

pytestmark = pytest.mark.integration

RESYNC_S, REST_S = 1.0, 15.0
"""The rest is 15 times the resync: two passes 13 s or more apart cannot be resyncs, and a wake
within a third of it (5 s: the batched read comes every second, the pass a second after) cannot
be the rest's own pass. It was 30 s; every second of it is waited for twice or more."""
PASS_METRIC = "staticfleet_reconcile_last_timestamp_seconds"


@pytest.fixture
def paced(kubeconfig: Path, crds: None, no_admin_operator: None,
          tmp_path: Path) -> Iterator[OperatorProcess]:
    op = OperatorProcess(kubeconfig=kubeconfig, log=tmp_path / "operator.log", extra_env={
        "STATICFLEET_RESYNC_SECONDS": str(RESYNC_S),
        "STATICFLEET_REST_RESYNC_SECONDS": str(REST_S)})
    op.start()
    try:
        yield op
    finally:
        op.stop()
        print(f"--- operator ---\n{op.log_tail(60)}")


def last_pass(op: OperatorProcess, namespace: str, name: str) -> float | None:
    """When the operator last finished a pass over the group (its metric), if it did."""
    for line in op.metrics().splitlines():
        if (line.startswith(PASS_METRIC + "{") and f'namespace="{namespace}"' in line
                and f'group="{name}"' in line):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_group_at_rest_passes_once_a_rest_interval_and_a_joining_consumer_wakes_it(
        paced: OperatorProcess, kubeconfig: Path, namespace: str, kafka: KafkaBroker,
        make_topic: Callable[..., str]) -> None:
    topic = make_topic("pace", 2)
    name = unique("pace")
    groups.apply(kubeconfig, namespace, consumer_group(
        name, bootstrap=kafka.bootstrap, topics=[topic], replicas=0, command=PLACEHOLDER))
    groups.wait_status(kubeconfig, namespace, name, lambda cg: (cg.get("status") or {}).get(
        "observedGeneration") == cg["metadata"]["generation"], 60, f"{name} observed")

    # At rest: two passes a rest interval apart, where the resync would make them 1 s apart.
    passes: list[float] = []

    def rested() -> bool:
        at = last_pass(paced, namespace, name)
        if at is not None and (not passes or at != passes[-1]):
            passes.append(at)
        return len(passes) >= 2 and passes[-1] - passes[-2] >= REST_S - 2
    wait_for("two passes a rest interval apart", rested, timeout=3 * REST_S, interval=0.5,
             describe=lambda: f"passes at {passes}")
    before = groups.get(kubeconfig, namespace, name)["status"]
    assert before.get("groupState") != "Stable", before

    # A consumer that is none of the operator's joins the group: the pass comes within a
    # read interval or two, not at the end of the rest.
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": name,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    try:
        subscribed = time.time()
        consumer.subscribe([topic])
        wait_for("the consumer assigned", lambda: (consumer.poll(0.2), consumer.assignment())[1],
                 timeout=60, interval=0)
        joined = time.time()
        seen = wait_for("the operator's pass seeing the group Stable", lambda: (
            s if (s := groups.get(kubeconfig, namespace, name).get("status") or {}).get(
                "groupState") == "Stable" else None), timeout=REST_S, interval=0.25)
        took = time.time() - joined
        passed = last_pass(paced, namespace, name)
    finally:
        consumer.close()
    assert took < REST_S / 3, f"the change was seen {took:.1f} s after the join: not woken"
    # The pass that saw it can end before this test saw its own assignment (once 40 ms before),
    # never before the consumer began to join.
    assert passed is not None and passed >= subscribed, (passed, subscribed)
    assert seen["groupState"] == "Stable"
