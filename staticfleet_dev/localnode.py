"""The local node: a small stand-in for a kubelet, for tests and demos only.

Run it as::

    python -m staticfleet_dev.localnode --kubeconfig PATH --node-name local-node \\
        --log-dir DIR

It registers a Node (Ready, capacity cpu 2 / the machine's memory / 110 pods, InternalIP
127.0.0.1, labels kubernetes.io/hostname, kubernetes.io/os=linux, kubernetes.io/arch), renews
its Lease in `kube-node-lease` and its Ready condition's heartbeat every 10 s, binds pending pods
to itself (there is no kube-scheduler) and runs each pod's first container as a local process.
SIGTERM (or SIGINT) stops every pod process (SIGTERM, grace capped by --shutdown-grace, SIGKILL)
and exits; the pod objects are left as they are.

Supported
- Scheduling: pods with no `spec.nodeName` and the default scheduler are bound (pods/binding).
  `nodeSelector` and required node affinity (`matchExpressions` In/NotIn/Exists/DoesNotExist/
  Gt/Lt, `matchFields` metadata.name) are checked against the node's labels; a pod that does not
  fit stays Pending with PodScheduled=False, reason Unschedulable.
- Pod IPs: each pod gets its own loopback address from 127.0.1.2 upwards (lowest free, reused
  after deletion; Linux routes all of 127.0.0.0/8 to `lo`, so processes bind them as they are).
  Addresses are unique on the machine, also across several local nodes (one per environment):
  each is held as a lock file in `--ip-lock-dir` (default `$TMPDIR/staticfleet-localnode-ips`),
  and addresses with a listening socket (per /proc/net/tcp) are skipped.
  `status.podIP(s)`; `hostIP` 127.0.0.1. Many pods can each listen on 8080.
- The first container only: `command + args` with `$(VAR)` expansion. There is no image, so a
  container without `command` waits with reason NoImageEntrypoint. A bare `python`/`python3` as
  the command is replaced by the local node's own interpreter (`sys.executable`), and that
  interpreter's directory is put first on PATH, so console scripts of the same virtualenv (e.g.
  `staticfleet`) resolve to it.
- Environment: the machine's environment (without KUBECONFIG: the node's credentials never
  leak into a pod), then HOSTNAME=<pod name>, then the pod's: literal
  values, fieldRef (metadata.name/namespace/uid/labels['x']/annotations['x'], spec.nodeName,
  spec.serviceAccountName, status.podIP(s), status.hostIP(s)), resourceFieldRef (approximated),
  configMapKeyRef, secretKeyRef, envFrom; see `staticfleet_dev.podenv`. A missing
  non-optional ConfigMap/Secret/key leaves the container Waiting with reason
  CreateContainerConfigError; it is retried every 2 s.
- Working directory: `workingDir` if set, else `<log-dir>/work/<namespace>_<pod>_<uid>`.
- In-cluster credentials as a kubeconfig: a kubelet mounts the ServiceAccount token at
  /var/run/secrets/kubernetes.io/serviceaccount; this node cannot mount, so for a pod that gets a
  token (`automountServiceAccountToken` not false: true, or unset with the token volume the
  ServiceAccount admission plugin adds) it requests one through the TokenRequest API
  (`serviceaccounts/<spec.serviceAccountName, default "default">/token`, bound to the pod by
  name and uid, expirationSeconds 3607 as a kubelet asks), writes `token`, `ca.crt`,
  `namespace` and a `kubeconfig`
  (server and CA = those of this node's own kubeconfig, user = the token, default namespace = the
  pod's) to `<log-dir>/work/<namespace>_<pod>_<uid>/serviceaccount/` (mode 0600), and sets
  `KUBECONFIG` to that kubeconfig unless the pod sets `KUBECONFIG` itself. Clients that prefer
  in-cluster config fall back to it (KUBERNETES_SERVICE_HOST is not set). The token is renewed
  (files replaced atomically) once 80% of its lifetime has passed, as the kubelet does; a client
  that read the kubeconfig once keeps the old token until it reloads it (kopf re-logs in on
  401). Container restarts keep the current token. A failed TokenRequest (no such
  ServiceAccount) leaves the container waiting in ContainerCreating with the error as message,
  retried every 2 s.
- Probes (startup, readiness, liveness): httpGet (port by number or by container port name,
  host defaults to the pod IP, path, scheme, headers; 200-399 is success), tcpSocket and exec
  (run locally with the container's environment), with initialDelaySeconds, periodSeconds,
  timeoutSeconds, successThreshold and failureThreshold as in Kubernetes. No readiness probe:
  Ready once started. A failed liveness or startup probe restarts the container. grpc probes are
  not supported and count as success.
- restartPolicy: Always restarts after any exit, OnFailure after a non-zero exit, Never leaves the
  pod Succeeded/Failed. Restart back-off is 1 s, 2 s, 4 s ... capped at 30 s (the kubelet's 10 s
  base and 5 min cap are too slow for tests), reset after a container ran for 60 s.
- Status (pods/status, strategic merge patch, sent only when it changes): phase,
  containerStatuses (ready, started, restartCount, state/lastState with reasons), conditions
  PodReadyToStartContainers, Initialized, ContainersReady, Ready (readinessGates honoured),
  PodScheduled, startTime, and a message listing what this node ignores in the pod.
- Deletion: on `deletionTimestamp` the process group gets SIGTERM, then SIGKILL after
  `deletionGracePeriodSeconds` (else spec.terminationGracePeriodSeconds, else 30); the final
  container state is written and the pod is deleted with grace 0 and a UID precondition (a new
  pod with the same name is never touched). A pod that disappears without that (force deletion)
  gets SIGTERM and SIGKILL after 2 s (the kubelet's minimum grace).
- Restarting the local node: pods already bound to it that are not Succeeded/Failed get a new
  process (restartCount continues from the pod's status; the pod IP is kept when still free).
- Output: stdout and stderr of every run go to `<log-dir>/<namespace>_<pod>_<uid>.log`, appended
  across restarts, with a marker line at each start and exit.

Not supported: images, volumes (volumeMounts other than the service-account token are ignored and
named in the pod's status message), init and sidecar containers (ignored, named in the message),
containers after the first, resource limits and fit, taints/tolerations, pod (anti-)affinity,
preferred node affinity, hostNetwork/ports (everything is on loopback anyway), service
environment variables (so no KUBERNETES_SERVICE_HOST; credentials come as a kubeconfig, above),
pod resize, ephemeral containers, logs/exec
through the API.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import fcntl
import http.client
import ipaddress
import json
import logging
import os
import platform
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration
from kubernetes.watch.watch import iter_resp_lines

from staticfleet_dev import podenv
from staticfleet_dev.procs import spawn

log = logging.getLogger("staticfleet.localnode")

HOST_IP = "127.0.0.1"
FIRST_POD_IP = "127.0.1.2"
LAST_POD_IP = "127.0.255.254"
BACKOFF_BASE = 1.0
BACKOFF_CAP = 30.0
BACKOFF_RESET_AFTER = 60.0
CONFIG_RETRY = 2.0
TOKEN_RETRY = 10.0
FORCE_DELETE_GRACE = 2.0
DEFAULT_GRACE = 30.0
HEARTBEAT_PERIOD = 10.0
LEASE_DURATION = 40
WATCH_TIMEOUT = 30
TICK = 0.2
KUBELET_VERSION = "v1.36.3-staticfleet-localnode"
DEFAULT_SCHEDULER = "default-scheduler"
OWNED_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready",
                    "PodScheduled")


# --------------------------------------------------------------------------- pure: time, ids

def rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_labels(node_name: str) -> dict[str, str]:
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(),
                                                                       platform.machine())
    return {"kubernetes.io/hostname": node_name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": arch, "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": arch}


def next_pod_ip(used: set[str], first: str = FIRST_POD_IP, last: str = LAST_POD_IP) -> str | None:
    """The lowest free loopback address in [first, last], skipping .0 and .255."""
    lo, hi = int(ipaddress.IPv4Address(first)), int(ipaddress.IPv4Address(last))
    for n in range(lo, hi + 1):
        if n & 0xFF in (0, 255):
            continue
        ip = str(ipaddress.IPv4Address(n))
        if ip not in used:
            return ip
    return None


def listening_ips(proc_net_tcp: str) -> set[str]:
    """IPv4 addresses with a listening TCP socket, from the text of /proc/net/tcp."""
    found = set()
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != "0A":
            continue
        addr = fields[1].split(":")[0]
        try:
            found.add(str(ipaddress.IPv4Address(bytes.fromhex(addr)[::-1])))
        except ValueError:
            continue
    return found


def _listening_now() -> set[str]:
    try:
        return listening_ips(Path("/proc/net/tcp").read_text())
    except OSError:
        return set()


class IpPool:
    """Pod IPs, unique on the machine: each address in use is held as an flock on
    `<lock_dir>/<ip>.lock`, so two local nodes (two environments, a test session next to a
    demo) never hand out the same address. The kernel drops the locks when a node exits.
    Addresses something already listens on (a leftover process) are skipped too."""

    def __init__(self, lock_dir: Path,
                 listening: Callable[[], set[str]] = _listening_now) -> None:
        self.lock_dir = lock_dir
        self.listening = listening
        self.held: dict[str, int] = {}  # ip -> fd of its lock file

    def _try_lock(self, ip: str, owner: str) -> bool:
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_dir / f"{ip}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {owner}\n".encode())
        self.held[ip] = fd
        return True

    def acquire(self, owner: str, preferred: str | None = None) -> str | None:
        busy = self.listening()
        if in_pod_range(preferred) and preferred not in self.held and preferred is not None \
                and preferred not in busy and self._try_lock(preferred, owner):
            return preferred
        tried = set(self.held) | busy
        while (ip := next_pod_ip(tried)) is not None:
            if self._try_lock(ip, owner):
                return ip
            tried.add(ip)
        return None

    def release(self, ip: str) -> None:
        fd = self.held.pop(ip, None)
        if fd is not None:
            os.close(fd)


def in_pod_range(ip: str | None) -> bool:
    try:
        n = int(ipaddress.IPv4Address(ip or ""))
    except ValueError:
        return False
    return (int(ipaddress.IPv4Address(FIRST_POD_IP)) <= n <= int(ipaddress.IPv4Address(LAST_POD_IP))
            and n & 0xFF not in (0, 255))


# --------------------------------------------------------------------------- pure: decisions

def restart_delay(streak: int) -> float:
    """Back-off before the next restart after `streak` restarts in a row: 1, 2, 4 ... 30 s."""
    return float(min(BACKOFF_CAP, BACKOFF_BASE * 2 ** max(0, streak)))


def should_restart(restart_policy: str | None, exit_code: int) -> bool:
    policy = restart_policy or "Always"
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def exit_code_of(returncode: int) -> int:
    """A Popen return code as a container runtime reports it (killed by signal N -> 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


def grace_seconds(pod: Mapping[str, Any]) -> float:
    meta = pod.get("metadata") or {}
    for value in (meta.get("deletionGracePeriodSeconds"),
                  (pod.get("spec") or {}).get("terminationGracePeriodSeconds")):
        if value is not None:
            return float(value)
    return DEFAULT_GRACE


def wants_binding(pod: Mapping[str, Any]) -> bool:
    """Unbound, for the default scheduler, not being deleted, not finished."""
    spec = pod.get("spec") or {}
    return (not spec.get("nodeName")
            and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
            and not (pod.get("metadata") or {}).get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


def _requirement_ok(req: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key, op = req.get("key", ""), req.get("operator", "")
    wanted = [str(v) for v in req.get("values") or []]
    present = key in values
    if op == "In":
        return present and values[key] in wanted
    if op == "NotIn":
        return not present or values[key] not in wanted
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            have, want = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def scheduling_problem(pod: Mapping[str, Any], node_name: str,
                       labels: Mapping[str, str]) -> str | None:
    """Why the pod cannot run on this node (the kube-scheduler's wording), or None."""
    spec = pod.get("spec") or {}
    mismatch = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != str(value):
            return mismatch
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required:
        fields = {"metadata.name": node_name}
        terms = required.get("nodeSelectorTerms") or []
        if not any(
            (t.get("matchExpressions") or t.get("matchFields"))
            and all(_requirement_ok(r, labels) for r in t.get("matchExpressions") or [])
            and all(_requirement_ok(r, fields) for r in t.get("matchFields") or [])
            for t in terms
        ):
            return mismatch
    return None


def unschedulable_condition(problem: str, now: float) -> dict[str, Any]:
    return {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": problem, "lastTransitionTime": rfc3339(now)}


def needs_unschedulable_patch(pod: Mapping[str, Any], problem: str) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return not (cond.get("status") == "False" and cond.get("reason") == "Unschedulable"
                        and cond.get("message") == problem)
    return True


# --------------------------------------------------------------------------- pure: probes

@dataclass(frozen=True)
class ProbeSpec:
    kind: str  # http | tcp | exec | unsupported
    port: int | None = None
    host: str | None = None
    path: str = "/"
    scheme: str = "HTTP"
    headers: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace: float | None = None


def resolve_port(port: Any, container: Mapping[str, Any]) -> int | None:
    """A probe port: a number, a numeric string, or the name of a container port."""
    if isinstance(port, int):
        return port
    text = str(port or "")
    if text.isdigit():
        return int(text)
    for p in container.get("ports") or []:
        if p.get("name") == text:
            return int(p["containerPort"])
    return None


def parse_probe(probe: Mapping[str, Any] | None,
                container: Mapping[str, Any]) -> ProbeSpec | None:
    if not probe:
        return None
    common = {
        "initial_delay": float(probe.get("initialDelaySeconds") or 0),
        "period": float(probe.get("periodSeconds") or 10),
        "timeout": float(probe.get("timeoutSeconds") or 1),
        "success_threshold": int(probe.get("successThreshold") or 1),
        "failure_threshold": int(probe.get("failureThreshold") or 3),
        "termination_grace": (float(probe["terminationGracePeriodSeconds"])
                              if probe.get("terminationGracePeriodSeconds") is not None
                              else None),
    }
    if probe.get("httpGet"):
        h = probe["httpGet"]
        return ProbeSpec(kind="http", port=resolve_port(h.get("port"), container),
                         host=h.get("host") or None, path=h.get("path") or "/",
                         scheme=(h.get("scheme") or "HTTP").upper(),
                         headers=tuple((x["name"], x.get("value", ""))
                                       for x in h.get("httpHeaders") or []),
                         **common)  # type: ignore[arg-type]
    if probe.get("tcpSocket"):
        t = probe["tcpSocket"]
        return ProbeSpec(kind="tcp", port=resolve_port(t.get("port"), container),
                         host=t.get("host") or None, **common)  # type: ignore[arg-type]
    if probe.get("exec"):
        return ProbeSpec(kind="exec", command=tuple(probe["exec"].get("command") or []),
                         **common)  # type: ignore[arg-type]
    return ProbeSpec(kind="unsupported", **common)  # type: ignore[arg-type]


@dataclass
class ProbeTracker:
    """Consecutive successes/failures against the thresholds; `result` is the probe's verdict."""

    spec: ProbeSpec
    result: bool
    successes: int = 0
    failures: int = 0
    next_due: float = 0.0

    def observe(self, ok: bool) -> None:
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= self.spec.success_threshold:
                self.result = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.failures >= self.spec.failure_threshold:
                self.result = False


# --------------------------------------------------------------------------- pure: status

@dataclass(frozen=True)
class Terminated:
    exit_code: int
    reason: str
    finished_at: str
    started_at: str | None = None
    message: str | None = None
    container_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"exitCode": self.exit_code, "reason": self.reason,
                             "finishedAt": self.finished_at}
        if self.started_at:
            d["startedAt"] = self.started_at
        if self.message:
            d["message"] = self.message
        if self.container_id:
            d["containerID"] = self.container_id
        return d


def terminated_reason(exit_code: int) -> str:
    return "Completed" if exit_code == 0 else "Error"


@dataclass(frozen=True)
class ContainerView:
    """What the node knows about the pod's (first) container right now.

    State precedence: running (`running_since`), else terminated for good (`terminated`), else
    waiting (`waiting_reason`; with `last_terminated` set it is waiting to be restarted).
    """

    name: str
    image: str = ""
    restart_count: int = 0
    running_since: str | None = None
    container_id: str | None = None
    terminated: Terminated | None = None
    waiting_reason: str = "ContainerCreating"
    waiting_message: str | None = None
    last_terminated: Terminated | None = None
    ready: bool = False
    started: bool = False


def container_state(view: ContainerView) -> dict[str, Any]:
    if view.running_since:
        return {"running": {"startedAt": view.running_since}}
    if view.terminated:
        return {"terminated": view.terminated.to_dict()}
    waiting: dict[str, Any] = {"reason": view.waiting_reason}
    if view.waiting_message:
        waiting["message"] = view.waiting_message
    return {"waiting": waiting}


def pod_phase(view: ContainerView) -> str:
    """The kubelet's getPhase for one container (the restart decision is already in `view`)."""
    if view.running_since:
        return "Running"
    if view.terminated:
        return "Succeeded" if view.terminated.exit_code == 0 else "Failed"
    if view.last_terminated:
        return "Running"
    return "Pending"


def _gate_problem(pod: Mapping[str, Any]) -> str | None:
    conditions = {c.get("type"): c.get("status")
                  for c in (pod.get("status") or {}).get("conditions") or []}
    for gate in (pod.get("spec") or {}).get("readinessGates") or []:
        kind = gate.get("conditionType")
        if kind not in conditions:
            return f'corresponding condition of pod readiness gate "{kind}" does not exist.'
        if conditions[kind] != "True":
            return (f'the status of pod readiness gate "{kind}" is not "True", '
                    f"but {conditions[kind]}")
    return None


def pod_conditions(pod: Mapping[str, Any], view: ContainerView, phase: str,
                   previous: Sequence[Mapping[str, Any]], now: float) -> list[dict[str, Any]]:
    """The conditions this node owns; lastTransitionTime kept while a status does not change."""
    terminal = phase in ("Succeeded", "Failed")
    ready = view.ready and bool(view.running_since)
    unready_reason = "PodCompleted" if terminal else "ContainersNotReady"
    unready_msg = None if terminal else f"containers with unready status: [{view.name}]"
    wanted: list[tuple[str, bool, str | None, str | None]] = [
        ("PodReadyToStartContainers", not terminal, None, None),
        ("Initialized", True, "PodCompleted" if terminal else None, None),
        ("ContainersReady", ready, None if ready else unready_reason,
         None if ready else unready_msg),
    ]
    gate = _gate_problem(pod) if ready else None
    if gate:
        wanted.append(("Ready", False, "ReadinessGatesNotReady", gate))
    else:
        wanted.append(("Ready", ready, None if ready else unready_reason,
                       None if ready else unready_msg))
    wanted.append(("PodScheduled", True, None, None))
    before = {c.get("type"): c for c in previous}
    out: list[dict[str, Any]] = []
    for kind, ok, reason, message in wanted:
        status = "True" if ok else "False"
        prev = before.get(kind)
        since = (prev.get("lastTransitionTime") if prev and prev.get("status") == status
                 and prev.get("lastTransitionTime") else rfc3339(now))
        cond: dict[str, Any] = {"type": kind, "status": status, "lastTransitionTime": since}
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        out.append(cond)
    return out


def desired_status(pod: Mapping[str, Any], view: ContainerView, *, pod_ip: str,
                   start_time: str, previous_conditions: Sequence[Mapping[str, Any]], now: float,
                   notes: list[str] | None = None) -> dict[str, Any]:
    """The pod status this node wants the API to show (no timestamps that move by themselves)."""
    phase = pod_phase(view)
    cs: dict[str, Any] = {
        "name": view.name, "image": view.image, "imageID": "", "ready": view.ready
        and bool(view.running_since), "restartCount": view.restart_count,
        "started": view.started and bool(view.running_since), "state": container_state(view),
        "lastState": ({"terminated": view.last_terminated.to_dict()}
                      if view.last_terminated else {}),
    }
    if view.container_id:
        cs["containerID"] = view.container_id
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": pod_conditions(pod, view, phase, previous_conditions, now),
        "hostIP": HOST_IP, "hostIPs": [{"ip": HOST_IP}],
        "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
        "startTime": start_time,
        "containerStatuses": [cs],
    }
    if notes:
        status["message"] = "local node: " + "; ".join(notes)
    return status


def status_patch(desired: Mapping[str, Any]) -> dict[str, Any]:
    """A strategic merge patch that makes the status `desired`: states we left are nulled."""
    status = dict(desired)
    status.setdefault("message", None)
    statuses = []
    for cs in desired.get("containerStatuses") or []:
        cs = dict(cs)
        cs["state"] = {k: cs["state"].get(k) for k in ("waiting", "running", "terminated")}
        cs["lastState"] = {k: cs["lastState"].get(k)
                           for k in ("waiting", "running", "terminated")}
        statuses.append(cs)
    status["containerStatuses"] = statuses
    status["conditions"] = [{"reason": None, "message": None, **c}
                            for c in desired.get("conditions") or []]
    return {"status": status}


# --------------------------------------------------------------------------- API access

class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class Kube:
    """Raw JSON access to the API server (dicts in, dicts out), through the kubernetes client's
    connection handling and kubeconfig loading."""

    def __init__(self, kubeconfig: Path) -> None:
        cfg = Configuration()
        kube_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        cfg.connection_pool_maxsize = 64
        self.api = ApiClient(cfg)
        # What pods get in their kubeconfig: the same server, the same CA (base64 PEM).
        self.server: str = cfg.host
        self.ca_data = (base64.b64encode(Path(cfg.ssl_ca_cert).read_bytes()).decode()
                        if cfg.ssl_ca_cert else "")

    def _send(self, method: str, path: str, body: Any, query: Mapping[str, Any] | None,
              content_type: str, timeout: float | tuple[float, float]) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        m, url, hdrs, b, _ = self.api.param_serialize(
            method=method, resource_path=path,
            query_params=[(k, str(v)) for k, v in query.items()] if query else None,
            header_params=headers, body=body, auth_settings=["BearerToken"])
        try:
            return self.api.call_api(m, url, hdrs, b, _request_timeout=timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, f"{method} {path}: {exc}") from exc

    @staticmethod
    def _error(resp: Any, data: bytes) -> ApiError:
        try:
            message = json.loads(data).get("message", "")
        except (ValueError, AttributeError):
            message = data[:300].decode(errors="replace")
        return ApiError(int(resp.status), message)

    def request(self, method: str, path: str, body: Any = None, *,
                query: Mapping[str, Any] | None = None,
                content_type: str = "application/json", timeout: float = 30) -> Any:
        resp = self._send(method, path, body, query, content_type, timeout)
        try:
            data = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, f"{method} {path}: {exc}") from exc
        if not 200 <= resp.status < 300:
            raise self._error(resp, data)
        return json.loads(data) if data else None

    def patch(self, path: str, body: Any, *, strategic: bool = True) -> Any:
        ctype = ("application/strategic-merge-patch+json" if strategic
                 else "application/merge-patch+json")
        return self.request("PATCH", path, body, content_type=ctype)

    def stream(self, path: str, query: Mapping[str, Any], read_timeout: float) -> Iterator[Any]:
        resp = self._send("GET", path, None, query, "", (10, read_timeout))
        raw = resp.response
        try:
            if not 200 <= resp.status < 300:
                raise self._error(resp, resp.read())
            for line in iter_resp_lines(raw):
                if line:
                    yield json.loads(line)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, f"watch {path}: {exc}") from exc
        finally:
            raw.close()
            raw.release_conn()


