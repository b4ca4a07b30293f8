"""A steady stream of sample records into a topic, and reading back what a group did with it.

Used by the demo and the tests: `SteadyProducer` produces unique values at a fixed rate from a
thread; `committed_offsets` tells how far a group has committed against the end offsets, which
is the at-least-once measure of "processed"; `read_all` reads a whole topic back so "no record
lost" can be checked by unique values (duplicates allowed, gaps not).
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# librdkafka's own log lines (informational purges, transient coordinator-load retries) would
# interleave with the demo's output; errors are still logged, and delivery failures are recorded.
QUIET = {"log_level": 3}


def create_topic(bootstrap: str, name: str, partitions: int, timeout: float = 30.0) -> None:
    """Create `name` with `partitions` partitions and wait until it exists (replicated as the
    brokers' default.replication.factor says: 1 on a single broker, 3 on the three-broker
    cluster)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for fut in admin.create_topics([NewTopic(name, partitions)]).values():
        fut.result(timeout=timeout)


@dataclass
class SteadyProducer:
    """Produces `rate` records per second with unique values (keys `k0..k<keys-1>`) until
    stopped. `produced` holds every value handed to the producer; `failed` every delivery
    error."""

    bootstrap: str
    topic: str
    rate: float = 100.0
    keys: int = 32
    produced: list[bytes] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> SteadyProducer:
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                             "linger.ms": 5, **QUIET})
        run = uuid.uuid4().hex[:6]
        n = 0
        started = time.monotonic()

        def acked(err: object, msg: object) -> None:
            if err is not None:
                self.failed.append(str(err))

        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while n < due:
                value = f"{run}-{n:08d}".encode()
                producer.produce(self.topic, value=value, key=f"k{n % self.keys}".encode(),
                                 on_delivery=acked)
                self.produced.append(value)
                n += 1
            producer.poll(0)
            time.sleep(0.01)
        left = producer.flush(30)
        if left:
            self.failed.append(f"{left} records not delivered")

    def stop(self) -> int:
        """Stop producing, flush, and return how many records were produced."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        return len(self.produced)


def read_all(bootstrap: str, topic: str, timeout: float = 30.0) -> list[bytes]:
    """Every value currently in `topic` (all partitions, from the beginning)."""
    return [value for value, _ in read_timed(bootstrap, topic, timeout)]


def read_timed(bootstrap: str, topic: str, timeout: float = 30.0) -> list[tuple[bytes, int]]:
    """Every value currently in `topic` (all partitions, from the beginning), each with its
    record's timestamp (ms; a sink's record: when the member wrote it)."""
    return [(value, at) for value, _, at in read_stamped(bootstrap, topic, timeout)]


def read_stamped(bootstrap: str, topic: str,
                 timeout: float = 30.0) -> list[tuple[bytes, int, int]]:
    """Every value currently in `topic` (all partitions, from the beginning), each with its
    partition and its record's timestamp (ms: when the producer made it, or with the topic's
    `message.timestamp.type` LogAppendTime when the broker appended it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", **QUIET})
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = [TopicPartition(topic, p) for p in md.partitions]
        ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in parts}
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        values: list[tuple[bytes, int, int]] = []
        seen = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + timeout
        while any(seen[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                part, offset, value = msg.partition(), msg.offset(), msg.value()
                if (msg.error() is None and part is not None and offset is not None
                        and value is not None):
                    values.append((value, part, msg.timestamp()[1]))
                    seen[part] = offset + 1
        return values
    finally:
        consumer.close()


def longest_pause_s(written: Sequence[tuple[bytes, int]], keys: int = 32) -> float:
    """The longest time between two records of one key of a `SteadyProducer` stream
    (`<run>-<n>`, key `k<n % keys>`) being written to a sink, in the order they were produced:
    how long the partition that key is on went without a processing owner, plus the stream's
    own spacing (`keys / rate`)."""
    by_key: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for value, at in written:
        run, _, n = value.decode(errors="replace").rpartition("-")
        if run and n.isdigit():
            by_key.setdefault((run, int(n) % keys), []).append((int(n), at))
    longest = 0
    for records in by_key.values():
        records.sort()
        for (_, before), (_, after) in itertools.pairwise(records):
            longest = max(longest, after - before)
    return longest / 1000


def committed_offsets(bootstrap: str, group: str, topic: str) -> tuple[int, int]:
    """(committed, end): the sums over `topic`'s partitions of `group`'s committed offsets
    (0 where nothing is committed) and of the end offsets. For a topic that started empty,
    `committed` is the number of records the group has processed for good."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, **QUIET})
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = [TopicPartition(topic, p) for p in md.partitions]
        committed = end = 0
        for tp in consumer.committed(parts, timeout=10):
            committed += max(tp.offset, 0)
            end += consumer.get_watermark_offsets(TopicPartition(topic, tp.partition),
                                                  timeout=10)[1]
        return committed, end
    finally:
        consumer.close()


def committed_lag(bootstrap: str, group: str, topic: str) -> int:
    """Records of `topic` not yet committed by `group`."""
    committed, end = committed_offsets(bootstrap, group, topic)
    return end - committed
