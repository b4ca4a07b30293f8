"""The rebalance ledger against the real broker, the real API server, the local node and the
session's operator (issue 38, item 1): a plain confluent-kafka consumer that joins the group
with its group.id and leaves it is the cause `foreign_member` of the two rebalances it makes; a
member whose process is frozen (SIGSTOP) past its session timeout and then goes on is the cause
`member_timeout` of the rebalances its eviction and its return make; a scale-up the cause
`scale` of its. Each shows in `status.rebalanceLedger.recent`, in
`staticfleet_rebalances_by_cause_total` and (the foreign one) as a Warning Event, and no
rebalance is `unknown`. A member that hangs past its session timeout and is then killed
(SIGKILL) is the cause `member_crash` of the rebalance its restarted process's join makes. In a
KIP-848 group, a foreign consumer's join and leave are `foreign_member`, each entry with the
group epoch.

The members are real `consumer_runtime` processes: the rebalances are counted from their own
counters (`/status` rebalances), as in production. Their Spark runs through the session's
Connect server, so that a member is a Python process that starts in seconds; the subject is the
operator's reading of the group, not the members' Spark.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
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
from tests.e2e.support import member_process
from tests.integration.support import consumer_group, patch_cg, ready_and_stable, summary
from tests.support import unique

pytestmark = pytest.mark.integration

SESSION_S = 10


@pytest.fixture
def foreign() -> Iterator[list[ForeignConsumer]]:
    made: list[ForeignConsumer] = []
    yield made
    for consumer in made:
        consumer.close()


def test_a_foreign_consumer_and_a_scale_up_are_each_the_cause_of_their_rebalances(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        make_topic: Callable[..., str], spark_connect: ConnectServer,
        foreign: list[ForeignConsumer]) -> None:
    topic = make_topic("ledger", 4)
    name = unique("ledger")
    cg = consumer_group(name, bootstrap=kafka.bootstrap, topics=[topic], replicas=2,
                        connect_url=spark_connect.url)
    cg["spec"]["membership"]["timeouts"] = {"sessionTimeoutMs": SESSION_S * 1000}
    groups.apply(kubeconfig, namespace, cg)
    wait_for("Ready with 2 members", lambda: ready_and_stable(kubeconfig, namespace, name, 2),
             timeout=240, interval=1, describe=lambda: summary(kubeconfig, namespace, name))
    # The group forming (the second member joining) is the operator's own: scale (Create).
    wait_for("every rebalance so far given its cause", lambda: not kit.ledger(
        kubeconfig, namespace, name).get("pending"), timeout=60, interval=1)
    formed = kit.causes(kubeconfig, namespace, name)
    assert set(formed) <= {"scale"}, formed

    # 1: a plain consumer with the group's group.id joins: its rebalance is foreign_member.
    joining = ForeignConsumer(kafka.bootstrap, name, topic)
    foreign.append(joining)
    wait_for("the foreign consumer assigned", lambda: joining.assigned, timeout=60)
    recent = wait_for("a rebalance given the cause foreign_member", lambda: (
        r if "foreign_member" in (r := kit.causes(kubeconfig, namespace, name))[len(formed):]
        else None), timeout=90, interval=1,
        describe=lambda: f"ledger: {kit.ledger(kubeconfig, namespace, name)}")
    entry = next(e for e in kit.ledger(kubeconfig, namespace, name)["recent"][len(formed):]
                 if e["cause"] == "foreign_member")
    assert "joined the group" in entry["evidence"] and "instance id none" in entry["evidence"]
    warnings = wait_for("a ForeignMember Event", lambda: groups.events(
        kubeconfig, namespace, name, "ForeignMember"), timeout=30)
    assert warnings[0]["type"] == "Warning"
    assert f"group.id {name}" in warnings[0]["message"]

    # 2: it leaves (LeaveGroup): that rebalance is its too.
    joined = len(recent)
    joining.close()
    wait_for("the rebalance of its leave given the cause foreign_member", lambda: (
        "foreign_member" in kit.causes(kubeconfig, namespace, name)[joined:]), timeout=90,
        interval=1, describe=lambda: f"ledger: {kit.ledger(kubeconfig, namespace, name)}")
    left = next(e for e in kit.ledger(kubeconfig, namespace, name)["recent"][joined:]
                if e["cause"] == "foreign_member")
    assert "left the group" in left["evidence"]

    # 3: member 1's process frozen past its session timeout: the broker evicts it (a
    #    rebalance), and it joins again as a new member when it goes on (another). Its
    #    container never restarts: no crash, a timeout. (Before the scale-up: a rebalance
    #    within a planned scale change's window is the scale change's.)
    wait_for("no rebalance waiting for its cause", lambda: not kit.ledger(
        kubeconfig, namespace, name).get("pending"), timeout=60, interval=1)
    frozen = len(kit.causes(kubeconfig, namespace, name))
    pid, _ = member_process(namespace, f"{name}-1")
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(SESSION_S + 6)
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for("the eviction's rebalance given the cause member_timeout", lambda: (
        "member_timeout" in kit.causes(kubeconfig, namespace, name)[frozen:]), timeout=90,
        interval=1, describe=lambda: f"ledger: {kit.ledger(kubeconfig, namespace, name)}")
    wait_for("Ready with 2 members again", lambda: ready_and_stable(
        kubeconfig, namespace, name, 2), timeout=120, interval=1,
        describe=lambda: summary(kubeconfig, namespace, name))
    timed_out = next(e for e in kit.ledger(kubeconfig, namespace, name)["recent"][frozen:]
                     if e["cause"] == "member_timeout")
    assert f"instance id {name}-1" in timed_out["evidence"], timed_out

    # 4: member 0's process hangs past its session timeout (evicted: a rebalance, a timeout
    #    while its process is alive) and is then killed (SIGKILL, as a liveness probe or a
    #    person would): its container restarts in place and joins as a new member, a
    #    rebalance whose cause is the crash its containerStatuses show.
    wait_for("no rebalance waiting for its cause", lambda: not kit.ledger(
        kubeconfig, namespace, name).get("pending"), timeout=60, interval=1)
    hung = len(kit.causes(kubeconfig, namespace, name))
    pid, _ = member_process(namespace, f"{name}-0")
    os.kill(pid, signal.SIGSTOP)
    time.sleep(SESSION_S + 6)
    os.kill(pid, signal.SIGKILL)
    wait_for("the rejoin's rebalance given the cause member_crash", lambda: (
        "member_crash" in kit.causes(kubeconfig, namespace, name)[hung:]), timeout=120,
        interval=1, describe=lambda: f"ledger: {kit.ledger(kubeconfig, namespace, name)}")
    crashed = next(e for e in kit.ledger(kubeconfig, namespace, name)["recent"][hung:]
                   if e["cause"] == "member_crash")
    assert re.match(rf"member 0 \(pod {name}-0\) exited at [-0-9T:]+Z: killed by SIGKILL",
                    crashed["evidence"]), crashed
    wait_for("Ready with 2 members again", lambda: ready_and_stable(
        kubeconfig, namespace, name, 2), timeout=120, interval=1,
        describe=lambda: summary(kubeconfig, namespace, name))

    # 5: 2 -> 3 members: the new member's join is scale.
    before = len(kit.causes(kubeconfig, namespace, name))
    patch_cg(kubeconfig, namespace, name, {"spec": {"replicas": 3}})
    wait_for("Ready with 3 members", lambda: ready_and_stable(kubeconfig, namespace, name, 3),
             timeout=240, interval=1, describe=lambda: summary(kubeconfig, namespace, name))
    wait_for("the scale-up's rebalance given the cause scale", lambda: (
        "scale" in kit.causes(kubeconfig, namespace, name)[before:]), timeout=90, interval=1,
        describe=lambda: f"ledger: {kit.ledger(kubeconfig, namespace, name)}")

    # Nothing unknown: in the status, in the metric, as an Event; and once none is pending,
    # the counts by cause add up to the operator's total.
    final = wait_for("no rebalance waiting for its cause", lambda: (
        lg if not (lg := kit.ledger(kubeconfig, namespace, name)).get("pending") else None),
        timeout=60, interval=1)
    print("ledger:", json.dumps(final, indent=1))
    assert "unknown" not in [e["cause"] for e in final["recent"]], final
    assert isinstance(final.get("coordinator"), int), "the batched reads' coordinator, kept"
    assert groups.events(kubeconfig, namespace, name, "RebalanceUnexplained") == []
    by_cause = kit.counted(operator.metrics(), kit.CAUSE_METRIC, namespace, name)
    total = kit.counted(operator.metrics(), kit.TOTAL_METRIC, namespace, name)[""]
    assert by_cause["unknown"] == 0, by_cause
    assert by_cause["foreign_member"] >= 2 and by_cause["scale"] >= 1, by_cause
    assert by_cause["member_timeout"] >= 1 and by_cause["member_crash"] >= 1, by_cause
    assert sum(by_cause.values()) == total == final["recent"][-1]["rebalance"], (by_cause,
                                                                                  total, final)


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
