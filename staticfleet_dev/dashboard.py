"""The Grafana dashboard the chart ships, as code (Grafana's own `grafana-foundation-sdk`).

`python -m staticfleet_dev.dashboard` writes charts/staticfleet/dashboards/staticfleet.json;
`--check` fails when the shipped JSON is not what this module builds (`make lint` runs it). The
panels' queries are also what the e2e runs against a real Prometheus (`PANELS`, `substitute`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, statetimeline, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    GridPos,
    VariableRefresh,
    VariableSort,
)

from staticfleet_dev import generated

OUT = Path(__file__).resolve().parents[1] / "charts" / "staticfleet" / "dashboards" / \
    "staticfleet.json"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
SELECT = 'namespace=~"$namespace", group=~"$group"'
VARIABLE_METRICS = "staticfleet_group_members|staticfleet_member_assigned_partitions"


@dataclass(frozen=True)
class Row:
    title: str


@dataclass(frozen=True)
class Graph:
    kind: str  # "timeseries" or "state-timeline"
    title: str
    description: str
    unit: str
    width: int
    queries: tuple[tuple[str, str], ...]  # (PromQL, legend)
    height: int = 8
    only_with: str | None = None
    """The ConsumerGroup field without which the panel has no series (spec.autoscaling)."""


def q(template: str) -> str:
    """A query with the dashboard's selector in place of `SEL`."""
    return template.replace("SEL", SELECT)


