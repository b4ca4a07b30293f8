import pytest

from consumer_runtime.buffer import BatchBuffer
from consumer_runtime.config import BatchLimits
from tests.unit.runtime.fakes import Rec, recs

pytestmark = pytest.mark.unit


def buffer(records: int = 5, wait_ms: int = 1000, nbytes: int = 1 << 20) -> BatchBuffer:
    return BatchBuffer(BatchLimits(max_records=records, max_wait_ms=wait_ms, max_bytes=nbytes))


def test_empty_buffer_is_never_due() -> None:
    b = buffer()
    assert not b.due(1e9) and b.wait_left(5.0) is None and b.room() == 10


def test_due_by_count_and_full_only_with_the_batch_after_it_gathered_too() -> None:
    b = buffer()
    b.add(recs("a", 0, range(4)), now=10.0)
    assert not b.due(10.0) and b.room() == 6
    b.add(recs("a", 0, range(4, 5)), now=10.1)
    assert b.due(10.1) and not b.full() and b.room() == 5
    b.add(recs("a", 0, range(5, 10)), now=10.2)
    assert b.full() and b.room() == 1


def test_due_by_bytes() -> None:
    b = buffer(nbytes=10)
    b.add([Rec("a", 0, 0, k=b"kk", v=b"x" * 8)], now=0.0)
    assert b.due(0.0) and not b.full()
    b.add([Rec("a", 0, 1, k=b"kk", v=b"x" * 8)], now=0.0)
    assert b.full()


@pytest.mark.parametrize(("sizes", "max_bytes", "taken"), [
    ([4, 4, 4, 4], 8, 2),     # exactly fits
    ([4, 4, 4, 4], 9, 2),
    ([4, 4, 4, 4], 100, 4),   # all of them, under the record cap
    ([20, 1, 1, 1], 10, 1),   # one record over the cap still goes, alone
    ([0, 0, 12, 1], 10, 2),   # empty values count nothing
])
def test_take_gives_at_most_max_bytes_and_keeps_the_rest(sizes: list[int], max_bytes: int,
                                                           taken: int) -> None:
    b = buffer(records=4, nbytes=max_bytes)
    b.add([Rec("a", 0, i, k=None, v=b"x" * n) for i, n in enumerate(sizes)], now=1.0)
    batch = b.take(now=2.0)
    assert [r.offset() for r in batch] == list(range(taken))
    assert len(b) == len(sizes) - taken and b.bytes == sum(sizes[taken:])
    assert batch.ranges == {("a", 0): (0, taken - 1)}


def test_due_by_time_since_first_record() -> None:
    b = buffer(wait_ms=1000)
    b.add(recs("a", 0, range(1)), now=10.0)
    b.add(recs("a", 0, range(1, 2)), now=10.9)
    assert b.wait_left(10.5) == pytest.approx(0.5)
    assert not b.due(10.99) and b.due(11.0)


def test_take_caps_at_max_records_and_keeps_the_rest_as_a_new_batch() -> None:
    b = buffer(records=3)
    b.add(recs("a", 0, range(5)), now=1.0)
    assert [r.offset() for r in b.take(now=2.0)] == [0, 1, 2]
    assert len(b) == 2 and b.wait_left(2.0) == pytest.approx(1.0)
    assert [r.offset() for r in b.take(now=3.0)] == [3, 4] and len(b) == 0 and b.bytes == 0


def test_drop_forgets_partitions_no_longer_owned() -> None:
    b = buffer(records=10)
    b.add([*recs("a", 0, range(3)), *recs("a", 1, range(2))], now=1.0)
    assert b.drop({("a", 0)}, now=5.0) == 3
    assert [(r.partition(), r.offset()) for r in b.records] == [(1, 0), (1, 1)]
    assert b.wait_left(1.5) == pytest.approx(0.5)
    assert b.drop({("a", 1)}, now=5.0) == 2 and b.wait_left(5.0) is None


def test_bytes_follow_take_and_drop() -> None:
    b = buffer(records=3)
    b.add([Rec("a", 0, 0, k=b"kk", v=b"x" * 8), Rec("a", 1, 0, k=None, v=b"yyy")], now=0.0)
    b.add([Rec("a", 0, 1, k=b"k", v=None), Rec("a", 1, 1, k=b"k", v=b"z")], now=0.5)
    assert b.bytes == 10 + 3 + 1 + 2
    taken = b.take(now=1.0)
    assert len(taken) == 3 and taken.payload_bytes == 14 and b.bytes == 2
    assert b.drop({("a", 1)}, now=2.0) == 1 and len(b) == 0 and b.bytes == 0


