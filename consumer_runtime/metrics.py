"""What the member knows about itself: the /status document (its type, the contract's
`member_contract.status.MemberStatus`) and what its Prometheus series count (the series
themselves: consumer_runtime/series.py).

`Telemetry` is fed by the poll loop and the batch worker; every method that depends on time takes
`now` (monotonic seconds), so the unit tests drive it without a clock.
"""

from __future__ import annotations

import json
import math
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from consumer_runtime.records import TopicPartition
from consumer_runtime.series import Series
from consumer_runtime.timeline import Span
from member_contract.status import MemberStatus, StaticLeave, Throughput
from member_contract.status import Waiting as WaitingStatus

READY_POLL_AGE = 10.0
THROUGHPUT_WINDOW_S = 60.0
"""The window of /status `throughput` (records per second, busy share)."""
THROUGHPUT_MIN_S = 10.0
"""A process holding partitions for less than this reports no throughput yet."""
FULL_BATCH = 0.8
"""A batch of at least this share of `batch.maxRecords` is full: the member was at capacity."""
CAPACITY_MEMORY_S = 900.0
"""How long full batches are remembered for `capacityRecordsPerSecond`."""


class Telemetry:
    """Counters, gauges and the state behind /healthz, /readyz and /status (thread-safe)."""

    def __init__(self, *, namespace: str, group: str, member: str, instance_id: str | None,
                 session_timeout_s: float | None, max_poll_interval_s: float,
                 process_start: float, started_at: float, age_at_start: float = 0.0,
                 standby: bool = False, max_records: int | None = None) -> None:
        """`process_start` is unix time; `started_at` a monotonic reading taken when the process
        was already `age_at_start` seconds old. `session_timeout_s` is None with group.protocol
        consumer (KIP-848), where the broker owns the session timeout. `standby`: the process
        waits for POST /activate before it joins the group (a warm handoff's replacement)."""
        self.ids = {"namespace": namespace, "group": group, "member": member}
        self.instance_id = instance_id
        self.max_poll_interval_s = max_poll_interval_s
        self.process_start = process_start
        self.started_at = started_at
        self.age_at_start = age_at_start
        self._lock = threading.Lock()
        self.member_id = ""
        self.assignment: set[TopicPartition] = set()
        self.holds_assignment = False
        # Spark (or whatever processes batches) is up: until then the member holds its
        # partitions in the group but cannot process, so it is not ready to serve.
        self.processing_ready = False
        self.assigns = self.revokes = self.lost = self.rebalances = self.takeovers = 0
        self.generation: int | None = None
        """The group generation of the last assignment (`generation` in /status)."""
        self.held: set[TopicPartition] = set()
        """The assignment as the last assign callback left it (a revoke does not shrink it):
        what a rebalance's assign is compared with to tell a takeover."""
        self.first_assignment: float | None = None
        self.instance_release_wait_s: float | None = None
        """Seconds the process waited, before its first assignment, for the broker to release
        its instance id from an earlier process's registration (UnreleasedInstanceId)."""
        self.first_batch: float | None = None
        self.records_processed = self.batches_processed = self.dead_lettered = 0
        self.batch_seconds: deque[float] = deque(maxlen=1000)
        self.batch_seconds_max = 0.0
        self.recent_batches: deque[tuple[float, int, float]] = deque()
        """(end, records, seconds) of the batches of the last `THROUGHPUT_WINDOW_S`."""
        self.full_batches: deque[tuple[float, int, float]] = deque()
        """(end, records, seconds) of the batches of the last `CAPACITY_MEMORY_S` that were
        full (at least `FULL_BATCH` of `max_records`): what the member does at capacity."""
        self.max_records = max_records
        self.assigned_since: float | None = None
        """Monotonic time of this process's first assignment."""
        self.processing_since: float | None = None
        """Monotonic time Spark was up (warm) in this process: the throughput window starts at
        the later of the two (a member that holds partitions while Spark starts processes
        nothing, and that is not its throughput)."""
        self.last_poll = started_at
        self.state = "standby" if standby else "starting"
        self.standby: str | None = "warming" if standby else None
        """A standby process: "warming" until Spark is up and warm, then "ready"; None once
        activated (or when it never was one)."""
        self.standby_ready_s: float | None = None
        self.activated_s: float | None = None
        self.consumer_made_s: float | None = None
        """Seconds from process start until its consumer was made (it could join from then)."""
        self.last_batch_s: float | None = None
        self.waiting: Waiting | None = None
        self.leaving = False
        self.rejoins = 0
        self.drained_at: float | None = None
        """Unix time the consumer closed for a drain (None: not drained now)."""
        self.drain_hold_s: float | None = None
        self.drain_resubscribes = 0
        """Drains not followed by a replacement within their hold: subscribed again."""
        self.static_leave: StaticLeave | None = None
        """The last static leave this process confirmed itself (KIP-848; `staticleave`)."""
        self.last_fetch_s: float | None = None
        """Seconds from process start to the last poll that returned records."""
        self.last_consumer_poll_s: float | None = None
        """Seconds from process start to the last call of the consumer's poll, whatever it
        returned (`last_poll` also moves while the loop has no consumer to call)."""
        self.batch_in_flight: tuple[float, int] | None = None
        """(seconds from process start, records) of the batch the worker is processing now."""
        self.paused_with_work = False
        """The partitions are paused because the buffer is full while a batch is processed or
        waits for the worker (not for a drain, a leave or a stop): polls return nothing on
        purpose."""
        self.committed_offsets: dict[TopicPartition, int] = {}
        """The offset this process last committed on each assigned partition."""
        self.lag: dict[TopicPartition, int] = {}
        """Each assigned partition's lag from the last statistics (end offset minus the
        committed offset): `/status` reports it, so the operator reads lag from the members
        instead of asking the brokers."""
        self.series = Series(self.ids, session_timeout_s, max_poll_interval_s, process_start)
        self.registry = self.series.registry

    # -- fed by the poll loop ------------------------------------------------------------------

    def polled(self, now: float, records: int = 0) -> None:
        """A poll of the consumer that returned `records` records."""
        with self._lock:
            self._tick(now)
            self.last_consumer_poll_s = self._since_start(now)
            if records:
                self.last_fetch_s = self.last_consumer_poll_s

    def ticked(self, now: float) -> None:
        """The loop went round without a consumer to poll (standby, drained, waiting to join
        again, left): alive for /healthz; `lastPollAt` stays where the last poll left it."""
        with self._lock:
            self._tick(now)

    def _tick(self, now: float) -> None:
        self.series.poll_s.observe(max(0.0, now - self.last_poll))
        self.last_poll = now

    def batch_started(self, now: float, records: int) -> None:
        """The worker took a batch of `records` records (once per batch, never per record)."""
        with self._lock:
            self.batch_in_flight = (self._since_start(now), records)

    def batch_ended(self) -> None:
        """The worker is done with its batch (processed, failed, or abandoned at the close)."""
        with self._lock:
            self.batch_in_flight = None

    def paused_for_work(self, paused: bool) -> None:
        """The poll loop paused its partitions for the work it holds, or resumed them (called
        on the change only)."""
        with self._lock:
            self.paused_with_work = paused

    def assigned(self, partitions: Iterable[TopicPartition], now: float,
                 member_id: str, *, rebalance: bool = True,
                 generation: int | None = None) -> float | None:
        """Count an assign callback; return seconds since process start if it is the first.
        `rebalance=False`: not a rebalance of the group's (the empty assignment a leaving
        KIP-848 member gets: the others' assigns count the one rebalance its leave makes).
        A rebalance that gives the member a partition it did not hold is also a takeover: a
        member left, crashed or was evicted (or partitions were added). A member that only
        gives partitions up (another one joined: the group forming, scaling up) takes over
        nothing."""
        partitions = set(partitions)
        with self._lock:
            self.assigns += 1
            self.series.events["assign"].inc()
            self.member_id = member_id
            self.generation = generation
            first = None
            if self.first_assignment is None:
                first = self.first_assignment = self._since_start(now)
                self.assigned_since = now
                self.series.startup("first_assignment", first)
            elif rebalance:
                self.rebalances += 1
                self.series.rebalances.inc()
                if partitions - self.held:
                    self.takeovers += 1
                    self.series.takeovers.inc()
            self.assignment |= partitions
            self.held = set(self.assignment)
            self.holds_assignment = True
            self.state = "running" if self.state == "starting" else self.state
            self.series.assigned.set(len(self.assignment))
            return first

    def revoked(self, partitions: Iterable[TopicPartition], *, lost: bool) -> None:
        with self._lock:
            if lost:
                self.lost += 1
            else:
                self.revokes += 1
            self.series.events["lost" if lost else "revoke"].inc()
            gone = set(partitions)
            self.assignment -= gone
            self.holds_assignment = False
            self.series.assigned.set(len(self.assignment))
            self.series.forget_lag(gone)
            for tp in gone:
                self.lag.pop(tp, None)
                self.committed_offsets.pop(tp, None)

    def committed(self, seconds: float, offsets: Mapping[TopicPartition, int] | None = None
                  ) -> None:
        """A synchronous commit that took `seconds`, of `offsets` (the next offset to read)."""
        self.series.commit_s.observe(seconds)
        if offsets:
            with self._lock:
                self.committed_offsets.update(offsets)

    def draining(self) -> None:
        with self._lock:
            self.state = "draining"

    def drained(self, wall: float, hold_s: float) -> None:
        """The consumer closed for a drain at unix time `wall`: out of the group, partitions
        with the broker for the replacement, process up."""
        with self._lock:
            self.state = "drained"
            self.drained_at = round(wall, 3)
            self.drain_hold_s = hold_s
            self.member_id = ""
            self.assignment.clear()
            self.lag.clear()
            self.holds_assignment = False
            self.series.assigned.set(0)

    def static_leave_confirmed(self, result: StaticLeave) -> None:
        """The member's own static leave after a close (`staticleave.LeaveResult.as_status`)."""
        self.series.static_leave(result["outcome"])
        with self._lock:
            self.static_leave = result.copy()

    def predecessor_released(self, outcome: str) -> None:
        """The static leave this process sent at its start for an earlier process's member id
        (consumer_runtime/predecessor.py), by its outcome (one of `LEAVE_OUTCOMES`)."""
        self.series.predecessor_release(outcome)

    def undrained(self) -> None:
        """A drained process not replaced within its hold subscribes again."""
        with self._lock:
            self.state = "starting"
            self.drained_at = self.drain_hold_s = None
            self.drain_resubscribes += 1

    def drained_before_restart(self, drained_at: float, last_batch_at: float | None) -> None:
        """A restart of a container whose process was drained and then saw its replacement hold
        the instance id (consumer_runtime/main.py): out of the group for good, /status showing
        that process's drain (no hold: it never subscribes again)."""
        with self._lock:
            self.state = "drained"
            self.drained_at = drained_at
            self.drain_hold_s = None
            self.last_batch_s = (None if last_batch_at is None
                                 else last_batch_at - self.process_start)

    def wait_began(self, reason: str, message: str, now: float) -> None:
        """The member cannot get into the group yet, for `reason` (a word, e.g.
        UnreleasedInstanceId); it keeps trying. Not ready meanwhile."""
        with self._lock:
            if self.waiting is None or self.waiting.reason != reason:
                self.waiting = Waiting(reason, message, since=now)
            self.waiting.attempts += 1

    def wait_over(self, now: float | None = None) -> None:
        """The member is in the group. Its first wait for its instance id (the one in its start:
        it is ended by the first assignment) is kept as `instance_release_wait_s`; `now` is on
        the clock of `wait_began`."""
        with self._lock:
            waited = self.waiting
            if (now is not None and waited is not None and waited.reason == UNRELEASED_WAIT
                    and self.instance_release_wait_s is None):
                self.instance_release_wait_s = round(max(0.0, now - waited.since), 3)
            self.waiting = None

    def leave_accepted(self) -> None:
        with self._lock:
            self.leaving = True

    def left(self) -> None:
        """Out of the group for good (after a leave): no member id, no partitions."""
        with self._lock:
            self.state = "left"
            self.member_id = ""
            self.assignment.clear()
            self.lag.clear()
            self.committed_offsets.clear()
            self.holds_assignment = False
            self.series.assigned.set(0)

    def consumer_made(self, now: float) -> None:
        with self._lock:
            self.consumer_made_s = self._since_start(now)

    def became_standby_ready(self, now: float) -> None:
        """A standby process has Spark up and warm: activation costs only the join now."""
        with self._lock:
            if self.standby != "warming":
                return
            self.standby = "ready"
            self.standby_ready_s = self._since_start(now)
            self.series.startup("standby_ready", self.standby_ready_s)

    def activated(self, now: float) -> None:
        """A standby process was told to join the group."""
        with self._lock:
            self.standby = None
            self.state = "starting" if self.state == "standby" else self.state
            self.activated_s = self._since_start(now)
            self.series.startup("activated", self.activated_s)

    def control_refused(self, action: str, reason: str) -> None:
        """A POST refused for want of the operator's token (`action` "other" for a path that
        is no request)."""
        self.series.refused(action, reason)

    def rejoined(self) -> None:
        with self._lock:
            self.rejoins += 1

    # -- fed by the batch worker ---------------------------------------------------------------

    def batch_done(self, records: int, seconds: float, now: float) -> float | None:
        """Count a committed batch; return seconds since process start if it is the first."""
        with self._lock:
            self.records_processed += records
            self.batches_processed += 1
            self.batch_seconds.append(seconds)
            self.batch_seconds_max = max(self.batch_seconds_max, seconds)
            self.series.records.inc(records)
            self.series.batches.inc()
            self.series.batch_s.observe(seconds)
            self.last_batch_s = self._since_start(now)
            self.recent_batches.append((now, records, seconds))
            if self.max_records and records >= FULL_BATCH * self.max_records:
                self.full_batches.append((now, records, seconds))
            self._forget_batches(now)
            first = None
            if self.first_batch is None:
                first = self.first_batch = self._since_start(now)
                self.series.startup("first_batch", first)
            return first

    def stage(self, span: Span) -> None:
        """A timed stage of the poll thread or the worker (a Timeline's `on_span`)."""
        self.series.stage(span)

    def dead_letters(self, count: int) -> None:
        with self._lock:
            self.dead_lettered += count
            self.series.dead.inc(count)

    def stats(self, payload: str) -> None:
        """Take librdkafka statistics (JSON): per-partition consumer_lag."""
        data = json.loads(payload)
        with self._lock:
            for topic, tdata in data.get("topics", {}).items():
                for part, pdata in tdata.get("partitions", {}).items():
                    tp = (topic, int(part))
                    lag = pdata.get("consumer_lag", -1)
                    if tp[1] < 0 or tp not in self.assignment or lag < 0:
                        continue
                    self.series.lag(tp, lag)
                    self.lag[tp] = int(lag)

    # -- read by the HTTP endpoints ------------------------------------------------------------

    def healthy(self, now: float) -> bool:
        return now - self.last_poll <= self.max_poll_interval_s

    def spark_started(self, ok: bool, now: float) -> None:
        """Spark is up and warm (`ok`), or failed to start."""
        with self._lock:
            self.processing_ready = ok
            self.processing_since = now if ok else None

    def ready(self, now: float) -> bool:
        """Serving: holds its assignment, polled recently, and can process batches."""
        return (self.holds_assignment and self.processing_ready and self.waiting is None
                and not self.leaving and now - self.last_poll <= READY_POLL_AGE)

    def _forget_batches(self, now: float) -> None:
        while self.recent_batches and self.recent_batches[0][0] < now - THROUGHPUT_WINDOW_S:
            self.recent_batches.popleft()
        while self.full_batches and self.full_batches[0][0] < now - CAPACITY_MEMORY_S:
            self.full_batches.popleft()

    def throughput(self, now: float) -> Throughput | None:
        """Records per second processed and the share of time the batch worker was busy, over
        the last `THROUGHPUT_WINDOW_S` (shorter while the process is younger; None before
        `THROUGHPUT_MIN_S` of holding partitions): the load the operator's autoscaler reads
        (busy 1.0 is a member at capacity). The window starts once the process both held
        partitions and had Spark up. `capacityRecordsPerSecond`: records per second of
        batch time of the full batches of the last `CAPACITY_MEMORY_S` (None without one): a
        batch's fixed cost (a Spark job's start) makes records per busy second of small batches
        understate what the member can do. Call with the lock held."""
        if (self.assigned_since is None or self.processing_since is None
                or not self.holds_assignment):
            return None
        span = min(THROUGHPUT_WINDOW_S, now - max(self.assigned_since, self.processing_since))
        if span < THROUGHPUT_MIN_S:
            return None
        self._forget_batches(now)
        records = sum(r for _, r, _ in self.recent_batches)
        busy = sum(min(s, max(0.0, end - (now - span))) for end, _, s in self.recent_batches)
        full_seconds = sum(s for _, _, s in self.full_batches)
        capacity = (sum(r for _, r, _ in self.full_batches) / full_seconds
                    if full_seconds > 0 else None)
        return {"recordsPerSecond": round(records / span, 3),
                "busyRatio": round(min(1.0, busy / span), 4), "windowSeconds": round(span, 1),
                "capacityRecordsPerSecond": None if capacity is None else round(capacity, 3)}

    def status(self, now: float) -> MemberStatus:
        """/status: every key of `MemberStatus` (mypy holds this literal to it)."""
        with self._lock:
            return {
                "instanceId": self.instance_id,
                "memberId": self.member_id,
                "groupId": self.ids["group"],
                "assignment": [(t, p) for t, p in sorted(self.assignment)],
                "lag": [(t, p, self.lag[(t, p)]) for t, p in sorted(self.assignment)
                        if (t, p) in self.lag],
                "committed": [(t, p, self.committed_offsets[(t, p)])
                              for t, p in sorted(self.assignment)
                              if (t, p) in self.committed_offsets],
                "lastFetchAt": self._wall(self.last_fetch_s),
                "lastPollAt": self._wall(self.last_consumer_poll_s),
                "batchInFlight": (None if self.batch_in_flight is None else
                                  {"startedAt": self._wall(self.batch_in_flight[0]),
                                   "records": self.batch_in_flight[1]}),
                "pausedWithWork": self.paused_with_work,
                "rebalances": self.rebalances,
                "takeovers": self.takeovers,
                "assigns": self.assigns,
                "revokes": self.revokes,
                "lost": self.lost,
                "generation": self.generation,
                "startupSeconds": {"firstAssignment": self.first_assignment,
                                   "firstBatch": self.first_batch,
                                   "consumerMade": self.consumer_made_s,
                                   "standbyReady": self.standby_ready_s,
                                   "activated": self.activated_s,
                                   "instanceReleaseWait": self.instance_release_wait_s},
                "lastBatchAt": self.last_batch_at(),
                "standby": self.standby,
                "processStart": self.process_start,
                "batchSecondsMax": self.batch_seconds_max,
                "batchSecondsP99": p99(self.batch_seconds),
                "recordsProcessed": self.records_processed,
                "throughput": self.throughput(now),
                "batchesProcessed": self.batches_processed,
                "deadLettered": self.dead_lettered,
                "lastPollAgeSeconds": max(0.0, now - self.last_poll),
                "state": self.state,
                "processingReady": self.processing_ready,
                "waiting": None if self.waiting is None else self.waiting.to_status(now),
                "leaving": self.leaving,
                "rejoins": self.rejoins,
                "drainedAt": self.drained_at,
                "drainHoldSeconds": self.drain_hold_s,
                "drainResubscribes": self.drain_resubscribes,
                "staticLeave": self.static_leave,
            }

    def last_batch_at(self) -> float | None:
        """When the last batch ended, unix seconds to the millisecond; None before the first."""
        return self._wall(self.last_batch_s)

    def _wall(self, since_start: float | None) -> float | None:
        """Seconds from process start as unix seconds to the millisecond (None stays None)."""
        return None if since_start is None else round(self.process_start + since_start, 3)

    def _since_start(self, now: float) -> float:
        return round(now - self.started_at + self.age_at_start, 3)


UNRELEASED_WAIT = "UnreleasedInstanceId"
"""The `waiting.reason` of a wait for the broker to release the instance id
(`consumer_runtime.membership`)."""


@dataclass
class Waiting:
    """Why the member is not in the group yet although it keeps trying (/status `waiting`)."""

    reason: str
    message: str
    since: float
    attempts: int = 0

    def to_status(self, now: float) -> WaitingStatus:
        return {"reason": self.reason, "message": self.message,
                "sinceSeconds": round(max(0.0, now - self.since), 3), "attempts": self.attempts}


def p99(values: Iterable[float]) -> float | None:
    """The 99th percentile (nearest rank) of `values`, None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]
