"""The rebalance ledger of a KIP-848 group against the real broker, the real API server, the
local node and the session's operator (issue 38, item 1): a foreign consumer's join and leave are
`foreign_member`, each entry with the group epoch.

Every classic-group claim (a foreign consumer's join and leave, a member frozen past its session
timeout, a member killed, a scale-up, the counts by cause adding up to the total) is the e2e
ledger walk's, on the three-broker cluster (tests/e2e/test_rebalance_causes.py): one walk.

The members are real `consumer_runtime` processes: the rebalances are counted from their own
counters (`/status` rebalances), as in production. Their Spark runs through the session's
Connect server, so that a member is a Python process that starts in seconds; the subject is the
operator's reading of the group, not the members' Spark.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit import ledger as kit
from staticfleet_dev.testkit.consumers import ForeignConsumer
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from tests.integration.support import consumer_group, ready_and_stable, summary
from tests.support import unique

pytestmark = pytest.mark.integration

SESSION_S = 10


@pytest.fixture
def foreign() -> Iterator[list[ForeignConsumer]]:
    made: list[ForeignConsumer] = []
    yield made
    for consumer in made:
        consumer.close()


def test_a_foreign_consumer_of_a_kip848_group_is_the_cause_with_the_group_epoch(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        make_topic: Callable[..., str], spark_connect: ConnectServer,
        foreign: list[ForeignConsumer]) -> None:
    """A KIP-848 group (protocol consumer): a consumer of the same protocol joins it with its
    group.id and leaves. Its join bumps the group epoch and takes partitions from the members
    (their assign callbacks count it); its leave gives them back. Both are foreign_member, each
    entry with the group epoch the describe read."""
    topic = make_topic("ledger848", 4)
    name = unique("ledger848")
    cg = consumer_group(name, bootstrap=kafka.bootstrap, topics=[topic], replicas=2,
                        connect_url=spark_connect.url)
    cg["spec"]["membership"]["protocol"] = "consumer"
    cg["spec"]["membership"].pop("assignmentStrategy", None)  # the broker assigns (KIP-848)
    groups.apply(kubeconfig, namespace, cg)
    wait_for("Ready with 2 members", lambda: ready_and_stable(kubeconfig, namespace, name, 2),
             timeout=240, interval=1, describe=lambda: summary(kubeconfig, namespace, name))
    wait_for("every rebalance so far given its cause", lambda: not kit.ledger(
        kubeconfig, namespace, name).get("pending"), timeout=60, interval=1)
    formed = kit.ledger(kubeconfig, namespace, name)["recent"]
    assert {e["cause"] for e in formed} <= {"scale"}, formed

    joining = ForeignConsumer(kafka.bootstrap, name, topic, protocol="consumer")
    foreign.append(joining)
    wait_for("the foreign consumer assigned", lambda: joining.assigned, timeout=60)
    wait_for("its join's rebalance given the cause foreign_member", lambda: (
        "foreign_member" in kit.causes(kubeconfig, namespace, name)[len(formed):]), timeout=90,
        interval=1, describe=lambda: f"ledger: {kit.ledger(kubeconfig, namespace, name)}")
    joined = len(kit.causes(kubeconfig, namespace, name))
    joining.close()
    wait_for("its leave's rebalance given the cause foreign_member", lambda: (
        "foreign_member" in kit.causes(kubeconfig, namespace, name)[joined:]), timeout=90,
        interval=1, describe=lambda: f"ledger: {kit.ledger(kubeconfig, namespace, name)}")
    final = wait_for("no rebalance waiting for its cause", lambda: (
        lg if not (lg := kit.ledger(kubeconfig, namespace, name)).get("pending") else None),
        timeout=60, interval=1)
    print("ledger:", json.dumps(final, indent=1))
    entries = [e for e in final["recent"][len(formed):] if e["cause"] == "foreign_member"]
    assert len(entries) >= 2, final
    # The foreign consumer's entries were counted once the group was described with its
    # members: each has the group epoch, past the formation's (whose entry may have none: a
    # new group can be counted before a describe shows it).
    epochs = [e.get("epoch") for e in final["recent"][len(formed):]]
    assert all(isinstance(x, int) for x in epochs), final
    assert epochs == sorted(epochs) and epochs[0] > max(
        (e.get("epoch") or 0 for e in formed), default=0), final
    assert {e["cause"] for e in final["recent"]} <= {"scale", "foreign_member"}, final
    by_cause = kit.counted(operator.metrics(), kit.CAUSE_METRIC, namespace, name)
    assert by_cause["foreign_member"] >= 2 and by_cause["unknown"] == 0, by_cause
