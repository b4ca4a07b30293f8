"""Pure pod status of the local node: phase, container state, conditions, the status patch."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet_dev.localnode.ids import rfc3339
from staticfleet_dev.localnode.podstatus import (
    ContainerView,
    Terminated,
    container_state,
    desired_status,
    pod_phase,
    status_patch,
)

pytestmark = pytest.mark.unit

NOW = 1_700_000_000.0


T_OK = Terminated(exit_code=0, reason="Completed", finished_at="2024-01-01T00:00:05Z",
                  started_at="2024-01-01T00:00:00Z")
T_ERR = Terminated(exit_code=2, reason="Error", finished_at="2024-01-01T00:00:05Z")
RUNNING = ContainerView(name="member", image="img", running_since="2024-01-01T00:00:00Z",
                        started=True, ready=True, container_id="localnode://42")


@pytest.mark.parametrize(("view", "phase", "state"), [
    (ContainerView(name="member"), "Pending", {"waiting": {"reason": "ContainerCreating"}}),
    (ContainerView(name="member", waiting_reason="CreateContainerConfigError",
                   waiting_message='configmap "x" not found'), "Pending",
     {"waiting": {"reason": "CreateContainerConfigError",
                  "message": 'configmap "x" not found'}}),
    (RUNNING, "Running", {"running": {"startedAt": "2024-01-01T00:00:00Z"}}),
    (ContainerView(name="member", last_terminated=T_ERR, waiting_reason="CrashLoopBackOff"),
     "Running", {"waiting": {"reason": "CrashLoopBackOff"}}),
    (ContainerView(name="member", terminated=T_OK), "Succeeded", {"terminated": T_OK.to_dict()}),
    (ContainerView(name="member", terminated=T_ERR), "Failed", {"terminated": T_ERR.to_dict()}),
])
def test_phase_and_state(view: ContainerView, phase: str, state: dict[str, Any]) -> None:
    assert pod_phase(view) == phase
    assert container_state(view) == state


def _conds(status: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    return {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}


@pytest.mark.parametrize(("view", "pod", "expected"), [
    (RUNNING, {}, {"Ready": ("True", None), "ContainersReady": ("True", None),
                   "Initialized": ("True", None), "PodScheduled": ("True", None),
                   "PodReadyToStartContainers": ("True", None)}),
    (ContainerView(name="member", running_since="t", started=True), {},
     {"Ready": ("False", "ContainersNotReady"), "ContainersReady": ("False", "ContainersNotReady"),
      "Initialized": ("True", None), "PodScheduled": ("True", None),
      "PodReadyToStartContainers": ("True", None)}),
    (RUNNING, {"spec": {"readinessGates": [{"conditionType": "x/y"}]}},
     {"Ready": ("False", "ReadinessGatesNotReady"), "ContainersReady": ("True", None),
      "Initialized": ("True", None), "PodScheduled": ("True", None),
      "PodReadyToStartContainers": ("True", None)}),
    (RUNNING, {"spec": {"readinessGates": [{"conditionType": "x/y"}]},
               "status": {"conditions": [{"type": "x/y", "status": "True"}]}},
     {"Ready": ("True", None), "ContainersReady": ("True", None), "Initialized": ("True", None),
      "PodScheduled": ("True", None), "PodReadyToStartContainers": ("True", None)}),
    (ContainerView(name="member", terminated=T_OK), {},
     {"Ready": ("False", "PodCompleted"), "ContainersReady": ("False", "PodCompleted"),
      "Initialized": ("True", "PodCompleted"), "PodScheduled": ("True", None),
      "PodReadyToStartContainers": ("False", None)}),
])
def test_conditions(view: ContainerView, pod: dict[str, Any],
                    expected: dict[str, tuple[str, str | None]]) -> None:
    status = desired_status(pod, view, pod_ip="127.0.1.2", start_time="s",
                               previous_conditions=[], now=NOW)
    assert _conds(status) == expected


def test_transition_time_kept_while_status_unchanged() -> None:
    previous = [{"type": "Ready", "status": "True", "lastTransitionTime": "earlier"},
                {"type": "ContainersReady", "status": "False", "lastTransitionTime": "earlier"}]
    status = desired_status({}, RUNNING, pod_ip="127.0.1.2", start_time="s",
                               previous_conditions=previous, now=NOW)
    times = {c["type"]: c["lastTransitionTime"] for c in status["conditions"]}
    assert times["Ready"] == "earlier"
    assert times["ContainersReady"] == rfc3339(NOW)


def test_desired_status_is_stable_and_complete() -> None:
    view = ContainerView(name="member", image="img", restart_count=2, last_terminated=T_ERR,
                         running_since="2024-01-01T00:01:00Z", started=True, ready=False,
                         container_id="localnode://9")
    a = desired_status({}, view, pod_ip="127.0.1.9", start_time="s", previous_conditions=[],
                          now=NOW, notes=["volumes are not supported"])
    b = desired_status({}, view, pod_ip="127.0.1.9", start_time="s",
                          previous_conditions=a["conditions"], now=NOW + 100,
                          notes=["volumes are not supported"])
    assert a == b
    assert a["podIP"] == "127.0.1.9" and a["podIPs"] == [{"ip": "127.0.1.9"}]
    assert a["hostIP"] == "127.0.0.1"
    assert a["message"] == "local node: volumes are not supported"
    cs = a["containerStatuses"][0]
    assert cs["restartCount"] == 2 and cs["ready"] is False and cs["started"] is True
    assert cs["lastState"] == {"terminated": T_ERR.to_dict()}


def test_a_phase_another_made_terminal_is_kept_with_its_reason_and_message() -> None:
    """An eviction (or a test that plays one): the node stops the container and keeps what
    the API says, adding the container's final state."""
    from staticfleet_dev.localnode.podstatus import ended_elsewhere

    evicted = {"phase": "Failed", "reason": "Evicted",
               "message": "The node was low on resource: memory."}
    stopped = ContainerView(name="member", terminated=T_OK)
    assert ended_elsewhere({"status": evicted})
    assert not ended_elsewhere({"status": {"phase": "Running"}})
    status = desired_status({"status": evicted}, stopped, pod_ip="127.0.1.2", start_time="s",
                            previous_conditions=[], now=NOW, notes=["volumes"],
                            ended=evicted)
    assert (status["phase"], status["reason"], status["message"]) == (
        "Failed", "Evicted", "The node was low on resource: memory."), "not Succeeded (exit 0)"
    assert _conds(status)["Ready"] == ("False", "PodCompleted")
    assert status["containerStatuses"][0]["state"] == {"terminated": T_OK.to_dict()}
    assert status_patch(status, "u-1")["status"]["message"] == evicted["message"]


