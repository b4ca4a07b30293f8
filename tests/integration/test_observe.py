"""What the operator reads from and writes to the real broker."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from staticfleet.decisions.snapshot import GroupView
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from staticfleet.observe import kafkaadmin, kafkareads, lagreads
from staticfleet_dev.kafka import TEST_SETTINGS, KafkaBroker
from staticfleet_dev.testkit.poll import wait_for
from staticfleet_dev.testkit.probe import ProbeMember
from tests.support import unique

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def admin(kafka: KafkaBroker) -> Iterator[kafkaadmin.Admin]:
    """The operator's own admin handle on the test broker (as `AdminPool` hands it out)."""
    pool = kafkaadmin.AdminPool()
    yield pool.get({"bootstrap.servers": kafka.bootstrap})
    pool.close()


def test_broker_bounds_are_read_from_the_broker(admin: kafkaadmin.Admin) -> None:
    bounds = kafkareads.broker_bounds(admin)
    assert bounds["group.min.session.timeout.ms"] == int(
        TEST_SETTINGS["group.min.session.timeout.ms"])
    assert bounds["group.max.session.timeout.ms"] == 1800000  # the broker's default
    assert bounds["group.consumer.min.session.timeout.ms"] == int(
        TEST_SETTINGS["group.consumer.min.session.timeout.ms"])


def test_partition_counts_and_missing_topics(admin: kafkaadmin.Admin,
                                             make_topic: Callable[..., str]) -> None:
    topic = make_topic("obs", 4)
    assert kafkareads.topics_seen(admin, [topic]).counts == {topic: 4}
    with pytest.raises(kafkareads.TopicMissing, match=r"nope-.* do not exist"):
        kafkareads.topics_seen(admin, [topic, unique("nope")])
    assert kafkareads.pattern_topics_seen(admin, "obs-.*").counts[topic] == 4


def test_describe_group_lists_static_members_with_their_partitions(
    kafka: KafkaBroker, admin: kafkaadmin.Admin, make_topic: Callable[..., str]
) -> None:
    topic, group = make_topic("desc", 4), unique("g")
    members = [ProbeMember([kafka.bootstrap, group, topic, "6000", f"{group}-{i}"]).start()
               for i in range(2)]
    try:
        view = wait_for("a Stable group of two", lambda: _stable(admin, group), 60)
        by_instance = view.by_instance()
        assert sorted(by_instance) == [f"{group}-0", f"{group}-1"]
        assigned = sorted(p for m in by_instance.values() for p in m.partitions)
        assert assigned == [(topic, p) for p in range(4)]
    finally:
        for m in members:
            m.kill()


def _stable(admin: kafkaadmin.Admin, group: str) -> GroupView | None:
    try:
        view = kafkareads.describe_group(admin, group)
    except kafkaadmin.KafkaUnavailable:
        return None  # the group may not have a coordinator yet; the operator retries too
    return view if view.state == "Stable" and len(view.members) == 2 else None


def test_unknown_group_is_reported_as_such_or_dead(admin: kafkaadmin.Admin) -> None:
    try:
        view = kafkareads.describe_group(admin, unique("never"))
    except kafkaadmin.KafkaUnavailable as exc:
        assert kafkaadmin.is_unknown_group(exc)
    else:
        assert view.state in ("Dead", "Empty") and view.members == ()


def test_kip848_group_timeouts_are_group_configs_on_the_broker(
    admin: kafkaadmin.Admin, kafka_admin: AdminClient,
) -> None:
    group = unique("g848")
    timeouts = EffectiveTimeouts(session_timeout_ms=12000, heartbeat_interval_ms=2000,
                                 max_poll_interval_ms=300000, sources={})
    kafkareads.set_group_configs(admin, group, timeouts.group_configs("consumer"))
    resource = ConfigResource(ResourceType.GROUP, group)
    entries = kafka_admin.describe_configs([resource])[resource].result(timeout=10)
    assert entries["consumer.session.timeout.ms"].value == "12000"
    assert entries["consumer.heartbeat.interval.ms"].value == "2000"


def test_unreachable_cluster_is_a_clear_error() -> None:
    admin = kafkaadmin.AdminPool().get({"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(kafkaadmin.KafkaUnavailable):
        kafkareads.broker_bounds(admin)


def broker_lag(admin: kafkaadmin.Admin, group: str,
               partitions: dict[str, int]) -> dict[tuple[str, int], int]:
    """The group's lag as the operator reads it with no member reporting: from the brokers'
    committed and end offsets alone, nothing cached (`lagreads.LagReads`, interval 0)."""
    return dict(lagreads.LagReads(interval_s=0.0).lag(admin, group, partitions).by_partition)


def test_lag_is_end_offset_minus_committed_for_committed_partitions(
        admin: kafkaadmin.Admin, kafka: KafkaBroker, make_topic: Callable[..., str]) -> None:
    """Read from the broker alone (no member runs): a group that committed 3 of the 10 records
    of partition 0 lags 7 there; partition 1, never committed, has no lag series."""
    from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition

    topic, group = make_topic("lag", 2), unique("lag")
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(14):
        producer.produce(topic, value=b"%d" % i, partition=0 if i < 10 else 1)
    assert producer.flush(10) == 0
    assert broker_lag(admin, group, {topic: 2}) == {}, "nothing committed yet"
    done = admin.client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 0, 3)])])[group].result(timeout=10)
    assert [tp.error for tp in done.topic_partitions] == [None]
    assert broker_lag(admin, group, {topic: 2}) == {(topic, 0): 7}
