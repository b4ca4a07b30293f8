"""kwok against the real control plane: fake Nodes made Ready, pods that select them bound by
the binder and made Running and Ready with their own pod IPs by kwok, deleted for good; the
local node, running beside it, leaves those pods alone."""

from __future__ import annotations

import ipaddress
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from staticfleet_dev import environment
from staticfleet_dev.kwok import manifests
from staticfleet_dev.kwok.process import Kwok, start_kwok, stop_kwok
from staticfleet_dev.procs import ProcessRecord, ServerFailed
from staticfleet_dev.testkit import poll
from staticfleet_dev.testkit.kube import get_json, kubectl, to_yaml

pytestmark = pytest.mark.integration

PODS = 100
NODES = 3
READY_WITHIN = 90.0  # seconds for all PODS pods; about 5 s on an idle two-core machine
GONE_WITHIN = 60.0


@pytest.fixture(scope="module")
def kwok(local_env: environment.LocalEnv,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kwok]:
    """kwok and the binder with NODES fake Nodes, once for this module (its tests create pods
    in namespaces of their own), registered with the session's environment so that a crashed
    run's kwok is stopped by the next one (`environment.reap_orphans`)."""
    started = time.monotonic()
    try:
        k = start_kwok(tmp_path_factory.mktemp("kwok"), local_env.kubeconfig, nodes=NODES)
    except ServerFailed as exc:
        pytest.fail(str(exc), pytrace=False)
    print(f"kwok and the binder up, {NODES} Nodes Ready: {time.monotonic() - started:.1f} s")
    local_env.records.extend(k.records)
    environment.save(local_env)
    yield k
    started = time.monotonic()
    stop_kwok(k)
    print(f"kwok and the binder stopped, Nodes deleted: {time.monotonic() - started:.1f} s")
    local_env.records = [r for r in local_env.records if r not in k.records]
    environment.save(local_env)


