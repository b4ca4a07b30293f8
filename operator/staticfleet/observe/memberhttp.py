"""The members' own HTTP endpoints, as the operator reads and asks them: `read_member_status`
(`/status`; `wait_first_batch` reads it until a batch was processed), `drain_member` (POST
`/drain`) and `ask_member` (POST `/leave`, `/rejoin`, `/activate`), each request with the
group's bearer token. An answer other than the one wanted is a `Refused`, with the member's HTTP
status and its reason.

Every request to a member is made by `_request`, the one place that says where it goes: to the
member's own address (its pod IP and port), unless the operator was started with
`settings.MEMBER_HTTP_VIA_ENV` (benches only; the chart never sets it): then every request goes
to that one address instead (`route_through`), the member simulator's
(`staticfleet_dev.membersim`), naming the pod meant in `POD_IP_HEADER`. With fake nodes (kwok)
a pod's IP leads nowhere, and one process answers for every member.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
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


def _request(host: str, port: int, path: str, *, post: bool = False,
             token: str = "") -> urllib.request.Request:
    """The request for `path` (with its query) to the member at `host`:`port`, a POST (empty
    body) with `token` as its bearer token when `post`; routed through `_via` when set."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if _via is not None:
        headers[POD_IP_HEADER] = host
        host, port = _via
    return urllib.request.Request(f"http://{host}:{port}{path}", data=b"" if post else None,
                                  headers=headers, method="POST" if post else "GET")


def read_member_status(host: str, port: int, timeout: float = 2.0) -> dict[str, Any] | None:
    """A member's `/status` JSON, or None when it does not answer (yet)."""
    if not host:
        return None
    try:
        with urllib.request.urlopen(_request(host, port, STATUS), timeout=timeout) as resp:
            data = json.load(resp)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


FIRST_BATCH_POLL_S = 0.05
"""How often `wait_first_batch` reads the replacement's `/status`."""


def wait_first_batch(host: str, port: int, wait_s: float) -> float | None:
    """Read a just activated member's `/status` until it says its process finished its first
    batch (`startupSeconds.firstBatch`); the seconds that took, or None when it did not within
    `wait_s` (no records waiting, a slow first batch, a process that does not answer)."""
    began = time.monotonic()
    while True:
        status = read_member_status(host, port, timeout=max(0.2, min(1.0, wait_s)))
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
            with urllib.request.urlopen(_request(host, port, path, post=True, token=token),
                                        timeout=wait_s + 2.0) as resp:
                answer = json.loads(resp.read() or b"{}")
                if resp.status != 200 or not answer.get("drained"):
                    return Refused(resp.status, f"HTTP {resp.status}: still draining after "
                                                f"{wait_s:.0f} s")
                leave = answer.get("staticLeave")
                return Drained(_unix(answer.get("drainedAt")) or datetime.now(UTC),
                               _unix(answer.get("lastBatchAt")),
                               leave if isinstance(leave, dict) else None)
        except urllib.error.HTTPError as exc:
            refused = Refused(exc.code, f"HTTP {exc.code}: "
                                        f"{exc.read()[:200].decode(errors='replace').strip()}")
        except (OSError, ValueError) as exc:
            return Refused(0, str(exc))
        if refused.status != 403:
            return refused
    return refused


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
            with urllib.request.urlopen(_request(host, port, f"/{action}", post=True,
                                                 token=token), timeout=timeout) as resp:
                if resp.status == 202:
                    return None
                return Refused(resp.status, f"HTTP {resp.status}")
        except urllib.error.HTTPError as exc:
            refused = Refused(exc.code, f"HTTP {exc.code}: "
                                        f"{exc.read()[:200].decode(errors='replace').strip()}")
        except OSError as exc:
            return Refused(0, str(exc))
        if refused.status != 403:
            return refused
    return refused
