"""Counting the group's rebalances from what one pass sees (pure).

The members' own counters count (a static member's rejoin is not a rebalance); the group's
state counts what no counter can show yet, or ever:

- The group seen leaving Stable while no counter moved counts one rebalance, and leaves a
  *credit* (`Credit`, `status.stateCountedRebalances`): a later counter increase that shows the
  same rebalance pays it off instead of counting again. A credit is tied to what the counters
  can confirm:
  - a classic group's generation, which the broker raises once for each rebalance it
    completes, as its members report it (`generation` in `/status`: librdkafka's, from the
    assignment the member last took). The credit of a rebalance seen under way in generation
    G waits for generation G+1; only a member's report of that generation pays it off, and a
    counter increase of an earlier generation cannot. With the generation read in this pass
    and the previous one, the group's new generations count as rebalances where they exceed
    the counters' increase (two rebalances the members took in one assignment);
  - where the read has the KIP-848 group epoch, a counter increase the group's new epochs
    since the previous pass account for is theirs, not the credit's;
  - and in any group, a credit lives `window_s` (one session timeout and a pass interval: by
    then every member that took part in the rebalance shows it), from when it was counted or
    the group was last seen in a rebalance, and then expires, before the counters of the pass
    that finds it expired are read; a pass is due then (`RebalanceCount.due_in_s`). An
    expired credit is a rebalance that no member's counter showed: it stays counted, and it
    no longer swallows the next one.
- The group seen empty (`Empty`) after it had members counts one rebalance: the broker's last
  member left or was dropped, and no member is left whose counter could show it (but when the
  group was seen in a rebalance counted from its state: the emptying is that one ending).
  Credits left then are void: no member in the group will show them. The emptying made a
  generation (the join round with no member left), kept as the group's: members that come back
  one after another make a generation each, and their reports count them all, where their
  counters may show one (a member whose join round was cut short by the next member's took no
  assignment in it).
- The group seen with members again after it was empty (members back after every one was away
  past its session, or new ones) counts one, with a credit, when no counter moved: a member
  whose counter was read before shows it a pass later, and new members' first assignment is no
  rebalance of theirs (`rebalances` in `/status`). But not when the previous pass already had
  the members' reports of the generation they report now: that pass counted the return from
  them, though its read of the group's state, made a moment before they were back, said Empty.

Table tests: tests/unit/operator/rebalance/test_rebalances.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from staticfleet.decisions.conditions import parse_rfc3339, rfc3339
from staticfleet.decisions.memberreport import MemberReport

REBALANCING_STATES = frozenset(
    {"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"})
EMPTY = "Empty"
STABLE = "Stable"
WITH_MEMBERS = frozenset({STABLE, *REBALANCING_STATES})
"""The states of a group that has members."""
PASS_S = 10.0
"""A pass interval (`passes.RESYNC_S`): how late after a rebalance a pass reads the members'
counters that show it, beyond the session timeout its slowest member may take."""
KEPT_CREDITS = 20
"""Credits `status.stateCountedRebalances` keeps (the oldest go first: they expire first)."""


@dataclass(frozen=True)
class Credit:
    """A rebalance counted from the group's state that no member's counter has shown yet."""

    at: datetime
    """When the pass that counted it ran."""
    expires: datetime
    """When it expires: `window_s` after it was counted, or after the group was last seen in a
    rebalance (the members take their assignment once it ends)."""
    epoch: int | None = None
    """The KIP-848 group epoch that pass read (None: a classic group, or no read had it)."""
    generation: int | None = None
    """The classic generation whose report by a member shows this rebalance (None: no member
    reported a generation)."""

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"countedAt": rfc3339(self.at), "expiresAt": rfc3339(self.expires)}
        if self.epoch is not None:
            out["epoch"] = self.epoch
        if self.generation is not None:
            out["generation"] = self.generation
        return out

    @classmethod
    def from_status(cls, raw: Mapping[str, Any]) -> Credit:
        at = parse_rfc3339(str(raw["countedAt"]))
        return cls(at, parse_rfc3339(str(raw.get("expiresAt") or raw["countedAt"])),
                   _int_or_none(raw.get("epoch")), _int_or_none(raw.get("generation")))


def _int_or_none(value: Any) -> int | None:
    return int(value) if value is not None else None


@dataclass(frozen=True)
class RebalanceCount:
    increase: int
    """Rebalances since the previous pass."""
    total: int
    """`status.rebalances` after this pass."""
    counters: Mapping[str, int]
    """`status.memberRebalanceCounters`: each member pod's last reported counter, by uid."""
    credits: tuple[Credit, ...] = ()
    """`status.stateCountedRebalances`: the rebalances counted from the group's state that no
    member's counter has shown yet, oldest first."""
    due_in_s: float | None = None
    """When the next pass should come for the oldest credit to expire (None: no credit)."""
    generation: int | None = None
    """`status.groupGeneration`: the newest classic generation a member reported (kept from
    the previous pass when no member answered; once the group is empty, the generation its
    emptying made: the members back in it report the generations after that one, each a
    rebalance; a group the broker deleted starts again from 1, and those reports are taken
    as they come)."""

    @property
    def from_state(self) -> int:
        """`status.rebalancesFromState`: how many credits are left."""
        return len(self.credits)


