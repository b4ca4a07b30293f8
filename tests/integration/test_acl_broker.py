"""A broker with ACLs (allow.everyone.if.no.acl.found=false): what each principal needs.

Seen on main: without DescribeConfigs on the cluster, `observe.kafkareads.broker_bounds` failed, so
nothing reconciled and no member pod was created. Now the operator falls back to Kafka's default
bounds and says so (`BrokerBoundsKnown=False`, reason `DescribeConfigsDenied`). With
`spec.kafka.adminSecurity` the operator reads with a principal of its own (`ops`, granted
`OPERATOR_RIGHTS`), and the members' principal needs nothing but Read on its group and topic.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from staticfleet.decisions import builders, kafkaclient
from staticfleet.decisions.names import instance_id
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.observe import kafkaadmin, kafkareads, lagreads
from staticfleet_dev.kafka import KafkaBroker, KafkaSettings, start_kafka
from staticfleet_dev.procs import ServerFailed, stop
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from tests.integration.runtime_spark_helpers import running
from tests.integration.support import (
    PLACEHOLDER,
    RECORDS,
    TIMEOUTS,
    consumer_group,
    has_condition,
    member_pods,
    with_sasl_plain,
)
from tests.support import unique

pytestmark = pytest.mark.integration

USERS = {"admin": "admin-secret", "app": "app-secret", "ops": "ops-secret",
         "member": "member-secret"}
OPERATOR_RIGHTS = [(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
                   (ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE_CONFIGS),
                   (ResourceType.TOPIC, "*", AclOperation.DESCRIBE),
                   (ResourceType.GROUP, "*", AclOperation.DESCRIBE)]
"""What docs/security.md says the operator's own principal needs (plus AlterConfigs on a
KIP-848 group, for its per-group timeouts)."""


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
    # confluent-kafka names the Cluster resource BROKER ("kafka-cluster").
    grants = [(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)]
    grants += [(kind, "*", op) for kind in (ResourceType.TOPIC, ResourceType.GROUP)
               for op in (AclOperation.DESCRIBE, AclOperation.READ)]
    allow(broker, "app", grants)
    allow(broker, "ops", OPERATOR_RIGHTS)
    try:
        yield broker
    finally:
        stop(broker.record, grace=10)


def allow(broker: KafkaBroker, user: str,
          grants: list[tuple[ResourceType, str, AclOperation]]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **sasl("admin")})
    bindings = [AclBinding(kind, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op,
                           AclPermissionType.ALLOW) for kind, name, op in grants]
    for fut in admin.create_acls(bindings, request_timeout=30).values():
        fut.result(timeout=30)


def make_topic(broker: KafkaBroker, partitions: int = 3) -> str:
    name = unique("acl")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **sasl("admin")})
    for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        fut.result(timeout=30)
    # Created is not yet in every metadata answer (KRaft publishes it a moment later; CI once
    # read it missing right after): the claims here are about ACLs, so wait until it is.
    wait_for(f"topic {name} in the metadata", lambda: (
        (t := admin.list_topics(topic=name, timeout=10).topics.get(name)) is not None
        and t.error is None and len(t.partitions) == partitions), timeout=30, interval=0.2)
    return name


def test_bounds_the_principal_may_not_read_are_a_clear_refusal(acl_broker: KafkaBroker) -> None:
    pool = kafkaadmin.AdminPool()
    try:
        app = pool.get({"bootstrap.servers": acl_broker.bootstrap, **sasl("app")})
        with pytest.raises(kafkareads.BoundsDenied, match=acl_broker.bootstrap):
            kafkareads.broker_bounds(app)
        topic = make_topic(acl_broker)
        assert kafkareads.topics_seen(app, [topic]).counts == {topic: 3}, "the rest is allowed"
        admin = pool.get({"bootstrap.servers": acl_broker.bootstrap, **sasl("admin")})
        assert kafkareads.broker_bounds(admin)["group.min.session.timeout.ms"] == 1000
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
    groups.apply(kubeconfig, namespace, cg)

    cond = wait_for("BrokerBoundsKnown=False DescribeConfigsDenied", lambda: has_condition(
        kubeconfig, namespace, name, "BrokerBoundsKnown", "False", "DescribeConfigsDenied"),
        timeout=90)
    assert acl_broker.bootstrap in cond["message"]
    assert "DescribeConfigs on the Cluster" in cond["message"]
    pods = wait_for("two member pods", lambda: len(
        member_pods(kubeconfig, namespace, name)) == 2 or None, timeout=60)
    assert pods
    assert wait_for("a DescribeConfigsDenied Event", lambda: groups.events(
        kubeconfig, namespace, name, "DescribeConfigsDenied"))[0]["type"] == "Warning"
    degraded = has_condition(kubeconfig, namespace, name, "Degraded", "True", "KafkaUnreachable")
    assert degraded is None, "unreadable bounds are not an unreachable cluster"


LOGINS = {"member-login": "member", "ops-login": "ops"}
"""Secret name -> the user whose name and password it holds."""


def secret_value(name: str, key: str) -> str:
    user = LOGINS[name]
    return {"username": user, "password": USERS[user]}[key]


def with_operator_login(cg: dict[str, Any]) -> dict[str, Any]:
    """Members log in as `member` (Secret member-login), the operator as `ops` (ops-login)."""
    with_sasl_plain(cg, "member-login")
    cg["spec"]["kafka"]["adminSecurity"] = {"protocol": "SASL_PLAINTEXT", "sasl": {
        "mechanism": "PLAIN",
        "usernameSecretRef": {"name": "ops-login", "key": "username"},
        "passwordSecretRef": {"name": "ops-login", "key": "password"}}}
    return cg


def test_with_adminsecurity_members_need_only_their_group_and_topic(
        acl_broker: KafkaBroker, tmp_path: Path, spark_connect: ConnectServer) -> None:
    """A real member, whose principal may read its topic and group and nothing else, processes
    its records; the operator's reads, made with the `ops` principal as `admin_conf` builds them
    from adminSecurity, all work, while the member's principal could not read the bounds. (Its
    Spark runs through the session's Connect server: the subject is its Kafka principal.)"""
    topic, group_id = make_topic(acl_broker, 2), unique("g")
    allow(acl_broker, "member", [(ResourceType.TOPIC, topic, AclOperation.READ),
                                 (ResourceType.GROUP, group_id, AclOperation.READ)])
    producer = Producer({"bootstrap.servers": acl_broker.bootstrap, **sasl("admin")})
    for i in range(RECORDS):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    cg = with_operator_login(consumer_group("adm", bootstrap=acl_broker.bootstrap,
                                            topics=[topic], replicas=1,
                                            connect_url=spark_connect.url))
    cg["spec"]["kafka"]["groupId"] = group_id
    spec = ConsumerGroupSpec.from_body(cg)
    pod = builders.build_member_pod(spec, 0, builders.member_spec_view(spec, TIMEOUTS))
    env = {var["name"]: secret_value(ref["name"], ref["key"])
           for var in pod["spec"]["containers"][0]["env"]
           if (ref := (var.get("valueFrom") or {}).get("secretKeyRef"))}
    assert env["STATICFLEET_SASL_USERNAME"] == "member", "the member logs in as itself"
    instance = instance_id(spec, 0)
    pool = kafkaadmin.AdminPool()
    try:
        with running(builders.runtime_config(spec, TIMEOUTS), tmp_path / "member.log",
                     instance, env) as member:
            member.wait_status(lambda st: st["recordsProcessed"] >= RECORDS, 180,
                               f"through its {RECORDS} records as User:member")
            ops = pool.get(kafkaclient.admin_conf(spec.kafka, lambda r: secret_value(
                r.name, r.key)))
            assert kafkareads.broker_bounds(ops)["group.min.session.timeout.ms"] == 1000
            assert kafkareads.topics_seen(ops, [topic]).counts == {topic: 2}
            group = wait_for("the member stable in the group", lambda: (
                g := kafkareads.describe_group(ops, group_id)).state == "Stable" and g,
                timeout=30)
            assert [m.instance_id for m in group.members] == [instance]
            assert wait_for("its offsets committed to the end", lambda: lagreads.LagReads(
                interval_s=0.0).lag(ops, group_id, {topic: 2}).by_partition == {
                    (topic, 0): 0, (topic, 1): 0}, timeout=30)
        as_member = pool.get({"bootstrap.servers": acl_broker.bootstrap, **sasl("member")})
        with pytest.raises(kafkareads.BoundsDenied):
            kafkareads.broker_bounds(as_member)
    finally:
        pool.close()


