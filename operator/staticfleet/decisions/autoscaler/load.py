"""The group's load as the autoscaler measures it (pure): each member's throughput and capacity
(`MemberLoad`), the group's backlog and its age (`Load`), the backlog in seconds
(`lag_seconds`), and the arrival rate (`arrival_rate`): the growth of the partitions' end offsets
between samples kept in `status.autoscaling` (`end_sample`, `parse_end_sample`), or without them
the processing rate plus the lag's growth. `rules` decides on these figures.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from staticfleet.decisions import conditions as c

MIN_BUSY = 0.05
"""A member busier than this tells its capacity (records/s divided by its busy share); an idler
one is counted as if this busy, which underestimates its capacity (scales down less)."""
SAMPLE_S = 15.0
"""The arrival rate is estimated from lag samples at least this far apart."""
TP = tuple[str, int]


@dataclass(frozen=True)
class MemberLoad:
    """One serving member's throughput over its last window (its `/status` `throughput`)."""

    records_per_second: float
    busy_ratio: float
    full_batch_capacity: float | None = None
    """Records per second of batch time of its recent full batches (`capacityRecordsPerSecond`),
    when it had any."""

    @property
    def capacity(self) -> float:
        """Records per second it could process if it were busy all the time: what its full
        batches did, else its rate over its busy share (an underestimate: small batches carry a
        batch's fixed cost)."""
        if self.full_batch_capacity:
            return self.full_batch_capacity
        return self.records_per_second / max(self.busy_ratio, MIN_BUSY)


@dataclass(frozen=True)
class Load:
    """The group's load as one pass saw it."""

    lag_records: int | None
    lag_age_s: float | None
    members: tuple[MemberLoad, ...] = ()
    end_offsets: Mapping[TP, tuple[float, int]] | None = None
    """Each subscribed partition's (seconds since the brokers were asked, end offset): what
    arrived, read once a minute for the whole cluster. A partition whose read failed, or that
    has no committed offset yet, is absent: no figure, never a zero."""

    @property
    def rate(self) -> float:
        return sum(m.records_per_second for m in self.members)

    def capacity_per_member(self) -> float | None:
        """The median member's capacity (records/s), None when nobody processes anything."""
        known = [m.capacity for m in self.members
                 if m.records_per_second > 0 or m.full_batch_capacity]
        return statistics.median(known) if known else None


def parse_time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def lag_seconds(load: Load) -> float | None:
    """Seconds to process the backlog at the measured rate: 0 without a backlog, None (never)
    when there is one and nothing is processed."""
    if load.lag_records is None:
        return None
    if load.lag_records == 0:
        return 0.0
    return load.lag_records / load.rate if load.rate > 0 else math.inf


def arrival_rate(load: Load, previous: Mapping[str, Any], now: datetime
                 ) -> tuple[float | None, dict[str, Any] | None, bool]:
    """Records/s arriving, the sample to keep, and whether the rate is a new measurement: the
    growth of the partitions' end offsets between two reads at least `SAMPLE_S` apart (the
    brokers' own count of what was produced), partition by partition (`end_offset_growth`).
    Without end offsets: the processing rate plus the lag's growth since the last sample,
    which overstates arrival for up to a minute after a load drops (the members' rate is a
    minute's average)."""
    kept = previous.get("arrivalRecordsPerSecond")
    sample = previous.get("sample") or {}
    before = parse_end_sample(sample)
    if load.end_offsets:
        now_read = {tp: (now - timedelta(seconds=age), end)
                    for tp, (age, end) in load.end_offsets.items()}
        rate, keep = end_offset_growth(before or {}, now_read)
        return (kept if rate is None else rate), end_sample(keep), rate is not None
    if before is not None:
        return kept, dict(sample), False  # no end offset read this pass: no sample
    if load.lag_records is None:
        return kept, sample or None, False
    at = parse_time(sample.get("at"))
    if at is None or sample.get("lagRecords") is None:
        return kept, {"at": c.rfc3339(now), "lagRecords": load.lag_records}, False
    elapsed = (now - at).total_seconds()
    if elapsed < SAMPLE_S:
        return kept, dict(sample), False
    growth = (load.lag_records - int(sample["lagRecords"])) / elapsed
    return (max(0.0, load.rate + growth),
            {"at": c.rfc3339(now), "lagRecords": load.lag_records}, True)


def end_offset_growth(before: Mapping[TP, tuple[datetime, int]],
                      now: Mapping[TP, tuple[datetime, int]]
                      ) -> tuple[float | None, dict[TP, tuple[datetime, int]]]:
    """Records/s arriving from two per-partition samples (partition -> when read, end offset),
    and the sample to keep. Only a partition present in both, read again at least `SAMPLE_S`
    after its figure in `before`, counts, with its own interval: one missing from either
    (a failed read, a partition with no commit yet) is left out, never counted as zero, so a
    changing set of partitions is no arrival. A partition whose end went back (a topic made
    again) starts over. None: no partition gives a measurement yet. The sample kept has, per
    partition read now, the figure measured from, or its older one still waiting for
    `SAMPLE_S`."""
    rate, measured = 0.0, False
    keep: dict[TP, tuple[datetime, int]] = {}
    for tp, (at, end) in now.items():
        old = before.get(tp)
        if old is None or end < old[1]:
            keep[tp] = (at, end)
            continue
        elapsed = (at - old[0]).total_seconds()
        if elapsed < SAMPLE_S:
            keep[tp] = old
            continue
        rate += (end - old[1]) / elapsed
        measured = True
        keep[tp] = (at, end)
    return (rate if measured else None), keep


def end_sample(ends: Mapping[TP, tuple[datetime, int]]) -> dict[str, Any]:
    """`status.autoscaling.sample` of per-partition end offsets, grouped by when they were
    read: {"endOffsets": [{"at": ..., "offsets": [[topic, partition, end], ...]}, ...]}."""
    by_time: dict[str, list[list[Any]]] = {}
    for (topic, partition), (at, end) in sorted(ends.items()):
        by_time.setdefault(c.rfc3339_ms(at), []).append([topic, partition, end])
    return {"endOffsets": [{"at": at, "offsets": offsets}
                           for at, offsets in sorted(by_time.items())]}


def parse_end_sample(sample: Mapping[str, Any]) -> dict[TP, tuple[datetime, int]] | None:
    """The per-partition end offsets of a kept sample (`end_sample`); None when it is not of
    that kind (a lag sample, or a total of an older operator's, which no partition can be
    compared with)."""
    groups = sample.get("endOffsets")
    if not isinstance(groups, list):
        return None
    out: dict[TP, tuple[datetime, int]] = {}
    for group in groups:
        at = parse_time(group.get("at")) if isinstance(group, Mapping) else None
        if at is None:
            continue
        for entry in group.get("offsets") or ():
            try:
                out[(str(entry[0]), int(entry[1]))] = (at, int(entry[2]))
            except (TypeError, ValueError, IndexError):
                continue
    return out


def recent_arrivals(previous: Mapping[str, Any], arrival: float | None, fresh: bool,
                    now: datetime, window_s: float) -> list[list[Any]]:
    """The arrival rates measured in the last `window_s` ([time, records/s]), this pass's new
    one included: the scale-down sizes for the highest of them."""
    out = [[t, r] for t, r in previous.get("arrivals") or ()
           if (at := parse_time(t)) is not None and (now - at).total_seconds() <= window_s]
    if fresh and arrival is not None:
        out.append([c.rfc3339(now), round(arrival, 3)])
    return out
