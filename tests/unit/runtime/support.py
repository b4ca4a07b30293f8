"""Inputs the runtime's unit tests share: a config.json, a member's telemetry."""

from __future__ import annotations

from typing import Any

from consumer_runtime.metrics import Telemetry


def base() -> dict[str, Any]:
    return {
        "bootstrapServers": "127.0.0.1:9092",
        "groupId": "orders",
        "topics": ["orders"],
        "topicPattern": None,
        "namespace": "default",
        "consumer": {"session.timeout.ms": 30000, "heartbeat.interval.ms": 3000,
                     "max.poll.interval.ms": 300000, "auto.offset.reset": "earliest"},
        "processing": {
            "transform": "consumer_runtime.transforms:identity",
            "spark": {"mode": "local", "connectUrl": None, "master": "local[2]",
                      "conf": {"spark.sql.shuffle.partitions": 4, "x.flag": True}},
            "batch": {"maxRecords": 10000, "maxWaitMs": 1000, "maxBytes": 67108864},
            "sink": {"type": "parquet", "path": "/data/out", "topic": None},
            "deadLetterTopic": "orders-dlq",
            "retry": {"attempts": 3, "backoffMs": 500, "maxBackoffMs": 10000},
        },
    }


def telemetry() -> Telemetry:
    return Telemetry(namespace="ns", group="g", member="g-0", instance_id="g-0",
                     session_timeout_s=30.0, max_poll_interval_s=60.0, process_start=0.0,
                     started_at=0.0)