def test_a_group_with_adminsecurity_reads_the_bounds_with_the_operators_principal(
        acl_broker: KafkaBroker, operator: OperatorProcess, namespace: str,
        kubeconfig: Path) -> None:
    topic, name = make_topic(acl_broker), unique("adm")
    for secret, user in LOGINS.items():
        kubectl(kubeconfig, "-n", namespace, "create", "secret", "generic", secret,
                f"--from-literal=username={user}", f"--from-literal=password={USERS[user]}")
    cg = with_operator_login(consumer_group(name, bootstrap=acl_broker.bootstrap,
                                            topics=[topic], replicas=1, command=PLACEHOLDER))
    groups.apply(kubeconfig, namespace, cg)
    cond = wait_for("BrokerBoundsKnown=True", lambda: has_condition(
        kubeconfig, namespace, name, "BrokerBoundsKnown", "True"), timeout=90)
    assert cond["reason"] == "ReadFromBroker", cond
    assert has_condition(kubeconfig, namespace, name, "Degraded", "True") is None
    kubectl(kubeconfig, "-n", namespace, "delete", "secret", "ops-login")
    missing = wait_for("Degraded SecretMissing naming adminSecurity", lambda: has_condition(
        kubeconfig, namespace, name, "Degraded", "True", "SecretMissing"), timeout=120)
    assert "ops-login" in missing["message"], missing
    assert "spec.kafka.adminSecurity" in missing["message"], missing
