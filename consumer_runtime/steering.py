"""The operator's requests to a member process, as the HTTP thread (or a signal) hands them in
and the poll loop (consumer_runtime/member.py) carries them out: `Requests`.

The operator steers the loop through four requests, each honoured only between batches (the
batch in flight finishes and is committed first, with the partitions paused): stop (SIGTERM:
close, a static member keeps its registration), leave (POST /leave: give the partitions up at once
and stay out of the group), rejoin (POST /rejoin: leave and subscribe again, so the group's
assignment is computed anew) and drain (POST /drain: close the consumer the static way and stay
up, a warm handoff's first half). Every request comes with the operator's token
(consumer_runtime/control.py), which the HTTP server checks first.

A drain hands the instance id over without waiting for the process to end: the consumer closes
as on a stop (classic: no LeaveGroup, the broker keeps the registration and its assignment for the
session timeout; KIP-848: the static leave, epoch -2, which keeps them too), the request is
answered once it has, and the process stays up, out of the group. The operator activates the
replacement the moment the drain answers. Once the hold is over (`holdMs` of the request, well
inside the session timeout) the drained process asks the broker: when it shows another process
holding the instance id (the replacement joined) the drained process exits cleanly, and a
restart of its container stays out of the group (consumer_runtime/main.py, `Replaced`); when not
(the operator died between the two calls, the standby failed) it subscribes again by itself, as
the same static member, so a drain never costs a rebalance. A drain asked again while drained
(an operator that restarted sends its switchover again) is answered at once with the same
`drainedAt`, and holds for its own `holdMs` from then: an answered drain always means out of the
group for the hold it asked.

A standby process (a warm handoff's replacement, `config.standby`) does not subscribe before a
fifth request, activate (POST /activate, taken once Spark is up and warm: standby-ready,
`activation_refused`): it starts Spark and warms it up meanwhile, with its consumer made but
outside the group, so the old member of its instance id runs undisturbed until it has closed.
Joining earlier would fence the old member (classic) or be refused (KIP-848).

`Requests` holds what was asked and not yet done. It is shared by the threads: what the loop
changes while a request may come in, it changes under `lock`.
"""

from __future__ import annotations

import threading
import time

from consumer_runtime.metrics import Telemetry
from member_contract import ACTIVATE, DRAIN, LEAVE, REJOIN

STOP = "stop"
DRAIN_HOLD_S = 5.0
"""How long a drained process waits to be replaced before it subscribes again, when the request
does not say (`holdMs`)."""
DRAIN_HOLD_MAX_S = 300.0


def activation_refused(*, active: bool, stopping: bool, standby: str | None) -> str | None:
    """Why a process does not take POST /activate now (None: it does): only a standby that is
    standby-ready does (`standby` as /status says it). One that is still warming would hold
    partitions in the group that it cannot process until Spark is up."""
    if active:
        return "not in standby: already active"
    if stopping:
        return "stopping"
    if standby != "ready":
        return ("standby not ready yet: Spark is still starting or warming up (/status standby "
                f"is {standby!r}); activate it once it is 'ready'")
    return None


class Requests:
    """What the operator asked of this member process and the loop has not done yet."""

    def __init__(self, telemetry: Telemetry, standby: bool) -> None:
        self.telemetry = telemetry
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.activation = threading.Event()
        if not standby:
            self.activation.set()
        self.leave_requested = False
        self.rejoin_requested = False
        self.rejoining = False
        """Subscribed again after a rejoin, not yet assigned."""
        self.drain_requested = False
        self.drain_hold_s = DRAIN_HOLD_S
        self.drained = threading.Event()
        """Out of the group after a drain (consumer closed), waiting to be replaced."""
        self.renewed_hold_s: float | None = None
        """The hold of a drain taken while drained, until the loop takes it over: the loop then
        stays out at least that long from then."""

    def take(self, action: str, *, joined: bool, left: bool) -> str | None:
        """Take an operator request (ACTIVATE, LEAVE or REJOIN; a drain is `take_drain`; from the
        HTTP thread, which checked the operator's token): None when accepted, else why not.
        ACTIVATE is taken only by a standby that is standby-ready, REJOIN only by a member in the
        group (`joined`); `left`: the loop carried a leave out. The loop carries a request out
        between batches."""
        with self.lock:
            if action == ACTIVATE:
                refused = activation_refused(active=self.activation.is_set(),
                                             stopping=self.stopping.is_set(),
                                             standby=self.telemetry.standby)
                if refused is not None:
                    return refused
                self.telemetry.activated(time.monotonic())
                self.activation.set()
                return None
            if not self.activation.is_set():
                return "in standby: not in the group (POST /activate first)"
            if self.drained.is_set():
                return "drained: out of the group until it is replaced or subscribes again"
            if action == LEAVE:
                if self.leave_requested:
                    return "already leaving the group" if not left else "left the group"
                self.leave_requested = True
                self.telemetry.leave_accepted()
                return None
            if action != REJOIN:
                return f"unknown request {action!r}"
            if self.leave_requested:
                return "leaving the group"
            if self.stopping.is_set():
                return "stopping"
            if self.rejoin_requested or self.rejoining:
                return "a rejoin is already under way"
            if not joined:
                return "not in the group"
            self.rejoin_requested = True
            return None

    def take_drain(self, hold_s: float | None, wait_s: float) -> tuple[str | None, bool]:
        """POST /drain: (why not, None when taken; drained within `wait_s`). Taken again by a
        drained process: it answers at once (its drain's `drainedAt` unchanged) and holds for
        `hold_s` from then; `hold_s`: how long to wait to be replaced before subscribing again
        (DRAIN_HOLD_S when None; at most DRAIN_HOLD_MAX_S)."""
        with self.lock:
            if not self.activation.is_set():
                return "in standby: not in the group (POST /activate first)", False
            refused = self._drain_refused(DRAIN_HOLD_S if hold_s is None else hold_s)
        if refused is not None:
            return refused, False
        return None, self.drained.wait(max(0.0, wait_s))

    def _drain_refused(self, hold_s: float) -> str | None:
        """(Under `lock`.) Why a drain is not taken now, or None after taking it."""
        if self.leave_requested:
            return "leaving the group"
        if self.stopping.is_set():
            return "stopping"
        hold_s = min(max(0.0, hold_s), DRAIN_HOLD_MAX_S)
        if self.drained.is_set():
            self.renewed_hold_s = max(hold_s, self.renewed_hold_s or 0.0)
            return None
        self.drain_requested = True
        self.drain_hold_s = hold_s
        return None

    def action(self) -> str | None:
        """What the loop is draining for: a leave outranks a stop, which outranks a drain,
        which outranks a rejoin."""
        if self.leave_requested:
            return LEAVE
        if self.stopping.is_set():
            return STOP
        if self.drain_requested:
            return DRAIN
        return REJOIN if self.rejoin_requested else None
