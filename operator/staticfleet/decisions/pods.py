"""The member pods' own rules (pure): which to create, which ended or are abandoned and go,
which standby to activate.

Every desired member without a pod gets one (`creates`), with why: a new member, a missing one,
a rollout's replacement (same ordinal, same `group.instance.id`, the update revision) or the
replacement of a pod that ended; and a warm handoff's standby, of the update revision or, for a
rollback, of the revision every member last ran (`rollout.effects.rollback_source`, read once per
pass and carried in the `Roll`). A pod that ended (evicted, its node shut down) is deleted with
a Warning (`ended`); a standby no handoff waits for is deleted (`abandoned`). A standby that is
its ordinal's only process once standby-ready is activated (`activations`), its pod marked
activated first (`marked_activated`); while the group's coordinator moves, that is all a pass
steers (`handoffs_under_way`).

`pod_changes` gathers every creation and deletion of a pass: these, the roller's (its steps
delete pods in `rollout.effects`), the scale-down's (`rebalance.planned`) and a stalled member's
restart (`stalls`), with their Events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from staticfleet.decisions import builders, scaling
from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import (
    Event,
    MemberCall,
    PodAnnotate,
    PodCreate,
    PodDelete,
    soonest,
)
from staticfleet.decisions.members.observed import (
    TERMINAL_PHASES,
    MemberTable,
    ended_reason,
    observe_members,
    still_running,
)
from staticfleet.decisions.members.stalls import (
    Overdue,
    Recovery,
    Stall,
    group_slowest_batch_s,
    overdue_batches,
    recovery_memory,
    stalled_members,
    stalled_restart,
)
from staticfleet.decisions.names import (
    ACTIVATED_ANNOTATION,
    JOINED_AS_NEW_ANNOTATION,
    instance_id,
    ordinal_of,
)
from staticfleet.decisions.reasons import MemberSpecView
from staticfleet.decisions.rebalance import planned as pl
from staticfleet.decisions.rollout.effects import Roll, RollbackSource
from staticfleet.decisions.rollout.state import RolloutState
from staticfleet.decisions.snapshot import GroupView, Snapshot
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts

WHY_NEW = "new member"
WHY_MISSING = "its pod is missing (deleted outside a rollout, or lost with its node)"
WHY_REPLACEMENT = "replacement of the restarted member"
WHY_STANDBY = "standby replacement (warm handoff)"
WHY_ABANDONED = ("a standby replacement no handoff waits for (the spec changed while it "
                 "prepared, or its member was scaled away)")
WHY_ROLLBACK = "standby replacement of the last revision that processed (rollback)"
WHY_ENDED = "its pod ended and never runs again"
WHY_ENDED_REPLACEMENT = "replacement of its pod that ended"
ENDED_RECHECK_S = 1.0
"""When to look again after deleting an ended pod (its deletion also wakes a pass)."""
WHY_ACTIVATED = ("it is activated now: a restart of its container joins the group directly, "
                 "not in standby")


def creates(snap: Snapshot, spec: ConsumerGroupSpec, view: MemberSpecView,
            effective: EffectiveTimeouts, table: MemberTable,
            state: RolloutState, back: RollbackSource | None,
            last: pl.PlannedRebalance | None) -> tuple[PodCreate, ...]:
    """Each desired member without a pod (none of its pods is still terminating), and each
    standby a warm handoff waits for (`back`: the spec a rollback hands a member back to);
    `last`: the planned rebalance the previous passes recorded."""
    restarting = {f.ordinal for f in state.in_flight}
    known = {m.get("ordinal") for m in snap.previous.get("members") or ()}
    # Members the last scale-down removed (their stopping pods kept them in the status) and
    # the ones deleted for a scale-down taken back (`rebalance.planned.leaves_taken_back`)
    # join as new.
    returning = (set(last.members) if last is not None
                 and last.reason in (pl.SCALE_UP, pl.SCALE_DOWN) else set())
    ended = {m.get("ordinal"): m.get("phase") for m in snap.previous.get("members") or ()
             if m.get("phase") in TERMINAL_PHASES}
    out = []
    for ordinal in scaling.ordinals_to_create(table.ordinals(), spec.replicas):
        if ordinal in ended:
            why = f"{WHY_ENDED_REPLACEMENT} (phase {ended[ordinal]}; revision {view.revision})"
        elif ordinal in restarting:
            why = f"{WHY_REPLACEMENT} (revision {view.revision})"
        elif ordinal not in known or ordinal in returning:
            why = WHY_NEW
        else:
            why = WHY_MISSING
        pod = builders.build_member_pod(spec, ordinal, view, effective.session_timeout_ms)
        if why == WHY_NEW:  # its start is a join, not a restart (`measurements.cold_start_s`)
            pod["metadata"].setdefault("annotations", {})[JOINED_AS_NEW_ANNOTATION] = "true"
        out.append(PodCreate(ordinal, pod, why))
    names = {p["metadata"]["name"] for p in snap.pods}
    for f in state.in_flight:
        if f.mode != "warm" or f.stopped_at is not None or f.replacement in names \
                or f.ordinal not in table.live:
            continue
        if f.revision is None:
            pod = builders.build_member_pod(spec, f.ordinal, view, effective.session_timeout_ms,
                                            standby=True)
            out.append(PodCreate(f.ordinal, pod, f"{WHY_STANDBY} (revision {view.revision})",
                                 standby=True))
            continue
        if back is not None and back.view.revision == f.revision:
            pod = builders.build_member_pod(back.spec, f.ordinal, back.view,
                                            back.session_timeout_ms, standby=True)
            out.append(PodCreate(f.ordinal, pod, f"{WHY_ROLLBACK} (revision {f.revision})",
                                 standby=True))
    return tuple(out)


def ended(spec: ConsumerGroupSpec, table: MemberTable,
          deleting: set[str]) -> tuple[tuple[PodDelete, Event], ...]:
    """Pods that ended (evicted, their node shut down) are deleted, each with a Warning that
    quotes why, as a StatefulSet does: the member's replacement takes the same pod name, so
    it is created (same instance id) by the pass after the deletion; its process is gone, so
    no second process of the instance id can run. One beside a live pod of its ordinal (an
    evicted old member and its warm replacement, an evicted replacement and its member) only
    goes: the live one is the member, and a handoff in flight makes its replacement again."""
    out = []
    for ordinal, pods in sorted(table.ended.items()):
        live = table.live.get(ordinal)
        for pod in pods:
            meta = pod["metadata"]
            if meta["uid"] in deleting:
                continue
            if ordinal >= spec.replicas:
                then = "no replacement: the member is beyond spec.replicas"
            elif live is not None:
                then = (f"pod {live['metadata']['name']} runs instance id "
                        f"{instance_id(spec, ordinal)}")
            else:
                then = ("its replacement is created with the same instance id "
                        f"{instance_id(spec, ordinal)} once it is gone")
            said = ended_reason(pod)
            out.append((
                PodDelete(ordinal, meta["name"], meta["uid"], f"{WHY_ENDED}: {said}"),
                Event("Warning", c.RECREATING_FAILED_POD,
                      f"member {ordinal}: pod {meta['name']} ended, {said}; deleting it, "
                      f"{then}")))
    return tuple(out)


def abandoned(table: MemberTable, state: RolloutState, replicas: int,
              deleting: set[str]) -> tuple[PodDelete, ...]:
    """Standby replacements no handoff waits for: of a revision the spec moved past while they
    prepared, or of a member scaled away. Left running they would hold a pod forever."""
    wanted = {f.replacement for f in state.in_flight if f.mode == "warm" and f.ordinal < replicas}
    out = []
    for ordinal, pods in sorted(table.extra.items()):
        for pod in pods:
            meta = pod["metadata"]
            if meta["name"] in wanted or meta["uid"] in deleting:
                continue
            out.append(PodDelete(ordinal, meta["name"], meta["uid"], WHY_ABANDONED))
    return tuple(out)


def activations(snap: Snapshot, table: MemberTable,
                replicas: int) -> tuple[MemberCall, ...]:
    """Standby processes that are their ordinal's only member now: activate them once they
    are standby-ready (before, the member refuses) and no older process of the ordinal still
    runs (two processes of one instance id in the group fence each other). This finishes a
    warm handoff. A replacement whose container restarts in place after its activation joins
    by itself (its pod is marked activated first, `marked_activated`); one that still comes
    back in standby (a pod made before that mark existed) is activated again here."""
    out = []
    for m in table.members:
        pod = table.live.get(m.ordinal)
        if (pod is None or m.ordinal >= replicas or m.standby_state != "ready"
                or pod["metadata"]["name"] != m.pod_name):
            continue  # a standby refuses an activation until it is standby-ready
        if not (pod.get("status") or {}).get("podIP"):
            continue
        older = [p for p in snap.pods
                 if ordinal_of(p) == m.ordinal and still_running(p, snap.closed_by_pod)]
        if older:
            continue
        out.append(MemberCall(m.ordinal, str(m.pod_name), "activate",
                              "the old member process of this instance id has closed"))
    return tuple(out)


def marked_activated(table: MemberTable,
                     activations: Sequence[MemberCall]) -> tuple[PodAnnotate, ...]:
    """Each pod about to be activated, marked so first (`names.ACTIVATED_ANNOTATION`)."""
    out = []
    for call in activations:
        pod = table.live.get(call.ordinal)
        if pod is None or pod["metadata"]["name"] != call.pod:
            continue
        if (pod["metadata"].get("annotations") or {}).get(
                ACTIVATED_ANNOTATION) == "true":
            continue  # marked in an earlier pass; its activation did not take (yet)
        out.append(PodAnnotate(call.ordinal, call.pod, pod["metadata"]["uid"],
                               {ACTIVATED_ANNOTATION: "true"}, WHY_ACTIVATED))
    return tuple(out)


def table_without_group(snap: Snapshot) -> MemberTable:
    assert snap.spec is not None
    spec = snap.spec
    effective = EffectiveTimeouts.from_status(snap.previous.get("timeouts"))
    assert effective is not None
    return observe_members(
        spec=spec, view=builders.member_spec_view(spec, effective), pods=snap.pods,
        statuses=snap.statuses, group=GroupView(state="Unknown", protocol=spec.membership.protocol),
        partitions=sum((snap.partitions or {}).values()), slow=snap.slow_members)


def handoffs_under_way(snap: Snapshot) -> tuple[MemberCall, ...]:
    """While the group's coordinator moves the group cannot be described, but a warm handoff
    whose old process has closed still gets its activation: the standby joins the group when
    the new coordinator answers it, inside the session timeout, instead of waiting for the
    operator to see the group again. Nothing else is steered in such a pass."""
    if (snap.spec is None or not snap.pods
            or EffectiveTimeouts.from_status(snap.previous.get("timeouts")) is None):
        return ()
    return activations(snap, table_without_group(snap), snap.spec.replicas)


@dataclass(frozen=True)
class PodChanges:
    """The member pods one pass creates and deletes, each with why, and their Events."""

    create: tuple[PodCreate, ...]
    delete: tuple[PodDelete, ...]
    down: pl.ScaleDown
    """The scale-down's part (its calls, and the planned rebalance of this pass's new or
    removed members)."""
    stalls: tuple[Stall, ...]
    stalled_restart: tuple[PodDelete, ...]
    stall_memory: dict[int, Recovery]
    """Each member's stall restarts before this pass (`status.stallRecovery`)."""
    stall_recovery: list[dict[str, Any]] | None
    """`status.stallRecovery` after this pass."""
    events: tuple[Event, ...]
    requeue_after_s: float | None
    overdue: tuple[Overdue, ...] = ()
    """Members whose batch in flight runs past its bound (`stalls.overdue_batches`)."""