def pod_path(ns: str, name: str, sub: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods/{name}" + (f"/{sub}" if sub else "")


# --------------------------------------------------------------------------- probes (I/O)

def run_probe(spec: ProbeSpec, *, pod_ip: str, env: Mapping[str, str], cwd: Path) -> bool:
    host = spec.host or pod_ip
    try:
        if spec.kind == "http":
            if spec.port is None:
                return False
            conn: http.client.HTTPConnection
            if spec.scheme == "HTTPS":
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                conn = http.client.HTTPSConnection(host, spec.port, timeout=spec.timeout,
                                                   context=ctx)
            else:
                conn = http.client.HTTPConnection(host, spec.port, timeout=spec.timeout)
            try:
                headers = {"User-Agent": "kube-probe/1.36", "Accept": "*/*",
                           **dict(spec.headers)}
                conn.request("GET", spec.path, headers=headers)
                resp = conn.getresponse()
                resp.read(64 * 1024)
                return 200 <= resp.status < 400
            finally:
                conn.close()
        if spec.kind == "tcp":
            if spec.port is None:
                return False
            with socket.create_connection((host, spec.port), timeout=spec.timeout):
                return True
        if spec.kind == "exec":
            done = subprocess.run(list(spec.command), env=dict(env), cwd=cwd,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  stdin=subprocess.DEVNULL, timeout=spec.timeout, check=False)
            return done.returncode == 0
    except (OSError, http.client.HTTPException, subprocess.TimeoutExpired):
        return False
    return True


# --------------------------------------------------------------------------- pod worker

def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


class PodWorker(threading.Thread):
    """Owns one pod (by UID) on this node: its process, probes, status and deletion."""

    def __init__(self, node: LocalNode, pod: dict[str, Any], pod_ip: str) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.node = node
        self.uid: str = meta["uid"]
        self.ns: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.pod = pod
        self.pod_ip = pod_ip
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._gone = False
        self._shutdown = False
        base = f"{self.ns}_{self.pod_name}_{self.uid}"
        self.log_path = node.log_dir / f"{base}.log"
        self.default_workdir = node.log_dir / "work" / base
        container = (pod.get("spec") or {}).get("containers", [{}])[0]
        self.container: dict[str, Any] = container
        prev = ((pod.get("status") or {}).get("containerStatuses") or [{}])[0]
        status = pod.get("status") or {}
        self.view = ContainerView(name=container.get("name", ""),
                                  image=container.get("image", ""),
                                  restart_count=int(prev.get("restartCount") or 0))
        self.attempted = bool(prev.get("state", {}).get("running")
                              or prev.get("state", {}).get("terminated")
                              or prev.get("lastState"))
        self.start_time: str = status.get("startTime") or rfc3339(time.time())
        self.finished = status.get("phase") in ("Succeeded", "Failed")
        self.proc: subprocess.Popen[bytes] | None = None
        self.proc_env: dict[str, str] = {}
        self.proc_cwd: Path = self.default_workdir
        self.started_mono = 0.0
        self.next_start = 0.0
        self.streak = 0
        self.permanent = False
        self.probes: dict[str, ProbeTracker] = {}
        self.last_sent: dict[str, Any] | None = None
        self.last_conditions: Sequence[Mapping[str, Any]] = list(status.get("conditions") or [])
        self.next_publish_retry = 0.0
        self.notes = podenv.unsupported_notes(pod)
        self.credentials_dir = self.default_workdir / "serviceaccount"
        self.token_refresh_at: float | None = None  # unix time; None: no token issued
        self.next_token_try = 0.0

    # -- called from other threads
    def update(self, pod: dict[str, Any]) -> None:
        with self._lock:
            self.pod = pod
        self._wake.set()

    def mark_gone(self) -> None:
        self._gone = True
        self._wake.set()

    def request_shutdown(self) -> None:
        self._shutdown = True
        self._wake.set()

    # -- the loop
    def run(self) -> None:
        try:
            while True:
                with self._lock:
                    pod = self.pod
                try:
                    if self._shutdown:
                        self._stop_process(min(grace_seconds(pod), self.node.shutdown_grace),
                                           "node shutting down")
                        return
                    if self._gone:
                        self._stop_process(FORCE_DELETE_GRACE, "pod was deleted")
                        return
                    if (pod.get("metadata") or {}).get("deletionTimestamp"):
                        if self._finish_deletion(pod):
                            return
                    elif not self.finished:
                        self._step(pod)
                        self._publish(pod)
                except Exception:
                    log.exception("pod %s/%s: unexpected error", self.ns, self.pod_name)
                    time.sleep(1)
                self._wake.wait(TICK if self.proc else 1.0)
                self._wake.clear()
        finally:
            self.node.worker_done(self)

    def _step(self, pod: dict[str, Any]) -> None:
        now = time.monotonic()
        if (self.token_refresh_at is not None and time.time() >= self.token_refresh_at
                and now >= self.next_token_try):
            self._refresh_credentials(pod)
        if self.proc is None:
            if self.view.terminated is None and not self.permanent and now >= self.next_start:
                self._start(pod)
            return
        rc = self.proc.poll()
        if rc is not None:
            self._on_exit(rc)
            return
        self._run_probes(now)

    def _set(self, **changes: Any) -> None:
        self.view = replace(self.view, **changes)

    def _marker(self, text: str) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as out:
            out.write(f"--- {micro_time(time.time())} localnode: {text} ---\n")

    def _fetch_sources(self) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
        cm_names, secret_names = podenv.referenced_sources(self.container)
        found: tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]] = ({}, {})
        for kind, names, into in (("configmaps", cm_names, found[0]),
                                  ("secrets", secret_names, found[1])):
            for name in names:
                try:
                    obj = self.node.kube.request(
                        "GET", f"/api/v1/namespaces/{self.ns}/{kind}/{name}")
                except ApiError as exc:
                    if exc.status == 404:
                        continue
                    raise
                into[name] = dict(obj.get("data") or {})
        return found

    def _start(self, pod: dict[str, Any]) -> None:
        ctx = podenv.PodContext(node_name=self.node.node_name, pod_ip=self.pod_ip,
                                node_memory=self.node.memory)
        try:
            configmaps, secrets = self._fetch_sources()
            pod_env = podenv.resolve_env(pod, self.container, configmaps=configmaps,
                                         secrets=secrets, ctx=ctx)
            cmd = podenv.build_command(self.container, pod_env, python=sys.executable)
        except podenv.ConfigError as exc:
            if self.view.waiting_reason != "CreateContainerConfigError":
                log.info("pod %s/%s: CreateContainerConfigError: %s", self.ns, self.pod_name, exc)
            self._set(waiting_reason="CreateContainerConfigError", waiting_message=str(exc))
            self.next_start = time.monotonic() + CONFIG_RETRY
            return
        except podenv.NoEntrypoint as exc:
            self._set(waiting_reason="NoImageEntrypoint", waiting_message=str(exc))
            self.permanent = True
            return
        except ApiError as exc:
            log.warning("pod %s/%s: reading ConfigMaps/Secrets: %s", self.ns, self.pod_name, exc)
            self.next_start = time.monotonic() + CONFIG_RETRY
            return
        service_account = podenv.token_service_account(pod)
        if service_account:
            try:
                kubeconfig = self._credentials(pod, service_account)
            except ApiError as exc:
                message = (f'MountVolume.SetUp failed for volume "kube-api-access": '
                           f"ServiceAccount {self.ns}/{service_account}: {exc}")
                if self.view.waiting_message != message:
                    log.warning("pod %s/%s: %s", self.ns, self.pod_name, message)
                self._set(waiting_reason="ContainerCreating", waiting_message=message)
                self.next_start = time.monotonic() + CONFIG_RETRY
                return
            pod_env = podenv.with_kubeconfig(pod_env, str(kubeconfig))
        # Never the node's own credentials: a pod gets KUBECONFIG from its token or its spec.
        machine = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.proc_env = podenv.process_environment(
            machine, pod_env, bin_dir=os.path.dirname(sys.executable),
            hostname=self.pod_name)
        workdir = self.container.get("workingDir")
        self.proc_cwd = Path(workdir) if workdir else self.default_workdir
        self.proc_cwd.mkdir(parents=True, exist_ok=True)
        restart_count = self.view.restart_count + (1 if self.attempted else 0)
        self.attempted = True
        self._marker(f"starting container {self.view.name} (restart {restart_count}, "
                     f"ip {self.pod_ip}): {cmd!r}")
        now_wall = rfc3339(time.time())
        try:
            proc, _rec = spawn(f"{self.ns}/{self.pod_name}", cmd, log=self.log_path,
                               env=self.proc_env, cwd=self.proc_cwd)
        except OSError as exc:
            self._marker(f"container {self.view.name} failed to start: {exc}")
            self._set(restart_count=restart_count)
            self._after_exit(Terminated(exit_code=128, reason="StartError", finished_at=now_wall,
                                        message=str(exc)), ran_for=0.0)
            return
        self.proc = proc
        self.started_mono = time.monotonic()
        log.info("pod %s/%s: started pid %d (restart %d): %s", self.ns, self.pod_name,
                 proc.pid, restart_count, cmd)
        spec = self.container
        startup = parse_probe(spec.get("startupProbe"), spec)
        self.probes = {}
        for kind, probe_spec, initial in (
            ("startup", startup, False),
            ("liveness", parse_probe(spec.get("livenessProbe"), spec), True),
            ("readiness", parse_probe(spec.get("readinessProbe"), spec), False),
        ):
            if probe_spec is not None:
                self.probes[kind] = ProbeTracker(
                    spec=probe_spec, result=initial,
                    next_due=self.started_mono + probe_spec.initial_delay)
        started = startup is None
        self._set(running_since=now_wall, container_id=f"localnode://{proc.pid}",
                  terminated=None, waiting_message=None, restart_count=restart_count,
                  started=started, ready=started and "readiness" not in self.probes)

    # -- in-cluster credentials as a kubeconfig
    def _credentials(self, pod: dict[str, Any], service_account: str) -> Path:
        """The pod's kubeconfig, with a token issued now unless the current one is still
        fresh (container restarts keep it, as the kubelet keeps the token volume)."""
        path = self.credentials_dir / "kubeconfig"
        if (self.token_refresh_at is None or time.time() >= self.token_refresh_at
                or not path.exists()):
            self._issue_token(pod, service_account)
        return path

    def _issue_token(self, pod: dict[str, Any], service_account: str) -> None:
        issued = time.time()
        resp = self.node.kube.request(
            "POST", f"/api/v1/namespaces/{self.ns}/serviceaccounts/{service_account}/token",
            podenv.token_request(pod))
        status = (resp or {}).get("status") or {}
        token = status.get("token")
        if not token:
            raise ApiError(0, "TokenRequest returned no token")
        try:
            expires = dt.datetime.fromisoformat(
                str(status.get("expirationTimestamp")).replace("Z", "+00:00")).timestamp()
        except ValueError:
            expires = issued + podenv.TOKEN_EXPIRATION_SECONDS
        kube = self.node.kube
        config = podenv.service_account_kubeconfig(
            server=kube.server, ca_data=kube.ca_data, token=token, namespace=self.ns,
            service_account=service_account)
        self.credentials_dir.mkdir(parents=True, exist_ok=True)
        ca_pem = base64.b64decode(kube.ca_data).decode() if kube.ca_data else ""
        # The files a mounted token volume has, plus the kubeconfig made of them.
        for name, text in (("token", token), ("namespace", self.ns), ("ca.crt", ca_pem),
                           ("kubeconfig", json.dumps(config, indent=1))):
            _write_private(self.credentials_dir / name, text)
        self.token_refresh_at = podenv.token_refresh_at(issued, expires)
        log.info("pod %s/%s: token for ServiceAccount %s issued, valid until %s", self.ns,
                 self.pod_name, service_account, rfc3339(expires))

    def _refresh_credentials(self, pod: dict[str, Any]) -> None:
        service_account = podenv.token_service_account(pod)
        if not service_account:
            self.token_refresh_at = None
            return
        try:
            self._issue_token(pod, service_account)
        except ApiError as exc:
            log.warning("pod %s/%s: renewing the ServiceAccount token: %s", self.ns,
                        self.pod_name, exc)
            self.next_token_try = time.monotonic() + TOKEN_RETRY

    def _run_probes(self, now: float) -> None:
        order = ("startup",) if not self.view.started else ("liveness", "readiness")
        for kind in order:
            tracker = self.probes.get(kind)
            if tracker is None or now < tracker.next_due:
                continue
            ok = run_probe(tracker.spec, pod_ip=self.pod_ip, env=self.proc_env,
                           cwd=self.proc_cwd)
            tracker.observe(ok)
            tracker.next_due = time.monotonic() + tracker.spec.period
            if kind == "startup":
                if tracker.result:
                    self._set(started=True, ready="readiness" not in self.probes)
                    for other in ("liveness", "readiness"):
                        if other in self.probes:
                            self.probes[other].next_due = max(self.probes[other].next_due, now)
                elif tracker.failures >= tracker.spec.failure_threshold:
                    self._kill_for_probe("startup", tracker)
                    return
            elif kind == "liveness" and not tracker.result:
                self._kill_for_probe("liveness", tracker)
                return
            elif kind == "readiness" and self.view.ready != tracker.result:
                log.info("pod %s/%s: ready=%s", self.ns, self.pod_name, tracker.result)
                self._set(ready=tracker.result)

    def _kill_for_probe(self, kind: str, tracker: ProbeTracker) -> None:
        grace = tracker.spec.termination_grace
        if grace is None:
            grace = grace_seconds({"spec": self.pod.get("spec")})
        log.info("pod %s/%s: %s probe failed %d times, restarting", self.ns, self.pod_name, kind,
                 tracker.failures)
        self._stop_process(grace, f"{kind} probe failed", message=f"{kind} probe failed")

    def _stop_process(self, grace: float, why: str, *, message: str | None = None,
                      restart: bool = True) -> int | None:
        """SIGTERM the process group, SIGKILL after `grace` s; record the exit."""
        proc = self.proc
        if proc is None:
            return None
        self._marker(f"stopping container {self.view.name}: {why} (SIGTERM, grace {grace:g}s)")
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=max(grace, 0.0))
        except subprocess.TimeoutExpired:
            self._marker(f"container {self.view.name} still running after {grace:g}s: SIGKILL")
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        code = self._on_exit(proc.returncode, message=message, restart=restart)
        return code

    def _on_exit(self, returncode: int, *, message: str | None = None,
                 restart: bool = True) -> int:
        proc = self.proc
        assert proc is not None
        _signal_group(proc.pid, signal.SIGKILL)  # leftovers in the container's group
        code = exit_code_of(returncode)
        self.proc = None
        ran_for = time.monotonic() - self.started_mono
        self._marker(f"container {self.view.name} exited with code {code}")
        log.info("pod %s/%s: pid %d exited with code %d after %.1fs", self.ns, self.pod_name,
                 proc.pid, code, ran_for)
        term = Terminated(exit_code=code, reason=terminated_reason(code),
                          finished_at=rfc3339(time.time()), started_at=self.view.running_since,
                          message=message, container_id=self.view.container_id)
        self._after_exit(term, ran_for=ran_for, restart=restart)
        return code

    def _after_exit(self, term: Terminated, *, ran_for: float, restart: bool = True) -> None:
        if ran_for >= BACKOFF_RESET_AFTER:
            self.streak = 0
        policy = (self.pod.get("spec") or {}).get("restartPolicy")
        if restart and should_restart(policy, term.exit_code):
            delay = restart_delay(self.streak)
            self.streak += 1
            self.next_start = time.monotonic() + delay
            self._set(running_since=None, ready=False, started=False, terminated=None,
                      last_terminated=term, waiting_reason="CrashLoopBackOff",
                      waiting_message=(f"back-off {delay:g}s restarting failed container="
                                       f"{self.view.name} pod={self.pod_name}_{self.ns}"
                                       f"({self.uid})"))
        else:
            self._set(running_since=None, ready=False, started=False, terminated=term)

    def _finish_deletion(self, pod: dict[str, Any]) -> bool:
        """Stop the process, write the final state, delete with grace 0. True when done."""
        if self.proc is not None:
            self._stop_process(grace_seconds(pod), "pod is being deleted", restart=False)
            self._publish(pod)
        try:
            self.node.kube.request(
                "DELETE", pod_path(self.ns, self.pod_name),
                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                 "preconditions": {"uid": self.uid}})
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("pod %s/%s: completing deletion: %s", self.ns, self.pod_name, exc)
                return False
        log.info("pod %s/%s: deleted", self.ns, self.pod_name)
        return True

    def _publish(self, pod: dict[str, Any]) -> None:
        if self.finished:  # terminal before this node took it: leave its status alone
            return
        desired = desired_status(pod, self.view, pod_ip=self.pod_ip, start_time=self.start_time,
                                 previous_conditions=self.last_conditions, now=time.time(),
                                 notes=self.notes)
        if desired == self.last_sent or time.monotonic() < self.next_publish_retry:
            return
        try:
            self.node.kube.patch(pod_path(self.ns, self.pod_name, "status"),
                                 status_patch(desired))
        except ApiError as exc:
            if exc.status == 404:
                self._gone = True
                return
            log.warning("pod %s/%s: status update: %s", self.ns, self.pod_name, exc)
            self.next_publish_retry = time.monotonic() + 1.0
            return
        self.last_sent = desired
        self.last_conditions = desired["conditions"]


