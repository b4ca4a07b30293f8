"""`decide(snapshot) -> Plan`: everything one reconcile pass will do, decided in one place (pure).

A pass is gather -> decide -> execute. The service gathers a `Snapshot`; `decide` returns the
`Plan` (`actions`): group configs to set on the broker, children to apply, member pods to create
and to delete (each with why), members to call, Events, the new status and the metric values.
The service carries the plan out and decides nothing.

`decide` reads as numbered steps, each decided by the module that owns its subject: the
timeouts (`tuning`), the members as observed (`members.observed`) and the rebalances
(`rebalance.planned`), the rollout's step (`rollout.effects`, over the roller in
`rollout.roller`), the member pods (`pods`), the partitions nobody owns (`rebalance.planned`),
the problems (`members.problems`); this module puts the status, the Events and the metrics of
the pass together, and `pace` says whether the group is at rest after it (its next pass then
comes after the rest interval). `degraded` is the plan of a pass that cannot finish.

A member restart goes from reason to replacement through these steps:
`members.observed.observe_members` computes each member's restart reasons once; the roller
(`rollout.roller.next_step`) picks whom to restart now, and only members with reasons;
`rollout.effects` turns its step into pod deletions carrying those reasons; once the old pod is
gone the member is missing, and `pods.creates` makes its replacement (same ordinal, same
`group.instance.id`, the update revision), saying that it is one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from staticfleet.decisions import builders, pace, pods, scaling
from staticfleet.decisions import conditions as c
from staticfleet.decisions import status as st
from staticfleet.decisions.actions import AutoscalingFigures, Event, MetricValues, Plan, soonest
from staticfleet.decisions.autoscaler import rules as au
from staticfleet.decisions.autoscaler.load import Load, MemberLoad
from staticfleet.decisions.members.observed import MemberTable, observe_members
from staticfleet.decisions.members.problems import (
    group_id_holder,
    group_id_refusal,
    member_problems,
    problem_events,
)
from staticfleet.decisions.members.slow import slow_member_events, slow_members
from staticfleet.decisions.members.stalls import (
    group_slowest_batch_s,
    stalled_condition,
    until_overdue_s,
    until_stalled_s,
)
from staticfleet.decisions.rebalance import causes as ca
from staticfleet.decisions.rebalance import ledger
from staticfleet.decisions.rebalance import planned as pl
from staticfleet.decisions.rollout.effects import Roll, current_spec, rollout_step
from staticfleet.decisions.rollout.state import PHASES_IN_PROGRESS
from staticfleet.decisions.settings import ALLOW_TESTING_ANNOTATIONS_ENV
from staticfleet.decisions.snapshot import Problem, Snapshot
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts.inputs import Measurements
from staticfleet.decisions.timeouts.measurements import measure, recorded
from staticfleet.decisions.tuning import (
    METRIC_NAMES,
    Tuned,
    bounds_condition,
    tune,
    widen,
    widening_hold,
)

MAX_BACKOFF_S = 60.0


def decide(snap: Snapshot) -> Plan:
    """Everything this pass will do, from what it saw, in the steps below."""
    # 1: Stop at what cannot be decided: a problem met while gathering, an incomplete
    #    snapshot, a Kafka group id that another ConsumerGroup keeps.
    stop = _cannot_decide(snap)
    if stop is not None:
        return stop
    spec, group, partitions = snap.spec, snap.group, snap.partitions
    assert spec is not None and group is not None and partitions is not None
    # 2: The timeouts in force, from what the members measured.
    measured = measure(snap)
    tuned = tune(snap, spec, measured)
    if isinstance(tuned, Problem):
        return degraded(snap, tuned)
    # 3: Each member as observed (with its restart reasons), and the group's rebalances,
    #    planned or not.
    view = builders.member_spec_view(spec, tuned.effective)
    total = sum(partitions.values())
    table = observe_members(spec=spec, view=view, pods=snap.pods, statuses=snap.statuses,
                            group=group, partitions=total, slow=snap.slow_members)
    seen = pl.explain_rebalances(snap, group, tuned.effective.session_timeout_ms)
    # 4: Standbys to activate, then the rollout's step (which does not count an activating
    #    standby as late).
    activations = pods.activations(snap, table, spec.replicas)
    roll = rollout_step(snap, spec, view, tuned.effective, table, group.state, seen.count.total,
                        frozenset(call.ordinal for call in activations),
                        widening_hold(snap, tuned))
    # 4b: A KIP-848 group's session timeout, raised for a rollout about to stop members (the
    #     roller's `SessionTimeoutWidened` held the stop back), set back once none needs it.
    widened = widen(snap, spec, tuned, roll.state)
    # 4c: The cause of each rebalance counted (`rebalance.ledger`), from the signs the passes noted.
    booked = ledger.book(snap, spec, group, seen, roll.state, tuned.effective.session_timeout_ms)
    # 5: Member pods to create and to delete, each with why: missing members, the scale-down,
    #    the rollout's step, abandoned standbys, pods that ended, a stalled member.
    changes = pods.pod_changes(snap, spec, view, tuned.effective, table, roll, seen.last)
    # 6: Partitions nobody owns in a Stable group: a member asked to rejoin.
    unowned = pl.unowned(snap, spec, group, partitions, table, roll.state, changes.down,
                         seen.last)
    # 7: The autoscaler's replica count (spec.autoscaling), from the lag and the members'
    #    throughput, on the rebalance budget.
    scaled = _autoscale(snap, spec, table, roll)
    # 8: The status, rebuilt from what was observed, with the members' problems.
    problems = member_problems(snap, spec, table)
    status = _status(snap, spec, tuned, measured, total, roll, seen, changes, unowned,
                     problems, scaled)
    if widened.record is not None:
        status["timeouts"] = {**status["timeouts"], "widening": widened.record.to_status()}
    status["currentSpec"] = current_spec(snap, spec, status, view.revision)
    status[ledger.KEY] = booked.ledger.to_status()
    # 9: The Events, in the order things were decided, then what the status newly shows.
    events = (*tuned.events, *widened.events,
              *pl.timed_out_warning(seen.events, (s.says for s in booked.ledger.signs
                                                  if s.kind == ca.MEMBER_LEFT)),
              *booked.events, *changes.events,
              *(scaled.events if scaled else ()),
              *_status_events(snap.previous, status, problems), *slow_member_events(snap))
    # 10: The plan: children to apply, members to call (activations, leaves, a rejoin), pods,
    #     the new replica count, when to look again.
    plan = Plan(
        status=_stamped(status, snap.previous, snap), group_configs=widened.group_configs,
        children=(*_member_token_secret(snap, spec),
                  builders.build_config_map(spec, tuned.effective),
                  builders.build_headless_service(spec), builders.build_pdb(spec),
                  *_member_network_policy(snap, spec)),
        create=changes.create, delete=changes.delete, events=events,
        metrics=replace(_metric_values(snap, spec, table, total, tuned, roll, seen, changes,
                                       unowned, status, scaled),
                        rebalance_causes=booked.causes),
        requeue_after_s=soonest(roll.requeue_after_s, changes.requeue_after_s,
                                widened.requeue_after_s,
                                pl.UNASSIGNED_GRACE_S if unowned.missing else None),
        calls=(activations + changes.down.calls
               + ((unowned.rejoin.call,) if unowned.rejoin else ())),
        annotate=pods.marked_activated(table, activations), switchovers=roll.switchovers,
        scale_to=scaled.scale_to if scaled else None,
        deadline_s=soonest(tuned.deadline_s, booked.wait_s, seen.count.due_in_s, until_stalled_s(
            table, snap.statuses, snap.end_offsets, snap.lag, spec.processing.batch.max_wait_ms,
            snap.now, restarting=tuple(f.ordinal for f in roll.state.in_flight)),
            until_overdue_s(table, snap.statuses, tuned.effective.max_poll_interval_ms,
                            group_slowest_batch_s(snap.previous), snap.now)))
    # 11: Whether the group is at rest after this pass: then its next pass comes after the
    #     rest interval, not the resync interval (`pace`).
    return replace(plan, busy=pace.busy(snap, plan))


def _autoscale(snap: Snapshot, spec: ConsumerGroupSpec, table: MemberTable, roll: Roll
               ) -> au.Autoscale | None:
    """The autoscaler's decision (None: spec.autoscaling is off)."""
    if spec.autoscaling is None:
        return None
    assert snap.group is not None and snap.partitions is not None
    loads = tuple(MemberLoad(t.records_per_second, t.busy_ratio, t.capacity_records_per_second)
                  for s in snap.statuses.values()
                  if s.assignment and (t := s.throughput) is not None
                  and t.records_per_second is not None and t.busy_ratio is not None)
    load = Load(lag_records=sum(snap.lag.values()) if snap.lag is not None else None,
                lag_age_s=snap.lag_age_s, members=loads, end_offsets=snap.end_offsets or None)
    situation = au.Situation(
        replicas=spec.replicas, ready=table.ready_count(spec.replicas),
        group_state=snap.group.state,
        rollout_in_progress=roll.state.phase in PHASES_IN_PROGRESS,
        replicas_owner=au.replicas_owner(snap.body))
    assignor = (spec.membership.assignment_strategy if spec.membership.protocol == "classic"
                else None)
    return au.decide_autoscaling(spec.autoscaling, situation, load, snap.partitions, assignor,
                                 snap.previous.get("autoscaling") or {}, snap.now)


