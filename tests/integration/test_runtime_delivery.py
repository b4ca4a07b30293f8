"""The member runtime against the real broker: happy path, crash mid-batch, poison records."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from staticfleet_dev.kafka import KafkaBroker
from tests.conftest import unique
from tests.integration.runtime_spark_helpers import (
    committed,
    produce,
    read_all,
    running,
    runtime_config,
    wait_committed_to_end,
)
from tests.integration.spark_test_transforms import POISON

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dump_broker_log_on_failure")]


def values(n: int, partitions: int) -> list[tuple[bytes, bytes, int | None]]:
    return [(b"k%d" % (i % 7), b"v%06d" % i, i % partitions) for i in range(n)]


def test_happy_path_every_record_reaches_the_sink_and_offsets_reach_the_end(
        kafka: KafkaBroker, make_topic: Callable[..., str], tmp_path: Path) -> None:
    topic, out = make_topic("in", 3), make_topic("out", 3)
    group = unique("g")
    records = values(3000, 3)
    produce(kafka.bootstrap, topic, records)
    config = runtime_config(kafka.bootstrap, group, topic, sink={"type": "kafka", "topic": out},
                            max_records=500)
    with running(config, tmp_path / "member.log", f"{group}-0") as member:
        wait_committed_to_end(kafka.bootstrap, group, topic, 3, member, timeout=400)
        status = member.wait_status(lambda s: s["recordsProcessed"] == 3000, 30, "done")
        assert member.get("/readyz")[0] == 200 and member.get("/healthz")[0] == 200
        metrics = member.get("/metrics")[1].decode()
        code = member.terminate()
        log = member.text()
    assert sorted(m.value() for m in read_all(kafka.bootstrap, out, 3)) == \
        sorted(v for _, v, _ in records)
    assert status["assignment"] == [[topic, 0], [topic, 1], [topic, 2]]
    assert status["instanceId"] == f"{group}-0" and status["state"] == "running"
    assert status["startupSeconds"]["firstAssignment"] < status["startupSeconds"]["firstBatch"]
    assert status["rebalances"] == 0 and status["assigns"] == 1
    assert (f'staticfleet_member_records_processed_total{{group="{group}",member="{group}-0",'
            f'namespace="test"}} 3000.0') in metrics
    assert code == 0, log
    assert "shutdown took" in log and "first assignment" in log and "first batch" in log


def test_kill9_mid_batch_then_restart_loses_nothing_and_repeats_at_most_one_batch(
        kafka: KafkaBroker, make_topic: Callable[..., str], tmp_path: Path) -> None:
    topic, out = make_topic("in", 2), make_topic("out", 2)
    group = unique("g")
    records = values(2000, 2)
    produce(kafka.bootstrap, topic, records)
    batch = 200
    config = runtime_config(kafka.bootstrap, group, topic, sink={"type": "kafka", "topic": out},
                            transform="tests.integration.spark_test_transforms:slow_identity",
                            max_records=batch)
    with running(config, tmp_path / "first.log", f"{group}-0") as member:
        member.wait_status(lambda s: s["batchesProcessed"] >= 2, 400, "through two batches")
        time.sleep(0.7)
        member.kill9()
    before = committed(kafka.bootstrap, group, topic, 2)
    assert 0 < sum(max(0, o) for o in before.values()) < len(records)
    with running(config, tmp_path / "second.log", f"{group}-0") as member:
        wait_committed_to_end(kafka.bootstrap, group, topic, 2, member, timeout=400)
    written = [m.value() for m in read_all(kafka.bootstrap, out, 2)]
    assert set(written) == {v for _, v, _ in records}
    duplicates = len(written) - len(set(written))
    assert duplicates <= batch


def test_poison_record_goes_to_the_dead_letter_topic_and_the_partition_moves_on(
        kafka: KafkaBroker, make_topic: Callable[..., str], tmp_path: Path) -> None:
    topic, out, dlq = make_topic("in", 3), make_topic("out", 3), make_topic("dlq", 1)
    group = unique("g")
    records = values(900, 3)
    records[301] = (b"bad-key", POISON, 1)
    produce(kafka.bootstrap, topic, records)
    config = runtime_config(kafka.bootstrap, group, topic, sink={"type": "kafka", "topic": out},
                            transform="tests.integration.spark_test_transforms:reject_poison",
                            max_records=300, dead_letter=dlq)
    with running(config, tmp_path / "member.log", f"{group}-0") as member:
        offsets = wait_committed_to_end(kafka.bootstrap, group, topic, 3, member, timeout=400)
        status = member.wait_status(lambda s: s["deadLettered"] == 1, 30, "dead-lettering")
    dead = read_all(kafka.bootstrap, dlq, 1)
    assert len(dead) == 1
    headers = dict(dead[0].headers() or [])
    assert dead[0].value() == POISON and dead[0].key() == b"bad-key"
    assert headers["staticfleet.source.topic"] == topic.encode()
    assert headers["staticfleet.source.partition"] == b"1"
    poison_offset = int(headers["staticfleet.source.offset"] or b"-1")
    assert poison_offset == 100
    assert b"poison record" in (headers["staticfleet.error"] or b"")
    assert offsets[1] > poison_offset
    written = sorted(m.value() for m in read_all(kafka.bootstrap, out, 3))
    assert written == sorted(v for _, v, _ in records if v != POISON)
    assert status["recordsProcessed"] == 900
