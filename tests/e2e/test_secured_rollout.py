"""Rolling restarts on each secured listener (SASL_SSL with SCRAM-SHA-512, mutual TLS, SASL_SSL
with OAUTHBEARER, TLS): the operator reads the group with the credentials of the ConsumerGroup's
Secrets, the member pods run on the local node with them, and the warm rollout costs no rebalance
and loses no record.

It shares the session's environment (API server, local node, operator) and the session's
secured broker (`secured_kafka`); the group's topics are its own and granted to its principal
alone, so the members and the operator are seen to authenticate as that principal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.stream import SteadyProducer, read_all
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.secured import SecuredKafka
from tests.e2e.support import env_patch, trigger
from tests.integration.support import apply_secrets
from tests.support import unique

# exclusive: an e2e module runs the operator, members and a producer; on this machine's two
# cores two of them side by side overloaded it (tests/lanes.py).
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive]

REPLICAS = 2


@dataclass
class SecuredGroup:
    name: str
    topic: str
    out: str
    cg: dict[str, Any]


def secured_group(secured_kafka: SecuredKafka, kubeconfig: Path, namespace: str,
                  listener: str, replicas: int, connect_url: str) -> SecuredGroup:
    """A warm-handoff group on `listener` whose topics only its principal may use."""
    creds = secured_kafka.credentials(listener)
    name = unique(listener.lower())
    topic = secured_kafka.make_topic(unique("sec-in"), 4)
    out = secured_kafka.make_topic(unique("sec-out"), 4)
    if creds.principal is not None:
        secured_kafka.grant(creds.principal, topic, name)
        secured_kafka.grant_write(creds.principal, out)
    apply_secrets(kubeconfig, namespace, creds)
    cg = groups.consumer_group(name, creds.bootstrap, topic, replicas=replicas, out_topic=out,
                               strategy="WarmHandoff", connect_url=connect_url)
    cg["spec"]["kafka"]["security"] = creds.security
    return SecuredGroup(name, topic, out, cg)


def roll(secured_kafka: SecuredKafka, kubeconfig: Path, namespace: str,
         groups_: list[SecuredGroup]) -> None:
    """Start the groups under load, roll them all at once, and check each: every member
    restarted warm, no new generation, nothing lost."""
    plaintext = secured_kafka.broker.bootstrap
    producers = [SteadyProducer(plaintext, g.topic, rate=50).start() for g in groups_]
    try:
        groups.start_all(kubeconfig, namespace, [g.cg for g in groups_])
        time.sleep(3)
        counters = {g.name: groups.counters_settled(kubeconfig, namespace, g.name)
                    for g in groups_}
        generations = {g.name: secured_kafka.broker.generations(g.name) for g in groups_}
        assert all(generations.values()), f"a group never stabilized: {generations}"
        for g in groups_:
            trigger(kubeconfig, namespace, g.name, env_patch("1"))
        done = {g.name: groups.wait_rollout(kubeconfig, namespace, g.name, 600)
                for g in groups_}
        time.sleep(2)
    finally:
        produced = [p.stop() for p in producers]
    for g, producer, count in zip(groups_, producers, produced, strict=True):
        obj = done[g.name]
        rollout = obj["status"]["rollout"]
        replicas = g.cg["spec"]["replicas"]
        assert sorted(rollout["membersRestarted"]) == list(range(replicas)), g.name
        assert {h["mode"] for h in rollout["handoffs"]} == {"warm"}, rollout["handoffs"]
        assert rollout["rebalancesDuringRollout"] == 0, g.name
        assert secured_kafka.broker.generations(g.name) == generations[g.name], (
            secured_kafka.broker.rebalance_lines(g.name))
        assert not groups.rebalances_seen(counters[g.name], obj["status"]), obj["status"]
        assert not producer.failed, producer.failed
        groups.wait_caught_up(plaintext, g.name, [g.topic])
        missing = set(producer.produced) - set(read_all(plaintext, g.out))
        assert count > 0 and not missing, f"{g.name}: {len(missing)} of {count} records lost"


def test_a_group_on_each_secured_listener_rolls_without_rebalance_and_loses_nothing(
        secured_kafka: SecuredKafka, kubeconfig: Path, operator: OperatorProcess,
        namespace: str, spark_connect: ConnectServer) -> None:
    """SCRAM with two members (a rollout that hands over from one member to the next), mutual
    TLS, OAUTHBEARER and TLS with one each, rolled at the same time: one environment and one
    wait for all four listeners. Their members' Spark goes through the session's Connect
    server, so five members and their standbys load the machine less than a three-member
    local-Spark rollout."""
    roll(secured_kafka, kubeconfig, namespace,
         [secured_group(secured_kafka, kubeconfig, namespace, listener, replicas,
                        spark_connect.url)
          for listener, replicas in (("SCRAM", REPLICAS), ("MTLS", 1), ("OAUTH", 1),
                                     ("SSL", 1))])
