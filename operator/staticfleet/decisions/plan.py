"""`decide(snapshot) -> Plan`: everything one reconcile pass will do, decided in one place (pure).

A pass is gather -> decide -> execute. The service gathers a `Snapshot`; `decide` returns the
`Plan`: group configs to set on the broker, children to apply, member pods to create and to
delete (each with why), Events, the new status and the metric values. The service carries the
plan out and decides nothing.

A member restart lives here from reason to replacement: `members.observe_members` computes each
member's restart reasons once; the roller (`rollout.next_step`) picks whom to restart now, and
only members with reasons; `_restarts` turns that into pod deletions carrying those reasons;
once the old pod is gone the member is missing, and `_creates` makes its replacement (same
ordinal, same `group.instance.id`, the update revision), saying that it is one.

Rebalances the operator makes on purpose (a scale-down's leave, a rejoin that assigns
partitions nobody owns) are decided here too, with `planned`: the plan's `calls`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from staticfleet.decisions import builders, pods, scaling, timeouts
from staticfleet.decisions import conditions as c
from staticfleet.decisions import planned as pl
from staticfleet.decisions import rollout as ro
from staticfleet.decisions import status as st
from staticfleet.decisions.actions import (
    Event,
    MetricValues,
    Plan,
    PodDelete,
)
from staticfleet.decisions.measurements import (
    first_assignment_s,
    measure,
    timeout_notes,
)
from staticfleet.decisions.members import (
    MemberTable,
    member_failure,
    observe_members,
    ordinal_of,
    refusal_line,
)
from staticfleet.decisions.model import ConsumerGroupSpec
from staticfleet.decisions.reasons import pod_revision as reasons_revision
from staticfleet.decisions.rebalances import RebalanceCount, count_rebalances
from staticfleet.decisions.rollactions import (
    PHASES_IN_PROGRESS,
    Roll,
    current_spec,
    rollout_step,
)
from staticfleet.decisions.snapshot import Claimant, GroupView, Problem, Snapshot
from staticfleet.decisions.stalls import stalled_condition, stalled_members, stalled_restart

MAX_BACKOFF_S = 60.0
TIMEOUT_METRIC_NAMES = {timeouts.SESSION: "session", timeouts.HEARTBEAT: "heartbeat",
                        timeouts.MAX_POLL: "max_poll"}


# --- the decision ---------------------------------------------------------------------------


def decide(snap: Snapshot) -> Plan:
    """Everything this pass will do, from what it saw."""
    if snap.problem is not None:
        return degraded(snap, snap.problem)
    spec, group = snap.spec, snap.group
    if spec is None or group is None or snap.partitions is None:
        return degraded(snap, Problem(c.API_ERROR, "the pass gathered an incomplete snapshot"))
    holder = group_id_holder(snap)
    if holder is not None:
        return _refuse_group_id(snap, spec, holder)
    previous = snap.previous
    measurements = measure(snap)
    before = timeouts.EffectiveTimeouts.from_status(previous.get("timeouts"))
    try:
        effective = timeouts.compute_timeouts(
            protocol=spec.membership.protocol, explicit=spec.membership.timeouts,
            measurements=measurements,
            bounds=timeouts.BrokerBounds.from_broker_config(
                spec.membership.protocol, snap.broker_config or {}),
            current=before, now=snap.now,
            margin_percent=spec.membership.auto_tuning.restart_margin_percent,
            auto_tuning=spec.membership.auto_tuning.enabled,
            max_auto_session_ms=spec.membership.auto_tuning.max_session_timeout_ms)
    except timeouts.TimeoutRuleError as exc:
        return degraded(snap, Problem(c.INVALID_TIMEOUTS, str(exc)))
    if before is not None and not _rollout_requested(snap, spec, before):
        effective = timeouts.riding(effective, before, spec.membership.protocol)
    effective = replace(effective, reasons=effective.reasons + timeout_notes(previous))

    events: list[Event] = []
    changed = effective.changed_fields(before)
    if changed and before is not None:
        detail = ", ".join(f"{f} {before.value(f)} -> {effective.value(f)} ms" for f in changed)
        events.append(Event("Normal", c.TIMEOUTS_CHANGED,
                            f"{detail}: {'; '.join(effective.reasons)}"))
    configs = (effective.group_configs(spec.membership.protocol)
               if changed or before is None else {})

    view = builders.member_spec_view(spec, effective)
    total = sum(snap.partitions.values())
    table = observe_members(spec=spec, view=view, pods=snap.pods, statuses=snap.statuses,
                            group=group, partitions=total)
    rebalances = count_rebalances(previous, group.state, snap.pods, snap.statuses)
    last_planned = pl.PlannedRebalance.from_status(previous.get("plannedRebalance"))
    if last_planned is not None and last_planned.reason == pl.CREATE and (
            c.get_condition(previous.get("conditions") or [], c.READY) or {}).get(
            "status") == "True":
        last_planned = None  # the new group formed: its members' joins explain nothing more
    planned_now = rebalances.increase if (
        last_planned is not None and last_planned.explains(snap.now)) else 0
    events += _rebalance_events(previous, rebalances, group, planned_now, last_planned)

    activations = pods.activations(snap, table, spec.replicas)
    roll = rollout_step(snap, spec, view, effective, table, group.state, rebalances.total,
                        frozenset(call.ordinal for call in activations))
    creates = pods.creates(snap, spec, view, effective, table, roll.state)
    down = pl.scale_down(snap, spec, table, last_planned)
    deletes = down.deletes + roll.deletes + pods.abandoned(table, roll.state, spec.replicas,
                                                           {d.uid for d in roll.deletes})
    ended = pods.ended(spec, table, {d.uid for d in deletes})
    deletes += tuple(d for d, _ in ended)
    stalls = stalled_members(table, snap.statuses, snap.end_offsets, snap.lag,
                             spec.processing.batch.max_wait_ms, snap.now,
                             restarting=tuple(f.ordinal for f in roll.state.in_flight))
    stall_restart = stalled_restart(spec, stalls, roll, table, deletes)
    deletes += stall_restart
    new_members = [p.ordinal for p in creates if p.why == pods.WHY_NEW]
    if new_members:
        # A new group's members join one after another too: the rebalances of its forming are
        # the operator's doing, not members coming and going (they fired the rebalance alert
        # within the hour of every group's creation).
        scaled = previous.get("replicas") is not None
        if scaled:
            events.append(Event("Normal", c.SCALED_UP, f"created members {new_members}: their "
                                "joins are planned rebalances"))
        down = replace(down, planned=pl.PlannedRebalance(pl.SCALE_UP if scaled else pl.CREATE,
                                                         tuple(new_members), snap.now))
    removed = sorted(d.ordinal for d in deletes if d.why.startswith(pl.WHY_SCALE_DOWN))
    if removed:
        events.append(Event("Normal", c.SCALED_DOWN, f"removed members {removed} (highest first)"))
    events += down.events + roll.events + tuple(e for _, e in ended)

    # Judged only in a Stable group the operator is not changing: during a rollout (a topic
    # added rolls the members, each with the new subscription) or a scale-down, partitions are
    # unowned for a moment by design; the condition then keeps what it said before.
    judged = (group.state == "Stable" and bool(group.members) and not roll.state.in_flight
              and roll.state.phase not in PHASES_IN_PROGRESS and not down.calls
              and not down.waiting)
    missing = pl.unassigned(snap.partitions, group) if judged else ()
    since = (pl.unassigned_since(previous, missing, snap.now) if judged
             else c.parse_optional(previous.get("unassignedSince")))
    rejoin = pl.rejoin(snap, table, spec, missing, since, last_planned)
    planned = down.planned or (rejoin.planned if rejoin else None) or last_planned
    calls = activations + down.calls + ((rejoin.call,) if rejoin else ())

    problems = _stuck(snap, table) + _failing(spec, table)
    unassigned_cond = (pl.unassigned_condition(missing, since, rejoin, last_planned) if judged
                       else _kept(previous, c.UNASSIGNED_PARTITIONS)
                       or pl.unassigned_condition((), None, None, None))
    extra = (unassigned_cond, _bounds_condition(snap, spec),
             stalled_condition(spec, stalls, stall_restart, roll))
    status = _status(snap, spec, effective, measurements, total, roll, rebalances, problems,
                     extra)
    status["plannedRebalance"] = planned.to_status() if planned else None
    status["plannedRebalances"] = int(previous.get("plannedRebalances") or 0) + planned_now
    status["unassignedSince"] = c.rfc3339(since) if since else None
    status["stalledRestarts"] = (int(previous.get("stalledRestarts") or 0)
                                 + len(stall_restart))
    status["currentSpec"] = current_spec(snap, spec, status, view.revision)
    events += _transition_events(previous.get("conditions") or [], status["conditions"],
                                 (c.UNASSIGNED_PARTITIONS, "True"),
                                 (c.MEMBERS_STALLED, "True"),
                                 (c.BROKER_BOUNDS_KNOWN, "False"))
    # Degraded shows the first problem; its Event is posted once, when it first shows.
    events += [Event("Warning", reason, message) for reason, message in problems[:1]
               if not _already_said(previous, reason, message)]
    idle_before = c.get_condition(previous.get("conditions") or [], c.IDLE_MEMBERS)
    idle = c.get_condition(status["conditions"], c.IDLE_MEMBERS)
    if idle and idle["status"] == "True" and (not idle_before or idle_before["status"] != "True"):
        events.append(Event("Warning", c.MORE_MEMBERS_THAN_PARTITIONS, str(idle["message"])))

    at_risk = c.get_condition(status["conditions"], c.ROLLOUT_AT_RISK)
    metric_values = MetricValues(
        members_desired=spec.replicas, members_ready=table.ready_count(spec.replicas),
        partitions=total, idle_members=scaling.idle_members(spec.replicas, total) if total else 0,
        timeouts_s={TIMEOUT_METRIC_NAMES[f]: effective.value(f) / 1000
                    for f in TIMEOUT_METRIC_NAMES},
        rollout_in_progress=roll.state.phase in PHASES_IN_PROGRESS,
        rollout_at_risk=bool(at_risk and at_risk["status"] == "True"),
        rebalances=rebalances.increase, planned_rebalances=planned_now,
        unassigned_partitions=len(missing) if group.state == "Stable" else None,
        lag=snap.lag, lag_age_s=snap.lag_age_s, group_id=spec.kafka.group_id,
        timeout_changes=tuple(TIMEOUT_METRIC_NAMES[f] for f in changed),
        absences_s=tuple(r[1] for r in roll.restarts), processing_gaps_s=roll.gaps,
        rollout_finished=roll.finished, stalled_members=len(stalls),
        stalled_restarts=len(stall_restart))
    return Plan(
        status=_stamped(status, previous, snap), group_configs=configs,
        children=(*_member_token_secret(snap, spec), builders.build_config_map(spec, effective),
                  builders.build_headless_service(spec), builders.build_pdb(spec)),
        create=creates, delete=deletes, events=tuple(events), metrics=metric_values,
        requeue_after_s=_soonest(roll.requeue_after_s, down.requeue_after_s,
                                 pl.UNASSIGNED_GRACE_S if missing else None,
                                 pods.ENDED_RECHECK_S if ended else None),
        calls=calls, annotate=pods.marked_activated(table, activations),
        switchovers=roll.switchovers)


def _member_token_secret(snap: Snapshot, spec: ConsumerGroupSpec) -> tuple[dict[str, Any], ...]:
    """The Secret of the members' token, when it is missing (first pass, or deleted by hand):
    made with the token the gather drew for it. An existing one is left as it is, so a token
    written into it by hand (a rotation) stands; the operator only reads it."""
    if not snap.member_token_missing or not snap.member_token:
        return ()
    return (builders.build_member_token_secret(spec, snap.member_token),)


def _soonest(*delays: float | None) -> float | None:
    known = [d for d in delays if d is not None]
    return min(known) if known else None


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


# --- what stops a group ---------------------------------------------------------------------

STUCK_AFTER_S = 60.0
"""A member pod still there this long after its grace period ended is stuck (its node is gone,
or a finalizer holds it)."""


def group_id_holder(snap: Snapshot) -> Claimant | None:
    """The ConsumerGroup that keeps this one's Kafka group id, when it is another (the oldest
    claimant keeps it, within one second the one already on it; two objects on one group fence
    each other's members forever)."""
    if len(snap.claimants) < 2:
        return None
    holder = min(snap.claimants,
                 key=lambda k: (k.created, not k.holding, k.namespace, k.name))
    return None if holder.uid == snap.body["metadata"]["uid"] else holder