def _cannot_decide(snap: Snapshot) -> Plan | None:
    """The plan of a pass that stops before deciding (None: it goes on)."""
    if snap.problem is not None:
        return degraded(snap, snap.problem)
    if snap.spec is None or snap.group is None or snap.partitions is None:
        return degraded(snap, Problem(c.API_ERROR, "the pass gathered an incomplete snapshot"))
    holder = group_id_holder(snap)
    if holder is not None:
        problem, deletes = group_id_refusal(snap, snap.spec, holder)
        return replace(degraded(snap, problem), delete=deletes, requeue_after_s=None)
    return None


def _status(snap: Snapshot, spec: ConsumerGroupSpec, tuned: Tuned, measured: Measurements,
            total: int, roll: Roll, seen: pl.Explained, changes: pods.PodChanges,
            unowned: pl.Unowned, problems: Sequence[tuple[str, str]],
            scaled: au.Autoscale | None) -> dict[str, Any]:
    """The status after this pass, but for `currentSpec`."""
    previous = snap.previous
    extra = (unowned.condition, bounds_condition(snap, spec),
             stalled_condition(spec, changes.stalls, changes.stalled_restart,
                               changes.stall_memory, restart_safe=roll.restart_safe,
                               overdue=changes.overdue),
             *(((c.AUTOSCALING, scaled.condition),) if scaled else ()),
             *_testing_condition(spec))
    conds = st.derive_conditions(
        previous.get("conditions") or [], group=spec, observed=roll.observation,
        rollout=roll.state, timeouts=tuned.effective, partitions=total, now=snap.now,
        refusal=roll.refusal, problems=problems, extra=extra)
    status = st.build_status(
        group=spec, observed=roll.observation, rollout=roll.state,
        update_revision=roll.state.revision or "",
        current_revision=previous.get("currentRevision"), timeouts=tuned.effective,
        partitions=total, measurements=recorded(snap, measured, roll.restarts),
        conditions=[x for x in conds if x.get("type") not in _absent_conditions(spec, scaled)])
    planned = (changes.down.planned or (unowned.rejoin.planned if unowned.rejoin else None)
               or seen.last)
    status.update({"groupId": spec.kafka.group_id,
                   "memberRebalanceCounters": dict(seen.count.counters),
                   "rebalancesFromState": seen.count.from_state or None,
                   "stateCountedRebalances": [x.to_status() for x in seen.count.credits]
                   or None,
                   "groupEpoch": snap.group.epoch if snap.group is not None else None,
                   "groupGeneration": seen.count.generation,
                   "consecutiveFailures": 0,
                   "plannedRebalance": planned.to_status() if planned else None,
                   "plannedRebalances": int(previous.get("plannedRebalances") or 0)
                   + seen.planned,
                   "unassignedSince": c.rfc3339(unowned.since) if unowned.since else None,
                   "stalledRestarts": (int(previous.get("stalledRestarts") or 0)
                                       + len(changes.stalled_restart)),
                   "stallRecovery": changes.stall_recovery,
                   "autoscaling": scaled.status if scaled else None,
                   "shard": _shard_of(snap)})
    return status


