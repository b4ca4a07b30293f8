"""Batches of Kafka records, pure: their Arrow form, their offsets, their names.

Any object with the accessor methods of `confluent_kafka.Message` is a record here, so the
functions run on real messages in the member and on plain fakes in the unit tests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Protocol

import pyarrow as pa

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("ms", tz="UTC")),
    ("headers", pa.list_(HEADER)),
])

TopicPartition = tuple[str, int]
Headers = dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None


class KafkaRecord(Protocol):
    """The part of `confluent_kafka.Message` the runtime reads."""

    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def headers(self) -> Headers: ...


def to_arrow(records: Sequence[KafkaRecord]) -> pa.Table:
    """The batch as an Arrow table with SCHEMA (timestamp null when the broker gave none)."""
    stamps = [r.timestamp() for r in records]
    columns = [
        pa.array([r.key() for r in records], pa.binary()),
        pa.array([r.value() for r in records], pa.binary()),
        pa.array([r.topic() for r in records], pa.string()),
        pa.array([r.partition() for r in records], pa.int32()),
        pa.array([r.offset() for r in records], pa.int64()),
        pa.array([ts if kind else None for kind, ts in stamps], pa.timestamp("ms", tz="UTC")),
        pa.array([[{"key": k, "value": v} for k, v in header_pairs(r.headers())]
                  for r in records], pa.list_(HEADER)),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def header_pairs(headers: Headers) -> list[tuple[str, bytes | None]]:
    """Headers as (name, bytes) pairs, whichever shape the client gave them in."""
    if not headers:
        return []
    pairs = headers.items() if isinstance(headers, dict) else headers
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]


def payload_bytes(record: KafkaRecord) -> int:
    """Bytes of key plus value, what `maxBytes` counts."""
    return len(record.key() or b"") + len(record.value() or b"")


def where(record: KafkaRecord) -> TopicPartition:
    return (record.topic() or "", record.partition() or 0)


def offset_ranges(records: Sequence[KafkaRecord]) -> dict[TopicPartition, tuple[int, int]]:
    """First and last offset of the batch in each partition it covers."""
    ranges: dict[TopicPartition, tuple[int, int]] = {}
    for r in records:
        tp, off = where(r), r.offset() or 0
        first, last = ranges.get(tp, (off, off))
        ranges[tp] = (min(first, off), max(last, off))
    return ranges


def next_offsets(records: Sequence[KafkaRecord]) -> dict[TopicPartition, int]:
    """The offsets to commit once `records` are processed: highest offset + 1 per partition."""
    return {tp: last + 1 for tp, (_first, last) in offset_ranges(records).items()}


def batch_name(records: Sequence[KafkaRecord]) -> str:
    """A name that depends only on which offsets the batch covers (same records, same name)."""
    ranges = sorted(offset_ranges(records).items())
    text = ";".join(f"{t}/{p}/{a}-{b}" for (t, p), (a, b) in ranges)
    if len(ranges) == 1:
        (topic, part), (first, last) = ranges[0]
        return f"{_safe(topic)}-{part}-{first}-{last}"
    return "batch-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def _safe(topic: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in topic)
