"""The operator as a real process, the way a Deployment would run it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from staticfleet_dev.procs import free_port
from staticfleet_dev.tools import tail


@dataclass
class OperatorProcess:
    """`staticfleet operator run` against the test API server, log kept in `log`."""

    kubeconfig: Path
    log: Path
    metrics_port: int = 0
    health_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] | None = None

    def start(self) -> OperatorProcess:
        self.metrics_port = self.metrics_port or free_port()
        self.health_port = self.health_port or free_port()
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), **(self.extra_env or {})}
        exe = shutil.which("staticfleet") or "staticfleet"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [exe, "operator", "run", "--all-namespaces", "--metrics-host", "127.0.0.1",
                 "--metrics-port", str(self.metrics_port), "--health-port", str(self.health_port)],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the operator exited ({self.proc.returncode}):\n"
                                     f"{tail(self.log, 60)}")
            if self._healthy():
                return self
            time.sleep(0.3)
        raise AssertionError(f"the operator did not become healthy:\n{tail(self.log, 60)}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz",
                                        timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=5) as r:
            return str(r.read().decode())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL: the operator dies without any cleanup, as in a node crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def log_tail(self, lines: int = 80) -> str:
        return tail(self.log, lines)