def pod_changes(snap: Snapshot, spec: ConsumerGroupSpec, view: MemberSpecView,
                effective: EffectiveTimeouts, table: MemberTable, roll: Roll,
                last: pl.PlannedRebalance | None) -> PodChanges:
    """Every member pod this pass creates or deletes: the missing members' pods (`creates`);
    deletions for the scale-down (`rebalance.planned.scale_down`), the rollout's step, abandoned
    standbys, pods that ended, and a stalled member (`stalls.stalled_restart`, only while
    nothing else goes)."""
    previous = snap.previous
    create = creates(snap, spec, view, effective, table, roll.state, roll.rollback, last)
    down = pl.scale_down(snap, spec, table, last)
    delete = down.deletes + roll.deletes + abandoned(table, roll.state, spec.replicas,
                                                     {d.uid for d in roll.deletes})
    gone = ended(spec, table, {d.uid for d in delete})
    delete += tuple(d for d, _ in gone)
    taken_back = pl.leaves_taken_back(spec, table, {d.uid for d in delete})
    delete += tuple(d for d, _ in taken_back)
    if taken_back and down.planned is None:
        down = replace(down, planned=pl.PlannedRebalance(
            pl.SCALE_UP, tuple(d.ordinal for d, _ in taken_back), snap.now))
    stalls = stalled_members(table, snap.statuses, snap.end_offsets, snap.lag,
                             spec.processing.batch.max_wait_ms, snap.now,
                             restarting=tuple(f.ordinal for f in roll.state.in_flight),
                             leaderless=snap.leaderless)
    overdue = overdue_batches(table, snap.statuses, effective.max_poll_interval_ms,
                              group_slowest_batch_s(previous), snap.now)
    memory = Recovery.from_status(previous.get("stallRecovery"))
    restart = stalled_restart(spec, stalls, table, delete, memory,
                              rollout_under_way=roll.under_way, restart_safe=roll.restart_safe)
    delete += restart
    recovery = recovery_memory(
        previous.get("stallRecovery"), stalls, restart,
        {m.ordinal: snap.statuses.get(m.pod_uid or "") for m in table.members}, snap.now)
    events: list[Event] = []
    new_members = [p.ordinal for p in create if p.why == WHY_NEW]
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
    removed = sorted(d.ordinal for d in delete if d.why.startswith(pl.WHY_SCALE_DOWN))
    if removed:
        events.append(Event("Normal", c.SCALED_DOWN, f"removed members {removed} (highest first)"))
    events += down.events + roll.events + tuple(e for _, e in gone + taken_back)
    return PodChanges(create, delete, down, stalls, restart, memory, recovery, tuple(events),
                      soonest(down.requeue_after_s, ENDED_RECHECK_S if gone else None),
                      overdue)
