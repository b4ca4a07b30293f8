"""Fixtures of the chart tests: the real helm and promtool binaries, and a `helm template` runner.

The binaries come from the project's build cache (staticfleet_dev.build); a missing one is
built, never skipped.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from staticfleet_dev import build, versions

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "staticfleet"
# The API server version the project runs against; helm built from source does not know it.
KUBE_VERSION = versions.KUBERNETES_VERSION.lstrip("v")


@pytest.fixture(scope="session")
def helm() -> Path:
    return build.helm_bin() / "helm"


@pytest.fixture(scope="session")
def promtool() -> Path:
    return build.prometheus_bin() / "promtool"


@dataclass
class Rendered:
    returncode: int
    stdout: str
    stderr: str

    @property
    def docs(self) -> list[dict[str, Any]]:
        assert self.returncode == 0, self.stderr
        return [d for d in yaml.safe_load_all(self.stdout) if d]

    def kinds(self) -> list[str]:
        return sorted(d["kind"] for d in self.docs)

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [
            d
            for d in self.docs
            if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
        ]
        assert len(found) == 1, (
            f"{len(found)} {kind} named {name}: {[d['kind'] for d in self.docs]}"
        )
        return found[0]


def run(cmd: list[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=120, check=False, **kwargs
    )


@pytest.fixture(scope="session")
def render(helm: Path) -> Callable[..., Rendered]:
    """`helm template` of the chart: render(*args, values={...}, chart=CHART)."""

    def _render(
        *args: str,
        values: dict[str, Any] | None = None,
        chart: Path = CHART,
        tmp: Path | None = None,
    ) -> Rendered:
        cmd: list[str | Path] = [
            helm,
            "template",
            "sf",
            chart,
            "--namespace",
            "staticfleet-system",
            "--kube-version",
            KUBE_VERSION,
            *args,
        ]
        if values is not None:
            assert tmp is not None, "values need a tmp folder"
            path = tmp / "values.yaml"
            path.write_text(yaml.safe_dump(values))
            cmd += ["--values", path]
        proc = run(cmd)
        return Rendered(proc.returncode, proc.stdout, proc.stderr)

    return _render
