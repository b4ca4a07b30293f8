"""Members that stopped making progress (pure).

A member can be in the group, Ready and answering `/status`, and process nothing: after a
broker roll, librdkafka clients have been seen to get a metadata answer with no brokers and
stay idle until their process restarted. Nothing in the group's state shows it; what does is
records waiting on its partitions that it does not fetch.

A member is stalled when it holds partitions, some of them have records past the offset it last
committed (the brokers' end offset against the member's own commit, or the group's lag), and
it has been idle longer than its bound: `maxWaitMs` twice and its slowest batch three times, at
least `MIN_BOUND_S`. Idle is the time since the latest of its last poll that returned records
(`/status` `lastFetchAt`), its last finished batch (`lastBatchAt`) and its process start; a
member with a batch in flight (`/status` `batchInFlight`) is working, not idle, however long the
batch takes: it pauses its partitions on purpose while its buffer is full, so its polls return
nothing. A member still warming up (not `processingReady`), in standby, leaving or waiting to
join is not judged, nor is one a rollout is restarting.

A member whose waiting partitions all have no leader (the brokers' metadata says leader -1)
waits on the cluster, not on itself: it is reported, and never restarted (a restart cannot
help).

With `spec.recovery.restartStalledMembers` the first stalled member's pod is deleted, one at a
time and only while nothing else restarts a member (`stalled_restart`). Each member's restarts
are remembered in `status.stallRecovery` (`recovery_memory`): the n-th restart of the same
member waits for `2**n` times its bound (a fresh process's idleness counts from its start), and
after `MAX_STALL_RESTARTS` the member is only reported, until it finishes a batch again. The
MembersStalled condition says which members stall and what is done about it
(`stalled_condition`).

A batch in flight is judged apart (`overdue_batches`): one that runs past its bound
(`overdue_bound_s`: `OVERDUE_FACTOR` times the slowest batch measured for the group, and never
less than max.poll.interval.ms or `MIN_BOUND_S`) is overdue: a hung transform or sink call
(a member that waits on a sink that never answers is Ready, in the group and polling). It is
reported (MembersStalled reason `BatchOverdue`, a Warning Event, `staticfleet_overdue_batches`),
never restarted: the batch may be slow, not hung, and a restart would begin it again. A pass is
due when the first batch in flight would pass its bound (`until_overdue_s`, the plan's deadline).

Nothing wakes a pass when a member stops fetching: a group at rest is looked at once a rest
interval (`pace`, 60 s). So that a stall is not seen that much later, a pass asks to look
again when the first member with records waiting would pass its bound (`until_stalled_s`, the
plan's deadline); a member whose records arrive after it stopped is seen by the first pass
after the brokers' end offsets (read once a minute at rest) show them: up to the rest interval
and the offsets' age past its bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import PodDelete
from staticfleet.decisions.memberreport import MemberReport
from staticfleet.decisions.members.observed import MemberTable, ObservedMember
from staticfleet.decisions.spec.model import ConsumerGroupSpec

MIN_BOUND_S = 60.0
OVERDUE_FACTOR = 5
"""A batch in flight this many times longer than the slowest batch measured for the group is
overdue (and never before max.poll.interval.ms)."""
MAX_STALL_RESTARTS = 3
"""Restarts of one member for stalling, after which it is only reported (until it finishes a
batch again): a member that stalls again after three fresh processes stalls for a reason a
restart does not remove."""
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
    leaderless: bool = False
    """Every waiting partition has no leader: the member waits on the cluster."""

    @property
    def message(self) -> str:
        shown = ", ".join(f"{t}-{p} ({n})" for (t, p), n in self.waiting[:SHOWN])
        more = len(self.waiting) - SHOWN
        said = (f"member {self.ordinal} (pod {self.pod}) fetched nothing for {self.idle_s:.0f} s "
                f"(bound {self.bound_s:.0f} s) while records wait on {shown}"
                + (f" and {more} more partitions" if more > 0 else ""))
        if self.leaderless:
            said += (" whose leader is offline (the brokers' metadata names none): it waits on "
                     "the cluster, and a restart cannot help")
        return said


@dataclass(frozen=True)
class Recovery:
    """One member's stall restarts, as `status.stallRecovery` remembers them."""

    ordinal: int
    restarts: int
    last_restart_at: datetime

    @staticmethod
    def from_status(entries: Any) -> dict[int, Recovery]:
        out: dict[int, Recovery] = {}
        for entry in entries or ():
            try:
                out[int(entry["member"])] = Recovery(
                    int(entry["member"]), int(entry["restarts"]),
                    c.parse_rfc3339(str(entry["lastRestartAt"])))
            except (TypeError, ValueError, KeyError):
                continue
        return out

    def to_status(self) -> dict[str, Any]:
        return {"member": self.ordinal, "restarts": self.restarts,
                "lastRestartAt": c.rfc3339(self.last_restart_at)}

    @property
    def exhausted(self) -> bool:
        return self.restarts >= MAX_STALL_RESTARTS