def _shard_of(snap: Snapshot) -> str | None:
    """`status.shard`: the shard that reconciles the group (`decisions.shards`), while it does;
    None (left out) when the operator is not sharded."""
    shard = snap.settings.shard
    return shard.name if shard is not None else None


def _status_events(previous: Mapping[str, Any], status: Mapping[str, Any],
                   problems: Sequence[tuple[str, str]]) -> list[Event]:
    """Warnings for what the status newly shows: partitions unowned, members stalled, the
    broker's bounds unknown, the first problem, more members than partitions."""
    events = _transition_events(previous.get("conditions") or [], status["conditions"],
                                (c.UNASSIGNED_PARTITIONS, "True"),
                                (c.MEMBERS_STALLED, "True"),
                                (c.BROKER_BOUNDS_KNOWN, "False"),
                                (c.TESTING_ANNOTATIONS, "False"))
    events += problem_events(previous, problems)
    idle_before = c.get_condition(previous.get("conditions") or [], c.IDLE_MEMBERS)
    idle = c.get_condition(status["conditions"], c.IDLE_MEMBERS)
    if idle and idle["status"] == "True" and (not idle_before or idle_before["status"] != "True"):
        events.append(Event("Warning", c.MORE_MEMBERS_THAN_PARTITIONS, str(idle["message"])))
    return events


