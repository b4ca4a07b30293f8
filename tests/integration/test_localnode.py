"""The local node against the real control plane: binding, environment, probes, restarts,
deletion and scheduling refusals, with real processes."""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from staticfleet import apply as kube_apply
from staticfleet.decisions.names import ACTIVATED_ANNOTATION
from staticfleet_dev import environment
from staticfleet_dev.localnode.api import ApiError, Kube, pod_path
from staticfleet_dev.localnode.podstatus import status_patch
from staticfleet_dev.procs import ProcessRecord
from staticfleet_dev.testkit import poll
from staticfleet_dev.testkit.kube import create_namespace, get_json, kubectl, to_yaml
from tests.support import unique

pytestmark = pytest.mark.integration

NODE = environment.NODE_NAME


@pytest.fixture
def ns(kubeconfig: Path, local_node: ProcessRecord) -> Iterator[str]:
    name = unique("ln")
    create_namespace(kubeconfig, name)
    yield name
    kubectl(kubeconfig, "delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def pod_log(local_env: environment.LocalEnv) -> Callable[[dict[str, Any]], str]:
    """The local node's output file of a pod (all runs)."""

    def read(pod: dict[str, Any]) -> str:
        m = pod["metadata"]
        path = local_env.pod_log_dir / f"{m['namespace']}_{m['name']}_{m['uid']}.log"
        return path.read_text() if path.exists() else f"(no log at {path})"

    return read


wait_for = partial(poll.wait_for, timeout=30.0, interval=0.1)
"""The local node starts and stops plain processes: its tests poll ten times a second."""


def python_pod(name: str, code: str, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "member", "image": "local/none",
                                 "command": ["python", "-c", textwrap.dedent(code)]}
    container.update(spec.pop("container", {}))
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"terminationGracePeriodSeconds": 5, "containers": [container], **spec}}


def apply(kubeconfig: Path, ns: str, *objs: dict[str, Any]) -> None:
    kubectl(kubeconfig, "-n", ns, "apply", "-f", "-",
            input="\n---\n".join(to_yaml(o) for o in objs))


def get_pod(kubeconfig: Path, ns: str, name: str) -> dict[str, Any] | None:
    proc = kubectl(kubeconfig, "-n", ns, "get", "pod", name, "-o", "json", check=False)
    if proc.returncode != 0:
        if "NotFound" in proc.stderr:
            return None
        raise AssertionError(proc.stderr)
    return dict(json.loads(proc.stdout))


