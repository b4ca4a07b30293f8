"""`python -m consumer_runtime`: validate the configuration, start HTTP, Spark and the member.

A restart of a container whose drained process was replaced (`termination.Replaced`) starts
neither Spark nor a consumer: it stays out of the group until SIGTERM (`_stay_out`)."""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException

from consumer_runtime.config import ConfigError, RuntimeConfig, load_config
from consumer_runtime.control import TokenFile
from consumer_runtime.http import serve
from consumer_runtime.member import Member
from consumer_runtime.metrics import Telemetry
from consumer_runtime.predecessor import MemberIdFile
from consumer_runtime.processing import BatchProcessor
from consumer_runtime.records import Batch
from consumer_runtime.sinks import DeadLetters, Sink, build_dead_letters, build_sink
from consumer_runtime.steering import Requests
from consumer_runtime.termination import (
    Replaced,
    close_report,
    error_line,
    read_replaced,
    write_replaced,
    write_termination_message,
)
from consumer_runtime.timeline import Timeline
from member_contract import MEMBER_TOKEN_FILE_ENV

if TYPE_CHECKING:
    from consumer_runtime.spark import SparkBatch, Transform

log = logging.getLogger("consumer_runtime")


def process_age() -> float:
    """Seconds since this process started (from /proc), 0 where /proc is not available."""
    try:
        stat = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - int(stat[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


# Long: the process's start in its order (configuration, telemetry, HTTP, consumer, Spark,
# signals), each failure with its exit code; the HTTP callbacks reach the member made later.
def main(env: Mapping[str, str] | None = None) -> int:
    age, started_at, wall = process_age(), time.monotonic(), time.time()
    env = os.environ if env is None else env
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        config = load_config(env)
        from consumer_runtime.spark import resolve_transform
        transform = resolve_transform(config.transform)
    except ConfigError as exc:
        _last_words(env, f"consumer_runtime: configuration refused: {exc}")
        return 2
    telemetry = Telemetry(
        namespace=config.namespace, group=config.group_id, member=config.member,
        instance_id=config.group_instance_id,
        session_timeout_s=(None if config.session_timeout_ms is None
                           else config.session_timeout_ms / 1000.0),
        max_poll_interval_s=config.max_poll_interval_ms / 1000.0,
        process_start=round(wall - age, 3), started_at=started_at, age_at_start=age,
        standby=config.standby, max_records=config.batch.max_records)
    member: Member | None = None

    def request(action: str) -> str | None:
        """POST /leave, /rejoin and /activate; the probes answer before the member exists."""
        return "the member is still starting" if member is None else member.request(action)

    def drain(hold_s: float | None, wait_s: float) -> tuple[str | None, bool]:
        """POST /drain (consumer_runtime/steering.py)."""
        if member is None:
            return "the member is still starting", False
        return member.drain(hold_s, wait_s)

    token = TokenFile(env.get(MEMBER_TOKEN_FILE_ENV))
    if token.path is None:
        log.warning("no control token (%s unset): POST /leave, /rejoin, /activate and /drain "
                    "are all refused", MEMBER_TOKEN_FILE_ENV)
    else:
        token.current()  # says at the start whether it can be read
    replaced = read_replaced(env, config.group_id, config.group_instance_id)
    if replaced is not None:
        return _stay_out(env, config, telemetry, token, replaced)
    server = _serve(env, config, telemetry, request, token, drain)
    if server is None:
        return 1
    sink = build_sink(config)
    dead_letters = build_dead_letters(config)
    spark: cf.Future[SparkBatch] = cf.Future()
    spark.add_done_callback(
        lambda f: telemetry.spark_started(f.exception() is None, time.monotonic()))
    timeline = Timeline(on_span=telemetry.stage)
    processor = BatchProcessor(run=lambda: spark.result().run, retry=config.retry,
                               dead_letters=dead_letters.send if dead_letters else None)
    try:
        member = Member(config, telemetry, processor.handle, ready=spark.done,
                        startup_check=lambda: spark.exception(0) if spark.done() else None,
                        timeline=timeline, prepare=lambda n, batch: _prepare(spark, n, batch),
                        member_ids=MemberIdFile.for_member(env, config))
        telemetry.consumer_made(time.monotonic())
    except KafkaException as exc:
        _last_words(env, f"consumer_runtime: configuration refused: consumer: librdkafka "
                         f"refused the settings ({exc.args[0].str()}); fix the consumer "
                         "properties")
        return 2
    # Spark starts once librdkafka took the settings (a refused config starts no JVM), in
    # parallel with joining the group: `ready` holds the first poll's records until it is up.
    threading.Thread(target=_start_spark, args=(spark, config, transform, sink, timeline),
                     name="spark-start", daemon=True).start()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s", signal.Signals(signum).name)
        member.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("member %s of group %s starting%s (instance id %s, spark %s, sink %s)",
             config.member, config.group_id, " in standby" if config.standby else "",
             config.group_instance_id or "none: dynamic", config.spark.mode, config.sink.type)
    if config.pod_activated:
        log.info("its pod was activated before (STATICFLEET_ACTIVATED): this restart joins the "
                 "group directly, not in standby")
    code = member.run()
    if member.replaced and not _leave_word(env, config, telemetry, member):
        # A restart would not know it was replaced, and would join: the old way, up until the
        # pod is deleted.
        log.warning("staying up, out of the group, until SIGTERM")
        while not member.requests.stopping.wait(1.0):
            telemetry.ticked(time.monotonic())
    if member.requests.drained.is_set():
        # Drained and now stopped: its partitions are the replacement's, which is processing
        # its first batches right now, maybe beside it. Spark's stop (pyspark's atexit, the
        # JVM's shutdown hook) costs about a second of CPU that would be taken from them.
        _yield_cpu(spark)
    if code != 0 and member.failure is not None:
        # The log's end may be a JVM stack trace: the termination message names the error.
        write_termination_message(env, f"consumer_runtime: member stops: "
                                       f"{error_line(member.failure)}")
    elif code == 0 and member.closed_at is not None:
        write_termination_message(env, close_report(member.closed_at,
                                                    telemetry.last_batch_at()))
    _close(sink, dead_letters, spark, config)
    server.shutdown()
    log.info("exit %d", code)
    return code


def _serve(env: Mapping[str, str], config: RuntimeConfig, telemetry: Telemetry,
           request: Callable[[str], str | None], token: TokenFile,
           drain: Callable[[float | None, float], tuple[str | None, bool]]
           ) -> ThreadingHTTPServer | None:
    """The HTTP server, up; None (said as last words) when the port cannot be had."""
    try:
        return serve(telemetry, config.http_host, config.http_port, request, token.current,
                     drain)
    except OSError as exc:
        _last_words(env, f"consumer_runtime: cannot listen on {config.http_host}:"
                         f"{config.http_port}: {exc.strerror}")
        return None


def _leave_word(env: Mapping[str, str], config: RuntimeConfig, telemetry: Telemetry,
                member: Member) -> bool:
    """The run ended because the replacement holds the instance id: leave that for a restart of
    this container (`termination.Replaced`); False when it could not be written."""
    drained_at = telemetry.drained_at if telemetry.drained_at is not None else time.time()
    return write_replaced(env, Replaced(
        group_id=config.group_id, instance_id=config.group_instance_id or "",
        drained_at=drained_at,
        closed_at=member.closed_at if member.closed_at is not None else drained_at,
        last_batch_at=telemetry.last_batch_at()))


def _stay_out(env: Mapping[str, str], config: RuntimeConfig, telemetry: Telemetry,
              token: TokenFile, replaced: Replaced) -> int:
    """A restart of a container whose drained process saw its replacement hold the instance id
    and exited: no consumer and no Spark. `/status` shows that drain (state `drained`, its
    `drainedAt` and `lastBatchAt`), a drain asked again answers at once with it, the other
    requests are refused, and SIGTERM ends the process (exit 0, reporting that close again)."""
    requests = Requests(telemetry, standby=False)
    telemetry.drained_before_restart(replaced.drained_at, replaced.last_batch_at)
    requests.drained.set()
    server = _serve(env, config, telemetry,
                    lambda action: requests.take(action, joined=False, left=False), token,
                    requests.take_drain)
    if server is None:
        return 1

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s", signal.Signals(signum).name)
        requests.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("member %s of group %s: an earlier process of this pod drained at %.3f and exited "
             "once its replacement held instance id %s; staying out of the group until SIGTERM",
             config.member, config.group_id, replaced.drained_at, replaced.instance_id)
    while not requests.stopping.wait(1.0):
        telemetry.ticked(time.monotonic())
    write_termination_message(env, close_report(replaced.closed_at, replaced.last_batch_at))
    server.shutdown()
    log.info("exit 0")
    return 0


def _last_words(env: Mapping[str, str], line: str) -> None:
    """Why the process stops before it ran: on stderr, and as its termination message."""
    print(line, file=sys.stderr, flush=True)
    write_termination_message(env, line)


def _start_spark(future: cf.Future[SparkBatch], config: RuntimeConfig, transform: Transform,
                 sink: Sink, timeline: Timeline) -> None:
    from consumer_runtime.spark import make_spark_batch
    try:
        future.set_result(make_spark_batch(config, transform, sink, timeline))
    except BaseException as exc:
        log.error("spark did not start: %s", exc)
        future.set_exception(exc)


def _prepare(spark: cf.Future[SparkBatch], batch_id: int, batch: Batch) -> None:
    """The member's next batch, due while the worker is busy: Spark builds its DataFrame."""
    if spark.done() and spark.exception(0) is None:
        spark.result().prepare(batch_id, batch)


def _yield_cpu(spark: cf.Future[SparkBatch]) -> None:
    """Lowest CPU priority (nice 19) for what is left of this process and its Spark JVM: it
    serves nothing any more. Only weighs against processes of the same cgroup (the local
    node's pods, containers of one pod); a kubelet's pods have a cgroup each."""
    from consumer_runtime.spark import jvm_pid
    try:
        os.nice(19)  # this thread: the one that runs pyspark's atexit stop
        if spark.done() and spark.exception(0) is None:
            pid = jvm_pid(spark.result().session)
            if pid is not None:  # the JVM has its own session: its group is every thread of it
                os.setpriority(os.PRIO_PGRP, os.getpgid(pid), 19)
    except OSError as exc:
        log.debug("could not lower the priority: %s", exc)


def _close(sink: Sink, dead_letters: DeadLetters | None, spark: cf.Future[SparkBatch],
           config: RuntimeConfig) -> None:
    sink.close()
    if dead_letters is not None:
        dead_letters.close()
    if config.spark.mode == "connect" and spark.done() and spark.exception(0) is None:
        spark.result().session.stop()