PANELS: tuple[Row | Graph, ...] = (
    Row("Rebalances"),
    Graph("timeseries", "Rebalances observed by the operator (5m)",
          "Rebalances the operator observed per ConsumerGroup over 5 minutes. A static rollout "
          "keeps this at 0.", "short", 12, (
              (q("sum by (namespace, group) (increase(staticfleet_rebalances_total{SEL}[5m]))"),
               "{{namespace}}/{{group}}"),)),
    Graph("timeseries", "Rebalances seen by members (5m)",
          "Rebalances the members took part in, per Kafka group (max over members).", "short",
          12, (
              (q("max by (namespace, group) "
                 "(increase(staticfleet_member_rebalances_total{SEL}[5m]))"),
               "{{namespace}}/{{group}}"),)),
    Graph("timeseries", "Rebalances by cause (5m)",
          "The operator's rebalances over 5 minutes by the cause its ledger gave each "
          "(status.rebalanceLedger): foreign_member, scale, coordinator_move, broker_restart, "
          "member_crash, rollout, member_timeout or unknown (the alert "
          "StaticfleetRebalanceCauseUnknown fires on that).", "short", 24, (
              (q("sum by (namespace, group, cause) "
                 "(increase(staticfleet_rebalances_by_cause_total{SEL}[5m]))"),
               "{{group}} {{cause}}"),)),
    Graph("timeseries", "Partition events", "Assign, revoke and lost callbacks per second.",
          "ops", 24, (
              (q("sum by (group, event) "
                 "(rate(staticfleet_member_partition_events_total{SEL}[$__rate_interval]))"),
               "{{group}} {{event}}"),)),
    Row("Rollouts and member absence"),
    Graph("state-timeline", "Rollout in progress / at risk",
          "1 while a rolling restart runs; at risk: stopped or about to stop because a restart "
          "runs late against the session timeout.", "bool", 12, (
              (q("max by (namespace, group) (staticfleet_rollout_in_progress{SEL})"),
               "in progress {{namespace}}/{{group}}"),
              (q("max by (namespace, group) (staticfleet_rollout_at_risk{SEL})"),
               "at risk {{namespace}}/{{group}}"))),
    Graph("timeseries", "Member absence during rollouts vs session timeout",
          "How long a restarted member stayed out of the group (from its stop to its return), "
          "against the effective session timeout: absence must stay below it.", "s", 12, (
              (q("histogram_quantile(0.5, sum by (le, namespace, group) "
                 "(rate(staticfleet_member_absence_seconds_bucket{SEL}[$__rate_interval])))"),
               "p50 {{group}}"),
              (q("histogram_quantile(0.99, sum by (le, namespace, group) "
                 "(rate(staticfleet_member_absence_seconds_bucket{SEL}[$__rate_interval])))"),
               "p99 {{group}}"),
              (q('max by (namespace, group) '
                 '(staticfleet_effective_timeout_seconds{SEL, timeout="session"})'),
               "session timeout {{group}}"))),
    Graph("timeseries", "Members desired / ready",
          "Members the ConsumerGroup asks for and members ready.", "short", 12, (
              (q("max by (namespace, group, state) (staticfleet_group_members{SEL})"),
               "{{group}} {{state}}"),)),
    Graph("timeseries", "Rollouts and their duration",
          "Finished rollouts per hour by result, and the 95th percentile of their duration.",
          "short", 12, (
              (q("sum by (namespace, group, result) "
                 "(increase(staticfleet_rollouts_total{SEL}[1h]))"),
               "{{group}} {{result}}"),
              (q("histogram_quantile(0.95, sum by (le, namespace, group) "
                 "(rate(staticfleet_rollout_duration_seconds_bucket{SEL}[1h])))"),
               "p95 duration {{group}} (s)"))),
    Row("Lag and throughput"),
    Graph("timeseries", "Consumer lag by group",
          "Records not yet consumed, summed over partitions.", "short", 12, (
              (q("sum by (namespace, group) (staticfleet_member_consumer_lag{SEL})"),
               "{{namespace}}/{{group}}"),)),
    Graph("timeseries", "Consumer lag by member", "Lag of the partitions each member holds.",
          "short", 12, (
              (q("sum by (group, member) (staticfleet_member_consumer_lag{SEL})"),
               "{{member}}"),)),
    Graph("timeseries", "Lag as the broker sees it",
          "End offset minus the group's committed offset, read by the operator from the "
          "broker: it shows while every member is down (kafka_exporter's consumergroup lag).",
          "short", 24, (
              (q("sum by (namespace, group) (staticfleet_consumergroup_lag_sum{SEL})"),
               "{{namespace}}/{{group}}"),
              (q("max by (group, topic, partition) (staticfleet_consumergroup_lag{SEL})"),
               "{{group}} {{topic}}-{{partition}}"))),
    Graph("timeseries", "Throughput (records/s)", "Records processed per second.", "rps", 12, (
        (q("sum by (namespace, group) "
           "(rate(staticfleet_member_records_processed_total{SEL}[$__rate_interval]))"),
         "{{namespace}}/{{group}}"),)),
    Graph("timeseries", "Throughput per member (records/s)",
          "Records processed per second by each member (its instance id): a member's stop "
          "during a rollout shows here as its processing gap.", "rps", 12, (
              (q("sum by (group, member) "
                 "(rate(staticfleet_member_records_processed_total{SEL}[$__rate_interval]))"),
               "{{member}}"),)),
    Graph("timeseries", "Batches and dead letters (per s)",
          "Batches processed and records sent to the dead-letter topic per second.", "ops", 12, (
              (q("sum by (namespace, group) "
                 "(rate(staticfleet_member_batches_processed_total{SEL}[$__rate_interval]))"),
               "batches {{group}}"),
              (q("sum by (namespace, group) (rate("
                 "staticfleet_member_dead_lettered_records_total{SEL}[$__rate_interval]))"),
               "dead-lettered {{group}}"))),
    Row("Autoscaling"),
    Graph("timeseries", "Lag in seconds vs target",
          "With spec.autoscaling: the group's backlog divided by the records per second its "
          "members process, against its targetLagSeconds.", "s", 12, (
              (q("max by (namespace, group) (staticfleet_consumergroup_lag_seconds{SEL})"),
               "lag {{group}}"),
              (q("max by (namespace, group) (staticfleet_autoscaler_target_lag_seconds{SEL})"),
               "target {{group}}")), only_with="spec.autoscaling"),
    Graph("timeseries", "Replicas: autoscaler vs spec, budget left",
          "The member count the autoscaler wants, spec.replicas, and the scale changes it may "
          "still make this hour (spec.autoscaling.maxMembershipChangesPerHour).", "short", 12, (
              (q("max by (namespace, group) (staticfleet_autoscaler_desired_replicas{SEL})"),
               "autoscaler {{group}}"),
              (q('max by (namespace, group) (staticfleet_group_members{SEL, state="desired"})'),
               "spec.replicas {{group}}"),
              (q("max by (namespace, group) (staticfleet_autoscaler_budget_left{SEL})"),
               "budget left {{group}}"))),
    Row("Batch time against max.poll.interval.ms"),
    Graph("timeseries", "Batch processing time vs max.poll.interval.ms",
          "p99 and max-bucket batch time and the gap between polls, against the configured "
          "max.poll.interval.ms: a batch that outlasts it makes the member leave the group.",
          "s", 12, (
              (q("histogram_quantile(0.99, sum by (le, namespace, group) (rate("
                 "staticfleet_member_batch_processing_seconds_bucket{SEL}[$__rate_interval])))"),
               "batch p99 {{group}}"),
              (q("histogram_quantile(0.99, sum by (le, namespace, group) (rate("
                 "staticfleet_member_poll_interval_seconds_bucket{SEL}[$__rate_interval])))"),
               "poll interval p99 {{group}}"),
              (q("max by (namespace, group) (staticfleet_member_max_poll_interval_seconds{SEL})"),
               "max.poll.interval {{group}}"))),
    Graph("timeseries", "Commit latency and startup",
          "p99 offset commit latency, and each member's time to first assignment and first "
          "batch.", "s", 12, (
              (q("histogram_quantile(0.99, sum by (le, namespace, group) (rate("
                 "staticfleet_member_commit_latency_seconds_bucket{SEL}[$__rate_interval])))"),
               "commit p99 {{group}}"),
              (q("max by (group, member, phase) (staticfleet_member_startup_seconds{SEL})"),
               "startup {{member}} {{phase}}"))),
    Graph("timeseries", "Where the members' time goes (share per stage)",
          "Seconds per second each stage of the members' poll threads (consume, convert, "
          "wait-worker, paused, commit), batch workers (frame, job) and the threads that "
          "build the next batch's DataFrame meanwhile (prepare: frame) took, summed over the "
          "group's members. A worker's share under 1 per member is idle time: no batch was "
          "due. A poll thread mostly in wait-worker means Spark is the bottleneck.",
          "percentunit", 24, (
              (q("sum by (group, thread, stage) "
                 "(rate(staticfleet_member_stage_seconds_total{SEL}[$__rate_interval]))"),
               "{{thread}} {{stage}}"),)),
    Row("Timeouts and sizing"),
    Graph("timeseries", "Effective timeouts",
          "session.timeout.ms, heartbeat.interval.ms and max.poll.interval.ms the operator set, "
          "and the session timeout the members run with.", "s", 12, (
              (q("max by (namespace, group, timeout) (staticfleet_effective_timeout_seconds{SEL})"),
               "{{group}} {{timeout}}"),
              (q("max by (namespace, group) (staticfleet_member_session_timeout_seconds{SEL})"),
               "{{group}} session (members)"))),
    Graph("timeseries", "Timeout changes and reconcile errors",
          "Timeout changes the operator made, and its reconcile errors by reason (1h).", "short",
          12, (
              (q("sum by (namespace, group, timeout) "
                 "(increase(staticfleet_timeout_changes_total{SEL}[1h]))"),
               "change {{group}} {{timeout}}"),
              (q("sum by (namespace, group, reason) "
                 "(increase(staticfleet_reconcile_errors_total{SEL}[1h]))"),
               "error {{group}} {{reason}}"))),
    Graph("timeseries", "Partitions and idle members",
          "Partitions of the group's topics, members beyond that count, and partitions each "
          "member holds.", "short", 24, (
              (q("max by (namespace, group) (staticfleet_group_partitions{SEL})"),
               "partitions {{group}}"),
              (q("max by (namespace, group) (staticfleet_group_idle_members{SEL})"),
               "idle members {{group}}"),
              (q("max by (group, member) (staticfleet_member_assigned_partitions{SEL})"),
               "assigned {{member}}"))),
)


