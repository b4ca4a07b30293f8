"""Lag-driven autoscaling on a rebalance budget (`spec.autoscaling`, pure).

Every change of the member count is a rebalance, so the autoscaler spends them like money:
- **The signal is seconds of lag**: the group's backlog divided by the rate it processes at
  (`lagSeconds`), measured from the members' own figures (each reports its records per second
  and how busy its batch worker was over the last minute). The group scales up when the lag
  exceeds `targetLagSeconds`, by the step that brings it back under the target within that
  many seconds at the measured per-member capacity while keeping up with what arrives.
- **Down slowly, in one step**: only after the lag stayed under half the target for
  `scaleDownWindowSeconds`, to the smallest count that carries the highest arrival rate
  measured in the last `scaleDownWindowSeconds` at `UTILIZATION`, in one step (not one member
  at a time).
- **Even spreads only**: replica counts divide the partition count (every topic's, under the
  range assignor), never exceed it, and stay within `minReplicas..maxReplicas`.
- **A scale-up must pay**: one that did not raise the processing rate by `EFFECTIVE_GAIN`
  within `scaleUpCheckSeconds` while the lag stayed over the target is reverted
  (`IneffectiveScaleUp`), and scale-ups wait `INEFFECTIVE_HOLD_S` after it.
- **A budget**: at most `maxMembershipChangesPerHour` changes in any hour; once spent, the
  condition says what the autoscaler would have done. A scale-down never spends the hour's
  last change (`RESERVED_FOR_SCALE_UP`); a revert is always allowed (it undoes).
- **It stands aside** while a rollout runs, while the group is not Stable or still carrying out
  a change (fewer ready members than replicas), while the figures are missing or stale, and
  while another controller owns `spec.replicas` (a KEDA scaler or an HPA writes it through the
  `scale` subresource, which the API server records in `managedFields`).

The figures it decides on (the members' throughput and capacity, the backlog in seconds, the
arrival rate from the brokers' end offsets) are measured in `load`.

The decision's output is a replica count (the service writes it to `spec.replicas` through the
`scale` subresource, as field manager `FIELD_MANAGER`); the next pass makes that change the way
every scale change is made: members leave before their pods go, joins are counted as planned.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Event
from staticfleet.decisions.autoscaler.load import (
    Load,
    arrival_rate,
    lag_seconds,
    parse_time,
    recent_arrivals,
)
from staticfleet.decisions.spec.autoscaling import AutoscalingSpec

FIELD_MANAGER = "staticfleet-autoscaler"
"""The field manager the autoscaler writes `spec.replicas` as."""
UTILIZATION = 0.8
"""The share of a member's measured capacity a scale decision plans to use."""
EFFECTIVE_GAIN = 1.10
"""A scale-up is effective when the processing rate rose by at least this factor."""
INEFFECTIVE_HOLD_S = 3600.0
"""After an ineffective scale-up is reverted, no scale-up for this long."""
STALE_LAG_S = 120.0
"""Lag figures older than this are not acted on."""
RESERVED_FOR_SCALE_UP = 1
"""Changes of the hour's budget a scale-down may not spend: a load that comes back must find
one left (measured in bench/autoscale.py: three scale-downs of a slow wave's decline spent the
budget and the scale-up of its rise waited 25 minutes, the lag at 516 s)."""
SETTLE_S = 30.0
"""No decision this long after a change: the lag of partitions that moved is the brokers' figure
(end offset minus a commit read up to 15 s before) until their new owner reports its own. In
bench/autoscale.py --real a scale-down's next pass read 20,875 records of lag (396 s) where the
group's real lag never passed 14 s, and scaled 1 -> 8."""
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Situation:
    """What holds a scale change back this pass, besides the figures."""

    replicas: int
    ready: int
    group_state: str
    rollout_in_progress: bool
    replicas_owner: str | None = None
    """Another field manager that owns `spec.replicas` through the scale subresource."""


