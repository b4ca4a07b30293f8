"""A real Prometheus for the tests and the demo: scrapes the operator and the member pods,
evaluates the shipped alert rules, answers through its HTTP API.

The binary is the project's build (`staticfleet_dev.build.prometheus_bin()`); the web UI's
assets are not embedded, the API works.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from member_contract import HTTP_PORT
from staticfleet_dev import build
from staticfleet_dev.procs import free_port
from staticfleet_dev.tools import tail

REPO = Path(__file__).resolve().parents[1]
ALERT_RULES = REPO / "charts" / "staticfleet" / "rules" / "staticfleet-alerts.yaml"


def scrape_config(*, operator_target: str, kubeconfig: Path, rule_files: list[Path],
                  interval: str = "2s") -> dict[str, Any]:
    """The operator as a static target, member pods found through the Kubernetes API (pods
    labelled app.kubernetes.io/name=staticfleet-member, scraped at <podIP>:8080). Both keep the
    labels the targets set (`namespace`, `group`, `member`): honor_labels."""
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval,
                   "evaluation_interval": interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {"job_name": "staticfleet-operator", "honor_labels": True,
             "static_configs": [{"targets": [operator_target]}]},
            {"job_name": "staticfleet-members", "honor_labels": True,
             "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": str(kubeconfig)}],
             "relabel_configs": [
                 {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                  "regex": "staticfleet-member", "action": "keep"},
                 {"source_labels": ["__meta_kubernetes_pod_ip"], "regex": "(.+)",
                  "target_label": "__address__", "replacement": f"${{1}}:{HTTP_PORT}"},
                 {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
             ]},
        ],
    }


@dataclass
class Prometheus:
    """`prometheus` with a generated config, storage in `workdir`, API on 127.0.0.1:<port>."""

    workdir: Path
    config: dict[str, Any]
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.workdir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> Prometheus:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config, sort_keys=False))
        exe = build.prometheus_bin() / "prometheus"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(exe), f"--config.file={config}",
                 f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited ({self.proc.returncode}):\n"
                                     f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"prometheus not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log, lines)

    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        url = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"GET {url}: {exc.code} {exc.read()[:500]!r}") from exc
        assert body.get("status") == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; the vector's samples ({"metric": {...}, "value": [t, "v"]})."""
        data = self._get("/api/v1/query", {"query": expr})
        return list(data["result"])

    def query_range(self, expr: str, start: float, end: float,
                    step: float = 2.0) -> list[dict[str, Any]]:
        """A range query; the matrix's series ({"metric": {...}, "values": [[t, "v"], ...]})."""
        data = self._get("/api/v1/query_range",
                         {"query": expr, "start": str(start), "end": str(end),
                          "step": str(step)})
        return list(data["result"])

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing): labels, state, activeAt, value."""
        return list(self._get("/api/v1/alerts")["alerts"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/targets")["activeTargets"])

    def rules(self) -> list[dict[str, Any]]:
        return [r for g in self._get("/api/v1/rules")["groups"] for r in g["rules"]]


def dashboard_answers(prometheus: Prometheus, namespace: str,
                      group: str) -> dict[str, list[tuple[str, list[dict[str, Any]]]]]:
    """Every panel query of the shipped dashboard as Grafana sends it with `namespace` and
    `group` selected, and Prometheus' answer: {panel title: [(query, series), ...]}."""
    from staticfleet_dev import dashboard

    return {g.title: [(expr, prometheus.query(dashboard.substitute(expr, namespace, group)))
                      for expr, _ in g.queries] for g in dashboard.graphs()}


def legend_labels(legend: str) -> set[str]:
    """The labels a legend format names ({{group}} -> group)."""
    import re

    return set(re.findall(r"{{\s*(\w+)\s*}}", legend))