def _refuse_group_id(snap: Snapshot, spec: ConsumerGroupSpec, holder: Claimant) -> Plan:
    message = (
        f"spec.kafka.groupId: the Kafka group {spec.kafka.group_id!r} on "
        f"{spec.kafka.bootstrap_servers} is already used by ConsumerGroup "
        f"{holder.namespace}/{holder.name} (created {holder.created}); two objects on one group "
        "fence each other's members. This one runs no members: create it again with a "
        "spec.kafka.groupId of its own (groupId defaults to metadata.name, which is unique only "
        "in a namespace, and cannot be changed on an existing ConsumerGroup)")
    plan = degraded(snap, Problem(c.GROUP_ID_IN_USE, message))
    deletes = tuple(
        PodDelete(ordinal_of(p) or 0, p["metadata"]["name"], p["metadata"]["uid"],
                  f"{WHY_GROUP_ID_IN_USE} by {holder.namespace}/{holder.name}")
        for p in snap.pods if not p["metadata"].get("deletionTimestamp"))
    return replace(plan, delete=deletes, requeue_after_s=None)


def _stuck(snap: Snapshot, table: MemberTable) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for ordinal, pod in sorted(table.stopping.items()):
        ends = pod["metadata"]["deletionTimestamp"]
        late = (snap.now - c.parse_rfc3339(ends)).total_seconds()
        if late > STUCK_AFTER_S:
            name = pod["metadata"]["name"]
            out.append((c.MEMBER_STUCK_TERMINATING, (
                f"pod {name} (member {ordinal}) is still terminating; its grace period ended at "
                f"{ends}: its node may be gone, or a finalizer holds it. Member "
                f"{ordinal} is not started again while that pod may still run (two processes "
                "with one group.instance.id fence each other). Check the node and the pod's "
                f"finalizers; if the node is really gone, `kubectl delete pod {name} --force "
                "--grace-period=0`")))
    return _one(out)


