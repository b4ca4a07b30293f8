"""A broker with ACLs whose principal may not read the brokers' configuration.

Seen on main: without DescribeConfigs on the cluster, `observe.broker_bounds` failed, so nothing
reconciled and no member pod was created. Now the operator falls back to Kafka's default bounds
and says so (`BrokerBoundsKnown=False`, reason `DescribeConfigsDenied`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from staticfleet import observe
from staticfleet_dev.kafka import KafkaBroker, KafkaSettings, start_kafka
from staticfleet_dev.procs import ServerFailed, stop
from tests.conftest import unique
from tests.integration.test_operator import (
    PLACEHOLDER,
    apply_cg,
    consumer_group,
    events,
    has_condition,
    member_pods,
    wait_for,
    with_sasl_plain,
)
from tests.support.kube import kubectl
from tests.support.operator import OperatorProcess

pytestmark = pytest.mark.integration

USERS = {"admin": "admin-secret", "app": "app-secret"}


def sasl(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user]}


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A second broker, SASL/PLAIN with ACLs: `app` may describe the cluster, its topics and
    groups, and read them, but not DescribeConfigs on the cluster."""
    try:
        broker = start_kafka(tmp_path_factory.mktemp("acl-kafka"),
                             KafkaSettings.with_acls(USERS))
    except ServerFailed as exc:
        pytest.fail(f"the ACL broker did not start: {exc}", pytrace=False)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **sasl("admin")})
    # confluent-kafka names the Cluster resource BROKER ("kafka-cluster").
    grants = [(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)]
    grants += [(kind, "*", op) for kind in (ResourceType.TOPIC, ResourceType.GROUP)
               for op in (AclOperation.DESCRIBE, AclOperation.READ)]
    bindings = [AclBinding(kind, name, ResourcePatternType.LITERAL, "User:app", "*", op,
                           AclPermissionType.ALLOW) for kind, name, op in grants]
    for fut in admin.create_acls(bindings, request_timeout=30).values():
        fut.result(timeout=30)
    try:
        yield broker
    finally:
        stop(broker.record, grace=10)


def make_topic(broker: KafkaBroker, partitions: int = 3) -> str:
    name = unique("acl")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **sasl("admin")})
    for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        fut.result(timeout=30)
    return name


def test_bounds_the_principal_may_not_read_are_a_clear_refusal(acl_broker: KafkaBroker) -> None:
    pool = observe.AdminPool()
    try:
        app = pool.get({"bootstrap.servers": acl_broker.bootstrap, **sasl("app")})
        with pytest.raises(observe.BoundsDenied, match=acl_broker.bootstrap):
            observe.broker_bounds(app)
        topic = make_topic(acl_broker)
        assert observe.partition_counts(app, [topic]) == {topic: 3}, "the rest is allowed"
        admin = pool.get({"bootstrap.servers": acl_broker.bootstrap, **sasl("admin")})
        assert observe.broker_bounds(admin)["group.min.session.timeout.ms"] == 1000
    finally:
        pool.close()


def test_a_group_reconciles_on_default_bounds_and_says_why(
        acl_broker: KafkaBroker, operator: OperatorProcess, namespace: str,
        kubeconfig: Path) -> None:
    topic, name, secret = make_topic(acl_broker), unique("acl"), unique("creds")
    kubectl(kubeconfig, "-n", namespace, "create", "secret", "generic", secret,
            "--from-literal=username=app", f"--from-literal=password={USERS['app']}")
    cg = consumer_group(name, bootstrap=acl_broker.bootstrap, topics=[topic], replicas=2,
                        command=PLACEHOLDER)
    with_sasl_plain(cg, secret)
    apply_cg(kubeconfig, namespace, cg)

    cond = wait_for("BrokerBoundsKnown=False DescribeConfigsDenied", lambda: has_condition(
        kubeconfig, namespace, name, "BrokerBoundsKnown", "False", "DescribeConfigsDenied"),
        timeout=90)
    assert acl_broker.bootstrap in cond["message"]
    assert "DescribeConfigs on the Cluster" in cond["message"]
    pods = wait_for("two member pods", lambda: len(
        member_pods(kubeconfig, namespace, name)) == 2 or None, timeout=60)
    assert pods
    assert wait_for("a DescribeConfigsDenied Event", lambda: events(
        kubeconfig, namespace, name, "DescribeConfigsDenied"))[0]["type"] == "Warning"
    degraded = has_condition(kubeconfig, namespace, name, "Degraded", "True", "KafkaUnreachable")
    assert degraded is None, "unreadable bounds are not an unreachable cluster"
