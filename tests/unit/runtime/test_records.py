import datetime as dt

import pytest

from consumer_runtime.records import (
    SCHEMA,
    Batch,
    batch_name,
    next_offsets,
    offset_ranges,
    to_arrow,
)
from tests.unit.runtime.fakes import Rec, recs

pytestmark = pytest.mark.unit


def test_arrow_table_has_every_field_of_the_record() -> None:
    batch = [Rec("a", 0, 5, k=None, v=b"x" * 3, h=[("h1", b"1"), ("h2", None)]),
             Rec("a", 1, 9, k=b"key", v=None, ts=-1)]
    table = to_arrow(batch)
    assert table.schema == SCHEMA
    rows = table.to_pylist()
    assert rows[0]["key"] is None and rows[0]["value"] == b"xxx"
    assert rows[0]["headers"] == [{"key": "h1", "value": b"1"}, {"key": "h2", "value": None}]
    assert rows[0]["timestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    assert (rows[1]["topic"], rows[1]["partition"], rows[1]["offset"]) == ("a", 1, 9)
    assert rows[1]["timestamp"] is None and rows[1]["headers"] == []


def test_empty_batch_gives_empty_table_with_schema() -> None:
    assert to_arrow([]).num_rows == 0
    assert to_arrow([]).schema == SCHEMA


def test_offsets_to_commit_are_highest_plus_one_per_partition() -> None:
    batch = [*recs("a", 0, range(10, 13)), *recs("a", 1, range(0, 2)), Rec("b", 0, 7),
             Rec("a", 0, 11)]
    assert next_offsets(batch) == {("a", 0): 13, ("a", 1): 2, ("b", 0): 8}
    assert offset_ranges(batch)[("a", 0)] == (10, 12)


def test_batch_name_depends_on_offsets_only() -> None:
    one = recs("orders/x", 2, range(5, 9))
    assert batch_name(one) == "orders_x-2-5-8"
    assert batch_name(list(reversed(one))) == batch_name(one)
    mixed = [*recs("a", 0, range(3)), *recs("a", 1, range(3))]
    assert batch_name(mixed).startswith("batch-")
    assert batch_name(list(reversed(mixed))) == batch_name(mixed)
    assert batch_name(mixed[:-1]) != batch_name(mixed)


def test_batch_is_a_sequence_of_records_in_arrow_form() -> None:
    records = [Rec("a", 0, 5, k=None, v=b"xyz", h=[("h1", b"1"), ("h2", None)]),
               *recs("a", 1, range(3), value=b"vv"), Rec("b", 0, 9, ts=-1)]
    batch = Batch.of(records)
    assert len(batch) == 5 and batch.table.schema == SCHEMA
    assert batch.ranges == offset_ranges(records)
    assert next_offsets(batch) == next_offsets(records)
    assert batch_name(batch) == batch_name(records)
    first, last = batch[0], batch[-1]
    assert (first.key(), first.value(), first.topic(), first.partition(), first.offset()) == \
        (None, b"xyz", "a", 0, 5)
    assert first.headers() == [("h1", b"1"), ("h2", None)] and batch[1].headers() is None
    assert first.timestamp() == (1, 1_700_000_000_000) and last.timestamp() == (0, -1)
    half = batch[2:]
    assert isinstance(half, Batch) and [r.offset() for r in half] == [1, 2, 9]
    assert half.ranges == {("a", 1): (1, 2), ("b", 0): (9, 9)}
    assert half.payload_bytes == 2 * (1 + 2) + (1 + 1)
    assert batch.payload_bytes == 3 + 3 * 3 + 2


def test_concat_and_without_keep_ranges_right() -> None:
    one, two = Batch.of(recs("a", 0, range(0, 3))), Batch.of(recs("a", 0, range(3, 6)))
    two_more = Batch.of([*recs("a", 1, range(4)), *recs("a", 0, range(6, 8))])
    for b in (one, two, two_more):
        assert b.ranges
    both = Batch.concat([one, two, two_more])
    assert both.ranges == {("a", 0): (0, 7), ("a", 1): (0, 3)}
    assert Batch.concat([one, two_more[0:4]]).ranges == {("a", 0): (0, 2), ("a", 1): (0, 3)}
    rest = both.without({("a", 0), ("x", 9)})
    assert [r.partition() for r in rest] == [1, 1, 1, 1] and rest.ranges == {("a", 1): (0, 3)}
    assert len(both.without({("a", 0), ("a", 1)})) == 0
    assert both.without({("z", 0)}) is both


def test_arrow_timestamp_and_header_columns_match_the_record_by_record_form() -> None:
    """The fast column builders give what pyarrow builds from Python values one by one."""
    import pyarrow as pa
    batch = [Rec("t", 0, i, ts=-1 if i % 3 == 0 else 1_700_000_000_000 + i,
                 h=[("n", b"%d" % i)] if i % 4 == 0 else None) for i in range(50)]
    table = to_arrow(batch)
    assert table.column("timestamp").to_pylist() == pa.array(
        [r.ts if r.ts >= 0 else None for r in batch], SCHEMA.field("timestamp").type).to_pylist()
    assert table.column("headers").to_pylist() == [
        [{"key": "n", "value": b"%d" % i}] if i % 4 == 0 else [] for i in range(50)]
    plain = to_arrow([Rec("t", 0, i) for i in range(3)])
    assert plain.column("headers").to_pylist() == [[], [], []]
    assert plain.column("headers").null_count == 0
