"""Counting the group's rebalances from what one pass sees (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

REBALANCING_STATES = frozenset(
    {"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"})


@dataclass(frozen=True)
class RebalanceCount:
    increase: int
    """Rebalances since the previous pass."""
    total: int
    """`status.rebalances` after this pass."""
    counters: Mapping[str, int]
    """`status.memberRebalanceCounters`: each member pod's last reported counter, by uid."""
    from_state: int = 0
    """`status.rebalancesFromState`: rebalances counted from the group's state that no
    member's counter has shown yet (a later counter increase is the same rebalance)."""


def count_rebalances(
    previous: Mapping[str, Any],
    group_state: str,
    pods: Iterable[Mapping[str, Any]],
    statuses: Mapping[str, Mapping[str, Any]],
) -> RebalanceCount:
    """The members' own counters (a static member's rejoin is not a rebalance) give the
    increase: the largest increase of one member, since every member sees the same rebalance.
    A member whose `/status` did not answer this pass is taken to have seen what the others
    did: its counter, read a pass later, shows the same rebalances, which are not counted
    again. A group seen leaving Stable while no counter moved counts one."""
    seen: Mapping[str, int] = previous.get("memberRebalanceCounters") or {}
    deltas = []
    counters: dict[str, int] = {}
    unread = []
    for pod in pods:
        uid = pod["metadata"]["uid"]
        st = statuses.get(uid)
        if st is None:
            if uid in seen:
                unread.append(uid)
            continue
        value = int(st.get("rebalances") or 0)
        counters[uid] = value
        deltas.append(max(0, value - int(seen[uid])) if uid in seen else value)
    seen_by_members = max(deltas, default=0)
    for uid in unread:
        counters[uid] = int(seen[uid]) + seen_by_members
    # A rebalance counted from the state in an earlier pass shows in the counters later: it
    # is not counted twice.
    credit = int(previous.get("rebalancesFromState") or 0)
    increase = max(0, seen_by_members - credit)
    credit = max(0, credit - seen_by_members)
    if seen_by_members == 0 and previous.get("groupState") == "Stable" and (
            group_state in REBALANCING_STATES):
        increase, credit = 1, credit + 1
    total = int(previous.get("rebalances") or 0) + increase
    return RebalanceCount(increase=increase, total=total, counters=counters, from_state=credit)
