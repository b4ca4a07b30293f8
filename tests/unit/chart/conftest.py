"""Fixtures of the chart tests: the real helm and promtool binaries, and a `helm template` runner.

The binaries come from the project's build cache (staticfleet_dev.build); a missing one is
built, never skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from staticfleet_dev import build

from .support import CHART, KUBE_VERSION, Rendered, run


@pytest.fixture(scope="session")
def helm() -> Path:
    return build.helm_bin() / "helm"


@pytest.fixture(scope="session")
def promtool() -> Path:
    return build.promtool_bin() / "promtool"


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
