"""Counting the group's rebalances from the members' counters and the group's state."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest

from staticfleet.decisions.plan import decide, without_nulls
from staticfleet.decisions.rebalance.count import count_rebalances
from tests.unit.operator.snapshots import CG, settled, snapshot
from tests.unit.operator.support import NOW, reports

pytestmark = pytest.mark.unit

SESSION_S = 12.0
WINDOW_S = SESSION_S + 10.0


def pods(*uids: str) -> list[dict[str, Any]]:
    return [{"metadata": {"uid": u}} for u in uids]


@dataclass(frozen=True)
class Seen:
    """One pass: when, the group's state, each member's counter (None: no /status answered;
    a uid missing: its /status did not answer), the member pods and the group epoch read."""

    at_s: float
    state: str
    counters: dict[str, int] | None
    members: tuple[str, ...] = ("a", "b")
    epoch: int | None = None
    generation: int | None = None
    """The classic generation every answering member reports (None: none reports one)."""


def run(*seen: Seen | tuple[str, dict[str, int] | None]) -> list[int]:
    """Totals after the passes (a bare (state, counters) is a pass 10 s after the last)."""
    previous: dict[str, Any] = {"groupState": "Stable", "rebalances": 0,
                                "memberRebalanceCounters": {"a": 0, "b": 0}}
    totals, at = [], 0.0
    for one in seen:
        if not isinstance(one, Seen):
            one = Seen(at + 10, *one)
        at = one.at_s
        statuses = ({} if one.counters is None
                    else {u: {"rebalances": v, "generation": one.generation}
                          for u, v in one.counters.items()})
        got = count_rebalances(previous, one.state, pods(*one.members), reports(statuses),
                               now=NOW + timedelta(seconds=one.at_s), window_s=WINDOW_S,
                               epoch=one.epoch, classic=one.epoch is None)
        totals.append(got.total)
        assert got.from_state == len(got.credits)
        previous = {"groupState": one.state, "rebalances": got.total,
                    "memberRebalanceCounters": dict(got.counters),
                    "rebalancesFromState": got.from_state,
                    "stateCountedRebalances": [c.to_status() for c in got.credits],
                    "groupEpoch": one.epoch, "groupGeneration": got.generation}
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
    # A rebalance that lasts past the window (a member slow to rejoin): its credit waits
    # while the group is in it, and the counters that show it then count nothing more.
    ((Seen(10, "PreparingRebalance", {"a": 0, "b": 0}),
      Seen(40, "PreparingRebalance", {"a": 0, "b": 0}),
      Seen(50, "Stable", {"a": 1, "b": 1})), [1, 1, 1]),
], ids=["same pass", "counters a pass later", "two passes later", "one more after",
        "two from state", "one member a pass later", "a long rebalance"])
def test_a_rebalance_is_counted_once(seen: tuple[Seen | tuple[str, dict[str, int] | None], ...],
                                     totals: list[int]) -> None:
    assert run(*seen) == totals


@pytest.mark.parametrize(("seen", "totals"), [
    # Issue 46 (the ledger e2e, one run in four): a coordinator move counted from the state
    # twice while the members' counters moved once; the credit left expires, and the
    # scale-up's rebalance (a third member, c, that joins) is counted.
    ((Seen(10, "PreparingRebalance", {"a": 0, "b": 0}), Seen(20, "Stable", {"a": 0, "b": 0}),
      Seen(25, "CompletingRebalance", {"a": 0, "b": 0}), Seen(35, "Stable", {"a": 1, "b": 1}),
      Seen(60, "Stable", {"a": 1, "b": 1}),
      Seen(80, "Stable", {"a": 2, "b": 2, "c": 0}, ("a", "b", "c"))), [1, 1, 2, 2, 2, 3]),
    # The same with no pass at the credit's expiry (a pass came late): it expires before the
    # counters of the pass that finds it expired are read.
    ((Seen(10, "PreparingRebalance", {"a": 0, "b": 0}), Seen(20, "Stable", {"a": 0, "b": 0}),
      Seen(25, "CompletingRebalance", {"a": 0, "b": 0}), Seen(35, "Stable", {"a": 1, "b": 1}),
      Seen(100, "Stable", {"a": 2, "b": 2, "c": 0}, ("a", "b", "c"))), [1, 1, 2, 2, 3]),
    # A KIP-848 group: the counter increase comes with a new group epoch past the credit's:
    # the new epoch's rebalance, counted, within the window too.
    ((Seen(10, "Assigning", {"a": 0, "b": 0}, epoch=5), Seen(15, "Stable", {"a": 0, "b": 0},
                                                           epoch=5),
      Seen(20, "Stable", {"a": 1, "b": 1}, epoch=6)), [1, 1, 2]),
    # ... and one the credit's own epoch shows is the credit's.
    ((Seen(10, "Assigning", {"a": 0, "b": 0}, epoch=5),
      Seen(20, "Stable", {"a": 1, "b": 1}, epoch=5)), [1, 1]),
], ids=["two coordinator moves, one counter increase, then a scale-up",
        "no pass at the expiry", "kip848 epoch past the credit", "kip848 same epoch"])
def test_a_credit_from_the_state_cannot_swallow_a_later_rebalance(
        seen: tuple[Seen, ...], totals: list[int]) -> None:
    assert run(*seen) == totals


@pytest.mark.parametrize(("seen", "totals"), [
    # Every member frozen (SIGSTOP) past its session: no /status answers, the broker drops
    # them and the group is Empty (a rebalance no counter can show); they go on, rejoin, and
    # their counters show the return.
    ((("Stable", None), ("Empty", None), ("Stable", {"a": 1, "b": 1}),
      ("Stable", {"a": 1, "b": 1})), [0, 1, 2, 2]),
    # Seen leaving Stable on the way (counted from the state): the emptying is that rebalance
    # ending, not another.
    ((("PreparingRebalance", None), ("Empty", None), ("Stable", {"a": 1, "b": 1})), [1, 1, 2]),
    # Every member gone for good (a node lost) and made again: the new pods' first assignment
    # is no rebalance of theirs; the group's state counts the emptying and the return.
    ((("Stable", None), Seen(20, "Empty", None, ()),
      Seen(30, "Stable", {"c": 0, "d": 0}, ("c", "d")),
      Seen(40, "Stable", {"c": 0, "d": 0}, ("c", "d")),
      Seen(80, "Stable", {"c": 1, "d": 1}, ("c", "d"))), [0, 1, 2, 2, 3]),
    # Members back while the group rebalances: one from the state, which their counters show
    # a pass later.
    ((("Stable", None), ("Empty", None), ("PreparingRebalance", {"a": 0, "b": 0}),
      ("Stable", {"a": 1, "b": 1})), [0, 1, 2, 2]),
], ids=["frozen and back", "seen rebalancing on the way", "made again", "back mid-rebalance"])
def test_a_group_that_every_member_left_counts_the_emptying_and_the_return(
        seen: tuple[Seen | tuple[str, dict[str, int] | None], ...], totals: list[int]) -> None:
    assert run(*seen) == totals


def test_a_credit_is_due_for_a_pass_when_it_expires_and_old_statuses_keep_theirs() -> None:
    """The next pass comes when the oldest credit's window ends; a status written before
    credits had times gives each the window again from the pass that reads it."""
    got = count_rebalances({"groupState": "Stable", "memberRebalanceCounters": {"a": 0}},
                           "PreparingRebalance", pods("a"), reports({"a": {"rebalances": 0}}),
                           now=NOW, window_s=WINDOW_S)
    assert (got.total, got.from_state, got.due_in_s) == (1, 1, WINDOW_S)
    old = {"groupState": "Stable", "rebalances": 3, "rebalancesFromState": 2,
           "memberRebalanceCounters": {"a": 0}}
    got = count_rebalances(old, "Stable", pods("a"), reports({"a": {"rebalances": 1}}), now=NOW,
                           window_s=WINDOW_S)
    assert (got.total, got.from_state) == (3, 1)
    later = count_rebalances(old, "Stable", pods("a"), reports({"a": {"rebalances": 0}}),
                             now=NOW + timedelta(seconds=WINDOW_S), window_s=WINDOW_S)
    assert later.from_state == 2, "its window starts at the pass that reads it"


def test_a_pass_is_due_when_a_credit_expires() -> None:
    """Through `plan.decide`: a group at rest with a credit (as an earlier operator left it)
    has its next pass when the credit's window (the 45 s session timeout and a pass interval)
    ends, and that pass lets it expire."""
    pods, status = settled(CG)
    status["rebalancesFromState"] = 1
    plan = decide(snapshot(CG, pods, previous=status, now_offset_s=60))
    assert plan.deadline_s == 45 + 10
    assert plan.status["rebalancesFromState"] == 1
    later = decide(snapshot(CG, pods, previous=without_nulls(dict(plan.status)),
                            now_offset_s=60 + 55))
    assert later.status.get("rebalancesFromState") is None
    assert later.status.get("stateCountedRebalances") is None
    assert later.status["rebalances"] == status.get("rebalances", 0)


def classic(state: str, counters: dict[str, int] | None, generation: int | None,
            members: tuple[str, ...] = ("a", "b")) -> Seen:
    """A pass of a classic group whose answering members report `generation`; `at_s` is
    set by `passes`."""
    return Seen(0, state, counters, members, generation=generation)


def passes(*seen: Seen, every_s: float = 10) -> list[int]:
    """`run` with the passes `every_s` apart."""
    return run(*(replace(x, at_s=(i + 1) * every_s) for i, x in enumerate(seen)))


@pytest.mark.parametrize(("seen", "totals"), [
    # The ledger e2e's coordinator move (CI): the group seen in a rebalance twice, Stable
    # read in between, while the members' counters moved once and the broker made two
    # generations; then a scale-up within the credits' window. By the window alone the
    # second credit took the scale-up's increase (1, 1, 2, 2, 2: swallowed).
    ((classic("Stable", {"a": 0, "b": 0}, 5),
      classic("PreparingRebalance", {"a": 0, "b": 0}, 5),
      classic("Stable", {"a": 0, "b": 0}, 5),
      classic("PreparingRebalance", {"a": 0, "b": 0}, 5),
      classic("Stable", {"a": 1, "b": 1}, 7),
      classic("Stable", {"a": 2, "b": 2, "c": 0}, 8, ("a", "b", "c"))),
     [0, 1, 1, 1, 2, 3]),
    # The same with one generation made: the rebalance seen twice is counted once, and the
    # scale-up still counts.
    ((classic("Stable", {"a": 0, "b": 0}, 5),
      classic("PreparingRebalance", {"a": 0, "b": 0}, 5),
      classic("Stable", {"a": 0, "b": 0}, 5),
      classic("PreparingRebalance", {"a": 0, "b": 0}, 5),
      classic("Stable", {"a": 1, "b": 1}, 6),
      classic("Stable", {"a": 2, "b": 2, "c": 0}, 7, ("a", "b", "c"))),
     [0, 1, 1, 1, 1, 2]),
    # A credit its generation reached with no increase to pay it (the members back after
    # the group emptied report the generation of their return at once) goes: the next
    # rebalance, within its window, is counted (by the window alone it paid the credit).
    ((classic("Stable", {"a": 0, "b": 0}, 5),
      classic("Empty", None, None),
      classic("Stable", {"a": 0, "b": 0}, 1),
      classic("Stable", {"a": 0, "b": 0}, 1),
      classic("Stable", {"a": 1, "b": 1}, 2)),
     [0, 1, 2, 2, 3]),
    # Two rebalances the members took in one assignment: the generations count both.
    ((classic("Stable", {"a": 0, "b": 0}, 5), classic("Stable", {"a": 1, "b": 1}, 7)),
     [0, 2]),
    # Every member away past its session (frozen: no /status), the group empties, then they
    # are back: the emptying and the return, each once; the generation may start again.
    ((classic("Stable", {"a": 0, "b": 0}, 5),
      classic("PreparingRebalance", None, None),
      classic("Empty", None, None),
      classic("Stable", {"a": 1, "b": 1}, 1),
      classic("Stable", {"a": 1, "b": 1}, 1),
      classic("Stable", {"a": 2, "b": 2, "c": 0}, 2, ("a", "b", "c"))),
     [0, 1, 1, 2, 2, 3]),
    # Every member away past its session, the group emptied (a generation), then back one
    # after another: two generations, where each member's counter shows one (CI: the first
    # back was in a round of its own, cut short by the second's join). Three rebalances.
    ((classic("Stable", {"a": 0, "b": 0}, 2),
      classic("Empty", None, None),
      classic("Stable", {"a": 1, "b": 1}, 5)),
     [0, 1, 3]),
    # ... seen leaving Stable on the way, the same three.
    ((classic("Stable", {"a": 0, "b": 0}, 2),
      classic("PreparingRebalance", None, None),
      classic("Empty", None, None),
      classic("Stable", {"a": 1, "b": 1}, 5)),
     [0, 1, 1, 3]),
    # ... and read once, back, before they heard they were dropped (their assignment from
    # before, counters unmoved): the return counted from the state, once.
    ((classic("Stable", {"a": 0, "b": 0}, 2),
      classic("Empty", None, None),
      classic("Stable", {"a": 0, "b": 0}, 2),
      classic("Stable", {"a": 0, "b": 0}, 2),
      classic("Stable", {"a": 1, "b": 1}, 5)),
     [0, 1, 2, 2, 3]),
    # ... and back before the group's state says so: a pass whose read of the state (made a
    # moment before) says Empty has the members' reports of their return, and counts it;
    # the next pass, which reads them Stable, does not count the return again (CI: 1 -> 5
    # where the broker made 3).
    ((classic("Stable", {"a": 0, "b": 0}, 2),
      classic("Empty", None, None),
      classic("Empty", {"a": 1, "b": 1}, 5),
      classic("Stable", {"a": 1, "b": 1}, 5),
      classic("Stable", {"a": 1, "b": 1}, 5)),
     [0, 1, 3, 3, 3]),
])
def test_a_classic_credit_is_tied_to_the_generation_its_members_report(
        seen: tuple[Seen, ...], totals: list[int]) -> None:
    assert passes(*seen) == totals


def test_the_generation_is_kept_through_a_pass_no_member_answered_and_the_emptying_makes_one(
        ) -> None:
    previous = {"groupState": "Stable", "rebalances": 0, "groupGeneration": 5,
                "memberRebalanceCounters": {"a": 0, "b": 0}}
    unread = count_rebalances(previous, "Stable", pods("a", "b"), {}, now=NOW,
                              window_s=WINDOW_S, classic=True)
    assert unread.generation == 5 and unread.total == 0
    empty = count_rebalances(previous, "Empty", pods("a", "b"), {}, now=NOW,
                             window_s=WINDOW_S, classic=True)
    assert empty.generation == 6 and empty.total == 1
    still = count_rebalances({**previous, "groupState": "Empty", "groupGeneration": 6}, "Empty",
                             pods(), {}, now=NOW, window_s=WINDOW_S, classic=True)
    assert still.generation == 6 and still.total == 0
    kip848 = count_rebalances(previous, "Stable", pods("a", "b"), reports({
        "a": {"rebalances": 0, "generation": 9}}), now=NOW, window_s=WINDOW_S, epoch=3)
    assert kip848.generation == 5, "a KIP-848 member's own epoch is not the group's generation"
