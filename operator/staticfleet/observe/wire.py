"""The requests of the per-cluster reads (`clusterreads`), on kafka-python's client: the
versions kafka-python 2.3 lacks, spelled with its protocol types, and `Wire`, which sends a
batch of requests to the brokers they are for and waits for all their answers within a deadline.

kafka-python is pure Python: a request whose broker goes away fails its future, and nothing
aborts the process (librdkafka 2.16 does, for its coordinator-bound admin requests:
`coordinated`). So these requests are made in the operator's own process.

The versions (Kafka's message specs, clients/src/main/resources/common/message):

* FindCoordinator v4 (KIP-699): many group ids in one request, an answer for each.
* DescribeGroups v5: many classic groups, each member's group.instance.id (v4+); flexible.
* ConsumerGroupDescribe v0 (KIP-848): many consumer groups.
* OffsetFetch v8 (KIP-709): many groups' committed offsets in one request.
* ListOffsets v5 and Metadata v8: kafka-python's own.

Every one of them is in Kafka 3.0 and later (ConsumerGroupDescribe: 4.0); `Wire.missing` says
which ones a cluster does not take.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kafka import KafkaClient
from kafka.protocol.api import Request, Response
from kafka.protocol.list_offsets import ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactBytes,
    CompactString,
    Int8,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

# Kafka's error codes that the reads tell apart.
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
GROUP_ID_NOT_FOUND = 69

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


FindCoordinator = _api(
    "FindCoordinator", 10, 4,
    [("key_type", Int8), ("coordinator_keys", CompactArray(_TEXT))],
    [("throttle_time_ms", Int32),
     ("coordinators", _rows(("key", _TEXT), ("node_id", Int32), ("host", _TEXT),
                            ("port", Int32), ("error_code", Int16), ("error_message", _TEXT)))])
"""FindCoordinator v4: `FindCoordinator(0, [group ids])` (key type 0: groups)."""

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

_TOPIC_ID = (("topic_id_high", Int64), ("topic_id_low", Int64))
"""Kafka's uuid (a topic id): 16 bytes, read as the two 64-bit halves Java keeps it in."""

_ASSIGNMENT = Schema(
    ("topic_partitions", _rows(*_TOPIC_ID, ("topic_name", _TEXT),
                               ("partitions", CompactArray(Int32)))), _TAGS)

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

ListOffsets = ListOffsetsRequest[5]
"""ListOffsets v5: `ListOffsets(-1, 0, [(topic, [(partition, -1, -1)])])` (timestamp -1: the
end offset; isolation 0: read uncommitted, the high watermark, as the admin client reads it)."""

Metadata = MetadataRequest[8]
"""Metadata v8: `Metadata([topics] or None for all, False, False, False)`."""

def _by_topic(tps: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in tps:
        out.setdefault(topic, []).append(partition)
    return out


def offset_fetch(groups: Mapping[str, Iterable[tuple[str, int]]]) -> Any:
    """An OffsetFetch of each group's committed offsets on its partitions."""
    return OffsetFetch([(group, [(topic, parts, {}) for topic, parts in _by_topic(tps).items()],
                         {}) for group, tps in groups.items()], False, {})


def list_offsets(tps: Iterable[tuple[str, int]]) -> Any:
    """A ListOffsets of the end offsets of `tps` (all led by the broker it is sent to)."""
    return ListOffsets(-1, 0, [(topic, [(p, -1, -1) for p in parts])
                               for topic, parts in _by_topic(tps).items()])


USED = (FindCoordinator, DescribeGroups, ConsumerGroupDescribe, OffsetFetch, ListOffsets,
        Metadata)

API_NAMES = {10: "FIND_COORDINATOR", 15: "DESCRIBE_GROUPS", 69: "CONSUMER_GROUP_DESCRIBE",
             9: "OFFSET_FETCH", 2: "LIST_OFFSETS", 3: "METADATA"}
"""The names the brokers' request log gives these APIs (`requestApiKeyName`)."""


class Unreachable(OSError):
    """A broker the request was for did not take it (no connection, none in time)."""


class Wire:
    """One kafka-python client of a cluster, with `exchange` to send a batch of requests and
    wait for their answers, and the count of requests it sent by API (`sent`).

    Making it connects to a bootstrap server (kafka-python asks its API versions there); it
    raises what kafka-python raises when none answers. Not for two threads at once: the
    reads of a cluster hold a lock around it (`clusterreads.ClusterReader`)."""

    def __init__(self, settings: Mapping[str, Any],
                 make_client: Callable[..., Any] = KafkaClient) -> None:
        self.client = make_client(**settings)
        self.sent: Counter[str] = Counter()

    def missing(self) -> list[str]:
        """The requests of `USED` the bootstrap broker does not take (name and version)."""
        versions = self.client.get_api_versions() or {}
        out = []
        for request in USED:
            low, high = versions.get(request.API_KEY, (0, -1))
            if not low <= request.API_VERSION <= high:
                out.append(f"{API_NAMES[request.API_KEY]} v{request.API_VERSION}")
        return out

    def any_broker(self) -> int | None:
        """A broker to ask what any broker can answer (metadata, coordinators)."""
        node = self.client.least_loaded_node()
        return None if node is None else node

    def brokers(self) -> set[int]:
        """The brokers the client knows (from the last metadata)."""
        return {b.nodeId for b in self.client.cluster.brokers()}

    def learn(self, metadata: Any) -> None:
        """Give the client a metadata answer (its brokers, so it can reach a coordinator),
        without the topics that failed (kafka-python logs each of those as an error)."""
        fields = list(metadata.SCHEMA.names)
        values = [getattr(metadata, name) for name in fields]
        values[fields.index("topics")] = [t for t in metadata.topics if t[0] == NONE]
        self.client.cluster.update_metadata(type(metadata)(*values))

    def exchange(self, requests: Sequence[tuple[int, Any]], deadline: float) -> list[Any]:
        """Send each `(broker, request)` and wait for every answer until `deadline`
        (time.monotonic()): the answers in order, each a response, or the exception that says
        why there is none (`Unreachable`, or kafka-python's)."""
        out: list[Any] = [None] * len(requests)
        waiting = set(range(len(requests)))
        known = self.brokers()
        for i, (node, _) in enumerate(requests):
            if node not in known:
                out[i] = Unreachable(f"broker {node} is not in the cluster's metadata")
                waiting.discard(i)
        futures: dict[int, Any] = {}
        asked: set[int] = set()
        while waiting:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                break
            for i in sorted(waiting - set(futures)):
                node, request = requests[i]
                if self.client.ready(node, metadata_priority=False):
                    futures[i] = self.client.send(node, request, request_timeout_ms=left_ms)
                    self.sent[API_NAMES.get(request.API_KEY, type(request).__name__)] += 1
                elif node in asked and self.client.connection_failed(node):
                    out[i] = Unreachable(f"broker {node} refused the connection")
                    waiting.discard(i)
                asked.add(node)
            for i, future in list(futures.items()):
                if future.is_done:
                    out[i] = future.value if future.succeeded() else future.exception
                    waiting.discard(i)
                    del futures[i]
            if waiting:
                self.client.poll(timeout_ms=min(left_ms, 50))
        for i in waiting:
            out[i] = Unreachable(f"no answer from broker {requests[i][0]} in time")
        return out

    def close(self) -> None:
        self.client.close()
