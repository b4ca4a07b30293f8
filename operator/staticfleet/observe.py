"""What the operator reads from outside Kubernetes: the Kafka cluster (through the admin
client) and the members' own `/status` endpoints.

Everything here blocks; the operator calls it from Kopf's sync handlers, which run in a thread
pool. Errors become `KafkaUnavailable` / `TopicMissing` with a message a user can act on.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

ADMIN_TIMEOUT_S = 10.0

# Broker configs that bound the client timeouts, by group protocol.
CLASSIC_BOUNDS = ("group.min.session.timeout.ms", "group.max.session.timeout.ms")
CONSUMER_BOUNDS = (
    "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms",
    "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms",
    "group.consumer.session.timeout.ms", "group.consumer.heartbeat.interval.ms",
)


class KafkaUnavailable(RuntimeError):
    """The Kafka cluster could not be reached or refused a request."""


class TopicMissing(RuntimeError):
    """A topic named in the spec does not exist on the cluster."""


@dataclass(frozen=True)
class GroupMemberView:
    """One member of the group as the broker describes it."""

    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class GroupView:
    """The group as the broker describes it right now."""

    state: str
    protocol: str
    members: tuple[GroupMemberView, ...] = ()

    def by_instance(self) -> dict[str, GroupMemberView]:
        return {m.instance_id: m for m in self.members if m.instance_id}


@dataclass
class AdminPool:
    """One AdminClient per distinct connection configuration, shared by all groups."""

    clients: dict[str, AdminClient] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, conf: dict[str, str]) -> AdminClient:
        key = json.dumps(conf, sort_keys=True)
        with self.lock:
            client = self.clients.get(key)
            if client is None:
                client = AdminClient({**conf, "socket.timeout.ms": 10000,
                                      "client.id": "staticfleet-operator"})
                self.clients[key] = client
            return client


def _result(future: Any, what: str) -> Any:
    try:
        return future.result(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        raise KafkaUnavailable(f"{what}: {exc.args[0]}") from exc
    except TimeoutError as exc:
        raise KafkaUnavailable(f"{what}: no answer within {ADMIN_TIMEOUT_S:.0f}s") from exc


def describe_group(admin: AdminClient, group_id: str) -> GroupView:
    """State and members of a group; a group that does not exist yet is `Dead`/`Empty`."""
    futures = admin.describe_consumer_groups([group_id], request_timeout=ADMIN_TIMEOUT_S)
    desc = _result(futures[group_id], f"describing group {group_id}")
    members = tuple(
        GroupMemberView(
            member_id=m.member_id, instance_id=m.group_instance_id, client_id=m.client_id,
            host=m.host,
            partitions=tuple(sorted((tp.topic, tp.partition)
                                    for tp in (m.assignment.topic_partitions or []))),
        )
        for m in desc.members
    )
    group_type = getattr(desc, "type", None)
    protocol = getattr(group_type, "name", "CLASSIC").lower()
    return GroupView(state=_state_name(desc.state), protocol=protocol, members=members)


def _state_name(state: Any) -> str:
    """Kafka's spelling of a group state: Stable, PreparingRebalance, Empty, ..."""
    names = {"STABLE": "Stable", "PREPARING_REBALANCING": "PreparingRebalance",
             "COMPLETING_REBALANCING": "CompletingRebalance", "EMPTY": "Empty", "DEAD": "Dead",
             "ASSIGNING": "Assigning", "RECONCILING": "Reconciling", "UNKNOWN": "Unknown"}
    name = getattr(state, "name", str(state))
    return names.get(name, name.title())


def partition_counts(admin: AdminClient, topics: list[str]) -> dict[str, int]:
    """Partition count of each named topic; raises TopicMissing naming the absent ones."""
    try:
        md = admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        raise KafkaUnavailable(f"listing topics: {exc.args[0]}") from exc
    missing = [t for t in topics if t not in md.topics or md.topics[t].error is not None]
    if missing:
        raise TopicMissing(f"topic(s) {', '.join(sorted(missing))} do not exist on the cluster; "
                           "create them or fix spec.kafka.topics")
    return {t: len(md.topics[t].partitions) for t in topics}


def matching_topics(admin: AdminClient, pattern: str) -> dict[str, int]:
    """Topics whose names match a subscription pattern, with their partition counts."""
    import re

    try:
        md = admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        raise KafkaUnavailable(f"listing topics: {exc.args[0]}") from exc
    rx = re.compile(pattern)
    return {name: len(t.partitions) for name, t in md.topics.items()
            if not name.startswith("__") and rx.fullmatch(name)}


def broker_bounds(admin: AdminClient) -> dict[str, int]:
    """The group-coordinator bounds of the cluster, read from one broker's configuration."""
    try:
        md = admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        raise KafkaUnavailable(f"reading cluster metadata: {exc.args[0]}") from exc
    broker_id = str(md.controller_id if md.controller_id >= 0 else next(iter(md.brokers)))
    resource = ConfigResource(ResourceType.BROKER, broker_id)
    futures = admin.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_S)
    entries = _result(futures[resource], f"describing broker {broker_id} configuration")
    wanted = (*CLASSIC_BOUNDS, *CONSUMER_BOUNDS)
    return {k: int(entries[k].value) for k in wanted if k in entries and entries[k].value}


def set_group_timeouts(admin: AdminClient, group_id: str, session_ms: int,
                       heartbeat_ms: int) -> None:
    """For KIP-848 groups: session and heartbeat are group configs on the broker."""
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", str(session_ms),
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("consumer.heartbeat.interval.ms", str(heartbeat_ms),
                    incremental_operation=AlterConfigOpType.SET),
    ])
    futures = admin.incremental_alter_configs([resource], request_timeout=ADMIN_TIMEOUT_S)
    _result(futures[resource], f"setting the timeouts of group {group_id}")


def is_unknown_group(exc: KafkaUnavailable) -> bool:
    cause = exc.__cause__
    return (isinstance(cause, KafkaException)
            and cause.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND)


def member_status(host: str, port: int, timeout: float = 2.0) -> dict[str, Any] | None:
    """A member's `/status` JSON, or None when it does not answer (yet)."""
    if not host:
        return None
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/status", timeout=timeout) as resp:
            data = json.load(resp)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
