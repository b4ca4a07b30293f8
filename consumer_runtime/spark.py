"""Spark for the member: one session per process, and the run of one batch on it.

Local mode starts the JVM in its own session (process group), so a SIGTERM sent to the member's
process group reaches only the Python process, which then drains its batch on a JVM that is still
alive. The JVM still dies with the member: it exits when its stdin pipe from Python closes.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import logging
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from consumer_runtime.config import ConfigError, RuntimeConfig, SparkSettings
from consumer_runtime.records import SCHEMA, Batch, KafkaRecord, batch_name
from consumer_runtime.sinks import Sink
from consumer_runtime.timeline import PREPARE, WORKER, Timeline
from consumer_runtime.transforms import BatchContext

log = logging.getLogger(__name__)
# pyspark warns on every import under pandas 3; the runtime exchanges data through Arrow only.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas",
                        category=FutureWarning)
Transform = Callable[[DataFrame, BatchContext], DataFrame]

WARM_UP_RECORDS = 500
"""Records in each made-up warm-up batch (at most the member's `batch.maxRecords`)."""
PREPARE_MAX_BYTES = 64 << 20
"""A batch larger than this (keys plus values) gets no DataFrame built ahead: the JVM would hold
it twice beside the batch that runs (a local session's heap is 1 GiB unless `spark.conf` says
otherwise), and batches that large keep the worker idle for the poll thread anyway."""

LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Arrow batches go to the executors as they are (an RDD of Arrow batches, one partition per
    # `maxRecordsPerBatch`) instead of being turned into rows on the driver first (LocalRelation,
    # the default below 48 MiB): measured cheaper at every batch size, in wall and CPU time.
    "spark.sql.execution.arrow.localRelationThreshold": "0",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",
    # The JIT's first tier only: a member's batches are small and many, and the optimizing
    # compiler's threads cost more CPU than they win back. `python bench/spark_jvm.py` (40
    # batches of 70 records through count_by_key into Parquet, idle 2-core machine): JVM CPU
    # 0.58x, batch p99 0.57x, p50 0.87x, session start 0.84x, warm-up 0.80x. A member's own
    # `spark.conf` setting of this key replaces it.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    "spark.ui.showConsoleProgress": "false",
}


def resolve_transform(spec: str) -> Transform:
    """Import `module:function`; a missing module or function is a ConfigError."""
    module_name, func_name = spec.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"processing.transform: cannot import module {module_name!r} ({exc}); "
                          "install it in the image or fix the name") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ConfigError(f"processing.transform: module {module_name!r} has no function "
                          f"{func_name!r}; fix the name")
    return func


def start_session(settings: SparkSettings, app_name: str) -> SparkSession:
    """The process's one SparkSession: in-process JVM (local) or a thin Connect client."""
    began = time.monotonic()
    if settings.mode == "connect":
        assert settings.connect_url is not None
        builder: Any = SparkSession.builder.remote(settings.connect_url)
        for key, value in settings.conf.items():
            builder = builder.config(key, value)
        session: SparkSession = builder.getOrCreate()
    else:
        session = _local_session(settings, app_name)
    log.info("spark session (%s) ready after %.2f s", settings.mode, time.monotonic() - began)
    return session


def _local_session(settings: SparkSettings, app_name: str) -> SparkSession:
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf().setMaster(settings.master).setAppName(app_name)
    for key, value in {**LOCAL_DEFAULTS, **settings.conf}.items():
        conf.set(key, value)
    gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})
    context = SparkContext(conf=conf, gateway=gateway)
    context.setLogLevel("WARN")
    return SparkSession(context)


def jvm_pid(session: Any) -> int | None:
    """The process id of a local session's JVM (None through Spark Connect)."""
    if type(session).__module__.startswith("pyspark.sql.connect"):
        return None
    proc = getattr(session.sparkContext._gateway, "proc", None)
    return int(proc.pid) if proc is not None else None


