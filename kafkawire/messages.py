"""Kafka's messages that kafka-python 2.x lacks, spelled with its protocol types, and the error
codes their callers tell apart. Each request class's answer is its `RESPONSE_TYPE`.

The versions (Kafka's message specs, clients/src/main/resources/common/message):

* FindCoordinator v4 (KIP-699): many group ids in one request, an answer for each.
* DescribeGroups v5: many classic groups, each member's group.instance.id (v4+); flexible.
  v4 and v5 came in one release (Kafka 2.4), so the member's group view asks v5 as the
  operator's reads do.
* ConsumerGroupDescribe v0 (KIP-848): many consumer groups.
* OffsetFetch v8 (KIP-709): many groups' committed offsets in one request.
* ConsumerGroupHeartbeat v1 (KIP-848): the static member's leave (member epoch -2).

All of them are flexible versions: their structs end in tagged fields, so a decoded struct's
last value is its tags (`{}`), and a request is made with them (`DescribeGroups([ids], False,
{})`).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import Any

from kafka.protocol.api import Request, Response
from kafka.protocol.types import (
    AbstractType,
    Array,
    Boolean,
    Bytes,
    CompactArray,
    CompactBytes,
    CompactString,
    Int8,
    Int16,
    Int32,
    Int64,
    Schema,
    String,
    TaggedFields,
)

TP = tuple[str, int]

# -- Kafka's error codes (org.apache.kafka.common.protocol.Errors) --------------------------

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
UNKNOWN_MEMBER_ID = 25
GROUP_ID_NOT_FOUND = 69
FENCED_INSTANCE_ID = 82

COORDINATOR_MOVING = frozenset({COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
                                NOT_COORDINATOR})
"""The group's coordinator moved or is loading the group: ask again, after a new coordinator
lookup."""

# -- types kafka-python 2.x lacks --------------------------------------------------------------


class Uuid(AbstractType):
    """A UUID field (16 bytes), as in Kafka's topic ids."""

    @classmethod
    def encode(cls, value: bytes) -> bytes:
        return bytes(value)

    @classmethod
    def decode(cls, data: Any) -> bytes:
        value = data.read(16)
        if len(value) != 16:
            raise ValueError("buffer underrun decoding a UUID")
        return bytes(value)


class NullableStruct(AbstractType):
    """A flexible version's nullable struct: an int8 marker (-1 null, 1 present), then the
    fields."""

    def __init__(self, *fields: tuple[str, Any]) -> None:
        self.schema = Schema(*fields)

    def encode(self, value: Any) -> bytes:
        if value is None:
            return Int8.encode(-1)
        return Int8.encode(1) + self.schema.encode(value)

    def decode(self, data: Any) -> Any:
        return None if Int8.decode(data) < 0 else self.schema.decode(data)


_TEXT = CompactString("utf-8")
_TAGS = ("_tagged_fields", TaggedFields)


def _rows(*fields: tuple[str, Any]) -> CompactArray:
    """A flexible version's array of structs (each ends in its tagged fields)."""
    return CompactArray(*fields, _TAGS)


def _api(name: str, key: int, version: int, request: Sequence[tuple[str, Any]],
         response: Sequence[tuple[str, Any]]) -> Any:
    """The request class of a flexible version (its response class is `RESPONSE_TYPE`)."""
    answer = type(f"{name}Response_v{version}", (Response,), {
        "__module__": __name__, "API_KEY": key, "API_VERSION": version, "FLEXIBLE_VERSION": True,
        "SCHEMA": Schema(*response, _TAGS)})
    return type(f"{name}Request_v{version}", (Request,), {
        "__module__": __name__, "API_KEY": key, "API_VERSION": version, "FLEXIBLE_VERSION": True,
        "RESPONSE_TYPE": answer, "SCHEMA": Schema(*request, _TAGS)})


# -- the messages ------------------------------------------------------------------------------

FindCoordinator = _api(
    "FindCoordinator", 10, 4,
    [("key_type", Int8), ("coordinator_keys", CompactArray(_TEXT))],
    [("throttle_time_ms", Int32),
     ("coordinators", _rows(("key", _TEXT), ("node_id", Int32), ("host", _TEXT),
                            ("port", Int32), ("error_code", Int16), ("error_message", _TEXT)))])
"""FindCoordinator v4: `FindCoordinator(0, [group ids], {})` (key type 0: groups)."""

DescribeGroups = _api(
    "DescribeGroups", 15, 5,
    [("groups", CompactArray(_TEXT)), ("include_authorized_operations", Boolean)],
    [("throttle_time_ms", Int32),
     ("groups", _rows(
         ("error_code", Int16), ("group_id", _TEXT), ("group_state", _TEXT),
         ("protocol_type", _TEXT), ("protocol_data", _TEXT),
         ("members", _rows(("member_id", _TEXT), ("group_instance_id", _TEXT),
                           ("client_id", _TEXT), ("client_host", _TEXT),
                           ("member_metadata", CompactBytes),
                           ("member_assignment", CompactBytes))),
         ("authorized_operations", Int32)))])
"""DescribeGroups v5: `DescribeGroups([group ids], False, {})`. A group it does not know (none,
or a consumer group) is Dead with no error (GROUP_ID_NOT_FOUND is v6's)."""

