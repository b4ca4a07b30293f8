"""TLS and SASL against a real broker: on each secured listener of the session's secured broker
(SSL, mutual TLS, SASL_SSL/SCRAM-SHA-512, SASL_SSL/OAUTHBEARER) a real member process joins its
group and processes records, and the operator's own reads (topic partitions, the group, the
broker's timeout bounds, the lag; the cluster's reads of every group together, through
kafka-python's client) work; credentials the listener refuses give the ConsumerGroup
a Degraded condition that names the mechanism and the Secret, never the secret.

What connects is what the product makes: the ConsumerGroup body is parsed by the operator's
model, the member's config.json and environment come from its builders (the environment's Secret
references resolved the way the kubelet resolves them), and the operator's admin configuration
from `kafkaclient.admin_conf`. OAUTHBEARER runs the product's own mode, OIDC client credentials:
librdkafka fetches its token from the session's token endpoint (`staticfleet_dev.oauth`, which
stands in for an identity provider and issues unsigned tokens), and the broker checks it with
Kafka's unsecured JWS validator. A real identity provider and signed tokens (JWKS) are not
exercised here.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from consumer_runtime.config import parse_config
from consumer_runtime.membership import connection_settings
from consumer_runtime.staticleave import StaticLeave
from staticfleet.decisions import builders, kafkaclient
from staticfleet.decisions.names import instance_id
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.observe import kafkaadmin, kafkareads, lagreads
from staticfleet.observe.clusterreads import ClusterReader, Registration
from staticfleet_dev.kafka import SECURED_LISTENERS
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from staticfleet_dev.testkit.secured import Credentials, SecuredKafka
from tests.integration.runtime_spark_helpers import produce, running
from tests.integration.support import (
    PLACEHOLDER,
    RECORDS,
    TIMEOUTS,
    apply_secrets,
    group_body,
    has_condition,
    member_secret_env,
    through,
)
from tests.support import unique

pytestmark = pytest.mark.integration

PARTITIONS = 2
MECHANISMS = {"SSL": "SSL", "MTLS": "SSL with a client certificate (mutual TLS)",
              "SCRAM": "SASL_SSL/SCRAM-SHA-512", "OAUTH": "SASL_SSL/OAUTHBEARER"}


def admin_for(pool: kafkaadmin.AdminPool, spec: ConsumerGroupSpec,
              creds: Credentials) -> kafkaadmin.Admin:
    return pool.get(kafkaclient.admin_conf(
        spec.kafka, lambda ref: creds.secret_value(ref.name, ref.key)))


@pytest.mark.parametrize("listener", SECURED_LISTENERS)
def test_a_member_processes_and_the_operator_reads_over_each_listener(
        secured_kafka: SecuredKafka, listener: str, tmp_path: Path,
        spark_connect: ConnectServer) -> None:
    """The member's Spark runs through the session's Spark Connect server: the subject is its
    Kafka client's security, and a member is then a Python process that starts in seconds."""
    creds = secured_kafka.credentials(listener)
    topic = secured_kafka.make_topic(unique(f"sec-{listener.lower()}"), PARTITIONS)
    group_id = unique("g")
    if creds.principal is not None:
        secured_kafka.grant(creds.principal, topic, group_id)
    produce(secured_kafka.broker.bootstrap, topic,
            [(b"k%d" % i, b"v%d" % i, i % PARTITIONS) for i in range(RECORDS)])
    spec = ConsumerGroupSpec.from_body(group_body("secured", creds, topic, group_id))
    config = builders.runtime_config(spec, TIMEOUTS)
    config["processing"]["spark"] = through(spark_connect)
    instance = instance_id(spec, 0)
    pool = kafkaadmin.AdminPool()
    tokens_before = secured_kafka.tokens.issued.get("member", 0)
    try:
        with running(config, tmp_path / "member.log", instance,
                     member_secret_env(spec, creds)) as member:
            member.wait_status(lambda s: s["recordsProcessed"] >= RECORDS, 180,
                               f"through its {RECORDS} records over {listener}")
            admin = admin_for(pool, spec, creds)
            assert kafkareads.topics_seen(admin, [topic]).counts == {topic: PARTITIONS}
            group = wait_for("the member stable in the group", lambda: (
                g := kafkareads.describe_group(admin, group_id)).state == "Stable" and g,
                timeout=30)
            assert [m.instance_id for m in group.members] == [instance]
            assert group.members[0].partitions == ((topic, 0), (topic, 1))
            assert kafkareads.broker_bounds(admin)["group.min.session.timeout.ms"] == 1000
            lag = wait_for("the offsets committed to the end", lambda: lagreads.LagReads(
                interval_s=0.0).lag(admin, group_id, {topic: PARTITIONS}).by_partition == {
                    (topic, 0): 0, (topic, 1): 0}, timeout=30)
            assert lag
            # The cluster's reads of every group together (observe.clusterreads, kafka-python's
            # client) connect with the same settings and credentials, as the same principal.
            reader = ClusterReader(admin.conf)
            try:
                reader.register(Registration(group_id, "classic", (topic,)), 0.0)
                reader.read(0.0)
                read = reader.group(group_id)
            finally:
                reader.close()
            assert read.described is not None and read.described.outcome.view == group
            assert read.committed is not None and dict(read.committed.offsets) == {
                (topic, 0): RECORDS // PARTITIONS, (topic, 1): RECORDS // PARTITIONS}
            assert read.topics is not None and read.topics.counts == {topic: PARTITIONS}
            # A KIP-848 member's own static leave (consumer_runtime/staticleave.py, kafka-python's
            # client) goes over the same listener with the member's settings and credentials.
            # The coordinator answers a leave of an instance id this (classic) group never had
            # with GROUP_ID_NOT_FOUND: "gone". So the client authenticated, was authorised on
            # the group (else GROUP_AUTHORIZATION_FAILED: "unconfirmed") and was understood.
            runtime = parse_config(config, member_secret_env(spec, creds))
            leave = StaticLeave(connection_settings(runtime), group_id, "secured-leave")
            try:
                answer = leave.confirm("no-such-member", "no-such-instance",
                                       time.monotonic() + 20)
            finally:
                leave.close()
            assert answer.outcome == "gone" and answer.tries == 1, answer
        if listener == "OAUTH":  # the member, its leave's client and the operator: own tokens
            assert secured_kafka.tokens.issued["member"] >= tokens_before + 3
        if creds.principal is not None:
            # The topic is granted to `member` alone: `other`, authenticated by the same
            # listener, is refused it, so the broker took the principal from these credentials.
            other = secured_kafka.credentials(listener, "other")
            refused = admin_for(pool, ConsumerGroupSpec.from_body(
                group_body("secured", other, topic, group_id)), other)
            with pytest.raises(kafkaadmin.KafkaUnavailable, match="TOPIC_AUTHORIZATION_FAILED"):
                kafkareads.topics_seen(refused, [topic])
    finally:
        pool.close()


def test_refused_credentials_are_degraded_naming_mechanism_and_secret(
        secured_kafka: SecuredKafka, operator: OperatorProcess, namespace: str,
        kubeconfig: Path) -> None:
    """One ConsumerGroup per listener (their Secrets have names of their own), all reconciled
    at once by the session's operator."""
    refused = {}
    for listener in SECURED_LISTENERS:
        creds = secured_kafka.credentials(listener, wrong=True)
        topic = secured_kafka.make_topic(unique(f"bad-{listener.lower()}"), 1)
        apply_secrets(kubeconfig, namespace, creds)
        name = f"bad-{listener.lower()}"
        groups.apply(kubeconfig, namespace,
                     group_body(name, creds, topic, unique("g"), PLACEHOLDER))
        refused[listener] = (name, creds)
    started = time.monotonic()
    for listener, (name, creds) in refused.items():
        cond = wait_for(f"{listener}: Degraded=True KafkaAuthenticationFailed", lambda n=name: (
            has_condition(kubeconfig, namespace, n, "Degraded", "True",
                          "KafkaAuthenticationFailed")),
            timeout=max(10.0, 90 - (time.monotonic() - started)))
        message = cond["message"]
        print(f"{listener}: {message}")
        assert f"Kafka refused the {MECHANISMS[listener]} connection" in message, message
        assert creds.bootstrap in message, message
        for secret in creds.secrets:
            assert f"Secret {secret} " in message, message
        shown = message + " ".join(e.get("message", "") for e in groups.events(
            kubeconfig, namespace, name, "KafkaAuthenticationFailed"))
        for data in creds.secrets.values():
            for key in SECRET_KEYS & data.keys():
                assert data[key] not in shown, f"{listener}: the {key} is shown"
    log = operator.log_tail(5000)
    for _, creds in refused.values():
        for data in creds.secrets.values():
            for key in SECRET_KEYS & data.keys():
                assert data[key] not in log, f"the operator logged a {key}"


SECRET_KEYS = {"password", "client-secret", "tls.key"}