@dataclass(frozen=True)
class Autoscale:
    """The autoscaler's part of the plan."""

    status: dict[str, Any]
    condition: tuple[str, str, str]
    """(status, reason, message) of the `Autoscaling` condition."""
    scale_to: int | None = None
    events: tuple[Event, ...] = ()
    lag_seconds: float | None = None
    """None: unknown; inf: a backlog nothing processes."""
    desired: int | None = None
    budget_left: int = 0


def replicas_owner(body: Mapping[str, Any]) -> str | None:
    """The field manager, other than the autoscaler, that last wrote `spec.replicas` through
    the `scale` subresource (a KEDA scaler, an HPA, `kubectl scale`), from `managedFields`: an
    update moves a field's ownership to its writer, so only the last writer owns it."""
    for entry in (body.get("metadata") or {}).get("managedFields") or ():
        owned = ((entry.get("fieldsV1") or {}).get("f:spec") or {})
        if (entry.get("subresource") == "scale" and "f:replicas" in owned
                and entry.get("manager") != FIELD_MANAGER):
            return str(entry.get("manager") or "?")
    return None


def valid_replicas(partitions: Mapping[str, int], assignor: str | None, spec: AutoscalingSpec
                   ) -> tuple[int, ...]:
    """The member counts that spread the partitions evenly, within the spec's bounds: divisors of
    every topic's partition count under the range assignor (it assigns topic by topic), of the
    total otherwise; never above the total (a member beyond it holds nothing)."""
    counts = [n for n in partitions.values() if n > 0]
    if not counts:
        return ()
    base = math.gcd(*counts) if assignor == "range" else sum(counts)
    top = min(spec.max_replicas, sum(counts))
    return tuple(n for n in range(max(1, spec.min_replicas), top + 1) if base % n == 0)


def members_needed(demand: float, capacity: float | None) -> int | None:
    """Members to process `demand` records/s at `UTILIZATION` of `capacity` each."""
    if demand <= 0:
        return 0
    if not capacity:
        return None
    return math.ceil(demand / (capacity * UTILIZATION) - 1e-9)


def _at_least(valid: Sequence[int], n: int) -> int:
    return next((v for v in valid if v >= n), valid[-1])


@dataclass
class _Pass:
    """One decision's working state."""

    spec: AutoscalingSpec
    situation: Situation
    load: Load
    now: datetime
    valid: tuple[int, ...]
    previous: Mapping[str, Any]
    status: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)

    @property
    def replicas(self) -> int:
        return self.situation.replicas

    def changes(self) -> list[str]:
        return [t for t in self.previous.get("changes") or ()
                if (at := parse_time(t)) is not None and self.now - at < HOUR]


def decide_autoscaling(spec: AutoscalingSpec, situation: Situation, load: Load,
                       partitions: Mapping[str, int], assignor: str | None,
                       previous: Mapping[str, Any], now: datetime) -> Autoscale:
    """This pass's scale decision, its status (`status.autoscaling`) and its condition."""
    p = _Pass(spec, situation, load, now, valid_replicas(partitions, assignor, spec), previous)
    lag_s = lag_seconds(load)
    arrival, sample, fresh = arrival_rate(load, previous, now)
    capacity = load.capacity_per_member()
    p.status = _figures(p, lag_s, arrival, capacity, sample,
                        recent_arrivals(previous, arrival, fresh, now, spec.scale_down_window_s))
    to, reason, message = _decide(p, lag_s, arrival, capacity)
    wanted = to if to is not None else p.replicas
    condition = ("False" if reason in HOLD_REASONS else "True", reason, message)
    if to == p.replicas:
        to = None
    if to is not None:
        refusal = _over_budget(p, to, reason, message)
        if refusal is None:
            _spend(p, to, reason, message)
        else:
            condition, to = ("False", c.SCALING_BUDGET_SPENT, refusal), None
    p.status["desiredReplicas"] = wanted
    p.status["lastScale"] = p.status.get("lastScale") or previous.get("lastScale")
    return Autoscale(status=p.status, condition=condition, scale_to=to, events=tuple(p.events),
                     lag_seconds=lag_s, desired=wanted, budget_left=p.status["budgetLeft"])


