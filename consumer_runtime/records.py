"""Batches of Kafka records, pure: their Arrow form, their offsets, their names.

Any object with the accessor methods of `confluent_kafka.Message` is a record here, so the
functions run on real messages in the member and on plain fakes in the unit tests.

The member converts records to Arrow as soon as they are polled, a chunk at a time (`Batch.of`),
so the rest of the runtime handles `Batch`es: a `pyarrow.Table` with SCHEMA plus the offset ranges
it covers, computed once. A `Batch` is also a sequence of records (slices are batches, items are
`Row`s with the accessors of a message), so retries and the bisection of a failing batch work on
it as on a list of messages, without going back to Python objects per record.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, overload

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Message

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
TIMESTAMP = pa.timestamp("ms", tz="UTC")
SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP),
    ("headers", pa.list_(HEADER)),
])
_STAMP = pa.struct([("kind", pa.int32()), ("ms", pa.int64())])
_NO_TIMESTAMP = pa.scalar(None, TIMESTAMP)

TopicPartition = tuple[str, int]
Ranges = dict[TopicPartition, tuple[int, int]]
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
    """The batch as an Arrow table with SCHEMA (timestamp null when the broker gave none).

    One list comprehension per accessor (the cheapest way to call a method per record from
    Python), timestamps through an Arrow struct, and the header lists built only when some record
    has headers: that column was most of the cost when it was built record by record.
    """
    if isinstance(records, Batch):
        return records.table
    with _gc_paused():
        return _to_arrow(records)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a batch is converted: the conversion allocates a few
    objects per record (none of them in cycles) while the polled messages are alive, which made
    the collector walk them over and over (measured: a third of the conversion at 100k records)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _to_arrow(records: Sequence[KafkaRecord]) -> pa.Table:
    n = len(records)
    field = _accessors(records)
    stamps = pa.array(field("timestamp"), _STAMP)
    timestamps = pc.if_else(pc.equal(stamps.field("kind"), 0), _NO_TIMESTAMP,
                            stamps.field("ms").cast(TIMESTAMP))
    headers = field("headers")
    if any(headers):
        header_column = pa.array([[{"key": k, "value": v} for k, v in header_pairs(h)]
                                  for h in headers], pa.list_(HEADER))
    else:
        header_column = pa.ListArray.from_arrays(pa.array([0] * (n + 1), pa.int32()),
                                                 pa.array([], HEADER), type=pa.list_(HEADER))
    columns = [
        pa.array(field("key"), pa.binary()),
        pa.array(field("value"), pa.binary()),
        pa.array(field("topic"), pa.string()),
        pa.array(field("partition"), pa.int32()),
        pa.array(field("offset"), pa.int64()),
        timestamps,
        header_column,
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def _accessors(records: Sequence[KafkaRecord]) -> Callable[[str], list[Any]]:
    """`field(name)`: the accessor `name` called on every record. The messages of `consume()`
    go through `Message`'s own methods with `map`, which skips building a bound method per record
    (measured 12 % of the conversion at 100k records); other records one by one."""
    fast = bool(records) and type(records[0]) is Message

    def field(name: str) -> list[Any]:
        if fast:
            with contextlib.suppress(TypeError):  # not all of them messages: one by one
                return list(map(getattr(Message, name), records))
        return [getattr(r, name)() for r in records]

    return field


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


class Row:
    """One record of a `Batch`, with the accessors of a message (for dead letters and tests)."""

    __slots__ = ("_values",)

    def __init__(self, table: pa.Table, index: int) -> None:
        row = table.slice(index, 1)
        values = {name: row.column(name)[0].as_py() for name in
                  ("key", "value", "topic", "partition", "offset", "headers")}
        values["timestamp"] = row.column("timestamp").cast(pa.int64())[0].as_py()
        self._values = values

    def key(self) -> bytes | None:
        return self._values["key"]

    def value(self) -> bytes | None:
        return self._values["value"]

    def topic(self) -> str | None:
        return self._values["topic"]

    def partition(self) -> int | None:
        return self._values["partition"]

    def offset(self) -> int | None:
        return self._values["offset"]

    def timestamp(self) -> tuple[int, int]:
        ms = self._values["timestamp"]
        return (0, -1) if ms is None else (1, ms)

    def headers(self) -> Headers:
        return [(h["key"], h["value"]) for h in self._values["headers"]] or None

    def __repr__(self) -> str:
        return f"Row({self.topic()}[{self.partition()}]@{self.offset()})"


class Batch(Sequence[KafkaRecord]):
    """Records in Arrow form (SCHEMA) with the offset ranges they cover, computed once."""

    __slots__ = ("_ranges", "table")

    def __init__(self, table: pa.Table, ranges: Ranges | None = None) -> None:
        self.table = table
        self._ranges = ranges

    @classmethod
    def of(cls, records: Sequence[KafkaRecord]) -> Batch:
        return records if isinstance(records, Batch) else cls(to_arrow(records))

    @classmethod
    def concat(cls, batches: Sequence[Batch]) -> Batch:
        """The batches one after the other (no copy: the table gets one chunk per batch)."""
        if len(batches) == 1:
            return batches[0]
        if not batches:
            return cls(SCHEMA.empty_table(), {})
        table = pa.concat_tables([b.table for b in batches])
        if any(b._ranges is None for b in batches):
            return cls(table)
        ranges: Ranges = {}
        for b in batches:
            for tp, (first, last) in (b._ranges or {}).items():
                was = ranges.get(tp)
                ranges[tp] = (first, last) if was is None else (min(was[0], first),
                                                                max(was[1], last))
        return cls(table, ranges)

    @property
    def ranges(self) -> Ranges:
        """First and last offset in each partition the batch covers."""
        if self._ranges is None:
            if self.table.num_rows == 0:
                self._ranges = {}
            else:
                grouped = self.table.group_by(["topic", "partition"], use_threads=False) \
                    .aggregate([("offset", "min"), ("offset", "max")])
                self._ranges = {
                    (t or "", p or 0): (lo or 0, hi or 0) for t, p, lo, hi in zip(
                        grouped.column("topic").to_pylist(),
                        grouped.column("partition").to_pylist(),
                        grouped.column("offset_min").to_pylist(),
                        grouped.column("offset_max").to_pylist(), strict=True)}
        return self._ranges

    @property
    def payload_bytes(self) -> int:
        """Bytes of keys plus values, what `maxBytes` counts."""
        return int(pc.sum(self.record_bytes()).as_py() or 0)

    def record_bytes(self) -> pa.ChunkedArray:
        """Each record's bytes of key plus value (a null counts 0)."""
        key, value = (pc.fill_null(pc.binary_length(self.table.column(c)), 0)
                      for c in ("key", "value"))
        return pc.add(key, value)

    def fitting(self, max_bytes: int) -> int:
        """How many of the first records fit in `max_bytes` (at least one)."""
        over = pc.sum(pc.greater(pc.cumulative_sum(self.record_bytes()), max_bytes)).as_py()
        return max(1, len(self) - (over or 0))

    def without(self, partitions: Iterable[TopicPartition]) -> Batch:
        """The records not in `partitions`."""
        gone = set(partitions) & set(self.ranges)
        if not gone:
            return self
        if set(self.ranges) <= gone:
            return Batch(self.table.slice(0, 0), {})
        drop = None
        for topic, part in gone:
            hit = pc.and_(pc.equal(self.table.column("topic"), topic),
                          pc.equal(self.table.column("partition"), part))
            drop = hit if drop is None else pc.or_(drop, hit)
        return Batch(self.table.filter(pc.invert(drop)),
                     {tp: r for tp, r in self.ranges.items() if tp not in gone})

    def __len__(self) -> int:
        return self.table.num_rows

    @overload
    def __getitem__(self, index: int) -> Row: ...
    @overload
    def __getitem__(self, index: slice) -> Batch: ...

    def __getitem__(self, index: int | slice) -> Row | Batch:
        n = self.table.num_rows
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                raise ValueError("a Batch slices with step 1 only")
            return Batch(self.table.slice(start, max(0, stop - start)))
        i = operator.index(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(index)
        return Row(self.table, i)

    def __iter__(self) -> Iterator[KafkaRecord]:
        return (Row(self.table, i) for i in range(self.table.num_rows))

    def __repr__(self) -> str:
        return f"Batch({self.table.num_rows} records, {sorted(self.ranges.items())})"


def offset_ranges(records: Sequence[KafkaRecord]) -> Ranges:
    """First and last offset of the batch in each partition it covers."""
    if isinstance(records, Batch):
        return dict(records.ranges)
    ranges: Ranges = {}
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
