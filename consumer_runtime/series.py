"""The member's Prometheus series (GET /metrics): one definition per metric (docs/contracts.md),
each labelled with the member's namespace, group and member.

`Series` makes them in a registry of their own and holds them bound to those labels; the series
whose labels are known are made at once, so they show before their first event. `Telemetry`
(consumer_runtime/metrics.py) feeds them as it learns what they count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from consumer_runtime.records import TopicPartition
from consumer_runtime.timeline import STAGES, Span
from member_contract import LEAVE_OUTCOMES, REQUESTS

BATCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
FAST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
LABELS = ("namespace", "group", "member")
CONTROL_REFUSALS = ("missing", "wrong", "unconfigured")
"""`reason` of a refused control request (`consumer_runtime.control`): no bearer token, another
token than the group's, no token on the member to compare with."""
PARTITION_EVENTS = ("assign", "revoke", "lost")


class Series:
    """The registry and its series, bound to the member's labels (`ids`)."""

    def __init__(self, ids: Mapping[str, str], session_timeout_s: float | None,
                 max_poll_interval_s: float, process_start: float) -> None:
        self.registry = CollectorRegistry()
        self.ids = dict(ids)

        def metric(kind: Any, name: str, doc: str, extra: tuple[str, ...] = (),
                   **kw: Any) -> Any:
            return kind(name, doc, (*LABELS, *extra), registry=self.registry, **kw)

        assigned = metric(Gauge, "staticfleet_member_assigned_partitions",
                          "Partitions assigned to this member")
        records = metric(Counter, "staticfleet_member_records_processed",
                         "Records processed and accepted by the sink")
        batches = metric(Counter, "staticfleet_member_batches_processed",
                         "Batches processed and committed")
        batch_s = metric(Histogram, "staticfleet_member_batch_processing_seconds",
                         "Time to process one batch, retries included", buckets=BATCH_BUCKETS)
        poll_s = metric(Histogram, "staticfleet_member_poll_interval_seconds",
                        "Time between two polls of the consumer", buckets=FAST_BUCKETS)
        commit_s = metric(Histogram, "staticfleet_member_commit_latency_seconds",
                          "Time of one synchronous offset commit", buckets=FAST_BUCKETS)
        self._lag = metric(Gauge, "staticfleet_member_consumer_lag",
                           "Consumer lag per partition (librdkafka statistics)",
                           ("topic", "partition"))
        events = metric(Counter, "staticfleet_member_partition_events",
                        "Rebalance callbacks: assign, revoke, lost", ("event",))
        rebalances = metric(Counter, "staticfleet_member_rebalances",
                            "Rebalances after the first assignment of this process")
        takeovers = metric(Counter, "staticfleet_member_takeovers",
                           "Rebalances after the first assignment of this process that gave it "
                           "partitions it did not hold (a member left, crashed or was evicted; "
                           "partitions were added)")
        dead = metric(Counter, "staticfleet_member_dead_lettered_records",
                      "Records sent to the dead-letter topic")
        stage_s = metric(Counter, "staticfleet_member_stage_seconds",
                         "Seconds the poll thread and the batch worker spent per stage "
                         "(consumer_runtime/timeline.py)", ("thread", "stage"))
        stage_cpu = metric(Counter, "staticfleet_member_stage_cpu_seconds",
                           "CPU seconds of the stage's thread during the stage",
                           ("thread", "stage"))
        self._startup = metric(Gauge, "staticfleet_member_startup_seconds",
                               "Seconds from process start to a startup phase", ("phase",))
        self._refused = metric(Counter, "staticfleet_member_control_refused",
                               "Control requests (POST) refused for want of the operator's "
                               "token", ("action", "reason"))
        self._leaves = metric(Counter, "staticfleet_member_static_leaves",
                              "Static leaves (KIP-848) the member confirmed with the "
                              "coordinator after closing, by where they left the instance id "
                              "(consumer_runtime/staticleave.py)", ("outcome",))
        self._releases = metric(Counter, "staticfleet_member_predecessor_releases",
                                "Member ids of an earlier process of this pod (a KIP-848 static "
                                "member killed without a leave) that this process released "
                                "with the static leave before it joined, by where the leave "
                                "left the instance id (consumer_runtime/predecessor.py)",
                                ("outcome",))
        for outcome in LEAVE_OUTCOMES:
            self._leaves.labels(**self.ids, outcome=outcome)
            self._releases.labels(**self.ids, outcome=outcome)
        for action in (*REQUESTS, "other"):
            for reason in CONTROL_REFUSALS:
                self._refused.labels(**self.ids, action=action, reason=reason)
        # The alert on takeovers counts a young process's whole counter: its first takeovers may
        # come before Prometheus first scrapes its pod, which increase() does not see.
        metric(Gauge, "staticfleet_member_process_start_time_seconds",
               "Start of this member process, unix time").labels(**self.ids).set(process_start)
        metric(Gauge, "staticfleet_member_max_poll_interval_seconds",
               "Configured max.poll.interval.ms in seconds").labels(**self.ids).set(
                   max_poll_interval_s)
        session = metric(Gauge, "staticfleet_member_session_timeout_seconds",
                         "Configured session.timeout.ms in seconds (classic protocol only)")
        if session_timeout_s is not None:
            session.labels(**self.ids).set(session_timeout_s)
        self.events = {event: events.labels(**self.ids, event=event)
                       for event in PARTITION_EVENTS}
        """Each rebalance callback's counter, by event."""
        self._stages = {
            (thread, stage): (stage_s.labels(**self.ids, thread=thread, stage=stage),
                              stage_cpu.labels(**self.ids, thread=thread, stage=stage))
            for thread, stages in STAGES.items() for stage in stages}
        """Each stage's two series, looked up once: a span ends on every poll."""
        self.assigned = assigned.labels(**self.ids)
        self.records = records.labels(**self.ids)
        self.batches = batches.labels(**self.ids)
        self.batch_s = batch_s.labels(**self.ids)
        self.poll_s = poll_s.labels(**self.ids)
        self.commit_s = commit_s.labels(**self.ids)
        self.rebalances = rebalances.labels(**self.ids)
        self.takeovers = takeovers.labels(**self.ids)
        self.dead = dead.labels(**self.ids)
        self._lagging: set[TopicPartition] = set()
        """The partitions with a lag series."""

    def startup(self, phase: str, seconds: float) -> None:
        """Seconds from process start to a startup phase (its series made then)."""
        self._startup.labels(**self.ids, phase=phase).set(seconds)

    def lag(self, tp: TopicPartition, lag: int) -> None:
        self._lag.labels(**self.ids, topic=tp[0], partition=str(tp[1])).set(lag)
        self._lagging.add(tp)

    def forget_lag(self, partitions: set[TopicPartition]) -> None:
        """Remove the lag series of partitions no longer assigned."""
        for tp in partitions & self._lagging:
            self._lag.remove(*self.ids.values(), tp[0], str(tp[1]))
            self._lagging.discard(tp)

    def refused(self, action: str, reason: str) -> None:
        self._refused.labels(**self.ids, action=action, reason=reason).inc()

    def static_leave(self, outcome: str) -> None:
        self._leaves.labels(**self.ids, outcome=outcome).inc()

    def predecessor_release(self, outcome: str) -> None:
        self._releases.labels(**self.ids, outcome=outcome).inc()

    def stage(self, span: Span) -> None:
        wall, cpu = self._stages[(span.thread, span.stage)]
        wall.inc(span.wall)
        cpu.inc(span.cpu)