class SparkBatch:
    """Runs records through Arrow, a DataFrame, the transform and into the sink."""

    def __init__(self, session: SparkSession, transform: Transform, sink: Sink, group: str,
                 member: str, timeline: Timeline | None = None) -> None:
        self.session = session
        self.timeline = timeline or Timeline()
        self.transform = transform
        self.sink = sink
        self.group = group
        self.member = member
        self._framer = cf.ThreadPoolExecutor(1, thread_name_prefix="frame")
        self._lock = threading.Lock()
        self._prepared: tuple[Batch, cf.Future[DataFrame]] | None = None
        """The next batch and its DataFrame being built (`prepare`); one at a time."""

    def context(self, batch_id: int, partitions: Sequence[tuple[str, int]]) -> BatchContext:
        return BatchContext(group=self.group, member=self.member, batch_id=batch_id,
                            partitions=tuple(partitions), spark=self.session)

    def frame(self, table: pa.Table) -> DataFrame:
        """The table as a DataFrame through Spark's Arrow path (no pandas, no inference).

        A batch gathered from many polls is a table of many chunks, and pyspark would send each
        chunk as its own Arrow batch (and partition); one contiguous chunk is cheaper for Spark."""
        if table.num_columns and table.column(0).num_chunks > 1:
            table = table.combine_chunks()
        return self.session.createDataFrame(table)

    def prepare(self, batch_id: int, batch: Batch) -> None:
        """Start building `batch`'s DataFrame in a thread of its own while the batch before it
        runs; `run` of that very object takes it. At 10k-record batches of 1 KiB the frame took
        a third of the worker's time, the job the rest, one after the other. A later `prepare`
        replaces an earlier one that was never run (its batch was cut again after a revoke)."""
        if batch.payload_bytes > PREPARE_MAX_BYTES:
            return
        future = self._framer.submit(self._frame_ahead, batch_id, batch)
        with self._lock:
            self._prepared = (batch, future)

    def _frame_ahead(self, batch_id: int, batch: Batch) -> DataFrame:
        with self.timeline.span(PREPARE, "frame", batch_id):
            return self.frame(batch.table)

    def _take_prepared(self, batch: Batch) -> cf.Future[DataFrame] | None:
        with self._lock:
            prepared, self._prepared = self._prepared, None
        if prepared is None or prepared[0] is not batch:
            return None
        return prepared[1]

    def run(self, batch_id: int, records: Sequence[KafkaRecord]) -> None:
        batch = Batch.of(records)
        ahead = self._take_prepared(batch)
        with self.timeline.span(WORKER, "frame", batch_id):
            df = None
            if ahead is not None:
                try:
                    df = ahead.result()
                except Exception as exc:  # built anew below, where its error is the batch's
                    log.info("batch %d: its DataFrame built ahead failed (%s); building it again",
                             batch_id, str(exc).splitlines()[0] if str(exc) else exc)
            if df is None:
                df = self.frame(batch.table)
        ctx = self.context(batch_id, sorted(batch.ranges))
        with self.timeline.span(WORKER, "job", batch_id):
            self.sink.write(self.transform(df, ctx), batch_name(batch))

    def warm_up(self, records: int = WARM_UP_RECORDS, rounds: int = 3) -> None:
        """Run the transform on made-up batches of `records` records through the sink's warm-up
        (its write's own path, never into the real output: `Sink.warm_up`), so the first real
        batch pays no JIT, code generation or first-write cost: a warm handoff's replacement
        processes its first batch right after it joins, and that batch is the handoff's
        processing gap. The batches have a real batch's shape (many keys, several partitions,
        JSON values): the JVM compiles a method only after it ran often enough, so a warm-up on
        one record left every per-row path to the first real batch (the demo's replacements
        took 2.4 s for it where steady batches took 1 s). A transform that cannot take the
        made-up records is warmed up on an empty batch instead."""
        began = time.monotonic()
        for table in (_warm_up_table(records), SCHEMA.empty_table()):
            try:
                for _ in range(rounds if table.num_rows else 1):
                    out = self.transform(self.frame(table), self.context(0, ()))
                    self.sink.warm_up(out)
            except Exception as exc:
                log.warning("warm-up of the transform on %s failed: %s",
                            "made-up records" if table.num_rows else "an empty batch",
                            str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                continue
            log.info("spark warm-up took %.2f s (%d rounds of %d made-up records)",
                     time.monotonic() - began, rounds if table.num_rows else 1, table.num_rows)
            return


def _warm_up_table(records: int) -> pa.Table:
    """`records` made-up records in SCHEMA (topic `staticfleet-warm-up`, 4 partitions, 64
    keys, small JSON objects), each with a `staticfleet.warm-up` header."""
    now = int(time.time() * 1000)
    return pa.Table.from_pylist([{
        "key": b"warm-up-%d" % (n % 64), "value": b'{"warm_up": true, "n": %d}' % n,
        "topic": "staticfleet-warm-up", "partition": n % 4, "offset": n // 4, "timestamp": now,
        "headers": [{"key": "staticfleet.warm-up", "value": b"1"}]} for n in range(records)],
        schema=SCHEMA)


def make_spark_batch(config: RuntimeConfig, transform: Transform, sink: Sink,
                     timeline: Timeline | None = None) -> SparkBatch:
    """Start the session and warm it up (meant to run in a thread while the consumer joins)."""
    session = start_session(config.spark, f"staticfleet-{config.member}")
    batch = SparkBatch(session, transform, sink, config.group_id, config.member, timeline)
    batch.warm_up(min(WARM_UP_RECORDS, config.batch.max_records))
    return batch
