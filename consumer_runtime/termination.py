"""The member's last words: one line saying what stopped it, written as the container's
termination message, so the operator quotes the member's own error rather than the end of its log
(where a JVM stack trace often has the last word).

`error_line` names an exception by its type and message, never by a stack frame, using pyspark's
own exception API where the exception is one of pyspark's. `write_termination_message` puts a
line where the kubelet reads the termination message: `/dev/termination-log` (the container's
`terminationMessagePath`, which the kubelet mounts), or the file named by
`STATICFLEET_TERMINATION_MESSAGE_PATH` (the local node gives each container start a file of its
own there; docs/contracts.md).

A drained process that sees its replacement hold the instance id exits cleanly, and a member
pod's restart policy (Always) then starts its container again: that new process must not join,
or it would fence the replacement (classic) or be refused until the replacement leaves
(KIP-848). So the exiting process leaves word that outlives its container but not its pod
(`Replaced`, `write_replaced`), and a process that finds it stays out (`read_replaced`).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from member_contract import TERMINATION_MESSAGE_PATH_ENV

log = logging.getLogger(__name__)

DEFAULT_TERMINATION_PATH = "/dev/termination-log"
MESSAGE_BYTES = 4096
"""What a kubelet reads of a termination message file."""
LINE_LIMIT = 600
REPLACED_FILE = "staticfleet-replaced.json"
POD_TMP = Path("/tmp")
"""A member pod's emptyDir `tmp` (docs/contracts.md, Security): it outlives a container, not the
pod."""


def error_line(exc: BaseException, limit: int = LINE_LIMIT) -> str:
    """`exc` in one line: its type and message, e.g. `ValueError: bad value`; for pyspark's
    exceptions the error condition and message as pyspark gives them
    (`SparkRuntimeException: [USER_RAISED_EXCEPTION] bad record SQLSTATE: P0001`), for an error
    raised in a Python worker (a UDF) the Python exception it reports
    (`PythonException: [PYTHON_EXCEPTION] ValueError: ...`), for a Java exception py4j
    did not convert the Java exception (`org.apache.spark.SparkException: ...`). The runtime's
    own errors (already a sentence, naming the batch) are their message alone."""
    text = _spark_message(exc) or _java_message(exc) or _first_line(str(exc))
    if type(exc).__module__.split(".")[0] == "consumer_runtime" and text:
        return text[:limit]
    name = type(exc).__name__
    return (f"{name}: {text}" if text else name)[:limit]


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _last_line(text: str) -> str:
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")


def _spark_message(exc: BaseException) -> str | None:
    """A pyspark exception's condition and message (None for other exceptions, or when a
    captured exception cannot ask the JVM any more)."""
    errors: Any = sys.modules.get("pyspark.errors")  # loaded whenever one was raised
    if errors is None or not isinstance(exc, errors.PySparkException):
        return None
    try:
        condition = exc.getCondition()
        parameters = exc.getMessageParameters() or {}
        message = exc.getMessage()
    except Exception:  # a captured exception reads these from the JVM
        return None
    # Raised in a Python worker (a UDF): the traceback's last line is the Python exception.
    line = (_last_line(str(parameters["traceback"])) if parameters.get("traceback")
            else _first_line(str(message)))
    if condition and f"[{condition}]" not in line:
        line = f"[{condition}] {line}".rstrip()
    return line or None


def _java_message(exc: BaseException) -> str | None:
    """A Java exception py4j raised as it is (pyspark converts only the ones it knows): the
    Java exception's own `toString()`, class and message (py4j's message names the call)."""
    protocol: Any = sys.modules.get("py4j.protocol")
    if protocol is None or not isinstance(exc, protocol.Py4JJavaError):
        return None
    try:
        return _first_line(str(exc.java_exception.toString())) or None
    except Exception:  # the gateway is gone
        return None


def close_report(closed_at: float, last_batch_at: float | None) -> str:
    """A clean exit's termination message: when the consumer closed and when the last batch
    ended, unix seconds of this process's clock to the millisecond
    (`{"closedAt": ..., "lastBatchAt": ...}`). The operator takes a restart's absence and
    processing gap from it where a kubelet's `finishedAt` has whole seconds, and where the
    process exited before a pass read its /status."""
    return json.dumps({"closedAt": round(closed_at, 3),
                       "lastBatchAt": None if last_batch_at is None else round(last_batch_at, 3)})


def termination_path(env: Mapping[str, str]) -> Path | None:
    """Where the termination message goes: the file `STATICFLEET_TERMINATION_MESSAGE_PATH`
    names, else `/dev/termination-log` when it exists (a kubelet mounts it into every
    container; a process run by hand has none, and then nothing is written)."""
    named = env.get(TERMINATION_MESSAGE_PATH_ENV, "").strip()
    if named:
        return Path(named)
    default = Path(DEFAULT_TERMINATION_PATH)
    return default if default.exists() else None


def write_termination_message(env: Mapping[str, str], text: str) -> None:
    """Write `text` (at most what a kubelet reads of it) as the termination message."""
    path = termination_path(env)
    if path is None:
        return
    data = text.encode()[:MESSAGE_BYTES].decode(errors="ignore")
    try:
        path.write_text(data)
    except OSError as exc:
        log.warning("cannot write the termination message to %s: %s", path, exc.strerror)


@dataclass(frozen=True)
class Replaced:
    """A process of this pod drained, then saw its replacement hold the instance id and exited:
    what a restart of its container needs to stay out of the group and answer as it did (a
    drain asked again gets that drain's `drainedAt`; the exit reports that close)."""

    group_id: str
    instance_id: str
    drained_at: float
    """Unix seconds: when the drain closed the consumer (`/status` `drainedAt`)."""
    closed_at: float
    last_batch_at: float | None

    @classmethod
    def parse(cls, text: str) -> Replaced | None:
        """The record written by `write_replaced`; None for anything else."""
        try:
            raw = json.loads(text)
            replaced = cls(**raw)
        except (ValueError, TypeError):
            return None
        numbers = (replaced.drained_at, replaced.closed_at,
                   0.0 if replaced.last_batch_at is None else replaced.last_batch_at)
        if not all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers):
            return None
        return replaced


