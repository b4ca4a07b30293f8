"""The roller: turns what a pass observed into the pure rollout decision and back.

`decisions.rollout` decides *when* (one member at a time, stop when late); `decisions.reasons`
says *why* a member needs a restart. This module only translates: pods, the broker's view of
the group and the members' `/status` into `ObservedMember`s, and a decided step into pods to
delete, Events, measurements and the `status.rollout` object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from staticfleet.decisions import builders, conditions, reasons
from staticfleet.decisions import rollout as ro
from staticfleet.decisions.conditions import parse_rfc3339
from staticfleet.decisions.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts import EffectiveTimeouts, Measurements
from staticfleet.observe import GroupView

SESSION_ANNOTATION = "staticfleet.io/session-timeout-ms"


def _ordinal(pod: Mapping[str, Any]) -> int | None:
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(builders.ORDINAL_LABEL)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _ready(pod: Mapping[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def join_latency_s(pod: Mapping[str, Any], status: Mapping[str, Any] | None) -> float | None:
    """Seconds from the pod's creation to its member's first assignment (a lower bound of a
    restart), from the member's `/status`; None until it has been assigned."""
    if not status:
        return None
    first = (status.get("startupSeconds") or {}).get("firstAssignment")
    start = status.get("processStart")
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    if first is None or start is None or not created:
        return None
    latency = float(start) + float(first) - parse_rfc3339(created).timestamp()
    return max(0.0, latency)


@dataclass
class Observed:
    """The member pods and the group as one pass saw them."""

    spec: ConsumerGroupSpec
    update_revision: str
    group_state: str
    live: dict[int, dict[str, Any]]
    stopping: dict[int, dict[str, Any]]
    members: list[ro.ObservedMember]
    statuses: dict[str, Mapping[str, Any]]
    created: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)

    @classmethod
    def collect(cls, *, spec: ConsumerGroupSpec, view: reasons.MemberSpecView,
                pods: list[dict[str, Any]], statuses: Mapping[str, Mapping[str, Any]],
                group: GroupView, now: datetime, partitions: int | None = None) -> Observed:
        """`partitions`: the subscribed topics' total; with more members than partitions some
        members legitimately hold none, so being listed by the broker is enough to be in."""
        live: dict[int, dict[str, Any]] = {}
        stopping: dict[int, dict[str, Any]] = {}
        for pod in pods:
            ordinal = _ordinal(pod)
            if ordinal is None:
                continue
            target = stopping if pod["metadata"].get("deletionTimestamp") else live
            target[ordinal] = pod
        idle_possible = partitions is not None and spec.replicas > partitions
        by_instance = group.by_instance()
        by_member_id = {m.member_id: m for m in group.members}
        members = []
        for ordinal in sorted(set(live) | set(stopping)):
            pod = live.get(ordinal) or stopping[ordinal]
            meta = pod["metadata"]
            st = statuses.get(meta["uid"]) or {}
            gm = by_instance.get(builders.instance_id(spec, ordinal))
            if gm is None and st.get("memberId"):
                gm = by_member_id.get(str(st["memberId"]))  # dynamic membership (tests)
            deleting = meta.get("deletionTimestamp")
            # The broker keeps an absent static member's registration (and partitions) until
            # its session times out, so being listed proves nothing about *this* pod: its own
            # process must be that member (same member id), or, when it does not answer, be
            # Ready (its /readyz holds only while it holds its assignment).
            this_process = gm is not None and (
                st.get("memberId") == gm.member_id if st.get("memberId") else _ready(pod))
            members.append(ro.ObservedMember(
                ordinal=ordinal, pod_exists=ordinal in live or ordinal in stopping,
                revision=reasons.pod_revision(pod), ready=_ready(pod) and ordinal in live,
                stopped_at=parse_rfc3339(deleting) - _grace(pod) if deleting else None,
                in_group=bool(gm and (gm.partitions or idle_possible)) and this_process
                and ordinal in live,
                pod_name=meta["name"], pod_phase=(pod.get("status") or {}).get("phase"),
                member_id=gm.member_id if gm else None,
                assignment=gm.partitions if gm else ()))
        return cls(spec=spec, update_revision=view.revision, group_state=group.state,
                   live=live, stopping=stopping, members=members, statuses=dict(statuses))

    def pod(self, ordinal: int) -> dict[str, Any] | None:
        return self.live.get(ordinal)

    def terminating(self, ordinal: int) -> bool:
        return ordinal in self.stopping

    def ordinals(self) -> list[int]:
        return sorted(set(self.live) | set(self.stopping))

    def ready_count(self) -> int:
        return sum(1 for o, p in self.live.items() if o < self.spec.replicas and _ready(p))

    def live_count(self) -> int:
        return sum(1 for o in self.live if o < self.spec.replicas)

    def current_revision(self) -> str | None:
        """The revision most live members run."""
        revs = [reasons.pod_revision(p) for p in self.live.values()]
        known = [r for r in revs if r]
        return max(set(known), key=known.count) if known else None

    def member_status(self) -> list[dict[str, Any]]:
        out = []
        for m in self.members:
            if m.ordinal >= self.spec.replicas and m.stopped_at is None:
                continue
            phase = "Terminating" if m.stopped_at is not None else (m.pod_phase or "Pending")
            out.append({
                "ordinal": m.ordinal, "instanceId": builders.instance_id(self.spec, m.ordinal),
                "pod": m.pod_name, "phase": phase, "ready": m.ready, "revision": m.revision,
                "memberId": m.member_id,
                "assignedPartitions": [f"{t}-{p}" for t, p in m.assignment],
            })
        return out


