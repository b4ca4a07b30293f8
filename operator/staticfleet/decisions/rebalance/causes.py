"""Why the group rebalanced (pure): each rebalance a pass counts gets one cause, by the first row
of `RULES` whose predicate finds evidence for it.

The evidence (`Evidence`) is what the brokers showed and what the operator itself did, digested by
`ledger` from the snapshot: the signs the passes noted (a member that is none of ours joined or
left, the coordinator moved, the brokers did not answer, a member of ours left the group), the
member containers that exited with an error, the rebalance the operator planned, and the
rollout. A predicate returns what it quotes (`Quote`) or None. The first row that quotes
decides, once the rebalance waited `ledger.GATHER_S` for what a read later may show; a
rebalance no row explains is `unknown` once it waited `ledger.SETTLE_S`.

The rows, most specific first (docs/contracts.md, "Why the group rebalanced"):

1. `foreign_member`: a member of the group that is none of ours joined or left. One join or
   leave makes one rebalance: its sign is consumed by the rebalance it explains.
2. `scale`: the operator's planned rebalance of a scale change (`status.plannedRebalance`,
   ScaleUp, ScaleDown or Create, within its window).
3. `coordinator_move`: the group's coordinator is another broker than before, last seen no
   earlier than every member crash that may explain the rebalance (the nearer wins: a crash
   soon after a broker roll is the crash's).
4. `broker_restart`: the brokers did not answer for the group, or partitions had no leader
   (also only when no such crash came after it).
5. `member_crash`: a member container exited with an error or was killed, or its pod ended,
   before the pass that counted the rebalance. It quotes the crash of the member that left the
   group (a `MemberLeftGroup` sign: its session ran out), else the latest.
6. `rollout`: a rollout restarts members, started and has not ended (or ended within the
   window), or the operator asked a member to rejoin so that partitions nobody owned get
   assigned.
7. `member_timeout`: a member of ours left the group, or came back under a new member id,
   while the operator asked nothing of it and it did not crash: its session or its
   max.poll.interval.ms ran out.

Signs and crashes count within `Evidence.window_s` of the pass (the session timeout and a grace:
a member that stops rebalances the group only once its session ran out, and the members'
counters are read at the pass's pace). Adding a cause is adding a row here and its name to
`CAUSES` (the CRD's enum, the metric's label values and docs/contracts.md are tested against
it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from staticfleet.decisions.conditions import parse_rfc3339, rfc3339

FOREIGN_MEMBER = "foreign_member"
SCALE = "scale"
COORDINATOR_MOVE = "coordinator_move"
BROKER_RESTART = "broker_restart"
MEMBER_CRASH = "member_crash"
ROLLOUT = "rollout"
MEMBER_TIMEOUT = "member_timeout"
UNKNOWN = "unknown"

# --- the signs a pass notes (`ledger.note_signs`) ---------------------------------------------

FOREIGN_JOINED = "ForeignMemberJoined"
FOREIGN_LEFT = "ForeignMemberLeft"
COORDINATOR_MOVED = "CoordinatorMoved"
BROKERS_UNANSWERED = "BrokersUnanswered"
MEMBER_LEFT = "MemberLeftGroup"
SIGN_KINDS = (FOREIGN_JOINED, FOREIGN_LEFT, COORDINATOR_MOVED, BROKERS_UNANSWERED, MEMBER_LEFT)


@dataclass(frozen=True)
class Sign:
    """Something a pass saw that can make the group rebalance: its kind (`SIGN_KINDS`), when it
    was last seen and what it was (quoted as evidence)."""

    kind: str
    at: datetime
    says: str
    member: int | None = None
    """The ordinal of the member of ours it is about (`MemberLeftGroup`)."""

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sign": self.kind, "at": rfc3339(self.at), "evidence": self.says}
        if self.member is not None:
            out["member"] = self.member
        return out

    @classmethod
    def from_status(cls, raw: Mapping[str, Any]) -> Sign:
        member = raw.get("member")
        return cls(str(raw.get("sign") or ""), parse_rfc3339(str(raw["at"])),
                   str(raw.get("evidence") or ""), int(member) if member is not None else None)


@dataclass(frozen=True)
class Crash:
    """A member container that exited with an error, or a member pod that ended."""

    ordinal: int
    pod: str
    at: datetime | None
    """When the container exited (None: the pod ended, with no exit time)."""
    account: str
    """How: the exit (`killed by SIGKILL (exit code 137)...`) or why the pod ended."""


@dataclass(frozen=True)
class Evidence:
    """What a pass knows that can explain a rebalance."""

    now: datetime
    window_s: float
    """How old a sign or a crash may be and still explain a rebalance."""
    signs: tuple[Sign, ...] = ()
    crashes: tuple[Crash, ...] = ()
    planned_scale: str | None = None
    """The operator's scale change whose rebalance may show now (`planned.PlannedRebalance`)."""
    planned_rejoin: str | None = None
    """The operator's request that a member rejoin for partitions nobody owned, if it may show
    now."""
    rollout: str | None = None
    """The rollout that restarts members now, or ended within the window."""
    shared: frozenset[Sign] = frozenset()
    """Signs that rebalances counted in the same pass already quoted: a rule that consumes
    signs quotes one of them only when no other is left (one change that the members'
    counters show as several rebalances at once)."""
    counted: datetime | None = None
    """When the pass that counted the rebalance ran: the rebalance happened before, so a
    member's exit after it is none of its causes (None: not known, every exit may be)."""

    def recent(self, *kinds: str) -> tuple[Sign, ...]:
        """The signs of `kinds` within the window, oldest first."""
        return tuple(sorted((s for s in self.signs if s.kind in kinds and self.fresh(s.at)),
                            key=lambda s: s.at))

    def fresh(self, at: datetime | None) -> bool:
        return at is None or (self.now - at).total_seconds() <= self.window_s

    def crashed(self) -> tuple[Crash, ...]:
        """The crashes that may explain the rebalance: within the window and not after the
        pass that counted it (a pod that ended, with no exit time, may), latest first."""
        return tuple(sorted(
            (x for x in self.crashes if self.fresh(x.at) and (
                x.at is None or self.counted is None or x.at <= self.counted)),
            key=lambda x: (x.at is not None, x.at or self.now), reverse=True))

    def after_crashes(self, sign: Sign) -> bool:
        """Whether `sign` was last seen no earlier than every crash that may explain the
        rebalance (a pod that ended has no time: it does not count here): a broker's trouble
        outranks a member's crash only when it is the nearer of the two."""
        return all(x.at is None or x.at <= sign.at for x in self.crashed())


