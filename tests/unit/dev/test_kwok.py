"""kwok's fake Nodes as plain data, and the binder's choice of a Node, as tables."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from staticfleet_dev.kwok import manifests
from staticfleet_dev.kwok.binder import NODE_FULL, choose, counts_as_bound, room
from staticfleet_dev.localnode.ids import FIRST_POD_IP, LAST_POD_IP
from staticfleet_dev.localnode.scheduling import (
    NODE_CORDONED,
    NODE_MISMATCH,
    NODE_NOT_READY,
    NODE_TAINTED,
    node_problem,
)

pytestmark = pytest.mark.unit


def _ready(node: dict[str, Any], ready: bool = True) -> dict[str, Any]:
    node["status"]["conditions"] = [{"type": "Ready", "status": str(ready)}]
    return node


def fake_node(index: int, *, ready: bool = True, pods: int = 2,
              cordoned: bool = False) -> dict[str, Any]:
    node = _ready(manifests.node(f"kwok-node-{index}", index, pods), ready)
    node["spec"]["unschedulable"] = cordoned
    return node


KWOK_POD = {"metadata": {"uid": "u"}, "spec": manifests.placement()}


def test_a_pod_with_the_placement_fits_a_fake_node_and_a_plain_pod_does_not() -> None:
    """The placement, the Nodes' labels and their taint agree (one mistake in any of the three
    and no pod would ever land)."""
    node = fake_node(0)
    assert node_problem(KWOK_POD, node) is None
    assert str(node_problem({"spec": {}}, node)).startswith(NODE_TAINTED)
    only_selector = {"spec": {"nodeSelector": manifests.node_selector()}}
    assert str(node_problem(only_selector, node)).startswith(NODE_TAINTED)


def test_kwok_manages_exactly_the_annotated_nodes() -> None:
    selector = manifests.configuration()["options"]["manageNodesWithAnnotationSelector"]
    key, value = selector.split("=")
    assert manifests.node("n", 0)["metadata"]["annotations"] == {key: value}


def test_pod_cidrs_are_disjoint_and_apart_from_the_local_nodes_pod_ips() -> None:
    cidrs = [ipaddress.IPv4Network(manifests.pod_cidr(i)) for i in range(300)]
    assert all(a.prefixlen == 24 for a in cidrs)
    assert len({c.network_address for c in cidrs}) == 300
    assert all(c.subnet_of(manifests.POD_NETWORK) for c in cidrs)
    local = (ipaddress.IPv4Address(FIRST_POD_IP), ipaddress.IPv4Address(LAST_POD_IP))
    assert not any(local[0] <= c.network_address <= local[1]
                   or local[0] <= c.broadcast_address <= local[1] for c in cidrs)


def test_pod_cidr_refuses_an_index_beyond_the_network() -> None:
    with pytest.raises(ValueError, match="outside"):
        manifests.pod_cidr(2 ** 14)


def test_config_documents_are_the_configuration_then_v0_8_stages() -> None:
    docs = manifests.config_documents(pod_parallelism=8)
    assert docs[0]["kind"] == "KwokConfiguration"
    assert docs[0]["options"]["podPlayStageParallelism"] == 8
    stages = docs[1:]
    assert {s["kind"] for s in stages} == {"Stage"}
    assert sorted(s["spec"]["resourceRef"]["kind"] for s in stages) == ["Node", "Pod", "Pod"]
    for s in stages:  # steps and CEL or jq selectors, not the deprecated next and key
        assert "next" not in s["spec"]
        assert all(set(e) in ({"cel"}, {"jq"}) for e in s["spec"]["selector"]["matchExpressions"])
        assert s["spec"]["steps"]


def test_the_pod_ready_stage_gives_a_pod_ip_and_readiness() -> None:
    stage = next(s for s in manifests.stages() if s["metadata"]["name"].endswith("pod-ready"))
    template = stage["spec"]["steps"][0]["patch"]["template"]
    for needed in ("PodIPsWith", "podIPs:", "phase: Running", "ContainersReady Ready",
                   "ready: true"):
        assert needed in template


@pytest.mark.parametrize(("nodes", "bound", "cursor", "chosen", "after"), [
    # Round robin from the cursor, wrapping.
    ([fake_node(0), fake_node(1), fake_node(2)], {}, 0, "kwok-node-0", 1),
    ([fake_node(0), fake_node(1), fake_node(2)], {}, 2, "kwok-node-2", 0),
    # Full, not Ready and cordoned Nodes are passed over.
    ([fake_node(0), fake_node(1)], {"kwok-node-0": 2}, 0, "kwok-node-1", 0),
    ([fake_node(0, ready=False), fake_node(1)], {}, 0, "kwok-node-1", 0),
    ([fake_node(0, cordoned=True), fake_node(1)], {}, 0, "kwok-node-1", 0),
    # Nowhere: the cursor stays.
    ([fake_node(0), fake_node(1)], {"kwok-node-0": 2, "kwok-node-1": 2}, 1, None, 1),
    ([], {}, 0, None, 0),
])
def test_choose(nodes: list[dict[str, Any]], bound: dict[str, int], cursor: int,
                chosen: str | None, after: int) -> None:
    choice = choose(KWOK_POD, nodes, bound, cursor)
    assert (choice.node, choice.cursor) == (chosen, after)


def test_choose_says_why_each_node_was_passed_over() -> None:
    nodes = [fake_node(0, ready=False), fake_node(1, cordoned=True), fake_node(2)]
    choice = choose(KWOK_POD, nodes, {"kwok-node-2": 2}, 0)
    assert choice.node is None
    assert choice.passed == {"kwok-node-0": NODE_NOT_READY, "kwok-node-1": NODE_CORDONED,
                             "kwok-node-2": NODE_FULL}
    elsewhere = {"metadata": {"uid": "v"}, "spec": {**manifests.placement(),
                                                    "nodeSelector": {"type": "gpu"}}}
    assert set(choose(elsewhere, nodes, {}, 0).passed.values()) == {NODE_MISMATCH}


@pytest.mark.parametrize(("allocatable", "pods"), [
    ({"pods": "7"}, 7), ({}, manifests.DEFAULT_PODS_PER_NODE), ({"pods": "x"}, 110)])
def test_room(allocatable: dict[str, str], pods: int) -> None:
    assert room({"status": {"allocatable": allocatable}}) == pods


@pytest.mark.parametrize(("phase", "counts"), [
    (None, True), ("Pending", True), ("Running", True), ("Succeeded", False), ("Failed", False)])
def test_counts_as_bound(phase: str | None, counts: bool) -> None:
    assert counts_as_bound({"status": {"phase": phase}} if phase else {}) is counts
