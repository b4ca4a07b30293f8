"""What the operator reads from (and sets on) outside Kubernetes: the Kafka cluster, through
the admin client, and the members' own `/status` endpoints, and what it asks of members
(`/leave`, `/rejoin`, `/activate`, `/drain`, with their group's bearer token).

Everything here blocks; the service calls it from a worker thread. Errors become
`KafkaUnavailable` / `TopicMissing` with a message a user can act on. A cluster that did not
answer is not asked again for a while (`AdminPool`): its groups fail fast instead of each
holding a worker for the whole admin timeout.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import (
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    OffsetSpec,
    ResourceType,
)

from staticfleet.coordinated import ChildDied, CoordinatedAdmin, RequestFailed
from staticfleet.decisions.snapshot import GroupMemberView, GroupView

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


class CoordinatorMoving(KafkaUnavailable):
    """The group's coordinator moved or is loading the group (its broker restarted, or a
    leader election moved the `__consumer_offsets` partition): the cluster answers, the group
    will be back within seconds. Not a failure of the cluster."""


class KafkaAuthFailed(KafkaUnavailable):
    """The cluster answers but refused the client's credentials (SASL) or its TLS handshake (a
    certificate it does not trust, or one the client does not trust). The message is the
    client's own error, which names no secret."""


class TopicMissing(RuntimeError):
    """A topic named in the spec does not exist on the cluster."""


class BoundsDenied(RuntimeError):
    """The principal may not read the brokers' configuration (DescribeConfigs on the cluster):
    the group-coordinator bounds are unknown."""


CLIENT_SETTINGS = {"socket.timeout.ms": 10000, "client.id": "staticfleet-operator",
                   "allow.auto.create.topics": False}
"""Never create a topic by asking for its metadata (a broker with auto.create.topics.enable)."""
FAILED_CLUSTER_HOLD_S = 5.0
IDLE_CLIENT_CLOSE_S = 900.0
"""An admin client no pass asked for this long is closed: the groups on its cluster are gone
(deleted, or moved to other servers), and librdkafka would reconnect to it forever."""
"""After a cluster failed to answer, its groups fail fast for this long (then it is asked
again), so one dead cluster does not hold the workers the other groups need."""