def _write_private(path: Path, text: str) -> None:
    """Replace `path` atomically with `text`, readable by this user only."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# --------------------------------------------------------------------------- the node

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
        while not self.stopping.is_set():
            try:
                listing = self.kube.request("GET", "/api/v1/pods")
                self.resync(listing.get("items") or [])
                rv = listing["metadata"]["resourceVersion"]
                query = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                         "timeoutSeconds": WATCH_TIMEOUT}
                for event in self.kube.stream("/api/v1/pods", query, WATCH_TIMEOUT + 15):
                    if self.stopping.is_set():
                        return
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        log.info("watch ended: %s", obj.get("message"))
                        break
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self.dispatch(kind, obj)
            except ApiError as exc:
                log.warning("pod watch: %s; relisting", exc)
                self.stopping.wait(1.0)
            except Exception:
                log.exception("pod watch failed; relisting")
                self.stopping.wait(1.0)

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
                    if exc.status != 404:
                        with self._lock:
                            self._to_schedule.setdefault(pod["metadata"]["uid"], pod)

    def schedule(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        ns, name = meta["namespace"], meta["name"]
        problem = scheduling_problem(pod, self.node_name, self.labels)
        if problem:
            if needs_unschedulable_patch(pod, problem):
                log.info("pod %s/%s: unschedulable: %s", ns, name, problem)
                self.kube.patch(pod_path(ns, name, "status"), {"status": {
                    "phase": "Pending",
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


def default_ip_lock_dir() -> Path:
    return Path(tempfile.gettempdir()) / "staticfleet-localnode-ips"


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


if __name__ == "__main__":
    sys.exit(main())
