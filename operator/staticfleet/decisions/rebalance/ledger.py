"""The rebalance ledger (pure): `status.rebalanceLedger`, the group's last rebalances, each with
its cause and the evidence for it (`causes`), and what the passes note to find them.

Each pass, in `book`:

1. The ledger as the previous pass left it (`Ledger.from_status`).
2. The signs this pass shows (`note_signs`): a member that is none of ours joined or left (the
   broker's member list against the previous pass's), the group's coordinator moved,
   subscribed partitions without a leader, a member of ours that left the group or came back
   under a new member id while the operator asked nothing of it. Signs older than the window
   are dropped. A pass that could not describe the group notes that the brokers did not
   answer (`unanswered`, from `plan.degraded`).
3. The rebalances the pass counted (`planned.Explained`) become pending entries: their number
   in `status.rebalances`, when they were counted, for KIP-848 the group epoch, and the
   operator's own record then (a scale change planned, a rollout or rejoin under way), which
   explains them as it was then.
4. Each pending entry `GATHER_S` old gets its cause (`causes.attribute`); one that no rule
   explains waits on, `SETTLE_S` in all, then is `unknown`.
5. What shows: the last `RECENT` entries decided, their count by cause
   (`staticfleet_rebalances_by_cause_total`), and a Warning for each `unknown`
   (RebalanceUnexplained) and each `foreign_member` (ForeignMember).

The first pass of a group (no ledger yet) takes the members it sees as they are: a member that
is none of ours and was there before is not a sign until it leaves.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Event
from staticfleet.decisions.members.observed import Failure, ended_reason, pod_ended
from staticfleet.decisions.names import MEMBER_CONTAINER, ordinal_of
from staticfleet.decisions.rebalance import causes as ca
from staticfleet.decisions.rebalance import planned as pl
from staticfleet.decisions.rebalance.causes import Crash, Evidence, Sign
from staticfleet.decisions.rollout.state import RolloutState
from staticfleet.decisions.snapshot import GroupMemberView, GroupView, Snapshot
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts.effective import SESSION

KEY = "rebalanceLedger"
RECENT = 10
"""Entries `status.rebalanceLedger.recent` keeps."""
GATHER_S = 10.0
"""How long a counted rebalance waits before it is given a cause, whatever evidence there is
already: what caused it may show a cluster read (`clusterheld.INTERVAL_S`) after the members'
counters or the group's state did (a coordinator move is found once the controller fenced the
old broker and a read asked again), and evidence left from an earlier change, still in its
window, must not take it first."""
SETTLE_S = 30.0
"""How long a counted rebalance that no rule explains waits for its evidence before it is
`unknown`: a member list or a crash may be seen a pass after the members' counters moved."""
GRACE_S = 90.0
"""The window beyond the session timeout within which a sign or a crash explains a rebalance:
a member that stops makes the group rebalance once its session ran out, and the members'
counters are read at the pass's pace (up to a minute at rest)."""
KEPT_SIGNS = 20
KEPT_FOREIGN = 20
SAID = 400
"""The longest evidence an entry quotes (characters)."""
GAP_REASONS = (c.KAFKA_UNREACHABLE, c.COORDINATOR_MOVING)
"""A pass that stops for one of these notes that the brokers did not answer."""
DEFAULT_SESSION_MS = 45000
"""Kafka's default session timeout, for a window when the status shows none."""
LATEST_ONLY = (ca.COORDINATOR_MOVED, ca.BROKERS_UNANSWERED)
"""Signs kept once (the latest): the window counts from their last sighting."""


