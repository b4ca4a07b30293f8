"""The ConsumerGroup status, rebuilt from what is observed on every pass (pure).

`build_status` assembles the whole `status` object; `derive_conditions` computes the standard
conditions from the same observations. The restart measurements that feed
`timeouts.rules.compute_timeouts` are kept by `measurements` (`record_restart`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from staticfleet.decisions import conditions as c
from staticfleet.decisions.members.observed import ObservedMember
from staticfleet.decisions.names import instance_id, member_name, selector_string
from staticfleet.decisions.rollout.state import GroupObservation, RolloutState
from staticfleet.decisions.scaling import idle_members
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts


def member_entry(group: ConsumerGroupSpec, member: ObservedMember) -> dict[str, Any]:
    """One `status.members[]` entry."""
    entry: dict[str, Any] = {
        "ordinal": member.ordinal,
        "instanceId": instance_id(group, member.ordinal),
        "pod": member.pod_name or member_name(group, member.ordinal),
        "phase": (member.pod_phase or "Unknown") if member.pod_exists else "Missing",
        "ready": member.ready,
        "assignedPartitions": [f"{topic}-{partition}" for topic, partition in member.assignment],
    }
    if member.revision is not None:
        entry["revision"] = member.revision
    if member.member_id:
        entry["memberId"] = member.member_id
    return entry


def build_status(
    *,
    group: ConsumerGroupSpec,
    observed: GroupObservation,
    rollout: RolloutState,
    update_revision: str,
    current_revision: str | None,
    timeouts: EffectiveTimeouts | None,
    partitions: int | None,
    measurements: Mapping[str, Any] | None,
    conditions: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The full status object. `current_revision` is the previous `status.currentRevision`; it
    becomes the update revision once the rollout is Complete."""
    members = sorted(observed.members, key=lambda m: m.ordinal)
    status: dict[str, Any] = {
        "observedGeneration": group.generation,
        "replicas": sum(1 for m in members if m.pod_exists),
        "readyReplicas": sum(1 for m in members if m.pod_exists and m.ready),
        "selector": selector_string(group),
        "groupState": observed.group_state,
        "rebalances": observed.rebalances,
        "members": [member_entry(group, m) for m in members],
        "updateRevision": update_revision,
        "rollout": rollout.to_status(observed.rebalances),
        "conditions": [dict(x) for x in conditions],
    }
    if rollout.phase in ("Complete", "Idle") and rollout.revision == update_revision:
        current_revision = update_revision
    if current_revision is not None:
        status["currentRevision"] = current_revision
    if timeouts is not None:
        status["timeouts"] = timeouts.to_status()
    if partitions is not None:
        status["partitions"] = partitions
        status["idleMembers"] = idle_members(group.replicas, partitions)
    if measurements:
        status["measurements"] = dict(measurements)
    return status


def derive_conditions(
    previous: Sequence[Mapping[str, Any]],
    *,
    group: ConsumerGroupSpec,
    observed: GroupObservation,
    rollout: RolloutState,
    timeouts: EffectiveTimeouts | None,
    partitions: int | None,
    now: datetime,
    refusal: str | None = None,
    problems: Sequence[tuple[str, str]] = (),
    extra: Sequence[tuple[str, c.Cond]] = (),
) -> list[dict[str, Any]]:
    """The conditions from this pass's observations, one function per type (`extra`: the ones
    other modules derive: UnassignedPartitions in `rebalance.planned`, BrokerBoundsKnown in
    `tuning`, MembersStalled in `stalls`); `refusal`: why the roller refused to start restarting
    (restarts do not fit a session timeout), if it did; `problems`: (reason, message) of what
    else this pass found wrong, the first of which is Degraded."""
    refused = refusal is not None or (
        rollout.phase == "Pending" and timeouts is not None and not timeouts.restart_safe)
    derived: tuple[tuple[str, c.Cond], ...] = (
        (c.READY, _ready(group, observed, partitions)),
        (c.PROGRESSING, _progressing(rollout, refused)),
        (c.DEGRADED, _degraded(rollout, timeouts, refusal, problems)),
        (c.ROLLOUT_AT_RISK, _at_risk(rollout, refused)),
        (c.IDLE_MEMBERS, _idle(group.replicas, partitions, group.kafka.topic_pattern)),
        *extra,
    )
    out: list[dict[str, Any]] = [dict(x) for x in previous]
    for type_, cond in derived:
        out = _put(out, type_, cond, now, group.generation)
    return out