def condition(pod: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for c in ((pod or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return {}


def container_status(pod: dict[str, Any] | None) -> dict[str, Any]:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def is_ready(pod: dict[str, Any] | None) -> bool:
    return condition(pod, "Ready").get("status") == "True"


def test_node_registered_ready_untainted_with_lease(kubeconfig: Path,
                                                   local_node: ProcessRecord) -> None:
    node = get_json(kubeconfig, "node", NODE)
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == NODE
    assert labels["kubernetes.io/os"] == "linux"
    assert node["status"]["capacity"]["cpu"] == "2"
    assert node["status"]["capacity"]["pods"] == "110"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]
    assert condition(node, "Ready")["status"] == "True"
    assert not node["spec"].get("taints"), node["spec"].get("taints")
    before = get_json(kubeconfig, "-n", "kube-node-lease", "lease", NODE)["spec"]["renewTime"]
    wait_for("the node Lease to be renewed", lambda: get_json(
        kubeconfig, "-n", "kube-node-lease", "lease", NODE)["spec"]["renewTime"] != before,
        timeout=15, interval=0.5)


def test_environment_from_all_sources(kubeconfig: Path, ns: str, tmp_path: Path,
                                      pod_log: Callable[[dict[str, Any]], str]) -> None:
    out = tmp_path / "env.json"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
          "data": {"key": "cm-value", "FROM_ENVFROM": "cm-all"}}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"},
              "data": {"password": base64.b64encode(b"hunter2").decode(),
                       "TOKEN": base64.b64encode(b"tok").decode()}}
    pod = python_pod("envpod", """
        import json, os, shutil, sys, time
        data = dict(os.environ)
        data["_argv"] = sys.argv[1:]
        data["_executable"] = sys.executable
        data["_which_staticfleet"] = shutil.which("staticfleet")
        data["_cwd"] = os.getcwd()
        with open(data["OUT"] + ".tmp", "w") as f:
            json.dump(data, f)
        os.rename(data["OUT"] + ".tmp", data["OUT"])
        time.sleep(3600)
    """, container={
        "args": ["$(LITERAL)", "$$(LITERAL)", "$(UNDEFINED)"],
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CM_"},
                    {"secretRef": {"name": "sec"}}],
        "env": [
            {"name": "OUT", "value": str(out)},
            {"name": "LITERAL", "value": "lit-$(CM_key)"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE",
             "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "CM_KEY", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "key"}}},
            {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}},
            {"name": "OPTIONAL", "valueFrom": {"secretKeyRef": {
                "name": "absent", "key": "x", "optional": True}}},
            {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {
                "resource": "limits.memory", "divisor": "1Mi"}}},
        ]})
    apply(kubeconfig, ns, cm, secret, pod)
    env = json.loads(wait_for("the pod to write its environment",
                              lambda: out.exists() and out.read_text(), timeout=30))
    live = wait_for("the pod to be Ready", lambda: (p := get_pod(kubeconfig, ns, "envpod"))
                    and is_ready(p) and p)
    assert live["spec"]["nodeName"] == NODE
    assert live["status"]["phase"] == "Running"
    pod_ip = live["status"]["podIP"]
    assert pod_ip.startswith("127.0.") and pod_ip != "127.0.0.1"
    assert live["status"]["hostIP"] == "127.0.0.1"
    assert env["POD_NAME"] == "envpod" and env["POD_NAMESPACE"] == ns
    assert env["POD_UID"] == live["metadata"]["uid"]
    assert env["APP"] == "envpod" and env["POD_IP"] == pod_ip and env["NODE"] == NODE
    assert env["CM_KEY"] == "cm-value" and env["CM_FROM_ENVFROM"] == "cm-all"
    assert env["SECRET"] == "hunter2" and env["TOKEN"] == "tok"
    assert "OPTIONAL" not in env
    assert int(env["MEM_MI"]) > 0
    assert env["LITERAL"] == "lit-cm-value"
    assert env["_argv"] == ["lit-cm-value", "$(LITERAL)", "$(UNDEFINED)"]
    assert env["HOSTNAME"] == "envpod"
    assert env["_executable"] == sys.executable, pod_log(live)
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    assert env["_which_staticfleet"] == os.path.join(os.path.dirname(sys.executable),
                                                     "staticfleet")
    assert "localnode: starting container member" in pod_log(live)


READY_AFTER = """
    import http.server, os, time
    start = time.monotonic()
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = time.monotonic() - start > float(os.environ["READY_AFTER"])
            self.send_response(200 if ok else 503)
            self.end_headers()
        def log_message(self, *args):
            pass
    http.server.HTTPServer((os.environ["POD_IP"], 8080), H).serve_forever()
"""


def server_container(ready_after: float, **probe: Any) -> dict[str, Any]:
    return {
        "ports": [{"name": "http", "containerPort": 8080}],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "READY_AFTER", "value": str(ready_after)}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 1,
                           "failureThreshold": 1, **probe},
    }


