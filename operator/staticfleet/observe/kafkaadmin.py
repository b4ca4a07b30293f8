"""The Kafka admin clients and their failures: one `AdminClient` per distinct connection
configuration, shared by all groups (`AdminPool`), and how a request's answer or failure becomes
`KafkaUnavailable` (or `CoordinatorMoving`, `KafkaAuthFailed`) with a message a user can act on.

A cluster that did not answer is not asked again for a while (`AdminPool.check`): its groups fail
fast instead of each holding a worker for the whole admin timeout. Requests to a group's
coordinator are made by a child process of the cluster's own (`observe.coordinated`:
librdkafka aborts the process on some of their failures, and a stuck one is restarted, without
touching the other clusters' requests) and asked again while the coordinator moves
(`group_request`). `kafkareads` makes its reads through these.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from staticfleet.decisions import clusters
from staticfleet.observe.coordinated import ChildDied, CoordinatedAdmin, RequestFailed

ADMIN_TIMEOUT_S = 10.0


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



CLIENT_SETTINGS = {"socket.timeout.ms": 10000, "client.id": "staticfleet-operator",
                   "allow.auto.create.topics": False}
"""Never create a topic by asking for its metadata (a broker with auto.create.topics.enable)."""
FAILED_CLUSTER_HOLD_S = 5.0
"""After a cluster failed to answer, its groups fail fast for this long (then it is asked
again), so one dead cluster does not hold the workers the other groups need."""
CLUSTER_IDS_KEPT = 10000
"""How many address sets' cluster ids `AdminPool` keeps (at most one per group, and one per
spelling of a cluster: a few in practice)."""
IDLE_CLIENT_CLOSE_S = 900.0
"""An admin client no pass asked for this long is closed: the groups on its cluster are gone
(deleted, or moved to other servers), and librdkafka would reconnect to it forever."""


@dataclass
class AdminPool:
    """One AdminClient per distinct connection configuration, shared by all groups, and what
    each cluster last failed with."""

    clients: dict[str, AdminClient] = field(default_factory=dict)
    children: dict[str, CoordinatedAdmin] = field(default_factory=dict)
    """The child process that makes the coordinator-bound requests of each connection
    configuration (a cluster with its credentials), by the same key as `clients`: one that
    aborts or is stuck is restarted without failing the requests of the others."""
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
    cluster_ids: dict[str, str] = field(default_factory=dict)
    """The cluster id each address set (`clusters.address_set`) answered with: two spellings of
    one cluster are then one cluster (`identity`). Bound: `CLUSTER_IDS_KEPT`, the oldest go."""

    def get(self, conf: dict[str, str]) -> Admin:
        key = json.dumps(conf, sort_keys=True)
        now = time.monotonic()
        idle_children: list[CoordinatedAdmin] = []
        with self.lock:
            for idle in [k for k, t in self.last_used.items() if now - t > self.idle_s]:
                # Dropping the last reference destroys the librdkafka handle.
                self.clients.pop(idle, None)
                if (child := self.children.pop(idle, None)) is not None:
                    idle_children.append(child)
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
        for child in idle_children:  # outside the lock: ending a child waits for it
            child.close()
        return Admin(client, conf.get("bootstrap.servers", "?"), key, self)

    def note_cluster_id(self, bootstrap: str, cluster_id: str | None) -> None:
        """A read of the cluster at `bootstrap` said its id."""
        if not cluster_id:
            return
        addresses = clusters.address_set(bootstrap)
        with self.lock:
            self.cluster_ids.pop(addresses, None)
            self.cluster_ids[addresses] = cluster_id
            while len(self.cluster_ids) > CLUSTER_IDS_KEPT:
                del self.cluster_ids[next(iter(self.cluster_ids))]

    def identity(self, bootstrap: str) -> str:
        """The cluster `bootstrap` names: its id once a read said it, else its address set
        (`decisions.clusters`)."""
        with self.lock:
            return clusters.identity(bootstrap, self.cluster_ids)

    def identities(self) -> dict[str, str]:
        """A copy of the cluster ids known, by address set."""
        with self.lock:
            return dict(self.cluster_ids)

    def child(self, key: str) -> CoordinatedAdmin:
        """The child process of the connection configuration `key` (made on first use; its
        process starts with its first request)."""
        with self.lock:
            child = self.children.get(key)
            if child is None:
                child = self.children[key] = CoordinatedAdmin()
            return child

    def coordinated(self, admin: Admin, op: str, args: tuple[Any, ...],
                    timeout: float) -> Future[Any]:
        """Start a coordinator-bound request of `admin`'s cluster in its child process
        (`observe.coordinated`: librdkafka aborts the process on some of their failures)."""
        return self.child(admin.key).submit(admin.key, {**admin.conf, **CLIENT_SETTINGS}, op,
                                            args, timeout)

    def renew(self, admin: Admin) -> None:
        """Drop librdkafka's cached coordinators of `admin`'s cluster: the cache is refreshed by
        every request, and admin requests do not drop an entry on NOT_COORDINATOR, so a client
        that keeps asking asks the old coordinator for as long as it keeps the group's
        partition. A new client (in the child) looks the coordinator up afresh."""
        self.child(admin.key).forget(admin.key)

    def restart(self, admin: Admin) -> None:
        """End the child process of `admin`'s cluster (a request in it is stuck): its requests
        fail, the next one starts a new child. The other clusters' children are not touched."""
        self.child(admin.key).restart()

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
            children = list(self.children.values())
            self.children.clear()
        for child in children:
            child.close()


