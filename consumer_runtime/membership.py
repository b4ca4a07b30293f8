"""Getting into the group and out of it: the rules, the settings the member's clients get
(`consumer_settings`, `connection_settings`), and the one broker query a leave needs.

Into the group. A KIP-848 (group.protocol consumer) static member that stopped without leaving
(kill -9, an OOM kill, a lost node) stays registered under its group.instance.id until the
broker's session timeout (group config consumer.session.timeout.ms) expires. A replacement with
the same id is refused with UNRELEASED_INSTANCE_ID, which librdkafka makes a fatal error of the
whole consumer (rdkafka_cgrp.c, rd_kafka_cgrp_handle_ConsumerGroupHeartbeat: ACTION_FATAL, then
rd_kafka_set_fatal_error). The application sees it as one consumer error `_FATAL` whose text
carries the broker's error; that error is not flagged `fatal()`. The consumer is of no use after
it, so the member closes it and tries again with a new one, backing off, until the old
registration has expired.

Out of the group for good. A static member's close() sends no leave the broker acts on at once:
with the classic protocol no LeaveGroup at all; with protocol consumer a heartbeat with member
epoch -2, a static member's temporary leave, after which the broker keeps its partitions for the
session timeout. So a member that is removed for good gives its partitions up while it is still a
member:
- classic: unsubscribe(). librdkafka revokes everything, then sends LeaveGroup
  (rd_kafka_cgrp_leave_maybe skips it for a static member only when the consumer terminates);
  the broker rebalances the others at once.
- consumer: unsubscribe() would be the epoch -2 leave again, so it subscribes to a regex that no
  topic name matches. The broker revokes every partition; once the member acknowledged that, it
  assigns them to the others at their next heartbeat.
Either way the member then asks the broker until its instance shows no partitions, and only then
closes (a close that overtook the acknowledgement would leave the partitions held).

Asking the broker: `consumer_runtime.groupview` (kafka-python's client, imported only by a
member that asks: a leave, a drained member's wait).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from consumer_runtime.config import RuntimeConfig
from consumer_runtime.metrics import UNRELEASED_WAIT

UNRELEASED = UNRELEASED_WAIT
"""The `waiting.reason` while the broker still holds the instance id for an earlier process."""
_UNRELEASED_TEXT = KafkaError(KafkaError.UNRELEASED_INSTANCE_ID).str()
JOIN_BACKOFF_S = 0.5
JOIN_BACKOFF_MAX_S = 2.0
"""A try costs one FindCoordinator and one heartbeat; a short cap gets the member in soon after
the registration expired."""
NO_TOPIC = "^$"
"""A subscription regex no topic name matches (names are never empty)."""
CONNECTION_PREFIXES = ("security.", "sasl.", "ssl.", "socket.", "broker.address.")
STATS_INTERVAL_MS = 5000


def is_fatal(err: KafkaError) -> bool:
    """A fatal error of the whole consumer. librdkafka hands a consumer's fatal error to the
    application as a consumer error with code `_FATAL`, which Python does not flag `fatal()`."""
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


def is_unreleased_instance_id(err: KafkaError) -> bool:
    """The fatal error of a static member whose instance id the broker still holds for an
    earlier process (the broker's error code appears only in the text)."""
    return is_fatal(err) and _UNRELEASED_TEXT in err.str()


def fetched_all(consumer: Consumer, partitions: Iterable[tuple[str, int]]) -> bool:
    """Every one of `partitions` has answered a fetch: librdkafka knows its high watermark (a
    fetch answer carries it, with records or none)."""
    try:
        return all(consumer.get_watermark_offsets(TopicPartition(t, p), cached=True)[1] >= 0
                   for t, p in partitions)
    except KafkaException:
        return False


GROUP_METADATA_MAGIC = b"CGMDv2:"
"""How librdkafka's serialized consumer group metadata starts (rd_kafka_consumer_group_metadata_
write: the magic, then the generation as a native int32, then the group, member and instance
ids). confluent-kafka hands it over as bytes from `Consumer.consumer_group_metadata()`."""


def generation_of(consumer: Consumer) -> int | None:
    """The group generation the consumer is in (classic: the group's, which the broker raises
    once per completed rebalance; KIP-848: the member's epoch), None outside a generation or
    when the metadata is not in the format above (a client that changed it gives no generation
    rather than a wrong one). Asked in the assign callback, on the poll thread."""
    try:
        raw = consumer.consumer_group_metadata()
    except (KafkaException, RuntimeError):
        return None
    start = len(GROUP_METADATA_MAGIC)
    if (not isinstance(raw, bytes) or not raw.startswith(GROUP_METADATA_MAGIC)
            or len(raw) < start + 4):
        return None
    (generation,) = struct.unpack_from("=i", raw, start)
    return generation if generation >= 0 else None


def join_backoff(attempts: int) -> float:
    """Seconds to wait after the `attempts`-th refused try: 0.5, 1, 2, 2, ..."""
    return float(min(JOIN_BACKOFF_MAX_S, JOIN_BACKOFF_S * 2 ** max(0, attempts - 1)))


def leave_subscription(protocol: str) -> list[str] | None:
    """What a member removed for good subscribes to so the broker moves its partitions at once:
    None means unsubscribe() (classic), else the subscription to switch to (consumer)."""
    return [NO_TOPIC] if protocol == "consumer" else None


def consumer_settings(config: RuntimeConfig) -> dict[str, Any]:
    """The consumer's librdkafka settings: the operator's, plus what the runtime owns (manual
    commits, the group and its ids); the member adds its callbacks."""
    settings: dict[str, Any] = {"statistics.interval.ms": STATS_INTERVAL_MS}
    settings.update(config.consumer)
    settings.update({
        "bootstrap.servers": config.bootstrap_servers,
        "group.id": config.group_id,
        "client.id": config.member,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
    })
    if config.group_instance_id:
        settings["group.instance.id"] = config.group_instance_id
    return settings


def connection_settings(config: RuntimeConfig) -> dict[str, Any]:
    """The consumer's connection settings (address, security) for the clients that ask the
    group's coordinator (`GroupView`, `staticleave.StaticLeave`)."""
    settings: dict[str, Any] = {k: v for k, v in config.consumer.items()
                                if k.startswith(CONNECTION_PREFIXES)}
    settings.update({"bootstrap.servers": config.bootstrap_servers,
                     "client.id": f"{config.member}-admin"})
    return settings
