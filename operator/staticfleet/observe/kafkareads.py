"""What the operator reads from the Kafka cluster, and the configs it sets there: the group
(`describe_group`), its committed and end offsets (`committed_offsets`, `end_offsets`; the
lag is made of them, and of what the members report, by `lagreads`), the topics' partition
counts, the brokers' group-coordinator bounds (`broker_bounds`) and a KIP-848 group's own
configs (`set_group_configs`, and its session timeout as the broker holds it:
`group_session_timeout`). Each request goes through `kafkaadmin`, which turns its failures into
`KafkaUnavailable`; a topic the spec names that does not exist is `TopicMissing`, bounds the
principal may not read are `BoundsDenied`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    OffsetSpec,
    ResourceType,
)

from staticfleet.decisions.snapshot import GroupMemberView, GroupView
from staticfleet.decisions.spec.kafka import topic_matcher
from staticfleet.observe.kafkaadmin import (
    ADMIN_TIMEOUT_S,
    GROUP_TIMEOUT_S,
    UNREACHABLE_CODES,
    Admin,
    KafkaUnavailable,
    answer_of,
    error_code,
    group_request,
    is_unknown_group,
    mark_failed,
    raise_if_auth_failed,
    start_request,
)

GROUP_SESSION_CONFIG = "consumer.session.timeout.ms"
"""A KIP-848 group's own session timeout (a GROUP resource config)."""

# Broker configs that bound the client timeouts, by group protocol.
CLASSIC_BOUNDS = ("group.min.session.timeout.ms", "group.max.session.timeout.ms")
CONSUMER_BOUNDS = (
    "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms",
    "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms",
    "group.consumer.session.timeout.ms", "group.consumer.heartbeat.interval.ms",
)


class TopicMissing(RuntimeError):
    """A topic named in the spec does not exist on the cluster."""


class BoundsDenied(RuntimeError):
    """The principal may not read the brokers' configuration (DescribeConfigs on the cluster):
    the group-coordinator bounds are unknown."""


def describe_group(admin: Admin, group_id: str, protocol: str = "classic") -> GroupView:
    """State and members of a group; a group the broker does not know yet is `Dead` (with
    the `protocol` it will be created with)."""
    what = f"describing group {group_id}"
    try:
        desc = group_request(admin, what, "describe_group", (group_id,))
    except KafkaUnavailable as exc:
        if is_unknown_group(exc):
            return GroupView(state="Dead", protocol=protocol)
        raise
    members = tuple(
        GroupMemberView(member_id=member_id, instance_id=instance_id, client_id=client_id,
                        host=host, partitions=tuple(sorted(tuple(tp) for tp in partitions)))
        for member_id, instance_id, client_id, host, partitions in desc["members"])
    return GroupView(state=_state_name(desc["state"]), protocol=str(desc["type"]).lower(),
                     members=members)


def committed_offsets(admin: Admin, group_id: str, tps: Iterable[tuple[str, int]]
                      ) -> dict[tuple[str, int], int]:
    """The group's committed offset of each of `tps` it committed (an OffsetFetch to its
    coordinator). An optional read: a failure fails this read only."""
    wanted = list(tps)
    if not wanted:
        return {}
    what = f"reading the committed offsets of group {group_id}"
    answer = group_request(admin, what, "committed", (group_id, wanted), optional=True)
    return {(topic, partition): offset for topic, partition, offset, failed in answer
            if not failed and offset >= 0}


