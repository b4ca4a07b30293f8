"""What the `plan.decide` tables (test_decide_*.py, here and in the rooms' folders below)
share besides the snapshots: a pod being deleted, the Events' reasons, a spec with a new image,
a fleet whose rollout has begun."""

from __future__ import annotations

import copy
from typing import Any

from staticfleet.decisions.actions import Plan
from staticfleet.decisions.plan import decide, without_nulls
from tests.unit.operator.snapshots import (
    CG,
    builders_time,
    settled,
    snapshot,
)
from tests.unit.operator.support import with_path


def deleting(pod: dict[str, Any], seconds_ago: float = 0) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["metadata"]["deletionTimestamp"] = builders_time(30 - seconds_ago)
    out["metadata"]["deletionGracePeriodSeconds"] = 30
    return out


def reasons(plan: Plan) -> list[str]:
    return [e.reason for e in plan.events]


NEW_IMAGE = with_path(CG, "spec.template.image", "staticfleet/member:0.2.0")


def rolling_fleet() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Old fleet; the first pass after the image change deleted member 2."""
    pods, status = settled(CG)
    started = decide(snapshot(NEW_IMAGE, pods, previous=status))
    return pods, without_nulls(dict(started.status))
