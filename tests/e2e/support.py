"""Helpers the e2e tests share: starting and following a rollout, the dashboard's answers, a
member's process and its crash (who owns each partition as a rollout goes:
`testkit.groups.OwnerWatch`)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from staticfleet_dev import dashboard, grafana_alerts
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.prometheus import Prometheus, dashboard_answers, legend_labels
from staticfleet_dev.stream import read_all
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import get_json, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for


def trigger(kubeconfig: Path, namespace: str, name: str, patch: str) -> None:
    kubectl(kubeconfig, "-n", namespace, "patch", "cg", name, "--type=json", "-p", patch)


def env_patch(value: str) -> str:
    return ('[{"op": "add", "path": "/spec/template/env/-", '
            f'"value": {{"name": "ROLLOUT_MARK", "value": "{value}"}}}}]')


def drain(kafka: KafkaBroker, group: str, stream: dict[str, Any]) -> tuple[int, list[bytes]]:
    """Stop producing, wait until the group committed everything, read the sink."""
    produced = stream["producer"].stop()
    assert not stream["producer"].failed, stream["producer"].failed
    groups.wait_caught_up(kafka.bootstrap, group, [stream["topic"]])
    return produced, read_all(kafka.bootstrap, stream["out"])


def switchovers(operator: OperatorProcess, namespace: str, name: str) -> list[str]:
    """The operator's log lines of the group's switchovers: a member drained, then its standby
    activated at once."""
    return [line for line in operator.log.read_text(errors="replace").splitlines()
            if f"{namespace}/{name}: member" in line and " drained in " in line
            and " activated " in line]


def check_dashboard(prometheus: Prometheus, namespace: str, group: str, started: float) -> None:
    """The shipped dashboard's panels, asked of the Prometheus that scraped this rollout: each
    panel shows data, with the labels its legends name; the rollout panel moved during it."""
    answers = dashboard_answers(prometheus, namespace, group)
    optional = {g.title for g in dashboard.graphs() if g.only_with}  # not set on this group
    empty = [title for title, results in answers.items()
             if not any(s for _, s in results) and title not in optional]
    assert not empty, f"panels with no series for {namespace}/{group}: {empty}"
    legends = {expr: legend for g in dashboard.graphs() for expr, legend in g.queries}
    for title, results in answers.items():
        for expr, series in results:
            for one in series:
                missing = legend_labels(legends[expr]) - set(one["metric"])
                assert not missing, f"{title!r}: {expr} has no label {missing}: {one}"
    print("dashboard queries with no series here (counters of events that did not happen):",
          [expr for results in answers.values() for expr, s in results if not s])
    panel = next(g for g in dashboard.graphs() if g.title == "Rollout in progress / at risk")
    in_progress = prometheus.query_range(dashboard.substitute(
        panel.queries[0][0], namespace, group), started, time.time())
    values = {float(v) for series in in_progress for _, v in series["values"]}
    assert values == {0.0, 1.0}, f"rollout in progress never moved: {in_progress}"
    # The Grafana-managed rules' queries (the PrometheusRule's expressions as Grafana sends
    # them): Prometheus takes each, and the rebalance ones find nothing after a static rollout.
    for rule in grafana_alerts.provisioning()["groups"][0]["rules"]:
        found = prometheus.query(rule["data"][0]["model"]["expr"])
        if "Rebalance" in rule["title"]:
            assert not [s for s in found if s["metric"].get("group") == group], (rule, found)


def member_process(namespace: str, pod: str) -> tuple[int, dict[str, str]]:
    """The pid and environment of the member process running for `pod` (the local node runs
    each container as a process with the pod's environment)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"consumer_runtime" not in cmdline:
            continue
        env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0")
                   if "=" in item)
        if env.get("POD_NAME") == pod and env.get("POD_NAMESPACE") == namespace:
            return int(entry.name), env
    raise AssertionError(f"no member process for pod {namespace}/{pod}")


def restart_count(kubeconfig: Path, namespace: str, pod: str) -> int:
    obj = get_json(kubeconfig, "-n", namespace, "pod", pod)
    return sum(int(cs.get("restartCount") or 0)
               for cs in (obj.get("status") or {}).get("containerStatuses") or ())


def crash(kubeconfig: Path, namespace: str, pod: str) -> int:
    """SIGKILL the member process of `pod`; returns the new process's pid once it is back."""
    pid, _ = member_process(namespace, pod)
    before = restart_count(kubeconfig, namespace, pod)
    os.kill(pid, signal.SIGKILL)

    def restarted() -> int:
        if restart_count(kubeconfig, namespace, pod) <= before:
            return 0
        try:
            new_pid, _ = member_process(namespace, pod)
        except AssertionError:
            return 0
        return new_pid if new_pid != pid else 0

    return int(wait_for(f"{pod}'s container restarted in place", restarted, timeout=120))
