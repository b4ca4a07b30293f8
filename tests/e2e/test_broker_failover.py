"""Rollouts on a three-broker cluster while its brokers fail and restart (issue 22's proof).

One classic and one KIP-848 group, both coordinated by the same broker (their ids hash to the
same `__consumer_offsets` partition), roll by warm handoff under load:

1. the broker coordinating both is SIGKILLed as a handoff switches (its standby ready, or
   `Stopping` / `Activating`), comes back 10 s later, and a preferred-leader election moves the
   coordinator again;
2. during a second rollout each broker in turn gets a controlled shutdown (SIGTERM) and a
   restart: no member process restarts, no partition changes owner (issue 38, item 3);
3. both groups scale down to one member while their coordinator's broker is SIGKILLed: no
   member exits non-zero (the leaving member asks the broker through kafka-python, never
   librdkafka's admin client, which can abort the process: librdkafka#4605), and each group's
   only rebalance is the scale-down's planned one.

Each rollout must finish with every handoff warm (none fell back to a cold start), no new
generation in any broker's log, and nothing lost. The figures the closing note quotes are
printed (`pytest -s`): Degraded passes, how long after the coordinator's move every member
processed a batch again, and how long after each broker's stop every member fetched again.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from staticfleet.decisions import builders
from staticfleet.decisions.names import GROUP_LABEL
from staticfleet.observe import memberhttp
from staticfleet_dev.kafka import KafkaCluster, offsets_partition
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.stream import SteadyProducer, read_all
from staticfleet_dev.testkit import groups, ledger
from staticfleet_dev.testkit.kube import get_json, kubectl
from staticfleet_dev.testkit.memberwatch import MemberWatch
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import Poller, wait_for
from tests.e2e.support import env_patch, trigger
from tests.support import unique

# exclusive: an e2e module runs the operator, members and a producer; on this machine's two
# cores two of them side by side overloaded it (tests/lanes.py).
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive]

REPLICAS = 2
OFFSETS_PARTITIONS = 3


def names_on_one_coordinator() -> tuple[str, str]:
    """A classic and a consumer group id whose coordinator is the same broker."""
    classic = unique("fo-classic")
    while True:
        consumer = unique("fo-848")
        if offsets_partition(consumer, OFFSETS_PARTITIONS) == offsets_partition(
                classic, OFFSETS_PARTITIONS):
            return classic, consumer


def member_last_batches(kubeconfig: Path, namespace: str, name: str) -> dict[str, float]:
    """Each running member pod's `lastBatchAt` (its /status), by pod name."""
    pods = get_json(kubeconfig, "-n", namespace, "pods", "-l", f"{GROUP_LABEL}={name}")
    answers: dict[str, float] = {}
    for pod in pods["items"]:
        ip = (pod.get("status") or {}).get("podIP")
        if not ip or pod["metadata"].get("deletionTimestamp"):
            continue
        try:
            url = f"http://{ip}:{builders.HTTP_PORT}/status"
            with urllib.request.urlopen(url, timeout=2) as resp:
                status = json.load(resp)
        except OSError:
            continue
        if status.get("standby") is None and status.get("lastBatchAt"):
            answers[pod["metadata"]["name"]] = float(status["lastBatchAt"])
    return answers


def processing_since(kubeconfig: Path, namespace: str, name: str, since: float) -> bool:
    """Every member of the group (the activated replacement included) processed a batch after
    `since`."""
    batches = member_last_batches(kubeconfig, namespace, name)
    return len(batches) == REPLICAS and all(at > since for at in batches.values())


def in_handoff(kubeconfig: Path, namespace: str, name: str) -> bool:
    """A member's handoff is about to switch or switching: its standby says standby-ready (the
    operator drains the old member and activates the standby within a pass of that), or the
    status shows a member between its old process's stop and its replacement's rejoin. With
    switchovers that is a pass or two, so the caller polls fast."""
    flights = ((groups.get(kubeconfig, namespace, name).get("status") or {}).get("rollout")
               or {}).get("inFlight") or []
    if any(f.get("phase") in ("Stopping", "Activating") for f in flights):
        return True
    return any((memberhttp.read_member_status(ip, builders.HTTP_PORT) or {}).get("standby")
               == "ready" for pod in groups.pods(kubeconfig, namespace, name)
               if (ip := (pod.get("status") or {}).get("podIP"))
               and not pod["metadata"].get("deletionTimestamp"))