def _graph(graph: Graph, x: int, y: int) -> Any:
    panel: Any = (timeseries.Panel() if graph.kind == "timeseries"
                  else statetimeline.Panel())
    panel = (panel.title(graph.title).description(graph.description).datasource(DATASOURCE)
             .unit(graph.unit).grid_pos(_pos(x, y, graph.width, graph.height)))
    if graph.kind == "timeseries":
        panel = (panel
                 .legend(common_b.VizLegendOptions().display_mode(common.LegendDisplayMode.LIST)
                         .placement(common.LegendPlacement.BOTTOM).show_legend(True))
                 .tooltip(common_b.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI)
                          .sort(common.SortOrder.DESCENDING)))
    for i, (expr, legend) in enumerate(graph.queries):
        panel = panel.with_target(prometheus.Dataquery().expr(expr).legend_format(legend)
                                  .ref_id(chr(ord("A") + i)).datasource(DATASOURCE))
    return panel


def _pos(x: int, y: int, w: int, h: int) -> GridPos:
    return GridPos(h=h, w=w, x=x, y=y)


def _variable(name: str, label: str, definition: str) -> Any:
    return (dash.QueryVariable(name).label(label).datasource(DATASOURCE)
            .query(definition).multi(True).include_all(True)
            .all_value(".*").refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC))


