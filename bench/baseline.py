"""The operator of an earlier commit, for benchmarks that print today's figures beside it."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.operator import OperatorProcess

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """A detached git worktree of `rev`, removed afterwards."""
    tree = Path(tempfile.mkdtemp(prefix="staticfleet-baseline-")) / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev],
                   check=True, capture_output=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                       check=False, capture_output=True)


@dataclass
class Variant:
    """An operator to measure: this checkout, or a worktree of an earlier commit."""

    label: str
    source: Path | None = None

    @property
    def slug(self) -> str:
        return "base" if self.source is not None else "new"

    def process(self, kubeconfig: Path, log: Path) -> OperatorProcess:
        env = None
        if self.source is not None:  # the earlier commit's package wins over the venv's
            env = {"PYTHONPATH": f"{self.source / 'operator'}:{self.source}"}
        return OperatorProcess(kubeconfig=kubeconfig, log=log, extra_env=env)
