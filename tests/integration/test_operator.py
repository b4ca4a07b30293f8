"""The operator as a real process against the real API server, the real broker and the local
node: the sample ConsumerGroup, scaling, member recovery, idle members, refusals that become
status (unreachable broker, missing topic, missing Secret, invalid timeouts) and deletion.

Members are real `python -m consumer_runtime` processes (confluent-kafka static members with
PySpark through the session's Spark Connect server) wherever the test needs a group on the broker;
where the test is about the operator refusing to act, the template runs a placeholder process so
no Spark starts.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.procs import free_port
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import create_namespace, get_json, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for, wait_unchanged
from staticfleet_dev.testkit.probe import group_state
from tests.integration.support import (
    GROUP_LABEL,
    PLACEHOLDER,
    assigned_everywhere,
    broker_assignment,
    condition,
    consumer_group,
    has_condition,
    member_ids,
    member_pods,
    patch_cg,
    ready_and_stable,
    summary,
    with_sasl_plain,
)
from tests.support import unique

pytestmark = pytest.mark.integration

CHILD_KINDS = ("configmap", "service", "poddisruptionbudget")


# --- helpers -------------------------------------------------------------------------------------


def pod_env(pod: dict[str, Any]) -> dict[str, Any]:
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "member")
    return {e["name"]: e for e in container.get("env") or []}


def children(kubeconfig: Path, namespace: str, name: str) -> list[str]:
    """Every pod, ConfigMap, Service and PodDisruptionBudget of the ConsumerGroup (kind/name)."""
    found = []
    for kind in ("pods", *CHILD_KINDS):
        items = get_json(kubeconfig, "-n", namespace, kind, "-l", f"{GROUP_LABEL}={name}")["items"]
        found += [f"{kind}/{i['metadata']['name']}" for i in items]
    return found


@pytest.fixture(autouse=True)
def operator_stays_up(operator: OperatorProcess) -> Iterator[None]:
    """The session's operator: after each test it is still the same live process (no crash,
    no restart)."""
    pid = operator.proc.pid if operator.proc else None
    yield
    assert operator.proc is not None and operator.proc.poll() is None, (
        f"the operator exited ({operator.proc.returncode if operator.proc else None}):\n"
        f"{operator.log_tail(60)}")
    assert operator.proc.pid == pid, "the operator was restarted during the test"


# --- the sample ----------------------------------------------------------------------------------


def test_sample_reconciles_recovers_a_member_and_is_garbage_collected(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        kafka_admin: AdminClient, make_topic: Callable[..., str], tmp_path: Path,
        spark_connect: ConnectServer) -> None:
    """The sample's members run their Spark through the session's Connect server: the subject
    is the operator's handling of them (local-Spark members under the operator are the demo's
    e2e)."""
    topic = make_topic("orders", 6)
    dlq = make_topic("orders-dlq", 1)
    name = unique("orders")
    cg = consumer_group(name, bootstrap=kafka.bootstrap, topics=[topic],
                        sink={"type": "parquet", "path": str(tmp_path / "counts")},
                        dead_letter_topic=dlq, connect_url=spark_connect.url)
    groups.apply(kubeconfig, namespace, cg)

    # Member pods with their identities, owned by the ConsumerGroup.
    pods = wait_for("3 member pods", lambda: (
        p := member_pods(kubeconfig, namespace, name)) and len(p) == 3 and p, timeout=60)
    owner = groups.get(kubeconfig, namespace, name)
    uid = owner["metadata"]["uid"]
    assert sorted(pods) == [f"{name}-{i}" for i in range(3)]
    for i in range(3):
        pod = pods[f"{name}-{i}"]
        env = pod_env(pod)
        assert env["STATICFLEET_GROUP_INSTANCE_ID"]["value"] == f"{name}-{i}"
        # The pod carries its revision's config; the ConfigMap shows the same, for people.
        config_map = get_json(kubeconfig, "-n", namespace, "configmap", f"{name}-config")
        assert json.loads(env["STATICFLEET_CONFIG"]["value"]) == json.loads(
            config_map["data"]["config.json"])
        assert pod["metadata"]["annotations"]["staticfleet.io/instance-id"] == f"{name}-{i}"
        assert pod["metadata"]["labels"]["staticfleet.io/ordinal"] == str(i)
        refs = pod["metadata"]["ownerReferences"]
        assert [(r["kind"], r["name"], r["uid"], r["controller"]) for r in refs] == [
            ("ConsumerGroup", name, uid, True)]

    # The other children, also owned by it.
    config_map = get_json(kubeconfig, "-n", namespace, "configmap", f"{name}-config")
    config = json.loads(config_map["data"]["config.json"])
    assert config["groupId"] == name and config["topics"] == [topic]
    assert config["bootstrapServers"] == kafka.bootstrap
    assert config["processing"]["spark"]["mode"] == "connect"
    assert config["processing"]["spark"]["connectUrl"] == spark_connect.url
    assert config["processing"]["deadLetterTopic"] == dlq
    service = get_json(kubeconfig, "-n", namespace, "service", f"{name}-members")
    assert service["spec"]["clusterIP"] == "None"
    pdb = get_json(kubeconfig, "-n", namespace, "poddisruptionbudget", f"{name}-members")
    for child in (config_map, service, pdb):
        assert [r["uid"] for r in child["metadata"]["ownerReferences"]] == [uid], child["kind"]
    assert pdb["spec"]["selector"]["matchLabels"][GROUP_LABEL] == name

    # Ready: three members, each holding partitions the broker assigned.
    ready = wait_for("Ready=True with 3 members", lambda: ready_and_stable(
        kubeconfig, namespace, name, 3), timeout=240, interval=1,
        describe=lambda: summary(kubeconfig, namespace, name))
    st = ready["status"]
    assert st["replicas"] == 3 and st["partitions"] == 6 and st["idleMembers"] == 0
    assert condition(ready, "Degraded")["status"] == "False"
    assert condition(ready, "IdleMembers")["status"] == "False"
    assert st["observedGeneration"] == ready["metadata"]["generation"]
    instance_ids = [f"{name}-{i}" for i in range(3)]
    assignment = wait_for("every member assigned on the broker", lambda: assigned_everywhere(
        kafka_admin, name, instance_ids, 6), timeout=60)
    by_instance = {m["instanceId"]: m for m in st["members"]}
    assert sorted(by_instance) == instance_ids
    for iid, parts in assignment.items():
        status_parts = wait_for(f"status of {iid} to match the broker", lambda iid=iid: sorted(
            next(m for m in groups.get(kubeconfig, namespace, name)["status"]["members"]
                 if m["instanceId"] == iid)["assignedPartitions"]), timeout=30)
        assert status_parts == sorted(f"{t}-{p}" for t, p in parts)
        assert by_instance[iid]["ready"] is True and by_instance[iid]["pod"] == iid

    # Printer columns.
    table = kubectl(kubeconfig, "-n", namespace, "get", "cg", name).stdout.splitlines()
    header, row = table[0].split(), table[1].split()
    assert header[:4] == ["NAME", "DESIRED", "READY", "STATE"], table
    assert row[:4] == [name, "3", "3", "Stable"], table

    # A deleted member comes back under the same name and instance id, and rejoins.
    victim = pods[f"{name}-1"]
    old_member_id = member_ids(kafka_admin, name)[f"{name}-1"]
    kubectl(kubeconfig, "-n", namespace, "delete", "pod", victim["metadata"]["name"],
            "--wait=false")
    back = wait_for("member 1 recreated", lambda: (
        p := member_pods(kubeconfig, namespace, name).get(f"{name}-1"))
        and p["metadata"]["uid"] != victim["metadata"]["uid"] and p, timeout=90)
    assert pod_env(back)["STATICFLEET_GROUP_INSTANCE_ID"]["value"] == f"{name}-1"
    assert back["metadata"]["ownerReferences"][0]["uid"] == uid
    wait_for("Ready again with the new member 1", lambda: (
        cg := ready_and_stable(kubeconfig, namespace, name, 3)) and any(
            m["instanceId"] == f"{name}-1" and m["ready"]
            and m["pod"] == back["metadata"]["name"] for m in cg["status"]["members"]),
        timeout=240, interval=1,
        describe=lambda: summary(kubeconfig, namespace, name))
    wait_for("member 1 holding partitions on the broker again", lambda: assigned_everywhere(
        kafka_admin, name, instance_ids, 6), timeout=90)
    # A new process joined under the old instance id (the broker gave it a new member id).
    assert member_ids(kafka_admin, name)[f"{name}-1"] != old_member_id
    survivors = member_pods(kubeconfig, namespace, name)
    for i in (0, 2):
        assert survivors[f"{name}-{i}"]["metadata"]["uid"] == pods[f"{name}-{i}"]["metadata"][
            "uid"], f"member {i} was replaced although only member 1 was deleted"

    # Deleting the ConsumerGroup: the garbage collector removes every child.
    assert len(children(kubeconfig, namespace, name)) == 6
    kubectl(kubeconfig, "-n", namespace, "delete", "consumergroup", name, "--wait=false")
    wait_for("every child garbage-collected", lambda: not children(kubeconfig, namespace, name),
             timeout=120, interval=1)
    # ... and nothing comes back (no pass recreates a member for a deleted owner).
    time.sleep(6)
    assert children(kubeconfig, namespace, name) == []


# --- scaling -------------------------------------------------------------------------------------


def test_scaling_keeps_surviving_identities(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        kafka_admin: AdminClient, make_topic: Callable[..., str],
        spark_connect: ConnectServer) -> None:
    topic = make_topic("scale", 6)
    name = unique("scale")
    cg = consumer_group(name, bootstrap=kafka.bootstrap, topics=[topic], replicas=3,
                        connect_url=spark_connect.url)
    # Removed static members send no LeaveGroup: the broker drops them after the session
    # timeout. 10 s instead of the automatic 45 s keeps the test short.
    cg["spec"]["membership"]["timeouts"] = {"sessionTimeoutMs": 10000}
    groups.apply(kubeconfig, namespace, cg)
    wait_for("Ready with 3 members", lambda: ready_and_stable(kubeconfig, namespace, name, 3),
             timeout=240, interval=1,
        describe=lambda: summary(kubeconfig, namespace, name))
    at3 = {n: p["metadata"]["uid"] for n, p in member_pods(kubeconfig, namespace, name).items()}
    assert sorted(at3) == [f"{name}-{i}" for i in range(3)]

    # 3 -> 5: two new ordinals; the three members keep their pods.
    patch_cg(kubeconfig, namespace, name, {"spec": {"replicas": 5}})
    wait_for("Ready with 5 members", lambda: ready_and_stable(kubeconfig, namespace, name, 5),
             timeout=300, interval=1,
        describe=lambda: summary(kubeconfig, namespace, name))
    at5 = {n: p["metadata"]["uid"] for n, p in member_pods(kubeconfig, namespace, name).items()}
    assert sorted(at5) == [f"{name}-{i}" for i in range(5)]
    for pod, uid in at3.items():
        assert at5[pod] == uid, f"{pod} was replaced while scaling up"
    wait_for("5 members assigned on the broker", lambda: assigned_everywhere(
        kafka_admin, name, [f"{name}-{i}" for i in range(5)], 6), timeout=90)
    assert groups.events(kubeconfig, namespace, name, "ScaledUp")

    # 5 -> 2: ordinals 4, 3 and 2 go (highest first); 0 and 1 keep their pods.
    patch_cg(kubeconfig, namespace, name, {"spec": {"replicas": 2}})
    wait_for("only members 0 and 1 left", lambda: sorted(member_pods(
        kubeconfig, namespace, name, include_terminating=True)) == [f"{name}-0", f"{name}-1"],
        timeout=90, interval=1)
    at2 = {n: p["metadata"]["uid"] for n, p in member_pods(kubeconfig, namespace, name).items()}
    assert at2 == {n: at3[n] for n in (f"{name}-0", f"{name}-1")}
    # Asked to leave highest first, in one pass; each pod goes in the pass that sees its member
    # out of the group, so the removals may take more than one ScaledDown (CI saw [4], then
    # [2, 3]).
    leaving = [e["message"] for e in groups.events(kubeconfig, namespace, name, "MemberLeaving")]
    assert any("asking members [4, 3, 2] to leave" in m for m in leaving), leaving
    scaled_down = [e["message"] for e in groups.events(kubeconfig, namespace, name, "ScaledDown")]
    removed = sorted(int(o) for m in scaled_down
                     for listed in re.findall(r"removed members \[([\d, ]+)\]", m)
                     for o in listed.split(","))
    assert removed == [2, 3, 4], scaled_down
    ready = wait_for("Ready with 2 members", lambda: ready_and_stable(
        kubeconfig, namespace, name, 2), timeout=120, interval=1,
        describe=lambda: summary(kubeconfig, namespace, name))
    assert [m["ordinal"] for m in ready["status"]["members"]] == [0, 1]
    wait_for("2 members holding all 6 partitions", lambda: assigned_everywhere(
        kafka_admin, name, [f"{name}-0", f"{name}-1"], 6), timeout=90)
    assert {n: p["metadata"]["uid"] for n, p in member_pods(
        kubeconfig, namespace, name).items()} == at2


# --- idle members --------------------------------------------------------------------------------


def says_idle(message: str) -> bool:
    """The message names the member count (3) and the partition count (2 partitions)."""
    return "3" in message and "2 partitions" in message and "member" in message


def test_more_members_than_partitions(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        kafka_admin: AdminClient, make_topic: Callable[..., str],
        spark_connect: ConnectServer) -> None:
    topic = make_topic("idle", 2)
    name = unique("idle")
    groups.apply(kubeconfig, namespace,
             consumer_group(name, bootstrap=kafka.bootstrap, topics=[topic], replicas=3,
                            connect_url=spark_connect.url))
    cond = wait_for("IdleMembers=True", lambda: has_condition(
        kubeconfig, namespace, name, "IdleMembers", "True", "MoreMembersThanPartitions"))
    assert says_idle(cond["message"]), cond["message"]
    warnings = wait_for("a MoreMembersThanPartitions Event", lambda: groups.events(
        kubeconfig, namespace, name, "MoreMembersThanPartitions"), timeout=30)
    assert warnings[0]["type"] == "Warning"
    assert warnings[0]["message"] == cond["message"]
    cg = groups.get(kubeconfig, namespace, name)
    assert cg["status"]["idleMembers"] == 1 and cg["status"]["partitions"] == 2

    # All three members join; two hold a partition each, one holds none.
    wait_for("3 members in the group, 2 with a partition", lambda: (
        a := broker_assignment(kafka_admin, name)) and len(a) == 3
        and sorted(len(v) for v in a.values()) == [0, 1, 1]
        and group_state(kafka_admin, name) == "STABLE", timeout=240, interval=1)
    ready = wait_for("Ready with 3 members", lambda: ready_and_stable(
        kubeconfig, namespace, name, 3), timeout=120, interval=1,
        describe=lambda: summary(kubeconfig, namespace, name))
    assert sorted(len(m["assignedPartitions"]) for m in ready["status"]["members"]) == [0, 1, 1]
    assert condition(ready, "IdleMembers")["status"] == "True"
    # One Event for the condition turning True, not one per pass.
    assert len(groups.events(kubeconfig, namespace, name, "MoreMembersThanPartitions")) == 1


# --- errors become status ------------------------------------------------------------------------


def test_unreachable_broker_degrades_without_children_and_the_operator_carries_on(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        make_topic: Callable[..., str]) -> None:
    closed = free_port()  # nothing listens there
    name = unique("unreach")
    groups.apply(kubeconfig, namespace, consumer_group(
        name, bootstrap=f"127.0.0.1:{closed}", topics=["orders"], command=PLACEHOLDER))
    cond = wait_for("Degraded=True KafkaUnreachable", lambda: has_condition(
        kubeconfig, namespace, name, "Degraded", "True", "KafkaUnreachable"), timeout=90)
    assert "Kafka unreachable" in cond["message"]
    assert f"127.0.0.1:{closed}" in cond["message"], "the message names the address that failed"
    warnings = wait_for("a KafkaUnreachable Event", lambda: groups.events(
        kubeconfig, namespace, name, "KafkaUnreachable"), timeout=30)
    assert warnings[0]["type"] == "Warning"
    first = groups.get(kubeconfig, namespace, name)["status"]
    assert first["consecutiveFailures"] >= 1

    # Meanwhile the operator reconciles another group in the same namespace.
    topic = make_topic("other", 1)
    other = unique("other")
    groups.apply(kubeconfig, namespace, consumer_group(
        other, bootstrap=kafka.bootstrap, topics=[topic], replicas=1, command=PLACEHOLDER))
    wait_for("the other group's member pod", lambda: member_pods(kubeconfig, namespace, other),
             timeout=60)
    wait_for("the other group's status", lambda: (
        groups.get(kubeconfig, namespace, other).get("status") or {}).get("lastReconciled"))
    assert condition(groups.get(kubeconfig, namespace, other), "Degraded")["status"] == "False"

    # It keeps retrying the unreachable one (with backoff), and never creates its children.
    wait_for("a retry of the unreachable group", lambda: (
        groups.get(kubeconfig, namespace, name)["status"]["consecutiveFailures"]
        > first["consecutiveFailures"]), timeout=60, interval=1)
    assert children(kubeconfig, namespace, name) == []
    assert condition(groups.get(kubeconfig, namespace, name), "Degraded")["reason"] == (
        "KafkaUnreachable")
    assert 'reason="KafkaUnreachable"' in operator.metrics()


def test_a_long_list_of_silent_addresses_is_reported_counted_not_quoted(
        operator: OperatorProcess, namespace: str, kubeconfig: Path) -> None:
    """The longest bootstrap list the CRD admits (16 addresses), none answering: 16 loopback
    listeners that never accept (a backlog of one, filled by the test), so each connection
    attempt waits its timeout. The status says how many did not answer and names three (main
    quoted every address's error, after trying them one after another, 2 s each)."""
    import socket

    servers, fillers = [], []
    try:
        for _ in range(16):
            server = socket.socket()
            server.bind(("127.0.0.1", 0))
            server.listen(0)
            fillers.append(socket.create_connection(server.getsockname(), 1.0))
            servers.append(server)
        addresses = [f"127.0.0.1:{s.getsockname()[1]}" for s in servers]
        name = unique("silent")
        groups.apply(kubeconfig, namespace, consumer_group(
            name, bootstrap=",".join(addresses), topics=["orders"], command=PLACEHOLDER))
        cond = wait_for("Degraded=True KafkaUnreachable", lambda: has_condition(
            kubeconfig, namespace, name, "Degraded", "True", "KafkaUnreachable"), timeout=120)
        message = cond["message"]
        print(f"the silent group's message ({len(message)} characters): {message}")
        assert "none of its 16 addresses answered within 2 s (timed out: 16;" in message
        assert sum(a in message for a in addresses) == 3, message
        assert "and 13 more" in message and len(message) < 400, message
        assert children(kubeconfig, namespace, name) == []
    finally:
        for sock in (*fillers, *servers):
            sock.close()


def test_missing_secret_then_missing_topic_then_recovery(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        kafka_admin: AdminClient, spark_connect: ConnectServer) -> None:
    topic = unique("later")  # created further down
    name = unique("recover")
    cg = consumer_group(name, bootstrap=kafka.bootstrap, topics=[topic], replicas=1,
                        connect_url=spark_connect.url)
    secret = unique("kafka-creds")
    with_sasl_plain(cg, secret)
    groups.apply(kubeconfig, namespace, cg)

    cond = wait_for("Degraded=True SecretMissing", lambda: has_condition(
        kubeconfig, namespace, name, "Degraded", "True", "SecretMissing"))
    assert f"Secret {namespace}/{secret} does not exist" in cond["message"]
    assert wait_for("a SecretMissing Event", lambda: groups.events(
        kubeconfig, namespace, name, "SecretMissing"))[0]["type"] == "Warning"
    assert children(kubeconfig, namespace, name) == []

    # Fix the security (the test broker speaks PLAINTEXT): now the topic is what is missing.
    patch_cg(kubeconfig, namespace, name,
             {"spec": {"kafka": {"security": {"protocol": "PLAINTEXT", "sasl": None}}}})
    cond = wait_for("Degraded=True TopicMissing", lambda: has_condition(
        kubeconfig, namespace, name, "Degraded", "True", "TopicMissing"))
    assert topic in cond["message"]
    assert topic in wait_for("a TopicMissing Event", lambda: groups.events(
        kubeconfig, namespace, name, "TopicMissing"))[0]["message"]
    assert children(kubeconfig, namespace, name) == []

    # Create the topic: the group recovers to Ready on its own.
    for fut in kafka_admin.create_topics([NewTopic(topic, 2, 1)]).values():
        fut.result(timeout=30)
    ready = wait_for("Ready=True after the topic exists", lambda: ready_and_stable(
        kubeconfig, namespace, name, 1), timeout=240, interval=1,
        describe=lambda: summary(kubeconfig, namespace, name))
    assert condition(ready, "Degraded")["status"] == "False"
    assert ready["status"]["consecutiveFailures"] == 0
    assert sorted(ready["status"]["members"][0]["assignedPartitions"]) == [
        f"{topic}-0", f"{topic}-1"]
    assert sorted(c.split("/")[0] for c in children(kubeconfig, namespace, name)) == [
        "configmap", "poddisruptionbudget", "pods", "service"]


def test_session_timeout_below_the_broker_minimum_is_refused(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        make_topic: Callable[..., str]) -> None:
    """The CRD accepts sessionTimeoutMs 500; only the broker (group.min.session.timeout.ms
    1000 on the test broker) says it is too low, so the operator refuses it as rule S1."""
    topic = make_topic("timeouts", 1)
    name = unique("timeouts")
    cg = consumer_group(name, bootstrap=kafka.bootstrap, topics=[topic], replicas=1,
                        command=PLACEHOLDER)
    cg["spec"]["membership"]["timeouts"] = {"sessionTimeoutMs": 500}
    groups.apply(kubeconfig, namespace, cg)  # accepted by the API server
    cond = wait_for("Degraded=True InvalidTimeouts", lambda: has_condition(
        kubeconfig, namespace, name, "Degraded", "True", "InvalidTimeouts"))
    assert cond["message"].startswith("S1: ")
    assert "sessionTimeoutMs 500 is outside the broker bounds [1000, " in cond["message"]
    warning = wait_for("an InvalidTimeouts Event", lambda: groups.events(
        kubeconfig, namespace, name, "InvalidTimeouts"))[0]
    assert warning["type"] == "Warning" and warning["message"] == cond["message"]
    assert children(kubeconfig, namespace, name) == []

    # A valid value clears it.
    patch_cg(kubeconfig, namespace, name,
             {"spec": {"membership": {"timeouts": {"sessionTimeoutMs": 6000}}}})
    wait_for("Degraded=False", lambda: has_condition(
        kubeconfig, namespace, name, "Degraded", "False"))
    cg = groups.get(kubeconfig, namespace, name)
    assert cg["status"]["timeouts"]["sessionTimeoutMs"] == 6000
    assert cg["status"]["timeouts"]["source"]["sessionTimeoutMs"] == "explicit"
    wait_for("its member pod", lambda: member_pods(kubeconfig, namespace, name))


def test_two_groups_with_one_kafka_group_id_the_second_is_refused(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        make_topic: Callable[..., str]) -> None:
    """`groupId` defaults to metadata.name: two `orders` in two namespaces are one Kafka group,
    whose members would fence each other (FENCED_INSTANCE_ID) and restart forever."""
    topic = make_topic("orders", 2)
    name = unique("orders")
    groups.apply(kubeconfig, namespace, consumer_group(
        name, bootstrap=kafka.bootstrap, topics=[topic], replicas=2, command=PLACEHOLDER))
    wait_for("the first group's pods", lambda: len(member_pods(kubeconfig, namespace, name)) == 2)
    first = member_pods(kubeconfig, namespace, name)
    time.sleep(1.1)  # creationTimestamps have second precision
    other_ns = unique("other-team")
    create_namespace(kubeconfig, other_ns)
    try:
        groups.apply(kubeconfig, other_ns, consumer_group(
            name, bootstrap=kafka.bootstrap, topics=[topic], replicas=2, command=PLACEHOLDER))
        cond = wait_for("Degraded=True GroupIdInUse", lambda: has_condition(
            kubeconfig, other_ns, name, "Degraded", "True", "GroupIdInUse"), timeout=60)
        assert f"{namespace}/{name}" in cond["message"] and "spec.kafka.groupId" in cond["message"]
        assert wait_for("a GroupIdInUse Event", lambda: groups.events(
            kubeconfig, other_ns, name, "GroupIdInUse"), timeout=30)[0]["type"] == "Warning"
        time.sleep(5)
        assert member_pods(kubeconfig, other_ns, name, include_terminating=True) == {}
        assert {n: p["metadata"]["uid"] for n, p in member_pods(
            kubeconfig, namespace, name).items()} == {
            n: p["metadata"]["uid"] for n, p in first.items()}, "the first group was touched"
        # groupId cannot change on an existing object: made again with a group id of its own,
        # it runs.
        kubectl(kubeconfig, "-n", other_ns, "delete", "consumergroup", name, "--wait=true",
                timeout=120)
        own = consumer_group(name, bootstrap=kafka.bootstrap, topics=[topic], replicas=2,
                             command=PLACEHOLDER)
        own["spec"]["kafka"]["groupId"] = f"{name}-billing"
        groups.apply(kubeconfig, other_ns, own)
        wait_for("the second group's pods", lambda: len(
            member_pods(kubeconfig, other_ns, name)) == 2, timeout=60)
        wait_for("Degraded=False", lambda: has_condition(
            kubeconfig, other_ns, name, "Degraded", "False"), timeout=60)
    finally:
        kubectl(kubeconfig, "delete", "namespace", other_ns, "--wait=false")


def test_a_member_stuck_terminating_is_reported_and_never_doubled(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        make_topic: Callable[..., str]) -> None:
    """A finalizer keeps member 1's pod Terminating after its process stopped, as a node that is
    gone would: the operator says so and starts no second process with that instance id."""
    topic = make_topic("stuck", 2)
    name = unique("stuck")
    groups.apply(kubeconfig, namespace, consumer_group(
        name, bootstrap=kafka.bootstrap, topics=[topic], replicas=2, command=PLACEHOLDER))
    wait_for("2 pods", lambda: len(member_pods(kubeconfig, namespace, name)) == 2)
    pod = f"{name}-1"
    kubectl(kubeconfig, "-n", namespace, "patch", "pod", pod, "--type=merge", "-p",
            '{"metadata": {"finalizers": ["staticfleet.test/hold"]}}')
    kubectl(kubeconfig, "-n", namespace, "delete", "pod", pod, "--wait=false",
            "--grace-period=1")
    try:
        cond = wait_for("Degraded=True MemberStuckTerminating", lambda: has_condition(
            kubeconfig, namespace, name, "Degraded", "True", "MemberStuckTerminating"),
            timeout=150)
        assert pod in cond["message"] and "--force" in cond["message"]
        pods = member_pods(kubeconfig, namespace, name, include_terminating=True)
        assert sorted(pods) == [f"{name}-0", pod]
        assert pods[pod]["metadata"].get("deletionTimestamp"), "no second member 1"
    finally:
        kubectl(kubeconfig, "-n", namespace, "patch", "pod", pod, "--type=merge", "-p",
                '{"metadata": {"finalizers": null}}', check=False)
    wait_for("member 1 back", lambda: pod in member_pods(kubeconfig, namespace, name), timeout=60)
    wait_for("Degraded=False", lambda: has_condition(
        kubeconfig, namespace, name, "Degraded", "False"), timeout=60)


def member_process(namespace: str, pod: str) -> int | None:
    """The pid of the process the local node runs for `pod` (by the environment it was given),
    None when there is none."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"POD_NAME={pod}".encode() in env and f"POD_NAMESPACE={namespace}".encode() in env:
            return int(entry.name)
    return None


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_an_evicted_member_is_replaced_with_its_instance_id_in_a_restricted_namespace(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        make_topic: Callable[..., str]) -> None:
    """Member 1's pod is marked Failed/Evicted through pods/status, as the kubelet reports a
    node-pressure eviction (the local node then stops its process, as a kubelet does): the
    operator deletes it and creates member 1 again under the same name and group.instance.id,
    with a Warning Event quoting the eviction.

    The namespace enforces the `restricted` Pod Security Standard, so the same group also shows
    that the operator's member pods, the replacement included, are admitted there. Placeholder
    members (no Spark): the claims are the pods', not the broker's."""
    kubectl(kubeconfig, "label", "namespace", namespace,
            "pod-security.kubernetes.io/enforce=restricted")
    topic = make_topic("evict", 2)
    name = unique("evict")
    groups.apply(kubeconfig, namespace, consumer_group(
        name, bootstrap=kafka.bootstrap, topics=[topic], replicas=2, command=PLACEHOLDER))
    pods = wait_for("2 ready member pods, admitted", lambda: (
        p := member_pods(kubeconfig, namespace, name)) and len(p) == 2 and all(
            any(c["type"] == "Ready" and c["status"] == "True"
                for c in (q.get("status") or {}).get("conditions") or []) for q in p.values())
        and p, timeout=60, describe=lambda: kubectl(
            kubeconfig, "-n", namespace, "get", "events", check=False).stdout[-3000:])
    victim = pods[f"{name}-1"]
    pid = member_process(namespace, f"{name}-1")
    assert pid is not None, "the local node runs no process for member 1"
    eviction = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: "
                "20Mi. Container member was using 900Mi, request is 0, has larger consumption "
                "of memory.")
    kubectl(kubeconfig, "-n", namespace, "patch", "pod", f"{name}-1", "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": {
                "phase": "Failed", "reason": "Evicted", "message": eviction}}))

    back = wait_for("member 1 created again", lambda: (
        p := member_pods(kubeconfig, namespace, name).get(f"{name}-1"))
        and p["metadata"]["uid"] != victim["metadata"]["uid"] and p, timeout=60,
        describe=lambda: summary(kubeconfig, namespace, name))
    assert pod_env(back)["STATICFLEET_GROUP_INSTANCE_ID"]["value"] == f"{name}-1"
    assert back["metadata"]["annotations"]["staticfleet.io/instance-id"] == f"{name}-1"
    assert (back.get("status") or {}).get("phase") != "Failed"
    assert back["spec"]["securityContext"]["runAsNonRoot"] is True
    (warning,) = wait_for("the RecreatingFailedPod Event", lambda: groups.events(
        kubeconfig, namespace, name, "RecreatingFailedPod"), timeout=30)
    assert warning["type"] == "Warning"
    assert f"Evicted: {eviction}" in warning["message"], warning["message"]
    assert f"same instance id {name}-1" in warning["message"], warning["message"]
    assert not alive(pid), "the evicted member's process still runs"
    survivors = member_pods(kubeconfig, namespace, name)
    assert survivors[f"{name}-0"]["metadata"]["uid"] == pods[f"{name}-0"]["metadata"]["uid"]
    wait_for("member 1 ready again", lambda: any(
        m["ordinal"] == 1 and m["ready"] and m["phase"] == "Running"
        for m in (groups.get(kubeconfig, namespace, name).get("status") or {}).get("members")
        or []),
        timeout=60, describe=lambda: summary(kubeconfig, namespace, name))


@pytest.mark.parametrize(("change", "quoted", "field"), [
    ({"processing": {"transform": "nosuch_module_sf:fn"}}, "nosuch_module_sf",
     "spec.processing.transform"),
    ({"kafka": {"clientProperties": {"fetch.max.bites": "1"}}}, "fetch.max.bites",
     "spec.kafka.clientProperties"),
], ids=["transform not importable", "unknown client property"])
def test_a_member_that_cannot_start_says_why_in_the_consumer_group(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        make_topic: Callable[..., str], change: dict[str, Any], quoted: str,
        field: str) -> None:
    """The API server admits both (it cannot know); the real member runtime refuses them at
    start. Its own words reach the ConsumerGroup through the termination message."""
    topic = make_topic("refuse", 1)
    name = unique("refuse")
    cg = consumer_group(name, bootstrap=kafka.bootstrap, topics=[topic], replicas=1)
    for key, value in change.items():
        cg["spec"][key] = {**cg["spec"].get(key, {}), **value}
    groups.apply(kubeconfig, namespace, cg)
    cond = wait_for("Degraded=True MemberFailing", lambda: has_condition(
        kubeconfig, namespace, name, "Degraded", "True", "MemberFailing"), timeout=120,
        describe=lambda: member_pods(kubeconfig, namespace, name))
    assert quoted in cond["message"] and f"fix {field}" in cond["message"], cond
    warnings = wait_for("a MemberFailing Event", lambda: groups.events(
        kubeconfig, namespace, name, "MemberFailing"), timeout=30)
    assert quoted in warnings[0]["message"]


def test_a_group_at_rest_is_not_written(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        make_topic: Callable[..., str]) -> None:
    """Passes keep running at rest (every 5 s here); a status they rebuild unchanged is not
    written. A field the API server prunes or rewrites (one the schema lacks, a null) would
    make every pass a write: API load that grows with the number of groups."""
    topic = make_topic("rest", 2)
    name = unique("rest")
    groups.apply(kubeconfig, namespace, consumer_group(name, bootstrap=kafka.bootstrap,
                                                   topics=[topic], replicas=2,
                                                   command=PLACEHOLDER))
    wait_for("2 members listed", lambda: len(
        (groups.get(kubeconfig, namespace, name).get("status") or {}).get("members") or []) == 2,
        timeout=120)
    rest_s = 25.0  # five passes

    def moved(first: dict[str, Any], last: dict[str, Any]) -> str:
        changed = {k: (first["status"].get(k), v) for k, v in last["status"].items()
                   if first["status"].get(k) != v}
        return f"status fields that moved last: {changed}"

    # The object read every second; a write (the group still forming) starts the count again.
    wait_unchanged(f"{rest_s:.0f} s without a write",
                   lambda: groups.get(kubeconfig, namespace, name), rest_s, timeout=150,
                   key=lambda obj: obj["metadata"]["resourceVersion"], describe=moved)
