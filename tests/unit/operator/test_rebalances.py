"""Counting the group's rebalances from the members' counters and the group's state."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet.decisions.rebalances import count_rebalances

pytestmark = pytest.mark.unit


def pods(*uids: str) -> list[dict[str, Any]]:
    return [{"metadata": {"uid": u}} for u in uids]


def passes(*seen: tuple[str, dict[str, int] | None]) -> list[int]:
    """Totals after passes that see (group state, each member's counter or None: no /status)."""
    previous: dict[str, Any] = {"groupState": "Stable", "rebalances": 0,
                                "memberRebalanceCounters": {"a": 0, "b": 0}}
    totals = []
    for state, counters in seen:
        statuses = {} if counters is None else {u: {"rebalances": v} for u, v in counters.items()}
        got = count_rebalances(previous, state, pods("a", "b"), statuses)
        totals.append(got.total)
        previous = {"groupState": state, "rebalances": got.total,
                    "memberRebalanceCounters": dict(got.counters),
                    "rebalancesFromState": got.from_state}
    return totals


@pytest.mark.parametrize(("seen", "totals"), [
    # The counters show it in the same pass.
    ((("PreparingRebalance", {"a": 1, "b": 1}), ("Stable", {"a": 1, "b": 1})), [1, 1]),
    # Seen from the state first, the counters follow a pass later: one rebalance, not two.
    ((("PreparingRebalance", {"a": 0, "b": 0}), ("Stable", {"a": 1, "b": 1})), [1, 1]),
    # ... or two passes later (the members did not answer in between).
    ((("PreparingRebalance", None), ("Stable", None), ("Stable", {"a": 1, "b": 1})), [1, 1, 1]),
    # Seen from the state, then a second rebalance the counters show with the first.
    ((("PreparingRebalance", {"a": 0, "b": 0}), ("Stable", {"a": 2, "b": 2})), [1, 2]),
    # Two rebalances seen from the state, the counters catch up at once.
    ((("PreparingRebalance", None), ("Stable", None), ("PreparingRebalance", None),
      ("Stable", {"a": 2, "b": 2})), [1, 1, 2, 2]),
    # One member's counter shows it a pass after the other's (its /status did not answer):
    # one rebalance, not two; the next one counts.
    ((("Stable", {"a": 1}), ("Stable", {"a": 1, "b": 1}), ("Stable", {"a": 2, "b": 2})),
     [1, 1, 2]),
], ids=["same pass", "counters a pass later", "two passes later", "one more after",
        "two from state", "one member a pass later"])
def test_a_rebalance_is_counted_once(seen: tuple[tuple[str, dict[str, int] | None], ...],
                                     totals: list[int]) -> None:
    assert passes(*seen) == totals
