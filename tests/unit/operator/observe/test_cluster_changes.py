"""What a cluster's whole read tells as changed (`observe.clusterreads`, `clusterheld.signature`)
and whom the reads then wake (`observe.clusterpool`): a reader over a scripted cluster, whose
answers are encoded and decoded with the schemas the reads send (`observe.wire`), as the
brokers' would be. The reads against real brokers: tests/integration/test_cluster_reads.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from kafka.coordinator.protocol import ConsumerProtocolMemberAssignment_v0

from staticfleet.observe import clusterpool, wire
from staticfleet.observe.clusterheld import Registration
from staticfleet.observe.clusterreads import ClusterReader

NOT_COORDINATOR = 16
GROUPS = ("a", "b")


def decoded(request: Any, *values: Any) -> Any:
    tags = ({},) if request.FLEXIBLE_VERSION else ()
    response = request.RESPONSE_TYPE(*values, *tags)  # held: kafka-python's encode is weak
    return request.RESPONSE_TYPE.decode(response.encode())


def assignment(*partitions: int) -> bytes:
    raw = ConsumerProtocolMemberAssignment_v0(3, [("t", list(partitions))], b"")
    return bytes(raw.encode())


@dataclass
class Cluster:
    """What the scripted brokers answer: each group's state and members (instance ids, each
    with its partitions of topic `t`), its coordinator, an error its describe answers with,
    and the partition count of `t`."""

    members: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=lambda: {
        "a": {"a-0": (0, 1), "a-1": (2, 3)}, "b": {"b-0": (0, 1, 2, 3)}})
    states: dict[str, str] = field(default_factory=lambda: dict.fromkeys(GROUPS, "Stable"))
    coordinators: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 1))
    errors: dict[str, int] = field(default_factory=dict)
    partitions: int = 4


class ScriptedWire:
    """`wire.Wire` as the reads use it, answering from a `Cluster`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.sent: Counter[str] = Counter()

    def any_broker(self) -> int:
        return 1

    def brokers(self) -> set[int]:
        return {1, 2}

    def learn(self, metadata: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def exchange(self, requests: Sequence[tuple[int, Any]], deadline: float) -> list[Any]:
        return [self.answer(node, request) for node, request in requests]

    def answer(self, node: int, request: Any) -> Any:
        self.sent[wire.API_NAMES[request.API_KEY]] += 1
        c = self.cluster
        if request.API_KEY == 3:  # Metadata
            parts = [(0, p, 1, 0, [1], [1], []) for p in range(c.partitions)]
            return decoded(request, 0, [(1, "h1", 9092, None), (2, "h2", 9092, None)], "c", 1,
                           [(0, "t", False, parts, set())], set())
        if request.API_KEY == 10:  # FindCoordinator
            return decoded(request, 0, [(g, c.coordinators[g], "h", 9092, 0, None, {})
                                        for g in request.coordinator_keys])
        if request.API_KEY == 15:  # DescribeGroups
            return decoded(request, 0, [self.described(node, g) for g in request.groups])
        if request.API_KEY == 9:  # OffsetFetch: nothing committed
            return decoded(request, 0, [(g[0], [], 0, {}) for g in request.groups])
        return OSError("no ListOffsets in this script")

    def described(self, node: int, group: str) -> tuple[Any, ...]:
        c = self.cluster
        code = c.errors.get(group, 0 if node == c.coordinators[group] else NOT_COORDINATOR)
        members = [] if code else [
            (f"{instance}-id", instance, "client", "/10.0.0.1", b"", assignment(*parts), {})
            for instance, parts in c.members[group].items()]
        return (code, group, "" if code else c.states[group], "consumer", "range", members,
                -2147483648, {})


class NoClient:
    """kafka-python's client as far as making a reader asks it: every version taken."""

    def __init__(self, **_: Any) -> None:
        pass

    def get_api_versions(self) -> dict[int, tuple[int, int]]:
        return {r.API_KEY: (0, 99) for r in wire.USED}


@dataclass
class Told:
    groups: list[frozenset[str]] = field(default_factory=list)

    def __call__(self, groups: frozenset[str]) -> None:
        self.groups.append(groups)


def reader(cluster: Cluster) -> tuple[ClusterReader, Told]:
    made = ClusterReader({"bootstrap.servers": "k:9092"}, make_client=NoClient)
    made.wire = ScriptedWire(cluster)  # type: ignore[assignment]
    told = made.on_change = Told()
    for group in GROUPS:
        made.register(Registration(group, topics=("t",)), 0.0)
    return made, told


def test_the_first_read_tells_nothing_and_an_unchanged_one_nothing_either() -> None:
    cluster = Cluster()
    reads, told = reader(cluster)
    reads.read(0.0)
    reads.read(10.0)
    view = reads.group("a").described
    assert view is not None and view.outcome.view is not None
    assert [m.instance_id for m in view.outcome.view.members] == ["a-0", "a-1"]
    assert told.groups == []


def a_member_joins(c: Cluster) -> None:
    c.members["a"]["stranger"] = ()


def a_member_leaves(c: Cluster) -> None:
    del c.members["a"]["a-1"]


def partitions_move(c: Cluster) -> None:
    c.members["a"] = {"a-0": (0,), "a-1": (1, 2, 3)}


def rebalancing(c: Cluster) -> None:
    c.states["a"] = "PreparingRebalance"


def coordinator_moves(c: Cluster) -> None:
    c.coordinators["a"] = 2


def describe_fails(c: Cluster) -> None:
    c.errors["a"] = 30  # GROUP_AUTHORIZATION_FAILED


def partitions_added(c: Cluster) -> None:
    c.partitions = 6


@pytest.mark.parametrize(("change", "told"), [
    (a_member_joins, {"a"}), (a_member_leaves, {"a"}), (partitions_move, {"a"}),
    (rebalancing, {"a"}), (coordinator_moves, {"a"}), (describe_fails, {"a"}),
    (partitions_added, {"a", "b"}),
], ids=["a member joins", "a member leaves", "partitions move", "a rebalance",
        "the coordinator moves", "the describe fails", "the topic grows"])
def test_a_whole_read_tells_the_groups_whose_answer_changed(change: Any, told: set[str]) -> None:
    cluster = Cluster()
    reads, listener = reader(cluster)
    reads.read(0.0)
    change(cluster)
    reads.read(10.0)
    assert listener.groups == [frozenset(told)]
    reads.read(20.0)
    assert listener.groups == [frozenset(told)], "told once, not each read after"


def test_a_describe_that_answers_again_is_a_change_too() -> None:
    cluster = Cluster()
    reads, listener = reader(cluster)
    reads.read(0.0)
    describe_fails(cluster)
    reads.read(10.0)
    del cluster.errors["a"]
    reads.read(20.0)
    assert listener.groups == [frozenset({"a"}), frozenset({"a"})]


def test_a_passs_own_read_tells_nothing_and_the_next_whole_read_tells_it() -> None:
    """The pass reads what it reads; a change the pass's own read found first (a read of its
    offsets may have, after the pass took its describe) is still told once."""
    cluster = Cluster()
    reads, listener = reader(cluster)
    reads.read(0.0)
    a_member_joins(cluster)
    reads.read(5.0, only=["a"])
    assert listener.groups == []
    reads.refresh(10.0)
    assert listener.groups == [frozenset({"a"})]


def test_a_forgotten_group_is_no_change() -> None:
    cluster = Cluster()
    reads, listener = reader(cluster)
    reads.read(0.0)
    reads.forget("a")
    a_member_joins(cluster)
    reads.read(10.0)
    assert listener.groups == []


def test_the_reads_wake_the_owners_of_the_groups_that_changed() -> None:
    woken: list[frozenset[str]] = []
    pool = clusterpool.ClusterReads(on_change=woken.append)
    pool.owners.update({"uid-a": ("cluster-1", "a"), "uid-a2": ("cluster-1", "a"),
                        "uid-b": ("cluster-1", "b"), "uid-other": ("cluster-2", "a")})
    pool._changed("cluster-1", frozenset({"a"}))
    pool._changed("cluster-1", frozenset({"gone"}))
    assert woken == [frozenset({"uid-a", "uid-a2"})]


def test_a_listener_that_fails_does_not_fail_the_read() -> None:
    def fails(_: frozenset[str]) -> None:
        raise RuntimeError("the event loop is closed")

    pool = clusterpool.ClusterReads(on_change=fails)
    pool.owners["uid-a"] = ("cluster-1", "a")
    pool._changed("cluster-1", frozenset({"a"}))  # no exception


class Closing:
    """A reader's `closed` event that is set after `waits` waits, recording each timeout."""

    def __init__(self, waits: int) -> None:
        self.left = waits
        self.timeouts: list[float] = []

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        self.left -= 1
        return self.left < 0


@dataclass
class Due:
    """A reader whose read is due in `due[i]` seconds at the i-th look (None: no group)."""

    due: list[float | None]
    closed: Closing
    interval_s: float = 10.0
    broken: str = ""
    refreshed: int = 0

    def next_read_in(self, now: float) -> float | None:
        return self.due.pop(0)

    def refresh(self, now: float) -> Counter[str]:
        self.refreshed += 1
        return Counter()


def test_a_reader_reads_whenever_due_until_it_is_closed() -> None:
    due = Due([0.0, 7.0, None, 10.0, 1.0], Closing(waits=4))
    clusterpool.keep_reading(due)  # type: ignore[arg-type]
    assert due.refreshed == 3, "due now, in 7 s, and in 10 s; not while no group is registered"
    assert due.closed.timeouts == pytest.approx([0.01, 7.01, 10.0, 10.01, 1.01])
    assert due.due == [], "it stopped at the close"


def test_a_broken_reader_stops_reading() -> None:
    due = Due([0.0, 0.0], Closing(waits=5), broken="kafka-python failed")
    clusterpool.keep_reading(due)  # type: ignore[arg-type]
    assert due.refreshed == 0 and due.closed.timeouts == []


def test_what_the_reads_hold_of_a_group_names_its_coordinator_as_last_found() -> None:
    """The rebalance ledger's evidence of a coordinator move (`Snapshot.coordinator`)."""
    cluster = Cluster()
    reads, _ = reader(cluster)
    reads.read(0.0)
    assert reads.group("a").coordinator == 1
    coordinator_moves(cluster)
    reads.read(10.0)
    assert reads.group("a").coordinator == 2 and reads.group("b").coordinator == 1