def _figures(p: _Pass, lag_s: float | None, arrival: float | None, capacity: float | None,
             sample: dict[str, Any] | None, arrivals: list[list[Any]]) -> dict[str, Any]:
    """`status.autoscaling` as measured this pass, with the memory carried from the last."""
    changes = p.changes()
    return {
        "lagRecords": p.load.lag_records,
        "lagSeconds": None if lag_s is None or math.isinf(lag_s) else round(lag_s, 1),
        "processingRecordsPerSecond": round(p.load.rate, 1),
        "arrivalRecordsPerSecond": None if arrival is None else round(arrival, 1),
        "memberCapacityRecordsPerSecond": None if capacity is None else round(capacity, 1),
        "targetLagSeconds": p.spec.target_lag_seconds,
        "validReplicas": list(p.valid),
        "changes": changes,
        "budgetLeft": max(0, p.spec.max_membership_changes_per_hour - len(changes)),
        "sample": sample,
        "scaleUpsBlockedUntil": p.previous.get("scaleUpsBlockedUntil"),
        "scaleUp": p.previous.get("scaleUp"),
        "lowSince": p.previous.get("lowSince"),
        "arrivals": arrivals,
        "peakArrivalRecordsPerSecond": max((float(r) for _, r in arrivals), default=arrival),
    }


def _over_budget(p: _Pass, to: int, reason: str, message: str) -> str | None:
    """Why the budget refuses the change (None: it may be made). A revert always may; a
    scale-down may not spend the hour's last `RESERVED_FOR_SCALE_UP` changes."""
    if reason == c.INEFFECTIVE_SCALE_UP:
        return None
    reserve = RESERVED_FOR_SCALE_UP if to < p.replicas else 0
    left = p.status["budgetLeft"]
    if left > reserve:
        return None
    changes = p.status["changes"]
    kept = (f"; a scale-down never spends the hour's last {RESERVED_FOR_SCALE_UP} change: it is "
            "kept for a scale-up" if reserve else "")
    return (f"would scale {p.replicas} -> {to} ({message}), but {len(changes)} membership "
            f"changes in the last hour left {left} of the budget of "
            f"{p.spec.max_membership_changes_per_hour}{kept}; the oldest leaves the hour at "
            f"{_budget_back(changes)}")


def _spend(p: _Pass, to: int, reason: str, message: str) -> None:
    """Record the change in the status memory and announce it."""
    now = c.rfc3339(p.now)
    p.status["changes"] = [*p.status["changes"], now]
    p.status["budgetLeft"] = max(
        0, p.spec.max_membership_changes_per_hour - len(p.status["changes"]))
    p.status["lastScale"] = {"at": now, "from": p.replicas, "to": to, "reason": reason,
                             "message": message}
    if to > p.replicas:
        p.status["scaleUp"] = {"at": now, "from": p.replicas, "to": to,
                               "rateBefore": round(p.load.rate, 3)}
    p.status["lowSince"] = None
    p.events.append(Event("Warning" if reason == c.INEFFECTIVE_SCALE_UP else "Normal", reason,
                          f"scaling {p.replicas} -> {to}: {message}"))


HOLD_REASONS = (c.AUTOSCALING_HELD, c.REPLICAS_OWNED_ELSEWHERE, c.NO_EVEN_REPLICA_COUNT,
                c.AT_MAX_REPLICAS)
"""Reasons that turn the Autoscaling condition False (and a spent budget)."""
CHANGE_REASONS = (c.SCALING_UP, c.SCALING_DOWN, c.SCALING_TO_VALID_COUNT, c.INEFFECTIVE_SCALE_UP)
"""The reasons of the Events that announce a change."""


def _members(n: int) -> str:
    return f"{n} member" if n == 1 else f"{n} members"


def _budget_back(changes: Sequence[str]) -> str:
    oldest = min((at for t in changes if (at := parse_time(t)) is not None), default=None)
    return c.rfc3339(oldest + HOUR) if oldest else "?"


