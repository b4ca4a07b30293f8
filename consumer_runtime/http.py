"""The member's HTTP endpoints (stdlib server, own thread): the probes /healthz and /readyz,
/status and /metrics, open to any caller, and the operator's requests POST /leave, /rejoin,
/activate and /drain, taken only with the group's bearer token (`consumer_runtime.control`).

POST /drain?holdMs=H&waitMs=W answers once the member has drained (200, with `drainedAt` and
`lastBatchAt`, unix seconds from the member's clock, and for a KIP-848 static member
`staticLeave`, the coordinator's answer to its leave: `consumer_runtime.staticleave`), or after
W ms (default 30,000) with 202
while it still finishes its batch; H: how long the drained process waits to be replaced before it
subscribes again (consumer_runtime/steering.py)."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from consumer_runtime import control
from consumer_runtime.metrics import Telemetry
from member_contract import DRAIN, HEALTHZ, METRICS, READYZ, REQUESTS, STATUS
from member_contract.status import DrainAnswer

log = logging.getLogger(__name__)
DRAIN_WAIT_MS = 30_000
"""How long POST /drain waits for the drain before answering 202, unless it says (`waitMs`)."""
Drain = Callable[[float | None, float], tuple[str | None, bool]]
"""Take a drain (hold seconds or None, seconds to wait): (why not, drained within the wait)."""
MAX_BODY = 64 * 1024
"""The requests have no body to speak of; a longer one is refused unread (413)."""
CLIENT_TIMEOUT_S = 5.0
"""How long the server waits on a client's socket (each read of its request, each write of the
answer) before it closes the connection: a client that connects and sends nothing, or stops
halfway, holds a thread no longer than this. The operator's requests take milliseconds to send;
a drain's wait for its answer is the member's, not the socket's."""


def serve(telemetry: Telemetry, host: str, port: int,
          request: Callable[[str], str | None] = lambda action: "not started yet",
          token: Callable[[], str | None] = lambda: None,
          drain: Drain | None = None,
          client_timeout_s: float = CLIENT_TIMEOUT_S) -> ThreadingHTTPServer:
    """Start serving in a daemon thread; return the server (its port is the bound one).
    `request(action)` takes a POSTed request ("leave", "rejoin" or "activate"): None when
    accepted (202), else why not (409). Every POST needs `Authorization: Bearer <token()>`
    first (401 without one, 403 with another; `token()` None refuses them all); refusals are
    counted and their callers logged at a rate limit. A connection whose client is silent for
    `client_timeout_s` is closed (`CLIENT_TIMEOUT_S`)."""
    served = _Served(telemetry, request, token, drain, client_timeout_s)
    server = _Server((host, port), partial(_Handler, served))
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server


class _Server(ThreadingHTTPServer):
    """One thread per connection; a client that timed out or went away is one debug line, not
    a traceback on stderr."""

    daemon_threads = True
    request_queue_size = 64
    """The listen backlog (socketserver's default is 5: a sixth connection in a burst waited
    for the kernel's 1 s SYN retry)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (TimeoutError, ConnectionError)):
            log.debug("http: connection from %s closed: %s", client_address[0], exc)
        else:
            log.exception("http: a request from %s failed", client_address[0])


@dataclass(frozen=True)
class _Served:
    """What the endpoints serve: the member's telemetry and its operator requests (see
    `serve`), and the log of refused callers."""

    telemetry: Telemetry
    request: Callable[[str], str | None]
    token: Callable[[], str | None]
    drain: Drain | None
    client_timeout_s: float = CLIENT_TIMEOUT_S
    refusals: control.RefusalLog = field(default_factory=control.RefusalLog)
    refusals_lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    """One request to the member's endpoints (`serve` makes one per request, with `served`)."""

    def __init__(self, served: _Served, *args: Any) -> None:
        self.served = served
        super().__init__(*args)

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.served.client_timeout_s)

    def do_GET(self) -> None:
        now = time.monotonic()
        path = self.path.split("?", 1)[0]
        if path == HEALTHZ:
            ok = self.served.telemetry.healthy(now)
            self._send(200 if ok else 503, b"ok\n" if ok else b"poll loop stalled\n")
        elif path == READYZ:
            ok = self.served.telemetry.ready(now)
            self._send(200 if ok else 503, b"ready\n" if ok else b"not ready\n")
        elif path == STATUS:
            body = json.dumps(self.served.telemetry.status(now)).encode()
            self._send(200, body, "application/json")
        elif path == METRICS:
            self._send(200, generate_latest(self.served.telemetry.registry), CONTENT_TYPE_LATEST)
        else:
            self._send(404, b"not found\n")

    def do_POST(self) -> None:
        action = self.path.split("?", 1)[0].strip("/")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True
            self._send(413 if length > 0 else 400, b"bad Content-Length\n")
            return
        self.rfile.read(length)
        refusal = control.check(self.headers.get("Authorization"), self.served.token())
        if refusal is not None:
            self._refuse(action, refusal)
            return
        if action not in REQUESTS or (action == DRAIN and self.served.drain is None):
            self._send(404, b"not found\n")
            return
        if action == DRAIN:
            assert self.served.drain is not None
            self._drain(self.served.drain)
            return
        refused = self.served.request(action)
        if refused is None:
            log.info("http: %s accepted", action)
            self._send(202, json.dumps({"accepted": action}).encode(), "application/json")
        else:
            log.info("http: %s refused: %s", action, refused)
            self._send(409, json.dumps({"refused": action, "reason": refused}).encode(),
                       "application/json")

    def _drain(self, drain: Drain) -> None:
        query = parse_qs(self.path.partition("?")[2])
        try:
            hold = query.get("holdMs")
            hold_s = None if not hold else int(hold[0]) / 1000.0
            wait_s = int((query.get("waitMs") or [str(DRAIN_WAIT_MS)])[0]) / 1000.0
        except ValueError:
            self._send(400, b"holdMs and waitMs are whole milliseconds\n")
            return
        refused, drained = drain(hold_s, wait_s)
        if refused is not None:
            log.info("http: drain refused: %s", refused)
            self._send(409, json.dumps({"refused": DRAIN, "reason": refused}).encode(),
                       "application/json")
            return
        st = self.served.telemetry.status(time.monotonic())
        body: DrainAnswer = {"accepted": DRAIN, "drained": drained,
                             "drainedAt": st["drainedAt"], "lastBatchAt": st["lastBatchAt"],
                             "instanceId": st["instanceId"],
                             "staticLeave": st["staticLeave"] if drained else None}
        log.info("http: drain %s", "done" if drained else "accepted, still draining")
        self._send(200 if drained else 202, json.dumps(body).encode(), "application/json")

    def _refuse(self, action: str, refusal: control.Refusal) -> None:
        self.served.telemetry.control_refused(action if action in REQUESTS else "other",
                                              refusal.reason)
        with self.served.refusals_lock:
            line = self.served.refusals.refused(time.monotonic(), self.client_address[0], action,
                                    refusal)
        if line is not None:
            log.warning("http: %s", line)
        challenge = ('Bearer realm="staticfleet-member"' if refusal.status == 401
                     else 'Bearer realm="staticfleet-member", error="invalid_token"')
        body = {"refused": action, "error": refusal.error, "reason": refusal.message}
        self._send(refusal.status, json.dumps(body).encode(), "application/json",
                   {"WWW-Authenticate": challenge})

    def _send(self, code: int, body: bytes, ctype: str = "text/plain",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http: " + format, *args)
