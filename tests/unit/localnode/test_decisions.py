"""Pure decisions of the local node: back-off, restarts, scheduling, IPs, probes, status."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet_dev import localnode as ln
from staticfleet_dev.localnode import ContainerView, ProbeSpec, ProbeTracker, Terminated

pytestmark = pytest.mark.unit

NOW = 1_700_000_000.0
LABELS = ln.node_labels("local-node")


@pytest.mark.parametrize(("streak", "delay"), [(0, 1), (1, 2), (2, 4), (4, 16), (5, 30), (50, 30)])
def test_restart_delay(streak: int, delay: float) -> None:
    assert ln.restart_delay(streak) == delay


@pytest.mark.parametrize(("policy", "code", "restart"), [
    ("Always", 0, True), ("Always", 1, True), (None, 0, True),
    ("OnFailure", 0, False), ("OnFailure", 3, True),
    ("Never", 0, False), ("Never", 1, False),
])
def test_should_restart(policy: str | None, code: int, restart: bool) -> None:
    assert ln.should_restart(policy, code) is restart


@pytest.mark.parametrize(("rc", "code"), [(0, 0), (3, 3), (-15, 143), (-9, 137)])
def test_exit_code_of(rc: int, code: int) -> None:
    assert ln.exit_code_of(rc) == code


@pytest.mark.parametrize(("pod", "grace"), [
    ({}, 30.0),
    ({"spec": {"terminationGracePeriodSeconds": 5}}, 5.0),
    ({"metadata": {"deletionGracePeriodSeconds": 2}, "spec": {"terminationGracePeriodSeconds": 5}},
     2.0),
    ({"metadata": {"deletionGracePeriodSeconds": 0}}, 0.0),
])
def test_grace_seconds(pod: dict[str, Any], grace: float) -> None:
    assert ln.grace_seconds(pod) == grace


@pytest.mark.parametrize(("pod", "wanted"), [
    ({"spec": {}}, True),
    ({"spec": {"schedulerName": "default-scheduler"}}, True),
    ({"spec": {"schedulerName": "other"}}, False),
    ({"spec": {"nodeName": "x"}}, False),
    ({"spec": {}, "metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}}, False),
    ({"spec": {}, "status": {"phase": "Failed"}}, False),
])
def test_wants_binding(pod: dict[str, Any], wanted: bool) -> None:
    assert ln.wants_binding(pod) is wanted


def _affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}


def _expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


@pytest.mark.parametrize(("spec", "fits"), [
    ({}, True),
    ({"nodeSelector": {"kubernetes.io/os": "linux"}}, True),
    ({"nodeSelector": {"kubernetes.io/hostname": "local-node", "kubernetes.io/os": "linux"}}, True),
    ({"nodeSelector": {"disktype": "ssd"}}, False),
    ({"nodeSelector": {"kubernetes.io/os": "windows"}}, False),
    ({"affinity": _affinity({"matchExpressions": [_expr("kubernetes.io/os", "In", "linux")]})},
     True),
    ({"affinity": _affinity({"matchExpressions": [_expr("kubernetes.io/os", "NotIn", "linux")]})},
     False),
    ({"affinity": _affinity({"matchExpressions": [_expr("gpu", "Exists")]},
                            {"matchExpressions": [_expr("gpu", "DoesNotExist")]})}, True),
    ({"affinity": _affinity({"matchExpressions": [_expr("gpu", "Exists")]})}, False),
    ({"affinity": _affinity({"matchFields": [_expr("metadata.name", "In", "local-node")]})}, True),
    ({"affinity": _affinity({"matchFields": [_expr("metadata.name", "In", "other")]})}, False),
    ({"affinity": _affinity({})}, False),
    ({"affinity": {"podAntiAffinity": {}}}, True),
])
def test_scheduling_problem(spec: dict[str, Any], fits: bool) -> None:
    problem = ln.scheduling_problem({"spec": spec}, "local-node", LABELS)
    assert (problem is None) is fits
    if not fits:
        assert "didn't match Pod's node affinity/selector" in str(problem)


@pytest.mark.parametrize(("conditions", "needed"), [
    ([], True),
    ([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}],
     False),
    ([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "old"}],
     True),
])
def test_needs_unschedulable_patch(conditions: list[dict[str, str]], needed: bool) -> None:
    assert ln.needs_unschedulable_patch({"status": {"conditions": conditions}}, "m") is needed


@pytest.mark.parametrize(("used", "ip"), [
    (set(), "127.0.1.2"),
    ({"127.0.1.2", "127.0.1.3"}, "127.0.1.4"),
    ({"127.0.1.3"}, "127.0.1.2"),
    ({f"127.0.1.{i}" for i in range(2, 255)}, "127.0.2.1"),
])
def test_next_pod_ip(used: set[str], ip: str) -> None:
    assert ln.next_pod_ip(used) == ip


def test_next_pod_ip_exhausted() -> None:
    assert ln.next_pod_ip({"127.0.1.2"}, first="127.0.1.2", last="127.0.1.2") is None


@pytest.mark.parametrize(("ip", "inside"), [
    ("127.0.1.2", True), ("127.0.1.1", False), ("127.0.0.1", False), ("127.0.2.0", False),
    ("10.0.0.1", False), (None, False), ("junk", False),
])
def test_in_pod_range(ip: str | None, inside: bool) -> None:
    assert ln.in_pod_range(ip) is inside


CONTAINER = {"ports": [{"name": "http", "containerPort": 8080}]}


@pytest.mark.parametrize(("probe", "expected"), [
    (None, None),
    ({"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 1},
     ProbeSpec(kind="http", port=8080, path="/readyz", period=1.0)),
    ({"httpGet": {"port": 9000, "scheme": "https", "httpHeaders": [{"name": "X", "value": "y"}]},
      "failureThreshold": 1, "successThreshold": 2, "timeoutSeconds": 3, "initialDelaySeconds": 4},
     ProbeSpec(kind="http", port=9000, scheme="HTTPS", headers=(("X", "y"),), failure_threshold=1,
               success_threshold=2, timeout=3.0, initial_delay=4.0)),
    ({"tcpSocket": {"port": "8080"}}, ProbeSpec(kind="tcp", port=8080)),
    ({"httpGet": {"port": "nope"}}, ProbeSpec(kind="http", port=None)),
    ({"exec": {"command": ["true"]}, "terminationGracePeriodSeconds": 7},
     ProbeSpec(kind="exec", command=("true",), termination_grace=7.0)),
    ({"grpc": {"port": 1}}, ProbeSpec(kind="unsupported")),
])
def test_parse_probe(probe: dict[str, Any] | None, expected: ProbeSpec | None) -> None:
    assert ln.parse_probe(probe, CONTAINER) == expected


@pytest.mark.parametrize(("initial", "success", "failure", "results", "verdicts"), [
    (False, 1, 3, [True], [True]),
    (False, 2, 3, [True, True], [False, True]),
    (False, 2, 3, [True, False, True, True], [False, False, False, True]),
    (True, 1, 3, [False, False, False], [True, True, False]),
    (True, 1, 3, [False, False, True, False], [True, True, True, True]),
    (True, 1, 1, [False, True], [False, True]),
])
def test_probe_tracker(initial: bool, success: int, failure: int, results: list[bool],
                       verdicts: list[bool]) -> None:
    tracker = ProbeTracker(spec=ProbeSpec(kind="http", success_threshold=success,
                                          failure_threshold=failure), result=initial)
    seen = []
    for ok in results:
        tracker.observe(ok)
        seen.append(tracker.result)
    assert seen == verdicts


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
    assert ln.pod_phase(view) == phase
    assert ln.container_state(view) == state


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
    status = ln.desired_status(pod, view, pod_ip="127.0.1.2", start_time="s",
                               previous_conditions=[], now=NOW)
    assert _conds(status) == expected


def test_transition_time_kept_while_status_unchanged() -> None:
    previous = [{"type": "Ready", "status": "True", "lastTransitionTime": "earlier"},
                {"type": "ContainersReady", "status": "False", "lastTransitionTime": "earlier"}]
    status = ln.desired_status({}, RUNNING, pod_ip="127.0.1.2", start_time="s",
                               previous_conditions=previous, now=NOW)
    times = {c["type"]: c["lastTransitionTime"] for c in status["conditions"]}
    assert times["Ready"] == "earlier"
    assert times["ContainersReady"] == ln.rfc3339(NOW)


def test_desired_status_is_stable_and_complete() -> None:
    view = ContainerView(name="member", image="img", restart_count=2, last_terminated=T_ERR,
                         running_since="2024-01-01T00:01:00Z", started=True, ready=False,
                         container_id="localnode://9")
    a = ln.desired_status({}, view, pod_ip="127.0.1.9", start_time="s", previous_conditions=[],
                          now=NOW, notes=["volumes are not supported"])
    b = ln.desired_status({}, view, pod_ip="127.0.1.9", start_time="s",
                          previous_conditions=a["conditions"], now=NOW + 100,
                          notes=["volumes are not supported"])
    assert a == b
    assert a["podIP"] == "127.0.1.9" and a["podIPs"] == [{"ip": "127.0.1.9"}]
    assert a["hostIP"] == "127.0.0.1"
    assert a["message"] == "local node: volumes are not supported"
    cs = a["containerStatuses"][0]
    assert cs["restartCount"] == 2 and cs["ready"] is False and cs["started"] is True
    assert cs["lastState"] == {"terminated": T_ERR.to_dict()}


def test_status_patch_nulls_left_states() -> None:
    status = ln.desired_status({}, RUNNING, pod_ip="127.0.1.2", start_time="s",
                               previous_conditions=[], now=NOW)
    patch = ln.status_patch(status)["status"]
    cs = patch["containerStatuses"][0]
    assert cs["state"] == {"waiting": None, "running": {"startedAt": "2024-01-01T00:00:00Z"},
                           "terminated": None}
    assert cs["lastState"] == {"waiting": None, "running": None, "terminated": None}
    assert patch["message"] is None
