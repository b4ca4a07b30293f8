"""A KIP-848 group's session timeout widened for a rollout, and set back after it (pure): the
record in `status.timeouts.widening` (`Widening`), the value a rollout widens to
(`target_ms`, within `cap_ms`), what the roller may do meanwhile (`hold`) and the record after a
pass (`next_widening`).

A KIP-848 group's session timeout is a group config (`consumer.session.timeout.ms`) that the
coordinator reads at every heartbeat: it arms a member's session timer with the value in force
when that member's heartbeat arrives. So it can be raised for a rollout and set back after it,
with no member restarted (spec.rollout.widenSessionTimeout, on by default for protocol
consumer):

1. Raise (`Raising`): before the rollout's first stop, the config is set to what the measured
   restarts need (`EffectiveTimeouts.needed_session_timeout_ms`: the slowest restart x
   restartMarginPercent + 2 s, never less than the slowest member start + 2 s), at most the
   broker's group.consumer.max.session.timeout.ms (and autoTuning.maxSessionTimeoutMs, when
   set). The value is chosen once per widening.
2. In force (`Widened`, from `widenedAt`): the first pass that finds the record (a pass writes
   the status after the broker took the config) marks it in force. A member that already left is
   not covered (its timer was armed at its last heartbeat), so no member stops before one
   heartbeat interval, plus `HEARTBEAT_SLACK_MS`, has passed (`stopsFrom`): the roller's
   predicate `SessionTimeoutWidened` holds the stop back until then.
3. Restore (`Restored`, from `restoredAt`): once no rollout needs it (the rollout completed,
   halted, rolled back or stopped, was paused with nobody away, or widening was turned off),
   the tuned value is set back: dead members are detected at the tuned value again.

The record lives in the status, and is written before the broker is told (`service.execute`),
so an operator restarted mid-rollout, or killed between the record and the config write, goes on
from it. The broker's own value is read on an operator process's first pass of the group
(`observed_ms`), and again after a write the broker refused: a value that differs from what the
record says is in force is set right, so a restarted operator that finds a widened group with no
rollout restores it, and one that finds a raise recorded but not made makes it.

4. Deleted (`left_behind`): a ConsumerGroup deleted while widened (mid-rollout) sets the tuned
   value back before its finalizer goes (`handlers.forget`): the Kafka group outlives the
   ConsumerGroup, and a widened value left behind would hold the next owner's dead members that
   long.

The operator owns the group's `consumer.session.timeout.ms` (and heartbeat interval): a value
set by hand is set back to the tuned one (or the widened one, mid-rollout) by the next pass that
reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Event
from staticfleet.decisions.conditions import parse_optional, parse_rfc3339, rfc3339_ms
from staticfleet.decisions.timeouts.inputs import BrokerBounds

HEARTBEAT_SLACK_MS = 500
"""Beyond one heartbeat interval, what a stop waits after the widening is in force: a heartbeat
that went out late, and its round trip."""
CONFIRM_S = 0.5
"""How soon the pass after a raise comes (it marks the widening in force)."""
PREDICATE = "SessionTimeoutWidened"
"""The roller's predicate that holds a stop back for the widening (`rollout.gates`)."""

State = Literal["Raising", "Widened", "Restored"]


