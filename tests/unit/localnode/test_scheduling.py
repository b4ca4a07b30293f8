"""Pure scheduling of the local node: which pods it binds, which it cannot run."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet_dev.localnode.ids import node_labels
from staticfleet_dev.localnode.scheduling import (
    needs_unschedulable_patch,
    scheduling_problem,
    wants_binding,
)

pytestmark = pytest.mark.unit

LABELS = node_labels("local-node")


@pytest.mark.parametrize(("pod", "wanted"), [
    ({"spec": {}}, True),
    ({"spec": {"schedulerName": "default-scheduler"}}, True),
    ({"spec": {"schedulerName": "other"}}, False),
    ({"spec": {"nodeName": "x"}}, False),
    ({"spec": {}, "metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}}, False),
    ({"spec": {}, "status": {"phase": "Failed"}}, False),
])
def test_wants_binding(pod: dict[str, Any], wanted: bool) -> None:
    assert wants_binding(pod) is wanted


def _affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}


def _expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


@pytest.mark.parametrize(("spec", "fits"), [
    ({}, True),
    ({"nodeSelector": {"kubernetes.io/os": "linux"}}, True),
    ({"nodeSelector": {"kubernetes.io/hostname": "local-node", "kubernetes.io/os": "linux"}}, True),
    ({"nodeSelector": {"disktype": "ssd"}}, False),
    ({"nodeSelector": {"kubernetes.io/os": "windows"}}, False),
    ({"affinity": _affinity({"matchExpressions": [_expr("kubernetes.io/os", "In", "linux")]})},
     True),
    ({"affinity": _affinity({"matchExpressions": [_expr("kubernetes.io/os", "NotIn", "linux")]})},
     False),
    ({"affinity": _affinity({"matchExpressions": [_expr("gpu", "Exists")]},
                            {"matchExpressions": [_expr("gpu", "DoesNotExist")]})}, True),
    ({"affinity": _affinity({"matchExpressions": [_expr("gpu", "Exists")]})}, False),
    ({"affinity": _affinity({"matchFields": [_expr("metadata.name", "In", "local-node")]})}, True),
    ({"affinity": _affinity({"matchFields": [_expr("metadata.name", "In", "other")]})}, False),
    ({"affinity": _affinity({})}, False),
    ({"affinity": {"podAntiAffinity": {}}}, True),
])
def test_scheduling_problem(spec: dict[str, Any], fits: bool) -> None:
    problem = scheduling_problem({"spec": spec}, "local-node", LABELS)
    assert (problem is None) is fits
    if not fits:
        assert "didn't match Pod's node affinity/selector" in str(problem)


@pytest.mark.parametrize(("conditions", "needed"), [
    ([], True),
    ([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}],
     False),
    ([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "old"}],
     True),
])
def test_needs_unschedulable_patch(conditions: list[dict[str, str]], needed: bool) -> None:
    assert needs_unschedulable_patch({"status": {"conditions": conditions}}, "m") is needed
