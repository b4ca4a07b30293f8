"""When a group's next pass is due (pure): soon while something goes on, after a long rest when
nothing does.

A pass is woken by what changes: the ConsumerGroup's spec or restart annotation
(`handlers.group_changed`), its member pods (the pod watch) and its Kafka group's answer in
its cluster's batched reads (`observe.clusterreads`: the group's state, its members and their
assignments, its coordinator, its topics' partitions and leaders, a describe that fails). What
nothing wakes a pass for is the members' own `/status` (a member that stops fetching, a
rebalance counter) and the clock. So, after a pass, the next one comes:

1. when the plan asks for one (`Plan.requeue_after_s`: a rollout's next step, a backoff);
2. else after the resync interval (`resync_s`, 10 s) while the group is busy: a rule of
   `AT_REST` fails (the plan's `busy` says which, one line each);
3. else after the rest interval (`rest_s`, 60 s), or sooner when a decision waits on the clock
   (`Plan.deadline_s`: a member nearing its stall bound, a timeout's lowering that is due).

So a group at rest costs a pass (and a `/status` read of each member) a minute, not every
10 s; what its members report is seen up to the rest interval late (a rebalance counter, a
stall that starts while no record waited yet: `members.stalls`).

A rule is `(name, check)`: `check(snap, plan)` returns None when the group is at rest in that
respect, else why it is not. Adding a rule is adding a row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Plan
from staticfleet.decisions.members.observed import pod_ended, pod_ready
from staticfleet.decisions.rebalance.planned import PlannedRebalance
from staticfleet.decisions.rollout.state import RolloutState
from staticfleet.decisions.snapshot import Snapshot

SETTLED_STATES = frozenset({"Stable", "Empty", "Dead"})
"""The group's states that are not a rebalance under way (a KIP-848 group's Assigning and
Reconciling read as Unknown: `observe.clusteranswers`)."""
ROLLING_PHASES = frozenset({"Pending", "Rolling", "AtRisk"})
MIN_WAIT_S = 1.0
"""The shortest wait for a deadline (one that has just passed is the next pass's to judge)."""

Check = Callable[[Snapshot, Plan], str | None]


def pass_finished(snap: Snapshot, plan: Plan) -> str | None:
    if snap.problem is not None:
        return f"the pass stopped: {snap.problem.reason}"
    if snap.spec is None or snap.group is None or plan.metrics.error is not None:
        return "the pass could not finish"
    return None


def not_degraded(snap: Snapshot, plan: Plan) -> str | None:
    cond = c.get_condition(plan.status.get("conditions") or [], c.DEGRADED)
    if cond is not None and cond.get("status") == "True":
        return f"Degraded ({cond.get('reason')})"
    return None


def nothing_done(snap: Snapshot, plan: Plan) -> str | None:
    done = [what for what, count in (
        ("pods created", len(plan.create)), ("pods deleted", len(plan.delete)),
        ("members called", len(plan.calls)), ("switchovers", len(plan.switchovers)),
        ("pods annotated", len(plan.annotate)), ("group configs set", len(plan.group_configs)),
        ("Events posted", len(plan.events)),
        ("replicas scaled", int(plan.scale_to is not None)),
        ("the member token Secret made", int(snap.member_token_missing))) if count]
    return f"the pass acted: {', '.join(done)}" if done else None


def status_unchanged(snap: Snapshot, plan: Plan) -> str | None:
    previous = snap.previous
    moved = sorted(k for k in {*previous, *plan.status} if previous.get(k) != plan.status.get(k))
    return f"the pass changed status {', '.join(moved)}" if moved else None


def no_rollout(snap: Snapshot, plan: Plan) -> str | None:
    state = RolloutState.from_status(plan.status.get("rollout"))
    if state.phase in ROLLING_PHASES or state.in_flight:
        return f"a rollout is {state.phase}"
    return None


def members_settled(snap: Snapshot, plan: Plan) -> str | None:
    """Every desired member has one pod, Ready, and no pod is going or ended: a pod that comes
    or goes wakes a pass by itself, but a pod in between is watched at the usual pace."""
    assert snap.spec is not None
    names = {p["metadata"]["name"]: p for p in snap.pods}
    going = sorted(n for n, p in names.items() if p["metadata"].get("deletionTimestamp"))
    if going:
        return f"pods {', '.join(going)} are terminating"
    ended = sorted(n for n, p in names.items() if pod_ended(p))
    if ended:
        return f"pods {', '.join(ended)} ended"
    if len(names) != snap.spec.replicas:
        return f"{len(names)} member pods for {snap.spec.replicas} replicas"
    unready = sorted(n for n, p in names.items() if not pod_ready(p))
    return f"pods {', '.join(unready)} are not Ready" if unready else None


def members_answer(snap: Snapshot, plan: Plan) -> str | None:
    silent = sorted(p["metadata"]["name"] for p in snap.pods
                    if p["metadata"]["uid"] not in snap.statuses)
    return f"pods {', '.join(silent)} did not answer /status" if silent else None


def group_settled(snap: Snapshot, plan: Plan) -> str | None:
    assert snap.group is not None
    state = snap.group.state
    return None if state in SETTLED_STATES else f"the group is {state}"


def condition_false(type_: str) -> Check:
    def check(snap: Snapshot, plan: Plan) -> str | None:
        cond = c.get_condition(plan.status.get("conditions") or [], type_)
        if cond is not None and cond.get("status") == "True":
            return f"{type_} ({cond.get('reason')})"
        return None
    return check


def no_autoscaling(snap: Snapshot, plan: Plan) -> str | None:
    assert snap.spec is not None
    if snap.spec.autoscaling is not None:
        return "the autoscaler samples the lag and the members' throughput on every pass"
    return None


def no_planned_rebalance_awaited(snap: Snapshot, plan: Plan) -> str | None:
    """A rebalance the operator asked for is told from an unexpected one by when it is seen
    (`rebalance.planned.PlannedRebalance.explains`): within its window, the members' counters
    are read at the usual pace."""
    last = PlannedRebalance.from_status(plan.status.get("plannedRebalance"))
    if last is not None and last.explains(snap.now):
        return f"a planned rebalance ({last.reason}) may still show"
    return None


def kafka_watched(snap: Snapshot, plan: Plan) -> str | None:
    if not snap.kafka_watched:
        return ("the group's cluster is read group by group: no batched read wakes a pass when "
                "the group changes")
    return None


AT_REST: tuple[tuple[str, Check], ...] = (
    ("PassFinished", pass_finished),
    ("NotDegraded", not_degraded),
    ("NothingDone", nothing_done),
    ("StatusUnchanged", status_unchanged),
    ("NoRollout", no_rollout),
    ("MembersSettled", members_settled),
    ("MembersAnswer", members_answer),
    ("GroupSettled", group_settled),
    ("NotStalled", condition_false(c.MEMBERS_STALLED)),
    ("PartitionsAssigned", condition_false(c.UNASSIGNED_PARTITIONS)),
    ("NoAutoscaling", no_autoscaling),
    ("NoPlannedRebalanceAwaited", no_planned_rebalance_awaited),
    ("KafkaWatched", kafka_watched),
)
"""Every rule a group at rest keeps, in the order they are reported; `PassFinished` first, as
the others read what a finished pass gathered."""


def busy(snap: Snapshot, plan: Plan) -> tuple[str, ...]:
    """Every rule of `AT_REST` that fails after this pass, as `name: why` (empty: at rest)."""
    out = []
    for name, check in AT_REST:
        why = check(snap, plan)
        if why is not None:
            out.append(f"{name}: {why}")
            if name == "PassFinished":
                break
    return tuple(out)


@dataclass(frozen=True)
class Pace:
    """When the next pass is due, and why then."""

    delay_s: float
    why: str
    at_rest: bool = False


def next_pass(plan: Plan, resync_s: float, rest_s: float) -> Pace:
    """The next pass after `plan` (see the module's docstring)."""
    if plan.requeue_after_s is not None:
        return Pace(plan.requeue_after_s, "the plan asks for it", not plan.busy)
    pace = (Pace(resync_s, plan.busy[0]) if plan.busy
            else Pace(max(rest_s, resync_s), "at rest", at_rest=True))
    if plan.deadline_s is not None and plan.deadline_s < pace.delay_s:
        return replace(pace, delay_s=max(MIN_WAIT_S, plan.deadline_s),
                       why=f"{pace.why}; a decision waits on the clock until then")
    return pace