def test_ready_follows_http_readiness_probe(kubeconfig: Path, ns: str) -> None:
    t0 = time.monotonic()
    apply(kubeconfig, ns, python_pod("web", READY_AFTER, container=server_container(3.0)),
          python_pod("web2", READY_AFTER, container=server_container(0.0)))
    running = wait_for("web Running", lambda: (p := get_pod(kubeconfig, ns, "web"))
                       and p["status"].get("phase") == "Running" and p)
    t_running = time.monotonic() - t0
    assert not is_ready(running), "Ready before the probe answered 200"
    assert condition(running, "ContainersReady")["status"] == "False"
    wait_for("web Ready", lambda: is_ready(get_pod(kubeconfig, ns, "web")), timeout=20)
    t_ready = time.monotonic() - t0
    assert t_ready >= 3.0
    print(f"create -> Running {t_running:.2f}s, -> Ready (server ready after 3s) {t_ready:.2f}s")
    web2 = wait_for("web2 Ready", lambda: (p := get_pod(kubeconfig, ns, "web2")) and is_ready(p)
                    and p)
    web = get_pod(kubeconfig, ns, "web")
    assert web is not None
    # both listen on 8080, each on its own loopback address
    assert web["status"]["podIP"] != web2["status"]["podIP"]
    assert container_status(web)["ready"] is True
    assert container_status(web)["started"] is True
    # no write storm: probes keep passing, nothing changes, so the pod is not rewritten
    version = web["metadata"]["resourceVersion"]
    time.sleep(3)
    again = get_pod(kubeconfig, ns, "web")
    assert again is not None and again["metadata"]["resourceVersion"] == version


def test_restart_always_counts_restarts(kubeconfig: Path, ns: str,
                                        pod_log: Callable[[dict[str, Any]], str]) -> None:
    apply(kubeconfig, ns, python_pod("crash", """
        import sys, time
        print("run", flush=True)
        time.sleep(0.3)
        sys.exit(3)
    """))
    pod = wait_for("two restarts", lambda: (p := get_pod(kubeconfig, ns, "crash"))
                   and container_status(p).get("restartCount", 0) >= 2 and p, timeout=30)
    cs = container_status(pod)
    assert cs["lastState"]["terminated"]["exitCode"] == 3
    assert cs["lastState"]["terminated"]["reason"] == "Error"
    assert pod["status"]["phase"] == "Running"
    log = pod_log(pod)
    assert log.count("localnode: starting container") >= 3, log
    assert "exited with code 3" in log


@pytest.mark.parametrize(("policy", "code", "phase"), [
    ("Never", 0, "Succeeded"), ("Never", 4, "Failed"), ("OnFailure", 0, "Succeeded"),
])
def test_run_to_completion(kubeconfig: Path, ns: str, policy: str, code: int,
                           phase: str) -> None:
    apply(kubeconfig, ns, python_pod("job", f"import sys; sys.exit({code})",
                                     restartPolicy=policy))
    pod = wait_for(f"phase {phase}", lambda: (p := get_pod(kubeconfig, ns, "job"))
                   and p["status"].get("phase") == phase and p)
    cs = container_status(pod)
    assert cs["state"]["terminated"]["exitCode"] == code
    assert cs["restartCount"] == 0
    assert condition(pod, "Ready")["status"] == "False"


TERM_MARKER = """
    import os, signal, sys, time
    def on_term(*_):
        if os.environ["ON_TERM"] == "exit":
            open(os.environ["MARKER"], "w").write("SIGTERM")
            sys.exit(0)
        open(os.environ["MARKER"], "w").write("ignored SIGTERM")
    signal.signal(signal.SIGTERM, on_term)
    open(os.environ["PIDFILE"], "w").write(str(os.getpid()))
    while True:
        time.sleep(0.05)
"""


