"""The group's rebalances as the poll loop (consumer_runtime/member.py) takes them: librdkafka's
rebalance callbacks, which run inside `consume()` on the loop's thread, as the mixin
`Rebalancing` that `Member` inherits.

- assigned (`_on_assign`): the partitions join the assignment and the member is in the group
  (`joined`); it records its member id (`Leaving._entered`) and tells /status, where the
  assignment is a rebalance unless it is the member's return after a drain (`returning`) or
  after a leave; a join the broker refused before is over, and so is a rejoin asked for;
- revoked (`_on_revoke`): the batch in flight that holds records of them is finished and
  committed, waited for at most `revoke_wait_s` (a share of `max.poll.interval.ms`); a batch
  still running then commits nothing for them (`InFlight.excluded`);
- lost (`_on_lost`): they already belong to others: the batch in flight commits nothing for
  them;
- either way (`_forget`): paused ones are resumed first (librdkafka keeps an application's
  pause across a revoke and a later assign of the same partition), and the records polled for
  them are dropped from the buffer (a staged batch that changed is prepared again).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaException, TopicPartition

from consumer_runtime.buffer import BatchBuffer
from consumer_runtime.config import RuntimeConfig
from consumer_runtime.inflight import InFlight
from consumer_runtime.membership import generation_of
from consumer_runtime.metrics import Telemetry
from consumer_runtime.records import Batch
from consumer_runtime.records import TopicPartition as TP
from consumer_runtime.steering import Requests

log = logging.getLogger(__name__)


def _tps(partitions: Sequence[TopicPartition]) -> set[TP]:
    return {(p.topic, p.partition) for p in partitions}


class Rebalancing:
    """The poll loop's rebalance callbacks; `Member` inherits them and sets the loop's state they
    share (below) in its constructor, `Leaving` the state of a leave and a refused join."""

    config: RuntimeConfig
    telemetry: Telemetry
    requests: Requests
    clock: Callable[[], float]
    consumer: Consumer | None
    buffer: BatchBuffer
    inflight: InFlight | None
    assignment: set[TP]
    paused: set[TP]
    joined: bool
    assigned_at: float | None
    revoke_wait_s: float
    prepare: Callable[[int, Batch], object] | None
    batch_seq: int
    left: bool
    returning: bool
    join_refused_at: float | None
    join_attempts: int

    if TYPE_CHECKING:  # the loop's, in member.Member, and the leave's, in leaving.Leaving
        def _finish_inflight(self, hand_over: bool = False) -> None: ...
        def _entered(self, member_id: str) -> None: ...

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        tps = _tps(partitions)
        self.assignment |= tps
        self.paused -= tps
        self.joined = True
        self._entered(consumer.memberid() or "")
        self.assigned_at = self.clock()
        self.buffer.catch_up(self.assigned_at)
        first = self.telemetry.assigned(tps, self.clock(), consumer.memberid() or "",
                                        rebalance=not self.left and not self.returning,
                                        generation=generation_of(consumer))
        self.returning = False
        log.info("assigned %s", sorted(tps))
        if first is not None:
            log.info("first assignment %.3f s after process start", first)
        if self.join_refused_at is not None:
            log.info("in the group after waiting %.1f s for the broker to release instance id "
                     "%s (%d refused tries)", self.clock() - self.join_refused_at,
                     self.config.group_instance_id, self.join_attempts)
            self.join_refused_at, self.join_attempts = None, 0
            self.telemetry.wait_over(self.clock())
        if self.requests.rejoining and not self.left:
            with self.requests.lock:
                self.requests.rejoining = False
            self.telemetry.rejoined()
            log.info("rejoined group %s", self.config.group_id)

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

    def _on_lost(self, consumer: Consumer | None, partitions: list[TopicPartition]) -> None:
        """The partitions already belong to others: abandon their work, commit nothing."""
        tps = _tps(partitions)
        self.telemetry.revoked(tps, lost=True)
        log.warning("lost %s", sorted(tps))
        if self.inflight is not None:
            self.inflight.excluded |= tps
        self._forget(tps)

    def _forget(self, tps: set[TP]) -> None:
        paused = self.paused & tps
        if paused and self.consumer is not None:
            # librdkafka keeps an application's pause across a revoke and a later assign of the
            # same partition (only resume() clears it): resume now, or it never fetches again.
            try:
                self.consumer.resume([TopicPartition(t, p) for t, p in sorted(paused)])
            except KafkaException as exc:
                log.info("resuming %s before they go: %s", sorted(paused), exc)
        self.assignment -= tps
        self.paused -= tps
        self.joined = bool(self.assignment)
        staged = self.buffer.staged
        dropped = self.buffer.drop(tps, self.clock())
        if self.prepare is not None and self.buffer.staged is not None \
                and self.buffer.staged is not staged:
            self.prepare(self.batch_seq + 1, self.buffer.staged)
        if dropped:
            log.info("dropped %d polled records of partitions no longer assigned", dropped)
