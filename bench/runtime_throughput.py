"""Throughput of the member runtime (identity transform, null sink) beside a bare confluent-kafka
poll-and-commit loop, on the same topic in the same run, with Spark in this process (`local`) and
behind a Spark Connect server (`connect`), plus the timeline of where each batch's time goes.

    python bench/runtime_throughput.py [--spark local,connect] [--batches 1000,10000,100000]
                                       [--py-spy DIR] [--baseline REV [--rounds N]]

Starts its own Kafka broker and produces 1 KiB records. For each Spark mode and each batch size
(1k, 10k, 100k records) it first runs the runtime once over a few batches (the JVM compiles its
code paths for that batch size; the first pass is printed as the cold figure), then reads the
first N records twice with the bare loop (the faster read counts, and the CPU of the first) and
once with the runtime's own poll loop, batch worker and Spark batch, in this process with one
warm SparkSession. Every run of the runtime records its
timeline (consumer_runtime/timeline.py): the share of the run each stage of the poll thread and
the worker took, their CPU, and the stages of both threads batch by batch. Then it times the
phases of one batch (the profile), the fixed cost of a tiny Spark batch, and starts the runtime as
a real process (`python -m consumer_runtime`) for start-to-first-assignment, RSS and the time a
SIGTERM shutdown takes. With `--py-spy DIR` the 100k runs are also sampled by py-spy (every
thread, idle ones too), the folded stacks written to DIR and the top frames per thread printed.

With `--baseline REV` it measures two runtimes instead, each in a process of its own on the same
broker and topic: this checkout's and git revision REV's (a worktree; only `consumer_runtime`
comes from it, the bench and its tooling are this checkout's). Each process measures its bare
loop just before its runtime, so each ratio is taken side by side, and `--rounds N` alternates
the two N times. It prints both columns, their ratios to the bare loop and to each other.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import inspect
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from consumer_runtime.config import RuntimeConfig, SparkSettings, parse_config
from consumer_runtime.member import Member
from consumer_runtime.metrics import Telemetry
from consumer_runtime.processing import BatchProcessor
from consumer_runtime.records import to_arrow
from consumer_runtime.sinks import NullSink
from consumer_runtime.spark import SparkBatch, start_session
from consumer_runtime.timeline import POLL, STAGES, WORKER, Span, Timeline, overlap, totals
from consumer_runtime.transforms import identity
from staticfleet_dev.kafka import KafkaSettings, start_kafka
from staticfleet_dev.procs import free_port, stop
from staticfleet_dev.spark_connect import ConnectServer, start_connect_server
from staticfleet_dev.testkit.operator import worktree

REPO = Path(__file__).resolve().parents[1]
RECORD = 1024
BATCHES = ((1_000, 30_000), (10_000, 500_000), (100_000, 1_000_000))
"""(batch size, records read) pairs: 10-50 batches each, so the pipeline's fill and drain (one
batch gathered before the first is processed, one processed after the last is gathered) weigh
little beside its steady state."""
CONNECT_MEMORY = "4g"
"""The Connect server's heap: a 100k batch of 1 KiB records is 100 MB in its heap several times
over while it runs (1g, spark-submit's default, ran out of memory)."""
WARM_BATCHES = 3
"""Batches of the pass before each measured one, in which the JVM compiles the code paths of
that batch size (its rate is printed as the cold figure)."""


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


@dataclass
class Run:
    """One run of the runtime: its rate, its batches and its timeline."""

    rate: float
    batches: int
    worker_s: float
    """Mean seconds the worker spent on one batch."""
    start: float
    end: float
    """perf_counter() at the first assignment and when the last record was processed."""
    spans: list[Span]


def runtime_loop(spark_batch: SparkBatch, bootstrap: str, topic: str, batch: int,
                 count: int) -> Run:
    """The runtime (Member, BatchProcessor, SparkBatch) from its assignment to its last commit,
    with the timeline of its poll thread and worker."""
    group = f"runtime-{batch}-{time.time_ns()}"
    timeline = Timeline(keep=1_000_000)
    spark_batch.timeline = timeline
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

    # The runtime's own wiring (consumer_runtime/main.py); an earlier runtime (--baseline) may
    # have no `prepare`.
    extra: dict[str, Any] = ({"prepare": spark_batch.prepare}
             if "prepare" in inspect.signature(Member).parameters else {})
    member = Member(config, telemetry, handle, timeline=timeline, **extra)
    ended: list[tuple[float, float]] = []

    def watch() -> None:
        while telemetry.records_processed < count and member.failure is None:
            time.sleep(0.005)
        ended.append((time.monotonic(), time.perf_counter()))
        member.request_stop()

    threading.Thread(target=watch, daemon=True).start()
    code = member.run()
    if code != 0 or telemetry.first_assignment is None:
        raise RuntimeError(f"runtime loop failed: {member.failure}")
    spark_batch.timeline = Timeline()
    processed = telemetry.records_processed
    wall = ended[0][0] - (started + telemetry.first_assignment)
    return Run(processed / wall, telemetry.batches_processed, statistics.mean(worker_s),
               ended[0][1] - wall, ended[0][1], list(timeline.spans))


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


def measured(fn: Callable[[], object], repeat: int, jvms: list[int],
             settle: Callable[[], None] = lambda: None) -> tuple[float, float, float]:
    """Medians of `repeat` calls: wall seconds, CPU seconds of this process, of the Spark JVM;
    `settle` runs (untimed) after each call."""
    walls, pys, jvm_cpu = [], [], []
    for _ in range(repeat):
        c0, began = cpu_now(jvms), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - began)
        c1 = cpu_now(jvms)
        pys.append(c1[0] - c0[0])
        jvm_cpu.append(c1[1] - c0[1])
        settle()
    return statistics.median(walls), statistics.median(pys), statistics.median(jvm_cpu)


