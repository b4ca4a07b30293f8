"""A bare confluent-kafka group member for broker-level tests.

Prints one JSON line per event on stdout: {"event": "assign"|"revoke"|"lost"|"closed",
"partitions": [[topic, partition], ...], "t": unix-seconds}. SIGTERM closes the consumer
(a static member sends no LeaveGroup) and exits 0.

Usage: python -m tests.support.probe_member BOOTSTRAP GROUP TOPIC SESSION_MS [INSTANCE_ID]
"""

from __future__ import annotations

import json
import signal
import sys
import time

from confluent_kafka import Consumer, TopicPartition


def emit(event: str, partitions: list[TopicPartition] | None = None) -> None:
    parts = sorted([p.topic, p.partition] for p in partitions or [])
    print(json.dumps({"event": event, "partitions": parts, "t": time.time()}), flush=True)


def main(argv: list[str]) -> int:
    bootstrap, group, topic, session_ms = argv[:4]
    instance_id = argv[4] if len(argv) > 4 else ""
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "session.timeout.ms": int(session_ms),
        "heartbeat.interval.ms": max(100, int(session_ms) // 10),
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "range",
    }
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
