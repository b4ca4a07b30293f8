"""The member simulator against the real API server: it learns the member pods and their group's
token from the pods and Secret the operator's own builders make, as a bench with kwok has them
(bound to a Node no kubelet serves, status written by someone else), and answers the operator's
member client routed through it (`memberhttp.route_through`): a token rotated in the Secret
reaches it, and a pod whose deletion began answers no more."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from member_contract import LEAVE, REJOIN
from staticfleet.decisions.builders import (
    build_member_pod,
    build_member_token_secret,
    member_spec_view,
)
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from staticfleet.observe import memberhttp
from staticfleet_dev.membersim.members import Pace
from staticfleet_dev.membersim.server import Simulator
from staticfleet_dev.membersim.watch import watch_into
from staticfleet_dev.testkit.kube import kubectl
from staticfleet_dev.testkit.poll import wait_for
from tests.support import unique

pytestmark = pytest.mark.integration

PORT = memberhttp.MEMBER_PORT
IP = "10.254.0.10"
TIMEOUTS = EffectiveTimeouts(session_timeout_ms=45000, heartbeat_interval_ms=3000,
                             max_poll_interval_ms=300000, sources={})


@pytest.fixture
def sim(kubeconfig: Path) -> Iterator[Simulator]:
    """A simulator watching the API server, the operator's member client routed through it."""
    simulator, stopping = Simulator(Pace(consumer_made_s=0.0, join_s=0.1)), threading.Event()
    before = memberhttp.route_through(("127.0.0.1", simulator.start()))
    watch_into(simulator, kubeconfig, stopping)
    try:
        yield simulator
    finally:
        stopping.set()
        memberhttp.route_through(before)
        simulator.stop()


@pytest.fixture
def fake_node(kubeconfig: Path) -> Iterator[str]:
    """A Node object no kubelet serves (what kwok registers), so that the pod GC keeps pods
    bound to it."""
    name = unique("fake-node")
    kubectl(kubeconfig, "create", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
    yield name
    kubectl(kubeconfig, "delete", "node", name, "--wait=false", check=False)


def group(namespace: str) -> ConsumerGroupSpec:
    return ConsumerGroupSpec.from_body({
        "apiVersion": "staticfleet.io/v1alpha1", "kind": "ConsumerGroup",
        "metadata": {"name": "orders", "namespace": namespace, "generation": 1},
        "spec": {"replicas": 1, "kafka": {"bootstrapServers": "kafka:9092", "topics": ["orders"]},
                 "template": {"image": "staticfleet/member:0.1.0"}}})


def create(kubeconfig: Path, obj: dict[str, Any]) -> None:
    kubectl(kubeconfig, "create", "-f", "-", input=json.dumps(obj))


def status(ip: str) -> dict[str, Any]:
    return memberhttp.read_member_status(ip, PORT) or {}


def test_the_simulator_learns_pods_and_tokens_from_the_api_server(
        kubeconfig: Path, namespace: str, fake_node: str, sim: Simulator) -> None:
    g = group(namespace)
    create(kubeconfig, build_member_token_secret(g, "first-token"))
    pod = build_member_pod(g, 0, member_spec_view(g, TIMEOUTS))
    pod["spec"]["nodeName"] = fake_node
    create(kubeconfig, pod)
    assert status(IP) == {}, "no IP yet: no member"
    kubectl(kubeconfig, "-n", namespace, "patch", "pod", "orders-0", "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": {
                "phase": "Running", "podIP": IP, "podIPs": [{"ip": IP}]}}))
    st = wait_for("the pod's member serving", lambda: (s := status(IP))
                  and s["state"] == "running" and s, timeout=30)
    assert st["instanceId"] == "orders-0" and st["groupId"] == "orders"
    assert st["assignment"] == [["orders", 0], ["orders", 1], ["orders", 2]]

    wrong = memberhttp.ask_member(IP, PORT, REJOIN, ("not-the-token",))
    assert wrong is not None and wrong.status == 403
    wait_for("the group's token known", lambda: memberhttp.ask_member(
        IP, PORT, REJOIN, ("first-token",)) is None, timeout=30)

    rotated = base64.b64encode(b"second-token").decode()
    kubectl(kubeconfig, "-n", namespace, "patch", "secret", "orders-member-token",
            "--type=merge", "-p", json.dumps({"data": {"token": rotated}}))
    wait_for("the rotated token", lambda: (got := memberhttp.ask_member(
        IP, PORT, REJOIN, ("first-token",))) is not None and got.status == 403, timeout=30)
    assert memberhttp.ask_member(IP, PORT, LEAVE, ("second-token", "first-token")) is None
    wait_for("the member left", lambda: status(IP).get("state") == "left", timeout=10)

    kubectl(kubeconfig, "-n", namespace, "delete", "pod", "orders-0", "--wait=false")
    wait_for("no member once the pod's deletion began", lambda: status(IP) == {}, timeout=30)
    # The simulator watches every namespace (other tests' member pods come and go beside this
    # one): none of this namespace's is left in its table.
    with sim.lock:
        assert [m for m in sim.table.members.values() if m.facts.namespace == namespace] == []