def profile(spark_batch: SparkBatch, records: list[Any],
            jvms: list[int]) -> dict[str, tuple[float, float, float]]:
    """Seconds per phase of one batch: Arrow conversion (done in the poll thread, as records
    arrive), the handover to Spark (a DataFrame made), transform + sink (the job, on a DataFrame
    already made)."""
    table = to_arrow(records)
    sink = NullSink()
    ctx = spark_batch.context(0, ())

    df = spark_batch.frame(table)

    def release() -> None:
        """Let py4j release the DataFrame just made (its finalizer thread tells the JVM), so the
        JVM's heap (1g, the runtime's default) never holds the batch five times over."""
        gc.collect()
        time.sleep(0.5)

    return {
        "to_arrow": measured(lambda: to_arrow(records), 5, jvms),
        "frame": measured(lambda: spark_batch.frame(table), 5, jvms, settle=release),
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


def child_env() -> dict[str, str]:
    """This process's environment for a child, without the Spark Connect client's settings
    pyspark put in it: with them a child's local session refuses to start
    (CONTEXT_UNAVAILABLE_FOR_REMOTE_CLIENT)."""
    return {k: v for k, v in os.environ.items()
            if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}


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
    env = {**child_env(), "STATICFLEET_CONFIG": json.dumps(raw),
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


def tree(pid: int) -> list[int]:
    """`pid` and every process below it."""
    out = [pid]
    for child in children(pid):
        out.extend(tree(child))
    return out


class PySpy:
    """py-spy sampling this process (every thread, idle ones too) into folded stacks."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            ["py-spy", "record", "--pid", str(os.getpid()), "--threads", "--idle",
             "--nonblocking", "--format", "raw", "--rate", "200", "-o", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        time.sleep(1.0)  # attached

    def stop(self) -> str:
        """Stop sampling; the top leaf frames per thread, as lines."""
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)
        by_thread: dict[str, dict[str, int]] = {}
        for line in self.out.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            frames = stack.split(";")
            leaf = frames[-1] if len(frames) > 1 else "?"
            thread = re.sub(r"^thread \(\d+\): ", "", frames[0])
            counts = by_thread.setdefault(thread, {})
            counts[leaf] = counts.get(leaf, 0) + int(n)
        lines = []
        for thread, counts in sorted(by_thread.items(), key=lambda kv: -sum(kv[1].values())):
            total = sum(counts.values())
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:4]
            lines.append(f"  {thread} ({total} samples): " + "; ".join(
                f"{100 * n / total:.0f}% {leaf}" for leaf, n in top))
        return "\n".join(lines)


@dataclass
class Row:
    mode: str
    batch: int
    count: int
    cold: float
    bare: float
    run: Run
    bare_cpu: float
    py_cpu: float
    jvm_cpu: float
    """CPU seconds per 100,000 records."""


def measure(mode: str, spark_batch: SparkBatch, bootstrap: str, topic: str, jvms: list[int],
            spy_dir: Path | None, batches: list[tuple[int, int]],
            warm_batches: int = WARM_BATCHES) -> list[Row]:
    rows = []
    for batch, count in batches:
        cold = runtime_loop(spark_batch, bootstrap, topic, batch,
                            min(warm_batches * batch, max(c for _, c in BATCHES)))
        c0 = cpu_now(jvms)
        bare = bare_loop(bootstrap, topic, batch, count)
        c1 = cpu_now(jvms)
        bare = max(bare, bare_loop(bootstrap, topic, batch, count))  # the faster of two
        spy = PySpy(spy_dir / f"{mode}-{batch}.txt") if spy_dir and batch == 100_000 else None
        c2 = cpu_now(jvms)
        run = runtime_loop(spark_batch, bootstrap, topic, batch, count)
        c3 = cpu_now(jvms)
        per = 100_000 / count
        rows.append(Row(mode, batch, count, cold.rate, bare, run, (c1[0] - c0[0]) * per,
                        (c3[0] - c2[0]) * per, (c3[1] - c2[1]) * per))
        print(f"  {mode} batch {batch}: bare {bare:,.0f} rec/s, runtime {run.rate:,.0f} rec/s "
              f"(first pass {cold.rate:,.0f}; {run.batches} batches; worker {run.worker_s:.3f} s "
              f"of {batch / run.rate:.3f} s per batch; load {os.getloadavg()[0]:.1f})",
              flush=True)
        if spy is not None:
            print(f"  py-spy, {mode} 100k run ({spy.out}):\n{spy.stop()}", flush=True)
    return rows


def stage_table(rows: list[Row]) -> None:
    """Share of each run's wall time per stage, CPU seconds per wall second in brackets."""
    stages = [(thread, st) for thread, names in STAGES.items() for st in names]
    print("| mode | batch | " + " | ".join(f"{t}: {st}" for t, st in stages) +
          " | poll: other | worker: idle |")
    print("|---|---:|" + "---:|" * (len(stages) + 2))
    for row in rows:
        wall = row.run.end - row.run.start
        inside = [s for s in row.run.spans if s.end > row.run.start and s.start < row.run.end]
        sums = totals(inside)
        cells = []
        for key in stages:
            t = sums.get(key)
            cells.append("-" if t is None else
                         f"{100 * t.wall / wall:.0f}% ({t.cpu / t.wall if t.wall else 0:.2f})")
        used = {thread: sum(t.wall for (th, _), t in sums.items() if th == thread)
                for thread in (POLL, WORKER)}
        print(f"| {row.mode} | {row.batch:,} | " + " | ".join(cells) +
              f" | {100 * max(0.0, wall - used[POLL]) / wall:.0f}% | "
              f"{100 * max(0.0, wall - used[WORKER]) / wall:.0f}% |")


def batch_timeline(row: Row, first: int, last: int) -> None:
    """Batch by batch: when the worker ran it, its stages, and what the poll thread did
    meanwhile (gathering the next batch)."""
    spans = row.run.spans
    work: dict[int, list[Span]] = {}
    for s in spans:
        if s.thread == WORKER:
            work.setdefault(s.batch, []).append(s)
    t0 = row.run.start
    previous_end: float | None = None
    for batch in sorted(work):
        start = min(s.start for s in work[batch])
        end = max(s.end for s in work[batch])
        if first <= batch <= last:
            stages = {s.stage: s for s in work[batch]}
            poll = overlap(spans, POLL, start, end)
            idle = ("" if previous_end is None
                    else f", worker idle {start - previous_end:.3f} s before")
            print(f"  batch {batch}: worker {start - t0:.3f}-{end - t0:.3f} s: " + ", ".join(
                f"{st} {sp.wall:.3f} (cpu {sp.cpu:.3f})" for st, sp in stages.items()) +
                idle + "; poll thread meanwhile: " +
                ", ".join(f"{st} {sec:.3f}" for st, sec in sorted(poll.items())))
        previous_end = end


@contextlib.contextmanager
def spark_for(mode: str, bootstrap: str, topic: str,
              workdir: Path) -> Iterator[tuple[SparkBatch, list[int]]]:
    """A warm SparkBatch in `mode` (local: in this process; connect: behind a Connect server
    started here) and the JVM processes whose CPU counts as Spark's."""
    began = time.monotonic()
    settings = config_for(bootstrap, "x", topic, 1).spark
    connect: ConnectServer | None = None
    try:
        if mode == "connect":
            connect = start_connect_server(workdir, driver_memory=CONNECT_MEMORY)
            settings = SparkSettings("connect", connect.url, settings.master, {})
            jvms = tree(connect.proc.pid)
        session = start_session(settings, "bench")
        if mode == "local":
            jvms = spark_jvms()
        spark_batch = SparkBatch(session, identity, NullSink(), "bench", "bench-0")
        spark_batch.warm_up()
        print(f"{mode}: SparkSession start + warm-up: {time.monotonic() - began:.1f} s",
              flush=True)
        try:
            yield spark_batch, jvms
        finally:
            session.stop()
    finally:
        if connect is not None:
            connect.stop()


def summary(row: Row) -> dict[str, Any]:
    """A row without its timeline: what a comparison prints."""
    return {"mode": row.mode, "batch": row.batch, "count": row.count, "cold": row.cold,
            "bare": row.bare, "rate": row.run.rate, "batches": row.run.batches,
            "worker_s": row.run.worker_s, "bare_cpu": row.bare_cpu, "py_cpu": row.py_cpu,
            "jvm_cpu": row.jvm_cpu}


def child(args: argparse.Namespace, modes: list[str], batches: list[tuple[int, int]]) -> int:
    """Measure the runtime this process imported (a baseline's, through PYTHONPATH) on the
    parent's broker and topic; write the rows' summaries as JSON to --rows-out."""
    import consumer_runtime
    print(f"runtime from {Path(consumer_runtime.__file__).resolve().parent}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="sf-bench-child-"))
    rows: list[Row] = []
    for mode in modes:
        with spark_for(mode, args.bootstrap, args.topic, workdir) as (spark_batch, jvms):
            rows += measure(mode, spark_batch, args.bootstrap, args.topic, jvms, None, batches,
                            args.warm_batches)
    stage_table(rows)
    args.rows_out.write_text(json.dumps([summary(r) for r in rows]))
    return 0


def measure_in_child(source: Path, label: str, args: argparse.Namespace, bootstrap: str,
                     topic: str, workdir: Path) -> list[dict[str, Any]]:
    """This bench, in a process that imports `consumer_runtime` from `source` (a checkout),
    everything else from this one."""
    shim = workdir / f"runtime-{label}"
    shim.mkdir()
    (shim / "consumer_runtime").symlink_to(source / "consumer_runtime")
    out = workdir / f"rows-{label}.json"
    env = {**child_env(), "PYTHONPATH": os.pathsep.join([str(shim), str(REPO)])}
    print(f"\n== {label} ({source}) ==", flush=True)
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                    "--bootstrap", bootstrap, "--topic", topic, "--spark", args.spark,
                    "--batches", args.batches, "--warm-batches", str(args.warm_batches),
                    "--rows-out", str(out)],
                   env=env, cwd=REPO, check=True)
    rows: list[dict[str, Any]] = json.loads(out.read_text())
    return rows


def compare(rows: dict[str, list[dict[str, Any]]], rounds: int) -> None:
    """Main and the baseline side by side: each runtime's rate against the bare loop measured
    in the same process just before it, and the runtimes' rates against each other."""
    labels = list(rows)
    main_label, base_label = labels
    print()
    print(f"Side by side ({rounds} round(s), medians; ratio = runtime / bare loop of the same "
          "process, with its range over the rounds in brackets; CPU = runtime total / bare "
          "loop, per record):")
    print(f"| mode | batch | {main_label}: bare rec/s | {main_label}: runtime rec/s | "
          f"{main_label}: ratio | {main_label}: CPU x | {base_label}: bare rec/s | "
          f"{base_label}: runtime rec/s | {base_label}: ratio | {base_label}: CPU x | "
          f"runtime {main_label} / {base_label} |")
    print("|---|---:|" + "---:|" * 9)
    keys = sorted({(r["mode"], r["batch"]) for r in rows[main_label]},
                  key=lambda k: (k[0], k[1]))

    def med(label: str, key: tuple[str, int], fn: Callable[[dict[str, Any]], float]) -> float:
        return statistics.median(fn(r) for r in rows[label] if (r["mode"], r["batch"]) == key)

    def spread(label: str, key: tuple[str, int]) -> str:
        ratios = [r["rate"] / r["bare"] for r in rows[label] if (r["mode"], r["batch"]) == key]
        return f"{min(ratios):.2f}-{max(ratios):.2f}" if len(ratios) > 1 else f"{ratios[0]:.2f}"

    for key in keys:
        cells = []
        for label in (main_label, base_label):
            bare = med(label, key, lambda r: r["bare"])
            rate = med(label, key, lambda r: r["rate"])
            ratio = med(label, key, lambda r: r["rate"] / r["bare"])
            cpu = med(label, key, lambda r: (r["py_cpu"] + r["jvm_cpu"]) / r["bare_cpu"])
            cells += [f"{bare:,.0f}", f"{rate:,.0f}", f"{ratio:.2f} ({spread(label, key)})",
                      f"{cpu:.2f}"]
        versus = med(main_label, key, lambda r: r["rate"]) / med(base_label, key,
                                                                  lambda r: r["rate"])
        print(f"| {key[0]} | {key[1]:,} | " + " | ".join(cells) + f" | {versus:.2f} |")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=max(c for _, c in BATCHES),
                        help="records in the topic")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--spark", default="local,connect",
                        help="Spark modes to measure, comma-separated: local, connect")
    parser.add_argument("--batches", default=",".join(str(b) for b, _ in BATCHES),
                        help="batch sizes to measure, comma-separated, among "
                             + ", ".join(str(b) for b, _ in BATCHES))
    parser.add_argument("--warm-batches", type=int, default=WARM_BATCHES,
                        help="batches of the first pass of each batch size, before the measured "
                             "one (at most the topic's records)")
    parser.add_argument("--baseline", metavar="REV", default=None,
                        help="also measure the runtime of git revision REV (a worktree), in "
                             "the same run, and print both side by side")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --baseline: alternate this checkout and REV this many times")
    parser.add_argument("--py-spy", type=Path, default=None, metavar="DIR",
                        help="sample the 100k runs with py-spy, folded stacks into DIR")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--rows-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    modes = [m.strip() for m in args.spark.split(",") if m.strip()]
    if not modes or set(modes) - {"local", "connect"}:
        parser.error(f"--spark: local and/or connect, got {args.spark!r}")
    sizes = dict(BATCHES)
    try:
        batches = [(int(b), sizes[int(b)]) for b in args.batches.split(",") if b.strip()]
    except (ValueError, KeyError):
        parser.error(f"--batches: comma-separated among {', '.join(map(str, sizes))}, "
                     f"got {args.batches!r}")
    if args.child:
        return child(args, modes, batches)
    if args.py_spy is not None:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="sf-bench-"))
    broker = start_kafka(workdir / "kafka", KafkaSettings.for_tests())
    try:
        topic = "bench-1k"
        secs = produce(broker.bootstrap, topic, args.partitions, args.records)
        print(f"broker {broker.bootstrap}; produced {args.records} records of {RECORD} B into "
              f"{args.partitions} partitions in {secs:.1f} s; cpus {os.cpu_count()}, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        if args.baseline is not None:
            with worktree(args.baseline) as base:
                rows: dict[str, list[dict[str, Any]]] = {"main": [], args.baseline: []}
                for round_ in range(1, args.rounds + 1):
                    for label, source in (("main", REPO), (args.baseline, base)):
                        rows[label] += measure_in_child(source, f"{label}-round-{round_}",
                                                        args, broker.bootstrap, topic,
                                                        workdir)
            compare(rows, args.rounds)
            return 0
        report(args, modes, batches, broker.bootstrap, topic, workdir)
    finally:
        stop(broker.record)
    return 0


def report(args: argparse.Namespace, modes: list[str], batches: list[tuple[int, int]],
           bootstrap: str, topic: str, workdir: Path) -> None:
    """This checkout's runtime in this process: rates, CPU, stages, timelines, the phases of
    one batch, the fixed cost of a Spark batch and a real process's start and stop."""
    rows: list[Row] = []
    fixed: dict[str, float] = {}
    phases: dict[str, dict[int, dict[str, tuple[float, float, float]]]] = {}
    records = fetch(bootstrap, topic, 100_000)
    for mode in modes:
        with spark_for(mode, bootstrap, topic, workdir) as (spark_batch, jvms):
            rows += measure(mode, spark_batch, bootstrap, topic, jvms, args.py_spy, batches,
                            args.warm_batches)
            fixed[mode] = timed(functools.partial(spark_batch.run, 0, records[:10]), 10)
            phases[mode] = {n: profile(spark_batch, records[:n], jvms) for n, _ in batches}
    proc = real_process(bootstrap, topic, workdir) if "local" in modes else None

    print()
    print("Rates, steady state (after a first pass of "
          f"{args.warm_batches} batches, whose rate is the cold column):")
    print("| mode | batch | records read | bare loop rec/s | runtime rec/s | ratio | "
          "cold rec/s | worker s/batch | wall s/batch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r.mode} | {r.batch:,} | {r.count:,} | {r.bare:,.0f} | {r.run.rate:,.0f} | "
              f"{r.run.rate / r.bare:.2f} | {r.cold:,.0f} | {r.run.worker_s:.3f} | "
              f"{r.batch / r.run.rate:.3f} |")
    print()
    print("CPU seconds per 100,000 records (this process: all its threads incl. librdkafka's; "
          "Spark's JVM: in-process session or the Connect server):")
    print("| mode | batch | bare loop | runtime Python | runtime JVM | runtime total | "
          "total / bare | Python / bare |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        total = r.py_cpu + r.jvm_cpu
        print(f"| {r.mode} | {r.batch:,} | {r.bare_cpu:.2f} | {r.py_cpu:.2f} | "
              f"{r.jvm_cpu:.2f} | {total:.2f} | {total / r.bare_cpu:.2f} | "
              f"{r.py_cpu / r.bare_cpu:.2f} |")
    print()
    print("Where the runtime's time goes: share of each run's wall time per stage "
          "(CPU seconds of that thread per wall second in brackets; a stage without I/O "
          "below 1.00 waited for the GIL):")
    stage_table(rows)
    for r in rows:
        if r.batch == 100_000 or (r.batch == 10_000 and r.mode == "local"):
            print()
            print(f"Timeline, {r.mode}, batches of {r.batch:,} (seconds from the first "
                  "assignment):")
            batch_timeline(r, 3, 6)
    print()
    for mode in modes:
        print(f"{mode}: fixed cost per Spark batch (10 records, median of 10): "
              f"{fixed[mode] * 1000:.0f} ms")
    print()
    print("profile of one batch, median of 5: wall seconds (CPU seconds Python + JVM); "
          "to_arrow runs in the poll thread, the rest in the worker:")
    print("| mode | batch | to_arrow | frame (createDataFrame) | job (noop write) | total |")
    print("|---|---:|---:|---:|---:|---:|")

    def cell(wall: float, py: float, jvm: float) -> str:
        return f"{wall:.3f} ({py:.2f} + {jvm:.2f})"

    for mode, by_size in phases.items():
        for n, ph in by_size.items():
            wall, py, jvm = (sum(v[i] for v in ph.values()) for i in range(3))
            print(f"| {mode} | {n:,} | {cell(*ph['to_arrow'])} | "
                  f"{cell(*ph['frame'])} | {cell(*ph['job (noop write)'])} | "
                  f"{cell(wall, py, jvm)} |")
    if proc is not None:
        print()
        st = proc["status"].get("startupSeconds", {})
        print(f"real process (python -m consumer_runtime, batch 10k): exit {proc['exit']}, "
              f"process start to first assignment {st.get('firstAssignment')} s, to first "
              f"batch {st.get('firstBatch')} s (SparkSession {proc['spark_start']} s), "
              f"SIGTERM shutdown took {proc['shutdown']} s")
        print(f"RSS after {proc['status'].get('recordsProcessed')} records: python "
              f"{proc['rss']['python']:.0f} MiB + JVM {proc['rss']['jvm']:.0f} MiB")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    sys.exit(main())
