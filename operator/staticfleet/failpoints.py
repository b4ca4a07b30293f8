"""Failpoints: named places in a pass where a test makes the operator die as a SIGKILL would.

`STATICFLEET_FAILPOINTS` (comma-separated names) arms them; a process started without it (the
chart never sets it) never stops at one. The end-to-end tests kill the operator at each point of
a warm handoff's switchover (`SWITCHOVER_POINTS`), and right after a cold restart's pod
deletion (`AFTER_POD_DELETE`), and check that its successor finishes the
rollout from what the status journaled, with no rebalance and nothing lost
(tests/e2e/test_operator_faults.py). Between a record and its act (`RECORD_POINTS`, issue 46):
after the status that records a widening and before the group configs are set on the broker,
and after the status that records a scale-down's planned leave and before the members are
called; their successors finish from the record (tests/integration/test_widening.py,
tests/e2e/test_planned.py). The idea is etcd's gofail, without code generation.
"""

from __future__ import annotations

import logging
import os
import signal

ENV = "STATICFLEET_FAILPOINTS"
BEFORE_DRAIN = "switchover-before-drain"
AFTER_DRAIN = "switchover-after-drain"
AFTER_ACTIVATION = "switchover-after-activation"
AFTER_DELETE = "switchover-after-delete"
SWITCHOVER_POINTS = (BEFORE_DRAIN, AFTER_DRAIN, AFTER_ACTIVATION, AFTER_DELETE)
AFTER_POD_DELETE = "after-pod-delete"
"""After any pod DELETE of a pass's plan (a cold restart's, a scale-down's), before the
status that follows it: what the status journaled ahead must be enough to resume from."""
BEFORE_GROUP_CONFIGS = "before-group-configs"
"""After the status that records the pass's group configs (a widening raised or set back),
before the broker is told: the record is there, the act is not."""
BEFORE_MEMBER_CALLS = "before-member-calls"
"""After the status that records the pass's member calls (a scale-down's planned leave),
before the first call."""
RECORD_POINTS = (BEFORE_GROUP_CONFIGS, BEFORE_MEMBER_CALLS)

log = logging.getLogger("staticfleet")


def armed() -> frozenset[str]:
    return frozenset(n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip())


def hit(name: str) -> None:
    """Die here, at once and without cleanup (SIGKILL), when `name` is armed."""
    if name in armed():
        log.warning("failpoint %s: the operator kills itself (%s)", name, ENV)
        for handler in logging.getLogger().handlers + log.handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)
