"""Throughput of the member runtime (identity transform, null sink, local Spark) beside a bare
confluent-kafka poll-and-commit loop, on the same topic in the same run.

    python bench/runtime_throughput.py [--records 300000] [--partitions 4]

Starts its own Kafka broker, produces 1 KiB records, then for batch sizes 1k, 10k and 100k reads
the first N records (N scaled to the batch size) once with the bare loop and once with the runtime's
own poll loop, batch worker and Spark batch, in this process with one warm SparkSession. Then it
times the phases of one batch (the profile), the fixed cost of a tiny Spark batch, and starts the
runtime as a real process (`python -m consumer_runtime`) for start-to-first-assignment, RSS and the
time a SIGTERM shutdown takes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from consumer_runtime.config import RuntimeConfig, parse_config
from consumer_runtime.member import Member
from consumer_runtime.metrics import Telemetry
from consumer_runtime.processing import BatchProcessor
from consumer_runtime.records import to_arrow
from consumer_runtime.sinks import NullSink
from consumer_runtime.spark import SparkBatch, start_session
from consumer_runtime.transforms import identity
from staticfleet_dev.kafka import KafkaSettings, start_kafka
from staticfleet_dev.procs import free_port, stop

REPO = Path(__file__).resolve().parents[1]
RECORD = 1024
BATCHES = ((1_000, 30_000), (10_000, 100_000), (100_000, 300_000))
"""(batch size, records read) pairs: about 3-30 batches each, so one run stays under a minute."""


def config_for(bootstrap: str, group: str, topic: str, batch: int) -> RuntimeConfig:
    raw: dict[str, Any] = {
        "bootstrapServers": bootstrap, "groupId": group, "topics": [topic],
        "topicPattern": None, "namespace": "bench",
        "consumer": {"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
                     "max.poll.interval.ms": 300000, "auto.offset.reset": "earliest",
                     "partition.assignment.strategy": "range", "group.protocol": "classic",
                     "fetch.max.bytes": 104857600, "max.partition.fetch.bytes": 10485760,
                     "queued.max.messages.kbytes": 262144},
        "processing": {
            "transform": "consumer_runtime.transforms:identity",
            "spark": {"mode": "local", "connectUrl": None, "master": "local[2]", "conf": {}},
            "batch": {"maxRecords": batch, "maxWaitMs": 500, "maxBytes": 1 << 30},
            "sink": {"type": "null", "path": None, "topic": None},
            "deadLetterTopic": None,
            "retry": {"attempts": 1, "backoffMs": 0, "maxBackoffMs": 0},
        },
    }
    return parse_config(raw, {"STATICFLEET_GROUP_INSTANCE_ID": f"{group}-0"})


def produce(bootstrap: str, topic: str, partitions: int, count: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.size": 1 << 20, "compression.type": "none"})
    payload = os.urandom(RECORD // 2).hex().encode()
    began = time.monotonic()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, key=b"k%d" % (i % 100), value=payload,
                                 partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    return time.monotonic() - began


def bare_loop(bootstrap: str, topic: str, batch: int, count: int) -> float:
    """Records/s of consume(batch) + synchronous commit, from assignment to the last commit."""
    group = f"bare-{batch}-{time.time_ns()}"
    assigned: list[float] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "group.instance.id": f"{group}-0", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                         "fetch.max.bytes": 104857600, "max.partition.fetch.bytes": 10485760,
                         "queued.max.messages.kbytes": 262144})
    consumer.subscribe([topic], on_assign=lambda c, p: assigned.append(time.monotonic()))
    seen = 0
    while seen < count:
        msgs = consumer.consume(min(batch, count - seen), 1.0)
        if not msgs:
            continue
        offsets: dict[tuple[str, int], int] = {}
        for m in msgs:
            if m.error() is None:
                offsets[(m.topic() or "", m.partition() or 0)] = (m.offset() or 0) + 1
                seen += 1
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                        asynchronous=False)
    ended = time.monotonic()
    consumer.close()
    return count / (ended - assigned[0])


def runtime_loop(spark_batch: SparkBatch, bootstrap: str, topic: str, batch: int,
                 count: int) -> tuple[float, int, float]:
    """Records/s of the runtime (Member, BatchProcessor, SparkBatch), assignment to last commit,
    batches, and the mean seconds the worker spent on one batch (Spark: createDataFrame, job)."""
    group = f"runtime-{batch}-{time.time_ns()}"
    config = config_for(bootstrap, group, topic, batch)
    started = time.monotonic()
    telemetry = Telemetry(namespace="bench", group=group, member=config.member,
                          instance_id=config.group_instance_id, session_timeout_s=10,
                          max_poll_interval_s=300, process_start=time.time(),
                          started_at=started)
    processor = BatchProcessor(run=lambda: spark_batch.run, retry=config.retry,
                               dead_letters=None)
    worker_s: list[float] = []

    def handle(batch_id: int, records: Any) -> Any:
        began = time.perf_counter()
        try:
            return processor.handle(batch_id, records)
        finally:
            worker_s.append(time.perf_counter() - began)

    member = Member(config, telemetry, handle)
    ended: list[float] = []

    def watch() -> None:
        while telemetry.records_processed < count and member.failure is None:
            time.sleep(0.005)
        ended.append(time.monotonic())
        member.request_stop()

    threading.Thread(target=watch, daemon=True).start()
    code = member.run()
    if code != 0 or telemetry.first_assignment is None:
        raise RuntimeError(f"runtime loop failed: {member.failure}")
    processed = telemetry.records_processed
    return processed / (ended[0] - (started + telemetry.first_assignment)), \
        telemetry.batches_processed, statistics.mean(worker_s)


def fetch(bootstrap: str, topic: str, count: int) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"f-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    out: list[Any] = []
    while len(out) < count:
        out.extend(m for m in consumer.consume(count - len(out), 1.0) if m.error() is None)
    consumer.close()
    return out


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of `repeat` calls."""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def measured(fn: Callable[[], object], repeat: int,
             jvms: list[int]) -> tuple[float, float, float]:
    """Medians of `repeat` calls: wall seconds, CPU seconds of this process, of the Spark JVM."""
    walls, pys, jvm_cpu = [], [], []
    for _ in range(repeat):
        c0, began = cpu_now(jvms), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - began)
        c1 = cpu_now(jvms)
        pys.append(c1[0] - c0[0])
        jvm_cpu.append(c1[1] - c0[1])
    return statistics.median(walls), statistics.median(pys), statistics.median(jvm_cpu)