@dataclass
class AdminPool:
    """One AdminClient per distinct connection configuration, shared by all groups, and what
    each cluster last failed with."""

    clients: dict[str, AdminClient] = field(default_factory=dict)
    child: CoordinatedAdmin = field(default_factory=CoordinatedAdmin)
    """The child process that makes the coordinator-bound requests of every cluster."""
    failures: dict[str, tuple[float, str]] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)
    """Clusters that answered a request since they last failed (no need to probe them)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    hold_s: float = FAILED_CLUSTER_HOLD_S
    idle_s: float = IDLE_CLIENT_CLOSE_S
    last_used: dict[str, float] = field(default_factory=dict)
    auth_errors: dict[str, str] = field(default_factory=dict)
    """The last authentication or TLS error of each client, until a request succeeds. librdkafka
    reports it once (to `error_cb`), and the request itself then only times out."""

    def get(self, conf: dict[str, str]) -> Admin:
        key = json.dumps(conf, sort_keys=True)
        now = time.monotonic()
        with self.lock:
            for idle in [k for k, t in self.last_used.items() if now - t > self.idle_s]:
                # Dropping the last reference destroys the librdkafka handle.
                self.clients.pop(idle, None)
                self.child.forget(idle)
                self.last_used.pop(idle, None)
                self.failures.pop(idle, None)
                self.answered.discard(idle)
                self.auth_errors.pop(idle, None)
            self.last_used[key] = now
            client = self.clients.get(key)
            if client is None:
                settings: dict[str, Any] = {
                    **conf, **CLIENT_SETTINGS, "error_cb": lambda err: self._on_error(key, err)}
                client = AdminClient(settings)
                self.clients[key] = client
            return Admin(client, conf.get("bootstrap.servers", "?"), key, self)

    def coordinated(self, admin: Admin, op: str, args: tuple[Any, ...],
                    timeout: float) -> Future[Any]:
        """Start a coordinator-bound request of `admin`'s cluster in the child process
        (`staticfleet.coordinated`: librdkafka aborts the process on some of their failures)."""
        return self.child.submit(admin.key, {**admin.conf, **CLIENT_SETTINGS}, op, args, timeout)

    def renew(self, admin: Admin) -> None:
        """Drop librdkafka's cached coordinators of `admin`'s cluster: the cache is refreshed by
        every request, and admin requests do not drop an entry on NOT_COORDINATOR, so a client
        that keeps asking asks the old coordinator for as long as it keeps the group's
        partition. A new client (in the child) looks the coordinator up afresh."""
        self.child.forget(admin.key)

    def _on_error(self, key: str, err: KafkaError) -> None:
        if is_auth_error(err):
            with self.lock:
                self.auth_errors[key] = str(err.str())

    def auth_error(self, admin: Admin) -> str | None:
        """The client's authentication or TLS error, if it had one since its last success
        (served from librdkafka's event queue first)."""
        admin.client.poll(0)
        with self.lock:
            return self.auth_errors.get(admin.key)

    def check(self, key: str, bootstrap: str) -> None:
        """Raise the cluster's recent failure again instead of waiting for it once more; for a
        cluster that has not answered yet, fail at once when no bootstrap address accepts a
        connection (an admin request would wait its whole timeout)."""
        with self.lock:
            failed = self.failures.get(key)
            answered = key in self.answered
        if failed is not None and time.monotonic() - failed[0] < self.hold_s:
            with self.lock:
                auth = key in self.auth_errors
            raise (KafkaAuthFailed if auth else KafkaUnavailable)(failed[1])
        if not answered and (refused := unreachable(bootstrap)) is not None:
            self.record(key, refused)
            raise KafkaUnavailable(refused)

    def failed(self, key: str) -> bool:
        """Whether the cluster is held as failed now (see `check`)."""
        with self.lock:
            failed = self.failures.get(key)
        return failed is not None and time.monotonic() - failed[0] < self.hold_s

    def record(self, key: str, error: str | None) -> None:
        with self.lock:
            if error is None:
                self.failures.pop(key, None)
                self.auth_errors.pop(key, None)
                self.answered.add(key)
            else:
                self.answered.discard(key)
                self.failures[key] = (time.monotonic(), error)

    def close(self) -> None:
        with self.lock:
            self.clients.clear()
            self.last_used.clear()
        self.child.close()


@dataclass(frozen=True)
class Admin:
    """An admin client for one cluster (`bootstrap` names it in errors)."""

    client: AdminClient
    bootstrap: str
    key: str
    pool: AdminPool

    @property
    def conf(self) -> dict[str, str]:
        """The configuration the client was made with (credentials included)."""
        return dict(json.loads(self.key))


PROBE_TIMEOUT_S = 2.0


def unreachable(bootstrap: str) -> str | None:
    """Why none of the bootstrap addresses accepts a TCP connection (None: one does)."""
    errors = []
    for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), PROBE_TIMEOUT_S):
                return None
        except ValueError:
            return None  # not host:port; let the client say what it makes of it
        except OSError as exc:
            errors.append(f"{address}: {exc.strerror or exc}")
    return f"no bootstrap server accepts a connection ({'; '.join(errors)})" if errors else None


