"""Helpers of the chart and image tests: the repository's paths, a command's run, a tool of
the test environment, a rendered chart (`render` itself is a fixture, in conftest.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from staticfleet_dev import versions

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "staticfleet"
# The API server version the project runs against; helm built from source does not know it.
KUBE_VERSION = versions.KUBERNETES_VERSION.lstrip("v")


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


def tool(name: str, package: str) -> str:
    """A linter installed in the test environment (its venv's bin, or PATH)."""
    candidate = Path(sys.executable).parent / name
    found = str(candidate) if candidate.exists() else shutil.which(name)
    assert found, f"{name} is missing: pip install {package}"
    return found