@dataclass(frozen=True)
class Entry:
    """One rebalance the passes counted; `cause` None while it waits for its evidence."""

    time: datetime
    """When the pass that counted it ran."""
    rebalance: int
    """Its number in `status.rebalances`."""
    epoch: int | None = None
    """A KIP-848 group's epoch after the rebalance: as the pass that counted it read it, or, when
    that read was not past the epoch of the rebalance before (the members' counters are read
    each pass, the group's describe may be older, or the group not described yet), the first
    epoch past it that a pass read while the entry waited for its cause (`with_epochs`)."""
    cause: str | None = None
    evidence: str = ""
    scale: str | None = None
    """While it waits: the scale change the operator had planned when the pass counted it."""
    rollout: str | None = None
    """While it waits: the rollout (or rejoin) under way when the pass counted it. The
    operator's own record explains the rebalance as it was then: a new group's planned joins
    end once it is Ready, a rollout's restarts once they are done."""

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"time": c.rfc3339(self.time), "rebalance": self.rebalance}
        if self.epoch is not None:
            out["epoch"] = self.epoch
        if self.cause is not None:
            out.update(cause=self.cause, evidence=self.evidence)
        elif self.scale or self.rollout:
            out["recorded"] = {k: v for k, v in (("scale", self.scale),
                                                 ("rollout", self.rollout)) if v}
        return out

    @classmethod
    def from_status(cls, raw: Mapping[str, Any]) -> Entry:
        epoch = raw.get("epoch")
        recorded = raw.get("recorded") or {}
        return cls(c.parse_rfc3339(str(raw["time"])), int(raw.get("rebalance") or 0),
                   int(epoch) if epoch is not None else None,
                   str(raw["cause"]) if raw.get("cause") else None,
                   str(raw.get("evidence") or ""), recorded.get("scale"),
                   recorded.get("rollout"))


@dataclass(frozen=True)
class Ledger:
    """`status.rebalanceLedger`."""

    recent: tuple[Entry, ...] = ()
    pending: tuple[Entry, ...] = ()
    signs: tuple[Sign, ...] = ()
    foreign: tuple[str, ...] = ()
    """The member ids of the members that are none of ours, as the last pass saw them."""
    coordinator: int | None = None
    """The group's coordinator broker, as last seen."""

    @classmethod
    def from_status(cls, raw: Mapping[str, Any] | None) -> Ledger:
        raw = raw or {}
        coordinator = raw.get("coordinator")
        return cls(recent=tuple(Entry.from_status(e) for e in raw.get("recent") or ()),
                   pending=tuple(Entry.from_status(e) for e in raw.get("pending") or ()),
                   signs=tuple(Sign.from_status(s) for s in raw.get("signs") or ()),
                   foreign=tuple(str(m) for m in raw.get("foreignMembers") or ()),
                   coordinator=int(coordinator) if coordinator is not None else None)

    def to_status(self) -> dict[str, Any]:
        return {"recent": [e.to_status() for e in self.recent],
                "pending": [e.to_status() for e in self.pending] or None,
                "signs": [s.to_status() for s in self.signs] or None,
                "foreignMembers": list(self.foreign) or None,
                "coordinator": self.coordinator}


@dataclass(frozen=True)
class Booked:
    """The ledger after a pass, and what the pass shows of it."""

    ledger: Ledger
    causes: Mapping[str, int]
    """The rebalances given a cause this pass, by cause."""
    events: tuple[Event, ...] = ()
    wait_s: float | None = None
    """When the next pass should look at the entries still pending (None: none is)."""


def book(snap: Snapshot, spec: ConsumerGroupSpec, group: GroupView, seen: pl.Explained,
         rollout: RolloutState, session_timeout_ms: int) -> Booked:
    """The ledger after this pass (see the module's docstring for the steps)."""
    now = snap.now
    window_s = session_timeout_ms / 1000 + GRACE_S
    # 1: the ledger as the previous pass left it.
    raw = snap.previous.get(KEY)
    before = Ledger.from_status(raw)
    # 2: the signs this pass shows.
    ledger = note_signs(before, snap, spec, group, seen, rollout, first=raw is None,
                        window_s=window_s)
    # 3: the rebalances counted this pass, pending, with the operator's record as it is now.
    scale, rejoin = planned_evidence(seen, now)
    rolling = rollout_evidence(rollout, now, window_s)
    before_pass = seen.count.total - seen.count.increase
    counted = tuple(Entry(now, before_pass + i + 1, group.epoch, scale=scale,
                          rollout=rolling or rejoin)
                    for i in range(seen.count.increase))
    # 4: each pending entry's cause, from the evidence; an entry counted from a stale describe
    #    takes the group epoch read since.
    pending = with_epochs((*ledger.pending, *counted), ledger.recent, group.epoch)
    evidence = Evidence(now=now, window_s=window_s, signs=ledger.signs,
                        crashes=crashes(snap.pods), planned_scale=scale, planned_rejoin=rejoin,
                        rollout=rolling)
    decided, waiting, signs = decide(pending, evidence)
    # In the order they were counted: one that waited for its evidence goes before those
    # counted after it.
    recent = sorted((*ledger.recent, *decided), key=lambda e: e.rebalance)
    ledger = replace(ledger, recent=tuple(recent[-RECENT:]), pending=waiting, signs=signs)
    # 5: what shows.
    wait = min((_due(e, now) - (now - e.time).total_seconds() for e in waiting), default=None)
    return Booked(ledger, Counter(e.cause for e in decided if e.cause is not None),
                  tuple(_event(e, spec) for e in decided
                        if e.cause in (ca.UNKNOWN, ca.FOREIGN_MEMBER)),
                  None if wait is None else max(1.0, wait))


