"""What the members measured, as the decisions use it (pure), and the readers of it.

Restarts the roller made and measured (`status.measurements`, kept by `record_restart`), the
members' slowest batch and their cold starts (container start -> first assignment,
`cold_start_s`, from the pod and the member's `/status`) are what the session timeout is chosen
from (`rules.compute_timeouts`). A container that restarts in place (a crash, an OOM kill, a
liveness kill), a replacement that waited for scheduling or an image pull, or a pod's age is
never a restart sample: `sample` says why not, and the timeouts' reasons say so
(`timeout_notes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from staticfleet.decisions.conditions import parse_rfc3339
from staticfleet.decisions.memberreport import MemberReport
from staticfleet.decisions.names import (
    JOINED_AS_NEW_ANNOTATION,
    MEMBER_CONTAINER,
    ordinal_of,
)
from staticfleet.decisions.snapshot import Snapshot
from staticfleet.decisions.timeouts.inputs import Measurements

START_WAIT_LIMIT_S = 10.0
"""A replacement pod that waited longer than this for scheduling or image pulls before its
container started measures the cluster, not the member: not a restart sample."""


# --- a member's own figures, from its pod and its /status ----------------------------------


def restart_count(pod: Mapping[str, Any]) -> int:
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") == MEMBER_CONTAINER:
            return int(cs.get("restartCount") or 0)
    return 0


def start_wait_s(pod: Mapping[str, Any]) -> float | None:
    """Seconds from the pod's creation to its member container's start: scheduling, image
    pulls and volume setup (None while it has not started)."""
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") == MEMBER_CONTAINER:
            started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
            if started and created:
                return (parse_rfc3339(started) - parse_rfc3339(created)).total_seconds()
    return None


def container_started_at(pod: Mapping[str, Any]) -> float | None:
    """When the member container now running started (epoch seconds; None while it is not)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") == MEMBER_CONTAINER:
            started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
            return parse_rfc3339(started).timestamp() if started else None
    return None


def cold_start_s(pod: Mapping[str, Any], status: MemberReport | None) -> float | None:
    """Seconds from the member container's start to its first assignment, for a member coming
    back with its instance id (a replacement of a pod of its ordinal: a rollout's, a warm
    handoff's, one made again after a deletion or an eviction) whose container never restarted
    in place (None otherwise or until it has been assigned); for a standby process, without its
    wait for the activation. Scheduling and image pulls are not in it; everything a restarted
    member repeats before it is back is. A member that joined as new (`JOINED_AS_NEW_ANNOTATION`:
    a scale-up, the group's first members) is no restart sample: its join waited for a
    rebalance (an eager group's revokes) that a static member coming back does not; only its
    start up to its consumer (`consumerMade`), which a restart repeats, counts."""
    if status is None or restart_count(pod) > 0:
        return None
    phases = status.startup_seconds
    first = phases.first_assignment
    start = status.process_start
    started = container_started_at(pod)
    if first is None or start is None or started is None:
        return None
    activated, made = phases.activated, phases.consumer_made
    # A KIP-848 replacement of a member that died without leaving waits for the broker to let
    # go of its instance id (the dead registration's session timeout): that wait is the
    # session timeout's own length, not the member's start, and counting it would raise the
    # session timeout by itself at every such crash.
    first = first - (phases.instance_release_wait or 0.0)
    if joined_as_new(pod):
        return None if made is None else max(0.0, start + made - started)
    if activated is not None:
        # A warm handoff's replacement waited in standby for its activation, which is not part
        # of a start: a crash restarts it in standby and it is activated at once. Its start is
        # container start -> consumer made, plus activation -> first assignment.
        if made is None:
            return None
        return max(0.0, start + made - started) + max(0.0, first - activated)
    return max(0.0, start + first - started)


def joined_as_new(pod: Mapping[str, Any]) -> bool:
    """The pod was made for an ordinal new to the group (`JOINED_AS_NEW_ANNOTATION`)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return annotations.get(JOINED_AS_NEW_ANNOTATION) == "true"


def join_latency_s(pod: Mapping[str, Any], status: MemberReport | None) -> float | None:
    """Seconds from the pod's creation to its member's first assignment (a lower bound of a
    restart), from the member's `/status`; None until it has been assigned."""
    if status is None or status.startup_seconds.activated is not None:
        return None  # a standby's wait for its activation is not a join's latency
    first = status.startup_seconds.first_assignment
    start = status.process_start
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    if first is None or start is None or not created:
        return None
    latency = start + first - parse_rfc3339(created).timestamp()
    return max(0.0, latency)


def measure(snap: Snapshot) -> Measurements:
    """Restarts the roller made and measured (close of the old process to the replacement back
    in the group), and the slowest batch the members report. A container that restarts in place
    (a crash, an OOM kill, a liveness kill) or a pod's age is never a restart sample."""
    recorded = measurements_from_status(snap.previous.get("measurements"))
    batch = [s.batch_seconds_max or 0.0 for s in snap.statuses.values()]
    p99 = [s.batch_seconds_p99 for s in snap.statuses.values()
           if s.batch_seconds_p99 is not None]
    slowest_start = slowest_cold_start(snap)
    return Measurements(
        restart_seconds=recorded.restart_seconds,
        batch_seconds_max=max(batch) if batch else None,
        batch_seconds_p99=max(p99) if p99 else None,
        cold_start_s=slowest_start[1] if slowest_start else None)


