"""How often the operator asks Kafka for lag: members' reports first, brokers at most once per
interval per group (committed offsets) and per cluster (end offsets, all its groups at once).
The broker reads themselves are tested against a real broker (tests/integration/test_observe.py);
here they are replaced by counters to test the policy alone."""
from __future__ import annotations

from typing import Any

import pytest

from staticfleet.observe import kafkaadmin, kafkareads, lagreads
from staticfleet.observe.memberhttp import parse_status
from tests.unit.operator.support import report


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Admin:
    key = "cluster-a"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    log: dict[str, Any] = {"committed": [], "ends": [], "fail": False,
                           "offsets": {}, "end": {}}

    def committed(admin: Any, group: str, tps: Any) -> dict[tuple[str, int], int]:
        log["committed"].append(group)
        if log["fail"]:
            raise kafkaadmin.KafkaUnavailable("no answer")
        return {tp: log["offsets"][(group, tp)] for tp in tps if (group, tp) in log["offsets"]}

    def ends(admin: Any, tps: Any) -> dict[tuple[str, int], int]:
        log["ends"].append(sorted(tps))
        if log["fail"]:
            raise kafkaadmin.KafkaUnavailable("no answer")
        return {tp: log["end"][tp] for tp in tps if tp in log["end"]}

    monkeypatch.setattr(kafkareads, "committed_offsets", committed)
    monkeypatch.setattr(kafkareads, "end_offsets", ends)
    return log


def test_members_reports_need_no_committed_offsets_request(reads: dict[str, Any]) -> None:
    clock = Clock()
    book = lagreads.LagReads(clock=clock)
    reads["end"] = {("t", 0): 10, ("t", 1): 4}
    statuses = [report({"lag": [["t", 0, 3]], "committed": [["t", 0, 7]]}),
                report({"lag": [["t", 1, 0]], "committed": [["t", 1, 4]]})]
    lag = book.lag(Admin(), "g", {"t": 2}, statuses)  # type: ignore[arg-type]
    assert lag.by_partition == {("t", 0): 3, ("t", 1): 0}
    assert reads["committed"] == [], "the members said what they committed"
    assert lag.age_s == lagreads.REPORT_AGE_S
    # A member that stopped fetching reports a stale lag of 0; its commits and the brokers'
    # end offsets (read once per interval) show what waits.
    clock.t += lagreads.READ_INTERVAL_S
    reads["end"][("t", 1)] = 9
    lag = book.lag(Admin(), "g", {"t": 2}, statuses)  # type: ignore[arg-type]
    assert lag.by_partition == {("t", 0): 3, ("t", 1): 5}
    assert lag.ends[("t", 1)] == (0.0, 9)


def test_broker_reads_once_per_interval_and_one_end_offsets_request_per_cluster(
        reads: dict[str, Any]) -> None:
    clock = Clock()
    book = lagreads.LagReads(clock=clock)
    reads["offsets"] = {("g1", ("a", 0)): 5, ("g2", ("b", 0)): 1}
    reads["end"] = {("a", 0): 9, ("b", 0): 4}
    admin: Any = Admin()
    assert book.lag(admin, "g1", {"a": 1}).by_partition == {("a", 0): 4}
    assert book.lag(admin, "g2", {"b": 1}).by_partition == {("b", 0): 3}
    assert reads["committed"] == ["g1", "g2"] and len(reads["ends"]) == 2
    for _ in range(20):  # passes every second for 20 s: nothing asked again
        clock.t += 1
        book.lag(admin, "g1", {"a": 1})
        book.lag(admin, "g2", {"b": 1})
    assert reads["committed"] == ["g1", "g2"] and len(reads["ends"]) == 2
    clock.t += lagreads.READ_INTERVAL_S
    reads["end"][("a", 0)] = 15
    assert book.lag(admin, "g1", {"a": 1}).by_partition == {("a", 0): 10}
    assert book.lag(admin, "g2", {"b": 1}).by_partition == {("b", 0): 3}
    assert reads["ends"][-1] == [("a", 0), ("b", 0)], "both groups' partitions in one request"
    assert len(reads["ends"]) == 3


