"""`spec.kafka.topicPattern` on the real broker (issue 46), for both protocols: a member
subscribed as consumer_runtime subscribes (`RuntimeConfig.subscription`, with the librdkafka
settings it joins with, `consumer_settings`) is assigned exactly the partitions the operator
counts for the same pattern: the cluster's whole read (`status.partitions`: its topics'
counts; the group's describe; the end offsets its lag is made of) and the per-group fallback
(`kafkareads.pattern_topics_seen`).

Topics `orders`, `orders-eu`, `orders-us` and `xorders` (behind a per-test prefix: the broker is
shared), patterns `orders` and `orders-.*`. On main a classic member subscribed to
`^orders`, a prefix search, and took `orders-eu` and `orders-us` beside `orders`, which the
operator did not count; KIP-848 (the broker's RE2J, a full match) took `orders` alone.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from consumer_runtime.config import parse_config
from consumer_runtime.membership import consumer_settings
from member_contract import GROUP_INSTANCE_ID_ENV
from staticfleet.observe import kafkaadmin, kafkareads
from staticfleet.observe.clusterreads import ClusterReader, Registration
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.testkit.poll import wait_for
from tests.integration.runtime_spark_helpers import runtime_config
from tests.integration.support import kip848
from tests.support import unique

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dump_broker_log_on_failure")]

TOPICS = {"orders": 2, "orders-eu": 3, "orders-us": 4, "xorders": 5}
"""Each topic (behind the prefix; `xorders`: an x before it) and its partition count."""
PATTERNS = {"orders": ("orders",), "orders-.*": ("orders-eu", "orders-us")}
"""Each pattern (behind the prefix) and the topics it fully matches."""
TP = tuple[str, int]


@pytest.fixture(scope="module")
def prefix(kafka: KafkaBroker) -> str:
    """The module's topics, with a record in each partition, named behind a prefix of its own
    (letters, digits and -, nothing a pattern reads as an operator)."""
    prefix = unique("tp") + "-"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    names = {name: (f"x{prefix}orders" if name == "xorders" else prefix + name)
             for name in TOPICS}
    for future in admin.create_topics(
            [NewTopic(names[n], count, 1) for n, count in TOPICS.items()]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for name, count in TOPICS.items():
        for p in range(count):
            producer.produce(names[name], value=b"x", partition=p)
    assert producer.flush(30) == 0
    return prefix


class Member:
    """One static member subscribed to a topicPattern as consumer_runtime subscribes, polled in
    a thread; `assigned` is its assignment as librdkafka last reported it."""

    def __init__(self, bootstrap: str, group: str, pattern: str, protocol: str) -> None:
        raw: dict[str, Any] = runtime_config(bootstrap, group, "unused", sink={"type": "null"})
        raw |= {"topics": None, "topicPattern": pattern}
        if protocol == "consumer":
            raw = kip848(raw)
        self.config = parse_config(raw, {GROUP_INSTANCE_ID_ENV: f"{group}-0"})
        assert self.config.protocol == protocol
        self.consumer = Consumer({**consumer_settings(self.config), "log_level": 3})
        self.consumer.subscribe(self.config.subscription())
        self.assigned: frozenset[TP] = frozenset()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.consumer.poll(0.2)
            self.assigned = frozenset((tp.topic, tp.partition)
                                      for tp in self.consumer.assignment())

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.consumer.close()


@pytest.fixture
def admin(kafka: KafkaBroker) -> Iterator[kafkaadmin.Admin]:
    pool = kafkaadmin.AdminPool()
    yield pool.get({"bootstrap.servers": kafka.bootstrap})
    pool.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_members_are_assigned_what_the_operator_counts(
        kafka: KafkaBroker, admin: kafkaadmin.Admin, prefix: str, pattern: str,
        protocol: str) -> None:
    group = unique(f"pattern-{protocol}")
    expected = {prefix + name: TOPICS[name] for name in PATTERNS[pattern]}
    every = frozenset((t, p) for t, count in expected.items() for p in range(count))
    member = Member(kafka.bootstrap, group, prefix + pattern, protocol)
    reader = ClusterReader({"bootstrap.servers": kafka.bootstrap})
    try:
        reader.register(Registration(group, protocol, (), prefix + pattern), 0.0)

        def settled() -> tuple[frozenset[TP], frozenset[TP]] | None:
            """The member's assignment and the operator's describe of it, once both agree on
            a Stable group (a KIP-848 broker resolves the regex a moment after the join)."""
            reader.read(0.0)
            described = reader.group(group).described
            view = None if described is None else described.outcome.view
            if view is None or view.state != "Stable" or len(view.members) != 1:
                return None
            told = frozenset(view.members[0].partitions)
            return (member.assigned, told) if member.assigned == told and told else None

        assigned, _told = wait_for(
            f"{protocol} member of {pattern!r} assigned and described", settled, timeout=90,
            describe=lambda: (sorted(member.assigned), reader.group(group)))
        held = reader.group(group)
        fallback = kafkareads.pattern_topics_seen(admin, prefix + pattern)

        # What the member consumes, as librdkafka and the broker's describe say it ...
        assert sorted(assigned) == sorted(every), (
            f"{protocol} member subscribed to {member.config.subscription()} was assigned "
            f"{sorted(assigned)}; the pattern fully matches {sorted(expected)}")
        # ... is what the operator counts: status.partitions, by either read ...
        assert held.topics is not None and dict(held.topics.counts) == expected
        assert fallback.counts == expected
        # ... and what its lag covers (the end offsets the cluster's read holds for the group).
        assert set(held.ends) == every
    finally:
        member.close()
        reader.close()