def _grace(pod: Mapping[str, Any]) -> Any:
    """A deletionTimestamp is the moment the grace period ends; the stop began that long before."""
    from datetime import timedelta

    seconds = (pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
    if seconds is None:
        seconds = (pod.get("spec") or {}).get("terminationGracePeriodSeconds") or 30
    return timedelta(seconds=int(seconds))


@dataclass
class Step:
    """A decided rollout step, ready for the service to carry out and report."""

    state: ro.RolloutState
    observation: ro.GroupObservation
    restart: tuple[int, ...] = ()
    events: list[tuple[str, str, str]] = field(default_factory=list)
    absences: list[float] = field(default_factory=list)
    finished_seconds: float | None = None
    requeue_after: float | None = None

    @property
    def rollout(self) -> dict[str, Any]:
        """`status.rollout`."""
        return self.state.to_status(self.observation.rebalances)


def running_session_timeout_ms(observed: Observed) -> int | None:
    """The shortest session timeout a live member joined with (the broker holds it to it)."""
    values = []
    for pod in observed.live.values():
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(SESSION_ANNOTATION)
        if raw and raw.isdigit():
            values.append(int(raw))
    return min(values) if values else None


def advance(*, spec: ConsumerGroupSpec, view: reasons.MemberSpecView, observed: Observed,
            effective: EffectiveTimeouts, measurements: Measurements,
            old_status: Mapping[str, Any], rebalances_now: int, now: datetime) -> Step:
    """Decide and record one rollout step."""
    state = ro.RolloutState.from_status(old_status.get("rollout"))
    limits = ro.RolloutLimits.from_timeouts(effective, spec.rollout,
                                            running_session_timeout_ms(observed))
    obs = ro.GroupObservation(
        members=tuple(m for m in observed.members if m.ordinal < spec.replicas),
        group_state=observed.group_state, rebalances=rebalances_now)
    decided = ro.next_step(state, obs, view.revision, limits, now)
    new_state = ro.record_step(state, decided, obs, view.revision, now)
    if isinstance(decided, ro.Complete) and not state.started_at and not new_state.started_at:
        # Nothing was ever restarted for this revision (first creation, scale-up): no rollout.
        new_state = ro.RolloutState(revision=view.revision, phase="Idle",
                                    reason=f"every member runs revision {view.revision}")
    step = Step(state=new_state, observation=obs)
    _describe(step, state, decided, new_state, observed, view, limits, now)
    return step


def _describe(step: Step, before: ro.RolloutState, decided: ro.Step, after: ro.RolloutState,
              observed: Observed, view: reasons.MemberSpecView, limits: ro.RolloutLimits,
              now: datetime) -> None:
    """Events, measurements and conditions for the decided step."""
    if isinstance(decided, ro.RestartMembers):
        step.restart = decided.ordinals
        if not before.started_at or before.revision != view.revision:
            step.events.append(("Normal", "RolloutStarted",
                                f"rolling to revision {view.revision}: "
                                f"{len(after.pending) + len(decided.ordinals)} member(s), "
                                f"at most {limits.max_unavailable} at a time"))
        for ordinal in decided.ordinals:
            pod = observed.pod(ordinal) or {}
            why = "; ".join(r.message for r in reasons.restart_reasons(view, pod))
            code = ",".join(sorted({r.code for r in reasons.restart_reasons(view, pod)}))
            step.events.append(("Normal", conditions.MEMBER_RESTARTING,
                                f"restarting member {ordinal} ({code}): {why}"))
        step.requeue_after = 1.0
    elif isinstance(decided, ro.MemberRejoined):
        step.events.append(("Normal", conditions.MEMBER_BACK,
                            f"member {decided.ordinal} back in the group with its partitions "
                            f"after {decided.absence_s:.1f} s (session timeout "
                            f"{limits.session_timeout_ms} ms)"))
        step.requeue_after = 0.5
    elif isinstance(decided, ro.MarkMemberDone):
        step.absences.append(decided.absence_s)
        step.events.append(("Normal", conditions.MEMBER_READY,
                            f"member {decided.ordinal} ready to process again"))
        step.requeue_after = 0.5
    elif isinstance(decided, ro.StopAtRisk):
        reason = (conditions.SESSION_TIMEOUT_EXCEEDED if decided.expired
                  else conditions.RESTART_RUNNING_LATE)
        step.events.append(("Warning", reason, decided.message))
        step.absences.append(decided.absence_s) if decided.expired else None
        step.requeue_after = 1.0
    elif isinstance(decided, ro.Complete) and after.phase == "Complete":
        started = after.started_at or now
        step.finished_seconds = (now - started).total_seconds()
        step.events.append(("Normal", conditions.ROLLOUT_COMPLETE,
                            f"revision {view.revision} rolled out: members "
                            f"{list(after.members_restarted)} restarted, longest absence "
                            f"{after.longest_absence_ms} ms, rebalances during the rollout "
                            f"{step.rollout.get('rebalancesDuringRollout', 0)}"))
    elif isinstance(decided, ro.RefuseToStart):
        if before.reason != decided.message:
            step.events.append(("Warning", conditions.RESTART_UNSAFE, decided.message))
    elif isinstance(decided, ro.Wait) and decided.recheck_after_s is not None:
        step.requeue_after = decided.recheck_after_s