def with_epochs(entries: Iterable[Entry], earlier: Iterable[Entry], epoch: int | None
                ) -> tuple[Entry, ...]:
    """The waiting `entries` (in the order counted), each whose epoch is missing or not past the
    epoch of the rebalances counted before it (`earlier` and the entries before it, counted in
    an earlier pass) given `epoch`, this pass's read, when that is past them. Rebalances counted
    in one pass share the epoch (one read cannot tell them apart); an epoch that never moves
    past (a KIP-848 group made again starts at 1) stays as read."""
    out: list[Entry] = []
    earlier = tuple(earlier)
    for entry in entries:
        before = max((e.epoch for e in (*earlier, *out)
                      if e.epoch is not None and e.time < entry.time), default=None)
        stale = entry.epoch is None or (before is not None and entry.epoch <= before)
        if stale and epoch is not None and (before is None or epoch > before):
            entry = replace(entry, epoch=epoch)
        out.append(entry)
    return tuple(out)


def decide(entries: Iterable[Entry], evidence: Evidence
           ) -> tuple[tuple[Entry, ...], tuple[Entry, ...], tuple[Sign, ...]]:
    """The entries given a cause, those still waiting, and the signs left. A sign that explains
    one rebalance (`causes.Quote.consumes`) is spent by it: rebalances counted in a later pass
    no longer see it, those counted in the same pass quote it only when no other sign is left
    (`causes.Evidence.shared`): a change that makes the group rebalance twice at once (a
    cooperative group's follow-up rebalance) shows in the members' counters together."""
    decided, waiting = [], []
    spent: dict[datetime, set[Sign]] = {}  # by when the rebalances that quoted them were counted
    for entry in entries:
        elsewhere = {s for at, used in spent.items() if at != entry.time for s in used}
        found = ca.attribute(replace(
            evidence, signs=tuple(s for s in evidence.signs if s not in elsewhere),
            shared=frozenset(spent.get(entry.time, ())), counted=entry.time,
            planned_scale=entry.scale or evidence.planned_scale,
            rollout=entry.rollout or evidence.rollout))
        waited = (evidence.now - entry.time).total_seconds()
        if found is not None and waited >= GATHER_S:
            rule, quote = found
            if quote.consumes is not None:
                spent.setdefault(entry.time, set()).add(quote.consumes)
            decided.append(replace(entry, cause=rule.cause, evidence=quote.evidence[:SAID],
                                   scale=None, rollout=None))
        elif found is None and waited >= SETTLE_S:
            decided.append(replace(entry, cause=ca.UNKNOWN, evidence=ca.unexplained(waited),
                                   scale=None, rollout=None))
        else:
            waiting.append(entry)
    used = set().union(*spent.values())
    return tuple(decided), tuple(waiting), tuple(s for s in evidence.signs if s not in used)


def _due(entry: Entry, now: datetime) -> float:
    """How old a waiting entry is when the next look at it is due: `GATHER_S`, then
    `SETTLE_S`."""
    return GATHER_S if (now - entry.time).total_seconds() < GATHER_S else SETTLE_S


# --- the signs -------------------------------------------------------------------------------


