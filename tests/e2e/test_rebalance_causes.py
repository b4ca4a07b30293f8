"""The rebalance ledger names each cause it knows, each provoked once (issue 38, item 1's
acceptance): one group on the three-broker cluster goes through a rollout, a member killed
with SIGKILL, a restart of its coordinator's broker, a coordinator move, a scale-up and a
foreign consumer joining, one after another. After each, the ledger
(`status.rebalanceLedger.recent`) names that cause for the rebalances it made, and at the end
`staticfleet_rebalances_by_cause_total` has counted each cause and nothing `unknown`.

Why one group may share them: the rules are an ordered table (`rebalance.causes.RULES`) and
evidence stays for the session timeout and a grace (`ledger.GRACE_S`). The steps go from the
last row up (rollout, member crash, broker restart, coordinator move, scale, foreign member), so
what an earlier step left behind is always a lower row than the next step's own evidence and
cannot take its rebalances; and each step waits until the group is quiet (no new generation
for a session timeout and more, every rebalance counted and given its cause) before the next.

The group uses dynamic membership (the test-only annotation): the causes are about rebalances,
and a static group makes none in a rollout or a coordinator move, which is the product's point.
What each step makes, as seen on these brokers:

- rollout: each restarted member leaves (LeaveGroup) and its new process joins;
- member crash: the killed member's container restarts in place and joins as a new member; the
  group then waits for the dead member's session to run out (the "past the session timeout");
- broker restart: the coordinator's broker is killed and started again, the group's partition of
  `__consumer_offsets` on it alone for the while, so that the coordinator cannot move (as in a
  one-broker cluster): the group has no coordinator meanwhile, and the members rejoin once it
  is back;
- coordinator move: the coordinator's broker hangs (SIGSTOP) and is fenced; the members'
  heartbeats to it hang until their session runs out, and they join the new coordinator as new
  members (a SIGKILL or a SIGTERM makes no rebalance with this session timeout: the members find
  the new coordinator in time);
- scale: a third member joins;
- foreign member: a plain consumer with the group's group.id joins.

The members run their Spark through the session's Connect server, and nothing is produced: the
subject is the operator's account of the rebalances, not the processing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterPartitionReassignmentsRequest

from staticfleet_dev.kafka import OFFSETS_TOPIC, KafkaCluster, offsets_partition
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit import ledger as kit
from staticfleet_dev.testkit.consumers import ForeignConsumer
from staticfleet_dev.testkit.kube import kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import Poller, wait_for
from tests.e2e.support import crash, env_patch, trigger
from tests.support import unique

# exclusive: an e2e module runs the operator, members and a producer; on this machine's two
# cores two of them side by side overloaded it (tests/lanes.py).
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive]

SESSION_MS = 12000
"""Short, so that a dead member is out soon, and still twice a member's restart on a loaded
machine: the roller refuses a rollout whose measured restarts the session timeout does not cover
(RestartUnsafe; 6 s was refused after a 3.1 s restart)."""
QUIET_S = 8.0
"""A group is quiet once it is Stable and no generation was stabilized for this long (a group
that waits for a dead member's session to run out is not Stable meanwhile)."""
CAUSE_WAIT_S = 150.0
STABILIZED = re.compile(r"^\[([-0-9: ,]+)\] .*Stabilized group (\S+) generation", re.M)


class Group:
    """The group under test: what its ledger gave each rebalance, and waits on it."""

    def __init__(self, cluster: KafkaCluster, kubeconfig: Path, namespace: str,
                 name: str) -> None:
        self.cluster, self.kubeconfig, self.namespace, self.name = (
            cluster, kubeconfig, namespace, name)
        self.entries: dict[int, dict[str, Any]] = {}
        """Every decided entry seen in `recent`, by its rebalance number."""

    def status(self) -> dict[str, Any]:
        return dict(groups.get(self.kubeconfig, self.namespace, self.name).get("status") or {})

    def since(self, before: int) -> list[dict[str, Any]]:
        """The decided entries after rebalance `before` (kept in `entries` too)."""
        for entry in kit.ledger(self.kubeconfig, self.namespace, self.name).get("recent") or ():
            self.entries[int(entry["rebalance"])] = entry
        return [e for n, e in sorted(self.entries.items()) if n > before]

    def caused(self, cause: str, before: int) -> None:
        """Wait until a rebalance after `before` has `cause`."""
        wait_for(f"a rebalance after rebalance {before} given the cause {cause}", lambda: any(
            e["cause"] == cause for e in self.since(before)), CAUSE_WAIT_S, interval=1,
            describe=lambda: "ledger: " + json.dumps(kit.ledger(
                self.kubeconfig, self.namespace, self.name), indent=1)[-3000:])

    def stabilized_at(self) -> float:
        """When a broker last stabilized a generation of the group (its log's clock), 0 for
        never."""
        stamps = [m.group(1) for node in self.cluster.nodes.values() if node.log.exists()
                  for m in STABILIZED.finditer(node.log.read_text(errors="replace"))
                  if m.group(2) == self.name]
        return max((datetime.strptime(s, "%Y-%m-%d %H:%M:%S,%f").timestamp() for s in stamps),
                   default=0.0)

    def counters(self) -> dict[str, int] | None:
        return groups.member_counters(self.kubeconfig, self.namespace, self.name)

    def quiet(self, members: int) -> int:
        """Wait until the group is Ready and Stable with `members` members, no generation was
        stabilized for `QUIET_S`, the operator has read every member's counter as it is now
        (`status.memberRebalanceCounters`: every rebalance counted) and none waits for its
        cause; the rebalances counted then."""
        last: dict[str, Any] = {}

        def settled() -> bool:
            if time.time() - self.stabilized_at() < QUIET_S:
                return False
            st = last["status"] = self.status()
            conditions = {c["type"]: c["status"] for c in st.get("conditions") or ()}
            if not (conditions.get("Ready") == "True" and st.get("groupState") == "Stable"
                    and len(st.get("members") or ()) == members
                    and not (st.get("rebalanceLedger") or {}).get("pending")):
                return False
            now = last["counters"] = self.counters()
            read = st.get("memberRebalanceCounters") or {}
            return now is not None and all(read.get(uid) == n for uid, n in now.items())

        wait_for(f"{self.name} quiet with {members} members", settled, 180, interval=1,
                 describe=lambda: json.dumps({
                     "members' counters": last.get("counters"),
                     **{k: last.get("status", {}).get(k) for k in (
                         "groupState", "conditions", "members", "rebalances",
                         "memberRebalanceCounters", "rebalanceLedger")}}, indent=1)[-4000:])
        return int(last["status"].get("rebalances") or 0)


class StatusLog(Poller):
    """The group's counting as the operator wrote it, each change with the time it was seen
    (printed at the end: how each rebalance was counted, from the members' counters or the
    group's state)."""

    interval = 0.5
    transient = (Exception,)
    FIELDS = ("groupState", "rebalances", "rebalancesFromState", "memberRebalanceCounters",
              "lastReconciled")

    def __init__(self, group: Group) -> None:
        self.group = group
        self.lines: list[str] = []
        self.last: tuple[Any, ...] | None = None

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        print("\n".join(["the operator's counting:", *self.lines]))

    def poll(self) -> None:
        st = self.group.status()
        degraded = next((c.get("reason") for c in st.get("conditions") or ()
                         if c["type"] == "Degraded" and c["status"] == "True"), None)
        now = (*(json.dumps(st.get(k), sort_keys=True) for k in self.FIELDS[:-1]), degraded)
        if now != self.last:
            self.last = now
            self.lines.append(f"{time.strftime('%H:%M:%S')} " + " ".join(
                f"{k}={v}" for k, v in zip((*self.FIELDS[:-1], "degraded"), now, strict=True))
                + f" lastReconciled={st.get('lastReconciled')}")


def offsets_replicas(cluster: KafkaCluster, group_id: str) -> tuple[int, list[int]]:
    """The group's `__consumer_offsets` partition and its replicas."""
    topic = cluster.admin().list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC]
    partition = offsets_partition(group_id, len(topic.partitions))
    return partition, list(topic.partitions[partition].replicas)


