"""The members' own HTTP endpoints, as the operator reads and asks them: `read_member_status`
(`/status`; `wait_first_batch` reads it until a batch was processed), `drain_member` (POST
`/drain`) and `ask_member` (POST `/leave`, `/rejoin`, `/activate`), each request with the
group's bearer token. An answer other than the one wanted is a `Refused`, with the member's HTTP
status and its reason.

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
import http.client
import json
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from member_contract import DRAIN, HTTP_PORT, STATUS

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
    """One read of a member's `/status`: its answer (None: none), or why it is slow (`Slow`:
    the process took the connection and did not answer in time, or answered too much)."""

    status: dict[str, Any] | None
    slow: str | None = None


def read_status(host: str, port: int, deadline_s: float = STATUS_DEADLINE_S) -> StatusRead:
    """A member's `/status` JSON, read within `deadline_s` (`_exchange`)."""
    if not host:
        return StatusRead(None)
    try:
        answer = _exchange(host, port, STATUS, deadline_s=deadline_s)
        data = json.loads(answer.body) if answer.status == 200 else None
    except Slow as exc:
        return StatusRead(None, str(exc))
    except (OSError, ValueError):
        return StatusRead(None)
    return StatusRead(data if isinstance(data, dict) else None)


def read_member_status(host: str, port: int,
                       timeout: float = STATUS_DEADLINE_S) -> dict[str, Any] | None:
    """A member's `/status` JSON, or None when it does not answer (yet) within `timeout`."""
    return read_status(host, port, timeout).status


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
        status = read_member_status(host, port, timeout=max(0.05, min(1.0, left)))
        if status and (status.get("startupSeconds") or {}).get("firstBatch") is not None:
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
    static_leave: Mapping[str, Any] | None = None
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
                got = json.loads(answer.body or b"{}")
                if answer.status != 200 or not got.get("drained"):
                    return Refused(answer.status, f"HTTP {answer.status}: still draining after "
                                                  f"{wait_s:.0f} s")
                leave = got.get("staticLeave")
                return Drained(_unix(got.get("drainedAt")) or datetime.now(UTC),
                               _unix(got.get("lastBatchAt")),
                               leave if isinstance(leave, dict) else None)
            refused = _refused(answer)
        except (OSError, ValueError, AttributeError) as exc:
            return Refused(0, str(exc))
        if refused.status != 403:
            return refused
    return refused


def _refused(answer: Answer) -> Refused:
    """An answer that is not the one wanted, quoting at most `REASON_CAP` of its body."""
    said = answer.body[:REASON_CAP].decode(errors="replace").strip()
    return Refused(answer.status, f"HTTP {answer.status}: {said}")


def _unix(value: Any) -> datetime | None:
    return (datetime.fromtimestamp(float(value), UTC)
            if isinstance(value, int | float) else None)


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
