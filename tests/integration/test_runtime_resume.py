"""The first batch after an assignment does not wait `maxWaitMs` (issue 23, item 2).

A warm-up standby is activated while records already wait on its partitions, fewer than a
batch's `maxRecords`: before, the buffer held them for `maxWaitMs` after the first fetch (the
steady-state pace), which a handoff's processing gap paid in full. Now they are processed as soon
as the fetches brought them, and later batches are paced by `maxWaitMs` again. The member's Spark
runs through the session's Connect server: the subject is its buffer, not its JVM."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from tests.integration.runtime_spark_helpers import produce, running, runtime_config
from tests.integration.support import through
from tests.support import unique

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dump_broker_log_on_failure")]
MAX_WAIT_MS = 10_000


def test_records_waiting_at_the_assignment_are_processed_at_once_then_paced(
        kafka: KafkaBroker, make_topic: Callable[..., str], tmp_path: Path,
        spark_connect: ConnectServer) -> None:
    topic = make_topic("in", 2)
    group = unique("g")
    config = runtime_config(kafka.bootstrap, group, topic, sink={"type": "null"},
                            max_records=10_000, max_wait_ms=MAX_WAIT_MS,
                            spark=through(spark_connect))
    with running(config, tmp_path / "m.log", f"{group}-0", {"STATICFLEET_STANDBY": "true"}) as m:
        m.wait_status(lambda s: s["standby"] == "ready", 400, "standby-ready")
        produce(kafka.bootstrap, topic, [(b"k", b"v%d" % i, i % 2) for i in range(30)])
        assert m.post("/activate")[0] == 202
        first = m.wait_status(lambda s: s["recordsProcessed"] == 30, 60, "through the backlog")
        startup = first["startupSeconds"]
        # From the assignment to the end of the batch that processed the last waiting record.
        resumed_s = first["lastBatchAt"] - (first["processStart"] + startup["firstAssignment"])
        # Steady state: a record produced now waits maxWaitMs for company.
        produce(kafka.bootstrap, topic, [(b"k", b"late", 0)])
        produced_at = time.monotonic()
        early = m.status() or {}
        time.sleep(MAX_WAIT_MS / 1000 / 4)
        paced = m.status() or {}
        m.wait_status(lambda s: s["recordsProcessed"] == 31, MAX_WAIT_MS / 1000 + 30,
                      "the late record processed")
        waited_s = time.monotonic() - produced_at
    print(f"\nfirst assignment -> the waiting records processed {resumed_s:.2f} s "
          f"(maxWaitMs {MAX_WAIT_MS}); a record in the steady state processed after "
          f"{waited_s:.1f} s")
    assert resumed_s < MAX_WAIT_MS / 1000 / 2, m.tail()
    assert early["recordsProcessed"] == paced["recordsProcessed"] == 30, "not held maxWaitMs"
    assert waited_s >= MAX_WAIT_MS / 1000 * 0.9
