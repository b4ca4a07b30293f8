"""Rebalances the operator makes on purpose, and which observed rebalances they explain (pure).

Two things need the group to rebalance once, and a static member does not do it by itself:

* Scale-down. A static member sends no LeaveGroup when it closes, so the partitions of a removed
  member stay unowned until the broker's session timeout expires. The operator asks the member to
  leave (`POST /leave`: it finishes and commits its batch, leaves the group, and waits for its pod
  to go); the broker hands its partitions over at once; the pod is deleted once the member is out
  of the group (or `LEAVE_WAIT_S` after asking, whatever it did).
* Partitions that no member owns in a Stable group: a static member that rejoins a Stable classic
  group with a new subscription (a topic added to `spec.kafka.topics`) causes no rebalance, so the
  new topic's partitions are nobody's. Seen for `UNASSIGNED_GRACE_S`, the operator asks one member
  to rejoin (`POST /rejoin`), which makes the one rebalance that assigns them.

`scale_down` and `rejoin` (through `unowned`) decide these calls (and a scale-down's pod
deletions) each pass; `unowned` also says what the UnassignedPartitions condition shows.

Either request is recorded in `status.plannedRebalance` (`reason`, `members`, `requestedAt`); a
rebalance observed within `PLANNED_WINDOW_S` of it is counted as planned
(`status.plannedRebalances`, a Normal Event, `staticfleet_planned_rebalances_total`), not as
unexpected (`explain_rebalances`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from staticfleet.decisions import conditions as c
from staticfleet.decisions import scaling
from staticfleet.decisions import status as st
from staticfleet.decisions.actions import Event, MemberCall, PodDelete
from staticfleet.decisions.members.observed import MemberTable
from staticfleet.decisions.rebalance.count import PASS_S, RebalanceCount, count_rebalances
from staticfleet.decisions.rollout.state import PHASES_IN_PROGRESS, RolloutState
from staticfleet.decisions.snapshot import GroupView, Snapshot
from staticfleet.decisions.spec.model import ConsumerGroupSpec

PLANNED_WINDOW_S = 60.0
"""A rebalance seen this long after the operator asked for one is the one it asked for."""
SCALE_UP_WINDOW_S = 300.0
"""A new member joins once its process started (a cold start may take minutes on a loaded
node): its join is the planned rebalance for this long after its pod was created."""
UNASSIGNED_GRACE_S = 10.0
"""Partitions seen unowned this long (the group may be assigning them right now) call for a
rejoin."""
REJOIN_RETRY_S = 60.0
"""A rejoin that did not assign the partitions is asked for again after this long."""
LEAVE_WAIT_S = 30.0
"""A member asked to leave is deleted this long after, whether or not it left."""
SCALE_DOWN = "ScaleDown"
SCALE_UP = "ScaleUp"
CREATE = "Create"
"""A new group's members: their joins are planned until the group is first Ready."""
UNASSIGNED = "UnassignedPartitions"
SHOWN_PARTITIONS = 8
WHY_SCALE_DOWN = "scale down"
WHY_ASK_AGAIN = (f"{WHY_SCALE_DOWN}: asked again, the record says it was asked but its process "
                 "is not leaving")
WHY_TAKEN_BACK = ("a scale-down taken back: the member left the group when asked and never joins "
                  "again; its pod is made again and joins")

@dataclass(frozen=True)
class PlannedRebalance:
    """`status.plannedRebalance`: the last rebalance the operator asked for."""

    reason: str
    members: tuple[int, ...]
    requested_at: datetime

    @classmethod
    def from_status(cls, raw: Mapping[str, Any] | None) -> PlannedRebalance | None:
        if not raw or not raw.get("requestedAt"):
            return None
        return cls(reason=str(raw.get("reason") or ""),
                   members=tuple(int(m) for m in raw.get("members") or ()),
                   requested_at=c.parse_rfc3339(str(raw["requestedAt"])))

    def to_status(self) -> dict[str, Any]:
        return {"reason": self.reason, "members": list(self.members),
                "requestedAt": c.rfc3339(self.requested_at)}

    def age_s(self, now: datetime) -> float:
        return (now - self.requested_at).total_seconds()

    def explains(self, now: datetime) -> bool:
        """Whether a rebalance seen now is the one asked for."""
        window = SCALE_UP_WINDOW_S if self.reason in (SCALE_UP, CREATE) else PLANNED_WINDOW_S
        return self.age_s(now) <= window


