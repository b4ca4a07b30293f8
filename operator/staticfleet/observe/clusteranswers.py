"""What the answers of the per-cluster reads (`clusterreads`) say, in the operator's own types:
a group's description as `GroupView` (what `kafkareads.describe_group` gives), its committed
offsets and the end offsets as plain dicts, the topics as `TopicsSeen`. Pure: each function
takes one decoded answer (the wire kit's schemas, `kafkawire.messages`, or kafka-python's)
and returns values.

An error is never a value: a group whose answer is an error has an `Outcome` that says which
(`moving`: its coordinator moved or is loading it), a partition with an error or no committed
offset is left out, never given as 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkawire import messages
from kafkawire.messages import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    GROUP_ID_NOT_FOUND,
    NONE,
    NOT_COORDINATOR,
    UNKNOWN_TOPIC_OR_PARTITION,
    assignment_partitions,
)
from staticfleet.decisions.snapshot import GroupMemberView, GroupView

TP = tuple[str, int]

MOVED_CODES = frozenset({COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})
"""The group's coordinator is elsewhere, or none is elected: look it up again."""
MOVING_CODES = MOVED_CODES | {COORDINATOR_LOAD_IN_PROGRESS}
"""The group will answer within seconds (its new coordinator loads it): no answer now."""

CLASSIC_STATES = ("Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead")
CONSUMER_STATES = ("Stable", "Empty", "Dead")
"""The states as the per-group reads give them: librdkafka (2.16) knows the classic states
alone, and calls a KIP-848 group that is Assigning or Reconciling "Unknown"; these reads say
the same, so a pass decides as it did (decisions/rebalance/count.py would count those two as
rebalances: giving them is a change of its own, with its tests)."""


@dataclass(frozen=True)
class Outcome:
    """What one describe answer says of one group: its `view`; or that this API does not know
    it (`elsewhere`: no such group, or one of the other type); or an error `code` (a Kafka
    error code, or -1 for none: no answer) with its text."""

    view: GroupView | None = None
    elsewhere: bool = False
    code: int = NONE
    text: str = ""
    unjoined: bool = False
    """A classic group that is Empty without a protocol type: no consumer ever joined it as its
    coordinator knows it (an offsets-only group; or, for a group that had members, a
    coordinator elected a moment ago that has not loaded them: seen on Kafka 4.1 under load)."""
    loading: bool = False
    """No answer because the group's coordinator may still be loading a group it had (its
    members vanished, or neither API knows it now), for up to `clusterreads.VANISHED_S`: a
    per-group read of the same coordinator would say the same wrong thing, so none is made."""

    @property
    def moving(self) -> bool:
        """No answer because the coordinator moved, is loading the group or did not answer."""
        return self.code in MOVING_CODES or self.code < 0

    @property
    def said_moving(self) -> bool:
        """The broker said the coordinator moved or is loading the group (not: no answer)."""
        return self.code in MOVING_CODES

    @property
    def moved(self) -> bool:
        """The coordinator must be looked up again before the group answers."""
        return self.code in MOVED_CODES or self.code < 0


def no_answer(why: str, loading: bool = False) -> Outcome:
    """The outcome of a group whose coordinator did not answer (or none was found), or may be
    loading it (`loading`)."""
    return Outcome(code=-1, text=why, loading=loading)


def state_name(state: str | None, known: tuple[str, ...] = CLASSIC_STATES) -> str:
    """Kafka's spelling of a state an answer gives (KIP-848 states may come in lower case),
    when it is one of `known`; else "Unknown"."""
    text = str(state or "").lower()
    return next((name for name in known if name.lower() == text), "Unknown")


def classic_assignment(raw: bytes | None) -> tuple[TP, ...]:
    """A classic member's partitions, from its assignment bytes (`messages.classic_assignment`;
    empty while the group is between generations). Bytes that do not decode are no
    partitions."""
    try:
        return tuple(sorted(messages.classic_assignment(raw)))
    except ValueError:
        return ()


def classic_outcome(group: Any) -> Outcome:
    """One group of a DescribeGroups v5 answer. Dead with no error is a group this API does
    not know (none, or a consumer group)."""
    code, group_id, state, _type, _data, members, _ops, _tags = group
    if code == GROUP_ID_NOT_FOUND or (code == NONE and state_name(state) == "Dead"):
        return Outcome(elsewhere=True)
    if code != NONE:
        return Outcome(code=code, text=f"describing group {group_id}: error {code}")
    return Outcome(GroupView(state=state_name(state), protocol="classic", members=tuple(
        GroupMemberView(member_id=member_id, instance_id=instance_id, client_id=client_id,
                        host=host, partitions=classic_assignment(assignment))
        for member_id, instance_id, client_id, host, _meta, assignment, _t in members or ())),
        unjoined=state_name(state) == "Empty" and not _type and not members)


