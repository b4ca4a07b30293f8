"""Which failures are the sink's: a sink computes the batch first (failures stay the transform's,
so the batch can be split) and stores it second (failures are SinkError: retried, then the member
stops; never split nor dead-lettered). Plain stand-ins for Spark's DataFrame; no JVM, no broker."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from py4j.protocol import Py4JJavaError

from consumer_runtime.delivery import SinkError
from consumer_runtime.sinks import Delivery, ParquetSink, cause_line

pytestmark = pytest.mark.unit


class StorageFailed(Py4JJavaError):
    """What py4j raises for a JVM exception: its text names the call, then the exception."""

    def __init__(self, text: str) -> None:
        Exception.__init__(self, text)

    def __str__(self) -> str:
        return str(self.args[0])


class Writer:
    def __init__(self, frame: Frame) -> None:
        self.frame = frame

    def mode(self, mode: str) -> Writer:
        assert mode == "overwrite"
        return self

    def parquet(self, path: str) -> None:
        self.frame.calls.append(f"parquet {path}")
        if self.frame.storage_error is not None:
            raise self.frame.storage_error


class Frame:
    """A DataFrame whose computation (count) or storing (write) can fail."""

    def __init__(self, compute_error: Exception | None = None,
                 storage_error: Exception | None = None) -> None:
        self.compute_error = compute_error
        self.storage_error = storage_error
        self.calls: list[str] = []

    def persist(self) -> Frame:
        self.calls.append("persist")
        return self

    def count(self) -> int:
        self.calls.append("count")
        if self.compute_error is not None:
            raise self.compute_error
        return 3

    @property
    def write(self) -> Writer:
        return Writer(self)

    def unpersist(self) -> Frame:
        self.calls.append("unpersist")
        return self


NOT_A_DIRECTORY = StorageFailed(
    "An error occurred while calling o47.parquet.\n: org.apache.hadoop.fs."
    "ParentNotDirectoryException: Parent path is not a directory: file:/data/out\n"
    "\tat org.apache.hadoop.fs.RawLocalFileSystem.mkdirs(RawLocalFileSystem.java:873)")


@pytest.mark.parametrize("error", [NOT_A_DIRECTORY, OSError(28, "No space left on device"),
                                   RuntimeError("Job aborted due to stage failure")],
                         ids=["unwritable path", "disk full", "write job failed"])
def test_a_failure_to_store_the_computed_batch_is_a_sink_error(error: Exception) -> None:
    frame = Frame(storage_error=error)
    with pytest.raises(SinkError, match=r"^parquet sink: writing /data/out/b-1 failed: ") as got:
        ParquetSink("/data/out/").write(frame, "b-1")  # type: ignore[arg-type]
    assert got.value.__cause__ is error
    assert frame.calls == ["persist", "count", "parquet /data/out/b-1", "unpersist"]


def test_the_storage_error_names_the_jvm_exception_not_only_the_py4j_call() -> None:
    frame = Frame(storage_error=NOT_A_DIRECTORY)
    with pytest.raises(SinkError) as got:
        ParquetSink("/data/out").write(frame, "b-1")  # type: ignore[arg-type]
    assert str(got.value) == ("parquet sink: writing /data/out/b-1 failed: org.apache.hadoop.fs."
                              "ParentNotDirectoryException: Parent path is not a directory: "
                              "file:/data/out")


def test_a_failure_of_the_transform_is_not_the_sinks_and_nothing_is_written() -> None:
    poison = ValueError("[USER_RAISED_EXCEPTION] poison record")
    frame = Frame(compute_error=poison)
    with pytest.raises(ValueError) as got:
        ParquetSink("/data/out").write(frame, "b-1")  # type: ignore[arg-type]
    assert got.value is poison and not isinstance(got.value, SinkError)
    assert frame.calls == ["persist", "count", "unpersist"]


def test_a_computed_batch_is_written_once_and_released() -> None:
    frame = Frame()
    ParquetSink("/data/out").write(frame, "b-1")  # type: ignore[arg-type]
    assert frame.calls == ["persist", "count", "parquet /data/out/b-1", "unpersist"]


def test_the_warm_up_runs_the_whole_write_outside_the_sinks_path_and_leaves_nothing() -> None:
    """A standby warms the Parquet write itself (its first write cost seconds in the demo's
    handoffs), into a scratch directory that is gone after: readers of the sink's path never
    see a made-up record."""
    from pathlib import Path

    frame = Frame()
    ParquetSink("/data/out").warm_up(frame)  # type: ignore[arg-type]
    persist, count, written, release = frame.calls
    assert (persist, count, release) == ("persist", "count", "unpersist")
    target = written.removeprefix("parquet file://")
    assert written.startswith("parquet file://") and "/data/out" not in written
    assert not Path(target).parent.exists(), "the scratch directory was left behind"


class RefusingProducer:
    """librdkafka refuses some messages in produce() itself, e.g. one above message.max.bytes."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings

    def produce(self, topic: str, **_: Any) -> None:
        raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE,
                                        "Broker: Message size too large"))


def test_a_message_the_producer_refuses_is_a_sink_error() -> None:
    delivery = Delivery({}, make=RefusingProducer)  # type: ignore[arg-type]
    with pytest.raises(SinkError, match=r"^producing to out failed: .*Message size too large"):
        delivery.produce("out", value=b"x" * 5000)


@pytest.mark.parametrize(("text", "short"), [
    ("An error occurred while calling o47.parquet.\n: java.io.IOException: Mkdirs failed\n\tat x",
     "java.io.IOException: Mkdirs failed"),
    ("[PATH_NOT_FOUND] Path does not exist\nJVM stacktrace:\n...",
     "[PATH_NOT_FOUND] Path does not exist"),
    ("", "OSError"),
])
def test_cause_line(text: str, short: str) -> None:
    error: Any = OSError(text) if text else OSError()
    assert cause_line(error) == short
