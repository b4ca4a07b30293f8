"""The operator's Prometheus metrics (names and labels: docs/contracts.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from staticfleet.decisions.actions import MetricValues
from staticfleet.decisions.rebalance.causes import CAUSES

REGISTRY = CollectorRegistry(auto_describe=True)
LABELS = ("namespace", "group")

REBALANCES = Counter(
    "staticfleet_rebalances", "Rebalances of the group the operator observed",
    LABELS, registry=REGISTRY)
PLANNED_REBALANCES = Counter(
    "staticfleet_planned_rebalances",
    "Of the rebalances observed, the ones the operator asked for (scale-down leaves, scale-up "
    "joins, a rejoin that assigns unowned partitions)", LABELS, registry=REGISTRY)
REBALANCES_BY_CAUSE = Counter(
    "staticfleet_rebalances_by_cause",
    "Rebalances of the group the operator observed, by the cause its ledger gave each "
    "(docs/contracts.md: Why the group rebalanced)", (*LABELS, "cause"), registry=REGISTRY)
UNASSIGNED_PARTITIONS = Gauge(
    "staticfleet_group_unassigned_partitions",
    "Partitions of the subscribed topics no member owns while the group is Stable", LABELS,
    registry=REGISTRY)
STALLED_MEMBERS = Gauge(
    "staticfleet_stalled_members",
    "Members that hold partitions with records waiting and fetched nothing for longer than "
    "their bound (condition MembersStalled)", LABELS, registry=REGISTRY)
SLOW_MEMBERS = Gauge(
    "staticfleet_slow_members",
    "Members whose /status did not answer within the operator's deadline (or answered more "
    "than it reads) on the group's last pass (Event MemberStatusSlow)", LABELS,
    registry=REGISTRY)
OVERDUE_BATCHES = Gauge(
    "staticfleet_overdue_batches",
    "Members whose batch in flight runs past its bound (5 x the slowest batch measured for the "
    "group, at least max.poll.interval.ms): a hung transform or sink (condition MembersStalled, "
    "reason BatchOverdue); never restarted for it", LABELS, registry=REGISTRY)
STALLED_RESTARTS = Counter(
    "staticfleet_stalled_member_restarts", "Stalled members the operator restarted", LABELS,
    registry=REGISTRY)
ROLLOUT_DURATION = Histogram(
    "staticfleet_rollout_duration_seconds", "Duration of finished rollouts", LABELS,
    buckets=(10, 30, 60, 120, 300, 600, 1200, 3600), registry=REGISTRY)
ROLLOUTS = Counter(
    "staticfleet_rollouts", "Rollouts by result", (*LABELS, "result"), registry=REGISTRY)
MEMBER_ABSENCE = Histogram(
    "staticfleet_member_absence_seconds",
    "From a member's stop to its return to the group with its partitions", LABELS,
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 120, 300), registry=REGISTRY)
MEMBER_PROCESSING_GAP = Histogram(
    "staticfleet_member_processing_gap_seconds",
    "From a restarted member's last processed batch to its replacement's first", LABELS,
    buckets=(0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 45, 60, 120, 300), registry=REGISTRY)
ROLLOUT_IN_PROGRESS = Gauge(
    "staticfleet_rollout_in_progress", "1 while a rollout runs", LABELS, registry=REGISTRY)
ROLLOUT_AT_RISK = Gauge(
    "staticfleet_rollout_at_risk",
    "1 when a rollout stopped (or would not start) because a restart runs late against the "
    "session timeout", LABELS, registry=REGISTRY)
TIMEOUT_CHANGES = Counter(
    "staticfleet_timeout_changes", "Changes of an effective client timeout",
    (*LABELS, "timeout"), registry=REGISTRY)
EFFECTIVE_TIMEOUT = Gauge(
    "staticfleet_effective_timeout_seconds", "Effective client timeouts",
    (*LABELS, "timeout"), registry=REGISTRY)
GROUP_MEMBERS = Gauge(
    "staticfleet_group_members", "Members by state", (*LABELS, "state"), registry=REGISTRY)
GROUP_PARTITIONS = Gauge(
    "staticfleet_group_partitions", "Partitions of the subscribed topics", LABELS,
    registry=REGISTRY)
IDLE_MEMBERS = Gauge(
    "staticfleet_group_idle_members", "Members beyond the partition count (they get nothing)",
    LABELS, registry=REGISTRY)
RECONCILE_ERRORS = Counter(
    "staticfleet_reconcile_errors", "Reconcile passes that ended in an error",
    (*LABELS, "reason"), registry=REGISTRY)
RECONCILE_LAST = Gauge(
    "staticfleet_reconcile_last_timestamp_seconds",
    "When the operator last finished a reconcile pass over the group (Unix time)", LABELS,
    registry=REGISTRY)
# Lag from the broker's side (committed offsets against end offsets), named the way
# kafka_exporter users know it: a per-partition lag and a per-group sum, label `consumergroup`.
CONSUMERGROUP_LAG = Gauge(
    "staticfleet_consumergroup_lag",
    "End offset minus the group's committed offset, per partition (as the broker sees it: "
    "shown while every member is down)", (*LABELS, "consumergroup", "topic", "partition"),
    registry=REGISTRY)
CONSUMERGROUP_LAG_SUM = Gauge(
    "staticfleet_consumergroup_lag_sum", "The group's lag summed over its partitions",
    (*LABELS, "consumergroup"), registry=REGISTRY)
CONSUMERGROUP_LAG_AGE = Gauge(
    "staticfleet_consumergroup_lag_age_seconds",
    "How old the oldest of the group's lag figures is (members report theirs every 5 s; a "
    "broker read that fails leaves its figures as they were)", (*LABELS, "consumergroup"),
    registry=REGISTRY)
CONSUMERGROUP_LAG_SECONDS = Gauge(
    "staticfleet_consumergroup_lag_seconds",
    "The group's lag in seconds: its backlog divided by the records per second its members "
    "process (+Inf: a backlog nothing processes); with spec.autoscaling only",
    (*LABELS, "consumergroup"), registry=REGISTRY)
AUTOSCALER_TARGET_LAG = Gauge(
    "staticfleet_autoscaler_target_lag_seconds", "spec.autoscaling.targetLagSeconds", LABELS,
    registry=REGISTRY)
AUTOSCALER_DESIRED = Gauge(
    "staticfleet_autoscaler_desired_replicas",
    "The member count the autoscaler wants (compare staticfleet_group_members{state=desired})",
    LABELS, registry=REGISTRY)
AUTOSCALER_BUDGET_LEFT = Gauge(
    "staticfleet_autoscaler_budget_left",
    "Scale changes the autoscaler may still make in the current hour "
    "(spec.autoscaling.maxMembershipChangesPerHour)", LABELS, registry=REGISTRY)
AUTOSCALER_METRICS = (AUTOSCALER_TARGET_LAG, AUTOSCALER_DESIRED, AUTOSCALER_BUDGET_LEFT)
_LAG_SERIES: dict[tuple[str, str], set[tuple[str, ...]]] = {}
"""The partition series each ConsumerGroup exported last, to drop the ones that went."""
RECONCILE_QUEUE = Gauge(
    "staticfleet_reconcile_queue_depth",
    "Passes that are due and wait for a slot of their Kafka cluster (at most "
    "STATICFLEET_WORKERS / 2 run at once per cluster)", registry=REGISTRY)
RECONCILE_DURATION = Histogram(
    "staticfleet_reconcile_duration_seconds", "One reconcile pass: gather, decide, execute",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=REGISTRY)


def forget(namespace: str, group: str) -> None:
    """Drop the series of a deleted ConsumerGroup so they do not linger."""
    for metric in (ROLLOUT_IN_PROGRESS, ROLLOUT_AT_RISK, GROUP_PARTITIONS, IDLE_MEMBERS,
                   RECONCILE_LAST, UNASSIGNED_PARTITIONS, STALLED_MEMBERS, STALLED_RESTARTS,
                   SLOW_MEMBERS, OVERDUE_BATCHES, *AUTOSCALER_METRICS):
        with contextlib.suppress(KeyError):
            metric.remove(namespace, group)
    for timeout in ("session", "heartbeat", "max_poll"):
        with contextlib.suppress(KeyError):
            EFFECTIVE_TIMEOUT.remove(namespace, group, timeout)
    for state in ("desired", "ready"):
        with contextlib.suppress(KeyError):
            GROUP_MEMBERS.remove(namespace, group, state)
    for labels in _LAG_SERIES.pop((namespace, group), set()):
        with contextlib.suppress(KeyError):
            CONSUMERGROUP_LAG.remove(*labels)
    for labels in _sum_labels(namespace, group):
        with contextlib.suppress(KeyError):
            CONSUMERGROUP_LAG_SUM.remove(*labels)
        with contextlib.suppress(KeyError):
            CONSUMERGROUP_LAG_AGE.remove(*labels)
    for labels in _labels_of(CONSUMERGROUP_LAG_SECONDS, namespace, group):
        with contextlib.suppress(KeyError):
            CONSUMERGROUP_LAG_SECONDS.remove(*labels)
    for counter in (REBALANCES, PLANNED_REBALANCES):
        with contextlib.suppress(KeyError):
            counter.remove(namespace, group)
    for timeout in ("session", "heartbeat", "max_poll"):
        with contextlib.suppress(KeyError):
            TIMEOUT_CHANGES.remove(namespace, group, timeout)
    for cause in CAUSES:
        with contextlib.suppress(KeyError):
            REBALANCES_BY_CAUSE.remove(namespace, group, cause)


def _sum_labels(namespace: str, group: str) -> list[tuple[str, ...]]:
    return _labels_of(CONSUMERGROUP_LAG_SUM, namespace, group)


def _labels_of(metric: Gauge, namespace: str, group: str) -> list[tuple[str, ...]]:
    """The label values of `metric`'s series of one ConsumerGroup."""
    return [tuple(s.labels.values()) for family in metric.collect() for s in family.samples
            if s.labels.get("namespace") == namespace and s.labels.get("group") == group]