def consumer_outcome(group: Any) -> Outcome:
    """One group of a ConsumerGroupDescribe v0 answer: GROUP_ID_NOT_FOUND is a group this
    API does not know (none, or a classic group). A member's partitions are its current
    assignment (what the admin client shows); the view carries the group epoch (the rebalance
    ledger's entries quote it)."""
    code, message, group_id, state, epoch, _target_epoch, _assignor, members = group[:8]
    if code == GROUP_ID_NOT_FOUND or (code == NONE and str(state).lower() == "dead"):
        return Outcome(elsewhere=True)
    if code != NONE:
        return Outcome(code=code, text=f"describing group {group_id}: error {code}: "
                                       f"{message or ''}".rstrip(": "))
    return Outcome(GroupView(state=state_name(state, CONSUMER_STATES), protocol="consumer",
                             members=tuple(_consumer_member(m) for m in members or ()),
                             epoch=int(epoch)))


def _consumer_member(member: Any) -> GroupMemberView:
    (member_id, instance_id, _rack, _epoch, client_id, host, _topics, _regex, owned,
     *_rest) = member
    return GroupMemberView(member_id=member_id, instance_id=instance_id, client_id=client_id,
                           host=host, partitions=tuple(sorted(assignment_partitions(owned))))


def described(answer: Any) -> dict[str, Outcome]:
    """The outcome of each group a DescribeGroups or ConsumerGroupDescribe answer tells of."""
    if answer.API_KEY == 69:
        return {g[2]: consumer_outcome(g) for g in answer.groups or ()}
    return {g[1]: classic_outcome(g) for g in answer.groups or ()}


def dead(protocol: str) -> GroupView:
    """A group neither API knows: the broker has no such group yet (it will be made with the
    spec's `protocol`)."""
    return GroupView(state="Dead", protocol=protocol)


def coordinators(answer: Any) -> dict[str, tuple[int | None, Outcome]]:
    """Each group of a FindCoordinator v4 answer: its coordinator's broker, or None and why."""
    out: dict[str, tuple[int | None, Outcome]] = {}
    for key, node, _host, _port, code, message, _tags in answer.coordinators or ():
        if code == NONE and node >= 0:
            out[key] = (int(node), Outcome())
        else:
            out[key] = (None, Outcome(code=code, text=f"finding the coordinator of group "
                                                      f"{key}: error {code}: {message or ''}"))
    return out


def committed(answer: Any) -> dict[str, tuple[Outcome, dict[TP, int]]]:
    """Each group of an OffsetFetch v8 answer: its outcome and its committed offsets (the
    partitions with an error or no commit left out)."""
    out: dict[str, tuple[Outcome, dict[TP, int]]] = {}
    for group_id, topics, code, _tags in answer.groups or ():
        if code != NONE:
            out[group_id] = (Outcome(code=code, text=f"reading the committed offsets of group "
                                                     f"{group_id}: error {code}"), {})
            continue
        out[group_id] = (Outcome(), {
            (name, int(p)): int(offset) for name, partitions, _t in topics or ()
            for p, offset, _epoch, _meta, error, _t2 in partitions or ()
            if error == NONE and offset >= 0})
    return out


def end_offsets(answer: Any) -> dict[TP, int]:
    """The end offset of each partition of a ListOffsets v5 answer that has one."""
    return {(topic, int(p)): int(offset) for topic, partitions in answer.topics or ()
            for p, error, _timestamp, offset, _epoch in partitions or ()
            if error == NONE and offset >= 0}


@dataclass(frozen=True)
class TopicsAnswer:
    """The topics of a Metadata v8 answer: partition counts, each partition's leader (-1:
    none now), the topics that do not exist and the others' errors."""

    counts: Mapping[str, int]
    leaders: Mapping[TP, int]
    missing: frozenset[str] = frozenset()
    errors: Mapping[str, int] = field(default_factory=dict)

    def leaderless(self, topics: Iterable[str]) -> frozenset[TP]:
        wanted = set(topics)
        return frozenset(tp for tp, leader in self.leaders.items()
                         if leader < 0 and tp[0] in wanted)


def topics(answer: Any) -> TopicsAnswer:
    """The topics of a Metadata v8 answer (`TopicsAnswer`)."""
    counts: dict[str, int] = {}
    leaders: dict[TP, int] = {}
    missing: set[str] = set()
    errors: dict[str, int] = {}
    for code, name, _internal, partitions, _ops in answer.topics or ():
        if code == UNKNOWN_TOPIC_OR_PARTITION:
            missing.add(name)
        elif code != NONE:
            errors[name] = int(code)
        else:
            counts[name] = len(partitions or ())
            for p in partitions or ():
                leaders[(name, int(p[1]))] = int(p[2])
    return TopicsAnswer(counts, leaders, frozenset(missing), errors)
