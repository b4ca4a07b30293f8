"""The member's HTTP endpoints (stdlib server, own thread): the probes /healthz and /readyz,
/status and /metrics, and the operator's requests POST /leave, /rejoin and /activate."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from consumer_runtime.metrics import Telemetry

log = logging.getLogger(__name__)
REQUESTS = ("leave", "rejoin", "activate")


def serve(telemetry: Telemetry, host: str, port: int,
          request: Callable[[str], str | None] = lambda action: "not started yet",
          ) -> ThreadingHTTPServer:
    """Start serving in a daemon thread; return the server (its port is the bound one).
    `request(action)` takes a POSTed request ("leave", "rejoin" or "activate"): None when
    accepted (202), else why not (409)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            now = time.monotonic()
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                ok = telemetry.healthy(now)
                self._send(200 if ok else 503, b"ok\n" if ok else b"poll loop stalled\n")
            elif path == "/readyz":
                ok = telemetry.ready(now)
                self._send(200 if ok else 503, b"ready\n" if ok else b"not ready\n")
            elif path == "/status":
                body = json.dumps(telemetry.status(now)).encode()
                self._send(200, body, "application/json")
            elif path == "/metrics":
                self._send(200, generate_latest(telemetry.registry), CONTENT_TYPE_LATEST)
            else:
                self._send(404, b"not found\n")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            action = self.path.split("?", 1)[0].strip("/")
            if action not in REQUESTS:
                self._send(404, b"not found\n")
                return
            refused = request(action)
            if refused is None:
                log.info("http: %s accepted", action)
                self._send(202, json.dumps({"accepted": action}).encode(), "application/json")
            else:
                log.info("http: %s refused: %s", action, refused)
                self._send(409, json.dumps({"refused": action, "reason": refused}).encode(),
                           "application/json")

        def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("http: " + format, *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
