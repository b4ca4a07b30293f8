"""The chart with `shards` and `peering.enabled` installed for real: its operator pods run under
the local node with the chart's own ServiceAccount, so what they do proves the chart's RBAC is
enough for sharding (each shard's label-selected watch, the claim label written on each group
and listed across shards, `status.shard` cleared when a group moves) and for kopf's peering
(each pod watches its peering object and writes its keep-alive there; without those rights a
peered operator stays paused and reconciles nothing).

The groups' members run a placeholder process: what is under test is which operator acts and
that it may. The session's admin operator is stopped meanwhile.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from staticfleet.decisions.names import KAFKA_GROUP_LABEL
from staticfleet_dev import build, environment
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.procs import ProcessRecord
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import REPO, create_namespace, get_json, kubectl
from staticfleet_dev.testkit.poll import wait_for
from staticfleet_dev.tools import tail
from tests.integration.support import PLACEHOLDER, consumer_group
from tests.support import unique

pytestmark = pytest.mark.integration

CHART = REPO / "charts" / "staticfleet"
SHARD_LABEL = "staticfleet.io/shard"


def run(cmd: list[str | Path], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, check=False)


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.args}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture
def release_ns(kubeconfig: Path) -> Iterator[str]:
    name = unique("sf-shards")
    create_namespace(kubeconfig, name)
    yield name
    kubectl(kubeconfig, "delete", "namespace", name, "--wait=false", check=False)


def shard_of(cg: dict[str, Any]) -> str | None:
    return (cg.get("status") or {}).get("shard") if (
        (cg.get("status") or {}).get("observedGeneration") == cg["metadata"]["generation"]
    ) else None


def test_a_sharded_peered_install_runs_under_the_charts_rbac(
        kubeconfig: Path, kafka: KafkaBroker, crds: None, local_node: ProcessRecord,
        local_env: environment.LocalEnv, no_admin_operator: None, release_ns: str,
        namespace: str, make_topic: Callable[..., str], tmp_path: Path) -> None:
    helm = build.helm_bin() / "helm"
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(REPO / "crds" / "kopf-peering"))
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
            "crd/clusterkopfpeerings.kopf.dev")
    release = unique("sh")
    fullname = f"{release}-staticfleet"
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "shards": ["b"], "peering": {"enabled": True}, "watchNamespaces": ["*"],
        "extraEnv": [{"name": "STATICFLEET_RESYNC_SECONDS", "value": "3"}]}))
    helm_args: list[str | Path] = ["--kubeconfig", kubeconfig, "--namespace", release_ns]

    def operator_logs() -> str:
        logs = sorted(local_env.pod_log_dir.glob(f"{release_ns}_{fullname}-*.log"))
        return "\n".join(f"--- {p.name} ---\n{tail(p, 60)}" for p in logs)

    try:
        ok(run([helm, "install", release, CHART, *helm_args, "--values", values,
                "--wait", "--timeout", "240s"], timeout=300))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{operator_logs()}") from None
    try:
        # Two Deployments, one pod each, each with its own peering object in which it alone
        # keeps alive.
        for deployment in (fullname, f"{fullname}-b"):
            wait_for(f"the keep-alive of {deployment}'s pod in its peering object", lambda d=(
                deployment): len(get_json(kubeconfig, "clusterkopfpeering", d).get(
                    "status") or {}) == 1, 60, describe=operator_logs)
        topic = make_topic("chart-shards", 2)
        names = {unique("plain"): None, unique("b"): "b"}
        for name, shard in names.items():
            cg = consumer_group(name, bootstrap=kafka.bootstrap, topics=[topic], replicas=1,
                                command=PLACEHOLDER)
            if shard:
                cg["metadata"]["labels"] = {SHARD_LABEL: shard}
            groups.apply(kubeconfig, namespace, cg)
        try:
            for name, shard in names.items():
                groups.wait_status(kubeconfig, namespace, name,
                                   lambda cg, s=shard or "default": shard_of(cg) == s, 120,
                                   f"{name} reconciled by its shard")
            # Move the unlabelled group to shard b: the default shard lets it go.
            plain = next(n for n, s in names.items() if s is None)
            kubectl(kubeconfig, "-n", namespace, "label", "cg", plain, f"{SHARD_LABEL}=b")
            groups.wait_status(kubeconfig, namespace, plain, lambda cg: shard_of(cg) == "b",
                               60, f"{plain} moved to shard b")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{operator_logs()}") from None
        for name in names:
            assert KAFKA_GROUP_LABEL in groups.get(kubeconfig, namespace, name)["metadata"][
                "labels"]
        logs = operator_logs()
        assert f"{namespace}/{plain} left the ConsumerGroups this operator watches" in logs
        assert "did not let the group go" not in logs, logs
        # The chart's RBAC refused nothing (the API server's denial names the ServiceAccount).
        # A 403 for a namespace being terminated is another test's group going away, which
        # the default shard (every namespace) still sees: not a denial.
        assert not re.search(r'forbidden: User \\?"system:serviceaccount:', logs), logs
    finally:
        ok(run([helm, "uninstall", release, *helm_args, "--wait", "--timeout", "120s"]))
