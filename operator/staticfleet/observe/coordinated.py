"""Admin requests to a group's coordinator, made by a child process.

librdkafka (2.16 here) aborts the whole process, with `rd_kafka_enq_once_del_source_return:
Assertion 'eonce->refcnt > 0' failed`, when a coordinator-bound admin request
(DescribeConsumerGroups, ListConsumerGroupOffsets) cannot be sent because the connection to
the coordinator dropped: what the coordinator's broker dying does (confluentinc/librdkafka
issues 4605 and 3663; a fix is proposed in pull request 5397). Reproduced here on a three-broker
cluster: a client describing a group every 2 s aborted 6-8 s after the coordinator was killed.

So these requests are made by a child process with its own admin client. It serves requests
concurrently (librdkafka's futures) and answers with plain values. When it dies, every request
in flight fails as a `ChildDied` (the caller takes it as a coordinator on the move) and the next
request starts a new child. The operator keeps one child per cluster and credential set
(`kafkaadmin.AdminPool`, by the connection configuration's key), so a child that aborts or is
stuck, and is restarted, fails only that cluster's requests. A child holds a client per key it
was asked with; dropping one (`forget`) is how a caller drops librdkafka's cached coordinators.
The child ends when the operator does (its pipe closes).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

log = logging.getLogger("staticfleet")

_CONTEXT = multiprocessing.get_context("spawn")


class ChildDied(RuntimeError):
    """The child process ended while requests were in flight."""


class RequestFailed(RuntimeError):
    """The request's own error: librdkafka's error code and text."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text


# --- the child ------------------------------------------------------------------------------


def _describe_group(client: Any, group_id: str, timeout: float) -> Future[Any]:
    def plain(desc: Any) -> dict[str, Any]:
        return {
            "state": getattr(desc.state, "name", str(desc.state)),
            "type": getattr(getattr(desc, "type", None), "name", "CLASSIC"),
            "members": [
                (m.member_id, m.group_instance_id, m.client_id, m.host,
                 [(tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or [])])
                for m in desc.members],
        }
    return _mapped(client.describe_consumer_groups([group_id], request_timeout=timeout)[
        group_id], plain)


def _committed(client: Any, group_id: str, tps: list[tuple[str, int]],
               timeout: float) -> Future[Any]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = [ConsumerGroupTopicPartitions(group_id, [TopicPartition(t, p) for t, p in tps])]
    return _mapped(client.list_consumer_group_offsets(request, request_timeout=timeout)[
        group_id], lambda answer: [(tp.topic, tp.partition, tp.offset, tp.error is not None)
                                   for tp in answer.topic_partitions])


OPS: dict[str, Callable[..., Future[Any]]] = {
    "describe_group": _describe_group, "committed": _committed}


def _mapped(future: Future[Any], convert: Any) -> Future[Any]:
    out: Future[Any] = Future()

    def done(f: Future[Any]) -> None:
        try:
            out.set_result(convert(f.result()))
        except BaseException as exc:  # handed to the parent as it is
            out.set_exception(exc)
    future.add_done_callback(done)
    return out


def _child_main(conn: Any) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    clients: dict[str, Any] = {}
    """One admin client per connection configuration, by the parent's key."""
    send = threading.Lock()

    def answer(request_id: int, f: Future[Any]) -> None:
        try:
            reply: tuple[Any, ...] = (request_id, "ok", f.result())
        except KafkaException as exc:
            err = exc.args[0]
            reply = (request_id, "kafka", int(err.code()), str(err.str()))
        except Exception as exc:  # any other failure is the request's too
            reply = (request_id, "error", -1, repr(exc))
        with send:
            conn.send(reply)

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        if message[0] == "forget":
            clients.pop(message[1], None)  # the last reference: librdkafka destroys it
            continue
        request_id, key, conf, op, args, timeout = message
        try:
            client = clients.get(key)
            if client is None:
                client = clients[key] = AdminClient(conf)
            future = OPS[op](client, *args, timeout)
        except KafkaException as exc:
            future = Future()
            future.set_exception(exc)
        future.add_done_callback(functools.partial(answer, request_id))


# --- the parent -----------------------------------------------------------------------------


class CoordinatedAdmin:
    """A child process, with one admin client per connection configuration it is asked with
    (`kafkaadmin.AdminPool` keeps one child per configuration)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.process: Any = None
        self.conn: Any = None
        self.pending: dict[int, tuple[Any, Future[Any]]] = {}
        """Requests in flight: id -> (the pipe of the child it went to, its future)."""
        self.ids = itertools.count()
        self.started = 0

    def submit(self, key: str, conf: dict[str, Any], op: str, args: tuple[Any, ...],
               timeout: float) -> Future[Any]:
        """Start `op` with the client of `conf` (`key` names it); the future raises
        `RequestFailed`, or `ChildDied`."""
        future: Future[Any] = Future()
        with self.lock:
            self._ensure()
            request_id = next(self.ids)
            self.pending[request_id] = (self.conn, future)
            try:
                self.conn.send((request_id, key, conf, op, args, timeout))
            except (OSError, ValueError) as exc:
                self.pending.pop(request_id, None)
                future.set_exception(ChildDied(f"the admin child process is gone: {exc}"))
        return future

    def forget(self, key: str) -> None:
        """Drop the client of `key` in the child: the next request makes a new one, which
        looks coordinators up afresh."""
        with self.lock:
            if self.conn is not None:
                with contextlib.suppress(OSError, ValueError):
                    self.conn.send(("forget", key))

    def restart(self) -> None:
        """End the child (its requests fail); the next request starts a new one."""
        with self.lock:
            self._end()

    def close(self) -> None:
        self.restart()

    def _ensure(self) -> None:
        if self.process is not None and self.process.is_alive():
            return
        self._end()
        parent, child = _CONTEXT.Pipe()
        self.process = _CONTEXT.Process(target=_child_main, args=(child,),
                                        name="staticfleet-coordinated-admin", daemon=True)
        self.process.start()
        child.close()
        self.conn = parent
        self.started += 1
        threading.Thread(target=self._read, args=(parent, self.process),
                         name="coordinated-admin-reader", daemon=True).start()

    def _end(self) -> None:
        process, conn = self.process, self.conn
        self.process = self.conn = None
        if conn is not None:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
            conn.close()
        if process is not None:
            process.join(2)
            if process.is_alive():
                process.kill()
                process.join(2)

    def _read(self, conn: Any, process: Any) -> None:
        while True:
            try:
                reply = conn.recv()
            except (EOFError, OSError):
                break
            request_id, kind, *rest = reply
            with self.lock:
                _, future = self.pending.pop(request_id, (None, None))
            if future is None:
                continue
            if kind == "ok":
                future.set_result(rest[0])
            else:
                future.set_exception(RequestFailed(int(rest[0]), str(rest[1])))
        process.join(5)
        code = process.exitcode
        if code not in (0, None):
            log.warning("the admin child process ended with exit code %s (librdkafka aborts "
                        "on a coordinator-bound request whose coordinator went away); the next "
                        "request starts a new one", code)
        with self.lock:
            mine = [rid for rid, (c, _) in self.pending.items() if c is conn]
            failed = [self.pending.pop(rid)[1] for rid in mine]
        for future in failed:
            if not future.done():
                future.set_exception(ChildDied(
                    f"the admin child process ended (exit code {code}) before answering"))
