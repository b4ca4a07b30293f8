"""Members that stopped making progress (pure).

A member can be in the group, Ready and answering `/status`, and process nothing: after a
broker roll, librdkafka clients have been seen to get a metadata answer with no brokers and
stay idle until their process restarted. Nothing in the group's state shows it; what does is
records waiting on its partitions that it does not fetch.

A member is stalled when it holds partitions, some of them have records past the offset it last
committed (the brokers' end offset against the member's own commit, or the group's lag), and
its last poll that returned records (`/status` `lastFetchAt`, or its process start) is older
than its bound: `maxWaitMs` twice and its slowest batch three times, at least `MIN_BOUND_S`. A
member still warming up (not `processingReady`), in standby, leaving or waiting to join is not
judged, nor is one a rollout is restarting.

With `spec.recovery.restartStalledMembers` the first stalled member's pod is deleted, one at a
time and only while nothing else restarts a member (`stalled_restart`); the MembersStalled
condition says which members stall and what is done about it (`stalled_condition`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from staticfleet.decisions import conditions as c
from staticfleet.decisions import status as st
from staticfleet.decisions.actions import PodDelete
from staticfleet.decisions.members import MemberTable
from staticfleet.decisions.model import ConsumerGroupSpec
from staticfleet.decisions.rollactions import PHASES_IN_PROGRESS, Roll

MIN_BOUND_S = 60.0
SHOWN = 4
WHY_STALLED = "restart a stalled member"

TP = tuple[str, int]


def bound_s(max_wait_ms: int, batch_seconds_max: float) -> float:
    """How long a member with records waiting may go without fetching any."""
    return max(MIN_BOUND_S, 2 * max_wait_ms / 1000 + 3 * batch_seconds_max)


@dataclass(frozen=True)
class Stall:
    ordinal: int
    pod: str
    pod_uid: str
    idle_s: float
    bound_s: float
    waiting: tuple[tuple[TP, int], ...]
    """(partition, records past its committed offset)."""

    @property
    def message(self) -> str:
        shown = ", ".join(f"{t}-{p} ({n})" for (t, p), n in self.waiting[:SHOWN])
        more = len(self.waiting) - SHOWN
        return (f"member {self.ordinal} (pod {self.pod}) fetched nothing for {self.idle_s:.0f} s "
                f"(bound {self.bound_s:.0f} s) while records wait on {shown}"
                + (f" and {more} more partitions" if more > 0 else ""))


def _number(status: Mapping[str, Any], key: str) -> float | None:
    value = status.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _committed(status: Mapping[str, Any]) -> dict[TP, int]:
    out = {}
    for entry in status.get("committed") or ():
        try:
            out[(str(entry[0]), int(entry[1]))] = int(entry[2])
        except (TypeError, ValueError, IndexError):
            continue
    return out


def stalled_members(table: MemberTable, statuses: Mapping[str, Mapping[str, Any]],
                    end_offsets: Mapping[TP, tuple[float, int]],
                    lag: Mapping[TP, int] | None, max_wait_ms: int, now: datetime,
                    restarting: Sequence[int] = ()) -> tuple[Stall, ...]:
    """The stalled members of `table` (see the module's docstring), by ordinal."""
    out = []
    for member in table.members:
        status = statuses.get(member.pod_uid or "")
        if (status is None or member.ordinal in restarting or not member.assignment
                or member.stopped_at is not None or status.get("standby") is not None
                or status.get("leaving") or status.get("waiting")
                or not status.get("processingReady")):
            continue
        last = _number(status, "lastFetchAt") or _number(status, "processStart")
        if last is None:
            continue
        idle = now.timestamp() - last
        limit = bound_s(max_wait_ms, _number(status, "batchSecondsMax") or 0.0)
        if idle <= limit:
            continue
        committed = _committed(status)
        waiting = []
        for tp in member.assignment:
            if tp in committed and tp in end_offsets:
                behind = end_offsets[tp][1] - committed[tp]
            else:
                behind = (lag or {}).get(tp, 0)
            if behind > 0:
                waiting.append((tp, behind))
        if waiting:
            out.append(Stall(member.ordinal, str(member.pod_name), str(member.pod_uid),
                             round(idle, 1), limit, tuple(sorted(waiting))))
    return tuple(out)


def stalled_restart(spec: ConsumerGroupSpec, stalls: Sequence[Stall], roll: Roll,
                    table: MemberTable, deletes: Sequence[PodDelete]) -> tuple[PodDelete, ...]:
    """The first stalled member's pod, deleted so that it is made again with the same instance
    id (a static rejoin, no rebalance): only with spec.recovery.restartStalledMembers, no
    rollout under way, no member pod going away, and restarts that fit in the session
    timeout. One member at a time."""
    if (not stalls or not spec.recovery.restart_stalled_members or roll.state.in_flight
            or roll.state.phase in PHASES_IN_PROGRESS or deletes
            or any(m.stopped_at is not None for m in table.members)
            or roll.limits is None or not roll.limits.restart_safe):
        return ()
    first = stalls[0]
    return (PodDelete(first.ordinal, first.pod, first.pod_uid,
                      f"{WHY_STALLED}: {first.message}"),)


def stalled_condition(spec: ConsumerGroupSpec, stalls: Sequence[Stall],
                      restart: Sequence[PodDelete], roll: Roll) -> tuple[str, st.Cond]:
    if not stalls:
        return c.MEMBERS_STALLED, ("False", c.MEMBERS_PROGRESSING,
                                   "no member holds partitions with records waiting that it "
                                   "does not fetch")
    said = "; ".join(s.message for s in stalls)
    if restart:
        then = f"member {restart[0].ordinal} is restarted (the same instance id, no rebalance)"
    elif not spec.recovery.restart_stalled_members:
        then = ("spec.recovery.restartStalledMembers is false: restart it yourself "
                "(delete its pod) or find out why it does not fetch")
    elif roll.limits is not None and not roll.limits.restart_safe:
        then = "it is not restarted: a restart would not fit in the session timeout"
    else:
        then = "it is restarted once no rollout or other restart is under way"
    return c.MEMBERS_STALLED, ("True", c.RESTARTING_STALLED_MEMBER if restart
                               else c.MEMBER_STALLED, f"{said}; {then}")
