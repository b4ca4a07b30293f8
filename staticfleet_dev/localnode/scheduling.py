"""Pure scheduling of the local node (there is no kube-scheduler): which pods it binds, why a
pod cannot run on it (nodeSelector, required node affinity) in the scheduler's words, and
whether another node of the cluster could take it (readiness, taints, selector), so that the
local node leaves such a pod to whatever places pods there (`staticfleet_dev.kwok.binder`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from staticfleet_dev.localnode.ids import rfc3339

DEFAULT_SCHEDULER = "default-scheduler"


def wants_binding(pod: Mapping[str, Any], scheduler: str = DEFAULT_SCHEDULER) -> bool:
    """Unbound, for `scheduler`, not being deleted, not finished."""
    spec = pod.get("spec") or {}
    return (not spec.get("nodeName")
            and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == scheduler
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


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """As core/v1 documents a toleration: an empty effect or key matches every one; operator
    Exists matches any value, Equal (the default) only the same value."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    if (toleration.get("operator") or "Equal") == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(pod: Mapping[str, Any],
                      taints: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The first NoSchedule or NoExecute taint none of the pod's tolerations tolerates."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return taint
    return None


NODE_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
NODE_TAINTED = "node(s) had untolerated taint"
NODE_NOT_READY = "node(s) not ready"
NODE_CORDONED = "node(s) were unschedulable"


def _ready(node: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def node_problem(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """Why `pod` cannot be placed on the Node object `node` (not Ready, cordoned, a taint it
    does not tolerate, its node selector or required affinity), or None. Capacity is the
    placer's own business (`staticfleet_dev.kwok.binder`)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    if scheduling_problem(pod, str(meta.get("name", "")), meta.get("labels") or {}):
        return NODE_MISMATCH
    taint = untolerated_taint(pod, spec.get("taints") or [])
    if taint is not None:
        return f"{NODE_TAINTED} {{{taint.get('key')}: {taint.get('value', '')}}}"
    if not _ready(node):
        return NODE_NOT_READY
    if spec.get("unschedulable"):
        return NODE_CORDONED
    return None


def fits_another_node(pod: Mapping[str, Any], own_node: str,
                      nodes: Sequence[Mapping[str, Any]]) -> str | None:
    """The name of a node other than `own_node` that could take `pod`, or None."""
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name", ""))
        if name != own_node and node_problem(pod, node) is None:
            return name
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
