"""Pure pod status of the local node: what it knows of the pod's container (`ContainerView`),
the phase, container state and conditions derived from it, the status it wants the API to show,
and the strategic merge patch that makes the status so."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from staticfleet_dev.localnode.ids import HOST_IP, rfc3339


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


TERMINAL_PHASES = ("Succeeded", "Failed")


def ended_elsewhere(pod: Mapping[str, Any]) -> bool:
    """The pod's phase in the API is terminal. A pod never leaves such a phase: when another
    actor set it (an eviction, the pod GC on a node out of service, a test playing an
    eviction), the kubelet keeps that phase and stops the pod's containers for good."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def desired_status(pod: Mapping[str, Any], view: ContainerView, *, pod_ip: str,
                   start_time: str, previous_conditions: Sequence[Mapping[str, Any]], now: float,
                   notes: list[str] | None = None,
                   ended: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The pod status this node wants the API to show (no timestamps that move by themselves).
    `ended`: the pod's status as another actor made it terminal (`ended_elsewhere`); its phase,
    reason and message are kept, as the kubelet keeps them."""
    phase = str(ended["phase"]) if ended else pod_phase(view)
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
    for key in ("reason", "message"):
        if ended and ended.get(key):
            status[key] = ended[key]
    return status


def status_patch(desired: Mapping[str, Any], uid: str) -> dict[str, Any]:
    """A strategic merge patch that makes the status `desired`: states we left are nulled.
    The pod's `uid` goes in as a precondition, as the kubelet's status manager sends it: a
    status meant for a deleted pod never lands on a new pod made under its name (the API
    server refuses it: 422, the UID being immutable)."""
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
    return {"metadata": {"uid": uid}, "status": status}


TERMINATION_MESSAGE_FILE_BYTES = 4096
TERMINATION_MESSAGE_LINES = 80
TERMINATION_MESSAGE_BYTES = 2048
START_MARKER = "localnode: starting container"


def fallback_termination_message(log_text: str) -> str:
    """What a kubelet keeps for `terminationMessagePolicy: FallbackToLogsOnError` when the
    container failed without writing a termination message: the end of this run's log (at most
    80 lines and 2 KiB), without the local node's own marker lines."""
    start = log_text.rfind(START_MARKER)
    if start >= 0:
        log_text = log_text[log_text.find("\n", start) + 1:]
    lines = [ln for ln in log_text.splitlines() if not ln.startswith("--- ")]
    text = "\n".join(lines[-TERMINATION_MESSAGE_LINES:])
    return text.encode()[-TERMINATION_MESSAGE_BYTES:].decode(errors="ignore")


def termination_message(written: str, policy: str | None, exit_code: int,
                        log_text: str) -> str | None:
    """A container's termination message as a kubelet keeps it: what the container wrote to
    its `terminationMessagePath` (at most 4 KiB); with nothing written, for
    `FallbackToLogsOnError` and a failed container, the end of this run's log."""
    if written.strip():
        return written.encode()[:TERMINATION_MESSAGE_FILE_BYTES].decode(errors="ignore")
    if policy == "FallbackToLogsOnError" and exit_code != 0:
        return fallback_termination_message(log_text) or None
    return None
