"""The member's last words: the error that stopped it in one line, never a stack frame, and
where that line is written (the container's termination message)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkValueError
from pyspark.errors.exceptions.connect import PythonException, SparkRuntimeException

from consumer_runtime.processing import BatchFailed
from consumer_runtime.termination import (
    DEFAULT_TERMINATION_PATH,
    MESSAGE_BYTES,
    close_report,
    error_line,
    termination_path,
    write_termination_message,
)
from member_contract import TERMINATION_MESSAGE_PATH_ENV

pytestmark = pytest.mark.unit

JVM_STACK = ("\tat org.apache.spark.util.SparkErrorUtils.tryWithSafeFinally(SparkErrorUtils"
             ".scala:86)\n\tat org.apache.spark.util.SparkErrorUtils.tryWithSafeFinally$("
             "SparkErrorUtils.scala:83)")


class JavaThrowable:
    """What py4j hands over of a Java exception: an object whose methods run in the JVM."""

    _target_id = "o48"  # its id in the gateway, which py4j's error keeps

    def __init__(self, text: str) -> None:
        self.text = text

    def toString(self) -> str:  # the Java method's name
        return self.text


def raise_error_in_a_transform() -> SparkRuntimeException:
    """`F.raise_error(F.lit("bad record"))` on a record, as Spark (Connect) reports it."""
    return SparkRuntimeException(
        message="[USER_RAISED_EXCEPTION] bad record SQLSTATE: P0001",
        errorClass="USER_RAISED_EXCEPTION", messageParameters={"errorMessage": "bad record"},
        sql_state="P0001", server_stacktrace=JVM_STACK, display_server_stacktrace=True)


@pytest.mark.parametrize(("error", "line"), [
    (ValueError("cannot parse 'x'\nmore detail"), "ValueError: cannot parse 'x'"),
    (KeyError("price"), "KeyError: 'price'"),
    (RuntimeError(), "RuntimeError"),
    (raise_error_in_a_transform(),
     "SparkRuntimeException: [USER_RAISED_EXCEPTION] bad record SQLSTATE: P0001"),
    (SparkRuntimeException(message="bad record", errorClass="USER_RAISED_EXCEPTION",
                           messageParameters={"errorMessage": "bad record"}),
     "SparkRuntimeException: [USER_RAISED_EXCEPTION] bad record"),
    (PythonException(
        message="[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback",
        errorClass="PYTHON_EXCEPTION", messageParameters={
            "msg": "An exception was thrown from the Python worker",
            "traceback": "Traceback (most recent call last):\n  File \"job.py\", line 3, in "
                         "parse\n    raise ValueError('no price')\nValueError: no price\n"}),
     "PythonException: [PYTHON_EXCEPTION] ValueError: no price"),
    (PySparkValueError(errorClass="CANNOT_BE_EMPTY", messageParameters={"item": "transform"}),
     "PySparkValueError: [CANNOT_BE_EMPTY] At least one transform must be specified."),
    (Py4JJavaError("An error occurred while calling o47.save.\n", JavaThrowable(
        "org.apache.spark.SparkException: Job aborted due to stage failure: boom\n" + JVM_STACK)),
     "Py4JJavaError: org.apache.spark.SparkException: Job aborted due to stage failure: boom"),
    (BatchFailed("batch 4 failed 3 times and no dead-letter topic is set: ValueError: x"),
     "batch 4 failed 3 times and no dead-letter topic is set: ValueError: x"),
], ids=["python", "key", "no message", "raise_error", "connect message without condition",
        "python worker", "pyspark", "java", "the runtime's own"])
def test_an_error_is_named_by_its_type_and_message(error: BaseException, line: str) -> None:
    said = error_line(error)
    assert said == line
    assert "\tat " not in said and "\n" not in said


def test_the_line_is_bounded() -> None:
    assert len(error_line(ValueError("x" * 5000), limit=100)) == 100


def test_the_message_goes_where_the_environment_says(tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    env = {TERMINATION_MESSAGE_PATH_ENV: str(path)}
    assert termination_path(env) == path
    write_termination_message(env, "consumer_runtime: member stops: é" + "x" * 5000)
    written = path.read_bytes()
    assert written.startswith("consumer_runtime: member stops: é".encode())
    assert len(written) <= MESSAGE_BYTES


def test_without_a_kubelets_file_nothing_is_written() -> None:
    """Run by hand there is no /dev/termination-log: the runtime creates none."""
    expected = Path(DEFAULT_TERMINATION_PATH) if Path(DEFAULT_TERMINATION_PATH).exists() else None
    assert termination_path({}) == expected


def test_an_unwritable_path_is_only_logged(tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    env = {TERMINATION_MESSAGE_PATH_ENV: str(tmp_path / "missing" / "termination-log")}
    write_termination_message(env, "consumer_runtime: member stops: x")
    assert "cannot write the termination message" in caplog.text


def test_a_clean_exits_report_is_one_json_object_to_the_millisecond() -> None:
    assert json.loads(close_report(1795867201.43712, 1795867200.9)) == {
        "closedAt": 1795867201.437, "lastBatchAt": 1795867200.9}
    assert json.loads(close_report(1795867201.0, None)) == {
        "closedAt": 1795867201.0, "lastBatchAt": None}
    assert len(close_report(1795867201.43712, 1795867200.9)) < MESSAGE_BYTES