def term_pod(name: str, tmp_path: Path, on_term: str, grace: int) -> dict[str, Any]:
    return python_pod(name, TERM_MARKER, terminationGracePeriodSeconds=grace, container={"env": [
        {"name": "MARKER", "value": str(tmp_path / f"{name}.marker")},
        {"name": "PIDFILE", "value": str(tmp_path / f"{name}.pid")},
        {"name": "ON_TERM", "value": on_term}]})


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_delete_sends_sigterm_and_removes_pod(kubeconfig: Path, ns: str, tmp_path: Path) -> None:
    apply(kubeconfig, ns, term_pod("term", tmp_path, "exit", 10))
    pidfile = tmp_path / "term.pid"
    pid = int(wait_for("the process to start", lambda: pidfile.exists() and pidfile.read_text()))
    uid = get_json(kubeconfig, "-n", ns, "pod", "term")["metadata"]["uid"]
    t0 = time.monotonic()
    kubectl(kubeconfig, "-n", ns, "delete", "pod", "term", "--wait=false")
    wait_for("the pod to disappear", lambda: get_pod(kubeconfig, ns, "term") is None)
    gone = time.monotonic() - t0
    print(f"delete -> gone {gone:.2f}s")
    assert gone < 5, "a process that exits on SIGTERM should not wait out its grace period"
    assert (tmp_path / "term.marker").read_text() == "SIGTERM"
    assert not pid_alive(pid)
    # a new pod with the same name is a new process (new uid), not touched by the old deletion
    apply(kubeconfig, ns, term_pod("term", tmp_path, "exit", 10))
    new = wait_for("the new pod Ready", lambda: (p := get_pod(kubeconfig, ns, "term"))
                   and is_ready(p) and p)
    assert new["metadata"]["uid"] != uid


def test_process_ignoring_sigterm_is_killed_after_grace(kubeconfig: Path, ns: str,
                                                        tmp_path: Path,
                                                        pod_log: Callable[[dict[str, Any]], str]
                                                        ) -> None:
    apply(kubeconfig, ns, term_pod("stubborn", tmp_path, "ignore", 2))
    pidfile = tmp_path / "stubborn.pid"
    pid = int(wait_for("the process to start", lambda: pidfile.exists() and pidfile.read_text()))
    pod = get_json(kubeconfig, "-n", ns, "pod", "stubborn")
    t0 = time.monotonic()
    kubectl(kubeconfig, "-n", ns, "delete", "pod", "stubborn", "--wait=false")
    wait_for("the pod to disappear", lambda: get_pod(kubeconfig, ns, "stubborn") is None,
             timeout=20)
    gone = time.monotonic() - t0
    assert 2.0 <= gone < 8.0, gone
    assert (tmp_path / "stubborn.marker").read_text() == "ignored SIGTERM"
    assert not pid_alive(pid)
    log = pod_log(pod)
    assert "SIGKILL" in log and "exited with code 137" in log, log


def test_a_phase_set_failed_by_another_stops_the_process_and_stays(
        kubeconfig: Path, ns: str, tmp_path: Path) -> None:
    """An eviction as the kubelet reports it, written through pods/status by someone else: the
    node stops the container for good (no restart under restartPolicy Always) and keeps the
    phase, reason and message, as a kubelet keeps a terminal phase."""
    apply(kubeconfig, ns, term_pod("evicted", tmp_path, "exit", 10))
    pidfile = tmp_path / "evicted.pid"
    pid = int(wait_for("the process to start", lambda: pidfile.exists() and pidfile.read_text()))
    wait_for("Ready", lambda: is_ready(get_pod(kubeconfig, ns, "evicted")))
    message = "The node was low on resource: memory. Threshold quantity: 100Mi."
    kubectl(kubeconfig, "-n", ns, "patch", "pod", "evicted", "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": {
                "phase": "Failed", "reason": "Evicted", "message": message}}))
    wait_for("the process to stop", lambda: not pid_alive(pid), timeout=15)
    assert (tmp_path / "evicted.marker").read_text() == "SIGTERM"
    pod = wait_for("the container's final state", lambda: (p := get_pod(kubeconfig, ns, "evicted"))
                   and "terminated" in container_status(p).get("state", {}) and p)
    assert (pod["status"]["phase"], pod["status"]["reason"], pod["status"]["message"]) == (
        "Failed", "Evicted", message)
    assert condition(pod, "Ready")["status"] == "False"
    time.sleep(3)  # a restart (back-off 1 s) would show by now
    after = get_pod(kubeconfig, ns, "evicted")
    assert after is not None and after["status"]["phase"] == "Failed"
    assert container_status(after)["restartCount"] == 0
    assert pidfile.read_text() == str(pid), "the container was started again"


