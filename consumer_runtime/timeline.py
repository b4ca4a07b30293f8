"""Where the member's time goes: timed spans of the poll thread, the batch worker and the
thread that prepares the next batch.

Each span names its thread (`poll`, `worker` or `prepare`), its stage, the batch it serves (the
one being gathered for the poll thread, the one being processed for the worker, the next one for
`prepare`), its wall time and the CPU time its thread spent meanwhile. Wall time well above CPU
time in a stage that does no I/O (the conversion to Arrow, say) is time spent waiting for the
GIL. A stage's totals feed the metric `staticfleet_member_stage_seconds`; the spans themselves
are kept only when asked for (the bench reads them to draw the timeline of each batch).

Stages of the poll thread: `consume` (librdkafka hands over records, or the wait for some),
`convert` (records to Arrow), `wait-worker` (two batches gathered: waiting for the worker
without polling), `paused` (partitions paused, polling only to serve callbacks), `commit`.
Stages of the worker: `frame` (the Arrow table to a Spark DataFrame, or the wait for the one
built ahead), `job` (the transform and the sink's write). The worker's time outside any span is
idle: no batch was due. The `prepare` thread's one stage, `frame`, builds the next batch's
DataFrame while the worker runs the one before (`SparkBatch.prepare`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType

POLL = "poll"
WORKER = "worker"
PREPARE = "prepare"
STAGES = {POLL: ("consume", "convert", "wait-worker", "paused", "commit"),
          WORKER: ("frame", "job"),
          PREPARE: ("frame",)}


@dataclass(frozen=True, slots=True)
class Span:
    thread: str
    stage: str
    batch: int
    start: float
    """time.perf_counter() at the start."""
    wall: float
    cpu: float
    """CPU seconds of the span's thread during the span."""

    @property
    def end(self) -> float:
        return self.start + self.wall


class Timeline:
    def __init__(self, keep: int = 0,
                 on_span: Callable[[Span], None] | None = None) -> None:
        """Keep the last `keep` spans (none by default); call `on_span` with each."""
        self.spans: deque[Span] = deque(maxlen=keep)
        self.on_span = on_span

    def span(self, thread: str, stage: str, batch: int) -> OpenSpan:
        """`with timeline.span(POLL, "consume", 7): ...` times the block."""
        return OpenSpan(self, thread, stage, batch)

    def add(self, span: Span) -> None:
        if self.spans.maxlen:
            self.spans.append(span)
        if self.on_span is not None:
            self.on_span(span)


class OpenSpan:
    __slots__ = ("_cpu", "_start", "batch", "stage", "thread", "timeline")

    def __init__(self, timeline: Timeline, thread: str, stage: str, batch: int) -> None:
        self.timeline, self.thread, self.stage, self.batch = timeline, thread, stage, batch
        self._start = self._cpu = 0.0

    def __enter__(self) -> OpenSpan:
        self._start, self._cpu = time.perf_counter(), time.thread_time()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        wall, cpu = time.perf_counter() - self._start, time.thread_time() - self._cpu
        self.timeline.add(Span(self.thread, self.stage, self.batch, self._start, wall, cpu))


@dataclass(frozen=True)
class StageTotal:
    wall: float
    cpu: float
    count: int


def totals(spans: Iterable[Span]) -> dict[tuple[str, str], StageTotal]:
    """Wall, CPU and count per (thread, stage)."""
    sums: dict[tuple[str, str], list[float]] = {}
    for s in spans:
        acc = sums.setdefault((s.thread, s.stage), [0.0, 0.0, 0])
        acc[0] += s.wall
        acc[1] += s.cpu
        acc[2] += 1
    return {k: StageTotal(w, c, int(n)) for k, (w, c, n) in sums.items()}


def overlap(spans: Iterable[Span], thread: str, start: float, end: float) -> dict[str, float]:
    """Seconds of each stage of `thread` inside [start, end] (spans clipped to it)."""
    out: dict[str, float] = {}
    for s in spans:
        if s.thread != thread:
            continue
        inside = min(s.end, end) - max(s.start, start)
        if inside > 0:
            out[s.stage] = out.get(s.stage, 0.0) + inside
    return out