def check_rollout(cluster: KafkaCluster, obj: dict[str, Any], generations: list[int]) -> None:
    rollout = obj["status"]["rollout"]
    name = obj["metadata"]["name"]
    assert sorted(rollout["membersRestarted"]) == list(range(REPLICAS)), (name, rollout)
    assert {h["mode"] for h in rollout["handoffs"]} == {"warm"}, (
        f"{name}: a handoff fell back to a cold start: {rollout['handoffs']}")
    assert rollout["rebalancesDuringRollout"] == 0, (name, rollout)
    assert cluster.generations(name) == generations, (
        f"{name} rebalanced: {cluster.rebalance_lines(name)}")


def degraded_passes(operator: OperatorProcess, namespace: str, name: str) -> dict[str, float]:
    """The group's Degraded passes so far, by reason (`staticfleet_reconcile_errors_total`)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(operator.metrics()):
        for sample in family.samples:
            if (sample.name == "staticfleet_reconcile_errors_total"
                    and sample.labels.get("group") == name
                    and sample.labels.get("namespace") == namespace):
                out[sample.labels["reason"]] = sample.value
    return out


def test_rollouts_ride_out_a_coordinator_kill_and_a_broker_roll(
        kafka_cluster: KafkaCluster, kubeconfig: Path, operator: OperatorProcess,
        namespace: str, spark_connect: ConnectServer) -> None:
    classic, consumer = names_on_one_coordinator()
    bootstrap = kafka_cluster.bootstrap
    cgs = {}
    producers = {}
    for name, protocol in ((classic, "classic"), (consumer, "consumer")):
        topic = kafka_cluster.make_topic(unique("fo-in"), 4)
        out = kafka_cluster.make_topic(unique("fo-out"), 4)
        cgs[name] = (topic, out, groups.consumer_group(
            name, bootstrap, topic, replicas=REPLICAS, out_topic=out, protocol=protocol,
            strategy="WarmHandoff", connect_url=spark_connect.url))
        producers[name] = SteadyProducer(bootstrap, topic, rate=50).start()
    try:
        for _, _, cg in cgs.values():
            groups.start(kubeconfig, namespace, cg)
        time.sleep(3)
        coordinator = kafka_cluster.coordinator(classic)
        assert coordinator is not None and kafka_cluster.coordinator(consumer) == coordinator
        generations = {name: kafka_cluster.generations(name) for name in cgs}
        assert generations[classic], "the classic group never stabilized"

        # 1. The coordinator dies as a handoff switches; it comes back 10 s later and a
        # preferred-leader election moves the coordinator again.
        for name in cgs:
            trigger(kubeconfig, namespace, name, env_patch("1"))
        wait_for("a member in its handoff", partial(in_handoff, kubeconfig, namespace, classic),
                 300, interval=0.05)
        killed_at = time.time()
        kafka_cluster.kill(coordinator)
        moved = wait_for("the coordinator moved", lambda: (
            c if (c := kafka_cluster.coordinator(classic)) not in (None, coordinator)
            else None), 60, interval=0.5)
        resumed = {}
        for name in cgs:
            wait_for(f"every member of {name} processing again",
                     partial(processing_since, kubeconfig, namespace, name, killed_at), 120,
                     interval=0.25)
            resumed[name] = round(time.time() - killed_at, 1)
        time.sleep(max(0.0, killed_at + 10 - time.time()))
        kafka_cluster.start(coordinator)
        kafka_cluster.elect_preferred_leaders()
        done = {name: groups.wait_rollout(kubeconfig, namespace, name, 600)
                for name in cgs}
        print(f"\ncoordinator {coordinator} killed in a handoff, moved to {moved}; seconds from "
              f"the kill until every member processed again (at most): {resumed}")
        for name in cgs:
            check_rollout(kafka_cluster, done[name], generations[name])

        # 2. During a second rollout, each broker in turn gets a controlled shutdown (SIGTERM:
        # it hands its leaderships over before it exits) and a restart.
        for name in cgs:
            trigger(kubeconfig, namespace, name, env_patch("2"))
        with MemberWatch(kubeconfig, namespace, interval=0.5) as watch:
            stops = roll_brokers(kafka_cluster, classic)
            done = {name: groups.wait_rollout(kubeconfig, namespace, name, 600,
                                              "rolled out again") for name in cgs}
        check_broker_roll(watch, stops, list(cgs))
        for name in cgs:
            check_rollout(kafka_cluster, done[name], generations[name])
            print(f"{name}: Degraded passes {degraded_passes(operator, namespace, name)}")

        # 3. Both groups scale down to one member as their coordinator's broker is SIGKILLed:
        # the leaving member asks the broker every 0.2 s whether its partitions moved, which
        # librdkafka's in-process admin request could answer with an abort (librdkafka#4605).
        scale_down_while_the_coordinator_dies(kafka_cluster, kubeconfig, namespace, list(cgs))
        check_ledger(kubeconfig, namespace, list(cgs))
    finally:
        produced = {name: p.stop() for name, p in producers.items()}
    for name, (topic, out, _) in cgs.items():
        assert not producers[name].failed, producers[name].failed
        groups.wait_caught_up(bootstrap, name, [topic])
        written = read_all(bootstrap, out)
        missing = set(producers[name].produced) - set(written)
        assert produced[name] > 0 and not missing, (
            f"{name}: {len(missing)} of {produced[name]} records lost")
        print(f"{name}: {produced[name]} produced, {len(written) - len(set(written))} "
              "duplicated in the sink")


@dataclass(frozen=True)
class BrokerStop:
    node: int
    at: float
    """When its SIGTERM was sent (unix seconds)."""
    coordinator: tuple[int | None, int | None]
    """The groups' coordinator before the stop and once the broker served again."""


