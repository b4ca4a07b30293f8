"""A member's reads of its group (groupview.GroupView, through kafka-python's client: the member
makes no librdkafka admin request, librdkafka#4605) against the real broker, for a live classic
group and a live KIP-848 (group.protocol consumer) group.

Two static members join; the view shows each one's instance id, member id and partitions as the
consumers themselves and librdkafka's own describe (the reference, made here in the test
process) see them. Then the two moments a member asks: a drained member (closed the static way)
is not "taken" until a replacement joins with its instance id, and then is; a member leaving for
good shows no partitions once the broker moved them. A view of either protocol reads either
group (a classic member can sit in a consumer group), a group no API knows is unknown, and a
broker that does not answer is None within the timeout, never an exception.

On each secured listener (SSL, mutual TLS with the key given as PEM text, SCRAM, OAUTHBEARER)
the view reads the group with the member's own settings, as the product makes them.

On the three-broker cluster, the group's coordinator is killed while the view asks as a leaving
or drained member does: every answer is either right or None ("unknown"), never a wrong one (no
partitions, or the instance id taken), and the new coordinator answers within seconds. The
reads run in the test's own process: a librdkafka abort (librdkafka#4605) would end the run.

The consumers are plain confluent-kafka consumers polled by the test: the subject is the
broker's description, not the runtime around it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from consumer_runtime.config import RuntimeConfig, parse_config
from consumer_runtime.groupview import GroupView
from consumer_runtime.membership import NO_TOPIC, consumer_settings
from staticfleet.decisions import builders
from staticfleet.decisions.names import instance_id
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet_dev.kafka import SECURED_LISTENERS, KafkaBroker, KafkaCluster
from staticfleet_dev.procs import free_port
from staticfleet_dev.testkit.consumers import PolledMember
from staticfleet_dev.testkit.poll import wait_for
from staticfleet_dev.testkit.secured import SecuredKafka
from tests.integration.runtime_spark_helpers import runtime_config
from tests.integration.support import (
    TIMEOUTS,
    group_body,
    kip848,
    member_secret_env,
    set_group_timeouts,
)
from tests.support import unique

pytestmark = pytest.mark.integration
ON_THE_SESSION_BROKER = pytest.mark.usefixtures("dump_broker_log_on_failure")
"""The tests on the session's broker (the others need no broker, or start their own)."""
PARTITIONS = 4
SESSION_MS = 20_000  # a drained member stays registered well past the test's steps
ASK_S = 5.0
Partitions = set[tuple[str, int]]


def view_config(bootstrap: str, group: str, topic: str, protocol: str,
                instance: str) -> RuntimeConfig:
    raw = runtime_config(bootstrap, group, topic, sink={"type": "null"}, session_ms=SESSION_MS)
    if protocol == "consumer":
        raw = kip848(raw)
    return parse_config(raw, {"STATICFLEET_GROUP_INSTANCE_ID": instance})