def pod_dir(env: Mapping[str, str]) -> Path | None:
    """A directory that outlives this container but not its pod, where a process leaves word
    for the next process of its container (`Replaced`; a KIP-848 member's id,
    consumer_runtime/predecessor.py): the directory of the file
    `STATICFLEET_TERMINATION_MESSAGE_PATH` names (the local node: a directory of the pod's own,
    kept across container starts), else the pod's /tmp when a kubelet mounted
    /dev/termination-log; None for a process run by hand (nothing restarts it)."""
    named = env.get(TERMINATION_MESSAGE_PATH_ENV, "").strip()
    if named:
        return Path(named).parent
    return POD_TMP if Path(DEFAULT_TERMINATION_PATH).exists() else None


def write_whole(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all (a temporary file beside it, renamed over
    it): a process killed halfway leaves the old content or none, never half a record."""
    part = path.with_name(f".{path.name}.part")
    part.write_text(text)
    part.replace(path)


def replaced_path(env: Mapping[str, str]) -> Path | None:
    """Where a restart of this container finds a `Replaced` record (in `pod_dir`)."""
    directory = pod_dir(env)
    return None if directory is None else directory / REPLACED_FILE


def write_replaced(env: Mapping[str, str], replaced: Replaced) -> bool:
    """Leave `replaced` for a restart of this container; False when it could not be written
    where a restart looks (the process must then stay up instead of exiting)."""
    path = replaced_path(env)
    if path is None:
        return True
    try:
        write_whole(path, json.dumps(asdict(replaced)))
    except OSError as exc:
        log.warning("cannot write %s: %s", path, exc.strerror)
        return False
    return True


def read_replaced(env: Mapping[str, str], group_id: str,
                  instance_id: str | None) -> Replaced | None:
    """The `Replaced` record an earlier process of this container left for this group and
    instance id; None when there is none (a first start, a restart after anything else)."""
    path = replaced_path(env)
    if path is None or not instance_id:
        return None
    try:
        text = path.read_text()
    except OSError:
        return None
    replaced = Replaced.parse(text)
    if replaced is None or (replaced.group_id, replaced.instance_id) != (group_id, instance_id):
        return None
    return replaced