def fleet_pod(name: str, marker: Path, **spec: Any) -> dict[str, Any]:
    """A pod whose process, were it ever run by the local node, leaves `marker` behind."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "fleet"}},
            "spec": {"terminationGracePeriodSeconds": 30, **spec, "containers": [{
                "name": "member", "image": "local/none",
                "command": ["python", "-c", f"open({str(marker)!r}, 'a').write('ran\\n')"]}]}}


def pods(kubeconfig: Path, ns: str, selector: str = "app=fleet") -> list[dict[str, Any]]:
    return list(get_json(kubeconfig, "-n", ns, "pods", "-l", selector,
                         "--show-managed-fields")["items"])


def ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def managers(pod: dict[str, Any]) -> set[str]:
    return {str(m.get("manager")) for m in pod["metadata"].get("managedFields") or []}


def test_kwok_that_does_not_come_up_fails_with_its_log_tail(
        local_env: environment.LocalEnv, tmp_path: Path) -> None:
    """A kwok that exits at once (here: a flag it does not know) fails the start at once with
    its own words, and leaves neither a process nor its Nodes behind. First in the module: once
    the module's kwok runs, it makes every annotated Node Ready, this one's too."""
    with pytest.raises(ServerFailed) as failed:
        came_up = start_kwok(tmp_path, local_env.kubeconfig, nodes=1, node_prefix="kwok-broken-",
                             extra_args=("--no-such-flag",), timeout=30)
        stop_kwok(came_up)  # only when it wrongly came up: leave no binder running
    message = str(failed.value)
    assert "kwok exited before managing its 1 Node(s)" in message, message
    assert "unknown flag: --no-such-flag" in message
    left = json.loads(kubectl(local_env.kubeconfig, "get", "node", "kwok-broken-0",
                              "-o", "json", "--ignore-not-found").stdout or "null")
    assert left is None


def test_pods_for_the_fake_nodes_become_ready_on_them_and_go_away(
        kwok: Kwok, kubeconfig: Path, namespace: str, local_node: ProcessRecord,
        local_env: environment.LocalEnv, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    fleet = [fleet_pod(f"fleet-{i}", marker, **manifests.placement()) for i in range(PODS)]
    # Controls: a plain pod the local node runs (it is watching), and one that selects the fake
    # Nodes without tolerating their taint, which no one may place.
    plain = fleet_pod("plain", marker)
    plain["metadata"]["labels"] = {"app": "plain"}
    plain["spec"]["containers"][0]["command"] = ["python", "-c", "import time; time.sleep(600)"]
    untolerated = fleet_pod("untolerated", marker, nodeSelector=manifests.node_selector())
    untolerated["metadata"]["labels"] = {"app": "untolerated"}

    started = time.monotonic()
    kubectl(kubeconfig, "-n", namespace, "create", "-f", "-",
            input="\n---\n".join(to_yaml(p) for p in [*fleet, plain, untolerated]))
    created = time.monotonic() - started

    def all_ready() -> list[dict[str, Any]] | None:
        found = pods(kubeconfig, namespace)
        return found if len(found) == PODS and all(ready(p) for p in found) else None

    def progress() -> str:
        found = pods(kubeconfig, namespace)
        return (f"{sum(ready(p) for p in found)}/{PODS} Ready, "
                f"{sum(bool(p['spec'].get('nodeName')) for p in found)} bound\n"
                f"{kwok.log_tails(40)}")

    fleet_now = poll.wait_for(f"{PODS} pods Ready on the fake Nodes", all_ready,
                              timeout=READY_WITHIN, interval=0.5, describe=progress)
    to_ready = time.monotonic() - started
    print(f"{PODS} pods created in {created:.1f} s, all Ready {to_ready:.1f} s after the create "
          f"began; kwok RSS {kwok.rss_bytes() / 2**20:.0f} MiB, "
          f"binder RSS {kwok.rss_bytes('kwok-binder') / 2**20:.0f} MiB")

    # On the fake Nodes, round robin, each pod with its own address from its Node's pod CIDR.
    nodes = {n["metadata"]["name"]: n for n in get_json(
        kubeconfig, "nodes", "-l", "type=kwok")["items"]}
    placed = Counter(p["spec"]["nodeName"] for p in fleet_now)
    assert set(placed) == set(kwok.nodes)
    assert max(placed.values()) - min(placed.values()) <= 1, placed
    ips = [p["status"]["podIP"] for p in fleet_now]
    assert len(set(ips)) == PODS, Counter(ips).most_common(3)
    for pod in fleet_now:
        cidr = ipaddress.IPv4Network(nodes[pod["spec"]["nodeName"]]["spec"]["podCIDR"])
        assert ipaddress.IPv4Address(pod["status"]["podIP"]) in cidr, pod["status"]
        assert pod["status"]["phase"] == "Running"
        assert [c["ready"] for c in pod["status"]["containerStatuses"]] == [True]

    # The local node ran the plain pod, and none of the fleet: no process, no pod log, and
    # nothing written into a fleet pod by its client (the kubernetes client's field manager).
    [plain_now] = poll.wait_for("the local node to run the plain pod", lambda: [
        p for p in pods(kubeconfig, namespace, "app=plain")
        if ready(p) and p["spec"]["nodeName"] == environment.NODE_NAME], timeout=60,
        interval=0.5)
    local_client = ApiClient().user_agent.split("/")[0]
    assert local_client in managers(plain_now)  # the local node's status writes show there
    assert not [p["metadata"]["name"] for p in fleet_now if local_client in managers(p)]
    assert not marker.exists()
    assert sorted(local_env.pod_log_dir.glob(f"{namespace}_fleet-*")) == []

    # The taint holds: the pod that does not tolerate it stays unbound, and the local node
    # (no other Node could take it) says why, as kube-scheduler would.
    [lone] = pods(kubeconfig, namespace, "app=untolerated")
    assert not lone["spec"].get("nodeName"), lone["spec"]
    poll.wait_for("the local node to report the untolerated pod Unschedulable", lambda: any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for p in pods(kubeconfig, namespace, "app=untolerated")
        for c in p["status"].get("conditions") or []), timeout=30, interval=0.5)

    started = time.monotonic()
    kubectl(kubeconfig, "-n", namespace, "delete", "pods", "-l", "app=fleet", "--wait=false")
    poll.wait_for(f"the {PODS} pods to be gone", lambda: pods(kubeconfig, namespace) == [],
                  timeout=GONE_WITHIN, interval=0.5, describe=progress)
    print(f"{PODS} pods gone {time.monotonic() - started:.1f} s after the delete")
    assert not marker.exists()