@dataclass(frozen=True)
class Widening:
    """`status.timeouts.widening`: the last widening of the group's session timeout."""

    state: State
    session_timeout_ms: int
    """The widened value."""
    tuned_session_timeout_ms: int
    """The tuned value it widened, and was (or will be) set back to."""
    raised_at: datetime
    """When the pass that set the widened value ran."""
    widened_at: datetime | None = None
    """In force from (the first pass that found it set)."""
    stops_from: datetime | None = None
    """The first moment a member may stop: `widened_at` + one heartbeat interval + slack."""
    restored_at: datetime | None = None
    """When the tuned value was set back (the tuned value is in force from then)."""
    reason: str = ""

    @property
    def raised(self) -> bool:
        """The widened value is set on the broker (Raising or Widened)."""
        return self.state != "Restored"

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "sessionTimeoutMs": self.session_timeout_ms,
                               "tunedSessionTimeoutMs": self.tuned_session_timeout_ms,
                               "raisedAt": rfc3339_ms(self.raised_at), "reason": self.reason}
        for key, value in (("widenedAt", self.widened_at), ("stopsFrom", self.stops_from),
                           ("restoredAt", self.restored_at)):
            if value is not None:
                out[key] = rfc3339_ms(value)
        return out

    @classmethod
    def from_status(cls, raw: Mapping[str, Any] | None) -> Widening | None:
        """The record in `status.timeouts.widening` (None: absent or unreadable)."""
        if not raw or raw.get("state") not in ("Raising", "Widened", "Restored"):
            return None
        try:
            return cls(state=raw["state"], session_timeout_ms=int(raw["sessionTimeoutMs"]),
                       tuned_session_timeout_ms=int(raw["tunedSessionTimeoutMs"]),
                       raised_at=parse_rfc3339(str(raw["raisedAt"])),
                       widened_at=parse_optional(raw.get("widenedAt")),
                       stops_from=parse_optional(raw.get("stopsFrom")),
                       restored_at=parse_optional(raw.get("restoredAt")),
                       reason=str(raw.get("reason") or ""))
        except (KeyError, TypeError, ValueError):
            return None


def cap_ms(bounds: BrokerBounds, auto_cap_ms: int | None) -> int:
    """The highest value a rollout may widen to: the broker's maximum, and
    autoTuning.maxSessionTimeoutMs when set (the longest a dead member may go unnoticed)."""
    return bounds.max_session_ms if auto_cap_ms is None else min(bounds.max_session_ms,
                                                                 auto_cap_ms)


def target_ms(needed_ms: int | None, tuned_ms: int, cap: int) -> int | None:
    """What a rollout widens the session timeout to: what its restarts need, at most `cap`;
    None when the tuned value already covers them (or nothing was measured)."""
    if needed_ms is None or needed_ms <= tuned_ms:
        return None
    value = min(needed_ms, cap)
    return value if value > tuned_ms else None


@dataclass(frozen=True)
class Hold:
    """What the widening means for the roller this pass, from the record the previous pass
    left."""

    session_ms: int | None = None
    """The session timeout a member stopping now is held to, while it is widened (None: the
    tuned one)."""
    wait: str | None = None
    """Why a stop must wait for the widening (None: it need not): the message of
    `PREDICATE`."""


def hold(record: Widening | None, target: int | None, heartbeat_ms: int,
         now: datetime) -> Hold:
    """Whether a stop may go ahead now, and the session timeout it would be held to."""
    widened = record is not None and record.state == "Widened"
    session = record.session_timeout_ms if record is not None and widened else None
    if target is None:
        return Hold(session)
    if record is None or not record.raised:
        return Hold(session, (
            f"the session timeout is raised to {target} ms first: the measured restarts need "
            "more than the tuned value (spec.rollout.widenSessionTimeout)"))
    if record.state == "Raising":
        return Hold(session, (
            f"the session timeout was raised to {record.session_timeout_ms} ms; once the next "
            f"pass finds it in force, members stop after one heartbeat interval "
            f"({heartbeat_ms} ms)"))
    if record.stops_from is not None and now < record.stops_from:
        return Hold(session, (
            f"the session timeout is widened to {record.session_timeout_ms} ms since "
            f"{_at(record.widened_at)}: waiting one heartbeat interval ({heartbeat_ms} ms) so "
            f"that every member's session timer is armed with it, until "
            f"{_at(record.stops_from)}"))
    return Hold(session)


@dataclass(frozen=True)
class Change:
    """The widening after this pass: its record, the session timeout to set on the broker now
    (None: none), the Event of the change, and when to look again."""

    record: Widening | None
    set_ms: int | None = None
    event: Event | None = None
    recheck_s: float | None = None


