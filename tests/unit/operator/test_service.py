"""The pure parts of the service's gather step."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet.service import overlay_own_writes

pytestmark = pytest.mark.unit


def pod(name: str, uid: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T12:00:30Z"
    return {"metadata": meta}


@pytest.mark.parametrize(("watched", "written", "expected"), [
    ([pod("a-0", "u0")], [], [("a-0", "u0", False)]),
    # created by this pass, not in the watch yet: counted, so the next pass does not create it
    ([pod("a-0", "u0")], [pod("a-1", "u1")], [("a-0", "u0", False), ("a-1", "u1", False)]),
    # deleted by this process, the watch still shows it live: it is being deleted
    ([pod("a-1", "u1")], [pod("a-1", "u1", deleting=True)], [("a-1", "u1", True)]),
    # the watch caught up (or is ahead): the watch wins
    ([pod("a-1", "u1", deleting=True)], [pod("a-1", "u1")], [("a-1", "u1", True)]),
    # deleted and already gone from the watch: not brought back
    ([], [pod("a-1", "u1", deleting=True)], []),
    # a created pod whose name the watch lists with another uid (an older pod): the watch wins
    ([pod("a-1", "old")], [pod("a-1", "new")], [("a-1", "old", False)]),
])
def test_own_writes_fill_in_what_the_watch_has_not_shown(
        watched: list[dict[str, Any]], written: list[dict[str, Any]],
        expected: list[tuple[str, str, bool]]) -> None:
    out = overlay_own_writes(watched, written)
    assert [(p["metadata"]["name"], p["metadata"]["uid"],
             bool(p["metadata"].get("deletionTimestamp"))) for p in out] == expected


def test_a_scale_write_that_did_not_take_is_not_recorded_as_a_change() -> None:
    from datetime import UTC, datetime

    from staticfleet.decisions.actions import Event, Plan
    from staticfleet.decisions.snapshot import Snapshot
    from staticfleet.service import _unscaled

    before = {"changes": ["2026-11-25T02:00:00Z"], "budgetLeft": 3}
    snap = Snapshot(body={"metadata": {"name": "g", "namespace": "n"},
                          "status": {"autoscaling": before}}, now=datetime.now(UTC))
    plan = Plan(status={"replicas": 1, "autoscaling": {"changes": ["x", "y"], "budgetLeft": 2}},
                events=(Event("Normal", "ScalingUp", "scaling 1 -> 4: ..."),
                        Event("Normal", "PlannedRebalance", "...")), scale_to=4)
    out = _unscaled(snap, plan)
    assert out.scale_to is None
    assert out.status == {"replicas": 1, "autoscaling": before}
    assert [e.reason for e in out.events] == ["PlannedRebalance"]