def _ready(group: ConsumerGroupSpec, observed: GroupObservation, partitions: int | None) -> c.Cond:
    """Ready: every wanted member serves in a Stable group."""
    wanted = group.replicas
    # A member beyond the partition count is in the group without an assignment (idle): it
    # serves when the broker lists it, up to the number of idle members there can be.
    idle_allowed = idle_members(wanted, partitions) if partitions is not None else 0
    serving = [m for m in observed.members if m.ordinal < wanted and m.ready and m.in_group]
    serving += [m for m in observed.members
                if m.ordinal < wanted and m.ready and not m.in_group and not m.assignment
                and m.member_id is not None and m.stopped_at is None][:idle_allowed]
    if wanted == 0:
        return ("True", c.SCALED_TO_ZERO, "replicas is 0")
    if observed.group_state != "Stable":
        return ("False", c.GROUP_NOT_STABLE, f"the group is {observed.group_state}")
    if len(serving) < wanted:
        return (
            "False",
            c.MEMBERS_NOT_READY,
            f"{len(serving)}/{wanted} members ready in the group",
        )
    return ("True", c.ALL_MEMBERS_READY, f"{wanted}/{wanted} members ready in the group")


PHASE_PROGRESS: Mapping[str, tuple[c.Status, str]] = {
    "Idle": ("False", c.ROLLOUT_IDLE),
    "Pending": ("True", c.ROLLOUT_PENDING),
    "Rolling": ("True", c.ROLLING),
    "AtRisk": ("True", c.ROLLING),
    "Paused": ("False", c.ROLLOUT_PAUSED),
    "Stopped": ("False", c.ROLLOUT_STOPPED),
    "Halted": ("False", c.ROLLOUT_HALTED),
    "RolledBack": ("False", c.ROLLED_BACK),
    "Complete": ("False", c.ROLLOUT_COMPLETE),
}
"""Progressing's status and reason in each rollout phase (a refused Pending is RolloutRefused)."""


def _progressing(rollout: RolloutState, refused: bool) -> c.Cond:
    """Progressing: the rollout's phase, with its reason as the message."""
    status, reason = PHASE_PROGRESS[rollout.phase]
    if rollout.phase == "Pending" and refused:
        status, reason = "False", c.ROLLOUT_REFUSED
    return status, reason, rollout.reason or rollout.phase


def _degraded(rollout: RolloutState, timeouts: EffectiveTimeouts | None, refusal: str | None,
              problems: Sequence[tuple[str, str]]) -> c.Cond:
    """Degraded: the first problem of the pass, a rollout that ended badly, or restarts that
    do not fit the session timeout."""
    if problems:
        return ("True", problems[0][0], problems[0][1])
    if rollout.phase in ("Stopped", "Halted", "RolledBack"):
        return ("True", PHASE_PROGRESS[rollout.phase][1], rollout.reason)
    if refusal is not None:
        return ("True", c.RESTART_UNSAFE, refusal)
    if timeouts is not None and not timeouts.restart_safe:
        return (
            "True",
            c.RESTART_UNSAFE,
            f"restarts need a session timeout of {timeouts.needed_session_timeout_ms} ms, "
            f"the effective one is {timeouts.session_timeout_ms} ms",
        )
    return ("False", c.AS_EXPECTED, "")


def _at_risk(rollout: RolloutState, refused: bool) -> c.Cond:
    """RolloutAtRisk: a restart runs late, ran past the session timeout, or would not fit it."""
    if rollout.phase == "AtRisk":
        return ("True", c.RESTART_RUNNING_LATE, rollout.reason)
    if rollout.phase == "Stopped":
        return ("True", c.SESSION_TIMEOUT_EXCEEDED, rollout.reason)
    if refused:
        return ("True", c.RESTART_UNSAFE, rollout.reason)
    return ("False", c.RESTARTS_ON_TIME, "restarts fit the session timeout")


def _idle(wanted: int, partitions: int | None, pattern: str | None = None) -> c.Cond:
    """IdleMembers: more members than partitions; a `topicPattern` that matches no topic says
    so (its members subscribe and wait for one, which is no error of its own)."""
    if partitions is None:
        return ("Unknown", c.PARTITIONS_UNKNOWN, "the partition count is not known yet")
    n = idle_members(wanted, partitions)
    if n and partitions == 0 and pattern is not None:
        return ("True", c.MORE_MEMBERS_THAN_PARTITIONS,
                f"spec.kafka.topicPattern {pattern!r} matches no topic on the cluster (as a "
                f"full match of the name): the {wanted} members have no partition until a "
                "topic it matches is made; check the pattern against the topics' names")
    if n:
        return ("True", c.MORE_MEMBERS_THAN_PARTITIONS,
                f"{n} of {wanted} members have no partition ({partitions} partitions)")
    return ("False", c.NO_IDLE_MEMBERS, f"{partitions} partitions for {wanted} members")


def _put(
    out: list[dict[str, Any]], type_: str, cond: c.Cond, now: datetime, gen: int
) -> list[dict[str, Any]]:
    return c.set_condition(out, type_, cond[0], cond[1], cond[2], now, gen)


def kept_condition(previous: Mapping[str, Any], type_: str) -> tuple[str, c.Cond] | None:
    """The condition `type_` as the previous status said it."""
    cond = c.get_condition(previous.get("conditions") or [], type_)
    if not cond:
        return None
    return type_, (cond["status"], str(cond["reason"]), str(cond["message"]))
