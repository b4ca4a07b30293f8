"""Pure container lifecycle decisions of the local node: back-off, restarts, exit codes, grace."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet_dev.localnode.lifecycle import (
    exit_code_of,
    grace_seconds,
    restart_delay,
    should_restart,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("streak", "delay"), [(0, 1), (1, 2), (2, 4), (4, 16), (5, 30), (50, 30)])
def test_restart_delay(streak: int, delay: float) -> None:
    assert restart_delay(streak) == delay


@pytest.mark.parametrize(("policy", "code", "restart"), [
    ("Always", 0, True), ("Always", 1, True), (None, 0, True),
    ("OnFailure", 0, False), ("OnFailure", 3, True),
    ("Never", 0, False), ("Never", 1, False),
])
def test_should_restart(policy: str | None, code: int, restart: bool) -> None:
    assert should_restart(policy, code) is restart


@pytest.mark.parametrize(("rc", "code"), [(0, 0), (3, 3), (-15, 143), (-9, 137)])
def test_exit_code_of(rc: int, code: int) -> None:
    assert exit_code_of(rc) == code


@pytest.mark.parametrize(("pod", "grace"), [
    ({}, 30.0),
    ({"spec": {"terminationGracePeriodSeconds": 5}}, 5.0),
    ({"metadata": {"deletionGracePeriodSeconds": 2}, "spec": {"terminationGracePeriodSeconds": 5}},
     2.0),
    ({"metadata": {"deletionGracePeriodSeconds": 0}}, 0.0),
])
def test_grace_seconds(pod: dict[str, Any], grace: float) -> None:
    assert grace_seconds(pod) == grace