def _number(status: Mapping[str, Any], key: str) -> float | None:
    value = status.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _committed(status: MemberReport) -> dict[TP, int]:
    return {(topic, partition): offset for topic, partition, offset in status.committed}


def overdue_bound_s(max_poll_ms: int, slowest_batch_s: float) -> float:
    """How long a batch in flight may run before it is reported: `OVERDUE_FACTOR` times the
    slowest batch measured, never less than max.poll.interval.ms (the longest the user says a
    batch takes) nor `MIN_BOUND_S`."""
    return max(MIN_BOUND_S, max_poll_ms / 1000, OVERDUE_FACTOR * slowest_batch_s)


@dataclass(frozen=True)
class Overdue:
    """A member whose batch in flight runs past its bound."""

    ordinal: int
    pod: str
    running_s: float
    bound_s: float
    records: int
    slowest_s: float

    @property
    def message(self) -> str:
        measured = (f"{OVERDUE_FACTOR} x the slowest batch measured, {self.slowest_s:.1f} s"
                    if self.slowest_s else "no batch measured yet")
        return (f"member {self.ordinal} (pod {self.pod}) has run one batch of {self.records} "
                f"records for {self.running_s:.1f} s, past its bound of {self.bound_s:.0f} s "
                f"({measured}; at least max.poll.interval.ms): its transform or sink may hang")


def group_slowest_batch_s(previous: Mapping[str, Any]) -> float | None:
    """The slowest batch measured for the group (`status.measurements.batchSecondsMax`)."""
    return _number(previous.get("measurements") or {}, "batchSecondsMax")


def overdue_batches(table: MemberTable, statuses: Mapping[str, MemberReport],
                    max_poll_ms: int, group_slowest_s: float | None,
                    now: datetime) -> tuple[Overdue, ...]:
    """The members whose batch in flight (`/status` `batchInFlight`) runs past
    `overdue_bound_s`, from the slowest batch measured for the group (`status.measurements`)
    or by the member itself, whichever is slower; by ordinal."""
    return tuple(o for o in _in_flight(table, statuses, max_poll_ms, group_slowest_s, now)
                 if o.running_s > o.bound_s)


def until_overdue_s(table: MemberTable, statuses: Mapping[str, MemberReport],
                    max_poll_ms: int, group_slowest_s: float | None,
                    now: datetime) -> float | None:
    """How long until the first batch in flight within its bound passes it (None: no such
    batch): when a pass must look again, however long the group rests (`pace`)."""
    return min((o.bound_s - o.running_s for o in _in_flight(
        table, statuses, max_poll_ms, group_slowest_s, now) if o.running_s <= o.bound_s),
        default=None)


def _in_flight(table: MemberTable, statuses: Mapping[str, MemberReport],
               max_poll_ms: int, group_slowest_s: float | None,
               now: datetime) -> list[Overdue]:
    """Every member's batch in flight with its bound (overdue or not)."""
    out = []
    for member in table.members:
        status = statuses.get(member.pod_uid or "")
        batch = status.batch_in_flight if status is not None else None
        if status is None or batch is None or member.stopped_at is not None:
            continue
        started = batch.started_at
        if started is None:
            continue
        slowest = max(group_slowest_s or 0.0, status.batch_seconds_max or 0.0)
        out.append(Overdue(member.ordinal, str(member.pod_name),
                           round(now.timestamp() - started, 1),
                           overdue_bound_s(max_poll_ms, slowest), batch.records, slowest))
    return out