def _decide(p: _Pass, lag_s: float | None, arrival: float | None, capacity: float | None
            ) -> tuple[int | None, str, str]:
    """(replicas to scale to or None, reason, message), the rules in order."""
    held = _held(p)
    if held is not None:
        return None, *held
    target = p.spec.target_lag_seconds
    revert = _ineffective(p, lag_s, target)
    if revert is not None:
        return revert
    if p.replicas < p.valid[0] or p.replicas > p.valid[-1] or p.replicas not in p.valid:
        to = (_at_least(p.valid, p.replicas) if p.replicas <= p.valid[-1] else p.valid[-1])
        return to, c.SCALING_TO_VALID_COUNT, (
            f"{p.replicas} members do not spread the partitions evenly within "
            f"{p.spec.min_replicas}..{p.spec.max_replicas}; valid counts: "
            f"{', '.join(map(str, p.valid))}")
    assert lag_s is not None
    if lag_s > target:
        p.status["lowSince"] = None
        return _scale_up(p, lag_s, arrival, capacity)
    return _scale_down(p, lag_s, arrival, capacity)


def _held(p: _Pass) -> tuple[str, str] | None:
    """Why no change may be made this pass (reason, message), or None."""
    s = p.situation
    if s.replicas_owner:
        return c.REPLICAS_OWNED_ELSEWHERE, (
            f"spec.replicas is written by {s.replicas_owner} through the scale subresource: "
            "the autoscaler stands aside (remove spec.autoscaling, or stop the other "
            "controller and set spec.replicas in the manifest to hand it back)")
    if not p.valid:
        return c.NO_EVEN_REPLICA_COUNT, (
            f"no member count within {p.spec.min_replicas}..{p.spec.max_replicas} spreads the "
            "partitions evenly (a divisor of the partition count); widen the bounds")
    if s.rollout_in_progress:
        return c.AUTOSCALING_HELD, "a rollout is in progress"
    if s.group_state != "Stable":
        return c.AUTOSCALING_HELD, f"the group is {s.group_state}, not Stable"
    if s.ready < s.replicas:
        return c.AUTOSCALING_HELD, (f"{s.ready} of {s.replicas} members ready: a change or a "
                                    "restart is under way")
    last = parse_time((p.previous.get("lastScale") or {}).get("at"))
    if last is not None and (p.now - last).total_seconds() < SETTLE_S:
        return c.AUTOSCALING_HELD, (
            f"settling after the change at {c.rfc3339(last)} until "
            f"{c.rfc3339(last + timedelta(seconds=SETTLE_S))}: the moved partitions' lag comes "
            "from the brokers' last read until their new owners report it")
    load = p.load
    if load.lag_records is None or load.lag_age_s is None or load.lag_age_s > STALE_LAG_S:
        return c.AUTOSCALING_HELD, "the group's lag is unknown or older than "\
            f"{STALE_LAG_S:.0f} s"
    if not load.members:
        return c.AUTOSCALING_HELD, ("no member reports its throughput yet (/status "
                                    "throughput)")
    return None


def _ineffective(p: _Pass, lag_s: float | None, target: float
                 ) -> tuple[int | None, str, str] | None:
    """The revert of a scale-up that did not raise the processing rate once its check is due;
    no other change before (None: no scale-up is being judged, or it paid)."""
    up = p.previous.get("scaleUp")
    at = parse_time((up or {}).get("at"))
    if not up or at is None:
        return None
    due = at + timedelta(seconds=p.spec.scale_up_check_s)
    if p.now < due:
        return None, c.CHECKING_SCALE_UP, (
            f"the scale-up {up.get('from')} -> {up.get('to')} at {up.get('at')} is judged at "
            f"{c.rfc3339(due)} (it must raise the processing rate by "
            f"{round((EFFECTIVE_GAIN - 1) * 100)} % unless the lag is back on target); no "
            "other change before")
    p.status["scaleUp"] = None
    before = float(up.get("rateBefore") or 0)
    gained = p.load.rate >= before * EFFECTIVE_GAIN
    if gained or (lag_s is not None and lag_s <= target) or p.replicas != up.get("to"):
        return None
    p.status["scaleUpsBlockedUntil"] = c.rfc3339(p.now + timedelta(seconds=INEFFECTIVE_HOLD_S))
    back = int(up.get("from") or p.replicas)
    return back, c.INEFFECTIVE_SCALE_UP, (
        f"the scale-up {back} -> {p.replicas} at {up.get('at')} did not raise the processing "
        f"rate by {round((EFFECTIVE_GAIN - 1) * 100)} % in {p.spec.scale_up_check_s:.0f} s "
        f"({before:.1f} -> {p.load.rate:.1f} records/s) and the lag is still over the target: "
        f"reverted; no scale-up before {p.status['scaleUpsBlockedUntil']} (the bottleneck is "
        "elsewhere: the sink, the brokers, a hot partition)")


