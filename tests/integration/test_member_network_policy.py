"""The members' NetworkPolicy and token Secret against the real API server. The session's
operator is started as the chart starts it, with the sources to admit to member ports
(`tests/conftest.py` `MEMBER_INGRESS_FROM`), and watches every namespace: it makes one policy
beside each ConsumerGroup, in the group's own namespace (no namespace was listed anywhere), owned
by the group, selecting exactly that group's member pods (not those of another group of the same
namespace), opening only their port `http`, to those sources only; the garbage collector removes
it with its group. The token Secret beside it was created, never patched.

The local node runs no CNI plugin, so nothing enforces the policy: this shows what can be shown,
that the API server takes the object and that it says what it should. The chart's own RBAC
(list, watch, create and patch on NetworkPolicies, no patch on Secrets) is exercised by
test_chart_install.py's real install. Members are placeholders: the policy is about the pods.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.groups import PLACEHOLDER_MEMBER
from staticfleet_dev.testkit.kube import get_json, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from tests.support import MEMBER_INGRESS_FROM, unique

pytestmark = pytest.mark.integration


def policies(kubeconfig: Path, namespace: str) -> dict[str, dict[str, Any]]:
    items = get_json(kubeconfig, "-n", namespace, "networkpolicies")["items"]
    return {p["metadata"]["name"]: p for p in items}


def selected(kubeconfig: Path, namespace: str, selector: dict[str, Any]) -> list[str]:
    """The pods a NetworkPolicy's podSelector (matchLabels only) selects, by name."""
    assert set(selector) == {"matchLabels"}, selector
    labels = ",".join(f"{k}={v}" for k, v in sorted(selector["matchLabels"].items()))
    items = get_json(kubeconfig, "-n", namespace, "pods", "-l", labels)["items"]
    return sorted(p["metadata"]["name"] for p in items)


def test_the_operator_makes_the_member_network_policy_beside_each_group(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        make_topic: Callable[..., str]) -> None:
    topic = make_topic("np", 2)
    name, other = unique("np"), unique("np")
    for group, replicas in ((name, 2), (other, 1)):
        groups.apply(kubeconfig, namespace, groups.consumer_group(
            group, kafka.bootstrap, topic, replicas=replicas, command=PLACEHOLDER_MEMBER))
    wait_for("both policies and every member pod", lambda: {
        f"{name}-members", f"{other}-members"} <= set(policies(kubeconfig, namespace))
        and len(groups.pods(kubeconfig, namespace, name)) == 2
        and len(groups.pods(kubeconfig, namespace, other)) == 1, timeout=90,
        describe=lambda: (sorted(policies(kubeconfig, namespace)), operator.log_tail(20)))

    policy = policies(kubeconfig, namespace)[f"{name}-members"]
    owner = groups.get(kubeconfig, namespace, name)
    assert [(r["kind"], r["name"], r["uid"], r["controller"])
            for r in policy["metadata"]["ownerReferences"]] == [
        ("ConsumerGroup", name, owner["metadata"]["uid"], True)]
    spec = policy["spec"]
    # Ingress only (members still reach Kafka and DNS); one rule: the member port, from the
    # operator's sources only.
    assert spec["policyTypes"] == ["Ingress"]
    assert spec["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}],
                                "from": MEMBER_INGRESS_FROM}]
    # It selects exactly this group's member pods, not the other group's beside them.
    members = groups.pods(kubeconfig, namespace, name)
    assert selected(kubeconfig, namespace, spec["podSelector"]) == sorted(
        p["metadata"]["name"] for p in members)
    other_spec = policies(kubeconfig, namespace)[f"{other}-members"]["spec"]
    assert selected(kubeconfig, namespace, other_spec["podSelector"]) == [f"{other}-0"]
    # The named port is the members' one container port.
    for member in members:
        assert member["spec"]["containers"][0]["ports"] == [
            {"name": "http", "containerPort": 8080, "protocol": "TCP"}]

    # The token Secret beside it: created by the operator, never server-side applied (a patch).
    secret = get_json(kubeconfig, "-n", namespace, "secret", f"{name}-member-token",
                      "--show-managed-fields")
    assert secret["data"]["token"]
    assert [(f["manager"], f["operation"]) for f in secret["metadata"]["managedFields"]] == [
        ("staticfleet", "Update")]

    # Deleting the group: the garbage collector takes its policy, and only its.
    kubectl(kubeconfig, "-n", namespace, "delete", "consumergroup", name, "--wait=false")
    wait_for("the deleted group's policy garbage-collected", lambda: f"{name}-members" not in (
        policies(kubeconfig, namespace)), timeout=90)
    assert f"{other}-members" in policies(kubeconfig, namespace)
