"""The member runtime against the real broker: happy path, crash mid-batch, poison records,
storage that fails."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.testkit.poll import wait_for
from tests.integration.runtime_spark_helpers import (
    RuntimeProcess,
    committed,
    produce,
    read_all,
    running,
    runtime_config,
    wait_committed_to_end,
)
from tests.integration.spark_test_transforms import POISON
from tests.support import unique

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
        # What the operator reads instead of asking the brokers: the commits, the last fetch,
        # and librdkafka's lag once its statistics (every 5 s) saw the commits.
        reported = member.wait_status(lambda s: s["lag"] == [[topic, p, 0] for p in range(3)],
                                      20, "reporting lag 0")
        assert reported["committed"] == [[topic, p, 1000] for p in range(3)]
        assert status["lastFetchAt"] is not None and status["lastFetchAt"] <= status["lastBatchAt"]
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
    # where the time went: every stage that ran took time, the worker's job most of the worker's
    stage = {(m["thread"], m["stage"]): float(m["value"]) for m in re.finditer(
        r'staticfleet_member_stage_seconds_total\{[^}]*stage="(?P<stage>[^"]+)",'
        r'thread="(?P<thread>[^"]+)"\} (?P<value>\S+)', metrics)}
    assert all(stage[("poll", s)] > 0 for s in ("consume", "convert", "commit")), stage
    assert stage[("worker", "job")] > 0 and stage[("worker", "frame")] > 0, stage


def test_batches_longer_than_max_poll_interval_keep_the_member_in_the_group(
        kafka: KafkaBroker, make_topic: Callable[..., str], tmp_path: Path) -> None:
    """With two batches gathered ahead the loop pauses the partitions and goes on polling while
    the worker takes 7 s per batch against a max.poll.interval.ms of 6 s: nothing rebalances."""
    topic, out = make_topic("in", 2), make_topic("out", 2)
    group = unique("g")
    records = values(400, 2)
    produce(kafka.bootstrap, topic, records)
    config = runtime_config(kafka.bootstrap, group, topic, sink={"type": "kafka", "topic": out},
                            transform="tests.integration.spark_test_transforms:"
                                      "slower_than_max_poll",
                            max_records=100, session_ms=6000)
    config["consumer"]["max.poll.interval.ms"] = 6000
    with running(config, tmp_path / "member.log", f"{group}-0") as member:
        wait_committed_to_end(kafka.bootstrap, group, topic, 2, member, timeout=400)
        status = member.wait_status(lambda s: s["recordsProcessed"] == 400, 30, "done")
        metrics = member.get("/metrics")[1].decode()
        assert member.terminate() == 0, member.text()
    assert status["rebalances"] == 0 and status["assigns"] == 1, status
    assert sorted(m.value() for m in read_all(kafka.bootstrap, out, 2)) == \
        sorted(v for _, v, _ in records)
    paused = re.search(r'staticfleet_member_stage_seconds_total\{[^}]*stage="paused",'
                       r'thread="poll"\} (\S+)', metrics)
    assert paused and float(paused.group(1)) > 5.0, metrics


def test_kill9_mid_batch_then_restart_loses_nothing_and_repeats_at_most_two_batches(
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
    # The batch in flight, plus the one before it when the kill lands between the hand-over of
    # the next batch and the commit of the finished one (docs/runtime.md, What a crash repeats).
    assert duplicates <= 2 * batch


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


def parquet_values(path: Path) -> list[bytes]:
    return ds.dataset(str(path), format="parquet").to_table(columns=["value"]) \
        .column("value").to_pylist()


def wait_exit_or_progress(member: RuntimeProcess, moved: Callable[[], str | None],
                          timeout: float) -> int:
    """Wait until the member exits; fail as soon as `moved` reports progress it must not make."""
    def stopped() -> bool:
        if member.proc.poll() is not None:
            return True
        what = moved()
        if what is not None:
            raise AssertionError(f"the member went on past a storage failure: {what}\n"
                                 f"{member.tail()}")
        return False

    wait_for("the member to stop", stopped, timeout, describe=member.tail)
    return int(member.proc.returncode)


def test_storage_failure_stops_the_member_without_dead_lettering_or_committing(
        kafka: KafkaBroker, make_topic: Callable[..., str], tmp_path: Path) -> None:
    """The parquet directory turns into a file (root ignores chmod, so a file is what makes it
    unwritable here). The batch that meets it is one record: bisection would find that record
    failing "on its own" and dead-letter it. Instead the member must stop with the storage error,
    commit nothing of that batch and dead-letter nothing; once the directory is back, a restarted
    member writes every record."""
    topic, dlq = make_topic("in", 2), make_topic("dlq", 1)
    group = unique("g")
    out = tmp_path / "out"
    out.mkdir()
    first = values(40, 2)
    produce(kafka.bootstrap, topic, first)
    config = runtime_config(kafka.bootstrap, group, topic,
                            sink={"type": "parquet", "path": str(out)}, max_records=100,
                            dead_letter=dlq)
    with running(config, tmp_path / "first.log", f"{group}-0") as member:
        before = wait_committed_to_end(kafka.bootstrap, group, topic, 2, member, timeout=400)
        saved = tmp_path / "out.saved"
        out.rename(saved)
        out.write_text("a file where the sink's directory should be\n")
        late = [(b"late", b"late-record", 0)]
        produce(kafka.bootstrap, topic, late)

        def moved() -> str | None:
            got = committed(kafka.bootstrap, group, topic, 2)
            if got != before:
                return f"committed {got}, before the failure {before}"
            dead = read_all(kafka.bootstrap, dlq, 1)
            return f"dead-lettered {[m.value() for m in dead]}" if dead else None

        code = wait_exit_or_progress(member, moved, timeout=300)
        log = member.text()
    assert code != 0, log
    stops = [line for line in log.splitlines() if "member stops" in line]
    assert len(stops) == 1 and "sink failed" in stops[0] and "parquet sink: writing" in stops[0] \
        and stops[0].endswith(f"Parent path is not a directory: file:{out}"), log
    assert "dead-lettered" not in log and "sub-batches" not in log, log
    assert read_all(kafka.bootstrap, dlq, 1) == []
    assert committed(kafka.bootstrap, group, topic, 2) == before

    out.unlink()
    saved.rename(out)
    with running(config, tmp_path / "second.log", f"{group}-0") as member:
        wait_committed_to_end(kafka.bootstrap, group, topic, 2, member, timeout=400)
    written = parquet_values(out)
    assert set(written) == {v for _, v, _ in first + late}
    assert read_all(kafka.bootstrap, dlq, 1) == []
