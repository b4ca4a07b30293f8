"""Run probe members as real processes and collect what they report."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.admin import AdminClient


@dataclass
class ProbeMember:
    """One probe member process and the events it has printed so far."""

    args: list[str]
    proc: subprocess.Popen[str] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    def start(self) -> ProbeMember:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.probe_member", *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        return self

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def terminate(self, timeout: float = 30) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def assignment(self) -> list[list[Any]] | None:
        """Partitions of the last assign event, or None before the first one."""
        assigns = [e for e in self.events if e["event"] == "assign"]
        return assigns[-1]["partitions"] if assigns else None

    def events_since(self, t: float) -> list[dict[str, Any]]:
        return [e for e in self.events if e["t"] > t and e["event"] in ("assign", "revoke", "lost")]


def wait_for(check: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def group_state(admin: AdminClient, group: str) -> str:
    desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
    return str(desc.state.name)


def wait_until_true(what: str, check: Callable[[], Any], timeout: float = 30.0,
                    interval: float = 0.1) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


PLACEHOLDER_MEMBER = ["python", "-c", """
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path in ("/healthz", "/readyz") else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer((os.environ["STATICFLEET_HTTP_HOST"], 8080), H).serve_forever()
"""]
"""A member stand-in that only answers the probes (200 on /healthz and /readyz): no Kafka
consumer, no Spark. A bare sleep would be killed by the liveness probe every minute, which the
operator rightly reports as a failing member."""