def credits_of(previous: Mapping[str, Any], now: datetime, window_s: float) -> list[Credit]:
    """The credits the previous pass left. A status written before they had times
    (`rebalancesFromState` alone) gives that many counted now: their window starts again."""
    raw = previous.get("stateCountedRebalances")
    if raw is not None:
        return [Credit.from_status(x) for x in raw]
    return [Credit(now, now + timedelta(seconds=window_s))
            for _ in range(int(previous.get("rebalancesFromState") or 0))]


def count_rebalances(
    previous: Mapping[str, Any],
    group_state: str,
    pods: Iterable[Mapping[str, Any]],
    statuses: Mapping[str, MemberReport],
    *,
    now: datetime,
    window_s: float,
    epoch: int | None = None,
    classic: bool = False,
) -> RebalanceCount:
    """The members' own counters give the increase: the largest increase of one member,
    since every member sees the same rebalance. A member whose `/status` did not answer this
    pass is taken to have seen what the others did: its counter, read a pass later, shows the
    same rebalances, which are not counted again. The group's state counts the rest (the
    module's docstring), `window_s` being how long a credit waits for a counter to show it;
    `classic`: the members' generations are the group's (a KIP-848 member's is its own
    epoch)."""
    seen: Mapping[str, int] = previous.get("memberRebalanceCounters") or {}
    was_generation = _int_or_none(previous.get("groupGeneration"))
    deltas = []
    counters: dict[str, int] = {}
    unread = []
    generations = []
    for pod in pods:
        uid = pod["metadata"]["uid"]
        st = statuses.get(uid)
        if st is None:
            if uid in seen:
                unread.append(uid)
            continue
        value = st.rebalances
        counters[uid] = value
        delta = max(0, value - int(seen[uid])) if uid in seen else value
        deltas.append(delta)
        reported = st.generation
        if (classic and reported is not None and reported >= 0
                and not _from_before_the_emptying(reported, delta, was_generation)):
            generations.append(reported)
    seen_by_members = max(deltas, default=0)
    for uid in unread:
        counters[uid] = int(seen[uid]) + seen_by_members
    generation = max(generations, default=None)
    new_generations = (generation - was_generation
                       if generation is not None and was_generation is not None
                       and generation >= was_generation else None)
    shown = max(seen_by_members, new_generations or 0)
    credits = credits_of(previous, now, window_s)
    # Expire the credits past their window; a group in a rebalance now pushes it back (the
    # members take their assignment once it ends).
    until = now + timedelta(seconds=window_s)
    if group_state in REBALANCING_STATES:
        credits = [replace(x, expires=max(x.expires, until)) for x in credits]
    credits = [x for x in credits if x.expires > now]
    if generation is not None:
        paid, credits = _pay_by_generation(credits, shown, generation)
    else:
        # A counter increase pays off the credits, oldest first, but for the rebalances the
        # group's new epochs since the previous pass account for: those are new.
        was_epoch = previous.get("groupEpoch")
        new_epochs = (epoch - int(was_epoch) if epoch is not None and was_epoch is not None
                      and epoch > int(was_epoch) else 0)
        paid = min(len(credits), max(0, shown - new_epochs))
        credits = credits[paid:]
    increase = shown - paid
    was = previous.get("groupState")
    if group_state == EMPTY and was in WITH_MEMBERS:
        # Emptied: no member is left whose counter could show it, or the credits left. Out of
        # a rebalance counted from the state, the emptying is that rebalance ending.
        if not (was in REBALANCING_STATES and credits):
            increase += 1
        credits = []
    elif shown == 0 and (
            (was == STABLE and group_state in REBALANCING_STATES)
            or (was == EMPTY and group_state in WITH_MEMBERS)):
        under_way = group_state in REBALANCING_STATES
        # The generation that shows it: the one the members report now, when the group is
        # past it; else the one after the newest known (no member answered: one frozen,
        # back, or not yet in the new assignment).
        basis = generation if generation is not None else was_generation if classic else None
        tie = (generation if generation is not None and not under_way
               else None if basis is None else basis + 1)
        # A rebalance a credit already waits for, seen again (a read that answered Stable in
        # between, as during a coordinator move, cannot be a new generation's): counted once.
        # And a return whose generation the previous pass already took from the members'
        # reports (its read of the group's state, made before they were back, said Empty) was
        # counted by that pass.
        shown_before = (was == EMPTY and not under_way and generation is not None
                        and generation == was_generation)
        if not shown_before and (tie is None or all(x.generation != tie for x in credits)):
            increase += 1
            credits.append(Credit(now, until, epoch, tie))
    credits = credits[-KEPT_CREDITS:]
    total = int(previous.get("rebalances") or 0) + increase
    due = min(((x.expires - now).total_seconds() for x in credits), default=None)
    if generation is not None:
        kept_generation: int | None = generation
    elif group_state == EMPTY and was in WITH_MEMBERS and was_generation is not None:
        # The emptying completed a generation (the broker's join round with no member left),
        # counted above: members back in the group it was report the generations after it.
        kept_generation = was_generation + 1
    else:
        kept_generation = was_generation
    return RebalanceCount(increase=increase, total=total, counters=counters,
                          credits=tuple(credits), due_in_s=due, generation=kept_generation)