_TOPIC_PARTITIONS = _rows(("topic_id", Uuid), ("partitions", CompactArray(Int32)))
"""ConsumerGroupHeartbeat's TopicPartitions: the topics by id alone."""

_ASSIGNMENT = Schema(
    ("topic_partitions", _rows(("topic_id", Uuid), ("topic_name", _TEXT),
                               ("partitions", CompactArray(Int32)))), _TAGS)
"""ConsumerGroupDescribe's Assignment: each topic by id and name."""

ConsumerGroupDescribe = _api(
    "ConsumerGroupDescribe", 69, 0,
    [("group_ids", CompactArray(_TEXT)), ("include_authorized_operations", Boolean)],
    [("throttle_time_ms", Int32),
     ("groups", _rows(
         ("error_code", Int16), ("error_message", _TEXT), ("group_id", _TEXT),
         ("group_state", _TEXT), ("group_epoch", Int32), ("assignment_epoch", Int32),
         ("assignor_name", _TEXT),
         ("members", _rows(
             ("member_id", _TEXT), ("instance_id", _TEXT), ("rack_id", _TEXT),
             ("member_epoch", Int32), ("client_id", _TEXT), ("client_host", _TEXT),
             ("subscribed_topic_names", CompactArray(_TEXT)),
             ("subscribed_topic_regex", _TEXT),
             ("assignment", _ASSIGNMENT), ("target_assignment", _ASSIGNMENT))),
         ("authorized_operations", Int32)))])
"""ConsumerGroupDescribe v0: `ConsumerGroupDescribe([group ids], False, {})`. A group it does
not know (none, or a classic group) is GROUP_ID_NOT_FOUND."""

OffsetFetch = _api(
    "OffsetFetch", 9, 8,
    [("groups", _rows(("group_id", _TEXT),
                      ("topics", _rows(("name", _TEXT),
                                       ("partition_indexes", CompactArray(Int32)))))),
     ("require_stable", Boolean)],
    [("throttle_time_ms", Int32),
     ("groups", _rows(
         ("group_id", _TEXT),
         ("topics", _rows(("name", _TEXT), ("partitions", _rows(
             ("partition_index", Int32), ("committed_offset", Int64),
             ("committed_leader_epoch", Int32), ("metadata", _TEXT),
             ("error_code", Int16))))),
         ("error_code", Int16)))])
"""OffsetFetch v8: `OffsetFetch([(group id, [(topic, [partitions], {})], {})], False, {})`."""

ConsumerGroupHeartbeat = _api(
    "ConsumerGroupHeartbeat", 68, 1,
    [("group_id", _TEXT), ("member_id", _TEXT), ("member_epoch", Int32),
     ("instance_id", _TEXT), ("rack_id", _TEXT), ("rebalance_timeout_ms", Int32),
     ("subscribed_topic_names", CompactArray(_TEXT)), ("subscribed_topic_regex", _TEXT),
     ("server_assignor", _TEXT), ("topic_partitions", _TOPIC_PARTITIONS)],
    [("throttle_time_ms", Int32), ("error_code", Int16), ("error_message", _TEXT),
     ("member_id", _TEXT), ("member_epoch", Int32), ("heartbeat_interval_ms", Int32),
     ("assignment", NullableStruct(("topic_partitions", _TOPIC_PARTITIONS), _TAGS))])
"""ConsumerGroupHeartbeat v1: group id, member id, member epoch, instance id, rack id,
rebalance timeout, subscribed topic names and regex, server assignor, topic partitions, tags
(null, -1 or None where a request leaves a field as it was)."""

# -- the assignments the answers carry ---------------------------------------------------------

_CLASSIC_ASSIGNMENT = Schema(
    ("version", Int16),
    ("assigned", Array(("topic", String("utf-8")), ("partitions", Array(Int32)))),
    ("user_data", Bytes))
"""A classic consumer's assignment, as the group's leader wrote it (Kafka's
ConsumerProtocolAssignment: the same layout in its versions 0 to 3)."""


def classic_assignment(raw: bytes | None) -> frozenset[TP]:
    """The partitions of a classic member's assignment bytes (a DescribeGroups member's
    `member_assignment`; none before it has one: the coordinator sends them only while the
    group is Stable). ValueError for bytes that do not decode."""
    if not raw:
        return frozenset()
    try:
        _version, assigned, _user_data = _CLASSIC_ASSIGNMENT.decode(io.BytesIO(raw))
    except (TypeError, IndexError) as exc:  # kafka-python's decoders raise these too
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc
    return frozenset((topic, p) for topic, partitions in assigned or () for p in partitions or ())


def assignment_partitions(assignment: Any) -> frozenset[TP]:
    """The partitions of a decoded ConsumerGroupDescribe Assignment (a member's `assignment`
    or `target_assignment`), by topic name."""
    topic_partitions, _tags = assignment
    return frozenset(_named(topic_partitions))


def _named(topic_partitions: Iterable[Any] | None) -> Iterable[TP]:
    for _id, topic, partitions, _tags in topic_partitions or ():
        for p in partitions or ():
            yield topic, int(p)