def test_a_status_meant_for_a_deleted_pod_never_lands_on_a_new_pod_of_its_name(
        kubeconfig: Path, ns: str) -> None:
    """The node sends each pod's status with the pod's UID as a precondition, as the kubelet's
    status manager does: when the operator deletes an ended pod (a terminal pod goes at once)
    and makes a new one of its name while the node still reports on the old one, the API
    server refuses the old pod's status (422: the UID is immutable) instead of writing it over
    the new pod. Without
    it the new pod read Failed (CI at a707b4a, test_operator's eviction case)."""
    apply(kubeconfig, ns, python_pod("reborn", "import time; time.sleep(3600)"))
    wait_for("Ready", lambda: is_ready(get_pod(kubeconfig, ns, "reborn")))
    stale = {"phase": "Failed", "message": "the deleted pod's last status", "conditions": [],
             "containerStatuses": []}
    with pytest.raises(ApiError) as refused:
        Kube(kubeconfig).patch(pod_path(ns, "reborn", "status"),
                               status_patch(stale, "00000000-0000-4000-8000-000000000000"))
    assert refused.value.status == 422 and "metadata.uid" in str(refused.value), refused.value
    time.sleep(1)
    pod = get_pod(kubeconfig, ns, "reborn")
    assert pod is not None and pod["status"]["phase"] == "Running", pod
    assert is_ready(pod)


def test_missing_configmap_waits_then_runs(kubeconfig: Path, ns: str) -> None:
    apply(kubeconfig, ns, python_pod("needscm", "import time; time.sleep(3600)", container={
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "late", "key": "x"}}}]}))
    pod = wait_for("CreateContainerConfigError", lambda: (p := get_pod(kubeconfig, ns, "needscm"))
                   and container_status(p).get("state", {}).get("waiting", {}).get("reason")
                   == "CreateContainerConfigError" and p)
    assert 'configmap "late" not found' in container_status(pod)["state"]["waiting"]["message"]
    assert pod["status"]["phase"] == "Pending"
    apply(kubeconfig, ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late"},
                           "data": {"x": "1"}})
    wait_for("the pod Ready once the ConfigMap exists",
             lambda: is_ready(get_pod(kubeconfig, ns, "needscm")), timeout=20)


def test_node_selector_mismatch_stays_pending_unschedulable(kubeconfig: Path, ns: str) -> None:
    apply(kubeconfig, ns, python_pod("nowhere", "pass", nodeSelector={"disktype": "ssd"}),
          python_pod("here", "import time; time.sleep(3600)",
                     nodeSelector={"kubernetes.io/hostname": NODE}))
    pod = wait_for("PodScheduled=False", lambda: (p := get_pod(kubeconfig, ns, "nowhere"))
                   and condition(p, "PodScheduled").get("reason") == "Unschedulable" and p)
    assert condition(pod, "PodScheduled")["status"] == "False"
    assert "node affinity/selector" in condition(pod, "PodScheduled")["message"]
    wait_for("the matching pod Ready", lambda: is_ready(get_pod(kubeconfig, ns, "here")))
    pod = get_pod(kubeconfig, ns, "nowhere")
    assert pod is not None
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")


def test_liveness_failure_restarts_container(kubeconfig: Path, ns: str) -> None:
    container = server_container(3600.0)
    container["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": "http"},
                                  "periodSeconds": 1, "failureThreshold": 2}
    container["readinessProbe"]["periodSeconds"] = 5
    apply(kubeconfig, ns, python_pod("unhealthy", READY_AFTER, container=container,
                                     terminationGracePeriodSeconds=1))
    pod = wait_for("a liveness restart", lambda: (p := get_pod(kubeconfig, ns, "unhealthy"))
                   and container_status(p).get("restartCount", 0) >= 1 and p, timeout=30)
    assert container_status(pod)["lastState"]["terminated"]["message"] == "liveness probe failed"


