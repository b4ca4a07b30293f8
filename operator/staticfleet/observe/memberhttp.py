"""The members' own HTTP endpoints, as the operator reads and asks them: `read_member_status`
(`/status`; `wait_first_batch` reads it until a batch was processed), `drain_member` (POST
`/drain`) and `ask_member` (POST `/leave`, `/rejoin`, `/activate`), each request with the
group's bearer token. An answer other than the one wanted is a `Refused`, with the member's HTTP
status and its reason.

The two documents a member answers with are typed by the contract
(`member_contract.status`) and parsed here, once, into frozen values: `/status` into a
`MemberReport` (`parse_status`, whose rule for a key an older member lacks is
`staticfleet.decisions.memberreport`'s), the drain's answer into `Drained`. A body that is
not a JSON object, or whose keys hold values of other types than the contract's, is no answer.

Every request to a member is made by `_exchange`, the one place that says where it goes: to the
member's own address (its pod IP and port), unless the operator was started with
`settings.MEMBER_HTTP_VIA_ENV` (benches only; the chart never sets it): then every request goes
to that one address instead (`route_through`), the member simulator's
(`staticfleet_dev.membersim`), naming the pod meant in `POD_IP_HEADER`. With fake nodes (kwok)
a pod's IP leads nowhere, and one process answers for every member. Each exchange, from the
connect to the body's last byte, has a wall-clock deadline and its body a cap (`BODY_CAP`): a
member's image is its team's, and a bug in it (a handler that writes one byte every half second,
a body of hundreds of MB) must cost the operator one bounded read, not a worker or its memory.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import socket
import threading
import time
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from member_contract import DRAIN, HTTP_PORT, STATUS
from member_contract.status import (
    BatchInFlight,
    DrainAnswer,
    MemberStatus,
    StartupSeconds,
    StaticLeave,
    Throughput,
    Waiting,
)
from staticfleet.decisions.memberreport import (
    BatchReport,
    LeaveReport,
    MemberReport,
    StartupReport,
    ThroughputReport,
    WaitReport,
)

MEMBER_PORT = HTTP_PORT
"""The port of the members' endpoints."""
POD_IP_HEADER = "X-Staticfleet-Pod-IP"
"""The pod a request routed through the simulator is meant for (its IP; `route_through`)."""

_via: tuple[str, int] | None = None
"""Where every member request goes instead of the member (`route_through`); None: the member."""


def route_through(via: tuple[str, int] | None) -> tuple[str, int] | None:
    """Send every member request to `via` (host, port), the pod's IP in `POD_IP_HEADER`; None:
    to the members themselves (the default). Set once at the operator's startup from
    `OperatorSettings.member_http_via`; returns the route it replaces (for tests)."""
    global _via
    before, _via = _via, via
    return before


STATUS_DEADLINE_S = 2.0
"""The whole of one `/status` exchange (connect, request, headers, body): a member that has not
answered by then did not answer (`Slow`)."""
BODY_CAP = 1 << 20
"""The most of a member's answer the operator reads (the real `/status` is a few KiB): a longer
body is no answer (`Slow`), and never held in the operator's memory."""
REASON_CAP = 200
"""The most of a refusal's body quoted in its `Refused` reason."""


class Slow(OSError):
    """A member's process took the connection but did not give a whole answer in time (or gave
    one over `BODY_CAP`): it is there and slow (a bug in its image, a hung handler), which is
    not the same as a process that is gone (`Refused` with status 0, a refused connection)."""


@dataclass(frozen=True)
class Answer:
    """A member's HTTP answer: its status code and (at most `BODY_CAP` of) its body."""

    status: int
    body: bytes