def test_status_patch_nulls_left_states() -> None:
    status = desired_status({}, RUNNING, pod_ip="127.0.1.2", start_time="s",
                               previous_conditions=[], now=NOW)
    whole = status_patch(status, "u-1")
    assert whole["metadata"] == {"uid": "u-1"}, "the pod's UID is the patch's precondition"
    patch = whole["status"]
    cs = patch["containerStatuses"][0]
    assert cs["state"] == {"waiting": None, "running": {"startedAt": "2024-01-01T00:00:00Z"},
                           "terminated": None}
    assert cs["lastState"] == {"waiting": None, "running": None, "terminated": None}
    assert patch["message"] is None


def test_the_fallback_termination_message_is_the_end_of_this_runs_log() -> None:
    from staticfleet_dev.localnode.podstatus import fallback_termination_message

    log = ("--- t localnode: starting container member (restart 0) ---\n"
           "old run said this\n"
           "--- t localnode: container member exited with code 2 ---\n"
           "--- t localnode: starting container member (restart 1) ---\n"
           + "".join(f"line {i}\n" for i in range(100))
           + "consumer_runtime: configuration refused: processing.transform: cannot import\n"
           "--- t localnode: container member exited with code 2 ---\n")
    message = fallback_termination_message(log)
    assert message.endswith("configuration refused: processing.transform: cannot import")
    assert "old run" not in message and "localnode" not in message
    assert len(message.splitlines()) == 80
    assert len(fallback_termination_message("x" * 5000).encode()) == 2048
