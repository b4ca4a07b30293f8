"""Who may steer a member: the operator, proved by its bearer token on every POST.

The operator keeps one random token per ConsumerGroup in the Secret `<cg>-member-token` and
mounts it into the group's pods; `STATICFLEET_MEMBER_TOKEN_FILE` names the file
(docs/contracts.md). `TokenFile` reads it again whenever the file changed, so a token rotated in
the Secret reaches a running member without a restart (a kubelet updates a mounted Secret in
place; the local node does the same for its stand-in directory). `check` takes the
`Authorization` header of a request and says why it is refused, if it is: no bearer token (401),
a token that is not the group's, or no token to compare with (403, fail closed). The comparison
is `hmac.compare_digest`, whose time does not depend on where the tokens differ. `RefusalLog`
names the callers that were refused, at most one line per `LOG_EVERY_S`.

Everything here but `TokenFile.current` (one `stat`, a read when it changed) is pure.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
from dataclasses import dataclass, field

from member_contract import MEMBER_TOKEN_FILE_ENV

log = logging.getLogger(__name__)

LOG_EVERY_S = 10.0
CALLERS_NAMED = 5
"""At most this many distinct addresses are named in one summary line."""


@dataclass(frozen=True)
class Refusal:
    """Why a control request is refused: the HTTP status, the metric's `reason` label, and
    the message of the JSON answer."""

    status: int
    reason: str
    message: str

    @property
    def error(self) -> str:
        return "unauthorized" if self.status == 401 else "forbidden"


MISSING = Refusal(401, "missing", "this request changes the member: it needs the operator's "
                                  "token (Authorization: Bearer <token>)")
WRONG = Refusal(403, "wrong", "the bearer token is not this member's group token")
UNCONFIGURED = Refusal(403, "unconfigured", "this member has no token to check a request "
                                            f"against ({MEMBER_TOKEN_FILE_ENV} is unset or its "
                                            "file cannot be read): it takes no control request")


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (the scheme in any case), else
    None."""
    scheme, _, value = (header or "").strip().partition(" ")
    token = value.strip()
    return token if scheme.lower() == "bearer" and token else None


def check(header: str | None, expected: str | None) -> Refusal | None:
    """None when `header` carries the bearer token `expected`, else why not. A member without
    a token (`expected` None or empty) refuses every request."""
    presented = bearer(header)
    if presented is None:
        return MISSING
    if not expected:
        return UNCONFIGURED
    if not hmac.compare_digest(presented.encode(), expected.encode()):
        return WRONG
    return None


class TokenFile:
    """The token in the file at `path` (surrounding whitespace stripped), read again when the
    file changed: its inode, size or modification time (a kubelet swaps a symlink to update a
    mounted Secret, so the inode changes). None when there is no path, the file cannot be read
    or it is empty. Thread-safe (the HTTP server's threads ask)."""

    def __init__(self, path: str | None) -> None:
        self.path = path or None
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int, int] | None = None
        self._token: str | None = None
        self._failed = False

    def current(self) -> str | None:
        if self.path is None:
            return None
        with self._lock:
            try:
                st = os.stat(self.path)
                seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                if seen != self._seen:
                    with open(self.path, encoding="utf-8") as f:
                        token = f.read().strip() or None
                    # The first read is routine; a rotation is worth a line.
                    log.log(logging.DEBUG if self._seen is None else logging.INFO,
                            "control token %s from %s", "read" if self._seen is None
                            else "changed: read again", self.path)
                    self._seen, self._token, self._failed = seen, token, False
            except (OSError, UnicodeDecodeError) as exc:
                if not self._failed:
                    log.warning("control token: cannot read %s (%s): control requests are "
                                "refused until it can be read", self.path, exc)
                self._seen, self._token, self._failed = None, None, True
            return self._token


@dataclass
class RefusalLog:
    """Lines naming refused callers: the first refusal at once, later ones summed up in one
    line at most every `every_s` seconds (a flood of requests makes no flood of lines). Pure:
    the caller passes `now` and logs the line returned."""

    every_s: float = LOG_EVERY_S
    last_at: float | None = None
    held: int = 0
    callers: dict[str, int] = field(default_factory=dict)

    def refused(self, now: float, remote: str, action: str, refusal: Refusal) -> str | None:
        """Note one refusal; the line to log now, or None while it is held back."""
        self.held += 1
        if len(self.callers) < CALLERS_NAMED or remote in self.callers:
            self.callers[remote] = self.callers.get(remote, 0) + 1
        if self.last_at is not None and now - self.last_at < self.every_s:
            return None
        summary = ""
        if self.held > 1:
            others = self.held - sum(self.callers.values())
            summary = (f" ({self.held} refused since the last such line, from "
                       + ", ".join(f"{a} x{n}" for a, n in self.callers.items())
                       + (f" and {others} from other addresses" if others else "") + ")")
        self.last_at, self.held, self.callers = now, 0, {}
        return (f"refused POST /{action} from {remote}: {refusal.status} {refusal.reason}: "
                f"{refusal.message}{summary}")