def _exchange(host: str, port: int, path: str, *, post: bool = False, token: str = "",
              deadline_s: float, cap: int = BODY_CAP, whole: bool = True) -> Answer:
    """One request to the member at `host`:`port` (routed through `_via` when set), all of it,
    from the connect to the body's last byte, within `deadline_s` of wall-clock time: a timer
    shuts the socket down at the deadline, whatever the member sends meanwhile (a body of one
    byte every half second keeps each read alive, never the exchange). Raises `Slow` past the
    deadline or, when the whole body is wanted (`whole`), past `cap`; OSError when the
    connection fails. Not `whole`: the body is cut at `cap` (a refusal's reason)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if _via is not None:
        headers[POD_IP_HEADER] = host
        host, port = _via
    conn = http.client.HTTPConnection(host, port, timeout=deadline_s)
    cut = threading.Event()

    def shut() -> None:
        cut.set()
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(deadline_s, shut)
    timer.daemon = True
    timer.start()
    try:
        conn.request("POST" if post else "GET", path, body=b"" if post else None,
                     headers=headers)
        resp = conn.getresponse()
        length = resp.getheader("Content-Length")
        if (whole and length is not None and length.strip().isdigit()
                and int(length) > cap):
            raise Slow(f"its answer is {int(length)} bytes, over the {cap} the operator reads")
        body = resp.read(cap + 1 if whole else cap)
        if len(body) > cap:
            raise Slow(f"its answer is over the {cap} bytes the operator reads")
        if cut.is_set():
            raise Slow(f"no whole answer within {deadline_s:g} s")
        return Answer(resp.status, body)
    except (OSError, http.client.HTTPException) as exc:
        if isinstance(exc, Slow):
            raise
        if cut.is_set() or isinstance(exc, TimeoutError):
            raise Slow(f"no whole answer within {deadline_s:g} s") from exc
        raise OSError(str(exc) or type(exc).__name__) from exc
    finally:
        timer.cancel()
        conn.close()


@dataclass(frozen=True)
class StatusRead:
    """One read of a member's `/status`: its answer (None: none, or not a `/status`), or why
    it is slow (`Slow`: the process took the connection and did not answer in time, or
    answered too much)."""

    status: MemberReport | None
    slow: str | None = None


def _read_document(host: str, port: int, deadline_s: float) -> tuple[Any, str | None]:
    """A member's `/status` body as JSON (None: no answer), or why it is slow."""
    if not host:
        return None, None
    try:
        answer = _exchange(host, port, STATUS, deadline_s=deadline_s)
        return (json.loads(answer.body) if answer.status == 200 else None), None
    except Slow as exc:
        return None, str(exc)
    except (OSError, ValueError):
        return None, None


def read_status(host: str, port: int, deadline_s: float = STATUS_DEADLINE_S) -> StatusRead:
    """A member's `/status`, read within `deadline_s` (`_exchange`) and parsed
    (`parse_status`)."""
    data, slow = _read_document(host, port, deadline_s)
    return StatusRead(parse_status(data), slow)


def read_member_status(host: str, port: int,
                       timeout: float = STATUS_DEADLINE_S) -> dict[str, Any] | None:
    """A member's `/status` as the member sent it (a JSON object), or None when it does not
    answer (yet) within `timeout`: for the tools and tests that look at the document itself.
    The operator reads `read_status`."""
    data, _ = _read_document(host, port, timeout)
    return data if isinstance(data, dict) else None


# --- the documents, parsed --------------------------------------------------------------------


def parse_status(body: Any) -> MemberReport | None:
    """A member's `/status` body (JSON) as a `MemberReport`; None when it is no `/status`: not
    a JSON object, or a key holding a value of another type than `MemberStatus` gives it. A
    key it lacks reads by `staticfleet.decisions.memberreport`'s rule and is named in
    `missing`; a key the contract does not know (a newer member's) is ignored. Each key is read
    through the contract's type, so mypy fails here when one is renamed or removed there."""
    if not isinstance(body, dict) or not _conforms(body, MemberStatus):
        return None
    doc = cast(MemberStatus, body)
    return MemberReport(
        instance_id=doc.get("instanceId"),
        member_id=doc.get("memberId", ""),
        group_id=doc.get("groupId", ""),
        assignment=tuple((t, p) for t, p in doc.get("assignment", ())),
        lag=tuple((t, p, n) for t, p, n in doc.get("lag", ())),
        committed=tuple((t, p, n) for t, p, n in doc.get("committed", ())),
        last_fetch_at=_float(doc.get("lastFetchAt")),
        last_poll_at=_float(doc.get("lastPollAt")),
        batch_in_flight=_batch(doc.get("batchInFlight")),
        paused_with_work=doc.get("pausedWithWork", False),
        rebalances=doc.get("rebalances", 0),
        takeovers=doc.get("takeovers", 0),
        assigns=doc.get("assigns", 0),
        revokes=doc.get("revokes", 0),
        lost=doc.get("lost", 0),
        generation=doc.get("generation"),
        startup_seconds=_startup(doc.get("startupSeconds")),
        last_batch_at=_float(doc.get("lastBatchAt")),
        standby=doc.get("standby"),
        process_start=_float(doc.get("processStart")),
        batch_seconds_max=_float(doc.get("batchSecondsMax")),
        batch_seconds_p99=_float(doc.get("batchSecondsP99")),
        records_processed=doc.get("recordsProcessed", 0),
        throughput=_throughput(doc.get("throughput")),
        batches_processed=doc.get("batchesProcessed", 0),
        dead_lettered=doc.get("deadLettered", 0),
        last_poll_age_seconds=_float(doc.get("lastPollAgeSeconds")),
        state=doc.get("state", ""),
        processing_ready=doc.get("processingReady", False),
        waiting=_waiting(doc.get("waiting")),
        leaving=doc.get("leaving", False),
        rejoins=doc.get("rejoins", 0),
        drained_at=_float(doc.get("drainedAt")),
        drain_hold_seconds=_float(doc.get("drainHoldSeconds")),
        drain_resubscribes=doc.get("drainResubscribes", 0),
        static_leave=_leave(doc.get("staticLeave")),
        missing=frozenset(_missing(body, MemberStatus)))