def reassign_offsets(cluster: KafkaCluster, group_id: str, replicas: list[int]) -> None:
    """Give the group's `__consumer_offsets` partition these replicas (the first leads it:
    AlterPartitionReassignments), and wait until every replica is in sync. One replica alone
    takes the topic's min.insync.replicas down to 1 (the cluster's 2 would refuse the
    coordinator's writes); more give it back."""
    one = len(replicas) == 1
    entry = ConfigEntry("min.insync.replicas", "1", incremental_operation=(
        AlterConfigOpType.SET if one else AlterConfigOpType.DELETE))
    if one:
        _alter_offsets_topic(cluster, entry)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        partition, _ = offsets_replicas(cluster, group_id)
        answer = admin.send_request(AlterPartitionReassignmentsRequest[0](
            timeout_ms=30000, topics=[(OFFSETS_TOPIC, [(partition, replicas, {})], {})],
            tags={}))
        errors = [answer.error_code] + [p[1] for t in answer.responses for p in t[1]]
        assert not any(errors), answer
    finally:
        admin.close()
    wait_for(f"the group's offsets partition on brokers {replicas}", lambda: (
        offsets_replicas(cluster, group_id)[1] == replicas), 60, interval=0.5)
    cluster.wait_in_sync()
    if not one:
        _alter_offsets_topic(cluster, entry)


