"""The operator's metric series: broker-side lag, counters that start at 0, series of deleted
groups dropped."""

from __future__ import annotations

import pytest

from staticfleet import metrics
from staticfleet.decisions.actions import MetricValues

pytestmark = pytest.mark.unit


def value(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


def test_lag_per_partition_and_its_sum_and_partitions_that_went_are_dropped() -> None:
    ids = {"namespace": "ns", "group": "lagging", "consumergroup": "orders"}
    metrics.export("ns", "lagging", MetricValues(
        lag={("t", 0): 5, ("t", 1): 0, ("u", 0): 7}, group_id="orders"), 0.1)
    assert value("staticfleet_consumergroup_lag", **ids, topic="t", partition="0") == 5
    assert value("staticfleet_consumergroup_lag_sum", **ids) == 12
    metrics.export("ns", "lagging", MetricValues(lag={("t", 0): 1}, group_id="orders"), 0.1)
    assert value("staticfleet_consumergroup_lag", **ids, topic="u", partition="0") is None
    assert value("staticfleet_consumergroup_lag_sum", **ids) == 1
    metrics.export("ns", "lagging", MetricValues(lag=None, group_id="orders"), 0.1)
    assert value("staticfleet_consumergroup_lag_sum", **ids) == 1, "not read: kept as it was"
    metrics.forget("ns", "lagging")
    assert value("staticfleet_consumergroup_lag", **ids, topic="t", partition="0") is None
    assert value("staticfleet_consumergroup_lag_sum", **ids) is None


def test_counters_show_zero_from_the_first_pass() -> None:
    metrics.export("ns", "quiet", MetricValues(), 0.1)
    ids = {"namespace": "ns", "group": "quiet"}
    assert value("staticfleet_rebalances_total", **ids) == 0
    assert value("staticfleet_planned_rebalances_total", **ids) == 0
    assert value("staticfleet_timeout_changes_total", **ids, timeout="session") == 0
    metrics.forget("ns", "quiet")
    assert value("staticfleet_rebalances_total", **ids) is None


def test_rebalances_by_cause_start_at_zero_for_every_cause_and_count_each_pass() -> None:
    from staticfleet.decisions.rebalance.causes import CAUSES

    ids = {"namespace": "ns", "group": "ledgered"}
    metrics.export("ns", "ledgered", MetricValues(), 0.1)
    assert {cause: value("staticfleet_rebalances_by_cause_total", **ids, cause=cause)
            for cause in CAUSES} == dict.fromkeys(CAUSES, 0)
    metrics.export("ns", "ledgered", MetricValues(
        rebalances=2, rebalance_causes={"scale": 1, "foreign_member": 1}), 0.1)
    metrics.export("ns", "ledgered", MetricValues(rebalance_causes={"unknown": 1}), 0.1)
    assert value("staticfleet_rebalances_by_cause_total", **ids, cause="scale") == 1
    assert value("staticfleet_rebalances_by_cause_total", **ids, cause="foreign_member") == 1
    assert value("staticfleet_rebalances_by_cause_total", **ids, cause="unknown") == 1
    assert value("staticfleet_rebalances_by_cause_total", **ids, cause="rollout") == 0
    assert value("staticfleet_rebalances_total", **ids) == 2, "the unlabelled total as before"
    metrics.forget("ns", "ledgered")
    assert value("staticfleet_rebalances_by_cause_total", **ids, cause="unknown") is None


def test_the_autoscaler_series_exist_while_spec_autoscaling_does() -> None:
    import math

    from staticfleet.decisions.actions import AutoscalingFigures

    ids = {"namespace": "ns", "group": "auto"}
    figures = AutoscalingFigures(lag_seconds=12.5, target_lag_seconds=30,
                                 desired_replicas=6, budget_left=3)
    metrics.export("ns", "auto", MetricValues(group_id="orders", autoscaling=figures), 0.1)
    assert value("staticfleet_consumergroup_lag_seconds", **ids, consumergroup="orders") == 12.5
    assert value("staticfleet_autoscaler_target_lag_seconds", **ids) == 30
    assert value("staticfleet_autoscaler_desired_replicas", **ids) == 6
    assert value("staticfleet_autoscaler_budget_left", **ids) == 3
    never = AutoscalingFigures(lag_seconds=math.inf, target_lag_seconds=30, desired_replicas=6,
                               budget_left=3)
    metrics.export("ns", "auto", MetricValues(group_id="orders", autoscaling=never), 0.1)
    assert value("staticfleet_consumergroup_lag_seconds", **ids, consumergroup="orders") == \
        math.inf
    # a pass that failed keeps them; spec.autoscaling removed drops them
    metrics.export("ns", "auto", MetricValues(error="KafkaUnreachable"), 0.1)
    assert value("staticfleet_autoscaler_budget_left", **ids) == 3
    metrics.export("ns", "auto", MetricValues(group_id="orders"), 0.1)
    assert value("staticfleet_autoscaler_budget_left", **ids) is None
    assert value("staticfleet_consumergroup_lag_seconds", **ids, consumergroup="orders") is None
    metrics.forget("ns", "auto")
