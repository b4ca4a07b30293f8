"""kubectl and helpers against the real API server of the test session."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def kubectl(kubeconfig: Path, *args: str, input: str | None = None,
            check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run kubectl against the test API server; on failure raise with its stderr."""
    proc = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *args], input=input,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def get_json(kubeconfig: Path, *args: str) -> Any:
    return json.loads(kubectl(kubeconfig, "get", *args, "-o", "json").stdout)


def install_crds(kubeconfig: Path) -> None:
    """`kubectl apply --server-side -f crds/` and wait until the CRDs are Established."""
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(REPO / "crds"))
    # `kubectl wait` fails outright while a new CRD has no conditions yet; poll instead.
    path = '{.status.conditions[?(@.type=="Established")].status}'
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = kubectl(kubeconfig, "get", "crd", "consumergroups.staticfleet.io", "-o",
                      f"jsonpath={path}", check=False).stdout
        if out.strip() == "True":
            return
        time.sleep(0.2)
    raise AssertionError("the ConsumerGroup CRD was not Established within 60 s")


def create_namespace(kubeconfig: Path, name: str) -> None:
    """Create a namespace and wait for its default ServiceAccount (pods need it)."""
    kubectl(kubeconfig, "create", "namespace", name)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if kubectl(kubeconfig, "-n", name, "get", "serviceaccount", "default",
                   check=False).returncode == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"namespace {name} got no default ServiceAccount within 30s")


def load_example(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((REPO / "examples" / name).read_text()))


def to_yaml(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj, sort_keys=False)
