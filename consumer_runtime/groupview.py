"""The group as its coordinator describes it, for a leave's check and a drained member's wait
(`GroupView`).

`GroupView` describes the group through kafka-python's client, as the static leave sends its
leave (consumer_runtime/staticleave.py), never through librdkafka's admin client: librdkafka 2.16
can abort the whole process when such a request loses its coordinator (librdkafka#4605), and a
scale-down during a broker roll is when it does. Every failure is an answer of None ("unknown").
This module and staticleave are the member's only users of kafka-python; leaving.py imports them
when a leave or a drain first needs them, so a member that never leaves does not load them.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka import KafkaClient

from consumer_runtime.config import RuntimeConfig
from consumer_runtime.membership import connection_settings
from consumer_runtime.records import TopicPartition as TP
from consumer_runtime.staticleave import GroupCoordinator
from kafkawire.messages import (
    COORDINATOR_MOVING,
    GROUP_ID_NOT_FOUND,
    ConsumerGroupDescribe,
    DescribeGroups,
    assignment_partitions,
    classic_assignment,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupMember:
    """A member as the group's coordinator describes it: its member id, its group.instance.id
    (None for a dynamic member) and the partitions it holds; None when the description does not
    say (a classic group between generations, where assignments are not shown; a consumer
    group's member that has still to give partitions up or take its new ones)."""

    member_id: str
    instance_id: str | None
    partitions: frozenset[TP] | None = frozenset()


def held_by(members: Iterable[GroupMember], instance_id: str | None,
            member_id: str) -> set[TP] | None:
    """Partitions the broker shows for this member (matched by instance id, else by member id)
    in a group description's `members`; empty when it is not listed, None when it is listed
    but its partitions are not known now."""
    held: set[TP] = set()
    for m in members:
        if (m.instance_id == instance_id) if instance_id else (m.member_id == member_id):
            if m.partitions is None:
                return None
            held |= m.partitions
    return held


def held_by_another(members: Iterable[GroupMember], instance_id: str | None,
                    member_id: str) -> bool:
    """A group description's `members` show `instance_id` under a member id other than
    `member_id`: another process joined with it (a drained member's replacement)."""
    return bool(instance_id) and any(
        m.instance_id == instance_id and m.member_id != member_id for m in members)


# -- the group as its coordinator describes it ----------------------------------------------------
#
# The member asks through kafka-python's client, which the static leave already uses
# (`staticleave.GroupCoordinator`): librdkafka 2.16 can abort the whole process when an admin
# request such as describe_consumer_groups loses its coordinator (librdkafka#4605), so the member
# makes no librdkafka admin request at all. A classic group answers DescribeGroups (v5: v4 is
# the first with each member's group.instance.id, and both came in Kafka 2.4); a consumer
# (KIP-848) group answers ConsumerGroupDescribe (v0). Both are the wire kit's
# (`kafkawire.messages`), as the operator's per-cluster reads send them. Each API tells of a
# group of the other type that it does not know it, so the member asks its own protocol's first
# and the other when the first says so; a group neither knows is no answer (a coordinator that
# has just taken the group over says so of it).

@dataclass(frozen=True)
class Described:
    """What one describe answer says of the group: its `members`, or that this API does not
    know it (`absent`: no such group, or one of the other type), or nothing that says who is in
    it (`error`; `moved`: the coordinator moved or is loading the group)."""

    members: tuple[GroupMember, ...] = ()
    absent: bool = False
    error: str = ""
    moved: bool = False


def _failed(error_code: int, message: str | None) -> Described:
    if error_code == GROUP_ID_NOT_FOUND:
        return Described(absent=True)
    return Described(error=f"error {error_code}: {message or ''}".strip(),
                     moved=error_code in COORDINATOR_MOVING)


def read_classic(answer: Any, group_id: str) -> Described:
    """A DescribeGroups v5 answer. A group this API does not know (none, or a consumer group)
    is Dead with no error (GROUP_ID_NOT_FOUND from version 6). So is, for the member, an Empty
    group with no protocol type: no consumer ever joined it as its coordinator knows it. A
    group whose members all left keeps its protocol type ("consumer"); a coordinator elected a
    moment ago answered the empty one, under load, for a group whose member it loaded 80 ms
    later (Kafka 4.1), and the member's group does not go away. The coordinator shows the
    members' assignments only while the group is Stable: between generations they are not
    known."""
    for error_code, group, state, protocol_type, _protocol, members, _ops, _tags in answer.groups:
        if group != group_id:
            continue
        if error_code:
            return _failed(error_code, None)
        if state == "Dead" or (state == "Empty" and not protocol_type and not members):
            return Described(absent=True)
        if protocol_type not in ("", "consumer"):
            return Described(error=f"group {group_id} has protocol type {protocol_type!r}, "
                                   "not a consumer group's")
        stable = state == "Stable"
        try:
            return Described(members=tuple(
                GroupMember(member_id, instance_id, classic_assignment(raw) if stable else None)
                for member_id, instance_id, _client, _host, _meta, raw, _tags in members))
        except ValueError as exc:
            return Described(error=f"an assignment that does not decode: {exc}")
    return Described(error=f"the answer does not describe group {group_id}")


def read_consumer(answer: Any, group_id: str) -> Described:
    """A ConsumerGroupDescribe v0 answer: a group this API does not know (none, or a classic
    group) is GROUP_ID_NOT_FOUND. A member's partitions are its current assignment once it is at
    the group's assignment epoch. Before, they are not known: a member that has partitions to
    give up stays at its epoch until it acknowledged their revocation, and meanwhile its
    current assignment no longer shows them (Kafka's CurrentAssignmentBuilder,
    UNREVOKED_PARTITIONS); a static member that left for a while is at epoch -2."""
    for (error_code, message, group, state, _epoch, assignment_epoch, _assignor, members,
         _ops, _tags) in answer.groups:
        if group != group_id:
            continue
        if error_code:
            return _failed(error_code, message)
        if str(state).lower() == "dead":
            return Described(absent=True)
        return Described(members=tuple(
            GroupMember(member_id, instance_id, assignment_partitions(assignment)
                        if member_epoch >= assignment_epoch else None)
            for (member_id, instance_id, _rack, member_epoch, _client, _host, _topics, _regex,
                 assignment, _target, _tags) in members or ()))
    return Described(error=f"the answer does not describe group {group_id}")


@dataclass(frozen=True)
class DescribeApi:
    """One way to ask the coordinator who is in the group."""

    name: str
    request: Callable[[str], Any]
    read: Callable[[Any, str], Described]
    absent_unless_taken: bool
    """A broker that does not take this API has no group of its type."""

    def taken_by(self, versions: Mapping[int, tuple[int, int]]) -> bool:
        """The broker takes this API's version (`versions`: the broker's ApiVersions)."""
        request = self.request("")
        low, high = versions.get(request.API_KEY, (0, -1))
        return bool(low <= request.API_VERSION <= high)


CLASSIC_DESCRIBE = DescribeApi(
    "DescribeGroups v5", lambda group: DescribeGroups([group], False, {}), read_classic,
    absent_unless_taken=False)
CONSUMER_DESCRIBE = DescribeApi(
    "ConsumerGroupDescribe v0", lambda group: ConsumerGroupDescribe([group], False, {}),
    read_consumer, absent_unless_taken=True)


def describe_order(protocol: str) -> tuple[DescribeApi, DescribeApi]:
    """The APIs to ask, the member's own protocol's first: its group is of that type, unless the
    member is a classic one in a consumer group (Kafka lets classic members join one)."""
    if protocol == "consumer":
        return CONSUMER_DESCRIBE, CLASSIC_DESCRIBE
    return CLASSIC_DESCRIBE, CONSUMER_DESCRIBE


class GroupView:
    """The group as its coordinator describes it, asked through kafka-python's client (no
    librdkafka admin request: see above), for one leave or one drained wait. Every failure is
    an answer of None ("unknown"), never an exception; the connection is kept between
    questions and closed by `close` (or when the view is collected)."""

    def __init__(self, config: RuntimeConfig,
                 make_client: Callable[..., Any] = KafkaClient) -> None:
        self.group_id = config.group_id
        self.apis = describe_order(config.protocol)
        self.coordinator: GroupCoordinator | None = None
        self._close: Callable[[], Any] = lambda: None
        try:
            coordinator = GroupCoordinator(connection_settings(config), config.group_id,
                                           f"{config.member}-view", make_client)
            unusable = coordinator.unusable and f"the client's settings: {coordinator.unusable}"
        except Exception as exc:  # settings kafka-python cannot take
            unusable = str(exc)
        if unusable:  # no answers, said once
            log.warning("the group's coordinator cannot be asked who holds what (leaves and "
                        "drained waits go without its answer): %s", unusable)
            return
        self.coordinator = coordinator
        self._close = weakref.finalize(self, coordinator.close)

    def held(self, instance_id: str | None, member_id: str, timeout: float) -> set[TP] | None:
        """Partitions the broker shows for this member; None when it did not answer, or did
        not say (`held_by`)."""
        members = self.members(timeout)
        return None if members is None else held_by(members, instance_id, member_id)

    def taken_by_another(self, instance_id: str | None, member_id: str,
                         timeout: float) -> bool | None:
        """Another process holds `instance_id` in the group (`held_by_another`); None when the
        broker did not answer."""
        members = self.members(timeout)
        return None if members is None else held_by_another(members, instance_id, member_id)

    def members(self, timeout: float) -> Sequence[GroupMember] | None:
        """The group's members; None when no answer said who they are within `timeout`
        seconds. A group that no API knows is None too: a coordinator that has just taken the
        group over answers so until it loaded it (seen on Kafka 4.1: Dead, GROUP_ID_NOT_FOUND),
        and a group this member was in does not go away."""
        coordinator = self.coordinator
        if coordinator is None:
            return None
        deadline = time.monotonic() + timeout
        try:
            for api in self.apis:
                node = coordinator.find(deadline)
                if not api.taken_by(coordinator.api_versions()):
                    if api.absent_unless_taken:
                        continue
                    log.debug("group view: the broker does not take %s", api.name)
                    return None
                found = api.read(coordinator.send(node, api.request(self.group_id), deadline),
                                 self.group_id)
                if found.absent:
                    continue
                if found.error:
                    log.debug("group view: %s: %s", api.name, found.error)
                    if found.moved:
                        coordinator.moved()
                    return None
                return found.members
            log.debug("group view: no API knows group %s", self.group_id)
            return None
        except Exception as exc:  # kafka-python's errors and any other: "unknown", never raised
            log.debug("group view: %s: %s", type(exc).__name__, exc)
            coordinator.reset()
            return None

    def close(self) -> None:
        self._close()