def roll_brokers(cluster: KafkaCluster, group: str) -> list[BrokerStop]:
    """Each broker in turn: a controlled shutdown (`KafkaCluster.stop`: SIGTERM), then started
    again and waited in sync."""
    stops = []
    for node in cluster.node_ids:
        before, at = cluster.coordinator(group), time.time()
        cluster.stop(node)
        cluster.start(node)
        stops.append(BrokerStop(node, at, (before, cluster.coordinator(group))))
    return stops


def check_broker_roll(watch: MemberWatch, stops: list[BrokerStop], names: list[str]) -> None:
    """Issue 38, item 3: no member noticed the broker roll. No member process restarted (a
    rollout's replacement is a new pod, not a restart) and no partition changed owner (an epoch
    bump or a generation that moved an assignment; the classic groups' generations are checked
    by `check_rollout`). How long each broker's stop stalled the members is printed, never
    asserted."""
    ends = [s.at for s in stops[1:]] + [time.time()]
    for stop, until in zip(stops, ends, strict=True):
        stalls = {member: None if s is None else round(s, 1) for name in names
                  for member, s in watch.fetch_stalls(name, stop.at, until).items()}
        print(f"broker {stop.node} SIGTERM, coordinator {stop.coordinator[0]} -> "
              f"{stop.coordinator[1]}: seconds until each member fetched again (None: not "
              f"within {until - stop.at:.0f} s): {stalls}")
    for name in names:
        print(f"{name}: rebalances each member pod counted in the roll "
              f"{watch.rebalances(name)}")
        assert not watch.owner_changes(name), (
            f"{name}: partitions changed owner in the broker roll: {watch.owner_changes(name)}")
    assert not watch.restarted(), f"member processes restarted: {watch.restarted()}"


