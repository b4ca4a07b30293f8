"""Pure scheduling of the local node: which pods it binds, which it cannot run."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet_dev.localnode.ids import node_labels
from staticfleet_dev.localnode.scheduling import (
    NODE_CORDONED,
    NODE_MISMATCH,
    NODE_NOT_READY,
    NODE_TAINTED,
    fits_another_node,
    needs_unschedulable_patch,
    node_problem,
    scheduling_problem,
    untolerated_taint,
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


def test_wants_binding_for_another_scheduler() -> None:
    assert wants_binding({"spec": {"schedulerName": "other"}}, "other") is True
    assert wants_binding({"spec": {}}, "other") is False


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


TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}


@pytest.mark.parametrize(("tolerations", "tolerated"), [
    ([], False),
    ([{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}], True),
    ([{"key": "kwok.x-k8s.io/node", "operator": "Exists"}], True),
    ([{"key": "kwok.x-k8s.io/node", "value": "fake"}], True),
    ([{"key": "kwok.x-k8s.io/node", "operator": "Equal", "value": "real"}], False),
    ([{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoExecute"}], False),
    ([{"key": "other", "operator": "Exists"}], False),
    ([{"operator": "Exists"}], True),
])
def test_untolerated_taint(tolerations: list[dict[str, str]], tolerated: bool) -> None:
    pod = {"spec": {"tolerations": tolerations}}
    assert (untolerated_taint(pod, [TAINT]) is None) is tolerated


def test_prefer_no_schedule_taints_never_keep_a_pod_off() -> None:
    assert untolerated_taint({"spec": {}}, [{**TAINT, "effect": "PreferNoSchedule"}]) is None


def _node(name: str, *, ready: bool = True, taints: tuple[dict[str, str], ...] = (TAINT,),
          cordoned: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"type": "kwok"}},
            "spec": {"taints": list(taints), "unschedulable": cordoned},
            "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}


KWOK_POD = {"spec": {"nodeSelector": {"type": "kwok"},
                     "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}]}}


@pytest.mark.parametrize(("pod", "node", "problem"), [
    (KWOK_POD, _node("n"), None),
    (KWOK_POD, _node("n", ready=False), NODE_NOT_READY),
    (KWOK_POD, _node("n", cordoned=True), NODE_CORDONED),
    ({"spec": {"nodeSelector": {"type": "kwok"}}}, _node("n"),
     f"{NODE_TAINTED} {{kwok.x-k8s.io/node: fake}}"),
    ({"spec": {"tolerations": KWOK_POD["spec"]["tolerations"],
               "nodeSelector": {"type": "gpu"}}}, _node("n"), NODE_MISMATCH),
    ({"spec": {}}, _node("n", taints=()), None),
])
def test_node_problem(pod: dict[str, Any], node: dict[str, Any], problem: str | None) -> None:
    assert node_problem(pod, node) == problem


@pytest.mark.parametrize(("pod", "nodes", "elsewhere"), [
    (KWOK_POD, [_node("local-node", taints=()), _node("kwok-0")], "kwok-0"),
    (KWOK_POD, [_node("local-node", taints=()), _node("kwok-0", ready=False)], None),
    ({"spec": {"nodeSelector": {"disktype": "ssd"}}}, [_node("kwok-0")], None),
    # Only the local node itself would take it: not "another node".
    ({"spec": {}}, [_node("local-node", taints=())], None),
])
def test_fits_another_node(pod: dict[str, Any], nodes: list[dict[str, Any]],
                           elsewhere: str | None) -> None:
    assert fits_another_node(pod, "local-node", nodes) == elsewhere