def _from_before_the_emptying(reported: int, delta: int, kept: int | None) -> bool:
    """A member that reports the generation the group had before it emptied (the kept one
    is that plus the emptying's), its counter unmoved, still reports its assignment from
    before: back from a freeze, it has not yet heard that the broker dropped it. Its report
    neither moves the group's generation back nor pays a credit. (A group the broker deleted
    once it was empty starts again at generation 1: its members' reports are taken.)"""
    return kept is not None and delta == 0 and reported == kept - 1


def _pay_by_generation(credits: list[Credit], shown: int,
                       generation: int) -> tuple[int, list[Credit]]:
    """The credits `shown` rebalances pay off, given the newest generation a member reported:
    a credit tied to a generation is paid by a report of that generation or a later one, and
    by nothing else; one that generation reached but no increase paid was the same rebalance
    counted once already (the generation passed it), and goes. A credit with no generation
    (counted when no member reported one) is paid by any increase, oldest first."""
    reached = [x for x in credits if x.generation is not None and x.generation <= generation]
    untied = [x for x in credits if x.generation is None]
    paid = min(len(reached), shown)
    paid_untied = min(len(untied), shown - paid)
    kept = [x for x in credits if x.generation is not None and x.generation > generation]
    kept += untied[paid_untied:]
    return paid + paid_untied, sorted(kept, key=lambda x: x.at)