def slowest_cold_start(snap: Snapshot) -> tuple[int, float] | None:
    """(member, seconds) of the slowest container start -> first assignment among live
    members that never restarted in place."""
    starts = []
    for pod in snap.pods:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        ordinal = ordinal_of(pod)
        seconds = cold_start_s(pod, snap.statuses.get(pod["metadata"]["uid"]))
        if ordinal is not None and seconds is not None:
            starts.append((ordinal, seconds))
    return max(starts, key=lambda s: s[1]) if starts else None


def first_assignment_s(snap: Snapshot) -> float | None:
    """Slowest pod creation -> first assignment among members whose container never restarted
    (informational: `status.measurements.firstAssignmentSecondsMax`)."""
    joins = [join_latency_s(p, snap.statuses.get(p["metadata"]["uid"])) for p in snap.pods
             if restart_count(p) == 0]
    known = [j for j in joins if j is not None]
    return max(known) if known else None


def sample(pod: Mapping[str, Any] | None, ordinal: int,
           seconds: float) -> tuple[int, float, str | None]:
    """A measured restart of member `ordinal` (its live pod `pod`), and why it is not a sample
    (None: it is)."""
    why = None
    if pod is not None and restart_count(pod) > 0:
        why = (f"its container restarted in place during the restart (restartCount "
               f"{restart_count(pod)}): a crash, not a restart")
    elif pod is not None and (wait := start_wait_s(pod)) is not None and (
            wait > START_WAIT_LIMIT_S):
        why = (f"its pod waited {wait:.1f} s for scheduling or an image pull before the "
               "container started")
    return ordinal, seconds, why


def slowest_text(restart: tuple[int | None, float] | None,
                 start: tuple[int, float] | None) -> str | None:
    """Which measurement the needed session timeout comes from, for the refusal's message."""
    parts = []
    if restart is not None:
        who = "member ?" if restart[0] is None else f"member {restart[0]}"
        parts.append(f"the slowest measured restart: {who}, {restart[1]:.1f} s")
    if start is not None:
        parts.append(f"the slowest member start: member {start[0]}, {start[1]:.1f} s from its "
                     "container's start to its first assignment (a restart is at least that)")
    if not parts:
        return None
    return ("; ".join(parts) + "; the pod's Events and log tell what took the time "
            "(scheduling, image pull, Spark start, drain)")


def timeout_notes(previous: Mapping[str, Any]) -> tuple[str, ...]:
    """What `status.timeouts.reasons` says of restarts that were not taken as samples."""
    ignored = (previous.get("measurements") or {}).get("ignoredRestarts") or ()
    return tuple(f"ignored the restart of member {i.get('member')} ({i.get('seconds')} s): "
                 f"{i.get('why')}" for i in ignored)


def recorded(snap: Snapshot, measured: Measurements,
             restarts: Sequence[tuple[int, float, str | None]]) -> dict[str, Any]:
    """`status.measurements` after this pass: the restarts measured in it (`sample`: taken, or
    ignored with why), the slowest first assignment and the slowest batch."""
    out: dict[str, Any] = dict(snap.previous.get("measurements") or {})
    for member, seconds, why in restarts:
        out = (record_restart(out, seconds, member) if why is None
               else ignore_restart(out, seconds, member, why))
    first = first_assignment_s(snap)
    if first is not None:
        out["firstAssignmentSecondsMax"] = round(first, 3)
    if measured.batch_seconds_max is not None:
        out["batchSecondsMax"] = measured.batch_seconds_max
    return out


RECENT_RESTARTS_KEPT = 10
def record_restart(
    measurements: Mapping[str, Any] | None, absence_s: float, member: int | None = None,
    keep: int = RECENT_RESTARTS_KEPT,
) -> dict[str, Any]:
    """`status.measurements` after one more measured restart (kept: the `keep` most recent, so an
    old slow restart eventually stops driving the automatic session timeout), with the member
    each was measured on."""
    m = dict(measurements or {})
    recent = [*list(m.get("restartSecondsRecent") or []), round(absence_s, 3)]
    members = list(m.get("restartMembersRecent") or [])
    members = [*([None] * (len(recent) - 1 - len(members))), *members, member][-keep:]
    recent = recent[-keep:]
    m["restartSecondsRecent"] = recent
    m["restartMembersRecent"] = [-1 if x is None else x for x in members]
    m["restartSecondsMax"] = max(recent)
    m["restartSamples"] = int(m.get("restartSamples") or 0) + 1
    return m


def ignore_restart(measurements: Mapping[str, Any] | None, absence_s: float, member: int,
                   why: str, keep: int = 5) -> dict[str, Any]:
    """`status.measurements` noting a restart that is not a sample of the roller's restarts."""
    m = dict(measurements or {})
    ignored = [*list(m.get("ignoredRestarts") or []),
               {"member": member, "seconds": round(absence_s, 3), "why": why}]
    m["ignoredRestarts"] = ignored[-keep:]
    return m


def slowest_restart(measurements: Mapping[str, Any] | None) -> tuple[int | None, float] | None:
    """(member, seconds) of the slowest recent restart, if any."""
    m = measurements or {}
    recent = [float(x) for x in m.get("restartSecondsRecent") or ()]
    if not recent:
        return None
    members = list(m.get("restartMembersRecent") or [])
    members = [None] * (len(recent) - len(members)) + members
    i = max(range(len(recent)), key=lambda k: recent[k])
    member = members[i]
    return (None if member is None or member < 0 else int(member)), recent[i]


def measurements_from_status(measurements: Mapping[str, Any] | None) -> Measurements:
    """The `inputs.Measurements` input from `status.measurements`."""
    m = measurements or {}
    batch = m.get("batchSecondsMax")
    return Measurements(
        restart_seconds=tuple(float(x) for x in m.get("restartSecondsRecent") or ()),
        batch_seconds_max=float(batch) if batch is not None else None,
    )