def _metric_values(snap: Snapshot, spec: ConsumerGroupSpec, table: MemberTable, total: int,
                   tuned: Tuned, roll: Roll, seen: pl.Explained, changes: pods.PodChanges,
                   unowned: pl.Unowned, status: Mapping[str, Any],
                   scaled: au.Autoscale | None) -> MetricValues:
    assert snap.group is not None
    at_risk = c.get_condition(status["conditions"], c.ROLLOUT_AT_RISK)
    return MetricValues(
        members_desired=spec.replicas, members_ready=table.ready_count(spec.replicas),
        partitions=total, idle_members=scaling.idle_members(spec.replicas, total) if total else 0,
        timeouts_s={METRIC_NAMES[f]: tuned.effective.value(f) / 1000 for f in METRIC_NAMES},
        rollout_in_progress=roll.state.phase in PHASES_IN_PROGRESS,
        rollout_at_risk=bool(at_risk and at_risk["status"] == "True"),
        rebalances=seen.count.increase, planned_rebalances=seen.planned,
        unassigned_partitions=len(unowned.missing) if snap.group.state == "Stable" else None,
        lag=snap.lag, lag_age_s=snap.lag_age_s, group_id=spec.kafka.group_id,
        timeout_changes=tuple(METRIC_NAMES[f] for f in tuned.changed),
        absences_s=tuple(r[1] for r in roll.restarts), processing_gaps_s=roll.gaps,
        rollout_finished=roll.finished, stalled_members=len(changes.stalls),
        slow_members=len(slow_members(snap)),
        overdue_batches=len(changes.overdue),
        stalled_restarts=len(changes.stalled_restart),
        autoscaling=AutoscalingFigures(
            lag_seconds=scaled.lag_seconds, target_lag_seconds=scaled.status["targetLagSeconds"],
            desired_replicas=scaled.desired or spec.replicas,
            budget_left=scaled.budget_left) if scaled else None)


def _member_token_secret(snap: Snapshot, spec: ConsumerGroupSpec) -> tuple[dict[str, Any], ...]:
    """The Secret of the members' token, when it is missing (first pass, or deleted by hand):
    made with the token the gather drew for it. An existing one is left as it is, so a token
    written into it by hand (a rotation) stands; the operator only reads it."""
    if not snap.member_token_missing or not snap.member_token:
        return ()
    return (builders.build_member_token_secret(spec, snap.member_token),)


def _member_network_policy(snap: Snapshot,
                           spec: ConsumerGroupSpec) -> tuple[dict[str, Any], ...]:
    """The NetworkPolicy of the group's members, when the operator was started with the
    sources to admit (`settings.MEMBER_INGRESS_FROM_ENV`): one per group, so it is wherever a
    group lives, whichever namespaces the operator watches."""
    sources = snap.settings.member_ingress_from
    return () if sources is None else (builders.build_member_network_policy(spec, sources),)