def _export_lag(namespace: str, group: str, group_id: str,
                lag: Mapping[tuple[str, int], int]) -> None:
    now = {(namespace, group, group_id, topic, str(partition)): value
           for (topic, partition), value in lag.items()}
    for gone in _LAG_SERIES.get((namespace, group), set()) - set(now):
        with contextlib.suppress(KeyError):
            CONSUMERGROUP_LAG.remove(*gone)
    for labels, value in now.items():
        CONSUMERGROUP_LAG.labels(*labels).set(value)
    _LAG_SERIES[(namespace, group)] = set(now)
    CONSUMERGROUP_LAG_SUM.labels(namespace, group, group_id).set(sum(lag.values()))


def export(namespace: str, group: str, values: MetricValues, seconds: float) -> None:
    """Set and count what one pass decided (`actions.MetricValues`); `seconds`: the pass took."""
    labels = (namespace, group)
    RECONCILE_LAST.labels(*labels).set_to_current_time()
    RECONCILE_DURATION.observe(seconds)
    if values.error is not None:
        RECONCILE_ERRORS.labels(*labels, values.error).inc()
    for name, value in (("desired", values.members_desired), ("ready", values.members_ready)):
        if value is not None:
            GROUP_MEMBERS.labels(*labels, name).set(value)
    if values.partitions is not None:
        GROUP_PARTITIONS.labels(*labels).set(values.partitions)
    if values.idle_members is not None:
        IDLE_MEMBERS.labels(*labels).set(values.idle_members)
    for timeout, seconds in values.timeouts_s.items():
        EFFECTIVE_TIMEOUT.labels(*labels, timeout).set(seconds)
    if values.rollout_in_progress is not None:
        ROLLOUT_IN_PROGRESS.labels(*labels).set(1 if values.rollout_in_progress else 0)
    if values.rollout_at_risk is not None:
        ROLLOUT_AT_RISK.labels(*labels).set(1 if values.rollout_at_risk else 0)
    # Counters start at 0 with the group, so panels and rates show 0, not "no data".
    REBALANCES.labels(*labels).inc(values.rebalances)
    PLANNED_REBALANCES.labels(*labels).inc(values.planned_rebalances)
    if values.error is None:
        for timeout in ("session", "heartbeat", "max_poll"):
            TIMEOUT_CHANGES.labels(*labels, timeout)
        for cause in CAUSES:  # every cause from 0, so that the first one's increase shows
            REBALANCES_BY_CAUSE.labels(*labels, cause).inc(values.rebalance_causes.get(cause, 0))
    if values.lag is not None and values.group_id is not None:
        _export_lag(namespace, group, values.group_id, values.lag)
        if values.lag_age_s is not None:
            CONSUMERGROUP_LAG_AGE.labels(*labels, values.group_id).set(values.lag_age_s)
    if values.unassigned_partitions is not None:
        UNASSIGNED_PARTITIONS.labels(*labels).set(values.unassigned_partitions)
    if values.stalled_members is not None:
        STALLED_MEMBERS.labels(*labels).set(values.stalled_members)
        STALLED_RESTARTS.labels(*labels).inc(values.stalled_restarts)
    if values.slow_members is not None:
        SLOW_MEMBERS.labels(*labels).set(values.slow_members)
    if values.overdue_batches is not None:
        OVERDUE_BATCHES.labels(*labels).set(values.overdue_batches)
    _export_autoscaling(labels, values)
    for timeout in values.timeout_changes:
        TIMEOUT_CHANGES.labels(*labels, timeout).inc()
    for absence in values.absences_s:
        MEMBER_ABSENCE.labels(*labels).observe(absence)
    for gap in values.processing_gaps_s:
        MEMBER_PROCESSING_GAP.labels(*labels).observe(gap)
    if values.rollout_finished is not None:
        seconds, result = values.rollout_finished
        ROLLOUT_DURATION.labels(*labels).observe(seconds)
        ROLLOUTS.labels(*labels, result).inc()


def _export_autoscaling(labels: tuple[str, str], values: MetricValues) -> None:
    """The autoscaler's series while spec.autoscaling is set; dropped when it is removed."""
    figures = values.autoscaling
    if figures is None:
        if values.error is None:
            for metric in AUTOSCALER_METRICS:
                with contextlib.suppress(KeyError):
                    metric.remove(*labels)
            for series in _labels_of(CONSUMERGROUP_LAG_SECONDS, *labels):
                with contextlib.suppress(KeyError):
                    CONSUMERGROUP_LAG_SECONDS.remove(*series)
        return
    AUTOSCALER_TARGET_LAG.labels(*labels).set(figures.target_lag_seconds)
    AUTOSCALER_DESIRED.labels(*labels).set(figures.desired_replicas)
    AUTOSCALER_BUDGET_LEFT.labels(*labels).set(figures.budget_left)
    if figures.lag_seconds is not None and values.group_id is not None:
        CONSUMERGROUP_LAG_SECONDS.labels(*labels, values.group_id).set(figures.lag_seconds)