def unassigned(partitions: Mapping[str, int], group: GroupView) -> tuple[tuple[str, int], ...]:
    """The subscribed partitions no member of the group owns."""
    owned = {tp for m in group.members for tp in m.partitions}
    return tuple((t, p) for t, count in sorted(partitions.items()) for p in range(count)
                 if (t, p) not in owned)


def describe(parts: Iterable[tuple[str, int]]) -> str:
    shown = [f"{t}-{p}" for t, p in parts]
    more = len(shown) - SHOWN_PARTITIONS
    return ", ".join(shown[:SHOWN_PARTITIONS]) + (f" and {more} more" if more > 0 else "")


def unassigned_since(previous: Mapping[str, Any], missing: tuple[tuple[str, int], ...],
                     now: datetime) -> datetime | None:
    """Since when partitions have been unowned (None: they are not)."""
    if not missing:
        return None
    return c.parse_optional(previous.get("unassignedSince")) or now


def rejoin_due(since: datetime | None, last: PlannedRebalance | None, now: datetime) -> bool:
    """Whether to ask a member to rejoin now: partitions unowned past the grace, and no rejoin
    asked for recently."""
    if since is None or (now - since).total_seconds() < UNASSIGNED_GRACE_S:
        return False
    return last is None or last.reason != UNASSIGNED or last.age_s(now) >= REJOIN_RETRY_S


@dataclass(frozen=True)
class ScaleDown:
    """A scale-down's part of a pass: pods to delete, members to ask to leave, and the planned
    rebalance their leaving makes."""

    deletes: tuple[PodDelete, ...] = ()
    calls: tuple[MemberCall, ...] = ()
    waiting: tuple[int, ...] = ()
    """Members asked to leave that are still in the group."""
    planned: PlannedRebalance | None = None
    events: tuple[Event, ...] = ()
    requeue_after_s: float | None = None


def scale_down(snap: Snapshot, spec: ConsumerGroupSpec, table: MemberTable,
               last: PlannedRebalance | None) -> ScaleDown:
    """Live members beyond `replicas`, highest ordinal first: a member in the group is first
    asked to leave it (its partitions move at once, not after the session timeout); its pod is
    deleted once it is out of the group, or `LEAVE_WAIT_S` after asking. The record
    (`status.plannedRebalance`) is written before the call (`service.execute`): a member the
    record says was asked whose `/status` says it is not leaving is asked again, within the
    same `LEAVE_WAIT_S` and the same record (its window unchanged)."""
    asked = set(last.members) if last is not None and last.reason == SCALE_DOWN else set()
    deletes, calls, waiting, again = [], [], [], []
    for o in scaling.ordinals_to_delete(table.live, spec.replicas):
        pod = table.live[o]
        member = table.member(o)
        in_group = member is not None and member.in_group
        why = None
        if o in asked and last is not None:
            if not in_group:
                why = f"{WHY_SCALE_DOWN}: the member left the group"
            elif last.age_s(snap.now) >= LEAVE_WAIT_S:
                why = (f"{WHY_SCALE_DOWN}: the member did not leave the group within "
                       f"{LEAVE_WAIT_S:.0f} s of being asked; its partitions move when "
                       "its session times out")
            else:
                waiting.append(o)
                if (member is not None and member.answers and not member.left
                        and (pod.get("status") or {}).get("podIP")):
                    # Recorded as asked, yet its process says it is not leaving: the call
                    # never reached it (an operator killed between the record and the call).
                    again.append(MemberCall(o, pod["metadata"]["name"], "leave", WHY_ASK_AGAIN))
        elif in_group and (pod.get("status") or {}).get("podIP"):
            calls.append(MemberCall(o, pod["metadata"]["name"], "leave", WHY_SCALE_DOWN))
        else:
            why = f"{WHY_SCALE_DOWN}: the member is not in the group"
        if why is not None:
            deletes.append(PodDelete(o, pod["metadata"]["name"], pod["metadata"]["uid"], why))
    planned = None
    events: list[Event] = []
    if calls:
        ordinals = tuple(sorted({*(asked & set(waiting)), *(call.ordinal for call in calls)}))
        planned = PlannedRebalance(SCALE_DOWN, ordinals, snap.now)
        events.append(Event("Normal", c.MEMBER_LEAVING, "asking members "
                            f"{[call.ordinal for call in calls]} to leave the group (scale "
                            f"down to {spec.replicas}): their partitions move at once"))
    return ScaleDown(deletes=tuple(deletes), calls=tuple(again + calls), waiting=tuple(waiting),
                     planned=planned, events=tuple(events),
                     requeue_after_s=1.0 if calls or waiting else None)


