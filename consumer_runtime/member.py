"""The poll loop: a static member that gathers batches, hands them to a worker, commits after.

One batch is processed at a time, in a worker thread, while this loop keeps calling the consumer:
it gathers the next batch meanwhile and, once that one is full, waits up to HOLD_UNPAUSED_S for
the worker, then pauses the assigned partitions and goes on polling (which fetches nothing but
serves callbacks and keeps `max.poll.interval.ms` satisfied) until the worker is done. Then it
commits the finished batch's offsets synchronously, hands over the next batch and resumes the
partitions. Every consumer call happens on this thread.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from consumer_runtime.buffer import BatchBuffer
from consumer_runtime.config import RuntimeConfig
from consumer_runtime.metrics import Telemetry
from consumer_runtime.processing import Outcome
from consumer_runtime.records import Batch, next_offsets
from consumer_runtime.records import TopicPartition as TP

log = logging.getLogger(__name__)
BUSY_POLL_S = 0.05
IDLE_POLL_S = 0.5
STATS_INTERVAL_MS = 5000
HOLD_UNPAUSED_S = 2.0
"""With the next batch full, how long the loop just waits for the worker before it pauses the
partitions and goes back to polling."""


def consumer_settings(config: RuntimeConfig, telemetry: Telemetry) -> dict[str, Any]:
    """librdkafka settings: the operator's, plus what the runtime owns (manual commits, ids)."""
    settings: dict[str, Any] = {"statistics.interval.ms": STATS_INTERVAL_MS}
    settings.update(config.consumer)
    settings.update({
        "bootstrap.servers": config.bootstrap_servers,
        "group.id": config.group_id,
        "client.id": config.member,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "stats_cb": telemetry.stats,
        "error_cb": _log_error,
    })
    if config.group_instance_id:
        settings["group.instance.id"] = config.group_instance_id
    return settings


def _log_error(err: KafkaError) -> None:
    log.warning("kafka: %s", err)


def _tps(partitions: Sequence[TopicPartition]) -> set[TP]:
    return {(p.topic, p.partition) for p in partitions}


@dataclass
class InFlight:
    batch_id: int
    records: Batch
    future: cf.Future[Outcome]
    started: float
    excluded: set[TP] = field(default_factory=set)
    """Partitions revoked or lost while the batch ran: their offsets are not committed."""

    def touches(self, partitions: set[TP]) -> bool:
        return not partitions.isdisjoint(self.records.ranges)