def _startup(part: StartupSeconds | None) -> StartupReport:
    if part is None:
        return StartupReport()
    return StartupReport(
        first_assignment=_float(part.get("firstAssignment")),
        first_batch=_float(part.get("firstBatch")),
        consumer_made=_float(part.get("consumerMade")),
        standby_ready=_float(part.get("standbyReady")),
        activated=_float(part.get("activated")),
        instance_release_wait=_float(part.get("instanceReleaseWait")))


def _batch(part: BatchInFlight | None) -> BatchReport | None:
    if part is None:
        return None
    return BatchReport(started_at=_float(part.get("startedAt")), records=part.get("records", 0))


def _waiting(part: Waiting | None) -> WaitReport | None:
    if part is None:
        return None
    return WaitReport(reason=part.get("reason", ""), message=part.get("message", ""),
                      since_seconds=_float(part.get("sinceSeconds")),
                      attempts=part.get("attempts", 0))


def _leave(part: StaticLeave | None) -> LeaveReport | None:
    if part is None:
        return None
    return LeaveReport(outcome=part.get("outcome", ""), tries=part.get("tries", 0),
                       ms=_float(part.get("ms")), detail=part.get("detail"))


def _throughput(part: Throughput | None) -> ThroughputReport | None:
    if part is None:
        return None
    return ThroughputReport(
        records_per_second=_float(part.get("recordsPerSecond")),
        busy_ratio=_float(part.get("busyRatio")),
        window_seconds=_float(part.get("windowSeconds")),
        capacity_records_per_second=_float(part.get("capacityRecordsPerSecond")))


def _float(value: float | None) -> float | None:
    """A JSON number as a float (JSON writes 2.0 as 2 when a member's encoder does)."""
    return None if value is None else float(value)


@functools.cache
def _hints(document: type) -> dict[str, Any]:
    return typing.get_type_hints(document)


def _conforms(value: Any, hint: Any) -> bool:
    """Whether the JSON `value` has the contract's type `hint`: a `TypedDict` (a JSON object
    whose known keys, those it has, conform; missing and unknown keys are no error), a list,
    a fixed-length tuple (a JSON array), a union with None, or a scalar (a bool is no number,
    an int is a float)."""
    if typing.is_typeddict(hint):
        return isinstance(value, dict) and all(
            _conforms(value[key], inner) for key, inner in _hints(hint).items() if key in value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_conforms(value, arg) for arg in args)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is tuple:
        return (isinstance(value, list | tuple) and len(value) == len(args)
                and all(_conforms(v, a) for v, a in zip(value, args, strict=True)))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _missing(value: dict[str, Any], document: type, prefix: str = "") -> list[str]:
    """The keys of `document` (a `TypedDict`) that `value` lacks, and those its parts lack,
    dotted ("startupSeconds.firstBatch")."""
    out = []
    for key, hint in _hints(document).items():
        if key not in value:
            out.append(prefix + key)
            continue
        part = next((h for h in (hint, *typing.get_args(hint)) if typing.is_typeddict(h)), None)
        if part is not None and isinstance(value[key], dict):
            out += _missing(value[key], part, f"{prefix}{key}.")
    return out


FIRST_BATCH_POLL_S = 0.05
"""How often `wait_first_batch` reads the replacement's `/status`."""


