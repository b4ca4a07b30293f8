"""The demo's Kubernetes side: kubectl against the local environment's control plane, the CRD
and the demo's namespace, and the operator as a process registered with the environment (so
that `staticfleet env down` stops it). `DemoFailed`, the demo's one error (a step that failed
or did not happen in time; its message says where to look), is defined here, the lowest of the
modules that raise it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from staticfleet_dev.demo.group import NAMESPACE
from staticfleet_dev.testkit import kube as kit

if TYPE_CHECKING:
    from staticfleet_dev.environment import LocalEnv


class DemoFailed(RuntimeError):
    """A step of the demo did not happen in time; the message says where to look."""


def kubectl(kubeconfig: Path, *args: str, input: str | None = None, check: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """kubectl against the environment's API server; a failure is `DemoFailed`."""
    try:
        return kit.kubectl(kubeconfig, *args, input=input, check=check, timeout=timeout)
    except AssertionError as exc:
        raise DemoFailed(str(exc)) from None


def install(kubeconfig: Path) -> None:
    """The CRD (until it is Established) and the demo's namespace (with its default
    ServiceAccount)."""
    try:
        kit.install_crds(kubeconfig)
        kit.create_namespace(kubeconfig, NAMESPACE)
    except (AssertionError, FileNotFoundError) as exc:
        raise DemoFailed(str(exc)) from None


def start_operator(env: LocalEnv) -> int:
    """The operator as a process registered with the environment, so that `staticfleet
    env down` stops it; returns its metrics port."""
    from staticfleet_dev.testkit.operator import OperatorProcess

    op = OperatorProcess(kubeconfig=env.kubeconfig, log=env.root / "operator.log",
                         env=env).start()
    return op.metrics_port
