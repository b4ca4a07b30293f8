"""Helpers for the member-runtime integration tests: the runtime as a real subprocess, and
readers of what the runtime left in Kafka. (The Spark Connect server is started by
staticfleet_dev.spark_connect; the transforms the tests run are in spark_test_transforms.py, which
imports nothing of ours.)"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from staticfleet_dev.procs import free_port, port_open
from staticfleet_dev.testkit.poll import wait_for

REPO = Path(__file__).resolve().parents[2]


# -- the runtime as a subprocess --------------------------------------------------------------

def runtime_config(bootstrap: str, group: str, topic: str, *, sink: dict[str, Any],
                   transform: str = "consumer_runtime.transforms:identity",
                   max_records: int = 500, max_wait_ms: int = 300,
                   session_ms: int = 8000, dead_letter: str | None = None,
                   spark: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "bootstrapServers": bootstrap,
        "groupId": group,
        "topics": [topic],
        "topicPattern": None,
        "namespace": "test",
        "consumer": {"session.timeout.ms": session_ms, "heartbeat.interval.ms": 1000,
                     "max.poll.interval.ms": 60000, "partition.assignment.strategy": "range",
                     "group.protocol": "classic", "auto.offset.reset": "earliest"},
        "processing": {
            "transform": transform,
            "spark": spark or {"mode": "local", "connectUrl": None, "master": "local[2]",
                               "conf": {}},
            "batch": {"maxRecords": max_records, "maxWaitMs": max_wait_ms,
                      "maxBytes": 64 * 1024 * 1024},
            "sink": {"path": None, "topic": None, **sink},
            "deadLetterTopic": dead_letter,
            "retry": {"attempts": 2, "backoffMs": 100, "maxBackoffMs": 500},
        },
    }


@dataclass
class RuntimeProcess:
    """`python -m consumer_runtime` in its own session, its output in `log`; it requires
    `token` on its control requests (`post` sends it), read from the file `token_file`, as a
    member pod reads its group's Secret volume."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    token_file: Path
    token: str

    @classmethod
    def start(cls, config: dict[str, Any], log: Path, instance_id: str | None,
              extra_env: dict[str, str] | None = None) -> RuntimeProcess:
        port = free_port()
        token = secrets.token_urlsafe(16)
        token_file = log.with_name(f"{log.name}.token")
        token_file.write_text(token)
        env = {**os.environ, "STATICFLEET_MEMBER_TOKEN_FILE": str(token_file),
               **(extra_env or {}), "STATICFLEET_CONFIG": json.dumps(config),
               "STATICFLEET_GROUP_INSTANCE_ID": instance_id or "",
               "POD_NAME": instance_id or "dynamic-member", "POD_NAMESPACE": "test",
               "STATICFLEET_HTTP_HOST": "127.0.0.1", "STATICFLEET_HTTP_PORT": str(port),
               "PYTHONPATH": str(REPO)}
        with log.open("ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "consumer_runtime"], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    cwd=REPO, start_new_session=True)
        return cls(proc, port, log, token_file, token)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def post(self, path: str, token: str | None = "",
             timeout: float = 5.0) -> tuple[int, dict[str, Any]]:
        """POST a control request with the member's token (`token` None: without one; a
        string: that one instead); the status and the JSON answer."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=b"",
                                         method="POST")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token or self.token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def status(self) -> dict[str, Any] | None:
        if not port_open(self.port):
            return None
        try:
            code, body = self.get("/status")
        except (OSError, urllib.error.URLError):
            return None
        return json.loads(body) if code == 200 else None

    def wait_status(self, check: Callable[[dict[str, Any]], bool], timeout: float,
                    what: str) -> dict[str, Any]:
        def seen() -> dict[str, Any] | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"runtime exited ({self.proc.returncode}) before {what}:\n"
                                     f"{self.tail()}")
            status = self.status()
            return status if status is not None and check(status) else None

        def describe() -> str:
            return f"{self.tail()}\nits /status then: {json.dumps(self.status())}"

        return dict(wait_for(f"the runtime: {what}", seen, timeout, interval=0.2,
                             describe=describe))

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM to the runtime process only, as the kubelet sends it; wait for the exit."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill9()

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.text().splitlines()[-lines:])


@contextmanager
def running(config: dict[str, Any], log: Path, instance_id: str | None,
            extra_env: dict[str, str] | None = None) -> Iterator[RuntimeProcess]:
    member = RuntimeProcess.start(config, log, instance_id, extra_env)
    try:
        yield member
    finally:
        member.stop()


# -- Kafka readers and writers -------------------------------------------------------------------

def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes, int | None]]) -> None:
    """Produce (key, value, partition) records and wait until all are acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value, partition in records:
        if partition is None:
            producer.produce(topic, key=key, value=value)
        else:
            producer.produce(topic, key=key, value=value, partition=partition)
        producer.poll(0)
    assert producer.flush(30) == 0


def read_all(bootstrap: str, topic: str, partitions: int) -> list[Message]:
    """Every record of `topic` from the beginning up to its high watermarks."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader",
                         "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Message] = []
        seen = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + 60
        while any(seen[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(10000, 0.5):
                if msg.error() is None:
                    out.append(msg)
                    seen[msg.partition() or 0] = (msg.offset() or 0) + 1
        return out
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (negative: none), retried while the coordinator loads."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        for attempt in range(20):
            try:
                got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                         timeout=10)
                return {tp.partition: tp.offset for tp in got}
            except KafkaException:
                if attempt == 19:
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")
    finally:
        consumer.close()


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def wait_committed_to_end(bootstrap: str, group: str, topic: str, partitions: int,
                          member: RuntimeProcess, timeout: float) -> dict[int, int]:
    ends = high_watermarks(bootstrap, topic, partitions)

    def at_the_end() -> dict[int, int] | None:
        got = committed(bootstrap, group, topic, partitions)
        if got == ends:
            return got
        if member.proc.poll() is not None:
            raise AssertionError(f"runtime exited ({member.proc.returncode}); committed {got}, "
                                 f"ends {ends}:\n{member.tail()}")
        return None

    return dict(wait_for(f"the offsets of {group} at the end {ends}", at_the_end, timeout,
                         describe=lambda: f"committed: "
                         f"{committed(bootstrap, group, topic, partitions)}\n{member.tail()}"))
