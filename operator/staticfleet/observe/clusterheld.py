"""What the per-cluster reads (`clusterreads`) are asked to read of one group (`Registration`),
how often, what they hold of it (`GroupRead`), and what of that wakes the group's pass when it
changes (`signature`).

A whole read compares each group's `signature` with the previous whole read's: the group's
describe (its state, its members and their assignments; or the error code of an answer without
one, not its wording), its coordinator, its topics' partition counts and leaderless partitions,
and the topics missing. Its offsets are not in it: a group at rest moves them all the time, and
what they mean (lag, a stall) is the passes' to judge at their pace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from staticfleet.observe.clusteranswers import TP, Outcome
from staticfleet.observe.kafkareads import TopicsSeen

INTERVAL_S = 10.0
"""How often a cluster is read (the groups' resync interval, passes.RESYNC_S): every group
it holds, whether or not its pass asks (`clusterpool`)."""
OFFSETS_INTERVAL_S = 60.0
"""How often a group's committed offsets and its partitions' end offsets are read at rest
(lagreads.READ_INTERVAL_S): they are then at most this and an interval old."""


@dataclass(frozen=True)
class Registration:
    """A group the operator asks the cluster's reads to cover."""

    group_id: str
    protocol: str = "classic"
    """classic or consumer: the describe API asked first (the other, when it does not know it)."""
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    """A subscription pattern instead of `topics`: the read asks for every topic."""
    offsets_age_s: float = OFFSETS_INTERVAL_S + INTERVAL_S
    """How old its committed and end offsets may be (`lagreads.max_age_s`): a read reads
    them when they would be older by the next read."""


@dataclass(frozen=True)
class Described:
    """A group's last describe: when, and what it said (`outcome.view`, or why none)."""

    at: float
    outcome: Outcome


@dataclass(frozen=True)
class Committed:
    """A group's committed offsets as last read, and when."""

    at: float
    offsets: Mapping[TP, int]


@dataclass(frozen=True)
class GroupRead:
    """What the cluster's reads hold of one group."""

    described: Described | None
    committed: Committed | None
    ends: Mapping[TP, tuple[float, int]]
    """The end offset of each partition of its topics that has one: (when read, offset)."""
    topics: TopicsSeen | None
    """Its topics' partition counts and leaderless partitions; None before any metadata."""
    missing: frozenset[str] = frozenset()
    """Its topics the brokers say do not exist."""
    coordinator: int | None = None
    """The broker that coordinates it, as last found (None: not known now)."""


Signature = tuple[Any, ...]


def signature(held: GroupRead, coordinator: int | None) -> Signature:
    """What of a group's answer, when it changes, wakes the group's pass (see the module's
    docstring); `coordinator`: the broker that coordinates it, if one is known."""
    described = held.described
    outcome = None if described is None else (
        described.outcome.view, described.outcome.code, described.outcome.elsewhere)
    topics = None if held.topics is None else (
        tuple(sorted(held.topics.counts.items())), held.topics.leaderless)
    return outcome, coordinator, topics, held.missing
