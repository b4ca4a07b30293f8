"""`decisions.drift`: whether a watched child still holds what the operator applied to it, as a
table over the children the builders make and the forms the API server gives them back."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from staticfleet.decisions import builders
from staticfleet.decisions.drift import GONE, drift, unheld
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from tests.unit.operator.support import TIMEOUTS, body

pytestmark = pytest.mark.unit

SPEC = ConsumerGroupSpec.from_body(body())
OWNER = [{"apiVersion": "staticfleet.io/v1alpha1", "kind": "ConsumerGroup", "name": "orders",
          "uid": "u-1", "controller": True, "blockOwnerDeletion": True}]


def adopted(child: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(child)
    out["metadata"]["ownerReferences"] = copy.deepcopy(OWNER)
    return out


def served(child: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """`child` as the API server returns it: its own metadata, and `spec` on top."""
    out = copy.deepcopy(child)
    out["metadata"].update({"uid": "c-1", "resourceVersion": "812", "creationTimestamp":
                            "2026-01-01T12:00:00Z", "managedFields": [{"manager": "staticfleet"}]})
    out.setdefault("spec", {}).update(spec)
    return out


CONFIG_MAP = adopted(builders.build_config_map(SPEC, TIMEOUTS))
SERVICE = adopted(builders.build_headless_service(SPEC))
PDB = adopted(builders.build_pdb(SPEC))
POLICY_NO_SOURCES = adopted(builders.build_member_network_policy(SPEC, []))
POLICY = adopted(builders.build_member_network_policy(SPEC, [
    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
     "podSelector": {}}]))

SERVICE_SERVED = served(
    SERVICE, clusterIPs=["None"], internalTrafficPolicy="Cluster", ipFamilies=["IPv4"],
    ipFamilyPolicy="SingleStack", sessionAffinity="None", type="ClusterIP")
SERVICE_SERVED["status"] = {"loadBalancer": {}}
PDB_SERVED = served(PDB)
PDB_SERVED["status"] = {"currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1,
                        "expectedPods": 3, "observedGeneration": 1}
POLICY_NO_SOURCES_SERVED = served(POLICY_NO_SOURCES)
del POLICY_NO_SOURCES_SERVED["spec"]["ingress"]  # Go leaves the empty list out


def edited(obj: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    change(out)
    return out


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        node: Any = obj
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return change


def _drop(path: list[Any]) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        node: Any = obj
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return change


HELD = {
    "the operator's own write, as served": (SERVICE, SERVICE_SERVED),
    "a PDB with its status": (PDB, PDB_SERVED),
    "a ConfigMap as sent": (CONFIG_MAP, served(CONFIG_MAP)),
    "an empty list applied, left out by the server": (POLICY_NO_SOURCES,
                                                      POLICY_NO_SOURCES_SERVED),
    "an empty selector applied and kept": (POLICY, served(POLICY)),
    "a label someone added": (SERVICE, edited(SERVICE_SERVED, _set(
        ["metadata", "labels", "team"], "shop"))),
    "an annotation someone added": (CONFIG_MAP, edited(served(CONFIG_MAP), _set(
        ["metadata", "annotations"], {"note": "hi"}))),
    "a field the operator does not set, changed": (SERVICE, edited(SERVICE_SERVED, _set(
        ["spec", "sessionAffinity"], "ClientIP"))),
}

UNHELD = {
    "config.json edited": (CONFIG_MAP, edited(served(CONFIG_MAP), _set(
        ["data", "config.json"], "{}")), "data.config.json"),
    "a key the operator sets, removed": (CONFIG_MAP, edited(served(CONFIG_MAP), _drop(
        ["data", "config.json"])), "data.config.json"),
    "a port changed": (SERVICE, edited(SERVICE_SERVED, _set(
        ["spec", "ports", 0, "port"], 9090)), "spec.ports[0].port"),
    "a port added": (SERVICE, edited(SERVICE_SERVED, lambda s: s["spec"]["ports"].append(
        {"name": "debug", "port": 5005, "protocol": "TCP"})), "spec.ports"),
    "publishNotReadyAddresses turned off": (SERVICE, edited(SERVICE_SERVED, _set(
        ["spec", "publishNotReadyAddresses"], False)), "spec.publishNotReadyAddresses"),
    "maxUnavailable as a string": (PDB, edited(PDB_SERVED, _set(
        ["spec", "maxUnavailable"], str(PDB["spec"]["maxUnavailable"]))),
        "spec.maxUnavailable"),
    "a selector label changed": (PDB, edited(PDB_SERVED, _set(
        ["spec", "selector", "matchLabels", "staticfleet.io/group"], "other")),
        "spec.selector.matchLabels.staticfleet.io/group"),
    "the owner reference removed": (SERVICE, edited(SERVICE_SERVED, _drop(
        ["metadata", "ownerReferences"])), "metadata.ownerReferences"),
    "a rule added to a policy that admits nothing": (POLICY_NO_SOURCES, edited(
        POLICY_NO_SOURCES_SERVED, _set(["spec", "ingress"], [{}])), "spec.ingress"),
    "a source removed": (POLICY, edited(served(POLICY), _set(
        ["spec", "ingress", 0, "from"], [])), "spec.ingress[0].from"),
}


@pytest.mark.parametrize(("applied", "live"), HELD.values(), ids=HELD.keys())
def test_held(applied: dict[str, Any], live: dict[str, Any]) -> None:
    assert drift(applied, live) is None


@pytest.mark.parametrize(("applied", "live", "where"), UNHELD.values(), ids=UNHELD.keys())
def test_unheld_names_the_field(applied: dict[str, Any], live: dict[str, Any],
                                where: str) -> None:
    assert unheld(applied, live) == where
    assert drift(applied, live) == f"{where} changed"


def test_deleted() -> None:
    assert drift(SERVICE, None) == GONE


@pytest.mark.parametrize(("applied", "live", "where"), [
    ({"a": 0}, {}, None),
    ({"a": ""}, {"a": None}, None),
    ({"a": False}, {}, None),
    ({"a": 1}, {"a": True}, "a"),
    ({"a": True}, {"a": 1}, "a"),
    ({"a": [1]}, {"a": "1"}, "a"),
    ({"a": "x"}, {"a": ["x"]}, "a"),
    ({"a": {"b": 1}}, {"a": 1}, "a"),
    ([1, 2], [1, 2], None),
    ({}, {"anything": 1}, None),
])
def test_values(applied: Any, live: Any, where: str | None) -> None:
    assert unheld(applied, live) == where