def _alter_offsets_topic(cluster: KafkaCluster, entry: ConfigEntry) -> None:
    resource = ConfigResource(ResourceType.TOPIC, OFFSETS_TOPIC, incremental_configs=[entry])
    for future in cluster.admin().incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def test_each_cause_provoked_once_is_named_in_the_ledger_and_counted_by_cause(
        kafka_cluster: KafkaCluster, kubeconfig: Path, operator: OperatorProcess,
        namespace: str, spark_connect: ConnectServer) -> None:
    t0 = time.monotonic()
    name = unique("causes")
    topic = kafka_cluster.make_topic(unique("causes-in"), 4)
    groups.start(kubeconfig, namespace, groups.consumer_group(
        name, kafka_cluster.bootstrap, topic, replicas=2, session_ms=SESSION_MS, dynamic=True,
        connect_url=spark_connect.url))
    group = Group(kafka_cluster, kubeconfig, namespace, name)
    with StatusLog(group):
        before = group.quiet(2)
        found: dict[str, list[dict[str, Any]]] = {}
        took: dict[str, float] = {}

        def done(cause: str, members: int, started: float) -> None:
            nonlocal before
            after = group.quiet(members)
            found[cause] = group.since(before)
            took[cause] = round(time.monotonic() - started, 1)
            before = after

        # 1: a rollout (each member's leave and its new process's join).
        started = time.monotonic()
        trigger(kubeconfig, namespace, name, env_patch("1"))
        groups.wait_rollout(kubeconfig, namespace, name, 300)
        group.caused("rollout", before)
        done("rollout", 2, started)

        # 2: member 1 killed (SIGKILL): its restart joins, its dead member times out.
        started = time.monotonic()
        crash(kubeconfig, namespace, f"{name}-1")
        group.caused("member_crash", before)
        done("member_crash", 2, started)

        # 3: the coordinator's broker restarted with the group's offsets partition on it
        #    alone, so that the coordinator has nowhere to move: the group has none until the
        #    broker is back (a cluster of one broker, as far as the group is concerned).
        #    Replicated again afterwards, for the coordinator to move in step 4.
        started = time.monotonic()
        coordinator = kafka_cluster.coordinator(name)
        assert coordinator is not None
        _, replicas = offsets_replicas(kafka_cluster, name)
        reassign_offsets(kafka_cluster, name, [coordinator])
        kafka_cluster.kill(coordinator)
        # Down until a pass of the operator found the group without an answer (a pass can be
        # held up ~20 s by a request to the coordinator that died: seen here).
        wait_for("a pass that found the group without an answer", lambda: any(
            sign["sign"] == "BrokersUnanswered" for sign in kit.ledger(
                kubeconfig, namespace, name).get("signs") or ()), 120, interval=1)
        kafka_cluster.start(coordinator)
        assert kafka_cluster.coordinator(name) == coordinator
        group.caused("broker_restart", before)
        reassign_offsets(kafka_cluster, name, [coordinator] + [
            n for n in replicas if n != coordinator])
        done("broker_restart", 2, started)

        # 4: the coordinator's broker hangs (SIGSTOP) until the ledger named the rebalance:
        #    the controller fences it and the coordinator moves; the members' heartbeats to it
        #    hang until their session runs out, and they join the new coordinator as new
        #    members. (A SIGKILL fails their requests at once: they find the new coordinator
        #    within the session timeout and nothing rebalances, as with a static group.)
        started = time.monotonic()
        coordinator = kafka_cluster.coordinator(name)
        assert coordinator is not None
        hung = kafka_cluster.node(coordinator).record.pid
        os.killpg(hung, signal.SIGSTOP)
        try:
            wait_for("the coordinator moved", lambda: (
                c if (c := kafka_cluster.coordinator(name)) not in (None, coordinator)
                else None), 60, interval=0.5)
            group.caused("coordinator_move", before)
        finally:
            os.killpg(hung, signal.SIGCONT)
        kafka_cluster.wait_in_sync()
        kafka_cluster.elect_preferred_leaders()
        done("coordinator_move", 2, started)

        # 5: a third member.
        started = time.monotonic()
        kubectl(kubeconfig, "-n", namespace, "patch", "cg", name, "--type=merge", "-p",
                json.dumps({"spec": {"replicas": 3}}))
        group.caused("scale", before)
        done("scale", 3, started)

        # 6: a consumer that is none of the group's members joins with its group.id.
        started = time.monotonic()
        foreign = ForeignConsumer(kafka_cluster.bootstrap, name, topic)
        try:
            group.caused("foreign_member", before)
            found["foreign_member"] = group.since(before)
            took["foreign_member"] = round(time.monotonic() - started, 1)
            warned = wait_for("a ForeignMember Event", lambda: groups.events(
                kubeconfig, namespace, name, "ForeignMember"), 30)
        finally:
            foreign.close()

    print(f"\nwall time {time.monotonic() - t0:.0f} s; each step until its group was quiet "
          f"(s): {took}")
    for cause, entries in found.items():
        print(f"{cause}:")
        for e in entries:
            print(f"  rebalance {e['rebalance']} at {e['time']}: {e['cause']}: {e['evidence']}")
    # Each step's rebalances have its cause, and only that.
    wrong = {cause: [(e["rebalance"], e["cause"]) for e in entries if e["cause"] != cause]
             for cause, entries in found.items()}
    assert not any(wrong.values()), wrong
    assert warned[0]["type"] == "Warning" and f"group.id {name}" in warned[0]["message"]
    assert "unknown" not in [e["cause"] for e in group.entries.values()], group.entries
    by_cause = kit.counted(operator.metrics(), kit.CAUSE_METRIC, namespace, name)
    print("staticfleet_rebalances_by_cause_total:", by_cause)
    assert by_cause.get("unknown") == 0, by_cause
    assert all(by_cause.get(cause, 0) >= len(entries) >= 1
               for cause, entries in found.items()), (by_cause, found)
