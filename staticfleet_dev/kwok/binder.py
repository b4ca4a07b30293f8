"""The binder of the fake Nodes: a small stand-in for kube-scheduler's placement onto them
(there is no kube-scheduler here; the local node binds only to itself).

Run it as::

    python -m staticfleet_dev.kwok.binder --kubeconfig PATH [--node-selector type=kwok]
        [--scheduler-name default-scheduler] [--ready-file PATH]

It watches every pod and lists the Nodes that match `--node-selector` (every 2 s, or at once
when a pod found no room). An unbound pod for `--scheduler-name`, not being deleted, is bound
(pods/binding, with the pod's UID, as kube-scheduler binds) to the next of those Nodes, round
robin, that is Ready, not cordoned, whose NoSchedule/NoExecute taints the pod tolerates, whose
labels match its nodeSelector and required node affinity, and that has room (fewer bound, not
finished pods than `status.allocatable.pods`); those checks are the local node's
(`staticfleet_dev.localnode.scheduling.node_problem`). A pod that fits none of them is left
alone: the local node's if it fits there, else it stays Pending (logged once, not written into
the pod: two writers of PodScheduled would undo each other's message). With a local node
running, a pod that fits both (tolerates the taint but selects nothing) goes to whichever binds
first, as with two schedulers.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from staticfleet_dev.kwok import manifests
from staticfleet_dev.localnode.api import ApiError, Kube, pod_path, watch_pods
from staticfleet_dev.localnode.ids import pod_key
from staticfleet_dev.localnode.scheduling import (
    DEFAULT_SCHEDULER,
    NODE_MISMATCH,
    NODE_TAINTED,
    node_problem,
    wants_binding,
)

log = logging.getLogger("staticfleet.kwok.binder")

NODES_MAX_AGE = 2.0
BIND_WORKERS = 4  # bindings in flight at once (one at a time: about 130 a second here)
NODE_FULL = "node(s) had too many pods"
USER_AGENT = "staticfleet-kwok-binder"


@dataclass(frozen=True)
class Choice:
    """Where a pod goes (`node`, None: nowhere now), the round-robin position after it, and
    why each Node was passed over."""

    node: str | None
    cursor: int
    passed: Mapping[str, str]


def room(node: Mapping[str, Any]) -> int:
    """How many pods the Node takes: `status.allocatable.pods` (a kubelet's 110 if unset)."""
    pods = ((node.get("status") or {}).get("allocatable") or {}).get("pods")
    try:
        return int(str(pods))
    except ValueError:
        return manifests.DEFAULT_PODS_PER_NODE


def choose(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], bound: Mapping[str, int],
           cursor: int) -> Choice:
    """The first Node from position `cursor` on (wrapping) that can take `pod`, given `bound`
    pods per Node name; the cursor moves past it, so pods spread round robin."""
    passed: dict[str, str] = {}
    for step in range(len(nodes)):
        i = (cursor + step) % len(nodes)
        name = str(nodes[i]["metadata"]["name"])
        problem = node_problem(pod, nodes[i])
        if problem is None and bound.get(name, 0) >= room(nodes[i]):
            problem = NODE_FULL
        if problem is None:
            return Choice(name, (i + 1) % len(nodes), passed)
        passed[name] = problem
    return Choice(None, cursor, passed)