def _testing_condition(spec: ConsumerGroupSpec) -> tuple[tuple[str, c.Cond], ...]:
    """TestingAnnotations=False while the group sets a test-only annotation this operator does
    not honour (`model.TESTING_ANNOTATIONS`)."""
    ignored = spec.ignored_testing_annotations
    if not ignored:
        return ()
    return ((c.TESTING_ANNOTATIONS, (
        "False", c.TESTING_ANNOTATIONS_IGNORED,
        f"{', '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} for tests only and "
        f"ignored: this operator was not started with {ALLOW_TESTING_ANNOTATIONS_ENV}=true "
        "(the chart never sets it); remove the annotation")),)


def _absent_conditions(spec: ConsumerGroupSpec, scaled: au.Autoscale | None) -> set[str]:
    """Condition types that show only while they apply, and do not apply now."""
    return ({*(() if scaled else (c.AUTOSCALING,)),
             *(() if spec.ignored_testing_annotations else (c.TESTING_ANNOTATIONS,))})


def degraded(snap: Snapshot, problem: Problem) -> Plan:
    """A pass that could not finish: keep what was observed before, mark Degraded with the
    problem, count the failure, retry with a backoff that doubles while it persists."""
    previous = snap.previous
    status: dict[str, Any] = dict(previous)
    conds = list(status.get("conditions") or [])
    before = c.get_condition(conds, c.DEGRADED)
    status["conditions"] = c.set_condition(conds, c.DEGRADED, "True", problem.reason,
                                           problem.message, snap.now, snap.generation)
    status["observedGeneration"] = snap.generation
    status.pop("shard", None)
    if (shard := _shard_of(snap)) is not None:
        status["shard"] = shard
    gap = ledger.unanswered(previous, problem.reason, problem.message, snap.now)
    if gap is not None:
        status[ledger.KEY] = gap
    failures = int(status.get("consecutiveFailures") or 0)
    status["consecutiveFailures"] = failures + 1
    status["lastReconciled"] = c.rfc3339(snap.now)
    changed = (not before or before.get("status") != "True"
               or before.get("reason") != problem.reason
               or before.get("message") != problem.message)
    events = (Event("Warning", problem.reason, problem.message),) if changed else ()
    retry = problem.retry_after_s
    if retry is None and problem.reason in (c.KAFKA_UNREACHABLE, c.API_ERROR):
        retry = float(min(MAX_BACKOFF_S, 2 ** min(failures + 1, 6)))
    calls = pods.handoffs_under_way(snap) if problem.reason == c.COORDINATOR_MOVING else ()
    return Plan(status=status, events=events, metrics=MetricValues(error=problem.reason),
                requeue_after_s=retry, calls=calls,
                annotate=(pods.marked_activated(pods.table_without_group(snap), calls)
                          if calls else ()))


def _transition_events(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]],
                       *watched: tuple[str, str]) -> list[Event]:
    """A Warning when a watched condition turns to the given status (reason and message of
    the condition)."""
    out = []
    for type_, status in watched:
        old, new = c.get_condition(before, type_), c.get_condition(after, type_)
        if new and new["status"] == status and (not old or old["status"] != status):
            out.append(Event("Warning", str(new["reason"]), str(new["message"])))
    return out


# --- status ---------------------------------------------------------------------------------


def _stamped(status: dict[str, Any], previous: Mapping[str, Any],
             snap: Snapshot) -> dict[str, Any]:
    """The status as the API server will store it (no nulls), with `lastReconciled` moved
    only when something else changed, so a pass that changes nothing writes nothing."""
    pruned = without_nulls(status)
    unchanged = _without(pruned, "lastReconciled") == _without(previous, "lastReconciled")
    stamp = previous.get("lastReconciled") if unchanged else None
    return {**pruned, "lastReconciled": stamp or c.rfc3339(snap.now)}


def _without(obj: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k != key}


def without_nulls(value: Any) -> Any:
    """`value` with every null member of an object left out (a null in a merge patch deletes,
    so the stored status never holds one)."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [without_nulls(v) for v in value]
    return value
