from collections.abc import Sequence

import pytest

from consumer_runtime.config import RetrySettings
from consumer_runtime.delivery import SinkError
from consumer_runtime.processing import MAX_DEAD_PER_BATCH, BatchFailed, BatchProcessor
from consumer_runtime.records import KafkaRecord
from tests.unit.runtime.fakes import recs

pytestmark = pytest.mark.unit
RETRY = RetrySettings(attempts=3, backoff_ms=100, max_backoff_ms=1000)


class FakeRun:
    """Fails for records whose value is b"bad"; can fail the first `flaky` whole calls too."""

    def __init__(self, flaky: int = 0, sink_down: bool = False) -> None:
        self.flaky = flaky
        self.sink_down = sink_down
        self.written: list[int] = []
        self.calls = 0

    def __call__(self, batch_id: int, records: Sequence[KafkaRecord]) -> None:
        self.calls += 1
        if self.sink_down:
            raise SinkError("broker unreachable")
        if self.flaky:
            self.flaky -= 1
            raise RuntimeError("executor lost")
        if any(r.value() == b"bad" for r in records):
            raise ValueError("cannot parse")
        self.written.extend(r.offset() or 0 for r in records)


def make(run: FakeRun, dead: list[tuple[int, str]] | None) -> tuple[BatchProcessor, list[float]]:
    sleeps: list[float] = []
    send = None
    if dead is not None:
        def send(failed: Sequence[tuple[KafkaRecord, BaseException]]) -> None:
            dead.extend((r.offset() or 0, str(e)) for r, e in failed)
    clock = iter(range(1000))
    return BatchProcessor(lambda: run, RETRY, send, sleep=sleeps.append,
                          clock=lambda: float(next(clock))), sleeps


def test_transient_failure_is_retried_with_backoff() -> None:
    run = FakeRun(flaky=2)
    proc, sleeps = make(run, [])
    out = proc.handle(1, recs("a", 0, range(4)))
    assert (out.records, out.dead_lettered, out.attempts) == (4, 0, 3)
    assert run.written == [0, 1, 2, 3] and len(sleeps) == 2


def test_poison_record_is_dead_lettered_and_the_rest_written() -> None:
    batch = [*recs("a", 0, range(0, 5)), *recs("a", 0, range(5, 6), b"bad"),
             *recs("a", 0, range(6, 9))]
    run, dead = FakeRun(), []
    proc, _ = make(run, dead)
    out = proc.handle(1, batch)
    assert out.dead_lettered == 1 and dead == [(5, "cannot parse")]
    assert sorted(run.written) == [0, 1, 2, 3, 4, 6, 7, 8]


def test_without_dead_letter_topic_the_batch_fails() -> None:
    proc, _ = make(FakeRun(), None)
    with pytest.raises(BatchFailed, match=r"no dead-letter topic is set: ValueError: cannot "
                                          r"parse$"):
        proc.handle(1, recs("a", 0, range(2), b"bad"))


def test_sink_failure_is_never_dead_lettered() -> None:
    dead: list[tuple[int, str]] = []
    proc, sleeps = make(FakeRun(sink_down=True), dead)
    with pytest.raises(BatchFailed, match="sink failed 3 times"):
        proc.handle(1, recs("a", 0, range(3)))
    assert dead == [] and len(sleeps) == 2


def test_a_batch_where_every_record_fails_is_not_poison() -> None:
    dead: list[tuple[int, str]] = []
    proc, _ = make(FakeRun(), dead)
    with pytest.raises(BatchFailed, match="every record fails on its own"):
        proc.handle(1, recs("a", 0, range(4), b"bad"))
    assert dead == []


def test_too_many_poison_records_stop_the_member() -> None:
    batch = recs("a", 0, range(MAX_DEAD_PER_BATCH + 1), b"bad") + recs("a", 0, range(100, 400))
    proc, _ = make(FakeRun(), [])
    with pytest.raises(BatchFailed, match=f"more than {MAX_DEAD_PER_BATCH} records"):
        proc.handle(1, batch)
