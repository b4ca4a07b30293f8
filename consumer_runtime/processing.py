"""One batch from polled records to an accepted sink write: retries, then poison isolation.

The batch is tried `retry.attempts` times with doubling backoff. If it still fails and a
dead-letter topic is set, it is bisected: halves that succeed go to the sink, records that fail
alone go to the dead-letter topic, and the batch counts as done so its offsets can be committed.
Without a dead-letter topic, or when the failure looks systematic rather than a few poison records,
the batch fails and the member stops without committing it. A `SinkError` (the sink computed the
batch but could not store it) is retried the same way and then stops the member: it is never
bisected, since every sub-batch would meet the same storage and good records would be
dead-lettered and committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from consumer_runtime.config import RetrySettings
from consumer_runtime.delivery import (
    Isolation,
    SinkError,
    isolate_failures,
    next_attempt_at,
)
from consumer_runtime.records import KafkaRecord
from consumer_runtime.termination import error_line

log = logging.getLogger(__name__)
MAX_DEAD_PER_BATCH = 32
"""More records than this failing alone in one batch is not poison but a broken transform."""


class BatchFailed(RuntimeError):
    """A batch that could not be processed; the member stops and does not commit it."""


class TooManyFailures(RuntimeError):
    pass


@dataclass(frozen=True)
class Outcome:
    records: int
    dead_lettered: int
    attempts: int
    seconds: float


RunBatch = Callable[[int, Sequence[KafkaRecord]], None]
SendDead = Callable[[Sequence[tuple[KafkaRecord, BaseException]]], None]


class BatchProcessor:
    def __init__(self, run: Callable[[], RunBatch], retry: RetrySettings,
                 dead_letters: SendDead | None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`run` gives the batch runner, waiting for it if needed (Spark may still be starting)."""
        self.run = run
        self.retry = retry
        self.dead_letters = dead_letters
        self.sleep = sleep
        self.clock = clock

    def handle(self, batch_id: int, records: Sequence[KafkaRecord]) -> Outcome:
        runner = self.run()
        began = self.clock()
        attempt = 0
        error: BaseException | None = None
        while True:
            attempt += 1
            try:
                runner(batch_id, records)
                return Outcome(len(records), 0, attempt, self.clock() - began)
            except SinkError as exc:
                at = next_attempt_at(self.clock(), attempt, self.retry)
                if at is None:
                    raise BatchFailed(f"batch {batch_id}: sink failed {attempt} times: "
                                      f"{exc}") from exc
                error = exc
            except Exception as exc:
                error = exc
                at = next_attempt_at(self.clock(), attempt, self.retry)
                if at is None:
                    break
            log.warning("batch %d attempt %d failed (%s); retrying in %.2f s", batch_id,
                        attempt, _describe(error), at - self.clock())
            self.sleep(max(0.0, at - self.clock()))
        if self.dead_letters is None:
            raise BatchFailed(f"batch {batch_id} failed {attempt} times and no dead-letter "
                              f"topic is set: {_describe(error)}") from error
        assert error is not None
        isolation = self._isolate(batch_id, records, error)
        log.warning("batch %d: %d records processed in %d sub-batches, %d dead-lettered",
                    batch_id, isolation.processed, isolation.calls, len(isolation.failed))
        self.dead_letters(isolation.failed)
        return Outcome(len(records), len(isolation.failed), attempt, self.clock() - began)

    def _isolate(self, batch_id: int, records: Sequence[KafkaRecord],
                 error: BaseException) -> Isolation[KafkaRecord]:
        failures = 0

        def process(chunk: Sequence[KafkaRecord]) -> None:
            nonlocal failures
            try:
                self.run()(batch_id, chunk)
            except SinkError:
                raise
            except Exception:
                if len(chunk) == 1:
                    failures += 1
                    if failures > MAX_DEAD_PER_BATCH:
                        raise TooManyFailures() from None
                raise

        try:
            isolation = isolate_failures(records, process, error,
                                         fatal=(SinkError, TooManyFailures))
        except TooManyFailures:
            raise BatchFailed(f"batch {batch_id}: more than {MAX_DEAD_PER_BATCH} records fail on "
                              f"their own; not poison records, the transform is broken: "
                              f"{_describe(error)}") from error
        if len(records) > 1 and len(isolation.failed) == len(records):
            raise BatchFailed(f"batch {batch_id}: every record fails on its own; not poison "
                              f"records: {_describe(error)}") from error
        return isolation


def _describe(error: BaseException | None) -> str:
    """The error's type and message in one line (never a line of its stack trace)."""
    return error_line(error, limit=500) if error is not None else "no error recorded"