@dataclass(frozen=True)
class Quote:
    """The evidence a rule found, and the sign it consumes (one that explains one rebalance)."""

    evidence: str
    consumes: Sign | None = None


def _said(sign: Sign) -> str:
    return f"{sign.says} (at {rfc3339(sign.at)})"


def foreign_member(ev: Evidence) -> Quote | None:
    signs = ev.recent(FOREIGN_JOINED, FOREIGN_LEFT)
    first = next((s for s in signs if s not in ev.shared), signs[0] if signs else None)
    return Quote(_said(first), consumes=first) if first is not None else None


def scale(ev: Evidence) -> Quote | None:
    return Quote(ev.planned_scale) if ev.planned_scale else None


def coordinator_move(ev: Evidence) -> Quote | None:
    signs = ev.recent(COORDINATOR_MOVED)
    return Quote(_said(signs[-1])) if signs and ev.after_crashes(signs[-1]) else None


def broker_restart(ev: Evidence) -> Quote | None:
    signs = ev.recent(BROKERS_UNANSWERED)
    return Quote(_said(signs[-1])) if signs and ev.after_crashes(signs[-1]) else None


def member_crash(ev: Evidence) -> Quote | None:
    crashes = ev.crashed()
    if not crashes:
        return None
    # The member that left the group (its session ran out) is the one whose crash explains
    # it; else the latest crash before the rebalance.
    left = {s.member for s in ev.recent(MEMBER_LEFT) if s.member is not None}
    quoted = next((x for x in crashes if x.ordinal in left), crashes[0])
    what = f"exited at {rfc3339(quoted.at)}" if quoted.at is not None else "ended"
    more = f" (and {len(crashes) - 1} more member(s))" if len(crashes) > 1 else ""
    return Quote(f"member {quoted.ordinal} (pod {quoted.pod}) {what}: {quoted.account}{more}")


def rollout(ev: Evidence) -> Quote | None:
    said = ev.rollout or ev.planned_rejoin
    return Quote(said) if said else None


def member_timeout(ev: Evidence) -> Quote | None:
    signs = ev.recent(MEMBER_LEFT)
    return Quote(_said(signs[-1])) if signs else None


@dataclass(frozen=True)
class Rule:
    """One row: the cause, its predicate and the evidence it reads (docs/contracts.md)."""

    cause: str
    predicate: Callable[[Evidence], Quote | None]
    reads: str


RULES: tuple[Rule, ...] = (
    Rule(FOREIGN_MEMBER, foreign_member,
         "a member whose instance id, member id and client id are none of ours joined or left "
         "the group (the broker's member list)"),
    Rule(SCALE, scale, "status.plannedRebalance: ScaleUp, ScaleDown or Create, in its window"),
    Rule(COORDINATOR_MOVE, coordinator_move,
         "the group's coordinator broker (FindCoordinator) changed"),
    Rule(BROKER_RESTART, broker_restart,
         "the group's describe did not answer (Degraded KafkaUnreachable or CoordinatorMoving), "
         "or subscribed partitions had no leader"),
    Rule(MEMBER_CRASH, member_crash,
         "a member pod's containerStatuses: an exit with an error or a signal (lastState or "
         "state terminated), or the pod ended (Failed: evicted)"),
    Rule(ROLLOUT, rollout,
         "status.rollout: members in flight, started and not ended, or ended in the window; "
         "or status.plannedRebalance UnassignedPartitions in its window"),
    Rule(MEMBER_TIMEOUT, member_timeout,
         "a member of ours (status.members memberId) is no longer listed, or listed under "
         "another member id, and the operator asked nothing of it"),
)
CAUSES = (*(r.cause for r in RULES), UNKNOWN)
"""Every cause, in the order of `RULES`, and `unknown`: the metric's label values and the
CRD's enum."""


def attribute(ev: Evidence) -> tuple[Rule, Quote] | None:
    """The first rule that finds evidence, with what it quotes; None: no rule does."""
    for rule in RULES:
        quote = rule.predicate(ev)
        if quote is not None:
            return rule, quote
    return None


def unexplained(waited_s: float) -> str:
    """What an `unknown` rebalance's entry says: every rule, by name, found nothing."""
    return (f"no rule found evidence within {waited_s:.0f} s; checked, in order: "
            f"{', '.join(rule.cause for rule in RULES)}")
