"""Static membership: a member stopped with SIGTERM and restarted within the session timeout
gets its partitions back and the broker starts no new generation; the stopped process's
termination message says when its consumer closed and its last batch ended."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from staticfleet_dev.kafka import KafkaBroker
from tests.integration.runtime_spark_helpers import produce, running, runtime_config
from tests.support import unique

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dump_broker_log_on_failure")]
SESSION_MS = 10000


def test_sigterm_then_restart_within_session_timeout_keeps_generation_and_partitions(
        kafka: KafkaBroker, make_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = make_topic("in", 4)
    group = unique("g")
    produce(kafka.bootstrap, topic, [(b"k", b"v%d" % i, i % 4) for i in range(400)])
    config = runtime_config(kafka.bootstrap, group, topic, sink={"type": "null"},
                            session_ms=SESSION_MS)
    with running(config, tmp_path / "a.log", f"{group}-0") as a, \
            running(config, tmp_path / "b1.log", f"{group}-1",
                    {"STATICFLEET_TERMINATION_MESSAGE_PATH": str(tmp_path / "b1.exit")}) as b:
        def split(s: dict[str, object]) -> bool:
            return len(s["assignment"]) == 2  # type: ignore[arg-type]
        before_a = a.wait_status(split, 400, "holding half the partitions")
        before_b = b.wait_status(split, 400, "holding half the partitions")
        b.wait_status(lambda s: s["recordsProcessed"] == 200, 400, "through its records")
        generations = kafka.generations(group)
        assert generations, "the group never stabilized"

        last_batch_at = (b.status() or {})["lastBatchAt"]
        stop_began, stop_wall = time.monotonic(), time.time()
        assert b.terminate(timeout=SESSION_MS / 1000) == 0, b.tail()
        stopped_wall = time.time()
        stop_seconds = time.monotonic() - stop_began
        shutdown = re.search(r"shutdown took ([\d.]+) s", b.text())
        assert shutdown is not None, b.tail()

        with running(config, tmp_path / "b2.log", f"{group}-1") as b2:
            after_b = b2.wait_status(lambda s: bool(s["assigns"]), SESSION_MS / 1000,
                                     "assigned again")
            rejoin_seconds = time.monotonic() - stop_began
            time.sleep(2)
            after_a = a.status()
            assert kafka.generations(group) == generations, kafka.rebalance_lines(group)
    assert after_b["assignment"] == before_b["assignment"]
    assert after_b["rebalances"] == 0
    assert after_a is not None and after_a["assignment"] == before_a["assignment"]
    assert after_a["revokes"] == before_a["revokes"] and after_a["lost"] == 0
    assert rejoin_seconds < SESSION_MS / 1000
    assert float(shutdown.group(1)) < 5 and stop_seconds < 8
    # The clean exit's report (what the operator takes a Recreate's absence and processing gap
    # from, to the millisecond): its consumer closed during the stop, after its last batch.
    report = json.loads((tmp_path / "b1.exit").read_text())
    assert report["lastBatchAt"] == last_batch_at, report
    assert stop_wall <= report["closedAt"] <= stopped_wall, (stop_wall, report, stopped_wall)