def wait_first_batch(host: str, port: int, wait_s: float) -> float | None:
    """Read a just activated member's `/status` until it says its process finished its first
    batch (`startupSeconds.firstBatch`); the seconds that took, or None when it did not within
    `wait_s` (no records waiting, a slow first batch, a process that does not answer). Each
    read ends by the wait's own end."""
    began = time.monotonic()
    while True:
        left = began + wait_s - time.monotonic()
        status = read_status(host, port, max(0.05, min(1.0, left))).status
        if status is not None and status.startup_seconds.first_batch is not None:
            return time.monotonic() - began
        left = began + wait_s - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(FIRST_BATCH_POLL_S, left))


@dataclass(frozen=True)
class Refused:
    """Why a member did not take a request: the HTTP status of its answer (0: none) and what
    it said or what failed."""

    status: int
    reason: str

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class Drained:
    """A member's answer to POST /drain once its consumer closed: when (`drained_at`) and when
    it last finished a batch, both from its own clock."""

    drained_at: datetime
    last_batch_at: datetime | None
    static_leave: LeaveReport | None = None
    """A KIP-848 member's static leave as the coordinator confirmed it (None: classic)."""


def drain_member(host: str, port: int, tokens: Sequence[str], hold_ms: int,
                 wait_s: float) -> Drained | Refused:
    """POST the member's `/drain?holdMs=..&waitMs=..` with the group's token (newest first,
    as `ask_member`); Drained once it answers drained, else why not (a 202: still draining
    after `wait_s`)."""
    if not host:
        return Refused(0, "the pod has no IP yet")
    refused = Refused(0, "no request sent")
    path = f"/{DRAIN}?holdMs={int(hold_ms)}&waitMs={int(wait_s * 1000)}"
    for token in tokens or ("",):
        try:
            answer = _exchange(host, port, path, post=True, token=token,
                               deadline_s=wait_s + 2.0)
            if answer.status in (200, 202):
                return _drained(answer, wait_s)
            refused = _refused(answer)
        except (OSError, ValueError) as exc:
            return Refused(0, str(exc))
        if refused.status != 403:
            return refused
    return refused


def _refused(answer: Answer) -> Refused:
    """An answer that is not the one wanted, quoting at most `REASON_CAP` of its body."""
    said = answer.body[:REASON_CAP].decode(errors="replace").strip()
    return Refused(answer.status, f"HTTP {answer.status}: {said}")


def _drained(answer: Answer, wait_s: float) -> Drained | Refused:
    """A drain's answer taken (200 or 202), read through `DrainAnswer`: Drained once it says
    so (a missing `drainedAt` is now, a missing `lastBatchAt` none), else still draining; a
    body that is no drain's answer is a refusal without an answer (status 0). Raises
    ValueError for a body that is not JSON."""
    got = json.loads(answer.body or b"{}")
    if not isinstance(got, dict) or not _conforms(got, DrainAnswer):
        return Refused(0, f"HTTP {answer.status}: not a drain's answer: "
                          f"{answer.body[:REASON_CAP].decode(errors='replace').strip()}")
    doc = cast(DrainAnswer, got)
    if answer.status != 200 or not doc.get("drained", False):
        return Refused(answer.status, f"HTTP {answer.status}: still draining after "
                                      f"{wait_s:.0f} s")
    return Drained(_unix(doc.get("drainedAt")) or datetime.now(UTC),
                   _unix(doc.get("lastBatchAt")), _leave(doc.get("staticLeave")))


def _unix(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(float(value), UTC)


def ask_member(host: str, port: int, action: str, tokens: Sequence[str] = (),
               timeout: float = 5.0) -> Refused | None:
    """POST the member's `/leave`, `/rejoin` or `/activate` with the group's token as a bearer
    token; None when it accepted. `tokens`: newest first; the next one is tried only when the
    member refuses a token (403): the previous token, while the member's mounted Secret has
    not been updated yet after a rotation (a kubelet takes up to about a minute)."""
    if not host:
        return Refused(0, "the pod has no IP yet")
    refused = Refused(0, "no request sent")
    for token in tokens or ("",):
        try:
            answer = _exchange(host, port, f"/{action}", post=True, token=token,
                               deadline_s=timeout, cap=REASON_CAP, whole=False)
        except OSError as exc:
            return Refused(0, str(exc))
        if answer.status == 202:
            return None
        refused = _refused(answer) if answer.status >= 400 else Refused(
            answer.status, f"HTTP {answer.status}")
        if refused.status != 403:
            return refused
    return refused
