"""The member pods, the broker's view of the group and the members' `/status`, as the roller
sees them (pure): one `ObservedMember` per ordinal, with its restart reasons computed once.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from member_contract import LEAVE_GONE, LEAVE_UNCONFIRMED
from staticfleet.decisions import conditions as c
from staticfleet.decisions import reasons
from staticfleet.decisions.conditions import parse_rfc3339
from staticfleet.decisions.memberreport import LeaveReport, MemberReport
from staticfleet.decisions.names import (
    MEMBER_CONTAINER,
    SESSION_ANNOTATION,
    instance_id,
    ordinal_of,
)
from staticfleet.decisions.reasons import RestartReason
from staticfleet.decisions.snapshot import GroupMemberView, GroupView
from staticfleet.decisions.spec.model import ConsumerGroupSpec

DEFAULT_GRACE_S = 30


TERMINAL_PHASES = ("Failed", "Succeeded")
"""Phases a pod never leaves: its containers are stopped for good. A member pod (restartPolicy
Always) gets there when the kubelet evicts it (node pressure: `Failed`, reason `Evicted`), at a
graceful node shutdown, or when something else marks it so (the pod GC on a node out of
service)."""


def static_leave_event(ordinal: int, pod: str,
                       leave: LeaveReport | None) -> tuple[str, str] | None:
    """A Warning's (reason, message) when a drained KIP-848 member's static leave (its drain
    answer's `staticLeave`, consumer_runtime/staticleave.py) does not leave the instance id
    waiting for the replacement: no coordinator confirmed it, or the group no longer knew the
    instance id. None when it did (`left`), when another process holds it already (`taken`),
    and for the classic protocol (no leave: None)."""
    if leave is None:
        return None
    outcome, detail = leave.outcome, leave.detail or "no error given"
    tries, ms = leave.tries, leave.ms
    if outcome == LEAVE_UNCONFIRMED:
        return (c.STATIC_LEAVE_UNCONFIRMED,
                f"member {ordinal} (pod {pod}) drained, but no coordinator confirmed its static "
                f"leave in {tries} tries over {ms} ms (last: {detail}): the broker may refuse "
                "its replacement (UNRELEASED_INSTANCE_ID) until the old member's session "
                "times out, then fence it (a rebalance). Check the group's coordinator broker; "
                "the rollout goes on and its status shows the replacement's wait")
    if outcome == LEAVE_GONE:
        return (c.STATIC_LEAVE_EXPIRED,
                f"member {ordinal} (pod {pod}) drained after the group had forgotten its "
                f"instance id (its session had run out: {detail}): the replacement joins as a "
                "new member, which moves partitions (a rebalance)")
    return None


def pod_ended(pod: Mapping[str, Any]) -> bool:
    """The pod is in a terminal phase: it never runs again, yet it keeps its name (and so its
    ordinal's) until it is deleted."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def ended_reason(pod: Mapping[str, Any]) -> str:
    """Why the pod ended, as its status says: `Failed (Evicted: The node was low on resource:
    memory.)`."""
    status = pod.get("status") or {}
    said = ": ".join(str(part).strip() for part in (status.get("reason"), status.get("message"))
                     if part and str(part).strip())
    return f"{status.get('phase')} ({said[:600]})" if said else str(status.get("phase"))


def pod_ready(pod: Mapping[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def stop_requested_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod's deletion was requested: its deletionTimestamp is the moment the grace
    period ends, so the stop began that long before."""
    meta = pod.get("metadata") or {}
    deleting = meta.get("deletionTimestamp")
    if not deleting:
        return None
    seconds = meta.get("deletionGracePeriodSeconds")
    if seconds is None:
        seconds = (pod.get("spec") or {}).get("terminationGracePeriodSeconds") or DEFAULT_GRACE_S
    return parse_rfc3339(deleting) - timedelta(seconds=int(seconds))


def member_closed_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the member process of a pod being deleted closed its consumer: what its clean
    exit reported (`member_exit_report`, to the millisecond), else when the container exited
    as the kubelet reports it (to the second); None while it runs."""
    terminated = _terminated(pod)
    if terminated is None:
        return None
    report = member_exit_report(terminated)
    if report.get("closedAt") is not None:
        return report["closedAt"]
    finished = terminated.get("finishedAt")
    return parse_rfc3339(finished) if finished else None


def member_last_batch_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the member process of a pod being deleted ended its last batch, as its clean exit
    reported it; None while it runs, or without that report."""
    terminated = _terminated(pod)
    return None if terminated is None else member_exit_report(terminated).get("lastBatchAt")


def member_exit_report(terminated: Mapping[str, Any]) -> dict[str, datetime | None]:
    """A clean exit's termination message (consumer_runtime.termination.close_report:
    `{"closedAt": s, "lastBatchAt": s}`, unix seconds of the member's clock) as times; empty
    for an exit that failed or wrote something else."""
    if terminated.get("exitCode") != 0:
        return {}
    try:
        raw = json.loads(terminated.get("message") or "")
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    out: dict[str, datetime | None] = {}
    for key in ("closedAt", "lastBatchAt"):
        value = raw.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = datetime.fromtimestamp(value, UTC)
    return out


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The member container's `state.terminated` of a pod being deleted."""
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") == MEMBER_CONTAINER:
            return (cs.get("state") or {}).get("terminated")
    return None


@dataclass(frozen=True)
class Failure:
    """A member container that exited with an error."""

    exit_code: int
    message: str
    """What it said: its termination message, the member's own line, or (FallbackToLogsOnError)
    its log's end when it died before it could write one."""
    reason: str = ""
    """The kubelet's reason for the exit (`Error`, `OOMKilled`)."""

    @property
    def signal(self) -> str | None:
        """The signal that killed it (exit code 128 + n: SIGKILL for 137), None for an exit."""
        number = self.exit_code - 128
        if not 0 < number < 65:
            return None
        try:
            return signal.Signals(number).name
        except ValueError:
            return f"signal {number}"

    def killed(self) -> str:
        """How a signal ended it, with the usual causes of SIGKILL, quoting only an error line
        of what it left (a process killed cannot write its own message: what the kubelet kept is
        its log's end, whose last line is no error)."""
        said = f"killed by {self.signal} (exit code {self.exit_code})"
        if self.reason == "OOMKilled":
            said += (": OOM-killed, it reached its memory limit "
                     "(spec.template.resources.limits.memory)")
        elif self.signal == "SIGKILL":
            said += (": usually an OOM kill (its memory limit), a kill by hand, or the liveness "
                     "probe")
        error = error_line(self.message)
        if error is not None:
            return f"{said}; its log's last error: {error}"
        return f"{said}; its log's end shows no error" if self.message.strip() else said

    def account(self) -> str:
        """The exit in a few words: killed by a signal (`killed`), or its code and the line
        that says why (`refusal_line`)."""
        if self.signal is not None:
            return self.killed()
        return f"exit code {self.exit_code}: {refusal_line(self.message) or '(no message)'}"


def member_failure(pod: Mapping[str, Any]) -> Failure | None:
    """The last failed exit of the member container, while it is not running again (waiting
    to be restarted, or terminated for good)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") != MEMBER_CONTAINER:
            continue
        state = cs.get("state") or {}
        if state.get("running"):
            return None
        term = state.get("terminated") or (cs.get("lastState") or {}).get("terminated") or {}
        code = int(term.get("exitCode") or 0)
        if code:
            return _failure(code, term)
    return None


def _failure(code: int, term: Mapping[str, Any]) -> Failure:
    reason = str(term.get("reason") or "")
    return Failure(code, str(term.get("message") or ("" if code > 128 else reason)), reason)


def member_crash(pod: Mapping[str, Any]) -> Failure | None:
    """The member container's last failed exit, whether or not it runs again: a container that
    restarted after a failure is crash-looping as far as a rollout is concerned."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") != MEMBER_CONTAINER:
            continue
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            term = state.get("terminated") or {}
            code = int(term.get("exitCode") or 0)
            if code:
                return _failure(code, term)
    return None


OWN_WORDS = "consumer_runtime: "
"""How a member's own account of why it stopped begins: the line it writes as its termination
message (and to its log), e.g. `consumer_runtime: member stops: batch 4 failed ...:
SparkRuntimeException: [USER_RAISED_EXCEPTION] bad record SQLSTATE: P0001`."""
_STACK_FRAME = re.compile(r"^(at [\w$.<>/-]+\(|\.\.\. \d+ more$|File \".*\", line \d+)")


def refusal_line(message: str) -> str:
    """The line of a member's termination message that says why it stopped: the member's own
    (`OWN_WORDS`); in a log's end (kept when the member died before it could say, or from an
    image that does not say), the last line that says refused or error, never a frame of a stack
    trace (`at org.apache.spark...`), else the last line that is not one."""
    error = error_line(message)
    if error is not None:
        return error
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    said = [ln for ln in lines if not _STACK_FRAME.match(ln)] or lines
    return said[-1][:600] if said else ""


def error_line(message: str) -> str | None:
    """The member's own line (`OWN_WORDS`), else the last line that says refused or error and
    is no frame of a stack trace; None when no line does."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    for line in reversed(lines):
        if line.startswith(OWN_WORDS):
            return line[:600]
    for line in reversed(lines):
        if _STACK_FRAME.match(line):
            continue
        if "refused" in line or "Error" in line or "error" in line:
            return line[:600]
    return None


def still_running(pod: Mapping[str, Any], closed_by_pod: Mapping[str, datetime]) -> bool:
    """A pod being deleted whose member process has not been seen to close (neither by its
    status nor by the watch, which may have seen it before the pod was gone)."""
    return (bool((pod.get("metadata") or {}).get("deletionTimestamp"))
            and pod["metadata"]["uid"] not in closed_by_pod and member_closed_at(pod) is None)


def running_session_timeout_ms(pods: Iterable[Mapping[str, Any]]) -> int | None:
    """The shortest session timeout a live member joined with (the broker holds it to it)."""
    values = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        raw = (meta.get("annotations") or {}).get(SESSION_ANNOTATION)
        if raw and str(raw).isdigit():
            values.append(int(raw))
    return min(values) if values else None


@dataclass(frozen=True)
class ObservedMember:
    """One member ordinal as observed this pass (pod from Kubernetes, group from the broker)."""

    ordinal: int
    pod_exists: bool = True
    revision: str | None = None
    ready: bool = False
    stopped_at: datetime | None = None
    """When the pod's deletion was requested (its deletionTimestamp), if it is being deleted."""
    in_group: bool = False
    """The broker lists its instance id with a non-empty assignment."""
    pod_name: str | None = None
    pod_phase: str | None = None
    member_id: str | None = None
    assignment: tuple[tuple[str, int], ...] = ()
    pod_uid: str | None = None
    restart_reasons: tuple[RestartReason, ...] = ()
    """Why its pod must be restarted to run the update revision (`reasons.restart_reasons`,
    computed once per pass); empty when it runs it. No reasons, no restart."""
    standby_state: str | None = None
    """What its process says in /status `standby`: "warming" or "ready" while it waits for
    activation (a warm handoff's replacement), None when active or not answering."""
    failure: str | None = None
    """Its member container's last failed exit, while it is not running again."""
    standby_ready_at: datetime | None = None
    first_batch_at: datetime | None = None
    """When its process finished its first batch (from /status)."""
    first_assignment_at: datetime | None = None
    """When its process was first assigned partitions (from /status: its own clock)."""
    answers: bool = False
    """Its process answered /status this pass."""
    slow: str | None = None
    """Its process took the connection but gave no whole /status in time (what it did): it is
    there and slow, which alone never makes it replaced (`snapshot.Snapshot.slow_members`)."""
    standby: ObservedMember | None = None
    """A newer live pod of this ordinal beside it: a warm handoff's replacement."""
    crash: str | None = None
    """Its member container's last failed exit, even when it runs again (a crash loop)."""
    pod_failed: str | None = None
    """Its pod ended for good (phase Failed: evicted, node shutdown): why, from its status."""
    left: bool = False
    """Its process was asked to leave the group (`/status` `leaving`): it leaves, or left, and
    never joins again; it waits for its pod to be deleted."""


@dataclass(frozen=True)
class MemberTable:
    """The member pods by ordinal (live and being deleted) and the observed members."""

    live: Mapping[int, Mapping[str, Any]]
    stopping: Mapping[int, Mapping[str, Any]]
    members: tuple[ObservedMember, ...]
    standby: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    """The newest other live pod of an ordinal: a warm handoff's replacement while the old
    member still runs. `live` holds the oldest, the member."""
    extra: Mapping[int, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    """Every other live pod of an ordinal besides the member, oldest first."""
    ended: Mapping[int, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    """Pods of an ordinal in a terminal phase (`pod_ended`: evicted, node shut down) that are
    not being deleted yet, oldest first. Neither live nor stopping: they never run again, but
    they hold their names until they are deleted."""

    def ordinals(self) -> list[int]:
        """Ordinals with a pod of any kind (an ordinal's pod is created only when it has none)."""
        return sorted(set(self.live) | set(self.stopping) | set(self.ended))

    def member(self, ordinal: int) -> ObservedMember | None:
        return next((m for m in self.members if m.ordinal == ordinal), None)

    def ready_count(self, replicas: int) -> int:
        return sum(1 for o, p in self.live.items() if o < replicas and pod_ready(p))


def observe_members(
    *,
    spec: ConsumerGroupSpec,
    view: reasons.MemberSpecView,
    pods: Iterable[Mapping[str, Any]],
    statuses: Mapping[str, MemberReport],
    group: GroupView,
    partitions: int | None = None,
    slow: Mapping[str, str] | None = None,
) -> MemberTable:
    """`partitions`: the subscribed topics' total; with more members than partitions some
    members legitimately hold none, so being listed by the broker is enough to be in.

    A pod in a terminal phase is never its ordinal's member while another pod of the ordinal
    runs or stops: an evicted old member beside its warm replacement leaves the replacement as
    the member, as if the old pod had been deleted. Alone, it is observed as the member (not
    ready, not in the group, `pod_phase` Failed: unavailable) until it is deleted."""
    table = _by_role(pods)
    seen = _Seen(spec, view, statuses, group.by_instance(), group.by_member_id(),
                 idle_possible=partitions is not None and spec.replicas > partitions,
                 slow=slow or {})
    members = []
    for ordinal in table.ordinals():
        if ordinal in table.live:
            member = seen.member(ordinal, table.live[ordinal], True)
            if ordinal in table.standby:
                member = replace(member, standby=seen.member(ordinal, table.standby[ordinal],
                                                             True))
        elif ordinal in table.stopping:
            member = seen.member(ordinal, table.stopping[ordinal], False)
        else:
            member = seen.member(ordinal, table.ended[ordinal][0], False)
        members.append(member)
    return replace(table, members=tuple(members))


def _by_role(pods: Iterable[Mapping[str, Any]]) -> MemberTable:
    """The member pods sorted by role, oldest first (no member observed yet): being deleted,
    ended, the member (the oldest live pod of its ordinal) and the newer live pods beside it."""
    live: dict[int, Mapping[str, Any]] = {}
    standby: dict[int, Mapping[str, Any]] = {}
    extra: dict[int, list[Mapping[str, Any]]] = {}
    stopping: dict[int, Mapping[str, Any]] = {}
    ended: dict[int, list[Mapping[str, Any]]] = {}
    for pod in sorted(pods, key=_age_order):
        ordinal = ordinal_of(pod)
        if ordinal is None:
            continue
        if pod["metadata"].get("deletionTimestamp"):
            stopping.setdefault(ordinal, pod)
        elif pod_ended(pod):
            ended.setdefault(ordinal, []).append(pod)
        elif ordinal in live:
            # Newer pods beside the member: its replacement is the newest.
            extra.setdefault(ordinal, []).append(pod)
            standby[ordinal] = pod
        else:
            live[ordinal] = pod
    return MemberTable(live=live, stopping=stopping, members=(), standby=standby,
                       extra={o: tuple(pods) for o, pods in extra.items()},
                       ended={o: tuple(pods) for o, pods in ended.items()})


@dataclass(frozen=True)
class _Seen:
    """What a pass saw besides the pods, to observe each member pod with: the spec, the
    members' `/status` by pod uid and the broker's group by instance and member id."""

    spec: ConsumerGroupSpec
    view: reasons.MemberSpecView
    statuses: Mapping[str, MemberReport]
    by_instance: Mapping[str, GroupMemberView]
    by_member_id: Mapping[str, GroupMemberView]
    idle_possible: bool
    """More members than partitions: being listed without partitions is being in the group."""
    slow: Mapping[str, str]
    """Why each pod (by uid) whose process did not answer /status in time is slow."""

    def member(self, ordinal: int, pod: Mapping[str, Any], is_live: bool) -> ObservedMember:
        """Member `ordinal` as its pod `pod` shows it (`is_live`: not being deleted, not ended)."""
        meta = pod["metadata"]
        st = self.statuses.get(meta["uid"])
        said_id = st.member_id if st is not None else ""
        gm = self.by_instance.get(instance_id(self.spec, ordinal))
        if gm is None and said_id:
            gm = self.by_member_id.get(said_id)  # dynamic membership (tests)
        # The broker keeps an absent static member's registration (and partitions) until its
        # session times out, so being listed proves nothing about *this* pod: its own process
        # must be that member (same member id), or, when it does not answer, be Ready (its
        # /readyz holds only while it holds its assignment).
        this_process = gm is not None and (
            said_id == gm.member_id if said_id else pod_ready(pod))
        # An ended pod's container exit is its eviction's doing, not the member's failure.
        failure = None if pod_ended(pod) else member_failure(pod)
        return ObservedMember(
            ordinal=ordinal, pod_exists=True, revision=reasons.pod_revision(pod),
            ready=pod_ready(pod) and is_live, stopped_at=stop_requested_at(pod),
            in_group=(bool(gm and (gm.partitions or self.idle_possible)) and this_process
                      and is_live),
            pod_name=meta["name"], pod_phase=(pod.get("status") or {}).get("phase"),
            pod_uid=meta.get("uid"),
            member_id=gm.member_id if gm else None,
            assignment=gm.partitions if gm else (),
            restart_reasons=(tuple(reasons.restart_reasons(self.view, pod)) if is_live
                             else ()),
            standby_state=st.standby if st is not None else None,
            failure=failure.account() if failure else None,
            standby_ready_at=_moment(st, st.startup_seconds.standby_ready if st else None),
            first_batch_at=_moment(st, st.startup_seconds.first_batch if st else None),
            first_assignment_at=_moment(st, st.startup_seconds.first_assignment if st else None),
            answers=st is not None, slow=None if st is not None else self.slow.get(meta["uid"]),
            crash=(crash.account()
                   if (crash := member_crash(pod)) is not None and not pod_ended(pod) else None),
            pod_failed=ended_reason(pod) if pod_ended(pod) else None,
            left=st is not None and (st.leaving or st.state == "left"))


def _age_order(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod["metadata"]
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name")))


def _moment(status: MemberReport | None, seconds: float | None) -> datetime | None:
    """Unix time of a startup phase of the process (`processStart` + the phase's
    `startupSeconds`)."""
    if status is None or seconds is None or status.process_start is None:
        return None
    return datetime.fromtimestamp(status.process_start + seconds, UTC)


def last_batch_at(status: MemberReport) -> datetime | None:
    value = status.last_batch_at
    return None if value is None else datetime.fromtimestamp(value, UTC)

