"""The member watch's bookkeeping, fed pods and /status answers by hand: restarts, owners and
fetch stalls as the broker-roll test and benchmark read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from staticfleet.decisions.names import GROUP_LABEL
from staticfleet_dev.testkit.memberwatch import MemberWatch

pytestmark = pytest.mark.unit


def _pod(uid: str, name: str, restarts: int = 0, group: str = "g") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": name, "labels": {GROUP_LABEL: group}},
            "status": {"podIP": "10.0.0.1", "containerStatuses": [{"restartCount": restarts}]}}


def _status(instance: str, fetched: float | None, *, start: float = 100.0,
            parts: tuple[int, ...] = (), standby: str | None = None,
            rebalances: int = 0) -> dict[str, Any]:
    return {"instanceId": instance, "lastFetchAt": fetched, "processStart": start,
            "assignment": [["in", p] for p in parts], "standby": standby,
            "rebalances": rebalances}


def test_a_restart_is_a_rising_restart_count_or_a_second_process_start() -> None:
    watch = MemberWatch(Path("kubeconfig"), "ns")
    watch.note_pods([_pod("a", "g-0"), _pod("b", "g-1"), _pod("c", "g-2", restarts=2)])
    for uid in "abc":
        watch.note_status(uid, _status(f"g-{uid}", 1.0))
    watch.note_pods([_pod("a", "g-0", restarts=1), _pod("b", "g-1"),
                     _pod("c", "g-2", restarts=2)])
    watch.note_status("b", _status("g-b", 2.0, start=150.0))
    # c restarted before the watch began: not counted.
    assert watch.restarted() == ["g-0", "g-1"]
    assert watch.restarted("other") == []


def test_a_partition_changes_owner_only_between_instance_ids() -> None:
    watch = MemberWatch(Path("kubeconfig"), "ns")
    watch.note_pods([_pod("old", "g-0"), _pod("new", "g-0-x"), _pod("two", "g-1")])
    watch.note_status("old", _status("g-0", 1.0, parts=(0, 1)))
    # The warm replacement, ready but not active, lists nothing; active, it holds the same
    # partitions under the same instance id.
    watch.note_status("new", _status("g-0", None, standby="ready", parts=(0,)))
    assert watch.standby_ready("g") and not watch.standby_ready("other")
    watch.note_status("new", _status("g-0", 2.0, parts=(0, 1)))
    assert watch.owner_changes("g") == {}
    watch.note_status("two", _status("g-1", 3.0, parts=(1,), rebalances=1))
    assert watch.owner_changes("g") == {"in-1": ["g-0", "g-1"]}


def test_rebalances_count_from_the_watch_start_or_from_a_new_pod_start() -> None:
    watch = MemberWatch(Path("kubeconfig"), "ns")
    watch.begin([_pod("a", "g-0")])
    watch.note_status("a", _status("g-0", 1.0, rebalances=2))  # the group's forming
    watch.note_pods([_pod("a", "g-0"), _pod("b", "g-1")])
    watch.note_status("b", _status("g-1", 2.0, rebalances=1))
    assert watch.rebalances("g") == {"g-0": 0, "g-1": 1}
    watch.note_status("a", _status("g-0", 3.0, rebalances=3))
    assert watch.rebalances("g") == {"g-0": 1, "g-1": 1}


def test_a_fetch_stall_counts_the_members_fetching_at_the_moment() -> None:
    watch = MemberWatch(Path("kubeconfig"), "ns")
    watch.note_pods([_pod("a", "g-0"), _pod("b", "g-1"), _pod("c", "g-2")])
    for fetched in (100.0, 104.0, 109.5):
        watch.note_status("a", _status("g-0", fetched))
    for fetched in (104.9, 106.0):
        watch.note_status("b", _status("g-1", fetched))
    watch.note_status("c", _status("g-2", 80.0))  # not fetching at 105: left out
    assert watch.fetch_stall("g", 105.0, 130.0) == pytest.approx((4.5, 0))
    assert watch.fetch_stalls("g", 105.0, 108.0) == {"g-0": None, "g-1": pytest.approx(1.0)}
    # By 108, member 0 had not fetched again: counted as 3 s, and named as not fetching.
    assert watch.fetch_stall("g", 105.0, 108.0) == pytest.approx((3.0, 1))
    assert watch.fetch_stall("other", 105.0, 130.0) == (0.0, 0)