def test_command_is_required(kubeconfig: Path, ns: str) -> None:
    pod = python_pod("noentry", "pass")
    del pod["spec"]["containers"][0]["command"]
    apply(kubeconfig, ns, pod)
    live = wait_for("NoImageEntrypoint", lambda: (p := get_pod(kubeconfig, ns, "noentry"))
                    and container_status(p).get("state", {}).get("waiting", {}).get("reason")
                    == "NoImageEntrypoint" and p)
    assert "local node runs command only" in container_status(live)["state"]["waiting"]["message"]


RECORD_EACH_START = """
    import json, os, time
    with open(os.environ["OUT"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "activated": os.environ["ACTIVATED"]}) + "\\n")
    time.sleep(3600)
"""


def test_a_restarted_container_reads_the_pods_annotations_as_they_are_then(
        kubeconfig: Path, ns: str, tmp_path: Path) -> None:
    """A kubelet resolves env fieldRefs at each container start, so a container restarted in
    place sees the pod's annotations as they are then. A warm handoff's replacement relies on
    it: the operator's apply layer marks it activated (`annotate_pod`), and a restart of its
    container after that reads STATICFLEET_ACTIVATED=true and joins the group directly."""
    out = tmp_path / "starts.jsonl"
    apply(kubeconfig, ns, python_pod("marked", RECORD_EACH_START, container={"env": [
        {"name": "OUT", "value": str(out)},
        {"name": "ACTIVATED", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{ACTIVATED_ANNOTATION}']"}}}]}))

    def starts() -> list[dict[str, Any]]:
        return [json.loads(ln) for ln in out.read_text().splitlines()] if out.exists() else []

    (first,) = wait_for("the first start", starts)
    assert first["activated"] == "", "no annotation yet: empty, as a kubelet resolves it"
    pod = get_pod(kubeconfig, ns, "marked")
    assert pod is not None
    kube = kube_apply.Kube(kube_apply.load_client(str(kubeconfig)))
    try:
        assert not kube.annotate_pod(ns, "marked", "a-newer-pods-uid",
                                     {ACTIVATED_ANNOTATION: "true"}), "only the pod of that uid"
        assert kube.annotate_pod(ns, "marked", pod["metadata"]["uid"],
                                 {ACTIVATED_ANNOTATION: "true"})
        assert not kube.annotate_pod(ns, "no-such-pod", "uid", {ACTIVATED_ANNOTATION: "true"})
    finally:
        kube.close()
    marked = get_pod(kubeconfig, ns, "marked")
    assert marked is not None
    assert marked["metadata"]["annotations"][ACTIVATED_ANNOTATION] == "true"
    assert len(starts()) == 1, "an annotation restarts nothing"
    # The watch brings the annotation within milliseconds; the restart comes after the 1 s
    # back-off.
    os.kill(first["pid"], signal.SIGKILL)
    second = wait_for("the restart in place", lambda: (s := starts()) and len(s) > 1 and s[1])
    assert second["activated"] == "true"
    after = wait_for("restartCount 1", lambda: (p := get_pod(kubeconfig, ns, "marked"))
                     and container_status(p).get("restartCount") == 1 and p)
    assert after["metadata"]["uid"] == pod["metadata"]["uid"], "the same pod, restarted in place"
    assert container_status(after)["lastState"]["terminated"]["exitCode"] == 137


WRITES_ITS_LAST_WORDS = """
    import os, sys
    print("a long log\\n" * 200, flush=True)
    with open(os.environ["STATICFLEET_TERMINATION_MESSAGE_PATH"], "w") as f:
        f.write("ValueError: the reason, in the container's own words")
    sys.exit(3)
"""


@pytest.mark.parametrize("policy", ["File", "FallbackToLogsOnError"])
def test_the_termination_message_is_what_the_container_wrote(kubeconfig: Path, ns: str,
                                                             policy: str) -> None:
    """The local node honours terminationMessagePath as a kubelet does: each container start
    gets an empty file of its own (named in STATICFLEET_TERMINATION_MESSAGE_PATH, as it cannot
    mount one), read at the exit into the state's message; the log's end only stands in when
    nothing was written (FallbackToLogsOnError)."""
    apply(kubeconfig, ns, python_pod("says", WRITES_ITS_LAST_WORDS, restartPolicy="Never",
                                     container={"terminationMessagePolicy": policy}))
    pod = wait_for("phase Failed", lambda: (p := get_pod(kubeconfig, ns, "says"))
                   and p["status"].get("phase") == "Failed" and p)
    terminated = container_status(pod)["state"]["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["message"] == "ValueError: the reason, in the container's own words"


def test_a_secret_volume_is_projected_and_updated_in_place(kubeconfig: Path, ns: str,
                                                           tmp_path: Path) -> None:
    """What a member's token needs (docs/contracts.md): the Secret's files before the container
    starts (it waits for a missing Secret, as with a kubelet), the path in the environment
    pointed at them, and a change of the Secret seen by the running process (no restart); a
    Secret deleted meanwhile leaves the files as they were."""
    seen = tmp_path / "seen.txt"
    mount = "/var/run/secrets/example.io/tok"
    code = f"""
        import os, time
        path = os.environ["TOKEN_FILE"]
        while True:
            with open(path) as f:
                text = f.read()
            with open({str(seen)!r} + ".tmp", "w") as out:
                out.write(path + "\\n" + text)
            os.replace({str(seen)!r} + ".tmp", {str(seen)!r})
            time.sleep(0.2)
    """
    pod = python_pod("vol", code, container={
        "env": [{"name": "TOKEN_FILE", "value": f"{mount}/token"}],
        "volumeMounts": [{"name": "tok", "mountPath": mount, "readOnly": True}]},
        volumes=[{"name": "tok", "secret": {"secretName": "tok"}}])

    def secret(value: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tok"},
                "data": {"token": base64.b64encode(value.encode()).decode()}}

    def read_seen() -> tuple[str, str] | None:
        try:
            path, text = seen.read_text().split("\n", 1)
        except (OSError, ValueError):
            return None
        return path, text

    apply(kubeconfig, ns, pod)
    waiting = wait_for("the container waiting for its Secret volume", lambda: (
        p := get_pod(kubeconfig, ns, "vol")) and container_status(p).get("state", {}).get(
            "waiting", {}).get("reason") == "ContainerCreating" and p)
    assert container_status(waiting)["state"]["waiting"]["message"] == (
        'MountVolume.SetUp failed for volume "tok" : secret "tok" not found')
    apply(kubeconfig, ns, secret("first"))
    path, _ = wait_for("the process reading the projected file",
                       lambda: (s := read_seen()) and s[1] == "first" and s, timeout=20)
    running = get_pod(kubeconfig, ns, "vol")
    assert not path.startswith(mount) and path.endswith("/volumes/tok/token"), path
    assert "tok:" not in (running or {}).get("status", {}).get("message", ""), (
        "a Secret volume is not among what the node ignores")
    apply(kubeconfig, ns, secret("second"))
    wait_for("the change seen by the running process",
             lambda: (s := read_seen()) and s[1] == "second", timeout=20)
    kubectl(kubeconfig, "-n", ns, "delete", "secret", "tok")
    time.sleep(6)  # more than one refresh of the volume (every 5 s)
    assert read_seen() == (path, "second"), "a deleted Secret leaves the files as they were"
    after = get_pod(kubeconfig, ns, "vol")
    assert container_status(after)["restartCount"] == 0 and is_ready(after)
