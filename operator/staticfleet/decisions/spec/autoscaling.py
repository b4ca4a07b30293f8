"""`spec.autoscaling`, typed and parsed (pure); the autoscaler that follows it is the room
`decisions.autoscaler`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from staticfleet.decisions.spec.fields import SpecError, as_obj, int_or


@dataclass(frozen=True)
class AutoscalingSpec:
    """`spec.autoscaling`: the bounds, the target and the budget."""

    min_replicas: int = 1
    max_replicas: int = 1
    target_lag_seconds: float = 30.0
    max_membership_changes_per_hour: int = 4
    scale_down_window_s: float = 600.0
    scale_up_check_s: float = 300.0


def parse_autoscaling(body: Any) -> AutoscalingSpec | None:
    """`spec.autoscaling` (None: absent, the autoscaler is off). Raises `SpecError`."""
    if body is None:
        return None
    path = "spec.autoscaling"
    obj = as_obj(body, path)
    minimum = int_or(obj, "minReplicas", path, default=1, minimum=1)
    if obj.get("maxReplicas") is None:
        raise SpecError(f"{path}.maxReplicas", "is required: the most members the autoscaler "
                        "may run (at most the partition count is used)")
    maximum = int_or(obj, "maxReplicas", path, default=1, minimum=1)
    if maximum < minimum:
        raise SpecError(f"{path}.maxReplicas",
                        f"must be at least minReplicas ({minimum}), got {maximum}")
    return AutoscalingSpec(
        min_replicas=minimum, max_replicas=maximum,
        target_lag_seconds=float(int_or(obj, "targetLagSeconds", path, default=30, minimum=1)),
        max_membership_changes_per_hour=int_or(obj, "maxMembershipChangesPerHour", path,
                                               default=4, minimum=1),
        scale_down_window_s=float(int_or(obj, "scaleDownWindowSeconds", path, default=600,
                                         minimum=0)),
        scale_up_check_s=float(int_or(obj, "scaleUpCheckSeconds", path, default=300,
                                      minimum=10)))
