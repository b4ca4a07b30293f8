"""Out of the group and back in: the poll loop's (consumer_runtime/member.py) steps for leaving,
rejoining, draining and a join the broker refuses, as the mixin `Leaving` that `Member` inherits.

membership.py says how a leave and a refused join work; these are the steps that carry them
out, each between batches, on the loop's thread:
- rejoin (`_rejoin`): leave the group and subscribe again with the same instance id, so that
  the group's assignment is computed anew;
- leave (`_leave`): give the partitions up at once, serve the consumer until the broker shows
  none of ours (`_wait_released`, at most LEAVE_CONFIRM_S), close;
- drain (`_drain`, `_hold_drained`): close the consumer the static way, hold, then end the run
  when the broker shows the replacement under the instance id (`replaced`), else subscribe
  again as the same static member (`returning`: that assignment is no rebalance);
- the close of a KIP-848 static member (`_close_consumer`): its static leave is confirmed with
  the coordinator (consumer_runtime/staticleave.py, kafka-python's client, imported when a leave
  or a drain first needs one), the client warmed while the batch in flight finishes;
- a join the broker refuses for now (UNRELEASED_INSTANCE_ID, `_join_refused`): give up the
  consumer and try a new one after a back-off (`_wait_to_join`);
- at the start of a KIP-848 static member, the release of the member id an earlier process of its
  pod recorded and left registered (`_release_predecessor`, consumer_runtime/predecessor.py),
  with the same static leave, so that the join is not refused in the first place; every
  assignment records the member id for the next process (`_entered`).

The broker's view of the group is `_group_view` (consumer_runtime/groupview.py), which the unit
tests (tests/unit/runtime/test_member.py) replace with a scripted one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from consumer_runtime.config import RuntimeConfig
from consumer_runtime.membership import (
    UNRELEASED,
    connection_settings,
    join_backoff,
    leave_subscription,
)
from consumer_runtime.metrics import Telemetry
from consumer_runtime.predecessor import RELEASE_S, MemberIdFile
from consumer_runtime.records import TopicPartition as TP
from consumer_runtime.steering import Requests
from member_contract import LEAVE_GONE, LEAVE_LEFT, LEAVE_TAKEN, LEAVE_UNCONFIRMED

if TYPE_CHECKING:  # kafka-python's clients, imported when a leave or a drain first needs one
    from consumer_runtime.groupview import GroupView
    from consumer_runtime.staticleave import LeaveResult, StaticLeave

log = logging.getLogger(__name__)
BUSY_POLL_S = 0.05
"""A poll's wait while something is due: the loop's (member.py) with work in flight or to hand
over, a leave's while it serves the consumer; a waiting process rests four of them at most."""
LEAVE_CONFIRM_S = 15.0
"""How long a leave waits for the broker to show the member without partitions before it closes
anyway (the partitions then move when the registration's session times out)."""
LEAVE_CHECK_S = 0.2
STATIC_LEAVE_CONFIRM_S = 20.0
"""How long a KIP-848 static member, its consumer closed, asks the coordinator to confirm its
static leave (`staticleave`): a killed broker's coordinators move within its broker session
timeout (broker.session.timeout.ms, 9 s by default), well within the pods' 30 s grace."""
DRAIN_CHECK_S = 0.5
"""Between two looks at the group, once a drained process's hold is over."""


def _log_leave(result: LeaveResult, instance_id: str) -> None:
    if result.outcome == LEAVE_LEFT:
        log.info("static leave confirmed by the coordinator in %.3f s (%d %s): instance id %s "
                 "waits for its replacement", result.seconds, result.tries,
                 "try" if result.tries == 1 else "tries", instance_id)
    elif result.outcome == LEAVE_UNCONFIRMED:
        log.warning("static leave not confirmed after %.1f s and %d tries (%s): a replacement "
                    "is refused until the broker's session for this member times out",
                    result.seconds, result.tries, result.detail or "no answer")
    else:
        log.info("static leave: instance id %s is %s (%s)", instance_id, result.outcome,
                 result.detail)


