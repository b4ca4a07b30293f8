"""The batches being gathered while the previous one is processed. Pure: time is an argument.

Records are converted to Arrow as they are added, one polled chunk at a time, so the poll thread
does that work while the worker waits on Spark, and a full batch is handed over ready to use.

The buffer holds up to `DEPTH` batches: once the next batch is due, the poll thread goes on
gathering the one after it instead of waiting for the worker (the timeline showed the worker
idle for a third of the time at 100k-record batches: each batch was gathered only after the
previous one had been handed over). Records gathered but not handed over were never processed;
a crash or a revoke forgets them and nothing is committed for them.

The next batch can be cut early (`stage`) while the worker is still busy with the one before,
so Spark builds its DataFrame meanwhile (consumer_runtime/spark.py, `SparkBatch.prepare`); a
staged batch is still the buffer's: counted in its size, handed out by the next `take`, filtered
by `drop`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from consumer_runtime.config import BatchLimits
from consumer_runtime.records import Batch, KafkaRecord, TopicPartition

DEPTH = 2
"""Batches the buffer gathers before the poll loop holds: the next one and the one after it."""


class BatchBuffer:
    """Records polled but not yet handed to processing, as Arrow chunks.

    A batch is due when it holds `maxRecords` records or `maxBytes` bytes, or when its first record
    has waited `maxWaitMs`. The buffer is full at `depth` times those sizes.

    After an assignment (`catch_up`) batches do not wait: records that were already waiting on
    the partitions are due as soon as a fetch brought them. `maxWaitMs` paces the steady state,
    not the resumption (a warm handoff's processing gap). Catching up ends with the batch cut
    once every assigned partition has answered a fetch (`fetched_all`: what waited is in the
    buffer or handed out; the partitions start fetching one by one, so the first fetch may
    bring one partition's records only), or after `maxWaitMs`.
    """

    def __init__(self, limits: BatchLimits, depth: int = DEPTH) -> None:
        self.limits = limits
        self.depth = depth
        self.chunks: list[Batch] = []
        self.count = 0
        self.bytes = 0
        self.first_at: float | None = None
        self.catching_up_until: float | None = None
        self.all_fetched = False
        """Every partition assigned has answered a fetch since the assignment (`fetched_all`)."""
        self.staged: Batch | None = None
        """The next batch, cut early (`stage`): what the next `take` hands out."""

    def __len__(self) -> int:
        return self.count + self._staged_count()

    def _staged_count(self) -> int:
        return 0 if self.staged is None else len(self.staged)

    def _staged_bytes(self) -> int:
        return 0 if self.staged is None else self.staged.payload_bytes

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

    def catch_up(self, now: float) -> None:
        """Partitions were just assigned: the next batches are due once they hold records."""
        self.catching_up_until = now + self.limits.max_wait_ms / 1000.0
        self.all_fetched = False

    def fetched_all(self) -> None:
        """Every assigned partition has answered a fetch: catching up ends with the batch that
        holds what they brought, at once when nothing is left to cut."""
        self.all_fetched = True
        if self.count == 0:
            self.catching_up_until = None

    def catching_up(self, now: float) -> bool:
        return self.catching_up_until is not None and now < self.catching_up_until

    def room(self) -> int:
        """How many records may still be polled into the buffer (at least 1)."""
        return max(1, self.depth * self.limits.max_records - len(self))

    def full(self) -> bool:
        """`depth` batches gathered: time to stop polling records."""
        return (len(self) >= self.depth * self.limits.max_records
                or self.bytes + self._staged_bytes() >= self.depth * self.limits.max_bytes)

    def due(self, now: float) -> bool:
        """A batch is ready to hand over."""
        return self.staged is not None or self._gathered(now)

    def _gathered(self, now: float) -> bool:
        """The records not staged make a batch."""
        return (self.count >= self.limits.max_records or self.bytes >= self.limits.max_bytes
                or (self.first_at is not None
                    and (now - self.first_at >= self.limits.max_wait_ms / 1000.0
                         or self.catching_up(now))))

    def wait_left(self, now: float) -> float | None:
        """Seconds until the batch is due by time; None while it is empty."""
        if self.staged is not None:
            return 0.0
        if self.first_at is None:
            return None
        if self.catching_up(now):
            return 0.0
        return max(0.0, self.first_at + self.limits.max_wait_ms / 1000.0 - now)

    def stage(self, now: float) -> Batch | None:
        """Cut the next batch now if it is due and none is staged yet; return it (None when
        nothing was cut). It stays the buffer's until `take` hands it out."""
        if self.staged is not None or not self._gathered(now):
            return None
        self.staged = self._cut(now)
        return self.staged

    def take(self, now: float) -> Batch:
        """Hand out one batch: the staged one, else the first records, up to maxRecords and
        maxBytes (at least one record); what is left over starts the next batch at `now`."""
        staged, self.staged = self.staged, None
        return staged if staged is not None else self._cut(now)

    def _cut(self, now: float) -> Batch:
        everything = self.records
        if self.all_fetched:
            self.catching_up_until = None
        n = min(len(everything), self.limits.max_records)
        if self.bytes > self.limits.max_bytes:
            n = everything[:n].fitting(self.limits.max_bytes)
        self._clear()
        if n < len(everything):
            self.add(everything[n:], now)
        return everything if n == len(everything) else everything[:n]

    def drop(self, partitions: Collection[TopicPartition], now: float) -> int:
        """Forget the records of partitions this member no longer owns, staged or not; return
        how many. A staged batch that loses records is a new object (`prepare` it again)."""
        dropped = 0
        if self.staged is not None:
            staged = self.staged.without(partitions)
            dropped = len(self.staged) - len(staged)
            self.staged = staged if len(staged) else None
        keep = [c.without(partitions) for c in self.chunks]
        kept = sum(len(c) for c in keep)
        gone = self.count - kept
        dropped += gone
        if gone:
            first_at = self.first_at
            self._clear()
            for chunk in keep:
                self.add(chunk, now)
            if kept:
                self.first_at = first_at
        return dropped

    def _clear(self) -> None:
        self.chunks, self.count, self.bytes, self.first_at = [], 0, 0, None

