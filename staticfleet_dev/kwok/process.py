"""Start and stop kwok and the binder of its fake Nodes against an API server (a kubeconfig,
the local control plane's), each a process of its own with its log file; create the fake Nodes
and wait until kwok has made them Ready and holds their Leases.

On failure everything already started is stopped and the error (`ServerFailed`) carries the
log tails of both processes.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from staticfleet_dev import build
from staticfleet_dev.kwok import manifests
from staticfleet_dev.localnode.api import ApiError, Kube
from staticfleet_dev.procs import ProcessRecord, ServerFailed, spawn, stop, wait_until
from staticfleet_dev.tools import tail

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


@dataclass
class Kwok:
    """Running kwok and binder: their records, the fake Nodes, the kubeconfig they use."""

    workdir: Path
    kubeconfig: Path
    nodes: list[str]
    records: list[ProcessRecord] = field(default_factory=list)

    def record(self, name: str) -> ProcessRecord | None:
        return next((r for r in self.records if r.name == name), None)

    def log_tails(self, lines: int = 30) -> str:
        return "\n".join(f"--- {r.name} ({r.log}) ---\n{tail(Path(r.log), lines)}"
                         for r in self.records)

    def rss_bytes(self, name: str = "kwok") -> int:
        """Resident memory of the named process now (VmRSS), 0 when it is not running."""
        rec = self.record(name)
        if rec is None:
            return 0
        try:
            for line in Path(f"/proc/{rec.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0


def _in_service(kube: Kube, names: list[str]) -> bool:
    """Every fake Node Ready (kwok's node stage), its Lease held (kwok renews it) and no taint
    but its own left (the node lifecycle controller lifts `node.kubernetes.io/not-ready`, which
    admission puts on every new Node, a few seconds after Ready)."""
    selector = ",".join(f"{k}={v}" for k, v in manifests.node_selector().items())
    try:
        nodes = kube.request("GET", "/api/v1/nodes", query={"labelSelector": selector})
        leases = kube.request("GET", LEASES)
    except ApiError:
        return False
    own = manifests.TAINT["key"]
    usable = {n["metadata"]["name"] for n in nodes.get("items") or []
              if any(c.get("type") == "Ready" and c.get("status") == "True"
                     for c in (n.get("status") or {}).get("conditions") or [])
              and all(t.get("key") == own for t in (n.get("spec") or {}).get("taints") or [])}
    held = {le["metadata"]["name"] for le in leases.get("items") or []
            if (le.get("spec") or {}).get("holderIdentity")}
    return set(names) <= usable & held


def create_nodes(kube: Kube, names: list[str], pods_per_node: int) -> None:
    """Create the fake Nodes; one left by an earlier run (same name) is kept as it is."""
    for index, name in enumerate(names):
        try:
            kube.request("POST", "/api/v1/nodes", manifests.node(name, index, pods_per_node))
        except ApiError as exc:
            if exc.status != 409:
                raise


def start_kwok(workdir: Path, kubeconfig: Path, *, nodes: int = 3,
               pods_per_node: int = manifests.DEFAULT_PODS_PER_NODE,
               node_prefix: str = "kwok-node-",
               pod_parallelism: int = manifests.POD_PARALLELISM,
               binder: bool = True, extra_args: tuple[str, ...] = (),
               timeout: float = 60.0) -> Kwok:
    """kwok (built by `staticfleet_dev.build.kwok_bin`; `extra_args`: more of its flags) with
    `nodes` fake Nodes of `pods_per_node` pods each, and (`binder`) the binder that places pods
    on them; return once the Nodes are Ready and the binder has listed them."""
    binary = build.kwok_bin()
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "kwok.yaml"
    config.write_text(yaml.safe_dump_all(manifests.config_documents(pod_parallelism),
                                         sort_keys=False))
    names = [manifests.node_name(node_prefix, i) for i in range(nodes)]
    kwok = Kwok(workdir=workdir, kubeconfig=kubeconfig, nodes=names)
    # kwok reads ~/.kwok/kwok.yaml too when it exists; its own work directory keeps it out.
    env = {**os.environ, "KWOK_WORKDIR": str(workdir / "home")}
    kube = Kube(kubeconfig)
    try:
        _p, rec = spawn("kwok", [str(binary), "--kubeconfig", str(kubeconfig),
                                 "--config", str(config), *extra_args],
                        log=workdir / "kwok.log", env=env)
        kwok.records.append(rec)
        create_nodes(kube, names, pods_per_node)
        wait_until(lambda: _in_service(kube, names), rec=rec, timeout=timeout,
                   what=f"managing its {nodes} Node(s) (Ready, Lease held, untainted)")
        if binder:
            ready = workdir / "binder.ready"
            ready.unlink(missing_ok=True)
            _p, rec = spawn("kwok-binder", [
                sys.executable, "-m", "staticfleet_dev.kwok.binder",
                "--kubeconfig", str(kubeconfig), "--ready-file", str(ready)],
                log=workdir / "binder.log")
            kwok.records.append(rec)
            wait_until(ready.exists, rec=rec, timeout=timeout, what="ready")
    except BaseException as exc:
        with contextlib.suppress(ApiError):
            stop_kwok(kwok)
        if isinstance(exc, ServerFailed | ApiError):
            others = [r for r in kwok.records if r.log not in str(exc)]  # no tail twice
            tails = "\n".join(f"--- {r.name} ({r.log}) ---\n{tail(Path(r.log))}" for r in others)
            raise ServerFailed(f"kwok did not come up: {exc}\n{tails}") from None
        raise
    return kwok


def stop_kwok(kwok: Kwok, *, delete_nodes: bool = True) -> None:
    """Stop the binder and kwok; with `delete_nodes` delete the fake Nodes too (the pods still
    bound to them are then removed by the control plane's pod garbage collector)."""
    for rec in reversed(kwok.records):
        stop(rec, grace=10.0)
    if not delete_nodes:
        return
    kube = Kube(kwok.kubeconfig)
    for name in kwok.nodes:
        try:
            kube.request("DELETE", f"/api/v1/nodes/{name}")
        except ApiError as exc:
            if exc.status not in (0, 404):  # 0: the API server is gone already
                raise