def note_signs(ledger: Ledger, snap: Snapshot, spec: ConsumerGroupSpec, group: GroupView,
               seen: pl.Explained, rollout: RolloutState, *, first: bool,
               window_s: float) -> Ledger:
    """The ledger with this pass's signs noted and those older than the window dropped."""
    now = snap.now
    new: list[Sign] = []
    foreign = ledger.foreign
    # A group the broker does not know, or could not describe, lists nobody: no one left.
    if group.state != "Dead" and (group.members or group.state != "Unknown"):
        ids = {st.member_id for st in snap.statuses.values() if st.member_id}
        others = [m for m in group.members if not ours(m, spec, ids)]
        foreign = tuple(sorted(m.member_id for m in others))[:KEPT_FOREIGN]
        if not first:
            was = set(ledger.foreign)
            new += [Sign(ca.FOREIGN_JOINED, now, _joined(m)) for m in others
                    if m.member_id not in was and m.member_id in foreign]
            new += [Sign(ca.FOREIGN_LEFT, now, f"member {gone} (none of ours) left the group")
                    for gone in sorted(was - set(foreign))]
            new += members_left(snap, spec, group, seen, rollout)
    coordinator = ledger.coordinator
    if snap.coordinator is not None:
        if coordinator is not None and coordinator != snap.coordinator:
            new.append(Sign(ca.COORDINATOR_MOVED, now, f"the group's coordinator moved from "
                                                       f"broker {coordinator} to broker "
                                                       f"{snap.coordinator}"))
        coordinator = snap.coordinator
    if snap.leaderless:
        new.append(Sign(ca.BROKERS_UNANSWERED, now, (
            f"{len(snap.leaderless)} subscribed partition(s) without a leader "
            f"({pl.describe(sorted(snap.leaderless))}): a broker is down")))
    return replace(ledger, signs=noted(ledger.signs, new, now, window_s), foreign=foreign,
                   coordinator=coordinator)


def noted(signs: Iterable[Sign], new: Iterable[Sign], now: datetime,
          window_s: float) -> tuple[Sign, ...]:
    """`signs` with `new` added (one of `LATEST_ONLY` replaces its kind's, another replaces the
    same sign), those older than the window dropped, the last `KEPT_SIGNS` kept."""
    out = list(signs)
    for sign in new:
        out = [s for s in out if not (s.kind == sign.kind and (
            s.kind in LATEST_ONLY or s.says == sign.says))]
        out.append(sign)
    return tuple(s for s in out if (now - s.at).total_seconds() <= window_s)[-KEPT_SIGNS:]


def unanswered(previous: Mapping[str, Any], reason: str, message: str,
               now: datetime) -> dict[str, Any] | None:
    """The ledger of a pass that stopped because the brokers did not answer for the group:
    that sign noted (its window from the session timeout the status shows). None when the
    reason is another, or the group has no ledger yet."""
    raw = previous.get(KEY)
    if reason not in GAP_REASONS or raw is None:
        return None
    ledger = Ledger.from_status(raw)
    session_ms = (previous.get("timeouts") or {}).get(SESSION) or DEFAULT_SESSION_MS
    window_s = int(session_ms) / 1000 + GRACE_S
    sign = Sign(ca.BROKERS_UNANSWERED, now, f"the group's describe failed ({reason}): "
                                            f"{clipped(message, 240)}")
    return replace(ledger, signs=noted(ledger.signs, (sign,), now, window_s)).to_status()


def clipped(text: str, most: int) -> str:
    """`text` cut to `most` characters, at its last clause ("; ") within them when it has one
    (a quote that stops mid-parenthesis reads as garbled)."""
    if len(text) <= most:
        return text
    head = text[:most]
    return head[:head.rfind("; ")] if "; " in head else head


_NUMBERED = re.compile(r"-\d+(-[0-9a-z]{5})?$")


def ours(member: GroupMemberView, spec: ConsumerGroupSpec, member_ids: set[str]) -> bool:
    """Whether a member of the group is one of this ConsumerGroup's: a member id one of its
    pods reports, or an instance id or client id `<group.id>-<ordinal>` (a member's instance
    id and client id) or `<name>-<ordinal>[-<revision>]` (its pod's name: the client id under
    dynamic membership)."""
    if member.member_id in member_ids:
        return True
    for said in (member.instance_id, member.client_id):
        for prefix in (spec.group_id, spec.name):
            if said and said.startswith(prefix) and _NUMBERED.fullmatch(said[len(prefix):]):
                return True
    return False


def _joined(member: GroupMemberView) -> str:
    return (f"member {member.member_id} joined the group (instance id "
            f"{member.instance_id or 'none'}, client id {member.client_id}, host "
            f"{member.host}): it is none of this ConsumerGroup's members")