def test_take_gives_one_batch_with_the_ranges_of_all_polls() -> None:
    b = buffer(records=10)
    b.add(recs("a", 0, range(3)), now=1.0)
    b.add([*recs("a", 0, range(3, 5)), *recs("b", 2, range(7, 9))], now=1.1)
    batch = b.take(now=1.2)
    assert batch.ranges == {("a", 0): (0, 4), ("b", 2): (7, 8)}
    assert batch.table.num_rows == 7


def test_after_an_assignment_the_first_batch_is_due_as_soon_as_it_holds_records() -> None:
    b = buffer(records=100, wait_ms=1000)
    b.catch_up(now=10.0)
    assert not b.due(10.0) and b.catching_up(10.0), "nothing fetched yet"
    b.add(recs("a", 0, range(3)), now=10.05)
    assert b.due(10.05) and b.wait_left(10.05) == 0.0
    assert [r.offset() for r in b.take(now=10.06)] == [0, 1, 2]
    b.fetched_all()
    # The steady state again: the next batch waits maxWaitMs for more records.
    b.add(recs("a", 0, range(3, 4)), now=10.1)
    assert not b.catching_up(10.1) and not b.due(10.5) and b.due(11.1)


def test_catching_up_lasts_until_every_assigned_partition_answered_a_fetch() -> None:
    """The partitions start fetching one by one: a first fetch that brought one partition's
    waiting records leaves the others' due at once too (before, they waited maxWaitMs: seen
    in CI, 21 s of a 20 s maxWaitMs for half the records waiting at an activation)."""
    b = buffer(records=100, wait_ms=20_000)
    b.catch_up(now=10.0)
    b.add(recs("a", 0, range(15)), now=10.1)
    assert len(b.take(now=10.1)) == 15 and b.catching_up(10.2), "b 1 has not answered yet"
    b.add(recs("a", 1, range(15)), now=10.4)
    b.fetched_all()
    assert b.due(10.4) and len(b.take(now=10.4)) == 15
    b.add(recs("a", 1, range(15, 16)), now=10.5)
    assert not b.catching_up(10.5) and not b.due(29.0) and b.due(30.5)


def test_every_partition_answering_with_nothing_ends_catching_up_at_once() -> None:
    b = buffer(records=100, wait_ms=1000)
    b.catch_up(now=10.0)
    b.fetched_all()
    b.add(recs("a", 0, range(1)), now=10.2)
    assert not b.catching_up(10.2) and not b.due(10.5) and b.due(11.2)


def test_catching_up_ends_after_max_wait_with_nothing_fetched() -> None:
    b = buffer(records=100, wait_ms=1000)
    b.catch_up(now=10.0)
    b.add(recs("a", 0, range(1)), now=11.5)
    assert not b.catching_up(11.5) and not b.due(11.5) and b.due(12.5)


def test_records_of_revoked_partitions_dropped_while_catching_up_keep_it() -> None:
    b = buffer(records=100, wait_ms=1000)
    b.add(recs("a", 0, range(2)), now=9.0)
    b.catch_up(now=10.0)
    assert b.drop({("a", 0)}, now=10.0) == 2 and not b.due(10.0)
    b.add(recs("a", 1, range(2)), now=10.1)
    assert b.due(10.1)


def test_a_staged_batch_is_cut_once_counts_in_the_buffer_and_goes_first() -> None:
    b = buffer(records=5)
    b.add(recs("a", 0, range(4)), now=1.0)
    assert b.stage(1.0) is None, "not due yet: nothing cut"
    b.add(recs("a", 0, range(4, 8)), now=1.1)
    staged = b.stage(1.1)
    assert staged is not None and [r.offset() for r in staged] == [0, 1, 2, 3, 4]
    assert b.stage(1.2) is None, "one staged batch at a time"
    assert len(b) == 8 and b.room() == 2 and b.due(1.1) and b.wait_left(1.1) == 0.0
    b.add(recs("a", 0, range(8, 10)), now=1.2)
    assert b.full(), "the staged batch counts toward the depth"
    assert b.take(1.3) is staged
    assert [r.offset() for r in b.take(1.4)] == [5, 6, 7, 8, 9] and len(b) == 0


def test_a_revoke_filters_the_staged_batch_into_a_new_one_or_none() -> None:
    b = buffer(records=4)
    b.add(recs("a", 0, range(2)) + recs("a", 1, range(2)), now=1.0)
    staged = b.stage(1.0)
    assert staged is not None
    b.add(recs("a", 1, range(2, 4)), now=1.1)
    assert b.drop({("a", 1)}, 1.2) == 4
    assert b.staged is not None and b.staged is not staged
    assert [(r.partition(), r.offset()) for r in b.staged] == [(0, 0), (0, 1)]
    assert len(b) == 2
    assert b.drop({("a", 0)}, 1.3) == 2 and b.staged is None and not b.due(5.0)