def test_a_failed_read_keeps_the_figure_and_says_how_old_it_is(reads: dict[str, Any]) -> None:
    clock = Clock()
    book = lagreads.LagReads(clock=clock)
    reads["offsets"] = {("g", ("a", 0)): 5}
    reads["end"] = {("a", 0): 9}
    admin: Any = Admin()
    assert book.lag(admin, "g", {"a": 1}).by_partition == {("a", 0): 4}
    clock.t += 2 * lagreads.READ_INTERVAL_S
    reads["fail"] = True
    stale = book.lag(admin, "g", {"a": 1})
    assert stale.by_partition == {("a", 0): 4}
    assert stale.age_s == pytest.approx(2 * lagreads.READ_INTERVAL_S)


def test_reports_take_the_safer_figure_and_skip_unknown_ones() -> None:
    statuses = [report({"lag": [["t", 0, 5], ["t", 1, -1]], "committed": [["t", 0, 9]]}),
                report({"lag": [["t", 0, 7]], "committed": [["t", 0, 4]]}), report({})]
    assert lagreads.reported_lag(statuses) == {("t", 0): 7}
    assert lagreads.reported_committed(statuses) == {("t", 0): 4}
    # A lag that is not a list of [topic, partition, lag] makes no /status at all: the
    # operator takes the member as not answering (`memberhttp.parse_status`).
    assert parse_status({"lag": None}) is None and parse_status({"lag": [["bad"]]}) is None


def test_a_group_the_brokers_do_not_know_costs_no_read(reads: dict[str, Any]) -> None:
    book = lagreads.LagReads(clock=Clock())
    assert book.lag(Admin(), "new", {"a": 2}, known=False).by_partition == {}  # type: ignore[arg-type]
    assert reads["committed"] == [] and reads["ends"] == []


def test_a_group_in_a_rollout_gets_figures_no_older_than_asked(reads: dict[str, Any]) -> None:
    """The roller takes lag 0 read after a member came back as its progress: while members are
    in flight the group's broker figures are read again once older than `ROLLOUT_AGE_S`; the
    other groups of the cluster keep the interval."""
    clock = Clock()
    book = lagreads.LagReads(clock=clock)
    reads["offsets"] = {("g1", ("a", 0)): 5, ("g2", ("b", 0)): 1}
    reads["end"] = {("a", 0): 9, ("b", 0): 4}
    admin: Any = Admin()
    book.lag(admin, "g1", {"a": 1})
    book.lag(admin, "g2", {"b": 1})
    clock.t += 3
    reads["offsets"][("g1", ("a", 0))] = 9
    rolling = book.lag(admin, "g1", {"a": 1}, rolling=True)
    assert rolling.by_partition == {("a", 0): 0} and rolling.age_s == 0.0
    assert reads["committed"] == ["g1", "g2", "g1"] and reads["ends"][-1] == [("a", 0)]
    assert book.lag(admin, "g2", {"b": 1}).age_s == 3.0, "the other group's figures stay"
    assert reads["committed"] == ["g1", "g2", "g1"]


@pytest.mark.parametrize(("rolling", "autoscaling", "interval", "expected"), [
    (False, False, lagreads.READ_INTERVAL_S, lagreads.READ_INTERVAL_S),
    (True, False, lagreads.READ_INTERVAL_S, lagreads.ROLLOUT_AGE_S),
    (False, True, lagreads.READ_INTERVAL_S, lagreads.AUTOSCALING_AGE_S),
    (True, True, lagreads.READ_INTERVAL_S, lagreads.ROLLOUT_AGE_S),
    (True, False, 1.0, 1.0),
])
def test_how_fresh_a_groups_broker_figures_must_be(rolling: bool, autoscaling: bool,
                                                   interval: float, expected: float) -> None:
    """The freshness policy, next to the read interval: a rollout in flight wants the newest
    figures, an autoscaler fresher ones than the interval, never older than the interval."""
    assert lagreads.max_age_s(rolling, autoscaling, interval) == expected