def _one(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Problems of one reason as one (reason, message)."""
    if len(problems) < 2:
        return problems
    return [(problems[0][0], "; ".join(m for _, m in problems))]


# Where a member's own refusal points in the ConsumerGroup (its config keys, docs/contracts.md).
_RUNTIME_FIELDS = (
    ("processing.", "spec.processing."),
    ("consumer", "spec.kafka.clientProperties"),
    ("topicPattern", "spec.kafka.topicPattern"),
    ("topics", "spec.kafka.topics"),
    ("bootstrap", "spec.kafka.bootstrapServers"),
)


def spec_field(line: str) -> str | None:
    """The ConsumerGroup field a member's refusal names, if it names one (a member that stops
    on an error, `consumer_runtime: member stops: ...`, names none)."""
    if "refused: " not in line:
        return None
    said = line.split("refused: ", 1)[1]
    for prefix, field_ in _RUNTIME_FIELDS:
        if said.startswith(prefix):
            if field_.endswith("."):
                return field_ + said[len(prefix):].split(":", 1)[0].split(" ", 1)[0]
            return field_
    return None


def _failing(spec: ConsumerGroupSpec, table: MemberTable) -> list[tuple[str, str]]:
    out = []
    for ordinal, pod in sorted(table.live.items()):
        failure = member_failure(pod)
        if failure is None or ordinal >= spec.replicas:
            continue
        line = refusal_line(failure.message) or f"exit code {failure.exit_code}"
        where = spec_field(line)
        out.append((c.MEMBER_FAILING, (
            f"member {ordinal} (pod {pod['metadata']['name']}) exited with code "
            f"{failure.exit_code}: {line}"
            + (f" (fix {where})" if where else " (see the pod's log)"))))
    return _one(out)


def _already_said(previous: Mapping[str, Any], reason: str, message: str) -> bool:
    cond = c.get_condition(previous.get("conditions") or [], c.DEGRADED)
    return bool(cond and cond.get("status") == "True" and cond.get("reason") == reason
                and cond.get("message") == message)


# --- measurements ---------------------------------------------------------------------------


def _rollout_requested(snap: Snapshot, spec: ConsumerGroupSpec,
                       in_force: timeouts.EffectiveTimeouts) -> bool:
    """Whether this pass starts a rollout the user asked for (so new timeouts may ride with
    it): explicit timeouts changed, or the spec (with the timeouts in force) makes a revision
    that live members do not run and that no rollout is under way to yet."""
    explicit = spec.membership.timeouts
    for name, value in ((timeouts.SESSION, explicit.session_timeout_ms),
                        (timeouts.HEARTBEAT, explicit.heartbeat_interval_ms),
                        (timeouts.MAX_POLL, explicit.max_poll_interval_ms)):
        if value is not None and value != in_force.value(name):
            return True
    revision = builders.member_spec_view(spec, in_force).revision
    if ro.RolloutState.from_status(snap.previous.get("rollout")).revision == revision:
        return False
    return any(reasons_revision(p) != revision for p in snap.pods
               if not p["metadata"].get("deletionTimestamp"))


def _rebalance_events(previous: Mapping[str, Any], count: RebalanceCount,
                      group: GroupView, planned: int,
                      last: pl.PlannedRebalance | None) -> list[Event]:
    if not count.increase:
        return []
    if planned and last is not None:
        return [Event("Normal", c.PLANNED_REBALANCE,
                      f"the group rebalanced ({count.increase}) as planned ({last.reason}: "
                      f"members {list(last.members)}); state {group.state}")]
    ready = c.get_condition(previous.get("conditions") or [], c.READY)
    if ready and ready.get("status") == "True":
        return [Event("Warning", c.UNEXPECTED_REBALANCE,
                      f"the group rebalanced ({count.increase}) while it was Ready; "
                      f"state {group.state}")]
    return [Event("Normal", c.REBALANCED,
                  f"the group rebalanced ({count.increase}) while forming; state {group.state}")]


# --- members: create, scale down, restart ---------------------------------------------------

WHY_GROUP_ID_IN_USE = "its Kafka group id is in use"


def _kept(previous: Mapping[str, Any], type_: str) -> tuple[str, st.Cond] | None:
    """The condition `type_` as the previous status said it."""
    cond = c.get_condition(previous.get("conditions") or [], type_)
    if not cond:
        return None
    return type_, (cond["status"], str(cond["reason"]), str(cond["message"]))


def _bounds_condition(snap: Snapshot, spec: ConsumerGroupSpec) -> tuple[str, st.Cond]:
    if snap.bounds_denied is None:
        return c.BROKER_BOUNDS_KNOWN, ("True", c.READ_FROM_BROKER,
                                       "the group session and heartbeat bounds were read from "
                                       "the broker's configuration")
    bounds = timeouts.BrokerBounds.from_broker_config(spec.membership.protocol, {})
    return c.BROKER_BOUNDS_KNOWN, (
        "False", c.DESCRIBE_CONFIGS_DENIED,
        f"{snap.bounds_denied}: the timeouts are chosen inside Kafka's default bounds (session "
        f"{bounds.min_session_ms}-{bounds.max_session_ms} ms), which this broker may not use. "
        "Allow the operator's principal DescribeConfigs on the Cluster resource, or set "
        "spec.membership.timeouts inside the broker's bounds")


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


def _status(snap: Snapshot, spec: ConsumerGroupSpec, effective: timeouts.EffectiveTimeouts,
            measurements: timeouts.Measurements, total: int, roll: Roll,
            rebalances: RebalanceCount,
            problems: Sequence[tuple[str, str]] = (),
            extra: Sequence[tuple[str, st.Cond]] = ()) -> dict[str, Any]:
    previous = snap.previous
    conds = st.derive_conditions(
        previous.get("conditions") or [], group=spec, observed=roll.observation,
        rollout=roll.state, timeouts=effective, partitions=total, now=snap.now,
        refusal=roll.refusal, problems=problems, extra=extra)
    recorded: dict[str, Any] = dict(previous.get("measurements") or {})
    for member, seconds, why in roll.restarts:
        recorded = (st.record_restart(recorded, seconds, member) if why is None
                    else st.ignore_restart(recorded, seconds, member, why))
    first = first_assignment_s(snap)
    if first is not None:
        recorded["firstAssignmentSecondsMax"] = round(first, 3)
    if measurements.batch_seconds_max is not None:
        recorded["batchSecondsMax"] = measurements.batch_seconds_max
    status = st.build_status(
        group=spec, observed=roll.observation, rollout=roll.state,
        update_revision=roll.state.revision or "",
        current_revision=previous.get("currentRevision"), timeouts=effective, partitions=total,
        measurements=recorded, conditions=conds)
    status.update({"groupId": spec.kafka.group_id,
                   "memberRebalanceCounters": dict(rebalances.counters),
                   "rebalancesFromState": rebalances.from_state or None,
                   "consecutiveFailures": 0})
    return status


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
