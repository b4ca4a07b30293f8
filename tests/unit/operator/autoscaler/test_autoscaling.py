"""The autoscaler's decision, rule by rule (decisions/autoscaler/rules.py)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from staticfleet.decisions import conditions as c
from staticfleet.decisions.autoscaler.load import Load, MemberLoad
from staticfleet.decisions.autoscaler.rules import (
    Situation,
    decide_autoscaling,
    members_needed,
    valid_replicas,
)
from staticfleet.decisions.spec.autoscaling import AutoscalingSpec

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 25, 3, 0, 0, tzinfo=UTC)
SPEC = AutoscalingSpec(min_replicas=1, max_replicas=24, target_lag_seconds=30,
                       max_membership_changes_per_hour=4, scale_down_window_s=600,
                       scale_up_check_s=300)
PARTITIONS = {"orders": 24}


def ago(seconds: float) -> str:
    return c.rfc3339(NOW - timedelta(seconds=seconds))


def members(n: int, rate: float, busy: float) -> tuple[MemberLoad, ...]:
    return tuple(MemberLoad(records_per_second=rate, busy_ratio=busy) for _ in range(n))


def situation(replicas: int = 4, **kw: Any) -> Situation:
    return Situation(**{"replicas": replicas, "ready": replicas, "group_state": "Stable",
                        "rollout_in_progress": False, **kw})


def decide(load: Load, previous: dict[str, Any] | None = None, replicas: int = 4,
           spec: AutoscalingSpec = SPEC, partitions: dict[str, int] | None = None,
           assignor: str | None = "range", **kw: Any):  # type: ignore[no-untyped-def]
    return decide_autoscaling(spec, situation(replicas, **kw), load,
                              partitions or PARTITIONS, assignor, previous or {}, NOW)


def sampled(lag: int, seconds_ago: float = 30, **more: Any) -> dict[str, Any]:
    """A previous status with a lag sample `seconds_ago`."""
    return {"sample": {"at": ago(seconds_ago), "lagRecords": lag}, **more}


# --- which counts are allowed -----------------------------------------------------------------


@pytest.mark.parametrize(("partitions", "assignor", "spec", "expected"), [
    ({"t": 24}, "range", SPEC, (1, 2, 3, 4, 6, 8, 12, 24)),
    ({"t": 24}, "range", AutoscalingSpec(min_replicas=3, max_replicas=10), (3, 4, 6, 8)),
    # the range assignor spreads topic by topic: both topics' counts must divide evenly
    ({"a": 12, "b": 8}, "range", SPEC, (1, 2, 4)),
    # the others spread all partitions together
    ({"a": 12, "b": 8}, "cooperative-sticky", SPEC, (1, 2, 4, 5, 10, 20)),
    ({"a": 12, "b": 8}, None, SPEC, (1, 2, 4, 5, 10, 20)),
    # never above the partition count, whatever maxReplicas says
    ({"t": 6}, "range", AutoscalingSpec(min_replicas=1, max_replicas=64), (1, 2, 3, 6)),
    ({"t": 7}, "range", AutoscalingSpec(min_replicas=2, max_replicas=6), ()),
    ({}, "range", SPEC, ()),
])
def test_replica_counts_are_divisors_of_the_partition_count_within_bounds(
        partitions: dict[str, int], assignor: str | None, spec: AutoscalingSpec,
        expected: tuple[int, ...]) -> None:
    assert valid_replicas(partitions, assignor, spec) == expected


@pytest.mark.parametrize(("demand", "capacity", "expected"), [
    (0, 100, 0), (80, 100, 1), (81, 100, 2), (800, 100, 10), (10, None, None), (10, 0, None),
])
def test_members_needed_plans_on_eighty_percent_of_the_measured_capacity(
        demand: float, capacity: float | None, expected: int | None) -> None:
    assert members_needed(demand, capacity) == expected


# --- scale up ---------------------------------------------------------------------------------


def test_a_lag_over_the_target_scales_up_by_the_step_that_brings_it_under() -> None:
    # 4 members, each busy all the time at 100 records/s: 400/s processed; the lag grew by
    # 100/s over the last 30 s, so 500/s arrive; 24,000 records of lag = 60 s > 30 s.
    load = Load(lag_records=24_000, lag_age_s=5, members=members(4, 100, 1.0))
    out = decide(load, sampled(21_000))
    # (500 + 24000 / 30) / (100 * 0.8) = 16.25 -> 17 members -> 24 (the next divisor of 24)
    assert out.scale_to == 24
    assert out.condition == ("True", c.SCALING_UP, out.condition[2])
    assert "lag 60 s over the target 30 s" in out.condition[2]
    assert out.status["lagSeconds"] == 60.0
    assert out.status["arrivalRecordsPerSecond"] == 500.0
    assert out.status["changes"] == [c.rfc3339(NOW)]
    assert out.status["budgetLeft"] == 3
    assert out.status["scaleUp"] == {"at": c.rfc3339(NOW), "from": 4, "to": 24,
                                     "rateBefore": 400.0}
    assert [(e.type, e.reason) for e in out.events] == [("Normal", c.SCALING_UP)]
    assert "scaling 4 -> 24" in out.events[0].message


def test_a_scale_up_is_at_least_one_count_and_capped_at_the_largest_even_count() -> None:
    # lag 31 s with members a quarter busy: 3 members would do, but a scale-up moves to the
    # next even count at least (4 -> 6 of 24)
    load = Load(lag_records=12_400, lag_age_s=5, members=members(4, 100, 0.25))
    assert decide(load, sampled(12_400)).scale_to == 6
    spec = AutoscalingSpec(min_replicas=1, max_replicas=10, target_lag_seconds=30)
    big = Load(lag_records=240_000, lag_age_s=5, members=members(4, 100, 1.0))
    assert decide(big, sampled(240_000), spec=spec).scale_to == 8


def test_at_max_replicas_the_condition_says_so_and_nothing_changes() -> None:
    spec = AutoscalingSpec(min_replicas=1, max_replicas=8, target_lag_seconds=30)
    load = Load(lag_records=100_000, lag_age_s=5, members=members(8, 100, 1.0))
    out = decide(load, sampled(100_000), replicas=8, spec=spec)
    assert out.scale_to is None
    assert out.condition[:2] == ("False", c.AT_MAX_REPLICAS)
    assert "maxReplicas 8" in out.condition[2]
    assert out.events == ()


def test_a_backlog_nobody_processes_is_not_scaled_it_is_a_stall() -> None:
    load = Load(lag_records=5_000, lag_age_s=5, members=members(4, 0, 0.0))
    out = decide(load, sampled(5_000))
    assert out.scale_to is None
    assert out.condition[:2] == ("False", c.AUTOSCALING_HELD)
    assert "no member processes records" in out.condition[2]
    assert out.lag_seconds == math.inf and out.status["lagSeconds"] is None


# --- scale down -------------------------------------------------------------------------------


def test_low_load_scales_down_only_after_the_window_to_one_merged_step() -> None:
    # 12 members at 20 % busy (capacity 100/s each), 240/s processed, no lag growth.
    low = Load(lag_records=100, lag_age_s=5, members=members(12, 20, 0.2))
    first = decide(low, sampled(100), replicas=12)
    assert first.scale_to is None
    assert first.condition[1] == c.LAG_ON_TARGET
    assert first.status["lowSince"] == c.rfc3339(NOW)
    assert "scaling down after 600 s" in first.condition[2]
    # a higher arrival earlier in the window sets the step: the peak of 400/s needs 5 -> 6
    during = decide(low, sampled(100, lowSince=ago(300), arrivals=[[ago(300), 400]]),
                    replicas=12)
    assert during.scale_to is None and during.status["lowSince"] == ago(300)
    after = decide(low, sampled(100, lowSince=ago(601), arrivals=[[ago(500), 400]]),
                   replicas=12)
    assert after.scale_to == 6
    assert after.condition[:2] == ("True", c.SCALING_DOWN)
    assert "400.0 records/s, needs 6 members" in after.condition[2]
    assert after.status["lowSince"] is None and after.status["scaleUp"] is None
    # the window slides: a peak older than the window no longer counts (240/s: 3 -> 3)
    later = decide(low, sampled(100, lowSince=ago(900), arrivals=[[ago(700), 400]]),
                   replicas=12)
    assert later.scale_to == 3
    assert later.status["arrivals"] == [[c.rfc3339(NOW), 240.0]]


def test_a_lag_above_half_the_target_restarts_the_low_window() -> None:
    load = Load(lag_records=4_000, lag_age_s=5, members=members(12, 200, 1.0))  # 1.7 s
    assert decide(load, sampled(4_000, lowSince=ago(500)), replicas=12).status["lowSince"]
    mid = Load(lag_records=50_000, lag_age_s=5, members=members(12, 200, 1.0))  # 20.8 s
    out = decide(mid, sampled(50_000, lowSince=ago(500)), replicas=12)
    assert out.status["lowSince"] is None and out.scale_to is None


def test_a_measured_full_batch_capacity_beats_the_busy_share_estimate() -> None:
    # small batches: 20 records/s at 50 % busy reads as 40/s per member; full batches showed
    # 100/s. 12 members, 240/s: the estimate goes down to 8 (240 / 32 = 7.5), the measurement
    # to 3 (240 / 80).
    small = Load(lag_records=0, lag_age_s=5, members=members(12, 20, 0.5))
    assert decide(small, sampled(0, lowSince=ago(700)), replicas=12).scale_to == 8
    full = Load(lag_records=0, lag_age_s=5, members=tuple(
        MemberLoad(20, 0.5, full_batch_capacity=100.0) for _ in range(12)))
    assert decide(full, sampled(0, lowSince=ago(700)), replicas=12).scale_to == 3


def test_never_below_min_replicas() -> None:
    spec = AutoscalingSpec(min_replicas=4, max_replicas=24, target_lag_seconds=30,
                           scale_down_window_s=60)
    idle = Load(lag_records=0, lag_age_s=5, members=members(12, 1, 0.01))
    out = decide(idle, sampled(0, lowSince=ago(120)), replicas=12, spec=spec)
    assert out.scale_to == 4


# --- ineffective scale-ups --------------------------------------------------------------------


def up(seconds_ago: float, rate_before: float, frm: int = 4, to: int = 8) -> dict[str, Any]:
    return {"at": ago(seconds_ago), "from": frm, "to": to, "rateBefore": rate_before}


def test_a_scale_up_that_did_not_raise_throughput_is_reverted_and_scale_ups_wait() -> None:
    # 8 members, but 400/s as before the scale-up (a slow sink): lag still 100 s
    load = Load(lag_records=40_000, lag_age_s=5, members=members(8, 50, 1.0))
    out = decide(load, sampled(40_000, scaleUp=up(301, 400)), replicas=8)
    assert out.scale_to == 4
    assert out.condition[:2] == ("True", c.INEFFECTIVE_SCALE_UP)
    assert "400.0 -> 400.0 records/s" in out.condition[2]
    assert [(e.type, e.reason) for e in out.events] == [("Warning", c.INEFFECTIVE_SCALE_UP)]
    blocked = out.status["scaleUpsBlockedUntil"]
    assert blocked == c.rfc3339(NOW + timedelta(hours=1))
    # the next pass, back at 4 with the lag over the target: no scale-up before then
    again = decide(Load(lag_records=40_000, lag_age_s=5, members=members(4, 100, 1.0)),
                   sampled(40_000, scaleUpsBlockedUntil=blocked))
    assert again.scale_to is None
    assert again.condition[:2] == ("False", c.AUTOSCALING_HELD)
    assert "after an ineffective one" in again.condition[2]


@pytest.mark.parametrize(("rate", "lag", "outcome"), [
    (54, 40_000, c.INEFFECTIVE_SCALE_UP),  # 432/s < 440/s, lag over target: reverted
    (56, 40_000, c.SCALING_UP),            # 448/s >= 440/s: it paid; still over: scale again
    (54, 500, c.LAG_ON_TARGET),            # < +10 %, but the lag is on target: it did its job
])
def test_a_scale_up_is_judged_once_its_check_is_due(rate: float, lag: int, outcome: str) -> None:
    load = Load(lag_records=lag, lag_age_s=5, members=members(8, rate, 1.0))
    out = decide(load, sampled(lag, scaleUp=up(301, 400)), replicas=8)
    assert out.condition[1] == outcome
    assert (out.scale_to == 4) is (outcome == c.INEFFECTIVE_SCALE_UP)
    assert out.status["scaleUp"] != up(301, 400)  # judged: not judged again


def test_until_its_check_a_scale_up_is_given_time_to_show() -> None:
    load = Load(lag_records=40_000, lag_age_s=5, members=members(8, 50, 1.0))
    out = decide(load, sampled(40_000, scaleUp=up(120, 400)), replicas=8)
    assert out.scale_to is None
    assert out.condition[:2] == ("True", c.CHECKING_SCALE_UP)
    assert "judged at 2026-11-25T03:03:00Z" in out.condition[2]
    assert out.status["scaleUp"] == up(120, 400)


# --- the budget -------------------------------------------------------------------------------


def test_a_spent_budget_says_what_it_would_have_done() -> None:
    load = Load(lag_records=24_000, lag_age_s=5, members=members(4, 100, 1.0))
    spent = [ago(3500), ago(2000), ago(1000), ago(10)]
    out = decide(load, sampled(21_000, changes=[ago(3700), *spent]))
    assert out.scale_to is None
    assert out.condition[0] == "False" and out.condition[1] == c.SCALING_BUDGET_SPENT
    assert out.condition[2].startswith("would scale 4 -> 24 (lag 60 s over the target")
    assert f"the oldest leaves the hour at {c.rfc3339(NOW + timedelta(seconds=100))}" \
        in out.condition[2]
    assert out.status["changes"] == spent  # the change older than an hour is forgotten
    assert out.status["budgetLeft"] == 0
    assert out.desired == out.status["desiredReplicas"] == 24  # what it wants, not what it did
    assert out.events == ()


def test_a_scale_down_keeps_the_hours_last_change_for_a_scale_up() -> None:
    low = Load(lag_records=0, lag_age_s=5, members=members(12, 20, 0.2))
    three = [ago(3000), ago(2000), ago(1000)]
    out = decide(low, sampled(0, lowSince=ago(700), changes=three), replicas=12)
    assert out.scale_to is None
    assert out.condition[:2] == ("False", c.SCALING_BUDGET_SPENT)
    assert "would scale 12 -> 3" in out.condition[2]
    assert "kept for a scale-up" in out.condition[2]
    high = Load(lag_records=24_000, lag_age_s=5, members=members(4, 100, 1.0))
    assert decide(high, sampled(21_000, changes=three)).scale_to == 24
    two = decide(low, sampled(0, lowSince=ago(700), changes=three[1:]), replicas=12)
    assert two.scale_to == 3 and two.status["budgetLeft"] == 1


def test_a_revert_is_made_even_with_the_budget_spent() -> None:
    load = Load(lag_records=40_000, lag_age_s=5, members=members(8, 50, 1.0))
    spent = [ago(3000), ago(2000), ago(1000), ago(301)]
    out = decide(load, sampled(40_000, changes=spent, scaleUp=up(301, 400)), replicas=8)
    assert out.scale_to == 4
    assert len(out.status["changes"]) == 5 and out.status["budgetLeft"] == 0


# --- what holds it ------------------------------------------------------------------------------


HIGH = Load(lag_records=24_000, lag_age_s=5, members=members(4, 100, 1.0))


@pytest.mark.parametrize(("kw", "load", "words"), [
    ({"rollout_in_progress": True}, HIGH, "a rollout is in progress"),
    ({"group_state": "PreparingRebalance"}, HIGH, "the group is PreparingRebalance"),
    ({"ready": 3}, HIGH, "3 of 4 members ready"),
    ({}, Load(lag_records=None, lag_age_s=None, members=members(4, 100, 1.0)), "unknown"),
    ({}, Load(lag_records=24_000, lag_age_s=300, members=members(4, 100, 1.0)), "older than"),
    ({}, Load(lag_records=24_000, lag_age_s=5, members=()), "no member reports"),
])
def test_no_change_while_something_holds_the_group(kw: dict[str, Any], load: Load,
                                                  words: str) -> None:
    out = decide(load, sampled(21_000, lowSince=ago(50)), **kw)
    assert out.scale_to is None
    assert out.condition[:2] == ("False", c.AUTOSCALING_HELD)
    assert words in out.condition[2]
    assert out.status["lowSince"] == ago(50)  # a hold keeps the low window's start


def test_no_decision_while_the_figures_settle_after_a_change() -> None:
    last = {"at": ago(10), "from": 2, "to": 1, "reason": c.SCALING_DOWN, "message": "..."}
    out = decide(HIGH, sampled(21_000, lastScale=last))
    assert out.scale_to is None
    assert out.condition[:2] == ("False", c.AUTOSCALING_HELD)
    assert "settling after the change at" in out.condition[2]
    later = decide(HIGH, sampled(21_000, lastScale={**last, "at": ago(31)}))
    assert later.scale_to == 24


def test_it_stands_aside_while_another_controller_owns_replicas() -> None:
    out = decide(HIGH, sampled(21_000), replicas_owner="keda-operator")
    assert out.scale_to is None
    assert out.condition[:2] == ("False", c.REPLICAS_OWNED_ELSEWHERE)
    assert "keda-operator" in out.condition[2]


def test_no_even_count_within_the_bounds_is_reported() -> None:
    spec = AutoscalingSpec(min_replicas=5, max_replicas=5)
    out = decide(HIGH, sampled(21_000), spec=spec)
    assert out.condition[:2] == ("False", c.NO_EVEN_REPLICA_COUNT)
    assert out.scale_to is None


def test_a_count_that_does_not_spread_evenly_is_moved_to_one_that_does() -> None:
    steady = Load(lag_records=10, lag_age_s=5, members=members(5, 50, 0.5))
    out = decide(steady, sampled(10), replicas=5)
    assert out.scale_to == 6
    assert out.condition[1] == c.SCALING_TO_VALID_COUNT
    above = decide(steady, sampled(10), replicas=30)
    assert above.scale_to == 24


# --- the figures ------------------------------------------------------------------------------


def test_the_arrival_rate_needs_two_samples_far_enough_apart() -> None:
    load = Load(lag_records=1_000, lag_age_s=5, members=members(4, 100, 0.5))
    first = decide(load)
    assert first.status["arrivalRecordsPerSecond"] is None
    assert first.status["sample"] == {"at": c.rfc3339(NOW), "lagRecords": 1_000}
    soon = decide(load, sampled(400, seconds_ago=5, arrivalRecordsPerSecond=321.0))
    assert soon.status["arrivalRecordsPerSecond"] == 321.0
    assert soon.status["sample"]["at"] == ago(5)
    later = decide(load, sampled(400, seconds_ago=20, arrivals=[[ago(40), 300.0]]))
    assert later.status["arrivalRecordsPerSecond"] == 430.0  # 400 + 600 / 20
    assert later.status["arrivals"] == [[ago(40), 300.0], [c.rfc3339(NOW), 430.0]]
    assert later.status["peakArrivalRecordsPerSecond"] == 430.0
    shrinking = decide(load, sampled(100_000, seconds_ago=20))
    assert shrinking.status["arrivalRecordsPerSecond"] == 0.0


def ends(age: float, *offsets: int, topic: str = "orders") -> dict[tuple[str, int], Any]:
    """End offsets of partitions 0.. of `topic`, all read `age` seconds ago."""
    return {(topic, p): (age, end) for p, end in enumerate(offsets)}


def end_sampled(seconds_ago: float, *offsets: int, **more: Any) -> dict[str, Any]:
    """A previous status with a per-partition end-offset sample `seconds_ago`."""
    return {"sample": {"endOffsets": [{"at": c.rfc3339_ms(NOW - timedelta(seconds=seconds_ago)),
                                       "offsets": [["orders", p, end]
                                                   for p, end in enumerate(offsets)]}]},
            **more}


def test_the_arrival_rate_is_the_growth_of_the_end_offsets_the_brokers_report() -> None:
    # what the brokers' end offsets say wins over the members' minute-long rate: right after a
    # load dropped, members still average the load, the end offsets do not
    def load(e: dict[tuple[str, int], Any]) -> Load:
        return Load(lag_records=1_000, lag_age_s=5, members=members(4, 100, 0.5), end_offsets=e)
    first = decide(load(ends(10, 20_000, 30_000)))
    assert first.status["arrivalRecordsPerSecond"] is None
    assert first.status["sample"] == end_sampled(10, 20_000, 30_000)["sample"]
    # the same read again (the brokers are asked once a minute): nothing new
    same = decide(load(ends(40, 20_000, 30_000)),
                  end_sampled(40, 20_000, 30_000, arrivalRecordsPerSecond=33.0))
    assert same.status["arrivalRecordsPerSecond"] == 33.0
    assert same.status["sample"] == end_sampled(40, 20_000, 30_000)["sample"]
    later = decide(load(ends(5, 20_500, 30_700)), end_sampled(65, 20_000, 30_000))
    assert later.status["arrivalRecordsPerSecond"] == 20.0  # 1,200 records in 60 s
    assert later.status["arrivals"] == [[c.rfc3339(NOW), 20.0]]
    assert later.status["sample"] == end_sampled(5, 20_500, 30_700)["sample"]
    # a previous sample of the lag-based kind, or an older operator's total, is replaced
    for kind in (sampled(400, seconds_ago=30), {"sample": {"at": ago(30), "endOffsets": 9}}):
        switched = decide(load(ends(5, 20_500, 30_700)), kind)
        assert switched.status["sample"] == end_sampled(5, 20_500, 30_700)["sample"]
        assert switched.status["arrivalRecordsPerSecond"] is None


ARRIVALS: list[tuple[str, dict[str, Any], dict[tuple[str, int], Any] | None, float | None]] = [
    # issue 34 item 5: 2 partitions at t=0, 4 at t=20 s on an idle topic was 100,000/s
    ("more partitions now: only the ones in both count", end_sampled(20, 100_000, 100_000),
     ends(0, 100_000, 100_000, 100_000, 100_000), 0.0),
    ("fewer partitions now (a failed read): no zero for the missing one",
     end_sampled(20, 100_000, 100_000, 100_000), ends(0, 100_200, 100_200), 20.0),
    ("no end offset read at all: no sample, the last rate kept",
     end_sampled(20, 100_000, arrivalRecordsPerSecond=7.0), None, 7.0),
    ("a partition whose end went back starts over, the others count",
     end_sampled(20, 100_000, 100_000), ends(0, 5, 100_400), 20.0),
    ("a partition read again too soon waits, the others count",
     {"sample": {"endOffsets": [
         {"at": c.rfc3339_ms(NOW - timedelta(seconds=20)), "offsets": [["orders", 0, 100]]},
         {"at": c.rfc3339_ms(NOW - timedelta(seconds=5)), "offsets": [["orders", 1, 100]]}]}},
     ends(0, 300, 900_000), 10.0),
    ("each partition over its own interval",
     {"sample": {"endOffsets": [
         {"at": c.rfc3339_ms(NOW - timedelta(seconds=20)), "offsets": [["orders", 0, 100]]},
         {"at": c.rfc3339_ms(NOW - timedelta(seconds=40)), "offsets": [["orders", 1, 100]]}]}},
     ends(0, 300, 500), 20.0),
]


@pytest.mark.parametrize(("what", "previous", "now", "expected"), ARRIVALS,
                         ids=[a[0] for a in ARRIVALS])
def test_the_arrival_rate_compares_each_partition_with_itself(
        what: str, previous: dict[str, Any], now: dict[tuple[str, int], Any] | None,
        expected: float | None) -> None:
    out = decide(Load(lag_records=0, lag_age_s=5, members=members(4, 100, 0.5),
                      end_offsets=now), previous)
    assert out.status["arrivalRecordsPerSecond"] == expected


def test_a_partition_read_again_too_soon_keeps_its_older_figure_in_the_sample() -> None:
    previous = {"sample": {"endOffsets": [
        {"at": c.rfc3339_ms(NOW - timedelta(seconds=20)), "offsets": [["orders", 0, 100]]},
        {"at": c.rfc3339_ms(NOW - timedelta(seconds=5)), "offsets": [["orders", 1, 100]]}]}}
    out = decide(Load(lag_records=0, lag_age_s=5, end_offsets=ends(0, 300, 900)), previous)
    assert out.status["sample"] == {"endOffsets": [
        {"at": c.rfc3339_ms(NOW - timedelta(seconds=5)), "offsets": [["orders", 1, 100]]},
        {"at": c.rfc3339_ms(NOW), "offsets": [["orders", 0, 300]]}]}


def test_lag_seconds_is_the_backlog_at_the_measured_rate() -> None:
    out = decide(Load(lag_records=1_200, lag_age_s=5, members=members(4, 100, 0.5)))
    assert out.lag_seconds == 3.0 and out.status["lagSeconds"] == 3.0
    assert out.status["memberCapacityRecordsPerSecond"] == 200.0
    none = decide(Load(lag_records=0, lag_age_s=5, members=members(4, 0, 0.0)))
    assert none.lag_seconds == 0.0
