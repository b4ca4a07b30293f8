"""The next batch's DataFrame built ahead (`SparkBatch.prepare`), with a session that records
what it was asked: the batch that runs takes the frame built for that very object, any other
batch gets its own, and a frame that failed ahead is built again by the batch."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from consumer_runtime.records import Batch
from consumer_runtime.spark import PREPARE_MAX_BYTES, SparkBatch
from consumer_runtime.timeline import PREPARE, WORKER, Timeline
from tests.unit.runtime.fakes import recs

pytestmark = pytest.mark.unit


class Session:
    """createDataFrame: a made-up frame per call, named after the thread that asked; the
    first `failures` calls fail."""

    def __init__(self, failures: int = 0) -> None:
        self.calls: list[tuple[str, int]] = []
        self.failures = failures

    def createDataFrame(self, table: Any) -> tuple[str, int]:
        self.calls.append((threading.current_thread().name, table.num_rows))
        if len(self.calls) <= self.failures:
            raise RuntimeError("JVM said no")
        return ("frame", len(self.calls))


class Sink:
    def __init__(self) -> None:
        self.written: list[Any] = []

    def write(self, df: Any, name: str) -> None:
        self.written.append(df)


def spark_batch(session: Session) -> tuple[SparkBatch, Sink, Timeline]:
    sink, timeline = Sink(), Timeline(keep=100)
    batch = SparkBatch(session, lambda df, ctx: df, sink, "g", "m", timeline)  # type: ignore[arg-type]
    return batch, sink, timeline


def test_the_batch_that_runs_takes_the_frame_built_ahead_for_it() -> None:
    session = Session()
    sb, sink, timeline = spark_batch(session)
    batch = Batch.of(recs("a", 0, range(4)))
    sb.prepare(7, batch)
    sb.run(7, batch)
    assert len(session.calls) == 1 and session.calls[0][0].startswith("frame")
    assert sink.written == [("frame", 1)]
    assert {(s.thread, s.stage, s.batch) for s in timeline.spans} == {
        (PREPARE, "frame", 7), (WORKER, "frame", 7), (WORKER, "job", 7)}


def test_another_batch_builds_its_own_and_the_stale_frame_is_dropped() -> None:
    session = Session()
    sb, sink, _ = spark_batch(session)
    staged = Batch.of(recs("a", 0, range(4)))
    sb.prepare(2, staged)
    cut_again = Batch.of(recs("a", 0, range(3)))
    sb.run(2, cut_again)
    sb.run(3, staged)
    assert [rows for _, rows in session.calls] == [4, 3, 4], \
        "the frame built ahead is used by its own batch only, and only once"
    assert len(sink.written) == 2


def test_a_frame_that_failed_ahead_is_built_again_by_the_batch() -> None:
    session = Session(failures=1)
    sb, sink, _ = spark_batch(session)
    batch = Batch.of(recs("a", 0, range(4)))
    sb.prepare(1, batch)
    sb.run(1, batch)
    assert sink.written == [("frame", 2)]


def test_a_batch_too_large_is_not_built_ahead() -> None:
    session = Session()
    sb, _, _ = spark_batch(session)
    big = Batch.of(recs("a", 0, range(2), value=b"x" * (PREPARE_MAX_BYTES // 2 + 1)))
    sb.prepare(1, big)
    sb.run(1, big)
    assert [thread for thread, _ in session.calls] == [threading.current_thread().name]