def _result(admin: Admin, future: Any, what: str, optional: bool = False,
            timeout: float = ADMIN_TIMEOUT_S) -> Any:
    """The answer of one admin request. A request that got no answer marks the cluster failed
    (its groups fail fast for `hold_s`) only when no bootstrap server accepts a connection: one
    broker down in a cluster whose others answer fails this request, not every group on the
    cluster. An `optional` read (lag) never marks the cluster at all."""
    try:
        value = future.result(timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0]
        code = error.code() if isinstance(error, KafkaError) else None
        message = f"{what} at {admin.bootstrap}: {error}"
        if code in _UNREACHABLE_CODES:
            _refused(admin, what)
            _cluster_failed(admin, message, optional)
        raise KafkaUnavailable(message) from exc
    except TimeoutError as exc:
        _refused(admin, what)
        message = f"{what} at {admin.bootstrap}: no answer within {timeout:.0f}s"
        _cluster_failed(admin, message, optional)
        raise KafkaUnavailable(message) from exc
    admin.pool.record(admin.key, None)
    return value


def _cluster_failed(admin: Admin, message: str, optional: bool) -> None:
    if optional:
        return
    if unreachable(admin.bootstrap) is not None:
        admin.pool.record(admin.key, message)


def _refused(admin: Admin, what: str) -> None:
    """Raise `KafkaAuthFailed` when the request failed because the cluster refused the
    client's credentials or TLS handshake (what the request's own error does not say)."""
    auth = admin.pool.auth_error(admin)
    if auth is not None:
        message = f"{what} at {admin.bootstrap}: {auth}"
        admin.pool.record(admin.key, message)
        raise KafkaAuthFailed(message)


_UNREACHABLE_CODES = frozenset({
    KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE, KafkaError._AUTHENTICATION, KafkaError._SSL,
})


def is_auth_error(err: KafkaError) -> bool:
    """An error that says the cluster refused the client's credentials or TLS handshake (or the
    client refused the cluster's certificate)."""
    code = err.code()
    if code in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                KafkaError._SSL):
        return True
    # A broker that refuses the client's certificate closes the connection with a TLS alert,
    # which the client sees as a failed receive.
    return code == KafkaError._TRANSPORT and "SSL routines" in str(err.str())


def _call(admin: Admin, what: str, request: Any) -> Any:
    """Start an admin request unless the cluster failed just now."""
    admin.pool.check(admin.key, admin.bootstrap)
    try:
        return request()
    except KafkaException as exc:
        raise KafkaUnavailable(f"{what} at {admin.bootstrap}: {exc.args[0]}") from exc


COORDINATOR_CODES = frozenset({
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
})
"""Group errors that mean the coordinator moved or is loading the group: librdkafka hands them
to the application as the group's result, without retrying."""
GROUP_RETRIES_S = (0.25, 0.75, 1.5)
"""Waits before asking again, with a client that looks the coordinator up afresh, while a
group request meets a moving coordinator (about 2.5 s in all, within one pass)."""
GROUP_TIMEOUT_S = 5.0
"""A group request that waits longer is asked again: its coordinator is likely down."""
CHILD_START_S = 10.0
"""Beyond the request's own timeout, how long a new child process may take to start."""


def _group_request(admin: Admin, what: str, op: str, args: tuple[Any, ...],
                   optional: bool = False) -> Any:
    """The answer of a request to the group's coordinator, made by the cluster's child process
    (`staticfleet.coordinated`). While the coordinator moves (a coordinator error, no answer
    while the cluster answers, or the child aborted), asks again after `GROUP_RETRIES_S`, each
    time from a new child, which looks the coordinator up afresh; then raises
    `CoordinatorMoving`. An `optional` read is asked once: it fails the read, never the
    cluster, and renews the child for the next."""
    for wait in (*(() if optional else GROUP_RETRIES_S), None):
        try:
            return _coordinated(admin, what, op, args, optional)
        except KafkaUnavailable as exc:
            if isinstance(exc, KafkaAuthFailed) or not _coordinator_moving(admin, exc):
                raise
            if wait is None:
                if optional:
                    admin.pool.renew(admin)
                raise CoordinatorMoving(f"{exc}; the group's coordinator is moving") from exc
            admin.pool.renew(admin)
            time.sleep(wait)
    raise AssertionError("unreachable")


