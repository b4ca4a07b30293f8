"""Probes of the local node: a container's probe parsed into a `ProbeSpec`, a `ProbeTracker`
holding its verdict against the success and failure thresholds (both pure), and `run_probe`, which
runs one httpGet, tcpSocket or exec probe against the pod (the only I/O here)."""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ProbeSpec:
    kind: str  # http | tcp | exec | unsupported
    port: int | None = None
    host: str | None = None
    path: str = "/"
    scheme: str = "HTTP"
    headers: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace: float | None = None


def resolve_port(port: Any, container: Mapping[str, Any]) -> int | None:
    """A probe port: a number, a numeric string, or the name of a container port."""
    if isinstance(port, int):
        return port
    text = str(port or "")
    if text.isdigit():
        return int(text)
    for p in container.get("ports") or []:
        if p.get("name") == text:
            return int(p["containerPort"])
    return None


def parse_probe(probe: Mapping[str, Any] | None,
                container: Mapping[str, Any]) -> ProbeSpec | None:
    if not probe:
        return None
    common = {
        "initial_delay": float(probe.get("initialDelaySeconds") or 0),
        "period": float(probe.get("periodSeconds") or 10),
        "timeout": float(probe.get("timeoutSeconds") or 1),
        "success_threshold": int(probe.get("successThreshold") or 1),
        "failure_threshold": int(probe.get("failureThreshold") or 3),
        "termination_grace": (float(probe["terminationGracePeriodSeconds"])
                              if probe.get("terminationGracePeriodSeconds") is not None
                              else None),
    }
    if probe.get("httpGet"):
        h = probe["httpGet"]
        return ProbeSpec(kind="http", port=resolve_port(h.get("port"), container),
                         host=h.get("host") or None, path=h.get("path") or "/",
                         scheme=(h.get("scheme") or "HTTP").upper(),
                         headers=tuple((x["name"], x.get("value", ""))
                                       for x in h.get("httpHeaders") or []),
                         **common)  # type: ignore[arg-type]
    if probe.get("tcpSocket"):
        t = probe["tcpSocket"]
        return ProbeSpec(kind="tcp", port=resolve_port(t.get("port"), container),
                         host=t.get("host") or None, **common)  # type: ignore[arg-type]
    if probe.get("exec"):
        return ProbeSpec(kind="exec", command=tuple(probe["exec"].get("command") or []),
                         **common)  # type: ignore[arg-type]
    return ProbeSpec(kind="unsupported", **common)  # type: ignore[arg-type]


@dataclass
class ProbeTracker:
    """Consecutive successes/failures against the thresholds; `result` is the probe's verdict."""

    spec: ProbeSpec
    result: bool
    successes: int = 0
    failures: int = 0
    next_due: float = 0.0

    def observe(self, ok: bool) -> None:
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= self.spec.success_threshold:
                self.result = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.failures >= self.spec.failure_threshold:
                self.result = False


def run_probe(spec: ProbeSpec, *, pod_ip: str, env: Mapping[str, str], cwd: Path) -> bool:
    host = spec.host or pod_ip
    try:
        if spec.kind == "http":
            if spec.port is None:
                return False
            conn: http.client.HTTPConnection
            if spec.scheme == "HTTPS":
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                conn = http.client.HTTPSConnection(host, spec.port, timeout=spec.timeout,
                                                   context=ctx)
            else:
                conn = http.client.HTTPConnection(host, spec.port, timeout=spec.timeout)
            try:
                headers = {"User-Agent": "kube-probe/1.36", "Accept": "*/*",
                           **dict(spec.headers)}
                conn.request("GET", spec.path, headers=headers)
                resp = conn.getresponse()
                resp.read(64 * 1024)
                return 200 <= resp.status < 400
            finally:
                conn.close()
        if spec.kind == "tcp":
            if spec.port is None:
                return False
            with socket.create_connection((host, spec.port), timeout=spec.timeout):
                return True
        if spec.kind == "exec":
            done = subprocess.run(list(spec.command), env=dict(env), cwd=cwd,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  stdin=subprocess.DEVNULL, timeout=spec.timeout, check=False)
            return done.returncode == 0
    except (OSError, http.client.HTTPException, subprocess.TimeoutExpired):
        return False
    return True