def end_offsets(admin: Admin, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The end offset of each of `tps` (one ListOffsets per partition leader; partitions whose
    leader did not answer are left out). An optional read: it never marks the cluster failed."""
    wanted = {TopicPartition(t, p): OffsetSpec.latest() for t, p in tps}
    if not wanted:
        return {}
    what = "reading end offsets"
    futures = start_request(admin, what, lambda: admin.client.list_offsets(
        wanted, request_timeout=ADMIN_TIMEOUT_S))
    out: dict[tuple[str, int], int] = {}
    for tp, future in futures.items():
        try:
            out[(tp.topic, tp.partition)] = answer_of(admin, future, what, optional=True).offset
        except KafkaUnavailable:
            continue  # that partition's leader is moving: its figure stays stale
    return out


def _state_name(state: Any) -> str:
    """Kafka's spelling of a group state: Stable, PreparingRebalance, Empty, ..."""
    names = {"STABLE": "Stable", "PREPARING_REBALANCING": "PreparingRebalance",
             "COMPLETING_REBALANCING": "CompletingRebalance", "EMPTY": "Empty", "DEAD": "Dead",
             "ASSIGNING": "Assigning", "RECONCILING": "Reconciling", "UNKNOWN": "Unknown"}
    name = getattr(state, "name", str(state))
    return names.get(name, name.title())


@dataclass(frozen=True)
class TopicsSeen:
    """The subscribed topics as the brokers' metadata shows them."""

    counts: dict[str, int]
    """Partition count of each topic."""
    leaderless: frozenset[tuple[str, int]] = frozenset()
    """Partitions with no leader now (leader -1: its brokers are down or out of the ISR)."""


def _leaderless(name: str, topic: Any) -> set[tuple[str, int]]:
    return {(name, int(p)) for p, meta in topic.partitions.items() if meta.leader < 0}


def topics_seen(admin: Admin, topics: Iterable[str]) -> TopicsSeen:
    """Partition count and leaderless partitions of each named topic, from a metadata request
    per topic to any broker (DescribeTopics would wait for the one broker librdkafka takes as
    the controller, which may be the one restarting); raises TopicMissing naming the absent
    ones."""
    names = sorted(set(topics))
    what = f"describing topic(s) {', '.join(names)}"
    admin.pool.check(admin.key, admin.bootstrap)
    counts: dict[str, int] = {}
    leaderless: set[tuple[str, int]] = set()
    missing = []
    for name in names:
        try:
            metadata = admin.client.list_topics(topic=name, timeout=ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            message = f"{what} at {admin.label}: {error}"
            if not isinstance(error, KafkaError) or error.code() in UNREACHABLE_CODES:
                raise_if_auth_failed(admin, what)
                mark_failed(admin, message, optional=False)
            raise KafkaUnavailable(message) from exc
        topic = metadata.topics.get(name)
        error = topic.error if topic is not None else None
        if topic is None or (error is not None and error.code() in (
                KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)):
            missing.append(name)
            continue
        if error is not None:
            raise KafkaUnavailable(f"{what} at {admin.label}: {error}") from KafkaException(
                error)
        counts[name] = len(topic.partitions)
        leaderless |= _leaderless(name, topic)
    admin.pool.record(admin.key, None)
    if missing:
        raise TopicMissing(f"topic(s) {', '.join(missing)} do not exist on the cluster at "
                           f"{admin.label}; create them or fix spec.kafka.topics")
    return TopicsSeen(counts, frozenset(leaderless))


def pattern_topics_seen(admin: Admin, pattern: str) -> TopicsSeen:
    """Topics whose names match a subscription pattern, with their partition counts and
    leaderless partitions (a pattern needs the cluster's whole topic list)."""

    admin.pool.check(admin.key, admin.bootstrap)
    try:
        md = admin.client.list_topics(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        raise_if_auth_failed(admin, "listing topics")
        message = f"listing topics at {admin.label}: {exc.args[0]}"
        admin.pool.record(admin.key, message)
        raise KafkaUnavailable(message) from exc
    admin.pool.record(admin.key, None)
    matches = topic_matcher(pattern)
    matched = {name: t for name, t in md.topics.items()
               if not name.startswith("__") and matches(name)}
    return TopicsSeen({name: len(t.partitions) for name, t in matched.items()},
                      frozenset(tp for name, t in matched.items() for tp in _leaderless(name, t)))


def broker_bounds(admin: Admin) -> dict[str, int]:
    """The group-coordinator bounds of the cluster, read from one broker's configuration (the
    next broker when one does not answer: it may be restarting). Raises `BoundsDenied` when the
    principal may not read it."""
    what = "describing the cluster"
    try:
        cluster = answer_of(admin, start_request(admin, what, lambda: admin.client.describe_cluster(
            request_timeout=ADMIN_TIMEOUT_S)), what)
        admin.pool.note_cluster_id(admin.bootstrap, cluster.cluster_id)
        nodes = sorted(cluster.nodes, key=lambda n: (
            cluster.controller is None or n.id != cluster.controller.id, n.id))
        for i, node in enumerate(nodes):
            last = i == len(nodes) - 1
            resource = ConfigResource(ResourceType.BROKER, str(node.id))
            what = f"describing broker {node.id} configuration"
            futures = start_request(admin, what, lambda r=resource: admin.client.describe_configs(
                [r], request_timeout=GROUP_TIMEOUT_S))
            try:
                entries = answer_of(admin, futures[resource], what, optional=not last,
                                  timeout=GROUP_TIMEOUT_S)
                break
            except KafkaUnavailable as exc:
                if last or error_code(exc) in _DENIED_CODES:
                    raise
    except KafkaUnavailable as exc:
        if error_code(exc) in _DENIED_CODES:
            raise BoundsDenied(str(exc)) from exc
        raise
    wanted = (*CLASSIC_BOUNDS, *CONSUMER_BOUNDS)
    return {k: int(entries[k].value) for k in wanted if k in entries and entries[k].value}


class GroupConfigsDenied(RuntimeError):
    """The principal may not read the group's configs (DescribeConfigs on the GROUP)."""


def group_session_timeout(admin: Admin, group_id: str) -> int | None:
    """A KIP-848 group's session timeout as the broker holds it (the group config
    consumer.session.timeout.ms, or the broker's default for it; None when the answer has
    none). Raises `GroupConfigsDenied` when the principal may not read it, `KafkaUnavailable`
    when the broker does not answer."""
    resource = ConfigResource(ResourceType.GROUP, group_id)
    what = f"describing the configs of group {group_id}"
    futures = start_request(admin, what, lambda: admin.client.describe_configs(
        [resource], request_timeout=ADMIN_TIMEOUT_S))
    try:
        entries = answer_of(admin, futures[resource], what, optional=True)
    except KafkaUnavailable as exc:
        if error_code(exc) in _DENIED_CODES:
            raise GroupConfigsDenied(str(exc)) from exc
        raise
    entry = entries.get(GROUP_SESSION_CONFIG)
    return int(entry.value) if entry is not None and entry.value else None


def set_group_configs(admin: Admin, group_id: str, configs: Mapping[str, str]) -> None:
    """Set per-group broker configs (KIP-848 groups: their session timeout and heartbeat)."""
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in sorted(configs.items())])
    what = f"setting the configs of group {group_id}"
    futures = start_request(admin, what, lambda: admin.client.incremental_alter_configs(
        [resource], request_timeout=ADMIN_TIMEOUT_S))
    answer_of(admin, futures[resource], what)


_DENIED_CODES = frozenset({
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
})