def counts_as_bound(pod: Mapping[str, Any]) -> bool:
    """A pod on a Node holds its room until it is gone or finished (as in kube-scheduler)."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class Binder:
    def __init__(self, kube: Kube, node_selector: str,
                 scheduler: str = DEFAULT_SCHEDULER) -> None:
        self.kube = kube
        self.node_selector = node_selector
        self.scheduler = scheduler
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, Any]] = {}  # uid -> unbound pod
        self._on_node: dict[str, str] = {}  # uid -> Node name, every pod bound to a Node
        self._wake = threading.Event()
        self._nodes: list[dict[str, Any]] = []
        self._nodes_read = float("-inf")
        self._cursor = 0
        self._told: dict[str, str] = {}  # uid -> the last "no room" message logged
        self._binds = ThreadPoolExecutor(BIND_WORKERS, thread_name_prefix="bind")

    # -- what is on the Nodes, from the pod watch
    def watch_loop(self) -> None:
        watch_pods(self.kube, self.stopping, log, self._resync, self._observe)

    def _resync(self, pods: list[dict[str, Any]]) -> None:
        with self._lock:
            self._pending.clear()
            self._on_node.clear()
        for pod in pods:
            self._observe("ADDED", pod)

    def _observe(self, kind: str, pod: dict[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        node = (pod.get("spec") or {}).get("nodeName")
        with self._lock:
            self._pending.pop(uid, None)
            self._on_node.pop(uid, None)
            if kind == "DELETED":
                self._told.pop(uid, None)
            elif node and counts_as_bound(pod):
                self._on_node[uid] = str(node)
            elif not node and wants_binding(pod, self.scheduler):
                self._pending[uid] = pod
        self._wake.set()

    # -- placing
    def nodes(self, *, fresh: bool = False) -> list[dict[str, Any]]:
        """The fake Nodes by name, listed at most every NODES_MAX_AGE seconds."""
        now = time.monotonic()
        if fresh or now - self._nodes_read > NODES_MAX_AGE:
            listing = self.kube.request("GET", "/api/v1/nodes",
                                        query={"labelSelector": self.node_selector})
            self._nodes = sorted(listing.get("items") or [],
                                 key=lambda n: str(n["metadata"]["name"]))
            self._nodes_read = now
        return self._nodes

    def schedule_loop(self) -> None:
        while not self.stopping.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            try:
                self.place_pending()
            except ApiError as exc:
                log.warning("placing pods: %s", exc)
                self.stopping.wait(1.0)

    def place_pending(self) -> None:
        """Try every unbound pod (kept until bound, gone or bound elsewhere: a pod that fits
        nowhere now may fit once a Node is Ready or a pod is gone). The Nodes are chosen one
        pod after the other, counting the pods placed so far; the bindings go out
        BIND_WORKERS at a time, and the batch ends when all have answered."""
        with self._lock:
            batch = list(self._pending.values())
            bound = Counter(self._on_node.values())
        if not batch:
            return
        nodes = self.nodes()
        sent = []
        for pod in batch:
            if self.stopping.is_set():
                break
            choice = choose(pod, nodes, bound, self._cursor)
            if choice.node is None:
                self._tell(pod, choice.passed)
                continue
            self._cursor = choice.cursor
            bound[choice.node] += 1
            sent.append(self._binds.submit(self.bind, pod, choice.node))
        for future in sent:
            try:
                future.result()
            except ApiError as exc:  # the pod stays pending: tried again in the next batch
                log.warning("binding: %s", exc)

    def _tell(self, pod: dict[str, Any], passed: Mapping[str, str]) -> None:
        """Log once per pod and message why a pod meant for these Nodes (one that selects them
        and tolerates their taints) waits; the others are not this binder's to explain."""
        if all(p == NODE_MISMATCH or p.startswith(NODE_TAINTED) for p in passed.values()):
            return
        reasons = Counter(passed.values())
        message = f"0/{len(passed)} nodes are available: " + ", ".join(
            f"{count} {reason}" for reason, count in sorted(reasons.items()))
        uid = str(pod["metadata"]["uid"])
        if self._told.get(uid) != message:
            self._told[uid] = message
            log.info("pod %s waits: %s", pod_key(pod), message)

    def bind(self, pod: dict[str, Any], node: str) -> None:
        meta = pod["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], str(meta["uid"])
        try:
            self.kube.request("POST", pod_path(ns, name, "binding"), {
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": ns, "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
        except ApiError as exc:
            if exc.status in (404, 409, 422):  # gone, already bound, or a new pod of its name
                log.info("pod %s/%s: not bound to %s: %s", ns, name, node, exc)
                with self._lock:
                    self._pending.pop(uid, None)
                return
            raise
        with self._lock:
            if self._pending.pop(uid, None) is not None:
                self._on_node[uid] = node
        log.info("pod %s/%s: bound to %s", ns, name, node)

    # -- lifecycle
    def run(self, ready_file: Path | None = None) -> None:
        threads = [threading.Thread(target=fn, name=name, daemon=True) for fn, name in (
            (self.watch_loop, "watch"), (self.schedule_loop, "schedule"))]
        for t in threads:
            t.start()
        nodes = self.nodes(fresh=True)
        log.info("binding pods for %s to %d node(s) matching %s", self.scheduler, len(nodes),
                 self.node_selector)
        if ready_file is not None:
            ready_file.write_text(f"{len(nodes)}\n")
        while not self.stopping.wait(1.0):
            pass
        self._binds.shutdown(wait=False, cancel_futures=True)
        log.info("binder stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m staticfleet_dev.kwok.binder",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", required=True, type=Path)
    default_selector = ",".join(f"{k}={v}" for k, v in manifests.node_selector().items())
    parser.add_argument("--node-selector", default=default_selector,
                        help=f"label selector of the Nodes to bind to (default {default_selector})")
    parser.add_argument("--scheduler-name", default=DEFAULT_SCHEDULER,
                        help="bind only pods with this spec.schedulerName")
    parser.add_argument("--ready-file", type=Path, default=None,
                        help="written once the first Node listing is done")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(threadName)s %(message)s")
    kube = Kube(args.kubeconfig)
    kube.api.user_agent = USER_AGENT  # its requests told apart from the local node's
    binder = Binder(kube, args.node_selector, args.scheduler_name)

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received signal %d; stopping", signum)
        binder.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    binder.run(args.ready_file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