def check_ledger(kubeconfig: Path, namespace: str, names: list[str]) -> None:
    """Issue 38, items 1 and 3: every rebalance the operator counted for these groups through
    the coordinator's kill, the broker roll and the scale-down has a cause in the rebalance
    ledger, none `unknown` (the groups' forming and the scale-down are `scale`; anything the
    brokers made would be `coordinator_move` or `broker_restart`). The entries are read once
    none waits for its cause."""
    def settled(name: str) -> dict[str, Any] | None:
        got = ledger.ledger(kubeconfig, namespace, name)
        return None if got.get("pending") else got

    for name in names:
        led = wait_for(f"{name}'s ledger with no rebalance waiting for its cause",
                       partial(settled, name), 60)
        recent = led.get("recent") or []
        print(f"{name}: rebalance ledger (rebalance, epoch, cause): "
              f"{[(e['rebalance'], e.get('epoch'), e.get('cause')) for e in recent]}")
        assert all(e.get("cause") not in (None, "unknown") for e in recent), recent


class ExitWatch(Poller):
    """Records every member container exit with a non-zero code seen in the pods' statuses
    (a crash is restarted in place, so it shows as the last state while the pod lives)."""

    interval = 0.25
    transient = (Exception,)

    def __init__(self, kubeconfig: Path, namespace: str, names: list[str]) -> None:
        self.args = (kubeconfig, namespace)
        self.names = names
        self.exits: set[tuple[str, int, str]] = set()

    def poll(self) -> None:
        for name in self.names:
            for pod in groups.pods(*self.args, name):
                for cs in (pod.get("status") or {}).get("containerStatuses") or ():
                    for state in (cs.get("state") or {}, cs.get("lastState") or {}):
                        ended = state.get("terminated") or {}
                        if ended.get("exitCode"):
                            self.exits.add((pod["metadata"]["name"], int(ended["exitCode"]),
                                            str(ended.get("reason"))))


def scale_down_while_the_coordinator_dies(cluster: KafkaCluster, kubeconfig: Path,
                                          namespace: str, names: list[str]) -> None:
    """Issue 34, item 3: each group goes from 2 members to 1 while the broker coordinating
    them is killed (and started again 10 s later). No member exits non-zero; each group's only
    rebalance is the planned one of its scale-down."""
    coordinator = cluster.coordinator(names[0])
    assert coordinator is not None
    before = {name: groups.get(kubeconfig, namespace, name)["status"] for name in names}
    with ExitWatch(kubeconfig, namespace, names) as watch:
        for name in names:
            kubectl(kubeconfig, "-n", namespace, "patch", "cg", name, "--type=merge", "-p",
                    json.dumps({"spec": {"replicas": 1}}))
        wait_for("a member leaving", lambda: any(
            (memberhttp.read_member_status(ip, builders.HTTP_PORT) or {}).get("leaving")
            for name in names for pod in groups.pods(kubeconfig, namespace, name)
            if (ip := (pod.get("status") or {}).get("podIP"))), 60, interval=0.05)
        killed_at = time.monotonic()
        cluster.kill(coordinator)
        for name in names:
            wait_for(f"{name} down to one member pod", lambda name=name: len(
                groups.pods(kubeconfig, namespace, name)) == 1, 180, interval=0.5)
        time.sleep(max(0.0, killed_at + 10 - time.monotonic()))
        cluster.start(coordinator)
        after = {name: groups.wait_status(kubeconfig, namespace, name, groups.ready,
                                          180, "Ready with one member")["status"]
                 for name in names}
    for name in names:
        rebalanced = int(after[name].get("rebalances") or 0) - int(
            before[name].get("rebalances") or 0)
        planned = int(after[name].get("plannedRebalances") or 0) - int(
            before[name].get("plannedRebalances") or 0)
        print(f"{name}: scaled down while coordinator {coordinator} was killed: rebalances "
              f"{rebalanced}, planned {planned}; member exits {sorted(watch.exits)}")
        assert rebalanced <= planned, f"{name}: {rebalanced - planned} unplanned rebalance(s)"
    assert not watch.exits, f"a member exited non-zero: {sorted(watch.exits)}"