def build() -> dict[str, Any]:
    """The dashboard, as the JSON Grafana imports."""
    board = (dash.Dashboard("staticfleet / Consumer groups").uid("staticfleet-groups")
             .description("staticfleet: Kafka consumer groups with static membership - "
                          "rebalances, rollouts, lag, throughput, batch time and timeouts.")
             .tags(["kafka", "staticfleet"]).editable().tooltip(DashboardCursorSync.CROSSHAIR)
             .time("now-3h", "now").refresh("30s")
             .with_variable(dash.DatasourceVariable("datasource").label("Data source")
                            .type("prometheus"))
             .with_variable(_variable(
                 "namespace", "Namespace",
                 f'label_values({{__name__=~"{VARIABLE_METRICS}"}}, namespace)'))
             .with_variable(_variable(
                 "group", "Group", f'label_values({{__name__=~"{VARIABLE_METRICS}", '
                 'namespace=~"$namespace"}, group)')))
    x = y = 0
    row_height = 0
    for item in PANELS:
        if isinstance(item, Row):
            y += row_height
            x, row_height = 0, 0
            board = board.with_row(dash.Row(item.title).grid_pos(_pos(0, y, 24, 1)))
            y += 1
            continue
        if x + item.width > 24:
            x, y, row_height = 0, y + row_height, 0
        board = board.with_panel(_graph(item, x, y))
        x += item.width
        row_height = max(row_height, item.height)
    doc: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True, indent=2).encode(board.build()))
    for i, panel in enumerate(doc["panels"], start=1):
        panel["id"] = i
    doc["id"] = None  # an id ties the JSON to one Grafana database
    return doc


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def substitute(expr: str, namespace: str, group: str, rate_interval: str = "1m") -> str:
    """A panel query as Grafana sends it with one namespace and group selected."""
    return (expr.replace("$namespace", namespace).replace("$group", group)
            .replace("$__rate_interval", rate_interval))


def graphs() -> list[Graph]:
    return [p for p in PANELS if isinstance(p, Graph)]


def main(argv: list[str] | None = None) -> int:
    return generated.main(__doc__ or "", OUT, render, "staticfleet_dev.dashboard",
                          f"dashboard in sync with staticfleet_dev/dashboard.py "
                          f"({len(graphs())} panels)", argv)


if __name__ == "__main__":
    sys.exit(main())