@dataclass(frozen=True)
class Admin:
    """An admin client for one cluster (`bootstrap` names it in errors)."""

    client: AdminClient
    bootstrap: str
    key: str
    pool: AdminPool

    @property
    def label(self) -> str:
        """How messages name the cluster (its first address and how many more: a message
        never quotes the whole list)."""
        return clusters.label(self.bootstrap)

    @property
    def conf(self) -> dict[str, str]:
        """The configuration the client was made with (credentials included)."""
        return dict(json.loads(self.key))


PROBE_TIMEOUT_S = 2.0
"""The one deadline of a probe of a cluster's bootstrap addresses: they are tried side by side,
so a list of silent addresses costs this long, not this long per address."""
PROBE_NAMED = 3
"""How many of the addresses that did not answer a probe's message names (the others are
counted): the message is a group's status, read by its tenant, and quoting each address's error
would tell which internal host:port pairs accept connections from the operator."""


def unreachable(bootstrap: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why none of the bootstrap addresses accepts a TCP connection (None: one does). Every
    address is tried at once, each in a thread of its own, under one deadline; the answer comes
    as soon as one accepts. The message counts the addresses that did not answer by how they
    failed and names at most `PROBE_NAMED` of them."""
    found = [a.strip() for a in bootstrap.split(",") if a.strip()]
    found = list(dict.fromkeys(found))  # each address once, in the order written
    if not found:
        return None
    answers: queue.SimpleQueue[tuple[str, str | None]] = queue.SimpleQueue()
    deadline = time.monotonic() + timeout
    for address in found:
        threading.Thread(target=_probe, args=(address, timeout, answers), daemon=True,
                         name="bootstrap-probe").start()
    failed: dict[str, str] = {}
    while len(failed) < len(found):
        try:
            address, error = answers.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if error is None:
            return None
        failed[address] = error
    for address in found:
        failed.setdefault(address, "timed out")
    return probe_message(found, failed, timeout)


def _probe(address: str, timeout: float, answers: queue.SimpleQueue[tuple[str, str | None]]
           ) -> None:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout):
            answers.put((address, None))
    except ValueError:
        answers.put((address, None))  # not host:port; let the client say what it makes of it
    except OSError as exc:
        answers.put((address, _kind(exc)))


def _kind(exc: OSError) -> str:
    """How a connection attempt failed, in a few words (never the address)."""
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(exc, socket.gaierror):
        return "name not resolved"
    return (exc.strerror or type(exc).__name__).lower()[:40]


def probe_message(addresses: list[str], failed: dict[str, str], timeout: float) -> str:
    """The bounded message of a probe none of `addresses` answered: how many, by how they
    failed, and the first `PROBE_NAMED` of them (each cut to 64 characters)."""
    kinds: dict[str, int] = {}
    for address in addresses:
        kinds[failed[address]] = kinds.get(failed[address], 0) + 1
    how = ", ".join(f"{kind}: {n}" for kind, n in sorted(kinds.items(), key=lambda k: -k[1]))
    named = ", ".join(a if len(a) <= 64 else a[:61] + "..." for a in addresses[:PROBE_NAMED])
    more = len(addresses) - PROBE_NAMED
    if len(addresses) == 1:
        return (f"no bootstrap server accepts a connection ({addresses[0][:64]}: "
                f"{failed[addresses[0]]})")
    return (f"no bootstrap server accepts a connection: none of its {len(addresses)} "
            f"addresses answered within {timeout:.0f} s ({how}; {named}"
            + (f" and {more} more)" if more > 0 else ")"))


def answer_of(admin: Admin, future: Any, what: str, optional: bool = False,
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
        message = f"{what} at {admin.label}: {error}"
        if code in UNREACHABLE_CODES:
            raise_if_auth_failed(admin, what)
            mark_failed(admin, message, optional)
        raise KafkaUnavailable(message) from exc
    except TimeoutError as exc:
        raise_if_auth_failed(admin, what)
        message = f"{what} at {admin.label}: no answer within {timeout:.0f}s"
        mark_failed(admin, message, optional)
        raise KafkaUnavailable(message) from exc
    admin.pool.record(admin.key, None)
    return value


def mark_failed(admin: Admin, message: str, optional: bool) -> None:
    """Hold the cluster as failed (its groups fail fast) when no bootstrap server accepts a
    connection; an `optional` read never does."""
    if optional:
        return
    if unreachable(admin.bootstrap) is not None:
        admin.pool.record(admin.key, message)


def raise_if_auth_failed(admin: Admin, what: str) -> None:
    """Raise `KafkaAuthFailed` when the request failed because the cluster refused the
    client's credentials or TLS handshake (what the request's own error does not say)."""
    auth = admin.pool.auth_error(admin)
    if auth is not None:
        message = f"{what} at {admin.label}: {auth}"
        admin.pool.record(admin.key, message)
        raise KafkaAuthFailed(message)


UNREACHABLE_CODES = frozenset({
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


def start_request(admin: Admin, what: str, request: Any) -> Any:
    """Start an admin request unless the cluster failed just now."""
    admin.pool.check(admin.key, admin.bootstrap)
    try:
        return request()
    except KafkaException as exc:
        raise KafkaUnavailable(f"{what} at {admin.label}: {exc.args[0]}") from exc


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


def group_request(admin: Admin, what: str, op: str, args: tuple[Any, ...],
                   optional: bool = False) -> Any:
    """The answer of a request to the group's coordinator, made by the cluster's child process
    (`observe.coordinated`). While the coordinator moves (a coordinator error, no answer
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
        message = f"{what} at {admin.label}: {exc.text}"
        if exc.code in UNREACHABLE_CODES:
            raise_if_auth_failed(admin, what)
            mark_failed(admin, message, optional)
        raise KafkaUnavailable(message) from KafkaException(KafkaError(exc.code, exc.text))
    except (ChildDied, TimeoutError) as exc:
        if isinstance(exc, TimeoutError):
            # librdkafka's own timeout would have answered: the cluster's child is stuck; a
            # new one (the other clusters' children go on).
            admin.pool.restart(admin)
        message = f"{what} at {admin.label}: {exc or 'no answer'}"
        raise_if_auth_failed(admin, what)
        mark_failed(admin, message, optional)
        raise KafkaUnavailable(message) from exc
    admin.pool.record(admin.key, None)
    return value


def _coordinator_moving(admin: Admin, exc: KafkaUnavailable) -> bool:
    code = error_code(exc)
    if code in COORDINATOR_CODES:
        return True
    no_answer = code is None or code in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT)
    return no_answer and not admin.pool.failed(admin.key)


def error_code(exc: KafkaUnavailable) -> int | None:
    """The Kafka error code of the failure behind `exc`, if it had one."""
    cause = exc.__cause__
    if isinstance(cause, KafkaException) and isinstance(cause.args[0], KafkaError):
        return int(cause.args[0].code())
    return None


def is_unknown_group(exc: KafkaUnavailable) -> bool:
    return error_code(exc) == KafkaError.GROUP_ID_NOT_FOUND

