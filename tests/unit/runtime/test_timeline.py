"""The timeline of the poll thread and the worker: spans, their totals, their overlap, the
metric they feed, and the conversion of records to Arrow that the poll thread times."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Message

from consumer_runtime.metrics import Telemetry
from consumer_runtime.records import SCHEMA, to_arrow
from consumer_runtime.timeline import POLL, WORKER, Span, Timeline, overlap, totals
from tests.unit.runtime.fakes import Rec

pytestmark = pytest.mark.unit


def test_a_span_times_its_block_with_the_threads_cpu() -> None:
    timeline = Timeline(keep=10)
    with timeline.span(POLL, "consume", 3):
        time.sleep(0.05)
    with timeline.span(WORKER, "job", 2):
        deadline = time.thread_time() + 0.03
        while time.thread_time() < deadline:
            pass
    waited, worked = timeline.spans
    assert (waited.thread, waited.stage, waited.batch) == (POLL, "consume", 3)
    assert waited.wall >= 0.05 and waited.cpu < waited.wall / 2
    assert (worked.thread, worked.stage, worked.batch) == (WORKER, "job", 2)
    assert worked.cpu >= 0.03 and worked.wall >= worked.cpu * 0.9


def test_spans_are_kept_only_when_asked_for_and_always_reported() -> None:
    seen: list[Span] = []
    timeline = Timeline(on_span=seen.append)
    with timeline.span(POLL, "convert", 1):
        pass
    assert not timeline.spans and [s.stage for s in seen] == ["convert"]
    kept = Timeline(keep=2)
    for stage in ("consume", "convert", "commit"):
        with kept.span(POLL, stage, 1):
            pass
    assert [s.stage for s in kept.spans] == ["convert", "commit"]


def test_a_span_is_recorded_when_its_block_raises() -> None:
    timeline = Timeline(keep=1)
    with pytest.raises(ValueError), timeline.span(WORKER, "job", 7):
        raise ValueError("transform failed")
    assert timeline.spans[0].batch == 7


SPANS = [
    Span(WORKER, "frame", 1, 10.0, 0.2, 0.1),
    Span(WORKER, "job", 1, 10.2, 0.5, 0.1),
    Span(POLL, "consume", 2, 9.9, 0.3, 0.05),
    Span(POLL, "convert", 2, 10.2, 0.1, 0.1),
    Span(POLL, "wait-worker", 2, 10.3, 0.5, 0.0),
    Span(POLL, "consume", 3, 10.8, 0.2, 0.05),
]


def test_totals_per_thread_and_stage() -> None:
    t = totals(SPANS)
    assert t[(POLL, "consume")].count == 2
    assert t[(POLL, "consume")].wall == pytest.approx(0.5)
    assert t[(POLL, "consume")].cpu == pytest.approx(0.1)
    assert t[(WORKER, "job")].wall == pytest.approx(0.5)
    assert (WORKER, "idle") not in t


@pytest.mark.parametrize(("start", "end", "expected"), [
    # the worker's batch 1 (10.0-10.7): the poll thread consumed, converted, then waited for it
    (10.0, 10.7, {"consume": 0.2, "convert": 0.1, "wait-worker": 0.4}),
    (10.25, 10.3, {"convert": 0.05}),
    (11.5, 12.0, {}),
])
def test_overlap_clips_the_other_threads_spans_to_a_window(
        start: float, end: float, expected: dict[str, float]) -> None:
    got = overlap(SPANS, POLL, start, end)
    assert got.keys() == expected.keys()
    for stage, seconds in expected.items():
        assert got[stage] == pytest.approx(seconds)


def test_each_span_adds_to_the_stage_metrics() -> None:
    telemetry = Telemetry(namespace="ns", group="g", member="g-0", instance_id="g-0",
                          session_timeout_s=10, max_poll_interval_s=300, process_start=0.0,
                          started_at=0.0)
    telemetry.stage(Span(WORKER, "job", 1, 0.0, 0.5, 0.25))
    telemetry.stage(Span(WORKER, "job", 2, 1.0, 0.25, 0.25))
    labels = {"namespace": "ns", "group": "g", "member": "g-0", "thread": WORKER,
              "stage": "job"}
    registry = telemetry.registry
    assert registry.get_sample_value("staticfleet_member_stage_seconds_total", labels) == 0.75
    assert registry.get_sample_value("staticfleet_member_stage_cpu_seconds_total", labels) == 0.5
    # every stage's series exists from the start, at 0
    assert registry.get_sample_value("staticfleet_member_stage_seconds_total",
                                     {**labels, "thread": POLL, "stage": "paused"}) == 0.0


def message(offset: int, key: bytes | None = b"k", timestamp: int | None = 5,
            headers: list[tuple[str, bytes]] | None = None) -> Message:
    return Message(topic="t", partition=0, offset=offset, key=key, value=b"v%d" % offset,
                   headers=headers, timestamp=(0, 0) if timestamp is None else (1, timestamp))


@pytest.mark.parametrize("headers", [None, [("h", b"x")]])
def test_messages_convert_like_any_records_and_a_mixed_batch_too(
        headers: list[tuple[str, bytes]] | None) -> None:
    messages = [message(0, headers=headers), message(1, key=None, headers=headers),
                message(2, timestamp=None, headers=headers), message(3, headers=headers)]
    fakes = [Rec("t", 0, m.offset() or 0, k=m.key(), v=m.value(),
                 ts=m.timestamp()[1] if m.timestamp()[0] else -1, h=headers) for m in messages]
    table = to_arrow(messages)
    assert table.schema == SCHEMA
    assert table.equals(to_arrow(fakes))
    assert to_arrow([messages[0], *fakes[1:]]).equals(table)
    assert table.column("key").to_pylist() == [b"k", None, b"k", b"k"]
    assert table.column("timestamp").null_count == 1
