"""The local node: a small stand-in for a kubelet, for tests and demos only.

`LocalNode` registers the Node, renews its Lease and Ready heartbeat, watches pods, binds the
pending ones it can run (scheduling) and hands each bound pod to a `PodWorker`; on SIGTERM or
SIGINT it stops them all. `main` is `python -m staticfleet_dev.localnode`; what the node supports
is described in the package's docstring (`staticfleet_dev.localnode`)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from staticfleet_dev.localnode.api import ApiError, Kube, pod_path, watch_pods
from staticfleet_dev.localnode.ids import (
    HOST_IP,
    IpPool,
    default_ip_lock_dir,
    micro_time,
    node_labels,
    pod_key,
    rfc3339,
)
from staticfleet_dev.localnode.scheduling import (
    fits_another_node,
    needs_unschedulable_patch,
    scheduling_problem,
    unschedulable_condition,
    wants_binding,
)
from staticfleet_dev.localnode.worker import PodWorker

log = logging.getLogger("staticfleet.localnode")

HEARTBEAT_PERIOD = 10.0
LEASE_DURATION = 40
NODES_MAX_AGE = 2.0  # seconds a listing of the cluster's Nodes is reused when scheduling
KUBELET_VERSION = "v1.36.3-staticfleet-localnode"


def _memory_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 1024**3


class LocalNode:
    def __init__(self, kube: Kube, node_name: str, log_dir: Path,
                 shutdown_grace: float = 5.0, ip_lock_dir: Path | None = None) -> None:
        self.kube = kube
        self.node_name = node_name
        self.log_dir = log_dir
        self.shutdown_grace = shutdown_grace
        self.labels = node_labels(node_name)
        self.memory = f"{_memory_bytes() // 1024}Ki"
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.workers: dict[str, PodWorker] = {}
        self.finished_uids: set[str] = set()
        self.ips: dict[str, str] = {}  # uid -> ip
        self.ip_pool = IpPool(ip_lock_dir or default_ip_lock_dir())
        self._to_schedule: dict[str, dict[str, Any]] = {}
        self._schedule_wake = threading.Event()
        self._nodes: list[dict[str, Any]] = []  # the cluster's Nodes, for the schedule thread
        self._nodes_read = float("-inf")
        self._ready_since = rfc3339(time.time())

    # -- node object and heartbeat
    def _conditions(self, now: float) -> list[dict[str, Any]]:
        beat = rfc3339(now)

        def cond(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
            return {"type": kind, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": beat, "lastTransitionTime": self._ready_since}

        return [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory",
                 "local node has sufficient memory available"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure",
                 "local node has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID",
                 "local node has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "local node is posting ready status"),
        ]

    def node_status(self, now: float) -> dict[str, Any]:
        capacity = {"cpu": "2", "memory": self.memory, "pods": "110",
                    "ephemeral-storage": "100Gi"}
        uname = os.uname()
        return {
            "capacity": capacity, "allocatable": dict(capacity),
            "conditions": self._conditions(now),
            "addresses": [{"type": "InternalIP", "address": HOST_IP},
                          {"type": "Hostname", "address": self.node_name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "",
                "kernelVersion": uname.release, "osImage": f"{uname.sysname} (local node)",
                "containerRuntimeVersion": "localnode://0.1.0",
                "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": "",
                "operatingSystem": "linux", "architecture": self.labels["kubernetes.io/arch"],
            },
        }

    def register(self) -> None:
        now = time.time()
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.node_name, "labels": self.labels},
                "spec": {}, "status": self.node_status(now)}
        try:
            self.kube.request("POST", "/api/v1/nodes", body)
            log.info("registered node %s", self.node_name)
        except ApiError as exc:
            if exc.status != 409:
                raise
            self.kube.patch(f"/api/v1/nodes/{self.node_name}",
                            {"metadata": {"labels": self.labels}, "spec": {"unschedulable": None}})
        self.kube.patch(f"/api/v1/nodes/{self.node_name}/status",
                        {"status": self.node_status(now)})
        self.renew_lease(now)

    def renew_lease(self, now: float) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.node_name}"
        spec = {"holderIdentity": self.node_name, "leaseDurationSeconds": LEASE_DURATION,
                "renewTime": micro_time(now)}
        try:
            self.kube.patch(path, {"spec": spec}, strategic=False)
        except ApiError as exc:
            if exc.status != 404:
                raise
            node = self.kube.request("GET", f"/api/v1/nodes/{self.node_name}")
            self.kube.request("POST", path.rsplit("/", 1)[0], {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.node_name, "namespace": "kube-node-lease",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                                  "name": self.node_name,
                                                  "uid": node["metadata"]["uid"]}]},
                "spec": spec})

    def heartbeat_loop(self) -> None:
        while not self.stopping.wait(HEARTBEAT_PERIOD):
            now = time.time()
            try:
                self.renew_lease(now)
                self.kube.patch(f"/api/v1/nodes/{self.node_name}/status",
                                {"status": {"conditions": self._conditions(now)}})
            except ApiError as exc:
                log.warning("heartbeat: %s", exc)
                if exc.status == 404:
                    try:
                        self.register()
                    except ApiError as again:
                        log.warning("re-registering the node: %s", again)

    # -- watching pods
    def watch_loop(self) -> None:
        watch_pods(self.kube, self.stopping, log, self.resync, self.dispatch)

    def resync(self, pods: list[dict[str, Any]]) -> None:
        seen = set()
        for pod in pods:
            seen.add((pod.get("metadata") or {}).get("uid"))
            self.dispatch("ADDED", pod)
        with self._lock:
            missing = [w for uid, w in self.workers.items() if uid not in seen]
        for worker in missing:
            worker.mark_gone()

    def dispatch(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid", "")
        if kind == "DELETED":
            with self._lock:
                worker = self.workers.get(uid)
                self._to_schedule.pop(uid, None)
            if worker:
                worker.mark_gone()
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if node == self.node_name:
            with self._lock:
                self._to_schedule.pop(uid, None)
                if uid in self.finished_uids or self.stopping.is_set():
                    return
                worker = self.workers.get(uid)
                if worker is None:
                    ip = self._allocate_ip(uid, (pod.get("status") or {}).get("podIP"))
                    if ip is None:
                        log.error("pod %s: no free pod IP", pod_key(pod))
                        return
                    worker = PodWorker(self, pod, ip)
                    self.workers[uid] = worker
                    worker.start()
                    return
            worker.update(pod)
        elif not node and wants_binding(pod):
            with self._lock:
                self._to_schedule[uid] = pod
            self._schedule_wake.set()

    def _allocate_ip(self, uid: str, previous: str | None) -> str | None:
        ip = self.ip_pool.acquire(uid, previous)
        if ip is not None:
            self.ips[uid] = ip
        return ip

    def worker_done(self, worker: PodWorker) -> None:
        with self._lock:
            self.workers.pop(worker.uid, None)
            ip = self.ips.pop(worker.uid, None)
            if ip is not None:
                self.ip_pool.release(ip)
            self.finished_uids.add(worker.uid)

    # -- binding
    def schedule_loop(self) -> None:
        while not self.stopping.is_set():
            self._schedule_wake.wait(1.0)
            self._schedule_wake.clear()
            with self._lock:
                batch = list(self._to_schedule.values())
                self._to_schedule.clear()
            for pod in batch:
                try:
                    self.schedule(pod)
                except ApiError as exc:
                    log.warning("pod %s: scheduling: %s", pod_key(pod), exc)
                    if exc.status not in (404, 409, 422):  # gone, or its name a new pod's
                        with self._lock:
                            self._to_schedule.setdefault(pod["metadata"]["uid"], pod)

    def schedule(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        ns, name = meta["namespace"], meta["name"]
        problem = scheduling_problem(pod, self.node_name, self.labels)
        if problem:
            elsewhere = fits_another_node(pod, self.node_name, self.cluster_nodes())
            if elsewhere:  # someone else places pods there (the kwok binder): not ours
                log.debug("pod %s/%s: left to node %s", ns, name, elsewhere)
                return
            if needs_unschedulable_patch(pod, problem):
                log.info("pod %s/%s: unschedulable: %s", ns, name, problem)
                # The pod as seen, or nothing (409): bound elsewhere meanwhile, it keeps the
                # status its node gave it; the watch brings the new version back here.
                self.kube.patch(pod_path(ns, name, "status"), {
                    "metadata": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
                    "status": {"phase": "Pending",
                               "conditions": [unschedulable_condition(problem, time.time())]}})
            return
        try:
            self.kube.request("POST", pod_path(ns, name, "binding"), {
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": ns, "uid": meta["uid"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name}})
        except ApiError as exc:
            if exc.status == 409:  # already bound
                return
            raise
        log.info("pod %s/%s: bound to %s", ns, name, self.node_name)

    def cluster_nodes(self) -> list[dict[str, Any]]:
        """Every Node of the cluster, listed at most every NODES_MAX_AGE seconds."""
        now = time.monotonic()
        if now - self._nodes_read > NODES_MAX_AGE:
            self._nodes = self.kube.request("GET", "/api/v1/nodes").get("items") or []
            self._nodes_read = now
        return self._nodes

    # -- lifecycle
    def run(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.register()
        threads = [threading.Thread(target=fn, name=name, daemon=True) for fn, name in (
            (self.heartbeat_loop, "heartbeat"), (self.watch_loop, "watch"),
            (self.schedule_loop, "schedule"))]
        for t in threads:
            t.start()
        log.info("local node %s running; pod logs in %s", self.node_name, self.log_dir)
        while not self.stopping.wait(1.0):
            pass
        self.shutdown()

    def shutdown(self) -> None:
        self.stopping.set()
        with self._lock:
            workers = list(self.workers.values())
        log.info("stopping %d pod process(es)", len(workers))
        for w in workers:
            w.request_shutdown()
        deadline = time.monotonic() + self.shutdown_grace + 5
        for w in workers:
            w.join(timeout=max(0.1, deadline - time.monotonic()))
        log.info("local node stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m staticfleet_dev.localnode",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--node-name", default="local-node")
    parser.add_argument("--log-dir", required=True, type=Path)
    parser.add_argument("--ip-lock-dir", type=Path, default=None,
                        help="where pod IPs are locked machine-wide (default: "
                             "$TMPDIR/staticfleet-localnode-ips)")
    parser.add_argument("--shutdown-grace", type=float, default=5.0,
                        help="cap on each pod's grace period when the node stops (s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(threadName)s %(message)s")
    node = LocalNode(Kube(args.kubeconfig), args.node_name, args.log_dir.resolve(),
                     shutdown_grace=args.shutdown_grace, ip_lock_dir=args.ip_lock_dir)

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received signal %d; stopping", signum)
        node.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    node.run()
    return 0