def next_widening(record: Widening | None, target: int | None, needed_for: str | None,
                  not_needed: str, tuned_ms: int, heartbeat_ms: int, observed_ms: int | None,
                  now: datetime) -> Change:
    """The record after this pass, in the order below.

    `needed_for`: what needs the widening (the rollout and its revision), None when nothing
    does, and then `not_needed` says why; `observed_ms`: the group's session timeout as the
    broker holds it, when read this pass."""
    # 1: Nothing needs it (or the tuned value covers the restarts now): set the tuned value back.
    if needed_for is None or target is None:
        why = not_needed if needed_for is None else (
            f"the tuned {tuned_ms} ms covers the measured restarts now")
        if record is not None and record.raised:
            return _restore(record, tuned_ms, now, why)
        return _repaired(record, tuned_ms, observed_ms, now, why)
    # 2: Raise it before the rollout's first stop.
    if record is None or not record.raised:
        return _raise(target, tuned_ms, now, needed_for)
    # 3: The broker does not hold the widened value (set by hand, or lost): raise it again.
    if observed_ms is not None and observed_ms != record.session_timeout_ms:
        return _raise(record.session_timeout_ms, tuned_ms, now, needed_for,
                      found=f"the broker held {observed_ms} ms")
    # 4: Raised by the pass before: in force from now; the first stop waits a heartbeat.
    if record.state == "Raising":
        stops = now + timedelta(milliseconds=heartbeat_ms + HEARTBEAT_SLACK_MS)
        return Change(replace(record, state="Widened", widened_at=now, stops_from=stops,
                              reason=(f"widened to {record.session_timeout_ms} ms for "
                                      f"{needed_for}; members stop from {_at(stops)}")),
                      recheck_s=(stops - now).total_seconds())
    # 5: In force: members stop once `stops_from` has passed.
    wait = (record.stops_from - now).total_seconds() if record.stops_from else 0.0
    return Change(record, recheck_s=wait if wait > 0 else None)


def _raise(value: int, tuned_ms: int, now: datetime, needed_for: str,
           found: str | None = None) -> Change:
    said = (f"raising the group's session timeout (consumer.session.timeout.ms) from the tuned "
            f"{tuned_ms} ms to {value} ms for {needed_for}, what the measured restarts need"
            + (f" ({found})" if found else "")
            + "; members stop once it is in force and one heartbeat interval has passed")
    return Change(Widening("Raising", value, tuned_ms, now, reason=said), set_ms=value,
                  event=Event("Normal", c.SESSION_WIDENED, said), recheck_s=CONFIRM_S)


def _restore(record: Widening, tuned_ms: int, now: datetime, why: str) -> Change:
    since = f" since {_at(record.widened_at)}" if record.widened_at else ""
    said = (f"set the group's session timeout back to the tuned {tuned_ms} ms (widened to "
            f"{record.session_timeout_ms} ms{since}): {why}")
    return Change(replace(record, state="Restored", tuned_session_timeout_ms=tuned_ms,
                          restored_at=now, reason=said),
                  set_ms=tuned_ms, event=Event("Normal", c.SESSION_RESTORED, said))


def _repaired(record: Widening | None, tuned_ms: int, observed_ms: int | None, now: datetime,
              why: str) -> Change:
    """Nothing is widened by the record: a broker value other than the tuned one is set back
    (an operator that stopped between raising it and recording that, or a hand edit)."""
    if observed_ms is None or observed_ms == tuned_ms:
        return Change(record)
    said = (f"set the group's session timeout back to the tuned {tuned_ms} ms: the broker held "
            f"{observed_ms} ms, which no record of this operator explains ({why})")
    return Change(Widening("Restored", observed_ms, tuned_ms, now, restored_at=now, reason=said),
                  set_ms=tuned_ms, event=Event("Normal", c.SESSION_RESTORED, said))


def _at(moment: datetime | None) -> str:
    return rfc3339_ms(moment) if moment is not None else "?"


def left_behind(record: Widening | None, observed_ms: int | None) -> int | None:
    """On the ConsumerGroup's deletion, the session timeout to set back on the broker: the tuned
    value while the record says it is widened (or raising), or when the broker holds another
    value than the tuned one the record restored to (a restore recorded, not yet made); None
    when nothing was left behind (no record: the group never widened)."""
    if record is None:
        return None
    if record.raised or (observed_ms is not None
                         and observed_ms != record.tuned_session_timeout_ms):
        return record.tuned_session_timeout_ms
    return None