def _coordinated(admin: Admin, what: str, op: str, args: tuple[Any, ...],
                 optional: bool) -> Any:
    admin.pool.check(admin.key, admin.bootstrap)
    future = admin.pool.coordinated(admin, op, args, GROUP_TIMEOUT_S)
    try:
        try:
            value = future.result(timeout=GROUP_TIMEOUT_S + CHILD_START_S)
        except ChildDied:
            # The child may have died of an earlier request (librdkafka aborts on one whose
            # coordinator went away): this one is asked once more, of a new child.
            future = admin.pool.coordinated(admin, op, args, GROUP_TIMEOUT_S)
            value = future.result(timeout=GROUP_TIMEOUT_S + CHILD_START_S)
    except RequestFailed as exc:
        message = f"{what} at {admin.bootstrap}: {exc.text}"
        if exc.code in _UNREACHABLE_CODES:
            _refused(admin, what)
            _cluster_failed(admin, message, optional)
        raise KafkaUnavailable(message) from KafkaException(KafkaError(exc.code, exc.text))
    except (ChildDied, TimeoutError) as exc:
        if isinstance(exc, TimeoutError):
            # librdkafka's own timeout would have answered: the child is stuck; a new one.
            admin.pool.child.restart()
        message = f"{what} at {admin.bootstrap}: {exc or 'no answer'}"
        _refused(admin, what)
        _cluster_failed(admin, message, optional)
        raise KafkaUnavailable(message) from exc
    admin.pool.record(admin.key, None)
    return value


def _coordinator_moving(admin: Admin, exc: KafkaUnavailable) -> bool:
    code = _code(exc)
    if code in COORDINATOR_CODES:
        return True
    no_answer = code is None or code in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT)
    return no_answer and not admin.pool.failed(admin.key)


def describe_group(admin: Admin, group_id: str, protocol: str = "classic") -> GroupView:
    """State and members of a group; a group the broker does not know yet is `Dead` (with
    the `protocol` it will be created with)."""
    what = f"describing group {group_id}"
    try:
        desc = _group_request(admin, what, "describe_group", (group_id,))
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


def group_lag(admin: Admin, group_id: str,
              partitions: Mapping[str, int]) -> dict[tuple[str, int], int]:
    """Each subscribed partition's lag as the broker sees it: its end offset minus the group's
    committed offset (partitions the group never committed are left out, as kafka_exporter
    does). Two admin requests, whatever the members are doing: lag shows while all are down."""
    tps = [(t, p) for t, count in sorted(partitions.items()) for p in range(count)]
    committed = committed_offsets(admin, group_id, tps)
    ends = end_offsets(admin, committed) if committed else {}
    return {tp: max(0, ends[tp] - offset) for tp, offset in committed.items() if tp in ends}


def committed_offsets(admin: Admin, group_id: str, tps: Iterable[tuple[str, int]]
                      ) -> dict[tuple[str, int], int]:
    """The group's committed offset of each of `tps` it committed (an OffsetFetch to its
    coordinator). An optional read: a failure fails this read only."""
    wanted = list(tps)
    if not wanted:
        return {}
    what = f"reading the committed offsets of group {group_id}"
    answer = _group_request(admin, what, "committed", (group_id, wanted), optional=True)
    return {(topic, partition): offset for topic, partition, offset, failed in answer
            if not failed and offset >= 0}