def _log_release(result: LeaveResult, member_id: str, instance_id: str) -> None:
    """One line on the release of an earlier process's member id (`_release_predecessor`)."""
    said = (f"member id {member_id} of an earlier process of this pod: static leave "
            f"{result.outcome} after {result.seconds:.3f} s and {result.tries} "
            f"{'try' if result.tries == 1 else 'tries'}")
    if result.outcome == LEAVE_LEFT:
        log.info("%s: instance id %s released; joining in its place, with its assignment",
                 said, instance_id)
    elif result.outcome in (LEAVE_GONE, LEAVE_TAKEN):
        log.info("%s (%s): %s; nothing released, joining as usual", said, result.detail,
                 "the group does not know it" if result.outcome == LEAVE_GONE
                 else f"another member holds instance id {instance_id}")
    else:
        log.warning("%s (%s): joining as usual, refused until its session times out if it is "
                    "still registered", said, result.detail or "no answer")


class Leaving:
    """The poll loop's ways out of the group and back in, and their state; `Member` inherits
    them and sets the loop's state they share (below) in its constructor."""

    config: RuntimeConfig
    telemetry: Telemetry
    requests: Requests
    clock: Callable[[], float]
    rest: Callable[[float], object]
    consumer: Consumer | None
    assignment: set[TP]
    paused: set[TP]
    joined: bool

    if TYPE_CHECKING:  # the loop's, in member.Member (and its callback's, in rebalancing)
        def _new_consumer(self) -> Consumer: ...
        def _subscribe(self, subscription: list[str] | None = None) -> None: ...
        def _records(self, messages: list[Message], now: float) -> list[Message]: ...
        def _report_paused(self, with_work: bool) -> None: ...
        def _on_lost(self, consumer: Consumer | None,
                     partitions: list[TopicPartition]) -> None: ...

    def __init__(self, member_ids: MemberIdFile | None = None) -> None:
        self.member_ids = member_ids
        """Where this KIP-848 static member records its member id for the next process of its
        pod, and finds the one an earlier process left (None: classic, dynamic, run by hand)."""
        self.left = False
        self.drained_member_id = ""
        self.drain_ends_at = 0.0
        """When a drained process looks whether it was replaced, and subscribes again if not."""
        self.group_view: GroupView | None = None
        self.replaced = False
        """Drained, and the broker shows the instance id under another member id (the
        replacement joined): the loop ended for good, with a clean exit."""
        self.returning = False
        """Subscribed again after a drain, not yet assigned: that assignment is the static
        member's return, not a rebalance."""
        self.entered_member_id = ""
        """The member id the consumer had when it was last assigned: a close of that consumer
        is a member's leave the coordinator must see."""
        self.leave_client: StaticLeave | None = None
        self.leave_warming: threading.Thread | None = None
        self.leave_refused = False
        """The connection settings are ones the leave's client cannot take (said once)."""
        self.closed_at: float | None = None
        """When the consumer last closed (unix seconds): the drain, the leave or the stop."""
        self.join_refused_at: float | None = None
        """When the broker first refused this process's instance id (UNRELEASED_INSTANCE_ID)."""
        self.join_attempts = 0
        self.next_join_at = 0.0

    def _group_view(self) -> GroupView:
        """The broker's view of the group, for one leave or one drained wait."""
        from consumer_runtime.groupview import GroupView

        return GroupView(self.config)

    def _close_consumer(self) -> None:
        """Close the consumer; a KIP-848 static member then confirms its static leave."""
        consumer, self.consumer = self.consumer, None
        if consumer is None:
            return
        member_id = consumer.memberid() or ""
        try:
            consumer.close()
        except KafkaException as exc:  # a consumer that raised a fatal error may refuse
            log.info("closing the consumer: %s", exc)
            return
        self.closed_at = time.time()
        if member_id and member_id == self.entered_member_id:
            self._confirm_static_leave(member_id)

    # -- a KIP-848 static member's leave, confirmed (consumer_runtime/staticleave.py) -------------

    def _static_leave(self) -> StaticLeave | None:
        """The client that confirms static leaves; None for the classic protocol (a static
        member's close sends no leave there), without an instance id, or when the connection
        settings are ones it cannot take (said once; the leave then rests on librdkafka's)."""
        config = self.config
        if config.protocol != "consumer" or not config.group_instance_id or self.leave_refused:
            return None
        if self.leave_client is None:
            from consumer_runtime.staticleave import StaticLeave, StaticLeaveError

            try:
                self.leave_client = StaticLeave(connection_settings(config), config.group_id,
                                                f"{config.member}-leave")
            except StaticLeaveError as exc:
                log.warning("static leaves go unconfirmed (a leave lost as the coordinator "
                            "moves keeps the instance id until its session times out): %s", exc)
                self.leave_refused = True
                return None
        return self.leave_client

    def _warm_static_leave(self) -> None:
        """Connect the leave's client and find the coordinator while the batch in flight
        finishes, so the confirmation after the close is one round trip."""
        client = self._static_leave()
        if client is None or self.leave_warming is not None or not self.entered_member_id:
            return
        self.leave_warming = threading.Thread(target=client.warm, name="leave-warm",
                                              daemon=True)
        self.leave_warming.start()

    def _confirm_static_leave(self, member_id: str) -> None:
        client = self._static_leave()
        if client is None:
            return
        deadline = self.clock() + STATIC_LEAVE_CONFIRM_S
        warming, self.leave_warming = self.leave_warming, None
        if warming is not None:
            warming.join(max(0.0, deadline - self.clock()))
        result = client.confirm(member_id, self.config.group_instance_id or "", deadline)
        self.entered_member_id = ""
        client.close()  # the next drain or stop warms a new one
        self.telemetry.static_leave_confirmed(result.as_status())
        _log_leave(result, self.config.group_instance_id or "")

    # -- a crashed predecessor's member id, released at the start (predecessor.py) --------------

    def _release_predecessor(self) -> None:
        """Before the first subscribe: release the member id an earlier process of this pod
        recorded (a KIP-848 static member killed without a leave) with the static leave, so
        that this process takes the instance id over at once instead of being refused until
        that member's session times out. Whatever the coordinator answers, the join follows."""
        ids = self.member_ids
        member_id = ids.predecessor() if ids is not None else None
        if not member_id:
            return
        client = self._static_leave()
        if client is None:
            return
        instance_id = self.config.group_instance_id or ""
        result = client.confirm(member_id, instance_id, self.clock() + RELEASE_S)
        client.close()
        self.telemetry.predecessor_released(result.outcome)
        _log_release(result, member_id, instance_id)

    def _entered(self, member_id: str) -> None:
        """Assigned as `member_id`: a close of this consumer is a leave the coordinator must
        see (`entered_member_id`), and a KIP-848 static member records it for the next process
        of its pod, on every assignment."""
        self.entered_member_id = member_id
        if self.member_ids is not None:
            self.member_ids.write(member_id)

    # -- a join the broker refuses for now (UNRELEASED_INSTANCE_ID) ------------------------------

    def _join_refused(self, err: KafkaError, now: float) -> None:
        """The broker still holds this instance id for an earlier process: give up this
        consumer (librdkafka made the error fatal) and try a new one after a back-off."""
        self.join_attempts += 1
        if self.join_refused_at is None:
            self.join_refused_at = now
            log.warning(
                "group %s still holds instance id %s for an earlier process that stopped "
                "without leaving (UNRELEASED_INSTANCE_ID); waiting until the broker releases it "
                "when that registration's session times out (group config "
                "consumer.session.timeout.ms), trying again every %.1f s at most",
                self.config.group_id, self.config.group_instance_id, join_backoff(99))
        self.telemetry.wait_began(
            UNRELEASED, f"the broker still holds instance id {self.config.group_instance_id} "
            "for an earlier process that stopped without leaving; it is released when that "
            f"registration's session times out: {err.str()}", self.join_refused_at)
        lost = set(self.assignment)
        if lost:
            self._on_lost(None, [TopicPartition(t, p) for t, p in sorted(lost)])
        self.joined = False
        self.paused.clear()
        self._report_paused(False)
        self._close_consumer()
        self.next_join_at = now + join_backoff(self.join_attempts)

    def _wait_to_join(self, now: float) -> None:
        """No consumer (a refused join): wait for the back-off, then try a new one."""
        self.telemetry.ticked(now)
        if now < self.next_join_at:
            self.rest(min(BUSY_POLL_S * 4, self.next_join_at - now))
            return
        log.debug("trying to join again (attempt %d)", self.join_attempts + 1)
        self.consumer = self._new_consumer()
        self._subscribe()

    # -- rejoin (an operator request, between batches) -------------------------------------------

    def _rejoin(self) -> None:
        """Leave the group and subscribe again with the same instance id, so that the group's
        assignment is computed anew (a static member's restart in a Stable classic group keeps
        the old one, with new subscription metadata or not)."""
        with self.requests.lock:
            self.requests.rejoin_requested = False
            self.requests.rejoining = self.consumer is not None
        if self.consumer is None:  # the broker refused a join meanwhile: it joins anew anyway
            return
        log.info("rejoin requested: leaving group %s and subscribing again",
                 self.config.group_id)
        self.consumer.unsubscribe()
        self._subscribe()

    # -- leave and drain (operator requests, between batches) ------------------------------------

    def _leave(self) -> None:
        """Give the partitions up at once, wait until the broker shows none of ours, close."""
        self.left = True
        self._report_paused(False)
        if self.consumer is not None:
            began = self.clock()
            member_id = self.consumer.memberid() or ""
            switch = leave_subscription(self.config.protocol)
            if switch is None:
                self.consumer.unsubscribe()
            else:
                self._subscribe(switch)
            held = self._wait_released(member_id, began + LEAVE_CONFIRM_S)
            if held is None:
                log.warning("the broker did not describe group %s during the leave; closing "
                            "anyway (partitions it still shows for this member move when its "
                            "session times out)", self.config.group_id)
            elif held:
                log.warning("the broker still shows partitions %s for this member %.0f s after "
                            "the leave began; closing anyway (they move when its session times "
                            "out)", sorted(held), LEAVE_CONFIRM_S)
            else:
                log.info("left group %s: the broker shows no partitions of this member %.2f s "
                         "after the leave began", self.config.group_id, self.clock() - began)
        self._close_consumer()
        self.joined = False
        self.telemetry.left()

    def _wait_released(self, member_id: str, deadline: float) -> set[TP] | None:
        """Serve the consumer (its revoke callback, the heartbeat acknowledging it) while asking
        the broker what it shows for this member; return what it still shows at the deadline,
        an empty set once it shows nothing (None: it never answered)."""
        view = self._group_view()
        held: set[TP] | None = None
        next_check = self.clock() + BUSY_POLL_S
        while self.consumer is not None:
            self._records(self.consumer.consume(1, BUSY_POLL_S), self.clock())
            now = self.clock()
            self.telemetry.polled(now)
            if now >= next_check:
                held = view.held(self.config.group_instance_id, member_id, timeout=2.0)
                if held == set() or now >= deadline:
                    break
                next_check = now + LEAVE_CHECK_S
        return held

    def _drain(self, began: float) -> None:
        """The batch in flight is committed: close the consumer the static way (no leave in
        classic, the static leave in KIP-848: the broker keeps the instance id's assignment for
        the session timeout) and wait, up, for the replacement (`_hold_drained`)."""
        consumer = self.consumer
        self.drained_member_id = (consumer.memberid() or "") if consumer is not None else ""
        self._close_consumer()
        self.assignment.clear()
        self.paused.clear()
        self._report_paused(False)
        self.joined = False
        with self.requests.lock:
            self.requests.drain_requested = False
            self.requests.renewed_hold_s = None
            self.drain_ends_at = self.clock() + self.requests.drain_hold_s
            self.telemetry.drained(time.time(), self.requests.drain_hold_s)
            self.requests.drained.set()
        log.info("drained in %.3f s: consumer closed, instance id %s free for the replacement; "
                 "subscribing again in %.1f s unless replaced", self.clock() - began,
                 self.config.group_instance_id, self.requests.drain_hold_s)

    def _hold_drained(self, now: float) -> None:
        """Drained: once the hold is over, end the run when the broker shows another process
        with this instance id (the replacement joined: a join would fence it), else subscribe
        again. A drain asked again meanwhile holds for its own hold from now."""
        self.telemetry.ticked(now)
        with self.requests.lock:
            renewed, self.requests.renewed_hold_s = self.requests.renewed_hold_s, None
        if renewed is not None:
            self.drain_ends_at = max(self.drain_ends_at, now + renewed)
        if now < self.drain_ends_at:
            self.rest(min(BUSY_POLL_S * 4, self.drain_ends_at - now))
            return
        if self.group_view is None:
            self.group_view = self._group_view()
        taken = self.group_view.taken_by_another(
            self.config.group_instance_id, self.drained_member_id, timeout=2.0)
        if taken:
            log.info("instance id %s is held by another process (the replacement): exiting",
                     self.config.group_instance_id)
            self.replaced = True
            return
        if taken is None:
            self.drain_ends_at = self.clock() + DRAIN_CHECK_S
            return
        log.warning("drained %.1f s ago and not replaced: subscribing to group %s again as the "
                    "same static member (instance id %s)", self.requests.drain_hold_s,
                    self.config.group_id, self.config.group_instance_id)
        with self.requests.lock:
            self.requests.drained.clear()
            self.telemetry.undrained()
        self.returning = True
        self.consumer = self._new_consumer()
        self._subscribe()
