"""The poll loop: a static member that gathers batches, hands them to a worker, commits after.

One batch is processed at a time, in a worker thread, while this loop keeps calling the consumer:
it gathers the next batch meanwhile, and the one after it (buffer.DEPTH), and once both are full,
waits up to HOLD_UNPAUSED_S for the worker, then pauses the assigned partitions and goes on polling
(which fetches nothing but serves callbacks and keeps `max.poll.interval.ms` satisfied) until the
worker is done. Then the loop hands over the next batch if it is due, commits the finished batch's
offsets synchronously and resumes the partitions. All consumer calls are on this thread; stages
are timed (timeline.py).

The operator steers the loop through its requests (stop, leave, rejoin, drain and, for a standby,
activate), each carried out only between batches, after the batch in flight is committed, with the
partitions paused (consumer_runtime/steering.py). The ways out of the group and back in (the leave,
the rejoin, the drain and its hold, a KIP-848 member's static leave and its release of a crashed
predecessor's member id, a join the broker refuses for now) are the mixin `Leaving`
(consumer_runtime/leaving.py) that `Member` inherits. A drained process whose replacement holds its
instance id ends the loop (`replaced`); main.py leaves word for a restart to stay out.

The group's rebalances reach the loop inside `consume()`, as librdkafka's callbacks: the
partitions assigned, revoked or lost, and what becomes of the batch in flight (`InFlight`,
consumer_runtime/inflight.py) when its partitions go, are the mixin `Rebalancing`
(consumer_runtime/rebalancing.py) that `Member` inherits too.

The stall detector's needs are reported per batch and per change, never per record: the batch in
flight (`Telemetry.batch_started`), the partitions paused for the work held
(`Telemetry.paused_for_work`), and every poll (`lastPollAt`). Time is the loop's `clock` and its
idle waits are `rest`, both arguments, so the unit tests (tests/unit/runtime/test_member.py) drive
the lifecycle with a scripted consumer.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from consumer_runtime.buffer import BatchBuffer
from consumer_runtime.config import RuntimeConfig
from consumer_runtime.inflight import InFlight
from consumer_runtime.leaving import BUSY_POLL_S, Leaving
from consumer_runtime.membership import (
    consumer_settings,
    fetched_all,
    is_fatal,
    is_unreleased_instance_id,
)
from consumer_runtime.metrics import Telemetry
from consumer_runtime.predecessor import MemberIdFile
from consumer_runtime.processing import Outcome
from consumer_runtime.rebalancing import Rebalancing
from consumer_runtime.records import Batch, next_offsets
from consumer_runtime.records import TopicPartition as TP
from consumer_runtime.steering import DRAIN, LEAVE, REJOIN, STOP, Requests
from consumer_runtime.timeline import POLL, Timeline

log = logging.getLogger(__name__)
IDLE_POLL_S = 0.5
HANDOVER_POLL_S = 0.005
"""The longest a poll waits for records while the next batch waits for the worker."""
HOLD_UNPAUSED_S = 2.0
"""With the buffer full, how long the loop just waits for the worker before it pauses the
partitions and goes back to polling."""
CONSUME_MAX = 2_000
"""At most this many messages per consume() call. confluent-kafka builds the Python messages of a
call, and pyarrow converts them, each in one stretch that holds the GIL; in chunks of 2,000 the
worker's Python (py4j, pyspark's temporary-file write) gets the GIL between them. Measured in
paired runs against 10,000 and 100,000 per call: 5-10 % less Python CPU per record at 10k and
100k-record batches, rates within the run-to-run noise."""


def _log_error(err: KafkaError) -> None:
    log.warning("kafka: %s", err)


class Member(Rebalancing, Leaving):
    def __init__(self, config: RuntimeConfig, telemetry: Telemetry,
                 handle: Callable[[int, Batch], Outcome],
                 ready: Callable[[], bool] = lambda: True,
                 startup_check: Callable[[], BaseException | None] = lambda: None,
                 timeline: Timeline | None = None, clock: Callable[[], float] = time.monotonic,
                 rest: Callable[[float], object] | None = None,
                 prepare: Callable[[int, Batch], object] | None = None,
                 member_ids: MemberIdFile | None = None) -> None:
        """`handle` processes one batch (in the worker). No batch is handed over before `ready()`
        (Spark started), so a revoke never waits for Spark's start; `startup_check` reports a
        failed start so the member stops instead of idling. `timeline` times the loop's stages.
        `clock`: monotonic seconds; `rest(s)`: wait up to s seconds with nothing to do (by
        default until a stop request comes, at most s). `prepare(batch_id, batch)` is told of
        the next batch as soon as it is due while the worker is still busy (`_stage`), so it can
        start on it (Spark builds its DataFrame); `handle` then gets that very object.
        `member_ids`: a KIP-848 static member's record of its member id (`Leaving`)."""
        super().__init__(member_ids)
        self.config = config
        self.clock = clock
        self.timeline = timeline or Timeline()
        self.telemetry = telemetry
        self.handle = handle
        self.ready = ready
        self.prepare = prepare
        self.startup_check = startup_check
        self.consumer: Consumer | None = self._new_consumer()
        self.worker = cf.ThreadPoolExecutor(1, thread_name_prefix="batch")
        self.buffer = BatchBuffer(config.batch)
        self.inflight: InFlight | None = None
        self.assignment: set[TP] = set()
        self.paused: set[TP] = set()
        self.joined = False
        """In the group: assigned (possibly nothing) since the last revoke that left it empty."""
        self.requests = Requests(telemetry, config.standby)
        """The operator's requests, shared with the HTTP thread."""
        self.rest: Callable[[float], object] = rest or self.requests.stopping.wait
        self.paused_with_work = False
        """As last reported (`Telemetry.paused_for_work`)."""
        self.assigned_at: float | None = None
        """When partitions were last assigned, until the first records after it came."""
        self.failure: BaseException | None = None
        self.batch_seq = 0
        self.revoke_wait_s = max(1.0, 0.8 * config.max_poll_interval_ms / 1000.0)
        self.hold_unpaused_s = min(HOLD_UNPAUSED_S, config.max_poll_interval_ms / 4000.0)

    def _new_consumer(self) -> Consumer:
        return Consumer({**consumer_settings(self.config), "stats_cb": self.telemetry.stats,
                         "error_cb": _log_error})

    def request_stop(self) -> None:
        self.requests.stopping.set()

    def request(self, action: str) -> str | None:
        """An operator request, from the HTTP thread: None when taken, else why not
        (`Requests.take`)."""
        return self.requests.take(action, joined=self.joined, left=self.left)

    def drain(self, hold_s: float | None, wait_s: float) -> tuple[str | None, bool]:
        """POST /drain, from the HTTP thread (`Requests.take_drain`)."""
        return self.requests.take_drain(hold_s, wait_s)

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> int:
        """Poll until asked to stop or a batch fails for good; return the exit code."""
        if not self._stand_by():
            self._close()
            if self.failure is not None:
                log.error("member stops in standby: %s", self.failure)
                return 1
            log.info("stopped in standby, never in the group")
            return 0
        self._release_predecessor()
        self._subscribe()
        drain_began: float | None = None
        draining_for: str | None = None
        try:
            while True:
                self._finish_inflight(hand_over=True)
                if self.failure is None:
                    self.failure = self.startup_check()
                if self.failure is not None:
                    break
                now = self.clock()
                action = self.requests.action()
                if self.requests.drained.is_set():
                    if action == STOP:
                        break
                    self._hold_drained(now)
                    if self.replaced:
                        break
                    continue
                if action in (STOP, LEAVE, DRAIN) and action != draining_for:
                    drain_began, draining_for = drain_began or now, action
                    self.telemetry.draining()
                    self._warm_static_leave()
                    log.info("%s requested: finishing the batch in flight", action)
                if action is None:
                    if self.inflight is None and self.buffer.due(now) and self.ready():
                        self._submit(now)
                elif self.inflight is None:
                    if action == REJOIN:
                        self._rejoin()
                    elif action == DRAIN:
                        if len(self.buffer) and self.ready():
                            # The records already fetched are processed now, not left for the
                            # replacement to fetch again: its first batch starts from where
                            # this one ended (the processing gap loses up to a batch's wait).
                            self._submit(now)
                            continue
                        self._drain(drain_began or now)
                        drain_began = draining_for = None
                        continue
                    else:
                        if action == LEAVE:
                            self._leave()
                        break
                if self.consumer is None:
                    self._wait_to_join(now)
                else:
                    self._poll(now)
        finally:
            self._close()
        if drain_began is not None:
            log.info("%s took %.2f s", "leave" if self.left else "shutdown",
                     self.clock() - drain_began)
        if self.failure is not None:
            log.error("member stops: %s", self.failure)
            return 1
        if self.left and not self.requests.stopping.is_set():
            # Out of the group for good. Exiting would get the container restarted (restart
            # policy Always) and the new process would join again; the pod's deletion ends it.
            log.info("out of the group; waiting for SIGTERM")
            while not self.requests.stopping.wait(1.0):
                self.telemetry.ticked(self.clock())
        return 0

    def _stand_by(self) -> bool:
        """In standby, wait for activation while Spark starts: True once activated (at once for
        a process that is not a standby), False when stopped or Spark failed first."""
        if self.requests.activation.is_set():
            return True
        log.info("standby: starting Spark; joining group %s only when activated (POST /activate)",
                 self.config.group_id)
        while not self.requests.activation.is_set():
            now = self.clock()
            self.telemetry.ticked(now)
            self.failure = self.startup_check()
            if self.failure is not None or self.requests.stopping.is_set():
                return False
            if self.ready() and self.telemetry.standby == "warming":
                self.telemetry.became_standby_ready(now)
                log.info("standby ready %.3f s after process start: Spark is up and warm",
                         self.telemetry.standby_ready_s or 0.0)
            self.requests.activation.wait(BUSY_POLL_S)
        log.info("activated: joining group %s", self.config.group_id)
        return True

    def _subscribe(self, subscription: list[str] | None = None) -> None:
        assert self.consumer is not None
        self.consumer.subscribe(subscription or self.config.subscription(),
                                on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)

    def _poll(self, now: float) -> None:
        assert self.consumer is not None
        draining = self.requests.action() is not None
        hold = draining or self.buffer.full()
        flight = self.inflight
        if hold and not draining and flight is not None \
                and now - flight.started < self.hold_unpaused_s:
            # A short wait for the worker without polling: pausing would throw away what
            # librdkafka has prefetched, and the batch usually ends well before this.
            with self.timeline.span(POLL, "wait-worker", self.batch_seq + 1):
                cf.wait([flight.future], timeout=min(BUSY_POLL_S,
                                                     flight.started + self.hold_unpaused_s - now))
            return
        self._set_paused(hold)
        self._report_paused(hold and not draining and bool(self.paused))
        if hold:
            with self.timeline.span(POLL, "paused", self.batch_seq + 1):
                if flight is not None:
                    cf.wait([flight.future], timeout=BUSY_POLL_S)
                messages = self.consumer.consume(1, 0)
        else:
            # Not in the group yet (joining, activated, subscribed again): the assignment comes
            # inside a consume() call, which then goes on collecting until its timeout, so the
            # first records would wait for the rest of an idle poll (0.49 s measured).
            busy = (self.inflight is not None or self.buffer.due(now)
                    or self.buffer.catching_up(now) or not self.joined)
            wait = BUSY_POLL_S if busy else IDLE_POLL_S
            left = self.buffer.wait_left(now)
            if left:
                wait = min(wait, left)
            if self.inflight is not None and self.buffer.due(now):
                # The worker's next batch is ready: come back soon enough to hand it over when
                # the worker ends (a consume() that waits for records the fetcher has not
                # brought yet left the worker idle a fifth of the time at 10k batches).
                wait = min(wait, HANDOVER_POLL_S)
            with self.timeline.span(POLL, "consume", self.batch_seq + 1):
                messages = self.consumer.consume(min(self.buffer.room(), CONSUME_MAX), wait)
        after = self.clock()
        good = self._records(messages, after)
        self.telemetry.polled(after, len(good))
        if good and self.assigned_at is not None:
            log.info("first records after the assignment fetched in %.3f s",
                     after - self.assigned_at)
            self.assigned_at = None
        if good and self.requests.action() is None:
            with self.timeline.span(POLL, "convert", self.batch_seq + 1):
                self.buffer.add(good, after)
        if (self.buffer.catching_up(after) and not self.buffer.all_fetched
                and fetched_all(self.consumer, self.assignment)):
            self.buffer.fetched_all()
        self._stage(after)

    def _stage(self, now: float) -> None:
        """While the worker is busy, cut the next batch as soon as it is due and tell `prepare`,
        so its DataFrame is built while the batch before it runs (one batch in flight, one
        staged: commits stay in order, one after the other)."""
        if (self.prepare is None or self.inflight is None or self.requests.action() is not None
                or not self.ready()):
            return
        staged = self.buffer.stage(now)
        if staged is not None:
            self.prepare(self.batch_seq + 1, staged)

    def _records(self, messages: list[Message], now: float) -> list[Message]:
        """The records among `messages`; errors are logged, or end the consumer when fatal."""
        errors = [e for m in messages if (e := m.error()) is not None]
        if not errors:
            return messages
        for err in errors:
            if is_unreleased_instance_id(err):
                self._join_refused(err, now)
            elif is_fatal(err):
                self.failure = KafkaException(err)
            else:
                log.warning("consumer: %s", err)
        return [m for m in messages if m.error() is None]

    def _set_paused(self, hold: bool) -> None:
        assert self.consumer is not None
        if hold:
            todo = self.assignment - self.paused
            if todo:
                self.consumer.pause([TopicPartition(t, p) for t, p in sorted(todo)])
                self.paused |= todo
        elif self.paused:
            self.consumer.resume([TopicPartition(t, p) for t, p in sorted(self.paused)])
            self.paused.clear()

    def _report_paused(self, with_work: bool) -> None:
        """Tell /status whether the partitions are paused for the work held (on a change)."""
        if with_work != self.paused_with_work:
            self.paused_with_work = with_work
            self.telemetry.paused_for_work(with_work)

    def _submit(self, now: float) -> None:
        records = self.buffer.take(now)
        self.batch_seq += 1
        self.telemetry.batch_started(now, len(records))
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
        self.telemetry.batch_ended()
        try:
            outcome = flight.future.result()
        except Exception as exc:
            self.failure = exc
            return
        processed = next_offsets(flight.records)
        offsets = {tp: o for tp, o in processed.items()
                   if tp in self.assignment and tp not in flight.excluded}
        now = self.clock()
        if hand_over and self.requests.action() is None and self.buffer.due(now) and self.ready():
            self._submit(now)
        if offsets:
            self._commit(offsets, flight.batch_id)
        if len(offsets) < len(processed):
            log.info("batch %d: not committing partitions revoked or lost while it ran",
                     flight.batch_id)
        first = self.telemetry.batch_done(outcome.records, outcome.seconds, self.clock())
        if outcome.dead_lettered:
            self.telemetry.dead_letters(outcome.dead_lettered)
        if first is not None:
            log.info("first batch processed %.3f s after process start", first)

    def _commit(self, offsets: dict[TP, int], batch_id: int) -> None:
        assert self.consumer is not None  # offsets are only of assigned partitions
        began = self.clock()
        try:
            with self.timeline.span(POLL, "commit", batch_id):
                self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in
                                              sorted(offsets.items())], asynchronous=False)
        except KafkaException as exc:
            log.warning("commit of %s failed (the records will be processed again): %s",
                        offsets, exc)
            return
        self.telemetry.committed(self.clock() - began, offsets)

    def _close(self) -> None:
        flight = self.inflight
        if flight is not None and not flight.future.done():
            log.warning("leaving batch %d unfinished and uncommitted", flight.batch_id)
            self.inflight = None
            self.telemetry.batch_ended()
        self.worker.shutdown(wait=False, cancel_futures=True)
        self._close_consumer()