def test_a_partition_that_just_moved_gets_the_groups_committed_offsets_read_again(
        reads: dict[str, Any]) -> None:
    """A group starts on a backlog of 100 records a partition; its members process it and
    report their commits. A scale-down then moves member 1's partition to member 0, whose
    statistics (every 5 s) do not show it yet: the committed offset cached at the start (0)
    would put the whole processed backlog back on it; the group's are read again, once."""
    clock = Clock()
    book = lagreads.LagReads(clock=clock)
    admin: Any = Admin()
    reads["offsets"] = {("g", ("t", 0)): 0, ("g", ("t", 1)): 0}
    reads["end"] = {("t", 0): 100, ("t", 1): 100}
    assert book.lag(admin, "g", {"t": 2}).by_partition == {("t", 0): 100, ("t", 1): 100}
    assert reads["committed"] == ["g"]
    clock.t += 10
    both = [report({"lag": [["t", 0, 0]], "committed": [["t", 0, 100]]}),
            report({"lag": [["t", 1, 0]], "committed": [["t", 1, 100]]})]
    assert book.lag(admin, "g", {"t": 2}, both).by_partition == {("t", 0): 0, ("t", 1): 0}
    clock.t += 10
    reads["offsets"][("g", ("t", 1))] = 100
    moved = book.lag(admin, "g", {"t": 2}, both[:1])
    assert moved.by_partition == {("t", 0): 0, ("t", 1): 0}, "the cached 0 predates the commits"
    assert reads["committed"] == ["g", "g"]
    clock.t += 1
    book.lag(admin, "g", {"t": 2}, both[:1])
    assert reads["committed"] == ["g", "g"], "read again once, not every pass"


def test_a_deleted_groups_cached_offsets_are_forgotten(reads: dict[str, Any]) -> None:
    """Issue 34 item 10: `LagReads.forget` was never called, so a deleted group's committed
    offsets stayed cached for the operator's lifetime. The pass reads the lag for its
    ConsumerGroup (`owner`, its uid); the delete handler's `Memory.forget` forgets it, and only
    it."""
    from staticfleet.memory import Caches, Memory

    book = lagreads.LagReads(clock=Clock())
    admin: Any = Admin()
    reads["offsets"] = {("g", ("t", 0)): 5, ("h", ("t", 0)): 7}
    reads["end"] = {("t", 0): 9}
    book.lag(admin, "g", {"t": 1}, owner="uid-g")
    book.lag(admin, "h", {"t": 1}, owner="uid-h")
    assert set(book.committed) == {("cluster-a", "g"), ("cluster-a", "h")}
    memory = Memory(caches=Caches(lag_reads=book))
    memory.forget("uid-g")
    assert set(book.committed) == {("cluster-a", "h")}
    assert set(book.reported_before) == {("cluster-a", "h")}
    memory.forget("uid-h")
    assert book.committed == {} and book.reported_before == {}


class Source:
    """An `OffsetSource` (the cluster's reads of all groups) that records what it was asked."""

    interval_s = 10.0

    def __init__(self, committed: dict[tuple[str, int], int], read_at: float,
                 ends: dict[tuple[str, int], int]) -> None:
        self.figures, self.read_at, self.end = committed, read_at, ends
        self.asked: list[tuple[str, float]] = []

    def committed(self, now: float, max_age: float) -> tuple[dict[tuple[str, int], int], float]:
        self.asked.append(("committed", max_age))
        return dict(self.figures), self.read_at

    def ends(self, tps: Any, now: float,
             max_age: float) -> dict[tuple[str, int], tuple[float, int]]:
        self.asked.append(("ends", max_age))
        return {tp: (self.read_at, self.end[tp]) for tp in tps if tp in self.end}


@pytest.mark.parametrize(("rolling", "autoscaling", "max_age"), [
    (False, False, lagreads.READ_INTERVAL_S + Source.interval_s),
    (True, False, lagreads.ROLLOUT_AGE_S),
    (False, True, lagreads.AUTOSCALING_AGE_S),
])
def test_with_the_clusters_reads_the_figures_come_from_them_no_older_than_asked(
        reads: dict[str, Any], rolling: bool, autoscaling: bool, max_age: float) -> None:
    """Issue 37: the cluster's reads of all groups read a group's offsets at rest once they
    would be a minute old by their next read, so they serve a minute and an interval; fresher
    figures are asked for as before. The group's own requests are not made."""
    clock = Clock()
    source = Source({("t", 0): 5, ("t", 1): 2}, clock.t - 4, {("t", 0): 9, ("t", 1): 2})
    lag = lagreads.LagReads(clock=clock).lag(
        Admin(), "g", {"t": 2}, rolling=rolling, autoscaling=autoscaling,  # type: ignore[arg-type]
        offsets=source)
    assert lag.by_partition == {("t", 0): 4, ("t", 1): 0} and lag.age_s == 4.0
    assert source.asked == [("committed", max_age), ("ends", max_age)]
    assert reads["committed"] == [] and reads["ends"] == []
