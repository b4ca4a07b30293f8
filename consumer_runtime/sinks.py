"""Where a processed batch goes. A sink must accept the whole batch before `write` returns: the
offsets are committed right after.

- `NullSink`: computes every column of the result (Spark's `noop` source) and drops it.
- `ParquetSink`: one directory per batch, `<path>/<batch name>/`, written with mode overwrite. The
  batch name depends only on the offsets the batch covers, so a retried batch replaces its own
  earlier attempt instead of adding a second copy; a batch polled again after a crash may have other
  boundaries and then lands beside the first copy (at-least-once).
- `KafkaSink`: an idempotent producer; rows carry `value` (and `key` when present), or, when the
  result has no `value` column, the whole row as JSON in `value`. Flushed before `write` returns.

Spark is lazy: the transform runs when its result is first computed. So a sink computes the
result first and stores it second, and the two fail differently. A failure of the computation is
the transform's, left as it is, so the batch can be split to find the record that causes it. Any
failure of the storing (parquet path unwritable, disk full, Spark's write job failing, a producer
refusing or not acknowledging) raises `SinkError`: retried, then fatal to the member, never split
nor dead-lettered, because good records would be dead-lettered and committed with it. The null
sink stores nothing; its one job is the computation.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from consumer_runtime.config import RuntimeConfig
from consumer_runtime.delivery import SinkError, dead_letter_headers
from consumer_runtime.records import KafkaRecord

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)
FLUSH_TIMEOUT_S = 30.0
SECURITY_PREFIXES = ("security.", "sasl.", "ssl.")


class Sink(Protocol):
    def write(self, df: DataFrame, name: str) -> None:
        """Compute `df` (failures as they are), then store it (failures as SinkError)."""
        ...

    def warm_up(self, df: DataFrame) -> None:
        """Run `df` (the transform on a made-up record) through the write's own path without
        storing it where the real output goes, so a replacement's first real batch pays no
        first-write cost (class loading, code generation, a file system's or a producer's
        first use)."""
        ...

    def close(self) -> None: ...


PY4J_CALL = "An error occurred while calling "


def cause_line(error: BaseException, limit: int = 500) -> str:
    """What went wrong, in one line: py4j's first line only names the call (`An error occurred
    while calling o47.parquet.`), so for a JVM exception the line after it, which names it."""
    lines = [ln.strip(" :\t") for ln in str(error).strip().splitlines() if ln.strip(" :\t")]
    if len(lines) > 1 and lines[0].startswith(PY4J_CALL):
        lines = lines[1:]
    return lines[0][:limit] if lines else type(error).__name__


class NullSink:
    def write(self, df: DataFrame, name: str) -> None:
        df.write.format("noop").mode("overwrite").save()

    def warm_up(self, df: DataFrame) -> None:
        self.write(df, "warm-up")

    def close(self) -> None:
        pass


class ParquetSink:
    def __init__(self, path: str) -> None:
        self.path = path.rstrip("/")

    def write(self, df: DataFrame, name: str) -> None:
        self._store(df, f"{self.path}/{name}")

    def warm_up(self, df: DataFrame) -> None:
        """The whole write (cache, count, Parquet writer, committer) into a scratch directory
        on the local file system, removed after: readers of the sink's path never see it. A
        remote file system's client is not warmed (its first real write still pays for it), nor
        is anything through Spark Connect.
        Measured in the demo before this: the replacements' first batches took 9.6-14.4 s
        after their old members' last ones, where the rejoin took 33-149 ms."""
        if type(df).__module__.startswith("pyspark.sql.connect"):
            # Spark Connect writes on the server, whose file system is not this one (and the
            # shared server is warm already): only the transform is run.
            NullSink().write(df, "warm-up")
            return
        scratch = tempfile.mkdtemp(prefix="staticfleet-warm-up-")
        try:
            self._store(df, f"file://{scratch}/warm-up")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _store(self, df: DataFrame, target: str) -> None:
        computed = df.persist()
        try:
            computed.count()  # the transform runs here, every column (the cache holds them all)
            try:
                computed.write.mode("overwrite").parquet(target)
            except Exception as exc:
                raise SinkError(f"parquet sink: writing {target} failed: "
                                f"{cause_line(exc)}") from exc
        finally:
            _release(computed)

    def close(self) -> None:
        pass


def _release(df: DataFrame) -> None:
    try:
        df.unpersist()
    except Exception as exc:  # the batch's outcome is decided; a lost cache entry is not news
        log.warning("could not release the cached batch: %s", cause_line(exc))


def producer_settings(config: RuntimeConfig, purpose: str) -> dict[str, Any]:
    """An idempotent producer on the consumer's brokers, with the consumer's security settings."""
    settings: dict[str, Any] = {
        k: v for k, v in config.consumer.items() if k.startswith(SECURITY_PREFIXES)
    }
    settings.update({
        "bootstrap.servers": config.bootstrap_servers,
        "client.id": f"{config.member}-{purpose}",
        "enable.idempotence": True,
        "linger.ms": 5,
        "compression.type": "lz4",
    })
    return settings


class Delivery:
    """An idempotent producer whose `flush` raises SinkError unless every message was acked."""

    def __init__(self, settings: Mapping[str, Any],
                 make: Callable[[dict[str, Any]], Producer] = Producer) -> None:
        self.producer = make(dict(settings))
        self.failures: list[KafkaError] = []

    def _acked(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.failures.append(err)

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None,
                headers: list[tuple[str, str | bytes | None]] | None = None) -> None:
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, headers=headers,
                                      on_delivery=self._acked)
                return
            except BufferError:
                self.producer.poll(0.05)
            except KafkaException as exc:
                raise SinkError(f"producing to {topic} failed: {exc.args[0]}") from exc

    def flush(self, what: str) -> None:
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        left = self.producer.flush(FLUSH_TIMEOUT_S)
        while left and time.monotonic() < deadline:
            left = self.producer.flush(1.0)
        failures, self.failures = self.failures, []
        if left:
            raise SinkError(f"{what}: {left} messages not delivered within {FLUSH_TIMEOUT_S:.0f}s")
        if failures:
            raise SinkError(f"{what}: {len(failures)} messages failed, first: {failures[0]}")

    def close(self) -> None:
        self.producer.flush(FLUSH_TIMEOUT_S)


class KafkaSink:
    def __init__(self, topic: str, delivery: Delivery) -> None:
        self.topic = topic
        self.delivery = delivery

    def write(self, df: DataFrame, name: str) -> None:
        # Computing: the transform runs here. Storing: produce and flush, which raise SinkError.
        table = self._records(df)
        values = _as_bytes(table.column("value").to_pylist())
        keys = (_as_bytes(table.column("key").to_pylist()) if "key" in table.column_names
                else [None] * len(values))
        for key, value in zip(keys, values, strict=True):
            self.delivery.produce(self.topic, value=value, key=key)
        self.delivery.flush(f"kafka sink {self.topic} batch {name}")

    def warm_up(self, df: DataFrame) -> None:
        """The records computed as for a write (nothing produced), and the topic's metadata
        fetched, so the first real batch's produce finds its leader known."""
        self._records(df)
        try:
            self.delivery.producer.list_topics(self.topic, timeout=5.0)
        except KafkaException as exc:
            log.warning("kafka sink %s: no metadata at warm-up: %s", self.topic, exc)

    def _records(self, df: DataFrame) -> pa.Table:
        from pyspark.sql import functions as F

        columns = df.columns
        if "value" not in columns:
            keyed = [F.col("key")] if "key" in columns else []
            df = df.select(*keyed, F.to_json(F.struct(*[F.col(c) for c in columns]))
                           .alias("value"))
        return df.select(*[c for c in ("key", "value") if c in df.columns]).toArrow()

    def close(self) -> None:
        self.delivery.close()


def _as_bytes(items: Iterable[Any]) -> list[bytes | None]:
    return [v.encode() if isinstance(v, str) else v for v in items]


class DeadLetters:
    """Sends the records that fail alone to the dead-letter topic, with headers naming why."""

    def __init__(self, topic: str, group: str, delivery: Delivery) -> None:
        self.topic = topic
        self.group = group
        self.delivery = delivery

    def send(self, failed: Sequence[tuple[KafkaRecord, BaseException]]) -> None:
        for record, error in failed:
            self.delivery.produce(self.topic, value=record.value(), key=record.key(),
                                  headers=dead_letter_headers(record, error, self.group))
        self.delivery.flush(f"dead-letter topic {self.topic}")
        for record, error in failed:
            log.warning("dead-lettered %s[%s]@%s: %s", record.topic(), record.partition(),
                        record.offset(), str(error).splitlines()[0][:300] if str(error) else
                        type(error).__name__)

    def close(self) -> None:
        self.delivery.close()


def build_sink(config: RuntimeConfig) -> Sink:
    sink = config.sink
    if sink.type == "parquet":
        assert sink.path is not None
        return ParquetSink(sink.path)
    if sink.type == "kafka":
        assert sink.topic is not None
        return KafkaSink(sink.topic, Delivery(producer_settings(config, "sink")))
    return NullSink()


def build_dead_letters(config: RuntimeConfig) -> DeadLetters | None:
    if config.dead_letter_topic is None:
        return None
    return DeadLetters(config.dead_letter_topic, config.group_id,
                       Delivery(producer_settings(config, "dlq")))
