"""What the demo observes once a second, and what it reads from that. Pure.

Observed objects -> samples: the member pods with their /status (`MemberSample`) and the
ConsumerGroup's status.rollout (`RolloutView`), both at one instant (`Sample`). Samples -> the
records each member processed, its throughput, and how many members are processing. (How long a
member was away in a restart is the operator's own figure, `status.rollout.handoffs`, not read
from these samples.)

"Processed" is what a member's processes counted (`recordsProcessed` of its /status); the report's
"processed" is what the group committed (`staticfleet_dev.demo.report`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

THROUGHPUT_WINDOW_S = 5.0

@dataclass(frozen=True)
class MemberSample:
    """One member pod as seen at one instant. `records` is its process's `recordsProcessed`
    (None when /status did not answer); a new process (new pod uid or container restart, told by
    `process_start`) counts from zero again."""

    ordinal: int
    uid: str
    ready: bool
    deleting: bool
    records: int | None = None
    process_start: float | None = None
    standby: bool = False
    """Its process is a warm handoff's replacement still waiting for activation."""


@dataclass(frozen=True)
class RolloutView:
    """What the ConsumerGroup's status says about the rollout at one instant."""

    phase: str | None = None
    restarted: int = 0
    current: int | None = None
    current_stopped_at: float | None = None
    session_ms: int | None = None
    current_phase: str | None = None
    """The current member's handoff phase (status.rollout.inFlight[].phase)."""
    current_back_after: float | None = None
    """Seconds it was away, once it is back in the group."""


@dataclass(frozen=True)
class Sample:
    t: float
    members: tuple[MemberSample, ...]
    rollout: RolloutView = field(default_factory=RolloutView)

    def member(self, ordinal: int) -> MemberSample | None:
        return next((m for m in self.members if m.ordinal == ordinal), None)


def parse_time(value: str | None) -> float | None:
    """RFC 3339 (as the status writes it) to unix seconds."""
    if not value:
        return None
    return datetime.fromisoformat(value).timestamp()


def rollout_view(cg: Mapping[str, Any] | None) -> RolloutView:
    st = (cg or {}).get("status") or {}
    ro = st.get("rollout") or {}
    current: dict[str, Any] = next((f for f in ro.get("inFlight") or []
                    if f.get("ordinal") == ro.get("current")), {})
    closed = parse_time(current.get("closedAt")) or parse_time(current.get("stoppedAt"))
    back = parse_time(current.get("rejoinedAt"))
    return RolloutView(
        current_phase=current.get("phase"),
        current_back_after=(back - closed) if back is not None and closed is not None else None,
        phase=ro.get("phase"),
        restarted=len(ro.get("membersRestarted") or []),
        current=ro.get("current"),
        current_stopped_at=parse_time(ro.get("currentStoppedAt")),
        session_ms=(st.get("timeouts") or {}).get("sessionTimeoutMs"),
    )


def member_samples(pods: Iterable[Mapping[str, Any]],
                   statuses: Mapping[str, Mapping[str, Any] | None]) -> tuple[MemberSample, ...]:
    """Member pods (by label `staticfleet.io/ordinal`) with their /status, keyed by pod uid."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        ordinal = (meta.get("labels") or {}).get("staticfleet.io/ordinal")
        if ordinal is None:
            continue
        conds = (pod.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
        st = statuses.get(meta.get("uid", "")) or {}
        records = st.get("recordsProcessed")
        out.append(MemberSample(
            ordinal=int(ordinal), uid=meta.get("uid", ""), ready=ready,
            deleting=bool(meta.get("deletionTimestamp")),
            records=int(records) if records is not None else None,
            process_start=st.get("processStart"),
            standby=st.get("standby") is not None,
        ))
    # The serving pod of an ordinal first: a standby replacement beside it is not the member.
    return tuple(sorted(out, key=lambda m: (m.ordinal, m.deleting, m.standby)))


def cumulative_processed(samples: Sequence[Sample]) -> dict[int, list[tuple[float, int]]]:
    """Per ordinal: [(t, records processed by all of its processes so far)].

    Each process's counter is kept at the highest value seen, so a restart adds a new counter
    instead of resetting the sum. A member that does not answer keeps its last total.
    """
    best: dict[int, dict[tuple[str, float | None], int]] = {}
    series: dict[int, list[tuple[float, int]]] = {}
    for s in samples:
        for m in s.members:
            if m.records is None:
                continue
            counters = best.setdefault(m.ordinal, {})
            key = (m.uid, m.process_start)
            counters[key] = max(counters.get(key, 0), m.records)
        for ordinal, counters in best.items():
            series.setdefault(ordinal, []).append((s.t, sum(counters.values())))
    return series


def processed_total(samples: Sequence[Sample]) -> int:
    return sum(pts[-1][1] for pts in cumulative_processed(samples).values() if pts)


def throughput(cumulative: Mapping[int, Sequence[tuple[float, int]]],
               window: float = THROUGHPUT_WINDOW_S) -> dict[int, list[tuple[float, float]]]:
    """Records per second per ordinal, averaged over the last `window` seconds at each point
    (batches arrive in bursts; a per-second difference would mostly show the batch size)."""
    out: dict[int, list[tuple[float, float]]] = {}
    for ordinal, pts in cumulative.items():
        rates: list[tuple[float, float]] = []
        j = 0
        for t, total in pts[1:]:
            while j < len(pts) - 1 and pts[j + 1][0] <= t - window:
                j += 1
            t0, total0 = pts[j]
            if t > t0:
                rates.append((t, (total - total0) / (t - t0)))
        out[ordinal] = rates
    return out


def processing(sample: Sample) -> int:
    """Members whose current process has processed records (a member is Ready, in the group,
    before its Spark session has started; it processes only after)."""
    return len({m.ordinal for m in sample.members if not m.deleting and (m.records or 0) > 0})
