"""kubectl against an API server (the local environment's, or any kubeconfig's), the CRDs,
namespaces, and the files of the source tree the kit runs from."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from staticfleet.decisions.spec.model import API_GROUP, PLURAL
from staticfleet_dev.testkit.poll import wait_for

REPO = Path(__file__).resolve().parents[2]
"""The source checkout this package runs from (crds/, examples/)."""


def repo_file(*parts: str) -> Path:
    """A file of the source checkout, e.g. `repo_file("crds")`; fail clearly without one."""
    path = REPO.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: the test kit (and the demo) run from a "
                                "source checkout of staticfleet")
    return path


def kubectl(kubeconfig: Path, *args: str, input: str | None = None,
            check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run kubectl against the API server of `kubeconfig`; on failure raise with its stderr."""
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
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(repo_file("crds")))
    # `kubectl wait` fails outright while a new CRD has no conditions yet; poll instead.
    path = '{.status.conditions[?(@.type=="Established")].status}'
    wait_for("the ConsumerGroup CRD to be Established", lambda: kubectl(
        kubeconfig, "get", "crd", f"{PLURAL}.{API_GROUP}", "-o", f"jsonpath={path}",
        check=False).stdout.strip() == "True", timeout=60, interval=0.2)


def create_namespace(kubeconfig: Path, name: str, timeout: float = 60) -> None:
    """Create a namespace and wait for its default ServiceAccount (pods need it)."""
    kubectl(kubeconfig, "create", "namespace", name)
    wait_for(f"the default ServiceAccount of namespace {name}", lambda: kubectl(
        kubeconfig, "-n", name, "get", "serviceaccount", "default", check=False,
    ).returncode == 0, timeout=timeout, interval=0.2)


def load_example(name: str) -> dict[str, Any]:
    """examples/`name` as an object."""
    return dict(yaml.safe_load(repo_file("examples", name).read_text()))


def to_yaml(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj, sort_keys=False)