def stalled_members(table: MemberTable, statuses: Mapping[str, MemberReport],
                    end_offsets: Mapping[TP, tuple[float, int]],
                    lag: Mapping[TP, int] | None, max_wait_ms: int, now: datetime,
                    restarting: Sequence[int] = (),
                    leaderless: frozenset[TP] = frozenset()) -> tuple[Stall, ...]:
    """The stalled members of `table` (see the module's docstring), by ordinal; `leaderless`:
    the subscribed partitions that have no leader now."""
    out = []
    for member, status, idle, limit in _judged(table, statuses, max_wait_ms, now, restarting):
        if idle <= limit:
            continue
        waiting = _waiting(member.assignment, status, end_offsets, lag)
        if waiting:
            out.append(Stall(member.ordinal, str(member.pod_name), str(member.pod_uid),
                             round(idle, 1), limit, tuple(sorted(waiting)),
                             leaderless=all(tp in leaderless for tp, _ in waiting)))
    return tuple(out)


def until_stalled_s(table: MemberTable, statuses: Mapping[str, MemberReport],
                    end_offsets: Mapping[TP, tuple[float, int]],
                    lag: Mapping[TP, int] | None, max_wait_ms: int, now: datetime,
                    restarting: Sequence[int] = ()) -> float | None:
    """How long until the first member that has records waiting and is within its bound
    passes it, should it fetch nothing meanwhile (None: no such member): when a pass must look
    again, however long the group rests (`pace`). A member with no record waiting yet has no
    such time: its stall is seen once records wait, by the pass after the brokers' end offsets
    showed them."""
    left = [limit - idle for member, status, idle, limit
            in _judged(table, statuses, max_wait_ms, now, restarting)
            if idle <= limit and _waiting(member.assignment, status, end_offsets, lag)]
    return min(left, default=None)


def _judged(table: MemberTable, statuses: Mapping[str, MemberReport], max_wait_ms: int,
            now: datetime, restarting: Sequence[int]
            ) -> list[tuple[ObservedMember, MemberReport, float, float]]:
    """The members the detector judges, each with its `/status`, how long it has been idle
    and its bound (seconds)."""
    out = []
    for member in table.members:
        status = statuses.get(member.pod_uid or "")
        if (status is None or member.ordinal in restarting or not member.assignment
                or member.stopped_at is not None or status.standby is not None
                or status.leaving or status.waiting is not None
                or not status.processing_ready or status.batch_in_flight is not None):
            continue
        moments = [m for m in (status.last_fetch_at, status.last_batch_at, status.process_start)
                   if m is not None]
        if not moments:
            continue
        idle = now.timestamp() - max(moments)
        out.append((member, status, idle, bound_s(max_wait_ms, status.batch_seconds_max or 0.0)))
    return out


def _waiting(assignment: Sequence[TP], status: MemberReport,
             end_offsets: Mapping[TP, tuple[float, int]],
             lag: Mapping[TP, int] | None) -> list[tuple[TP, int]]:
    """The member's partitions with records past its committed offset, and how many."""
    committed = _committed(status)
    waiting = []
    for tp in assignment:
        if tp in committed and tp in end_offsets:
            behind = end_offsets[tp][1] - committed[tp]
        else:
            behind = (lag or {}).get(tp, 0)
        if behind > 0:
            waiting.append((tp, behind))
    return waiting


def _backed_off(stall: Stall, memory: Mapping[int, Recovery]) -> bool:
    """Whether `stall` may be restarted now: not waiting on the cluster, restarts left, and
    idle for `2**n` times its bound after n restarts."""
    seen = memory.get(stall.ordinal)
    if stall.leaderless or (seen is not None and seen.exhausted):
        return False
    return seen is None or stall.idle_s > stall.bound_s * 2 ** seen.restarts


def recovery_memory(previous: Any, stalls: Sequence[Stall], restart: Sequence[PodDelete],
                    statuses_by_ordinal: Mapping[int, MemberReport | None],
                    now: datetime) -> list[dict[str, Any]] | None:
    """`status.stallRecovery` after this pass: each member's stall restarts, this pass's
    counted; a member that is not stalled and finished a batch after its last restart is
    forgotten (it recovered)."""
    memory = Recovery.from_status(previous)
    stalled = {s.ordinal for s in stalls}
    for ordinal, seen in list(memory.items()):
        status = statuses_by_ordinal.get(ordinal)
        batch = status.last_batch_at if status is not None else None
        if (ordinal not in stalled and batch is not None
                and batch > seen.last_restart_at.timestamp()):
            del memory[ordinal]
    for gone in restart:
        before = memory.get(gone.ordinal)
        memory[gone.ordinal] = Recovery(gone.ordinal, (before.restarts if before else 0) + 1,
                                        now)
    return [memory[o].to_status() for o in sorted(memory)] or None