def members_left(snap: Snapshot, spec: ConsumerGroupSpec, group: GroupView,
                 seen: pl.Explained, rollout: RolloutState) -> list[Sign]:
    """Members of ours (by the previous status' `members`) whose member id the broker no longer
    lists, under their instance id or at all (a dynamic member has none), while the operator
    asked nothing of them: not restarted by the rollout, not asked to leave or to rejoin,
    their pod not being deleted."""
    asked = set(seen.last.members) if seen.last is not None and seen.last.explains(
        snap.now) else set()
    asked |= {f.ordinal for f in rollout.in_flight}
    asked |= {o for p in snap.pods if p["metadata"].get("deletionTimestamp")
              and (o := ordinal_of(p)) is not None}
    listed = group.by_instance()
    ids = {m.member_id for m in group.members}
    out = []
    for entry in snap.previous.get("members") or ():
        ordinal, was = int(entry.get("ordinal", -1)), entry.get("memberId")
        if not was or was in ids or ordinal in asked or not 0 <= ordinal < spec.replicas:
            continue
        instance = None if spec.dynamic_membership_for_testing else entry.get("instanceId")
        who = f"instance id {instance}" if instance else f"pod {entry.get('pod')}"
        current = listed.get(str(instance)) if instance else None
        said = (f"joined again as member {current.member_id}" if current is not None
                else "left the group")
        out.append(Sign(ca.MEMBER_LEFT, snap.now,
                        f"member {ordinal} ({who}) {said} (it was member {was})", ordinal))
    return out


# --- the evidence of the operator's own record -------------------------------------------------


def crashes(pods: Iterable[Mapping[str, Any]]) -> tuple[Crash, ...]:
    """The member containers whose last exit failed (an error or a signal), with when, and the
    member pods that ended; pods being deleted are left out (their exit is a stop)."""
    out = []
    for pod in pods:
        meta = pod["metadata"]
        ordinal = ordinal_of(pod)
        if ordinal is None or meta.get("deletionTimestamp"):
            continue
        if pod_ended(pod):
            out.append(Crash(ordinal, meta["name"], None, ended_reason(pod)))
            continue
        for cs in (pod.get("status") or {}).get("containerStatuses") or ():
            if cs.get("name") != MEMBER_CONTAINER:
                continue
            for state in (cs.get("state") or {}, cs.get("lastState") or {}):
                term = state.get("terminated") or {}
                code = int(term.get("exitCode") or 0)
                if code and term.get("finishedAt"):
                    failure = Failure(code, str(term.get("message") or ""),
                                      str(term.get("reason") or ""))
                    out.append(Crash(ordinal, meta["name"],
                                     c.parse_rfc3339(str(term["finishedAt"])),
                                     failure.account()))
                    break
    return tuple(sorted(out, key=lambda x: x.ordinal))


def planned_evidence(seen: pl.Explained, now: datetime) -> tuple[str | None, str | None]:
    """The operator's planned rebalance that may show now: (a scale change, a rejoin)."""
    last = seen.last
    if last is None or not last.explains(now):
        return None, None
    said = (f"the operator's planned rebalance {last.reason} (members {list(last.members)}) "
            f"at {c.rfc3339(last.requested_at)}")
    if last.reason == pl.UNASSIGNED:
        return None, f"{said}: a rejoin so that partitions nobody owned get assigned"
    return said, None


def rollout_evidence(state: RolloutState, now: datetime, window_s: float) -> str | None:
    """The rollout that restarts members now, that started and has not ended (Rolling, AtRisk,
    Paused, or Pending again: a refusal after a restart), or that ended within the window."""
    revision = (state.revision or "")[:10]
    if state.in_flight:
        return (f"the rollout to revision {revision} ({state.phase}) restarts members "
                f"{[f.ordinal for f in state.in_flight]}")
    if state.started_at is not None and state.finished_at is None and state.phase != "Idle":
        return (f"the rollout to revision {revision} ({state.phase}) restarted members "
                f"{list(state.members_restarted)}: {state.reason}")[:SAID]
    if state.finished_at is not None and (now - state.finished_at).total_seconds() <= window_s:
        return (f"the rollout to revision {revision} ended ({state.phase}) at "
                f"{c.rfc3339(state.finished_at)}")
    return None


def _event(entry: Entry, spec: ConsumerGroupSpec) -> Event:
    epoch = f", group epoch {entry.epoch}" if entry.epoch is not None else ""
    head = f"rebalance {entry.rebalance} (counted at {c.rfc3339(entry.time)}{epoch})"
    if entry.cause == ca.FOREIGN_MEMBER:
        return Event("Warning", c.FOREIGN_MEMBER,
                     f"{head}: {entry.evidence}. A consumer that is not a member of this "
                     f"ConsumerGroup uses its group.id {spec.group_id}")
    return Event("Warning", c.REBALANCE_UNEXPLAINED,
                 f"{head} has no known cause: {entry.evidence}. status.rebalanceLedger "
                 "shows the recent ones; docs/alerts.md#staticfleetrebalancecauseunknown")