class Member:
    def __init__(self, config: RuntimeConfig, telemetry: Telemetry,
                 handle: Callable[[int, Batch], Outcome],
                 ready: Callable[[], bool] = lambda: True,
                 startup_check: Callable[[], BaseException | None] = lambda: None) -> None:
        """`handle` processes one batch (in the worker). No batch is handed over before `ready()`
        (Spark started), so a revoke never waits for Spark's start; `startup_check` reports a
        failed start so the member stops instead of idling."""
        self.config = config
        self.telemetry = telemetry
        self.handle = handle
        self.ready = ready
        self.startup_check = startup_check
        self.consumer = Consumer(consumer_settings(config, telemetry))
        self.worker = cf.ThreadPoolExecutor(1, thread_name_prefix="batch")
        self.buffer = BatchBuffer(config.batch)
        self.inflight: InFlight | None = None
        self.assignment: set[TP] = set()
        self.paused: set[TP] = set()
        self.stopping = threading.Event()
        self.failure: BaseException | None = None
        self.batch_seq = 0
        self.revoke_wait_s = max(1.0, 0.8 * config.max_poll_interval_ms / 1000.0)
        self.hold_unpaused_s = min(HOLD_UNPAUSED_S, config.max_poll_interval_ms / 4000.0)

    def request_stop(self) -> None:
        self.stopping.set()

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> int:
        """Poll until asked to stop or a batch fails for good; return the exit code."""
        self.consumer.subscribe(self.config.subscription(), on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_lost)
        stop_began: float | None = None
        try:
            while True:
                self._finish_inflight(hand_over=True)
                if self.failure is None:
                    self.failure = self.startup_check()
                if self.failure is not None:
                    break
                now = time.monotonic()
                if self.stopping.is_set():
                    if stop_began is None:
                        stop_began = now
                        self.telemetry.draining()
                        log.info("stop requested: finishing the batch in flight")
                    if self.inflight is None:
                        break
                elif self.inflight is None and self.buffer.due(now) and self.ready():
                    self._submit(now)
                self._poll(now)
        finally:
            self._close()
        if stop_began is not None:
            log.info("shutdown took %.2f s", time.monotonic() - stop_began)
        if self.failure is not None:
            log.error("member stops: %s", self.failure)
            return 1
        return 0

    def _poll(self, now: float) -> None:
        hold = self.stopping.is_set() or self.buffer.full()
        flight = self.inflight
        if hold and not self.stopping.is_set() and flight is not None \
                and now - flight.started < self.hold_unpaused_s:
            # A short wait for the worker without polling: pausing would throw away what
            # librdkafka has prefetched, and the batch usually ends well before this.
            cf.wait([flight.future], timeout=min(BUSY_POLL_S,
                                                 flight.started + self.hold_unpaused_s - now))
            return
        self._set_paused(hold)
        if hold:
            if flight is not None:
                cf.wait([flight.future], timeout=BUSY_POLL_S)
            messages = self.consumer.consume(1, 0)
        else:
            busy = self.inflight is not None or self.buffer.due(now)
            wait = BUSY_POLL_S if busy else IDLE_POLL_S
            left = self.buffer.wait_left(now)
            if left:
                wait = min(wait, left)
            messages = self.consumer.consume(self.buffer.room(), wait)
        after = time.monotonic()
        self.telemetry.polled(after)
        good = messages
        errors = [e for m in messages if (e := m.error()) is not None]
        if errors:
            good = [m for m in messages if m.error() is None]
            for err in errors:
                if err.fatal():
                    self.failure = KafkaException(err)
                else:
                    log.warning("consumer: %s", err)
        if good and not self.stopping.is_set():
            self.buffer.add(good, after)

    def _set_paused(self, hold: bool) -> None:
        if hold:
            todo = self.assignment - self.paused
            if todo:
                self.consumer.pause([TopicPartition(t, p) for t, p in sorted(todo)])
                self.paused |= todo
        elif self.paused:
            self.consumer.resume([TopicPartition(t, p) for t, p in sorted(self.paused)])
            self.paused.clear()

    def _submit(self, now: float) -> None:
        records = self.buffer.take(now)
        self.batch_seq += 1
        future = self.worker.submit(self.handle, self.batch_seq, records)
        self.inflight = InFlight(self.batch_seq, records, future, now)

    def _finish_inflight(self, hand_over: bool = False) -> None:
        """If the batch in flight is done: commit it, or record why the member must stop.

        With `hand_over` (the loop, not a rebalance callback) the next batch, when due, goes to
        the worker before the synchronous commit, so Spark does not wait for the broker's answer.
        A crash in between leaves both batches uncommitted: they are read again (at-least-once).
        """
        flight = self.inflight
        if flight is None or not flight.future.done():
            return
        self.inflight = None
        try:
            outcome = flight.future.result()
        except Exception as exc:
            self.failure = exc
            return
        processed = next_offsets(flight.records)
        offsets = {tp: o for tp, o in processed.items()
                   if tp in self.assignment and tp not in flight.excluded}
        now = time.monotonic()
        if hand_over and not self.stopping.is_set() and self.buffer.due(now) and self.ready():
            self._submit(now)
        if offsets:
            self._commit(offsets)
        if len(offsets) < len(processed):
            log.info("batch %d: not committing partitions revoked or lost while it ran",
                     flight.batch_id)
        first = self.telemetry.batch_done(outcome.records, outcome.seconds, time.monotonic())
        if outcome.dead_lettered:
            self.telemetry.dead_letters(outcome.dead_lettered)
        if first is not None:
            log.info("first batch processed %.3f s after process start", first)

    def _commit(self, offsets: dict[TP, int]) -> None:
        began = time.monotonic()
        try:
            self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in
                                          sorted(offsets.items())], asynchronous=False)
        except KafkaException as exc:
            log.warning("commit of %s failed (the records will be processed again): %s",
                        offsets, exc)
            return
        self.telemetry.committed(time.monotonic() - began)

    def _close(self) -> None:
        flight = self.inflight
        if flight is not None and not flight.future.done():
            log.warning("leaving batch %d unfinished and uncommitted", flight.batch_id)
            self.inflight = None
        self.worker.shutdown(wait=False, cancel_futures=True)
        self.consumer.close()

    # -- rebalance callbacks (run inside consume(), on this thread) ------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        tps = _tps(partitions)
        self.assignment |= tps
        self.paused -= tps
        first = self.telemetry.assigned(tps, time.monotonic(), consumer.memberid() or "")
        log.info("assigned %s", sorted(tps))
        if first is not None:
            log.info("first assignment %.3f s after process start", first)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Finish the batch in flight (bounded by the rebalance timeout) and commit it."""
        tps = _tps(partitions)
        self.telemetry.revoked(tps, lost=False)
        log.info("revoked %s", sorted(tps))
        flight = self.inflight
        if flight is not None and flight.touches(tps):
            cf.wait([flight.future], timeout=self.revoke_wait_s)
            if flight.future.done():
                self._finish_inflight()
            else:
                log.warning("batch %d still running at revoke; its offsets will not be "
                            "committed", flight.batch_id)
                flight.excluded |= tps
        self._forget(tps)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The partitions already belong to others: abandon their work, commit nothing."""
        tps = _tps(partitions)
        self.telemetry.revoked(tps, lost=True)
        log.warning("lost %s", sorted(tps))
        if self.inflight is not None:
            self.inflight.excluded |= tps
        self._forget(tps)

    def _forget(self, tps: set[TP]) -> None:
        self.assignment -= tps
        self.paused -= tps
        dropped = self.buffer.drop(tps, time.monotonic())
        if dropped:
            log.info("dropped %d polled records of partitions no longer assigned", dropped)