def end_offsets(admin: Admin, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The end offset of each of `tps` (one ListOffsets per partition leader; partitions whose
    leader did not answer are left out). An optional read: it never marks the cluster failed."""
    wanted = {TopicPartition(t, p): OffsetSpec.latest() for t, p in tps}
    if not wanted:
        return {}
    what = "reading end offsets"
    futures = _call(admin, what, lambda: admin.client.list_offsets(
        wanted, request_timeout=ADMIN_TIMEOUT_S))
    out: dict[tuple[str, int], int] = {}
    for tp, future in futures.items():
        try:
            out[(tp.topic, tp.partition)] = _result(admin, future, what, optional=True).offset
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


def partition_counts(admin: Admin, topics: Iterable[str]) -> dict[str, int]:
    """Partition count of each named topic, from a metadata request per topic to any broker
    (DescribeTopics would wait for the one broker librdkafka takes as the controller, which may
    be the one restarting); raises TopicMissing naming the absent ones."""
    names = sorted(set(topics))
    what = f"describing topic(s) {', '.join(names)}"
    admin.pool.check(admin.key, admin.bootstrap)
    counts: dict[str, int] = {}
    missing = []
    for name in names:
        try:
            metadata = admin.client.list_topics(topic=name, timeout=ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            message = f"{what} at {admin.bootstrap}: {error}"
            if not isinstance(error, KafkaError) or error.code() in _UNREACHABLE_CODES:
                _refused(admin, what)
                _cluster_failed(admin, message, optional=False)
            raise KafkaUnavailable(message) from exc
        topic = metadata.topics.get(name)
        error = topic.error if topic is not None else None
        if topic is None or (error is not None and error.code() in (
                KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)):
            missing.append(name)
            continue
        if error is not None:
            raise KafkaUnavailable(f"{what} at {admin.bootstrap}: {error}") from KafkaException(
                error)
        counts[name] = len(topic.partitions)
    admin.pool.record(admin.key, None)
    if missing:
        raise TopicMissing(f"topic(s) {', '.join(missing)} do not exist on the cluster at "
                           f"{admin.bootstrap}; create them or fix spec.kafka.topics")
    return counts


def matching_topics(admin: Admin, pattern: str) -> dict[str, int]:
    """Topics whose names match a subscription pattern, with their partition counts (a
    pattern needs the cluster's whole topic list)."""
    import re

    admin.pool.check(admin.key, admin.bootstrap)
    try:
        md = admin.client.list_topics(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        _refused(admin, "listing topics")
        message = f"listing topics at {admin.bootstrap}: {exc.args[0]}"
        admin.pool.record(admin.key, message)
        raise KafkaUnavailable(message) from exc
    admin.pool.record(admin.key, None)
    rx = re.compile(pattern)
    return {name: len(t.partitions) for name, t in md.topics.items()
            if not name.startswith("__") and rx.fullmatch(name)}


def broker_bounds(admin: Admin) -> dict[str, int]:
    """The group-coordinator bounds of the cluster, read from one broker's configuration (the
    next broker when one does not answer: it may be restarting). Raises `BoundsDenied` when the
    principal may not read it."""
    what = "describing the cluster"
    try:
        cluster = _result(admin, _call(admin, what, lambda: admin.client.describe_cluster(
            request_timeout=ADMIN_TIMEOUT_S)), what)
        nodes = sorted(cluster.nodes, key=lambda n: (
            cluster.controller is None or n.id != cluster.controller.id, n.id))
        for i, node in enumerate(nodes):
            last = i == len(nodes) - 1
            resource = ConfigResource(ResourceType.BROKER, str(node.id))
            what = f"describing broker {node.id} configuration"
            futures = _call(admin, what, lambda r=resource: admin.client.describe_configs(
                [r], request_timeout=GROUP_TIMEOUT_S))
            try:
                entries = _result(admin, futures[resource], what, optional=not last,
                                  timeout=GROUP_TIMEOUT_S)
                break
            except KafkaUnavailable as exc:
                if last or _code(exc) in _DENIED_CODES:
                    raise
    except KafkaUnavailable as exc:
        if _code(exc) in _DENIED_CODES:
            raise BoundsDenied(str(exc)) from exc
        raise
    wanted = (*CLASSIC_BOUNDS, *CONSUMER_BOUNDS)
    return {k: int(entries[k].value) for k in wanted if k in entries and entries[k].value}


def set_group_configs(admin: Admin, group_id: str, configs: Mapping[str, str]) -> None:
    """Set per-group broker configs (KIP-848 groups: their session timeout and heartbeat)."""
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in sorted(configs.items())])
    what = f"setting the configs of group {group_id}"
    futures = _call(admin, what, lambda: admin.client.incremental_alter_configs(
        [resource], request_timeout=ADMIN_TIMEOUT_S))
    _result(admin, futures[resource], what)


_DENIED_CODES = frozenset({
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
})


def _code(exc: KafkaUnavailable) -> int | None:
    cause = exc.__cause__
    if isinstance(cause, KafkaException) and isinstance(cause.args[0], KafkaError):
        return int(cause.args[0].code())
    return None


def is_unknown_group(exc: KafkaUnavailable) -> bool:
    return _code(exc) == KafkaError.GROUP_ID_NOT_FOUND


def read_member_status(host: str, port: int, timeout: float = 2.0) -> dict[str, Any] | None:
    """A member's `/status` JSON, or None when it does not answer (yet)."""
    if not host:
        return None
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/status", timeout=timeout) as resp:
            data = json.load(resp)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class Refused:
    """Why a member did not take a request: the HTTP status of its answer (0: none) and what
    it said or what failed."""

    status: int
    reason: str

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class Drained:
    """A member's answer to POST /drain once its consumer closed: when (`drained_at`) and when
    it last finished a batch, both from its own clock."""

    drained_at: datetime
    last_batch_at: datetime | None


def drain_member(host: str, port: int, tokens: Sequence[str], hold_ms: int,
                 wait_s: float) -> Drained | Refused:
    """POST the member's `/drain?holdMs=..&waitMs=..` with the group's token (newest first,
    as `ask_member`); Drained once it answers drained, else why not (a 202: still draining
    after `wait_s`)."""
    if not host:
        return Refused(0, "the pod has no IP yet")
    refused = Refused(0, "no request sent")
    path = f"/drain?holdMs={int(hold_ms)}&waitMs={int(wait_s * 1000)}"
    for token in tokens or ("",):
        request = urllib.request.Request(f"http://{host}:{port}{path}", data=b"", method="POST")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=wait_s + 2.0) as resp:
                answer = json.loads(resp.read() or b"{}")
                if resp.status != 200 or not answer.get("drained"):
                    return Refused(resp.status, f"HTTP {resp.status}: still draining after "
                                                f"{wait_s:.0f} s")
                return Drained(_unix(answer.get("drainedAt")) or datetime.now(UTC),
                               _unix(answer.get("lastBatchAt")))
        except urllib.error.HTTPError as exc:
            refused = Refused(exc.code, f"HTTP {exc.code}: "
                                        f"{exc.read()[:200].decode(errors='replace').strip()}")
        except (OSError, ValueError) as exc:
            return Refused(0, str(exc))
        if refused.status != 403:
            return refused
    return refused


def _unix(value: Any) -> datetime | None:
    return (datetime.fromtimestamp(float(value), UTC)
            if isinstance(value, int | float) else None)


def ask_member(host: str, port: int, action: str, tokens: Sequence[str] = (),
               timeout: float = 5.0) -> Refused | None:
    """POST the member's `/leave`, `/rejoin` or `/activate` with the group's token as a bearer
    token; None when it accepted. `tokens`: newest first; the next one is tried only when the
    member refuses a token (403): the previous token, while the member's mounted Secret has
    not been updated yet after a rotation (a kubelet takes up to about a minute)."""
    if not host:
        return Refused(0, "the pod has no IP yet")
    refused = Refused(0, "no request sent")
    for token in tokens or ("",):
        request = urllib.request.Request(f"http://{host}:{port}/{action}", data=b"",
                                         method="POST")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                if resp.status == 202:
                    return None
                return Refused(resp.status, f"HTTP {resp.status}")
        except urllib.error.HTTPError as exc:
            refused = Refused(exc.code, f"HTTP {exc.code}: "
                                        f"{exc.read()[:200].decode(errors='replace').strip()}")
        except OSError as exc:
            return Refused(0, str(exc))
        if refused.status != 403:
            return refused
    return refused