def leaves_taken_back(spec: ConsumerGroupSpec, table: MemberTable,
                      deleting: set[str]) -> tuple[tuple[PodDelete, Event], ...]:
    """Members within `replicas` whose process was asked to leave by a scale-down that
    `spec.replicas` took back before their pods went (a scaler that changed its mind, the
    manifest applied again). A member asked to leave never joins again, so it would hold its
    ordinal out of the group for good: its pod is deleted, the next pass makes it again (same
    instance id) and its join is a planned scale-up."""
    out = []
    for m in table.members:
        pod = table.live.get(m.ordinal)
        if (pod is None or m.ordinal >= spec.replicas or not m.left
                or pod["metadata"]["name"] != m.pod_name or pod["metadata"]["uid"] in deleting):
            continue
        out.append((PodDelete(m.ordinal, pod["metadata"]["name"], pod["metadata"]["uid"],
                              WHY_TAKEN_BACK),
                    Event("Normal", c.SCALE_DOWN_TAKEN_BACK,
                          f"member {m.ordinal} left the group for a scale-down that "
                          f"spec.replicas ({spec.replicas}) took back: deleting pod "
                          f"{pod['metadata']['name']}; it is made again and joins")))
    return tuple(out)


@dataclass(frozen=True)
class Rejoin:
    """A member asked to rejoin, and the planned rebalance that assigns the unowned partitions."""

    call: MemberCall
    planned: PlannedRebalance


def rejoin(snap: Snapshot, table: MemberTable, spec: ConsumerGroupSpec,
           missing: tuple[tuple[str, int], ...], since: datetime | None,
           last: PlannedRebalance | None) -> Rejoin | None:
    """Ask the lowest serving member to rejoin when partitions stay unowned."""
    if not missing or not rejoin_due(since, last, snap.now):
        return None
    serving = [m for m in table.members if m.ordinal < spec.replicas and m.ready and m.in_group
               and (table.live[m.ordinal].get("status") or {}).get("podIP")]
    if not serving:
        return None
    member = serving[0]
    why = f"{len(missing)} partition(s) owned by no member: {describe(missing)}"
    return Rejoin(MemberCall(member.ordinal, str(member.pod_name), "rejoin", why),
                  PlannedRebalance(UNASSIGNED, (member.ordinal,), snap.now))


def unassigned_condition(missing: tuple[tuple[str, int], ...], since: datetime | None,
                         rejoin: Rejoin | None, last: PlannedRebalance | None
                          ) -> tuple[str, c.Cond]:
    if not missing:
        return c.UNASSIGNED_PARTITIONS, ("False", c.ALL_PARTITIONS_ASSIGNED,
                                         "every partition has an owner (or the group is not "
                                         "Stable)")
    asked = rejoin.planned if rejoin else last if last and last.reason == UNASSIGNED else None
    action = (f"member {asked.members[0]} was asked to rejoin the group at "
              f"{c.rfc3339(asked.requested_at)} (one planned rebalance assigns them)"
              if asked else f"a member is asked to rejoin once they stay unowned "
              f"{UNASSIGNED_GRACE_S:.0f} s")
    return c.UNASSIGNED_PARTITIONS, (
        "True", c.PARTITIONS_UNASSIGNED,
        f"{len(missing)} partition(s) owned by no member of the Stable group: "
        f"{describe(missing)}. A static member that rejoins a Stable group with a new "
        f"subscription (a topic added) causes no rebalance; {action}")


@dataclass(frozen=True)
class Explained:
    """The group's rebalances seen this pass, and how many of them the operator asked for."""

    count: RebalanceCount
    last: PlannedRebalance | None
    """The last rebalance the operator asked for (None once a new group formed: its members'
    joins explain nothing more)."""
    planned: int
    """Of the rebalances seen since the previous pass, those `last` explains."""
    events: tuple[Event, ...]


