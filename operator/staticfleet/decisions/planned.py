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

Either request is recorded in `status.plannedRebalance` (`reason`, `members`, `requestedAt`); a
rebalance observed within `PLANNED_WINDOW_S` of it is counted as planned
(`status.plannedRebalances`, a Normal Event, `staticfleet_planned_rebalances_total`), not as
unexpected.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from staticfleet.decisions import conditions as c
from staticfleet.decisions.snapshot import GroupView

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