class Members:
    """The test's consumers, polled together; closed at the end."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str) -> None:
        self.bootstrap, self.group, self.topic, self.protocol = bootstrap, group, topic, protocol
        self.consumers: dict[str, Consumer] = {}

    def join(self, instance: str) -> Consumer:
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                "group.instance.id": instance, "enable.auto.commit": False,
                                "auto.offset.reset": "earliest"}
        if self.protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 1000,
                         "partition.assignment.strategy": "range"})
        consumer = Consumer(conf)
        consumer.subscribe([self.topic])
        self.consumers[instance] = consumer
        return consumer

    def serve(self, seconds: float = 0.0) -> None:
        """Poll every open consumer (their callbacks, their heartbeats' acknowledgements)."""
        end = time.monotonic() + seconds
        while True:
            for consumer in self.consumers.values():
                consumer.poll(0.05)
            if time.monotonic() >= end:
                return

    def until(self, what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.serve(0.2)
            if found := check():
                return found
        raise AssertionError(f"not within {timeout:.0f} s: {what}")

    def owned(self, instance: str) -> Partitions:
        return {(tp.topic, tp.partition) for tp in self.consumers[instance].assignment()}

    def close(self, instance: str) -> str:
        """Close the static way (classic: no LeaveGroup; consumer: the epoch -2 leave); return
        the member id it had."""
        consumer = self.consumers.pop(instance)
        member_id = consumer.memberid() or ""
        consumer.close()
        return member_id

    def close_all(self) -> None:
        for instance in list(self.consumers):
            self.close(instance)


@pytest.fixture
def group_of(kafka: KafkaBroker, kafka_admin: AdminClient,
             make_topic: Callable[..., str]) -> Iterator[Callable[[str], Members]]:
    made: list[Members] = []

    def make(protocol: str) -> Members:
        group = unique("reads")
        if protocol == "consumer":
            set_group_timeouts(kafka_admin, group, SESSION_MS)
        members = Members(kafka.bootstrap, group, make_topic("reads", PARTITIONS), protocol)
        made.append(members)
        return members

    yield make
    for members in made:
        members.close_all()


def described(admin: AdminClient, group: str) -> dict[str | None, tuple[str, Partitions]]:
    """librdkafka's own description (the reference), in the test process: instance id ->
    (member id, partitions)."""
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    return {m.group_instance_id: (m.member_id, {(tp.topic, tp.partition)
                                                for tp in m.assignment.topic_partitions})
            for m in desc.members}


def views(members: Members, instance: str) -> list[GroupView]:
    """The member's own view (its protocol's API first) and the other protocol's (the other API
    first, then its own): both must read the group."""
    other = "classic" if members.protocol == "consumer" else "consumer"
    return [GroupView(view_config(members.bootstrap, members.group, members.topic, protocol,
                                  instance)) for protocol in (members.protocol, other)]


FIND_COORDINATOR, DESCRIBE_GROUPS, CONSUMER_GROUP_DESCRIBE = 10, 15, 69


def recording(view: GroupView) -> list[int]:
    """The API keys of the requests `view` sends from now on."""
    sent: list[int] = []
    coordinator = view.coordinator
    assert coordinator is not None
    send = coordinator.send

    def record(node: int, request: Any, deadline: float) -> Any:
        sent.append(request.API_KEY)
        return send(node, request, deadline)

    coordinator.send = record  # type: ignore[method-assign]
    return sent


@ON_THE_SESSION_BROKER
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_the_members_view_shows_who_holds_what_as_the_broker_does(
        protocol: str, group_of: Callable[[str], Members], kafka_admin: AdminClient) -> None:
    members = group_of(protocol)
    group, topic = members.group, members.topic
    first, second = f"{group}-0", f"{group}-1"
    members.join(first)
    members.join(second)
    everything = {(topic, p) for p in range(PARTITIONS)}
    members.until("both members hold half of the partitions, as the broker says", lambda: (
        members.owned(first) and members.owned(second)
        and members.owned(first) | members.owned(second) == everything
        and {i: parts for i, (_, parts) in described(kafka_admin, group).items()} == {
            first: members.owned(first), second: members.owned(second)}))
    reference = described(kafka_admin, group)
    ids = {i: members.consumers[i].memberid() for i in (first, second)}
    assert {i: member_id for i, (member_id, _) in reference.items()} == ids

    own, other = views(members, first)
    try:
        # Each group answers the API of its own type; the other API says it does not know it
        # (DescribeGroups: Dead; ConsumerGroupDescribe: GROUP_ID_NOT_FOUND), and the view asks on.
        own_api, other_api = ((DESCRIBE_GROUPS, CONSUMER_GROUP_DESCRIBE) if protocol == "classic"
                              else (CONSUMER_GROUP_DESCRIBE, DESCRIBE_GROUPS))
        for view, apis in ((own, [FIND_COORDINATOR, own_api]),
                           (other, [FIND_COORDINATOR, other_api, own_api])):
            sent = recording(view)
            listed = view.members(ASK_S)
            assert listed is not None
            assert {m.instance_id: (m.member_id, m.partitions) for m in listed} == reference
            assert sent == apis
            for instance in (first, second):
                assert view.held(instance, ids[instance], ASK_S) == members.owned(instance)
                assert view.taken_by_another(instance, ids[instance], ASK_S) is False
                assert view.taken_by_another(instance, "an-earlier-process", ASK_S) is True
            assert view.held(f"{group}-9", "nobody", ASK_S) == set()
            assert view.taken_by_another(f"{group}-9", "nobody", ASK_S) is False

        # Drained: the first member closes the static way. It stays registered under its
        # member id (classic: until its session times out; consumer: at epoch -2), so its id
        # is not taken, and the broker keeps its partitions for it.
        drained_id = members.close(first)
        assert drained_id == ids[first]
        members.serve(1.0)
        for view in (own, other):
            assert view.taken_by_another(first, drained_id, ASK_S) is False
        # Its replacement joins with the same instance id: now it is taken, and the partitions
        # the view shows for the instance id are the replacement's.
        replacement = members.join(first)
        members.until("the replacement in the group", lambda: (
            replacement.memberid() and members.owned(first)
            and own.taken_by_another(first, drained_id, ASK_S)))
        assert replacement.memberid() != drained_id
        for view in (own, other):
            assert view.taken_by_another(first, drained_id, ASK_S) is True
            assert view.taken_by_another(first, replacement.memberid() or "", ASK_S) is False
        members.until("the replacement's partitions in the view", lambda: (
            own.held(first, replacement.memberid() or "", ASK_S) == members.owned(first)
            == described(kafka_admin, group)[first][1] != set()))

        # Leaving for good (membership.leave_subscription): the view shows the leaver's
        # partitions until the broker moved them, then none, and the other member gets them.
        leaver = members.consumers[second]
        if protocol == "consumer":
            leaver.subscribe([NO_TOPIC])
        else:
            leaver.unsubscribe()
        began = time.monotonic()
        members.until("the leaver shows no partitions", lambda: own.held(
            second, ids[second], ASK_S) == set(), timeout=30)
        released_s = time.monotonic() - began
        members.until("the remaining member owns every partition",
                      lambda: members.owned(first) == everything, timeout=30)
        assert other.held(second, ids[second], ASK_S) == set()
        print(f"{protocol}: the view showed the leaver without partitions {released_s:.2f} s "
              "after its leave began")
    finally:
        own.close()
        other.close()


@ON_THE_SESSION_BROKER
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_no_api_knows_is_unknown(protocol: str, kafka: KafkaBroker) -> None:
    """DescribeGroups says Dead and ConsumerGroupDescribe GROUP_ID_NOT_FOUND, as a coordinator
    that has just taken a group over says of it until it loaded it (the cluster test below met
    that): no answer, rather than "nobody holds anything"."""
    group = unique("none")
    view = GroupView(view_config(kafka.bootstrap, group, "t", protocol, f"{group}-0"))
    try:
        sent = recording(view)
        assert view.members(ASK_S) is None
        assert view.held(f"{group}-0", "m", ASK_S) is None
        assert view.taken_by_another(f"{group}-0", "m", ASK_S) is None
        assert sorted(sent[:3]) == [FIND_COORDINATOR, DESCRIBE_GROUPS, CONSUMER_GROUP_DESCRIBE]
    finally:
        view.close()


def test_a_broker_that_does_not_answer_is_unknown_within_the_timeout() -> None:
    view = GroupView(view_config(f"127.0.0.1:{free_port()}", unique("g"), "t", "classic", "x-0"))
    try:
        began = time.monotonic()
        assert view.held("x-0", "m", timeout=1.0) is None
        assert view.taken_by_another("x-0", "m", timeout=1.0) is None
        assert time.monotonic() - began < 2 * 1.0 + 1.0
    finally:
        view.close()


@pytest.mark.parametrize("listener", SECURED_LISTENERS)
def test_the_view_reads_over_each_secured_listener_with_the_members_settings(
        listener: str, secured_kafka: SecuredKafka) -> None:
    """The member's config.json and Secret-backed environment from the operator's builders,
    its consumer made with its own settings (`consumer_settings`), its view with its connection
    settings: the view authenticates as the member (the group is granted to its principal
    alone) and reads what the consumer holds. On MTLS the client key comes as PEM text, which
    the view's client reads from memory (staticleave.tls_context)."""
    creds = secured_kafka.credentials(listener)
    group = unique("reads-sec")
    topic = secured_kafka.make_topic(unique("reads-sec"), 2)
    if creds.principal is not None:
        secured_kafka.grant(creds.principal, topic, group)
    spec = ConsumerGroupSpec.from_body(group_body("secured", creds, topic, group))
    instance = instance_id(spec, 0)
    config = parse_config(builders.runtime_config(spec, TIMEOUTS), {
        **member_secret_env(spec, creds), "STATICFLEET_GROUP_INSTANCE_ID": instance})
    consumer = Consumer(consumer_settings(config))
    consumer.subscribe([topic])
    view = GroupView(config)
    try:
        def read() -> tuple[str, Partitions] | None:
            consumer.poll(0.2)
            member_id = consumer.memberid() or ""
            owned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
            held = view.held(instance, member_id, ASK_S) if member_id and owned else None
            return (member_id, owned) if held == owned else None

        member_id, owned = wait_for(f"the view over {listener} shows what the member holds",
                                    read, 60)
        assert owned == {(topic, 0), (topic, 1)}
        assert view.taken_by_another(instance, member_id, ASK_S) is False
        assert view.taken_by_another(instance, "an-earlier-process", ASK_S) is True
    finally:
        view.close()
        consumer.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_the_view_is_right_or_unknown_while_its_coordinator_dies(
        protocol: str, kafka_cluster: KafkaCluster) -> None:
    topic = kafka_cluster.make_topic(unique("reads-cl"), 3)
    group = unique("reads-cl")
    instance = f"{group}-0"
    if protocol == "consumer":
        set_group_timeouts(kafka_cluster.admin(), group, 40000)
    member = PolledMember(kafka_cluster.bootstrap, group, topic, protocol, instance, 30000)
    view = GroupView(view_config(kafka_cluster.bootstrap, group, topic, protocol, instance))
    everything = {(topic, p) for p in range(3)}
    coordinator = None
    try:
        member_id = wait_for("the member in the group, holding every partition, in the view",
                             lambda: (mid := member.member_id) and view.held(
                                 instance, mid, 2.0) == everything and mid, 60)
        coordinator = kafka_cluster.coordinator(group)
        assert coordinator is not None
        kafka_cluster.kill(coordinator)
        killed = time.monotonic()
        answers: list[tuple[Partitions | None, bool | None]] = []
        while True:  # as a leaving member (every 0.2 s) and a drained one ask
            held = view.held(instance, member_id, timeout=2.0)
            taken = view.taken_by_another(instance, member_id, timeout=2.0)
            answers.append((held, taken))
            assert held in (None, everything), f"a wrong answer after the kill: {answers}"
            assert taken in (None, False), f"a wrong answer after the kill: {answers}"
            if held == everything and taken is False:
                break
            assert time.monotonic() - killed < 60, f"no answer from a new coordinator: {answers}"
            time.sleep(0.2)
        back_s = time.monotonic() - killed
        moved = kafka_cluster.coordinator(group)
        assert moved is not None and moved != coordinator
        unknown = sum(1 for held, taken in answers if held is None or taken is None)
        print(f"\n{protocol}: coordinator {coordinator} killed; the view answered right again "
              f"from {moved} after {back_s:.1f} s ({len(answers)} rounds, {unknown} with an "
              "unknown answer, none wrong)")
    finally:
        view.close()
        member.close()
        if coordinator is not None:
            kafka_cluster.start(coordinator)
