"""What the members measured, as the decisions use it (pure).

Restarts the roller made and measured (`status.measurements`, `status.record_restart`), the
members' slowest batch and their cold starts (container start -> first assignment) are what the
session timeout is chosen from (`timeouts.compute_timeouts`). A container that restarts in place
(a crash, an OOM kill, a liveness kill), a replacement that waited for scheduling or an image
pull, or a pod's age is never a restart sample: `sample` says why not, and the timeouts' reasons
say so (`timeout_notes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from staticfleet.decisions import status as st
from staticfleet.decisions import timeouts
from staticfleet.decisions.members import (
    MemberTable,
    cold_start_s,
    join_latency_s,
    ordinal_of,
    restart_count,
    start_wait_s,
)
from staticfleet.decisions.snapshot import Snapshot

START_WAIT_LIMIT_S = 10.0
"""A replacement pod that waited longer than this for scheduling or image pulls before its
container started measures the cluster, not the member: not a restart sample."""


def measure(snap: Snapshot) -> timeouts.Measurements:
    """Restarts the roller made and measured (close of the old process to the replacement back
    in the group), and the slowest batch the members report. A container that restarts in place
    (a crash, an OOM kill, a liveness kill) or a pod's age is never a restart sample."""
    recorded = st.measurements_from_status(snap.previous.get("measurements"))
    batch = [float(s.get("batchSecondsMax") or 0) for s in snap.statuses.values()]
    p99 = [float(s["batchSecondsP99"]) for s in snap.statuses.values()
           if s.get("batchSecondsP99") is not None]
    slowest_start = slowest_cold_start(snap)
    return timeouts.Measurements(
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


def sample(table: MemberTable, ordinal: int, seconds: float) -> tuple[int, float, str | None]:
    """A measured restart of member `ordinal`, and why it is not a sample (None: it is)."""
    pod = table.live.get(ordinal)
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


def recorded(snap: Snapshot, measured: timeouts.Measurements,
             restarts: Sequence[tuple[int, float, str | None]]) -> dict[str, Any]:
    """`status.measurements` after this pass: the restarts measured in it (`sample`: taken, or
    ignored with why), the slowest first assignment and the slowest batch."""
    out: dict[str, Any] = dict(snap.previous.get("measurements") or {})
    for member, seconds, why in restarts:
        out = (st.record_restart(out, seconds, member) if why is None
               else st.ignore_restart(out, seconds, member, why))
    first = first_assignment_s(snap)
    if first is not None:
        out["firstAssignmentSecondsMax"] = round(first, 3)
    if measured.batch_seconds_max is not None:
        out["batchSecondsMax"] = measured.batch_seconds_max
    return out
