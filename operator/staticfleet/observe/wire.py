"""The requests of the per-cluster reads (`clusterreads`), on kafka-python's client: which
versions they send (those kafka-python 2.3 lacks are the wire kit's, `kafkawire.messages`),
and `Wire`, which sends a batch of requests to the brokers they are for and waits for all their
answers within a deadline.

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
from kafka.protocol.list_offsets import ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest

from kafkawire.messages import (
    NONE,
    ConsumerGroupDescribe,
    DescribeGroups,
    FindCoordinator,
    OffsetFetch,
)

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
