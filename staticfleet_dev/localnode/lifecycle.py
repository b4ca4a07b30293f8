"""Pure container lifecycle decisions of the local node: whether a container that exited is
restarted (restartPolicy), after what back-off, the exit code a runtime reports, and how long a
container gets to stop (grace period)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

BACKOFF_BASE = 1.0
BACKOFF_CAP = 30.0
BACKOFF_RESET_AFTER = 60.0
DEFAULT_GRACE = 30.0


def restart_delay(streak: int) -> float:
    """Back-off before the next restart after `streak` restarts in a row: 1, 2, 4 ... 30 s."""
    return float(min(BACKOFF_CAP, BACKOFF_BASE * 2 ** max(0, streak)))


def should_restart(restart_policy: str | None, exit_code: int) -> bool:
    policy = restart_policy or "Always"
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def exit_code_of(returncode: int) -> int:
    """A Popen return code as a container runtime reports it (killed by signal N -> 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


def grace_seconds(pod: Mapping[str, Any]) -> float:
    meta = pod.get("metadata") or {}
    for value in (meta.get("deletionGracePeriodSeconds"),
                  (pod.get("spec") or {}).get("terminationGracePeriodSeconds")):
        if value is not None:
            return float(value)
    return DEFAULT_GRACE
