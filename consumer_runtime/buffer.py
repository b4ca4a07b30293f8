"""The batch being gathered while the previous one is processed. Pure: time is an argument."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Generic, TypeVar

from consumer_runtime.config import BatchLimits
from consumer_runtime.records import KafkaRecord, TopicPartition, payload_bytes, where

R = TypeVar("R", bound=KafkaRecord)


class BatchBuffer(Generic[R]):
    """Records polled but not yet handed to processing.

    A batch is due when it holds `maxRecords` records or `maxBytes` bytes, or when its first record
    has waited `maxWaitMs`.
    """

    def __init__(self, limits: BatchLimits) -> None:
        self.limits = limits
        self.records: list[R] = []
        self.bytes = 0
        self.first_at: float | None = None

    def __len__(self) -> int:
        return len(self.records)

    def add(self, records: Iterable[R], now: float) -> None:
        for r in records:
            self.records.append(r)
            self.bytes += payload_bytes(r)
        if self.records and self.first_at is None:
            self.first_at = now

    def room(self) -> int:
        """How many records may still be polled into this batch (at least 1)."""
        return max(1, self.limits.max_records - len(self.records))

    def full(self) -> bool:
        return (len(self.records) >= self.limits.max_records
                or self.bytes >= self.limits.max_bytes)

    def due(self, now: float) -> bool:
        return self.full() or (self.first_at is not None
                               and now - self.first_at >= self.limits.max_wait_ms / 1000.0)

    def wait_left(self, now: float) -> float | None:
        """Seconds until the batch is due by time; None while it is empty."""
        if self.first_at is None:
            return None
        return max(0.0, self.first_at + self.limits.max_wait_ms / 1000.0 - now)

    def take(self, now: float) -> list[R]:
        """Hand out up to maxRecords records; what is left over starts the next batch at `now`."""
        taken = self.records[:self.limits.max_records]
        rest = self.records[self.limits.max_records:]
        self.records, self.bytes, self.first_at = [], 0, None
        self.add(rest, now)
        return taken

    def drop(self, partitions: Collection[TopicPartition], now: float) -> int:
        """Forget the records of partitions this member no longer owns; return how many."""
        keep = [r for r in self.records if where(r) not in partitions]
        dropped = len(self.records) - len(keep)
        if dropped:
            first_at = self.first_at
            self.records, self.bytes, self.first_at = [], 0, None
            self.add(keep, now)
            if keep:
                self.first_at = first_at
        return dropped
