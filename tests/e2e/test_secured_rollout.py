"""A rolling restart on a secured listener (SASL_SSL with SCRAM-SHA-512): the operator reads
the group with the credentials of the ConsumerGroup's Secrets, the member pods run on the local
node with them, and the warm rollout costs no rebalance and loses no record.

It shares the session's environment (API server, local node, operator) and the session's
secured broker (`secured_kafka`); the group's topics are its own and granted to its principal
alone, so the members and the operator are seen to authenticate as that principal.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from staticfleet_dev.stream import SteadyProducer, committed_lag, read_all
from tests.conftest import unique
from tests.e2e.test_rollout import env_patch, rollout_complete, start_group, trigger
from tests.integration.test_kafka_security import apply_secrets
from tests.support import groups
from tests.support.operator import OperatorProcess
from tests.support.secured_kafka import SecuredKafka

pytestmark = pytest.mark.e2e

REPLICAS = 2


def test_a_scram_group_rolls_without_rebalance_and_loses_nothing(
        secured_kafka: SecuredKafka, kubeconfig: Path, operator: OperatorProcess,
        namespace: str) -> None:
    creds = secured_kafka.credentials("SCRAM")
    name = unique("scram")
    topic = secured_kafka.make_topic(unique("sec-in"), 4)
    out = secured_kafka.make_topic(unique("sec-out"), 4)
    secured_kafka.grant("User:member", topic, name)
    secured_kafka.grant_write("User:member", out)
    apply_secrets(kubeconfig, namespace, creds)
    cg = groups.consumer_group(name, creds.bootstrap, topic, replicas=REPLICAS, out_topic=out,
                               strategy="WarmHandoff")
    cg["spec"]["kafka"]["security"] = creds.security
    plaintext = secured_kafka.broker.bootstrap
    producer = SteadyProducer(plaintext, topic, rate=50).start()
    try:
        start_group(kubeconfig, namespace, cg)
        time.sleep(3)
        generations = secured_kafka.broker.generations(name)
        assert generations, "the group never stabilized"
        trigger(kubeconfig, namespace, name, env_patch("1"))
        obj = groups.wait_status(kubeconfig, namespace, name, rollout_complete, 600,
                                 "rolled out")
        time.sleep(2)
    finally:
        produced = producer.stop()
    rollout = obj["status"]["rollout"]
    assert sorted(rollout["membersRestarted"]) == list(range(REPLICAS))
    assert {h["mode"] for h in rollout["handoffs"]} == {"warm"}, rollout["handoffs"]
    assert rollout["rebalancesDuringRollout"] == 0
    assert secured_kafka.broker.generations(name) == generations, (
        secured_kafka.broker.rebalance_lines(name))
    assert all(v == 0 for v in obj["status"]["memberRebalanceCounters"].values()), obj["status"]
    assert not producer.failed, producer.failed
    deadline = time.monotonic() + 180
    while committed_lag(plaintext, name, topic) > 0:
        assert time.monotonic() < deadline, "the group did not catch up within 180 s"
        time.sleep(1)
    missing = set(producer.produced) - set(read_all(plaintext, out))
    assert produced > 0 and not missing, f"{len(missing)} of {produced} records lost"