def profile(spark_batch: SparkBatch, records: list[Any],
            jvms: list[int]) -> dict[str, tuple[float, float, float]]:
    """Seconds per phase of one batch: Arrow conversion (done in the poll thread, as records
    arrive), DataFrame creation, transform + sink (the job, on a DataFrame already created)."""
    table = to_arrow(records)
    sink = NullSink()
    ctx = spark_batch.context(0, ())
    df = spark_batch.frame(table)
    return {
        "to_arrow": measured(lambda: to_arrow(records), 5, jvms),
        "createDataFrame": measured(lambda: spark_batch.frame(table), 5, jvms),
        "job (noop write)": measured(lambda: sink.write(identity(df, ctx), "p"), 5, jvms),
    }


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def spark_jvms() -> list[int]:
    """The JVM(s) pyspark started for this process (not the broker, also a child)."""
    out = []
    for pid in children(os.getpid()):
        try:
            if b"pyspark" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            pass
    return out


def cpu_now(jvms: list[int]) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by this process (every thread: poll loop, worker,
    librdkafka) and by the Spark JVM: load-independent, unlike the rates."""
    tck = os.sysconf("SC_CLK_TCK")
    jvm = 0.0
    for pid in jvms:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            jvm += (int(fields[11]) + int(fields[12])) / tck
        except OSError:
            pass
    me = os.times()
    return me.user + me.system, jvm


def real_process(bootstrap: str, topic: str, workdir: Path) -> dict[str, Any]:
    """`python -m consumer_runtime` (batch 10k): startup phases, RSS, SIGTERM shutdown."""
    group = f"proc-{time.time_ns()}"
    config = config_for(bootstrap, group, topic, 10_000)
    raw: dict[str, Any] = {
        "bootstrapServers": bootstrap, "groupId": group, "topics": [topic], "topicPattern": None,
        "namespace": "bench", "consumer": dict(config.consumer),
        "processing": {"transform": config.transform,
                       "spark": {"mode": "local", "connectUrl": None, "master": "local[2]",
                                 "conf": {}},
                       "batch": {"maxRecords": 10_000, "maxWaitMs": 500, "maxBytes": 1 << 30},
                       "sink": {"type": "null", "path": None, "topic": None},
                       "deadLetterTopic": None,
                       "retry": {"attempts": 1, "backoffMs": 0, "maxBackoffMs": 0}},
    }
    port = free_port()
    env = {**os.environ, "STATICFLEET_CONFIG": json.dumps(raw),
           "STATICFLEET_GROUP_INSTANCE_ID": f"{group}-0", "STATICFLEET_HTTP_HOST": "127.0.0.1",
           "STATICFLEET_HTTP_PORT": str(port), "PYTHONPATH": str(REPO)}
    log = workdir / "runtime.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "consumer_runtime"], env=env, cwd=REPO,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    status: dict[str, Any] = {}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as r:
                status = json.loads(r.read())
        except OSError:
            status = {}
        if status.get("recordsProcessed", 0) >= 50_000:
            break
        time.sleep(0.2)
    jvm = children(proc.pid)
    rss = {"python": rss_mb(proc.pid), "jvm": sum(rss_mb(p) for p in jvm)}
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(60)
    text = log.read_text(errors="replace")
    shutdown = re.search(r"shutdown took ([\d.]+) s", text)
    spark_ready = re.search(r"spark session \(local\) ready after ([\d.]+) s", text)
    return {"status": status, "rss": rss, "exit": code,
            "shutdown": float(shutdown.group(1)) if shutdown else None,
            "spark_start": float(spark_ready.group(1)) if spark_ready else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000, help="records in the topic")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="sf-bench-"))
    broker = start_kafka(workdir / "kafka", KafkaSettings.for_tests())
    try:
        topic = "bench-1k"
        secs = produce(broker.bootstrap, topic, args.partitions, args.records)
        print(f"broker {broker.bootstrap}; produced {args.records} records of {RECORD} B into "
              f"{args.partitions} partitions in {secs:.1f} s; cpus {os.cpu_count()}, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)

        began = time.monotonic()
        session = start_session(config_for(broker.bootstrap, "x", topic, 1).spark, "bench")
        spark_batch = SparkBatch(session, identity, NullSink(), "bench", "bench-0")
        spark_batch.warm_up()
        print(f"SparkSession start + warm-up in this process: {time.monotonic() - began:.1f} s",
              flush=True)

        rows = []
        cpu_rows = []
        jvms = spark_jvms()
        for batch, count in BATCHES:
            count = min(count, args.records)
            c0 = cpu_now(jvms)
            bare = bare_loop(broker.bootstrap, topic, batch, count)
            c1 = cpu_now(jvms)
            runtime, batches, worker = runtime_loop(spark_batch, broker.bootstrap, topic, batch,
                                                    count)
            c2 = cpu_now(jvms)
            rows.append((batch, count, batches, bare, runtime, worker))
            per = 100_000 / count
            cpu_rows.append((batch, (c1[0] - c0[0]) * per, (c2[0] - c1[0]) * per,
                             (c2[1] - c1[1]) * per))
            print(f"  batch {batch}: bare {bare:,.0f} rec/s, runtime {runtime:,.0f} rec/s "
                  f"({batches} batches; worker {worker:.3f} s of {batch / runtime:.3f} s per "
                  f"batch; load {os.getloadavg()[0]:.1f})", flush=True)

        records = fetch(broker.bootstrap, topic, 100_000)
        tiny = records[:10]
        fixed = timed(lambda: spark_batch.run(0, tiny), 10)
        phases = {n: profile(spark_batch, records[:n], jvms) for n in (1_000, 10_000, 100_000)}
        proc = real_process(broker.bootstrap, topic, workdir)

        print()
        print("| batch (records) | records read | bare loop rec/s | runtime rec/s | ratio | "
              "worker s/batch | wall s/batch |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for batch, count, _batches, bare, runtime, worker in rows:
            print(f"| {batch:,} | {count:,} | {bare:,.0f} | {runtime:,.0f} | "
                  f"{runtime / bare:.2f} | {worker:.3f} | {batch / runtime:.3f} |")
        print()
        print("CPU seconds per 100,000 records (this process: all its threads incl. librdkafka's; "
              "Spark JVM):")
        print("| batch | bare loop | runtime Python | runtime JVM | runtime total |")
        print("|---:|---:|---:|---:|---:|")
        for batch, bare_cpu, py_cpu, jvm_cpu in cpu_rows:
            print(f"| {batch:,} | {bare_cpu:.2f} | {py_cpu:.2f} | {jvm_cpu:.2f} | "
                  f"{py_cpu + jvm_cpu:.2f} |")
        print()
        print(f"fixed cost per Spark batch (10 records, median of 10): {fixed * 1000:.0f} ms")
        print()
        print("profile of one batch, median of 5: wall seconds (CPU seconds Python + JVM); "
              "to_arrow runs in the poll thread, the rest in the worker:")
        print("| batch | to_arrow | createDataFrame | job (noop write) | total |")
        print("|---:|---:|---:|---:|---:|")

        def cell(wall: float, py: float, jvm: float) -> str:
            return f"{wall:.3f} ({py:.2f} + {jvm:.2f})"

        for n, p in phases.items():
            total = [sum(v[i] for v in p.values()) for i in range(3)]
            print(f"| {n:,} | {cell(*p['to_arrow'])} | {cell(*p['createDataFrame'])} | "
                  f"{cell(*p['job (noop write)'])} | {cell(*total)} |")
        print()
        st = proc["status"].get("startupSeconds", {})
        print(f"real process (python -m consumer_runtime, batch 10k): exit {proc['exit']}, "
              f"process start to first assignment {st.get('firstAssignment')} s, to first "
              f"batch {st.get('firstBatch')} s (SparkSession {proc['spark_start']} s), "
              f"SIGTERM shutdown took {proc['shutdown']} s")
        print(f"RSS after {proc['status'].get('recordsProcessed')} records: python "
              f"{proc['rss']['python']:.0f} MiB + JVM {proc['rss']['jvm']:.0f} MiB")
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    finally:
        stop(broker.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
