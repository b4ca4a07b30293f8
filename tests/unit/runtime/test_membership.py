"""The rules for getting into the group and out of it (membership.py), without a broker."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import MemberAssignment, MemberDescription

from consumer_runtime.config import parse_config
from consumer_runtime.membership import (
    NO_TOPIC,
    connection_settings,
    held_by,
    is_fatal,
    is_unreleased_instance_id,
    join_backoff,
    leave_subscription,
)
from tests.unit.runtime.test_config import base

pytestmark = pytest.mark.unit

# What consume() returns after a refused KIP-848 join, as librdkafka 2.16 words it.
UNRELEASED = KafkaError(
    KafkaError._FATAL,
    "Fatal error: Broker: The instance ID is still used by another member in the consumer "
    "group: ConsumerGroupHeartbeat fatal error: Broker: The instance ID is still used by "
    "another member in the consumer group")


def test_a_refused_instance_id_is_fatal_though_python_does_not_flag_it() -> None:
    assert not UNRELEASED.fatal()
    assert is_fatal(UNRELEASED) and is_unreleased_instance_id(UNRELEASED)


@pytest.mark.parametrize("err", [
    KafkaError(KafkaError._FATAL, "Fatal error: Broker: Static consumer fenced by other "
                                  "consumer with same group.instance.id"),
    KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "Subscribed topic not available"),
], ids=["other fatal", "not fatal"])
def test_other_errors_are_not_a_refused_instance_id(err: KafkaError) -> None:
    assert not is_unreleased_instance_id(err)


def test_join_backoff_doubles_to_a_short_cap() -> None:
    assert [join_backoff(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 2.0, 2.0]


def test_leave_unsubscribes_classic_and_subscribes_to_no_topic_with_consumer() -> None:
    assert leave_subscription("classic") is None
    assert leave_subscription("consumer") == [NO_TOPIC] == ["^$"]


def member(member_id: str, instance: str | None, *tps: tuple[str, int]) -> MemberDescription:
    return MemberDescription(member_id, "client", "/127.0.0.1", MemberAssignment(
        [TopicPartition(t, p) for t, p in tps]), instance)


@pytest.mark.parametrize(("members", "instance", "member_id", "expected"), [
    ([member("m0", "g-0", ("a", 0)), member("m1", "g-1", ("a", 1))], "g-0", "m0", {("a", 0)}),
    ([member("m0", "g-0"), member("m1", "g-1", ("a", 0), ("a", 1))], "g-0", "m0", set()),
    ([member("m1", "g-1", ("a", 0))], "g-0", "m0", set()),
    ([member("m0", None, ("a", 0)), member("m1", None, ("a", 1))], None, "m1", {("a", 1)}),
], ids=["holds", "listed without partitions", "not listed", "dynamic, by member id"])
def test_held_by(members: list[Any], instance: str | None, member_id: str,
                 expected: set[tuple[str, int]]) -> None:
    assert held_by(members, instance, member_id) == expected


def test_an_admin_client_gets_the_connection_settings_only() -> None:
    raw = base()
    raw["consumer"].update({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                            "fetch.min.bytes": 1})
    cfg = parse_config(raw, {"STATICFLEET_SASL_PASSWORD": "pw",
                             "STATICFLEET_GROUP_INSTANCE_ID": "orders-0"})
    assert connection_settings(cfg) == {
        "bootstrap.servers": "127.0.0.1:9092", "client.id": "orders-0-admin",
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.password": "pw"}