def explain_rebalances(snap: Snapshot, group: GroupView,
                       session_timeout_ms: int) -> Explained:
    """Count the group's rebalances and tell the planned ones from the unexpected (a credit
    of a rebalance counted from the group's state waits one session timeout and a pass
    interval for a member's counter to show it: `count`)."""
    previous = snap.previous
    count = count_rebalances(previous, group.state, snap.pods, snap.statuses, now=snap.now,
                             window_s=session_timeout_ms / 1000 + PASS_S, epoch=group.epoch,
                             classic=group.protocol == "classic")
    last = PlannedRebalance.from_status(previous.get("plannedRebalance"))
    if last is not None and last.reason == CREATE and (
            c.get_condition(previous.get("conditions") or [], c.READY) or {}).get(
            "status") == "True":
        last = None  # the new group formed: its members' joins explain nothing more
    planned = count.increase if (last is not None and last.explains(snap.now)) else 0
    return Explained(count, last, planned,
                     tuple(_rebalance_events(previous, count, group, planned, last)))


def _rebalance_events(previous: Mapping[str, Any], count: RebalanceCount,
                      group: GroupView, planned: int,
                      last: PlannedRebalance | None) -> list[Event]:
    if not count.increase:
        return []
    if planned and last is not None:
        return [Event("Normal", c.PLANNED_REBALANCE,
                      f"the group rebalanced ({count.increase}) as planned ({last.reason}: "
                      f"members {list(last.members)}); state {group.state}")]
    ready = c.get_condition(previous.get("conditions") or [], c.READY)
    if ready and ready.get("status") == "True":
        return [Event("Warning", c.UNEXPECTED_REBALANCE,
                      f"the group rebalanced ({count.increase}) while it was Ready; "
                      f"state {group.state}")]
    return [Event("Normal", c.REBALANCED,
                  f"the group rebalanced ({count.increase}) while forming; state {group.state}")]


def timed_out_warning(events: Iterable[Event], left: Iterable[str]) -> tuple[Event, ...]:
    """`events` with a forming group's unplanned rebalance (Normal `Rebalanced`) posted as the
    Warning `UnexpectedRebalance` when a member of ours left the group while the operator asked
    nothing of it (`left`: what the ledger's `MemberLeftGroup` signs in their window say): its
    session ran out, which is no part of the group forming."""
    said = list(left)
    if not said:
        return tuple(events)
    return tuple(Event("Warning", c.UNEXPECTED_REBALANCE,
                       e.message.replace(" while forming;", f" while forming, and a member "
                                         f"was past its session timeout: {said[-1]};", 1))
                 if e.type == "Normal" and e.reason == c.REBALANCED else e for e in events)


@dataclass(frozen=True)
class Unowned:
    """Partitions nobody owns, since when, the member asked to rejoin for them, and the
    UnassignedPartitions condition."""

    missing: tuple[tuple[str, int], ...]
    since: datetime | None
    rejoin: Rejoin | None
    condition: tuple[str, c.Cond]


def unowned(snap: Snapshot, spec: ConsumerGroupSpec, group: GroupView,
            partitions: Mapping[str, int], table: MemberTable, rollout: RolloutState,
            down: ScaleDown, last: PlannedRebalance | None) -> Unowned:
    """Partitions no member owns, judged only in a Stable group the operator is not changing:
    during a rollout (a topic added rolls the members, each with the new subscription) or a
    scale-down, partitions are unowned for a moment by design; the condition then keeps what
    it said before."""
    previous = snap.previous
    judged = (group.state == "Stable" and bool(group.members) and not rollout.in_flight
              and rollout.phase not in PHASES_IN_PROGRESS and not down.calls
              and not down.waiting)
    missing = unassigned(partitions, group) if judged else ()
    since = (unassigned_since(previous, missing, snap.now) if judged
             else c.parse_optional(previous.get("unassignedSince")))
    asked = rejoin(snap, table, spec, missing, since, last)
    condition = (unassigned_condition(missing, since, asked, last) if judged
                 else st.kept_condition(previous, c.UNASSIGNED_PARTITIONS)
                 or unassigned_condition((), None, None, None))
    return Unowned(missing, since, asked, condition)
