from collections.abc import Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer_runtime.config import RetrySettings
from consumer_runtime.delivery import (
    SinkError,
    backoff_ms,
    dead_letter_headers,
    isolate_failures,
    next_attempt_at,
)
from tests.unit.runtime.fakes import Rec

pytestmark = pytest.mark.unit
RETRY = RetrySettings(attempts=4, backoff_ms=500, max_backoff_ms=1500)


@pytest.mark.parametrize(("attempt", "delay"), [(1, 500), (2, 1000), (3, 1500), (9, 1500)])
def test_backoff_doubles_and_is_capped(attempt: int, delay: int) -> None:
    assert backoff_ms(attempt, RETRY) == delay


@pytest.mark.parametrize(("attempt", "at"), [(1, 100.5), (3, 101.5), (4, None), (5, None)])
def test_next_attempt_until_attempts_are_spent(attempt: int, at: float | None) -> None:
    assert next_attempt_at(100.0, attempt, RETRY) == at


class Poison(ValueError):
    pass


def processor(poison: set[int], log: list[Sequence[int]]) -> Callable[[Sequence[int]], None]:
    def process(chunk: Sequence[int]) -> None:
        bad = poison.intersection(chunk)
        if bad:
            raise Poison(f"poison {min(bad)}")
        log.append(list(chunk))
    return process


@given(n=st.integers(1, 300), data=st.data())
def test_bisection_finds_exactly_the_poison_and_processes_the_rest_once(
        n: int, data: st.DataObject) -> None:
    poison = data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=min(n, 5)))
    done: list[Sequence[int]] = []
    out = isolate_failures(list(range(n)), processor(poison, done), Poison("whole batch"))
    assert sorted(r for r, _ in out.failed) == sorted(poison)
    assert all(isinstance(e, Poison) for _, e in out.failed)
    flat = [r for chunk in done for r in chunk]
    assert sorted(flat) == [r for r in range(n) if r not in poison]
    assert out.processed == n - len(poison)
    assert out.calls <= 2 * len(poison) * max(1, n.bit_length()) + 1


def test_single_record_batch_fails_without_another_call() -> None:
    calls: list[Sequence[int]] = []
    out = isolate_failures([7], calls.append, Poison("it"))
    assert [r for r, _ in out.failed] == [7] and calls == [] and out.calls == 0


def test_sink_errors_are_not_record_failures() -> None:
    def process(chunk: Sequence[int]) -> None:
        raise SinkError("broker gone")

    with pytest.raises(SinkError):
        isolate_failures([1, 2, 3], process, Poison("x"))


def test_dead_letter_headers_name_error_and_source() -> None:
    rec = Rec("orders", 4, 1234, h=[("trace", b"abc"), ("empty", None)])
    headers = dict(dead_letter_headers(rec, Poison("bad value\nmore"), "g1"))
    assert headers["trace"] == b"abc" and headers["empty"] is None
    assert headers["staticfleet.error"] == (b"tests.unit.runtime.test_delivery.Poison: "
                                            b"bad value\nmore")
    assert headers["staticfleet.error.class"] == b"Poison"
    assert headers["staticfleet.source.topic"] == b"orders"
    assert headers["staticfleet.source.partition"] == b"4"
    assert headers["staticfleet.source.offset"] == b"1234"
    assert headers["staticfleet.group"] == b"g1"
