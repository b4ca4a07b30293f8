"""The rules for getting into the group and out of it (membership.py), without a broker."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError

from consumer_runtime.config import parse_config
from consumer_runtime.groupview import GroupMember, held_by, held_by_another
from consumer_runtime.membership import (
    NO_TOPIC,
    connection_settings,
    generation_of,
    is_fatal,
    is_unreleased_instance_id,
    join_backoff,
    leave_subscription,
)
from tests.unit.runtime.support import base

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


def member(member_id: str, instance: str | None, *tps: tuple[str, int]) -> GroupMember:
    return GroupMember(member_id, instance, frozenset(tps))


@pytest.mark.parametrize(("members", "instance", "member_id", "expected"), [
    ([member("m0", "g-0", ("a", 0)), member("m1", "g-1", ("a", 1))], "g-0", "m0", {("a", 0)}),
    ([member("m0", "g-0"), member("m1", "g-1", ("a", 0), ("a", 1))], "g-0", "m0", set()),
    ([member("m1", "g-1", ("a", 0))], "g-0", "m0", set()),
    ([member("m0", None, ("a", 0)), member("m1", None, ("a", 1))], None, "m1", {("a", 1)}),
    ([GroupMember("m0", "g-0", None), member("m1", "g-1", ("a", 1))], "g-0", "m0", None),
    ([member("m0", "g-0", ("a", 0)), GroupMember("m1", "g-1", None)], "g-0", "m0", {("a", 0)}),
], ids=["holds", "listed without partitions", "not listed", "dynamic, by member id",
        "its partitions not known now", "another's partitions not known"])
def test_held_by(members: list[Any], instance: str | None, member_id: str,
                 expected: set[tuple[str, int]] | None) -> None:
    assert held_by(members, instance, member_id) == expected


@pytest.mark.parametrize(("members", "instance", "member_id", "expected"), [
    ([member("m0", "g-0", ("a", 0))], "g-0", "m0", False),
    ([member("m9", "g-0", ("a", 0))], "g-0", "m0", True),
    ([member("m9", "g-0")], "g-0", "m0", True),
    ([member("m9", "g-1", ("a", 0))], "g-0", "m0", False),
    ([], "g-0", "m0", False),
    ([member("m9", None, ("a", 0))], None, "m0", False),
], ids=["itself", "another member id", "another, without partitions yet", "another instance",
        "empty group", "dynamic: never"])
def test_held_by_another(members: list[Any], instance: str | None, member_id: str,
                         expected: bool) -> None:
    assert held_by_another(members, instance, member_id) is expected


def test_an_admin_client_gets_the_connection_settings_only() -> None:
    raw = base()
    raw["consumer"].update({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                            "fetch.min.bytes": 1})
    cfg = parse_config(raw, {"STATICFLEET_SASL_PASSWORD": "pw",
                             "STATICFLEET_GROUP_INSTANCE_ID": "orders-0"})
    assert connection_settings(cfg) == {
        "bootstrap.servers": "127.0.0.1:9092", "client.id": "orders-0-admin",
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.password": "pw"}


class Metadata:
    def __init__(self, raw: object) -> None:
        self.raw = raw

    def consumer_group_metadata(self) -> object:
        return self.raw


def test_the_generation_is_read_from_librdkafkas_metadata_and_nothing_else() -> None:
    """The installed librdkafka writes the format `generation_of` reads: a consumer not in a
    generation yet (no broker: the port refuses) has generation -1, which is no generation."""
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "g",
                         "group.instance.id": "g-0", "log_level": 0})
    try:
        raw = consumer.consumer_group_metadata()
        assert isinstance(raw, bytes) and raw.startswith(b"CGMDv2:"), raw
        assert generation_of(consumer) is None
    finally:
        consumer.close()
    assert generation_of(Metadata(b"CGMDv2:" + (7).to_bytes(4, sys.byteorder) + b"g\0")) == 7
    assert generation_of(Metadata(b"CGMDv3:" + (7).to_bytes(4, sys.byteorder))) is None
    assert generation_of(Metadata(b"CGMDv2:\x07")) is None
    assert generation_of(Metadata("CGMDv2:")) is None
