"""The roller's step as this pass's actions (pure): `rollout_step`.

The roller's modules: `state` types what the roller sees and remembers
(`GroupObservation`, `RolloutLimits`, `RolloutState` in `status.rollout`); `roller` decides
when and how safely (`next_step`, a warm handoff's own steps in `warm`), one of the steps
typed in `steps`; `record` says what state follows (`record_step`, one row per step
type in `state_after`). This module puts them to work in one pass: it builds the
observation and the limits from the `Snapshot`, asks the roller for its step, and turns the step
into the plan's pod deletions, switchovers and Events (one row per step type in `effects`, a
`functools.singledispatch`), with the restarts it measured: a `Roll`, which `plan.decide` folds
into the `Plan`. A rollout's replacements are created by `pods.creates`, as any missing member is.

It also keeps the spec every member last ran (`current_spec`, `status.currentSpec`), which a
rollback hands a failed member back to (`rollback_source`, read once per pass and carried in
the `Roll` to `pods.creates`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from staticfleet.decisions import builders
from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Event, PodDelete, Switchover
from staticfleet.decisions.members.observed import (
    MemberTable,
    last_batch_at,
    running_session_timeout_ms,
)
from staticfleet.decisions.names import ordinal_of, replacement_name
from staticfleet.decisions.reasons import MemberSpecView, RestartReason
from staticfleet.decisions.rollout import steps
from staticfleet.decisions.rollout.record import record_step
from staticfleet.decisions.rollout.roller import next_step
from staticfleet.decisions.rollout.state import (
    PHASES_IN_PROGRESS,
    GroupObservation,
    RolloutLimits,
    RolloutState,
)
from staticfleet.decisions.snapshot import Snapshot
from staticfleet.decisions.spec.fields import SpecError
from staticfleet.decisions.spec.model import RESTARTED_AT_ANNOTATION, ConsumerGroupSpec
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from staticfleet.decisions.timeouts.measurements import (
    sample,
    slowest_cold_start,
    slowest_restart,
    slowest_text,
)
from staticfleet.decisions.timeouts.widening import Hold

WHY_RESTART = "restart"
WHY_HANDOFF = "restart: its standby replacement is ready (warm handoff)"
WHY_HANDOFF_ABORTED = "warm handoff abandoned: the replacement is deleted"
DRAIN_WAIT_MAX_S = 15.0
"""A switchover waits for the drain (the old member's batch in flight) an eighth of the session
timeout, at least 2 s and at most this; then it stops the old member instead, with the rest of
the session timeout left for the replacement."""
DRAIN_HOLD_MAX_MS = 2500
"""A drained member keeps its instance id's partitions for the replacement half the session
timeout, at most this long; then, if no other process holds its instance id, it subscribes
again as the same static member (no rebalance). The operator activates the replacement
milliseconds after the drain answers; a longer hold only matters when the operator dies in
between, and then it is how long the partitions have no processing owner."""
FIRST_BATCH_WAIT_MAX_S = 5.0
"""After the activation, the old pod's deletion waits for the replacement's first processed
batch a quarter of the session timeout, at most this. Measured
in the demo (3 local-Spark members, 2 cores): the old process's shutdown beside the
replacement's first batch made that batch take 1.4-1.5 s; with the deletion after it, the
processing gaps were 1.0-1.5 s where they had been 1.5-1.6 s in the run before."""


@dataclass(frozen=True)
class Roll:
    """The rollout's part of a pass: its state after this pass's step, and what the step means
    for pods, Events, status and metrics."""

    state: RolloutState
    observation: GroupObservation
    deletes: tuple[PodDelete, ...] = ()
    events: tuple[Event, ...] = ()
    restarts: tuple[tuple[int, float, str | None], ...] = ()
    """Restarts measured this pass: (member, seconds, why it is not a sample or None)."""
    finished: tuple[float, str] | None = None
    requeue_after_s: float | None = None
    refusal: str | None = None
    limits: RolloutLimits | None = None
    gaps: tuple[float, ...] = ()
    """Processing gaps measured this pass (warm handoffs)."""
    switchovers: tuple[Switchover, ...] = ()
    rollback: RollbackSource | None = None
    """The spec every member last ran, which a failed member is handed back to (read once per
    pass: `rollback_source`)."""

    @property
    def under_way(self) -> bool:
        """Members are in flight, or the rollout is rolling (`PHASES_IN_PROGRESS`)."""
        return bool(self.state.in_flight) or self.state.phase in PHASES_IN_PROGRESS

    @property
    def restart_safe(self) -> bool | None:
        """Restarts fit in the session timeout (None: the limits are not known)."""
        return None if self.limits is None else self.limits.restart_safe


def rollout_step(snap: Snapshot, spec: ConsumerGroupSpec, view: MemberSpecView,
                 effective: EffectiveTimeouts, table: MemberTable, group_state: str,
                 rebalances: int, activating: frozenset[int] = frozenset(),
                 widening: tuple[Hold, int] | None = None) -> Roll:
    """One rollout step: the roller decides (`roller.next_step`), `record.state_after` says
    what state follows, and `effects` what it means for pods and Events (one row per step
    type). `widening`: a KIP-848 group that widens its session timeout for rollouts, what the
    widening lets the roller do now and its cap (`RolloutLimits.from_timeouts`)."""
    now = snap.now
    state = RolloutState.from_status(snap.previous.get("rollout"))
    # A classic member keeps the session timeout it joined with; a KIP-848 group's is a group
    # config the broker applies at once.
    running = (running_session_timeout_ms(snap.pods)
               if spec.membership.protocol == "classic" else None)
    which = slowest_text(slowest_restart(snap.previous.get("measurements")),
                         slowest_cold_start(snap))
    limits = RolloutLimits.from_timeouts(effective, spec.rollout, running, which,
                                         float(spec.template.termination_grace_period_seconds),
                                         widening)
    back = rollback_source(snap)
    obs = GroupObservation(
        members=tuple(m for m in table.members if m.ordinal < spec.replicas),
        group_state=group_state, rebalances=rebalances, closed_by_pod=snap.closed_by_pod,
        replicas=spec.replicas,
        last_batches={**{uid: at for uid, st_ in snap.statuses.items()
                         if (at := last_batch_at(st_)) is not None}, **snap.final_batches},
        replacement_names={o: replacement_name(spec, o, view.revision)
                           for o in range(spec.replicas)},
        lag=snap.lag, lag_age_s=snap.lag_age_s, last_seen=snap.last_answers,
        refused=snap.refused, activating=activating,
        rollback_revision=(back.view.revision if back is not None
                           and back.view.revision != view.revision else None),
        rollback_names=({o: replacement_name(back.spec, o, back.view.revision)
                         for o in range(spec.replicas)} if back is not None else {}))
    decided = next_step(state, obs, view.revision, limits, now)
    after = record_step(state, decided, obs, view.revision, now)
    step = decided.step
    if isinstance(step, steps.Complete) and not state.started_at and not after.started_at:
        # Nothing was ever restarted for this revision (first creation, scale-up): no rollout.
        after = RolloutState(revision=view.revision, phase="Idle",
                                       reason=f"every member runs revision {view.revision}")
    return effects(step, _Step(snap, spec, view, table, limits, state, after, rebalances),
                   Roll(state=after, observation=obs, limits=limits, rollback=back))


@dataclass(frozen=True)
class RollbackSource:
    """The spec every member last processed on (`status.currentSpec`), to hand a failed
    member back to."""

    spec: ConsumerGroupSpec
    view: MemberSpecView
    session_timeout_ms: int


def rollback_source(snap: Snapshot) -> RollbackSource | None:
    """The last completed revision's spec, rebuilt from `status.currentSpec`; None when none
    is recorded or it no longer makes the recorded revision."""
    saved = snap.previous.get("currentSpec")
    if not saved or not isinstance(saved.get("spec"), Mapping):
        return None
    meta = dict(snap.body.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    annotations.pop(RESTARTED_AT_ANNOTATION, None)
    if saved.get("restartedAt"):
        annotations[RESTARTED_AT_ANNOTATION] = saved["restartedAt"]
    try:
        old = ConsumerGroupSpec.from_body({**snap.body, "metadata": {**meta,
                                                                     "annotations": annotations},
                                           "spec": saved["spec"]},
                                          allow_testing=snap.settings.allow_testing_annotations)
        old_timeouts = EffectiveTimeouts.from_status(saved.get("timeouts"))
    except (SpecError, KeyError, TypeError, ValueError):
        return None
    if old_timeouts is None:
        return None
    old_view = builders.member_spec_view(old, old_timeouts)
    if old_view.revision != snap.previous.get("currentRevision"):
        return None
    return RollbackSource(old, old_view, old_timeouts.session_timeout_ms)


def current_spec(snap: Snapshot, spec: ConsumerGroupSpec, status: Mapping[str, Any],
                 revision: str) -> Mapping[str, Any] | None:
    """What `status.currentSpec` records: the spec (with the restartedAt annotation and the
    timeouts) once every member runs it, kept otherwise."""
    if status.get("currentRevision") != revision:
        return snap.previous.get("currentSpec")
    timeouts = {k: v for k, v in (status.get("timeouts") or {}).items() if k != "widening"}
    return {"spec": snap.body.get("spec") or {}, "restartedAt": spec.restarted_at,
            "timeouts": timeouts or None}


@dataclass(frozen=True)
class _Step:
    """What a step's effects see."""

    snap: Snapshot
    spec: ConsumerGroupSpec
    view: MemberSpecView
    table: MemberTable
    limits: RolloutLimits
    before: RolloutState
    after: RolloutState
    rebalances: int


def _restart_reasons_text(table: MemberTable, ordinal: int) -> tuple[tuple[RestartReason, ...],
                                                                     str]:
    member = table.member(ordinal)
    why = member.restart_reasons if member else ()
    codes = ",".join(sorted({r.code for r in why}))
    return why, f"{codes}): {'; '.join(r.message for r in why)}"


@functools.singledispatch
def effects(decided: steps.Step, s: _Step, roll: Roll) -> Roll:
    """What the step `decided` means for pods, Events, status and metrics (`roll` holds the
    state after it): one row per step type, registered below."""
    raise TypeError(f"no row in effects for the step {type(decided).__name__}")


@effects.register
def _on_restart(decided: steps.RestartMembers, s: _Step, roll: Roll) -> Roll:
    return _on_start(decided.ordinals, False, s, roll)


@effects.register
def _on_prepare(decided: steps.PrepareReplacements, s: _Step, roll: Roll) -> Roll:
    return _on_start(decided.ordinals, True, s, roll)


def _on_start(ordinals: tuple[int, ...], warm: bool, s: _Step, roll: Roll) -> Roll:
    """Members restarted now (`warm`: their standby replacements started instead)."""
    events = []
    if not s.before.started_at or s.before.revision != s.view.revision:
        count = len(s.after.pending) + len(ordinals)
        at_once = (f"{s.limits.max_surge} replacement(s)" if warm
                   else str(s.limits.max_unavailable))
        events.append(Event("Normal", c.ROLLOUT_STARTED,
                            f"rolling to revision {s.view.revision}"
                            f"{' by warm handoff' if warm else ''}: {count} member(s), "
                            f"at most {at_once} at a time"))
    deletes = []
    for ordinal in ordinals:
        pod = s.table.live[ordinal]
        why, said = _restart_reasons_text(s.table, ordinal)
        if warm:
            events.append(Event("Normal", c.HANDOFF_STARTED, (
                f"starting the replacement of member {ordinal} in standby (pod "
                f"{replacement_name(s.spec, ordinal, s.view.revision)}; {said}")))
        else:
            events.append(Event("Normal", c.MEMBER_RESTARTING,
                                f"restarting member {ordinal} ({said}"))
            deletes.append(PodDelete(ordinal, pod["metadata"]["name"],
                                     pod["metadata"]["uid"], WHY_RESTART, why))
    return replace(roll, deletes=tuple(deletes), events=tuple(events), requeue_after_s=1.0)


def _stop_old(s: _Step, ordinal: int, uid: str | None, why: str) -> tuple[PodDelete, ...]:
    old = s.table.live.get(ordinal)
    if uid is None or old is None or old["metadata"]["uid"] != uid:
        return ()
    member = s.table.member(ordinal)
    return (PodDelete(ordinal, old["metadata"]["name"], uid, why,
                      member.restart_reasons if member else ()),)


@effects.register
def _on_hand_over(decided: steps.HandOver, s: _Step, roll: Roll) -> Roll:
    flight = next((f for f in s.after.in_flight if f.ordinal == decided.ordinal), None)
    warm_s = ((decided.standby_ready_at - flight.prepared_at).total_seconds()
              if flight and flight.prepared_at and decided.standby_ready_at else None)
    stop = _stop_old(s, decided.ordinal, decided.delete_uid, WHY_HANDOFF)
    standby = next((p for p in s.snap.pods if flight is not None
                    and p["metadata"]["name"] == flight.replacement
                    and not p["metadata"].get("deletionTimestamp")
                    and (p.get("status") or {}).get("podIP")), None)
    said = (f"member {decided.ordinal}: its replacement is standby-ready"
            + (f" ({warm_s:.1f} s after it was created)" if warm_s is not None else ""))
    if decided.resumed:
        said = (f"member {decided.ordinal}: resuming its switchover, which an earlier pass "
                "started (the status records it) and did not finish (the operator stopped, or "
                "a write failed)")
    if stop and standby is not None and not s.spec.handoff_without_drain_for_testing:
        (old,) = stop
        session_ms = s.limits.session_timeout_ms
        switch = Switchover(decided.ordinal, old, standby["metadata"]["name"],
                            standby["metadata"]["uid"],
                            hold_ms=min(session_ms // 2, DRAIN_HOLD_MAX_MS),
                            wait_s=min(DRAIN_WAIT_MAX_S, max(2.0, session_ms / 8000)),
                            first_batch_wait_s=min(FIRST_BATCH_WAIT_MAX_S, session_ms / 4000))
        return replace(roll, switchovers=(switch,), requeue_after_s=0.2, events=(Event(
            "Normal", c.MEMBER_RESTARTING,
            f"{said}; draining the old member (it finishes and commits its batch and closes "
            "its consumer, keeping the instance id's partitions for the replacement), then "
            "activating the replacement at once; the old pod is deleted once the replacement "
            "processed its first batch"),))
    return replace(
        roll, deletes=stop, requeue_after_s=0.2, events=(Event(
            "Normal", c.MEMBER_RESTARTING,
            f"{said}; stopping the old member (it finishes and commits its batch), then the "
            "replacement joins with the same instance id"),))


@effects.register
def _on_recreate_instead(decided: steps.RecreateInstead, s: _Step, roll: Roll) -> Roll:
    return replace(roll, deletes=_stop_old(s, decided.ordinal, decided.delete_uid, WHY_RESTART),
                   requeue_after_s=1.0,
                   events=(Event("Warning", c.HANDOFF_FALLBACK, decided.message),))


@effects.register
def _on_handoff_failed(decided: steps.HandoffFailed, s: _Step, roll: Roll) -> Roll:
    return _abandon((decided.ordinal, *decided.ordinals), c.HANDOFF_FAILED, decided.message,
                    s, roll)


@effects.register
def _on_fall_back(decided: steps.FallBackCold, s: _Step, roll: Roll) -> Roll:
    return _abandon((decided.ordinal,), c.HANDOFF_FALLBACK, decided.message, s, roll)


def _abandon(dropped: tuple[int, ...], reason: str, message: str, s: _Step, roll: Roll) -> Roll:
    """The replacements a failed handoff or a fallback drops (of the members `dropped`) are
    deleted, with a Warning."""
    names = {f.replacement for f in s.before.in_flight if f.ordinal in dropped}
    aborted = tuple(
        PodDelete(ordinal_of(p) or 0, p["metadata"]["name"], p["metadata"]["uid"],
                  WHY_HANDOFF_ABORTED)
        for p in s.snap.pods if p["metadata"]["name"] in names
        and not p["metadata"].get("deletionTimestamp"))
    return replace(roll, deletes=aborted, requeue_after_s=1.0,
                   events=(Event("Warning", reason, message),))


@effects.register
def _on_rejoined(decided: steps.MemberRejoined, s: _Step, roll: Roll) -> Roll:
    return replace(roll, requeue_after_s=0.5, events=(Event(
        "Normal", c.MEMBER_BACK,
        f"member {decided.ordinal} back in the group with its partitions after "
        f"{decided.absence_s:.1f} s (session timeout {s.limits.session_timeout_ms} ms)"),))


@effects.register
def _on_done(decided: steps.MarkMemberDone, s: _Step, roll: Roll) -> Roll:
    warm = any(f.ordinal == decided.ordinal and f.mode == "warm" for f in s.before.in_flight)
    if decided.processing_gap_s is not None:
        gap = (f" (processing gap {decided.processing_gap_s:.1f} s: the old process's last "
               "batch to the replacement's first)")
    elif warm:
        gap = " (processing gap not measured: no record was waiting on its partitions)"
    else:
        gap = ""
    events = [Event("Normal", c.MEMBER_READY,
                    f"member {decided.ordinal} processing again{gap}")]
    if s.after.phase == "RolledBack":
        events.append(Event("Warning", c.ROLLED_BACK, s.after.reason))
    return replace(roll, requeue_after_s=0.5, events=tuple(events),
                   restarts=(sample(s.table.live.get(decided.ordinal), decided.ordinal,
                                    decided.absence_s),),
                   gaps=(() if decided.processing_gap_s is None
                         else (decided.processing_gap_s,)),
                   finished=(_finished(s) if s.after.phase == "RolledBack" else None))


@effects.register
def _on_failed(decided: steps.MemberFailed, s: _Step, roll: Roll) -> Roll:
    """A failed member halts the rollout, or is handed back (its standby of the last revision
    is created by `pods.creates`); standbys still preparing are dropped (`pods.abandoned`)."""
    reason = c.ROLLOUT_HALTED if s.after.phase == "Halted" else c.ROLLING_BACK
    # A member that exits is announced by `problems.member_problems` (MemberFailing) already;
    # a member that made no progress is announced here.
    said = (() if decided.reason == c.MEMBER_FAILING
            else (Event("Warning", decided.reason, decided.message),))
    return replace(roll, requeue_after_s=1.0,
                   finished=_finished(s) if s.after.phase == "Halted" else None,
                   events=(*said, Event("Warning", reason, s.after.reason)))


@effects.register
def _on_at_risk(decided: steps.StopAtRisk, s: _Step, roll: Roll) -> Roll:
    reason = c.SESSION_TIMEOUT_EXCEEDED if decided.expired else c.RESTART_RUNNING_LATE
    return replace(roll, requeue_after_s=1.0,
                   restarts=((sample(s.table.live.get(decided.ordinal), decided.ordinal,
                                     decided.absence_s),)
                             if decided.expired else ()),
                   events=(Event("Warning", reason, decided.message),))


@effects.register
def _on_complete(decided: steps.Complete, s: _Step, roll: Roll) -> Roll:
    if s.after.phase != "Complete":
        return roll
    return replace(roll, finished=_finished(s), events=(
        Event("Normal", c.ROLLOUT_COMPLETE,
              f"revision {s.view.revision} rolled out: members "
              f"{list(s.after.members_restarted)} restarted, longest absence "
              f"{s.after.longest_absence_ms} ms, rebalances during the rollout "
              f"{s.after.to_status(s.rebalances).get('rebalancesDuringRollout', 0)}"),))


def _finished(s: _Step) -> tuple[float, str]:
    started = s.after.started_at or s.snap.now
    return (s.snap.now - started).total_seconds(), s.after.phase


@effects.register
def _on_refusal(decided: steps.RefuseToStart, s: _Step, roll: Roll) -> Roll:
    roll = replace(roll, refusal=decided.message)
    if s.before.reason != decided.message:
        return replace(roll, events=(Event("Warning", c.RESTART_UNSAFE, decided.message),))
    return roll


@effects.register
def _on_wait(decided: steps.Wait, s: _Step, roll: Roll) -> Roll:
    roll = replace(roll, deletes=_journaled_restarts(s))
    if decided.recheck_after_s is None:
        return roll
    return replace(roll, requeue_after_s=decided.recheck_after_s)


def _journaled_restarts(s: _Step) -> tuple[PodDelete, ...]:
    """The deletions of restarts the status journaled (in flight, stopped) whose old pod still
    runs: the DELETE was refused, or the operator died between the journal and the DELETE
    (`service.execute` writes the status ahead). The restart is finished, not forgotten."""
    return tuple(delete for f in s.after.in_flight
                 if f.mode == "cold" and f.stopped_at is not None
                 for delete in _stop_old(s, f.ordinal, f.pod_uid, WHY_RESTART))
