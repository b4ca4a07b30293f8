"""The batch being gathered while the previous one is processed. Pure: time is an argument.

Records are converted to Arrow as they are added, one polled chunk at a time, so the poll thread
does that work while the worker waits on Spark, and a full batch is handed over ready to use.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from consumer_runtime.config import BatchLimits
from consumer_runtime.records import Batch, KafkaRecord, TopicPartition


class BatchBuffer:
    """Records polled but not yet handed to processing, as Arrow chunks.

    A batch is due when it holds `maxRecords` records or `maxBytes` bytes, or when its first record
    has waited `maxWaitMs`.
    """

    def __init__(self, limits: BatchLimits) -> None:
        self.limits = limits
        self.chunks: list[Batch] = []
        self.count = 0
        self.bytes = 0
        self.first_at: float | None = None

    def __len__(self) -> int:
        return self.count

    @property
    def records(self) -> Batch:
        """Everything gathered, as one batch (no copy)."""
        return Batch.concat(self.chunks)

    def add(self, records: Sequence[KafkaRecord], now: float) -> None:
        if not len(records):
            return
        chunk = Batch.of(records)
        self.chunks.append(chunk)
        self.count += len(chunk)
        self.bytes += chunk.payload_bytes
        if self.first_at is None:
            self.first_at = now

    def room(self) -> int:
        """How many records may still be polled into this batch (at least 1)."""
        return max(1, self.limits.max_records - self.count)

    def full(self) -> bool:
        return self.count >= self.limits.max_records or self.bytes >= self.limits.max_bytes

    def due(self, now: float) -> bool:
        return self.full() or (self.first_at is not None
                               and now - self.first_at >= self.limits.max_wait_ms / 1000.0)

    def wait_left(self, now: float) -> float | None:
        """Seconds until the batch is due by time; None while it is empty."""
        if self.first_at is None:
            return None
        return max(0.0, self.first_at + self.limits.max_wait_ms / 1000.0 - now)

    def take(self, now: float) -> Batch:
        """Hand out up to maxRecords records; what is left over starts the next batch at `now`."""
        everything = self.records
        self._clear()
        if len(everything) <= self.limits.max_records:
            return everything
        self.add(everything[self.limits.max_records:], now)
        return everything[:self.limits.max_records]

    def drop(self, partitions: Collection[TopicPartition], now: float) -> int:
        """Forget the records of partitions this member no longer owns; return how many."""
        keep = [c.without(partitions) for c in self.chunks]
        kept = sum(len(c) for c in keep)
        dropped = self.count - kept
        if dropped:
            first_at = self.first_at
            self._clear()
            for chunk in keep:
                self.add(chunk, now)
            if kept:
                self.first_at = first_at
        return dropped

    def _clear(self) -> None:
        self.chunks, self.count, self.bytes, self.first_at = [], 0, 0, None
