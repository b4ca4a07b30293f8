"""Pure scheduling of the local node (there is no kube-scheduler): which pods it binds, and
why a pod cannot run on it (nodeSelector, required node affinity) in the scheduler's words."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from staticfleet_dev.localnode.ids import rfc3339

DEFAULT_SCHEDULER = "default-scheduler"


def wants_binding(pod: Mapping[str, Any]) -> bool:
    """Unbound, for the default scheduler, not being deleted, not finished."""
    spec = pod.get("spec") or {}
    return (not spec.get("nodeName")
            and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
            and not (pod.get("metadata") or {}).get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


def _requirement_ok(req: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key, op = req.get("key", ""), req.get("operator", "")
    wanted = [str(v) for v in req.get("values") or []]
    present = key in values
    if op == "In":
        return present and values[key] in wanted
    if op == "NotIn":
        return not present or values[key] not in wanted
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            have, want = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def scheduling_problem(pod: Mapping[str, Any], node_name: str,
                       labels: Mapping[str, str]) -> str | None:
    """Why the pod cannot run on this node (the kube-scheduler's wording), or None."""
    spec = pod.get("spec") or {}
    mismatch = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != str(value):
            return mismatch
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required:
        fields = {"metadata.name": node_name}
        terms = required.get("nodeSelectorTerms") or []
        if not any(
            (t.get("matchExpressions") or t.get("matchFields"))
            and all(_requirement_ok(r, labels) for r in t.get("matchExpressions") or [])
            and all(_requirement_ok(r, fields) for r in t.get("matchFields") or [])
            for t in terms
        ):
            return mismatch
    return None


def unschedulable_condition(problem: str, now: float) -> dict[str, Any]:
    return {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": problem, "lastTransitionTime": rfc3339(now)}


def needs_unschedulable_patch(pod: Mapping[str, Any], problem: str) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return not (cond.get("status") == "False" and cond.get("reason") == "Unschedulable"
                        and cond.get("message") == problem)
    return True
