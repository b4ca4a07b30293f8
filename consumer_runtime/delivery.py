"""At-least-once delivery decisions, pure: retry timing, finding poison records, DLQ headers."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from consumer_runtime.config import RetrySettings
from consumer_runtime.records import KafkaRecord, header_pairs

R = TypeVar("R")

ERROR_HEADER_LIMIT = 1000


class SinkError(RuntimeError):
    """The sink could not take a batch (broker or storage trouble): retried, never dead-lettered,
    and fatal to the member once retries are spent, so nothing is committed past it."""


def backoff_ms(attempt: int, retry: RetrySettings) -> int:
    """Delay after failed attempt number `attempt` (1-based): doubling, capped."""
    return int(min(retry.max_backoff_ms, retry.backoff_ms * 2 ** max(0, attempt - 1)))


def next_attempt_at(now: float, attempt: int, retry: RetrySettings) -> float | None:
    """When to try again after attempt `attempt` failed at `now`, or None when retries are spent."""
    if attempt >= retry.attempts:
        return None
    return now + backoff_ms(attempt, retry) / 1000.0


@dataclass
class Isolation(Generic[R]):
    """Outcome of splitting a failed batch: how many records went through, which ones failed."""

    processed: int = 0
    calls: int = 0
    failed: list[tuple[R, BaseException]] = field(default_factory=list)


def isolate_failures(records: Sequence[R], process: Callable[[Sequence[R]], object],
                     first_error: BaseException,
                     fatal: tuple[type[BaseException], ...] = (SinkError,)) -> Isolation[R]:
    """Bisect a batch known to fail (with `first_error`) until every failing record stands alone.

    `process` is called on disjoint halves, left before right, so each record is processed at most
    once by this function; records whose single-record call fails are returned with their error.
    Errors of the `fatal` types are not record failures: they propagate.
    """
    out: Isolation[R] = Isolation()
    stack: list[tuple[Sequence[R], BaseException | None]] = [(records, first_error)]
    while stack:
        chunk, error = stack.pop()
        if error is None:
            out.calls += 1
            try:
                process(chunk)
            except fatal:
                raise
            except Exception as exc:
                error = exc
            else:
                out.processed += len(chunk)
                continue
        if len(chunk) == 1:
            out.failed.append((chunk[0], error))
            continue
        mid = len(chunk) // 2
        stack.append((chunk[mid:], None))
        stack.append((chunk[:mid], None))
    return out


def dead_letter_headers(record: KafkaRecord, error: BaseException,
                        group: str) -> list[tuple[str, str | bytes | None]]:
    """The record's own headers plus the ones naming the error and where the record came from."""
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    own: list[tuple[str, str | bytes | None]] = list(header_pairs(record.headers()))
    return [
        *own,
        ("staticfleet.error", text[:ERROR_HEADER_LIMIT].encode()),
        ("staticfleet.error.class", type(error).__qualname__.encode()),
        ("staticfleet.source.topic", (record.topic() or "").encode()),
        ("staticfleet.source.partition", str(record.partition()).encode()),
        ("staticfleet.source.offset", str(record.offset()).encode()),
        ("staticfleet.group", group.encode()),
    ]
