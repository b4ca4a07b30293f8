"""KIP-848 (group.protocol consumer) members against the real broker: a member starts with the
properties the operator sends for that protocol (no session timeout, heartbeat or assignment
strategy: the broker owns them), and a replacement for a member killed with SIGKILL waits for the
broker to release its instance id instead of crash-looping."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
)

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from tests.integration.runtime_spark_helpers import (
    produce,
    read_all,
    running,
    runtime_config,
    wait_committed_to_end,
)
from tests.integration.support import kip848, set_group_timeouts, through
from tests.support import unique

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dump_broker_log_on_failure")]
SESSION_MS = 10000


def records(first: int, n: int, partitions: int) -> list[tuple[bytes, bytes, int | None]]:
    return [(b"k", b"v%06d" % i, i % partitions) for i in range(first, first + n)]


def test_kill9_replacement_waits_for_the_instance_id_then_processes_without_a_restart(
        kafka: KafkaBroker, kafka_admin: AdminClient, make_topic: Callable[..., str],
        tmp_path: Path, spark_connect: ConnectServer) -> None:
    topic, out = make_topic("in", 4), make_topic("out", 4)
    group = unique("g")
    set_group_timeouts(kafka_admin, group, SESSION_MS)
    before = records(0, 400, 4)
    produce(kafka.bootstrap, topic, before)
    config = kip848(runtime_config(kafka.bootstrap, group, topic,
                                   sink={"type": "kafka", "topic": out},
                                   spark=through(spark_connect)))

    # The member starts with the consumer-protocol config, joins, processes and is ready.
    with running(config, tmp_path / "first.log", f"{group}-0") as first:
        wait_committed_to_end(kafka.bootstrap, group, topic, 4, first, timeout=400)
        status = first.wait_status(lambda s: s["recordsProcessed"] == 400, 30, "through 400")
        assert first.get("/readyz")[0] == 200
        metrics = first.get("/metrics")[1].decode()
        first.kill9()
    killed = time.monotonic()
    assert len(status["assignment"]) == 4 and status["waiting"] is None
    assert "staticfleet_member_session_timeout_seconds{" not in metrics
    assert "staticfleet_member_max_poll_interval_seconds{" in metrics

    # Its replacement, started at once: refused (the broker still holds the id), it waits,
    # not ready and not exiting, until the old registration's session timed out.
    waiting: list[dict[str, Any]] = []
    with running(config, tmp_path / "second.log", f"{group}-0") as second:
        while True:
            assert time.monotonic() - killed < SESSION_MS / 1000 + 60, second.tail()
            assert second.proc.poll() is None, f"exited {second.proc.returncode}:\n" \
                                               f"{second.tail()}"
            if second.status() is None:  # not listening yet
                time.sleep(0.1)
                continue
            ready = second.get("/readyz")[0]
            now = second.status()
            assert now is not None
            if now["waiting"] is not None:  # it waited already when /readyz answered
                assert ready == 503, now
                waiting.append(now["waiting"])
            if now["assigns"]:
                break
            time.sleep(0.2)
        back_s = time.monotonic() - killed
        after = records(400, 400, 4)
        produce(kafka.bootstrap, topic, after)
        wait_committed_to_end(kafka.bootstrap, group, topic, 4, second, timeout=400)
        done = second.wait_status(lambda s: s["recordsProcessed"] >= 400, 60, "through 400")
        assert second.get("/readyz")[0] == 200
        code = second.terminate()
        log = second.text()
    print(f"kill -9: the replacement was in the group {back_s:.1f} s after the kill "
          f"(consumer.session.timeout.ms {SESSION_MS}); it waited {waiting[-1]['sinceSeconds']} s "
          f"over {waiting[-1]['attempts']} refused tries")
    assert waiting, "the replacement never reported that it waits"
    assert {w["reason"] for w in waiting} == {"UnreleasedInstanceId"}
    assert "instance ID is still used" in waiting[-1]["message"]
    assert SESSION_MS / 1000 - 4 < back_s < SESSION_MS / 1000 + 15
    assert done["waiting"] is None and len(done["assignment"]) == 4
    assert "in the group after waiting" in log and code == 0, log
    written = {m.value() for m in read_all(kafka.bootstrap, out, 4)}
    assert written == {v for _, v, _ in before + after}