def _scale_up(p: _Pass, lag_s: float, arrival: float | None, capacity: float | None
              ) -> tuple[int | None, str, str]:
    target = p.spec.target_lag_seconds
    shown = "no records processed" if math.isinf(lag_s) else f"{lag_s:.0f} s"
    blocked = parse_time(p.previous.get("scaleUpsBlockedUntil"))
    if blocked is not None and p.now < blocked:
        return None, c.AUTOSCALING_HELD, (
            f"lag {shown} over the target {target:.0f} s, but scale-ups wait until "
            f"{c.rfc3339(blocked)} after an ineffective one")
    if p.replicas >= p.valid[-1]:
        return None, c.AT_MAX_REPLICAS, (
            f"lag {shown} over the target {target:.0f} s at {p.replicas} members, the most "
            f"allowed (maxReplicas {p.spec.max_replicas}, {p.valid[-1]} the largest even count)")
    lag = p.load.lag_records or 0
    need = members_needed((arrival or p.load.rate) + lag / target, capacity)
    if need is None:
        return None, c.AUTOSCALING_HELD, (
            f"lag {shown} over the target {target:.0f} s but no member processes records: "
            "more members would not help (see MembersStalled)")
    to = _at_least(p.valid, max(need, p.replicas + 1))
    arriving = "arrival not measured yet" if arrival is None else f"{arrival:.1f} arriving"
    return to, c.SCALING_UP, (
        f"lag {shown} over the target {target:.0f} s ({lag} records, "
        f"{p.load.rate:.1f} records/s processed, {arriving}); {capacity or 0:.1f} records/s "
        f"per member: {_members(need)} {'brings' if need == 1 else 'bring'} it under the "
        "target")


def _scale_down(p: _Pass, lag_s: float, arrival: float | None, capacity: float | None
                ) -> tuple[int | None, str, str]:
    target = p.spec.target_lag_seconds
    if lag_s > target / 2 or arrival is None:
        p.status["lowSince"] = None
        return None, c.LAG_ON_TARGET, (f"lag {lag_s:.0f} s within the target {target:.0f} s")
    since = parse_time(p.previous.get("lowSince")) or p.now
    peak = max(float(p.status["peakArrivalRecordsPerSecond"] or 0), arrival)
    p.status["lowSince"] = c.rfc3339(since)
    need = members_needed(peak, capacity)
    to = _at_least(p.valid, max(need or 0, 1)) if need is not None else p.replicas
    if to >= p.replicas:
        return None, c.LAG_ON_TARGET, (f"lag {lag_s:.0f} s within the target {target:.0f} s; "
                                       f"{_members(p.replicas)} needed for {peak:.1f} records/s")
    waited = (p.now - since).total_seconds()
    if waited < p.spec.scale_down_window_s:
        return None, c.LAG_ON_TARGET, (
            f"lag {lag_s:.0f} s under half the target for {waited:.0f} s: {_members(to)} would "
            f"do (the peak {peak:.1f} records/s at {capacity or 0:.1f} per member); scaling "
            f"down after {p.spec.scale_down_window_s:.0f} s")
    return to, c.SCALING_DOWN, (
        f"lag under half the target {target:.0f} s for {waited:.0f} s; the peak arrival in "
        f"that window, {peak:.1f} records/s, needs {_members(to)} at {capacity or 0:.1f} "
        "records/s each")
