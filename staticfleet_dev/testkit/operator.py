"""The operator as a real process, the way a Deployment would run it: this checkout's, or an
earlier commit's for benchmarks that print today's figures beside it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from staticfleet.decisions.settings import ALLOW_TESTING_ANNOTATIONS_ENV
from staticfleet_dev import environment
from staticfleet_dev.procs import ProcessRecord, free_port, spawn, wait_until
from staticfleet_dev.testkit.kube import REPO
from staticfleet_dev.tools import tail


@dataclass
class OperatorProcess:
    """`staticfleet operator run --all-namespaces` against the API server of `kubeconfig`, its
    output in `log`. `source`: a source tree (an earlier commit's worktree) whose packages run
    instead of the installed ones. `env`: a local environment to register the process with, so
    that `staticfleet env down` stops it too. `allow_testing_annotations`: honour the test-only
    annotations (`staticfleet.decisions.spec.model.TESTING_ANNOTATIONS`), which an operator
    installed by the chart ignores."""

    kubeconfig: Path
    log: Path
    metrics_port: int = 0
    health_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] | None = None
    source: Path | None = None
    env: environment.LocalEnv | None = None
    record: ProcessRecord | None = None
    allow_testing_annotations: bool = False
    args: tuple[str, ...] = ()
    """More arguments of `staticfleet operator run` (e.g. `--shard b`)."""
    python: Path | None = None
    """The interpreter to run it with (another venv's); default this one's."""

    def start(self, timeout: float = 60) -> OperatorProcess:
        """Start it and wait until it answers /healthz; on failure (it exits, or does not answer
        within `timeout` s) stop it and raise ServerFailed with its log tail."""
        self.launch()
        return self.wait_healthy(timeout)

    def launch(self) -> OperatorProcess:
        """Start it, without waiting (several operators start at once, then `wait_healthy`; an
        operator armed with a failpoint may reach it, and die, before it answers /healthz)."""
        self.metrics_port = self.metrics_port or free_port()
        self.health_port = self.health_port or free_port()
        environ = {**os.environ, "KUBECONFIG": str(self.kubeconfig), **(self.extra_env or {})}
        if self.allow_testing_annotations:
            environ[ALLOW_TESTING_ANNOTATIONS_ENV] = "true"
        if self.source is not None:  # the earlier commit's packages win over the installed ones
            environ["PYTHONPATH"] = f"{self.source / 'operator'}:{self.source}"
        self.proc, self.record = spawn("operator", [
            str(self.python or sys.executable), "-m", "staticfleet.cli", "operator", "run",
            "--all-namespaces",
            "--metrics-host", "127.0.0.1", "--metrics-port", str(self.metrics_port),
            "--health-port", str(self.health_port), *self.args,
        ], log=self.log, env=environ)
        if self.env is not None:
            self.env.records.append(self.record)
            environment.save(self.env)
        return self

    def wait_healthy(self, timeout: float = 60) -> OperatorProcess:
        """Wait until it answers /healthz (`start`)."""
        assert self.record is not None, "not launched"
        try:
            wait_until(self._healthy, rec=self.record, timeout=timeout, what="healthy")
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not launched"
        return self.proc.pid

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


@contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """A detached git worktree of `rev` of this checkout, removed afterwards."""
    tree = Path(tempfile.mkdtemp(prefix="staticfleet-baseline-")) / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev],
                   check=True, capture_output=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                       check=False, capture_output=True)


@dataclass
class Variant:
    """An operator to measure: this checkout, or a worktree of an earlier commit."""

    label: str
    source: Path | None = None

    @property
    def slug(self) -> str:
        return "base" if self.source is not None else "new"

    def process(self, kubeconfig: Path, log: Path) -> OperatorProcess:
        return OperatorProcess(kubeconfig=kubeconfig, log=log, source=self.source)