def stalled_restart(spec: ConsumerGroupSpec, stalls: Sequence[Stall], table: MemberTable,
                    deletes: Sequence[PodDelete], memory: Mapping[int, Recovery] | None = None,
                    *, rollout_under_way: bool, restart_safe: bool | None
                    ) -> tuple[PodDelete, ...]:
    """The first stalled member's pod that may be restarted (`_backed_off`), deleted so that it
    is made again with the same instance id (a static rejoin, no rebalance): only with
    spec.recovery.restartStalledMembers, no rollout under way, no member pod going away, and
    restarts that fit in the session timeout (`restart_safe`; None: not known)."""
    if (not stalls or not spec.recovery.restart_stalled_members or rollout_under_way
            or deletes or any(m.stopped_at is not None for m in table.members)
            or not restart_safe):
        return ()
    first = next((s for s in stalls if _backed_off(s, memory or {})), None)
    if first is None:
        return ()
    return (PodDelete(first.ordinal, first.pod, first.pod_uid,
                      f"{WHY_STALLED}: {first.message}"),)


def stalled_condition(spec: ConsumerGroupSpec, stalls: Sequence[Stall],
                      restart: Sequence[PodDelete],
                      memory: Mapping[int, Recovery] | None = None,
                      *, restart_safe: bool | None,
                      overdue: Sequence[Overdue] = ()) -> tuple[str, c.Cond]:
    """MembersStalled: the stalls first (their reasons), then the overdue batches (reason
    `BatchOverdue` when nothing stalls), both named in the message."""
    late = "; ".join(o.message for o in overdue)
    if not stalls:
        if overdue:
            return c.MEMBERS_STALLED, ("True", c.BATCH_OVERDUE, (
                f"{late}; it is not restarted (a restart would begin the batch again): look at "
                "its log and at what its transform or sink waits on, then delete its pod "
                "yourself if it hangs"))
        return c.MEMBERS_STALLED, ("False", c.MEMBERS_PROGRESSING,
                                   "no member holds partitions with records waiting that it "
                                   "does not fetch, and no batch runs past its bound")
    status, reason, message = _stalled(spec, stalls, restart, memory, restart_safe)
    return c.MEMBERS_STALLED, (status, reason, f"{message}; {late}" if late else message)


def _stalled(spec: ConsumerGroupSpec, stalls: Sequence[Stall], restart: Sequence[PodDelete],
             memory: Mapping[int, Recovery] | None, restart_safe: bool | None) -> c.Cond:
    said = "; ".join(s.message for s in stalls)
    memory = memory or {}
    exhausted = [s.ordinal for s in stalls if (m := memory.get(s.ordinal)) and m.exhausted]
    if restart:
        then = f"member {restart[0].ordinal} is restarted (the same instance id, no rebalance)"
        seen = memory.get(restart[0].ordinal)
        if seen is not None:
            then += f", its restart {seen.restarts + 1} of at most {MAX_STALL_RESTARTS}"
    elif all(s.leaderless for s in stalls):
        return ("True", c.WAITING_ON_LEADER, (
            f"{said}; no member is restarted: bring the partitions' leaders back (a broker "
            "is down or out of the ISR)"))
    elif exhausted:
        return ("True", c.STALL_RESTARTS_EXHAUSTED, (
            f"{said}; member(s) {', '.join(map(str, exhausted))} stalled again after "
            f"{MAX_STALL_RESTARTS} restarts and are not restarted again until they finish a "
            "batch: find out why they do not fetch (their log, the brokers' log, the "
            "partitions' leaders), then delete their pods yourself"))
    elif not spec.recovery.restart_stalled_members:
        then = ("spec.recovery.restartStalledMembers is false: restart it yourself "
                "(delete its pod) or find out why it does not fetch")
    elif restart_safe is False:
        then = "it is not restarted: a restart would not fit in the session timeout"
    elif any(not s.leaderless and s.ordinal in memory for s in stalls):
        then = ("it was restarted before and is restarted again only once idle for twice the "
                "bound of its last restart")
    else:
        then = "it is restarted once no rollout or other restart is under way"
    return ("True", c.RESTARTING_STALLED_MEMBER if restart else c.MEMBER_STALLED,
            f"{said}; {then}")
