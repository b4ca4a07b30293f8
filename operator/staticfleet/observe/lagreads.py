"""The lag of each group, read as cheaply as it can be.

Members report their partitions' lag in `/status` (librdkafka's statistics, every 5 s), which
the pass reads anyway: for a partition an answering member reports, that is the figure, and
Kafka is not asked. The brokers are asked only for the other partitions (every member down, a
partition nobody owns), and not every pass: a group's committed offsets at most once per
`READ_INTERVAL_S`, and the end offsets once per interval per cluster, in one request for all
its groups; a group whose figures matter sooner gets them read sooner (`max_age_s`: a rollout
in flight, an autoscaler). A read that fails keeps the figures it had, and their age says so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from staticfleet.decisions.memberreport import MemberReport
from staticfleet.observe import kafkaadmin, kafkareads

READ_INTERVAL_S = 60.0
"""How often the brokers are asked for a group's committed offsets and a cluster's end offsets."""
ROLLOUT_AGE_S = 2.0
"""While members are in flight, the broker's figures of their group's lag are at most this old:
the roller takes lag 0 read after a member came back as its progress (`rollout.roller.progressed`);
a minute-old figure would hold the rollout back that long."""
AUTOSCALING_AGE_S = 15.0
"""With spec.autoscaling the broker's end offsets of the group's partitions are at most this
old: the lag is the larger of the members' own figure and the end offset minus their commit,
and the arrival rate is the end offsets' growth. `bench/autoscale.py --real` saw the members'
own figures (librdkafka's statistics) stay under half the target through a 4x load step while
the group fell about 20,000 records behind, which the broker showed once a member left."""
REPORT_AGE_S = 5.0
"""How old a member's reported lag may be (its statistics interval)."""

TP = tuple[str, int]


def max_age_s(rolling: bool, autoscaling: bool, interval_s: float = READ_INTERVAL_S) -> float:
    """How old the brokers' figures of a group's lag may be: the read interval, shorter while
    its members are in flight (`ROLLOUT_AGE_S`) or with spec.autoscaling (`AUTOSCALING_AGE_S`)."""
    fresh = ROLLOUT_AGE_S if rolling else AUTOSCALING_AGE_S if autoscaling else None
    return interval_s if fresh is None else min(interval_s, fresh)


@dataclass(frozen=True)
class Lag:
    """A group's lag by partition, how old its oldest figure is (seconds), and the end offsets
    it was computed from with their age (what tells a stalled member)."""

    by_partition: Mapping[TP, int]
    age_s: float
    ends: Mapping[TP, tuple[float, int]] = field(default_factory=dict)
    """partition -> (seconds since it was read, end offset)."""


def _entries(reported: Iterable[tuple[str, int, int]]) -> Iterable[tuple[TP, int]]:
    for topic, partition, value in reported:
        if value >= 0:
            yield (topic, partition), value


def reported_lag(statuses: Iterable[MemberReport]) -> dict[TP, int]:
    """The lag members report for the partitions they hold (the larger figure where two
    report one partition, as an old and a new process may during a handoff)."""
    out: dict[TP, int] = {}
    for tp, lag in _entries(e for status in statuses for e in status.lag):
        out[tp] = max(lag, out.get(tp, 0))
    return out


def reported_committed(statuses: Iterable[MemberReport]) -> dict[TP, int]:
    """The offsets members last committed on the partitions they hold (the smaller where two
    report one partition)."""
    out: dict[TP, int] = {}
    for tp, offset in _entries(e for status in statuses for e in status.committed):
        out[tp] = min(offset, out.get(tp, offset))
    return out


class OffsetSource(Protocol):
    """Where a group's broker offsets come from instead of its own requests: its cluster's
    reads of all groups together (`clusterpool.GroupOffsets`), which read this group again
    when their figures are older than `max_age`."""

    @property
    def interval_s(self) -> float:
        """How often the source reads every group: at rest a figure is read again once it
        would be `READ_INTERVAL_S` old by the next read, so it serves until then."""

    def committed(self, now: float, max_age: float) -> tuple[dict[TP, int], float] | None:
        """The group's committed offsets and when they were read (None: never)."""

    def ends(self, tps: Iterable[TP], now: float,
             max_age: float) -> dict[TP, tuple[float, int]]:
        """The end offset of each of `tps` that has one, with when it was read."""


@dataclass
class LagReads:
    """Broker reads of committed and end offsets, cached per group and per cluster."""

    interval_s: float = READ_INTERVAL_S
    clock: Any = time.monotonic
    committed: dict[tuple[str, str], tuple[float, dict[TP, int]]] = field(default_factory=dict)
    """(cluster key, group id) -> when read, the group's committed offsets."""
    ends: dict[str, dict[TP, tuple[float, int]]] = field(default_factory=dict)
    """cluster key -> partition -> when read, its end offset."""
    asked: dict[str, dict[TP, float]] = field(default_factory=dict)
    """cluster key -> partition -> when a group last needed it (one no group needed for
    three intervals is dropped: its group is gone or its members report it)."""
    reported_before: dict[tuple[str, str], frozenset[TP]] = field(default_factory=dict)
    """(cluster key, group id) -> the partitions its members reported at the last read. One no
    member reports now has just moved (a scale-down, a handoff) and its new owner has not
    reported it yet: the group's cached committed offsets may predate the commits made there
    since, so they are read again (a scale-down showed a lag spike of a minute's records)."""
    owners: dict[str, tuple[str, str]] = field(default_factory=dict)
    """ConsumerGroup uid -> the (cluster key, group id) its lag is read for (`forget`)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def lag(self, admin: kafkaadmin.Admin, group_id: str, partitions: Mapping[str, int],
            statuses: Iterable[MemberReport] = (), known: bool = True,
            rolling: bool = False, autoscaling: bool = False, owner: str | None = None,
            offsets: OffsetSource | None = None) -> Lag:
        """The group's lag: the larger of what its members report (their statistics) and the
        end offsets (read once per interval for the whole cluster) minus the committed offsets
        (the members' own commits; the brokers' for partitions no member reports, read at most
        once per interval; not at all for a group the brokers do not know, `known` False:
        it has no offsets). `rolling` (members in flight) and `autoscaling` (spec.autoscaling)
        have the broker's figures of this group read again sooner (`max_age_s`). `owner`: the
        ConsumerGroup's uid, whose deletion forgets what is cached of the group (`forget`).
        `offsets`: the group's cluster's reads, which the brokers' figures then come from (the
        same ages apply); without them the group's own requests read them."""
        statuses = list(statuses)
        reported, committed = reported_lag(statuses), reported_committed(statuses)
        wanted = [(t, p) for t, count in sorted(partitions.items()) for p in range(count)]
        now = self.clock()
        age = REPORT_AGE_S if reported else 0.0
        max_age = max_age_s(rolling, autoscaling, self.interval_s + (
            offsets.interval_s if offsets is not None else 0.0))
        unknown = [tp for tp in wanted if tp not in reported and tp not in committed]
        with self.lock:
            if owner is not None:
                self.owners[owner] = (admin.key, group_id)
            before = self.reported_before.get((admin.key, group_id), frozenset())
            self.reported_before[(admin.key, group_id)] = frozenset(reported) | frozenset(
                committed)
        moved = any(tp in before for tp in unknown)
        if unknown and known:
            read, read_at = self._committed(admin, group_id, wanted, now,
                                            0.0 if moved else max_age, offsets)
            committed = {**{tp: read[tp] for tp in unknown if tp in read}, **committed}
            age = max(age, now - read_at)
        ends = self._ends(admin, [tp for tp in wanted if tp in committed], now, max_age,
                          offsets)
        out = {tp: reported[tp] for tp in wanted if tp in reported}
        for tp, (read_at, end) in ends.items():
            out[tp] = max(out.get(tp, 0), end - committed[tp], 0)
            if tp not in reported:
                age = max(age, now - read_at)
        return Lag(out, round(age, 1),
                   {tp: (round(now - at, 1), end) for tp, (at, end) in ends.items()})

    def _committed(self, admin: kafkaadmin.Admin, group_id: str, wanted: list[TP], now: float,
                   max_age: float, offsets: OffsetSource | None = None
                   ) -> tuple[dict[TP, int], float]:
        if offsets is not None:
            return offsets.committed(now, max_age) or ({}, now)
        key = (admin.key, group_id)
        with self.lock:
            cached = self.committed.get(key)
        if cached is not None and now - cached[0] < max_age:
            return cached[1], cached[0]
        try:
            read = kafkareads.committed_offsets(admin, group_id, wanted)
        except kafkaadmin.KafkaUnavailable:
            if cached is None:
                return {}, now
            return cached[1], cached[0]  # stale, and its age says so
        with self.lock:
            self.committed[key] = (now, read)
        return read, now

    def _ends(self, admin: kafkaadmin.Admin, rest: list[TP], now: float,
              max_age: float, offsets: OffsetSource | None = None
              ) -> dict[TP, tuple[float, int]]:
        """The end offsets of `rest`; when any is missing or older than the interval, every
        stale partition of the cluster (all its groups') is read in one request; those of `rest`
        older than `max_age` (shorter than the interval while a rollout waits) are read too."""
        if offsets is not None:
            return offsets.ends(rest, now, max_age)
        with self.lock:
            cluster = self.ends.setdefault(admin.key, {})
            asked = self.asked.setdefault(admin.key, {})
            asked.update(dict.fromkeys(rest, now))
            for tp in [tp for tp, at in asked.items() if now - at > 3 * self.interval_s]:
                del asked[tp]
                cluster.pop(tp, None)
            stale = [tp for tp, (at, _) in cluster.items() if now - at >= self.interval_s]
            missing = [tp for tp in rest if tp not in cluster]
            old = {tp for tp in rest if tp in cluster and now - cluster[tp][0] >= max_age}
            ask = sorted(set(missing) | old | (set(stale) if missing or set(stale) & set(rest)
                                               else set()))
        if ask:
            try:
                read = kafkareads.end_offsets(admin, ask)
            except kafkaadmin.KafkaUnavailable:
                read = {}
            with self.lock:
                for tp, end in read.items():
                    cluster[tp] = (now, end)
        with self.lock:
            return {tp: cluster[tp] for tp in rest if tp in cluster}

    def forget(self, owner: str) -> None:
        """The ConsumerGroup `owner` (its uid) is deleted: drop its group's cached committed
        offsets and reports (its partitions' end offsets go once no group asks for them)."""
        with self.lock:
            key = self.owners.pop(owner, None)
            if key is not None:
                self.committed.pop(key, None)
                self.reported_before.pop(key, None)
