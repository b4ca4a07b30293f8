"""A bare confluent-kafka group member for broker-level tests: the process (`main`) and its
handle in the test (`ProbeMember`).

The process prints one JSON line per event on stdout: {"event": "assign"|"revoke"|"lost"|
"closed", "partitions": [[topic, partition], ...], "t": unix-seconds}. SIGTERM closes the
consumer (a static member sends no LeaveGroup; with PROTOCOL consumer, KIP-848, a static member
leaves with epoch -2, the broker keeping its partitions for the session timeout) and exits 0.

Usage: python -m staticfleet_dev.testkit.probe BOOTSTRAP GROUP TOPIC SESSION_MS [INSTANCE_ID]
[PROTOCOL]

PROTOCOL is classic (the default) or consumer; with consumer SESSION_MS is not sent (the broker
owns the session timeout and the heartbeat: group configs).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient


@dataclass
class ProbeMember:
    """One probe member process and the events it has printed so far."""

    args: list[str]
    proc: subprocess.Popen[str] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    def start(self) -> ProbeMember:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "staticfleet_dev.testkit.probe", *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        return self

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def terminate(self, timeout: float = 30) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def assignment(self) -> list[list[Any]] | None:
        """Partitions of the last assign event, or None before the first one."""
        assigns = [e for e in self.events if e["event"] == "assign"]
        return assigns[-1]["partitions"] if assigns else None

    def events_since(self, t: float) -> list[dict[str, Any]]:
        return [e for e in self.events if e["t"] > t and e["event"] in ("assign", "revoke", "lost")]


def group_state(admin: AdminClient, group: str) -> str:
    """The group's state as the broker describes it (e.g. STABLE)."""
    desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
    return str(desc.state.name)


def emit(event: str, partitions: list[TopicPartition] | None = None) -> None:
    parts = sorted([p.topic, p.partition] for p in partitions or [])
    print(json.dumps({"event": event, "partitions": parts, "t": time.time()}), flush=True)


def main(argv: list[str]) -> int:
    bootstrap, group, topic, session_ms = argv[:4]
    instance_id = argv[4] if len(argv) > 4 else ""
    protocol = argv[5] if len(argv) > 5 else "classic"
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf.update({"session.timeout.ms": int(session_ms),
                     "heartbeat.interval.ms": max(100, int(session_ms) // 10),
                     "partition.assignment.strategy": "range"})
    if instance_id:
        conf["group.instance.id"] = instance_id
    consumer = Consumer(conf)
    stopping = False

    def on_term(_sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    consumer.subscribe(
        [topic],
        on_assign=lambda _c, ps: emit("assign", ps),
        on_revoke=lambda _c, ps: emit("revoke", ps),
        on_lost=lambda _c, ps: emit("lost", ps),
    )
    while not stopping:
        consumer.poll(0.2)
    consumer.close()
    emit("closed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
