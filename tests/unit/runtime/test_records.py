import datetime as dt

import pytest

from consumer_runtime.records import SCHEMA, batch_name, next_offsets, offset_ranges, to_arrow
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
