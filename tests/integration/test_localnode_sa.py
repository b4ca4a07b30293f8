"""The local node hands pods their ServiceAccount's credentials as a kubeconfig (it cannot mount
the token volume): RBAC applies to the pod as to a pod on a real kubelet."""

from __future__ import annotations

import base64
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from staticfleet_dev.procs import ProcessRecord
from staticfleet_dev.testkit.kube import create_namespace, get_json, kubectl, to_yaml
from staticfleet_dev.testkit.poll import wait_for
from tests.support import unique

pytestmark = pytest.mark.integration

# Runs inside the pod: what it sees, and what kubectl may do with its credentials.
PROBE = """
import json, os, subprocess, sys
out = {"KUBECONFIG": os.environ.get("KUBECONFIG")}
for what in ("pods", "secrets"):
    p = subprocess.run(["kubectl", "get", what, "-o", "name"], capture_output=True, text=True,
                       timeout=60)
    out[what] = {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}
kc = out["KUBECONFIG"]
out["kubeconfig"] = open(kc).read() if kc and os.path.exists(kc) else None
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
"""


@pytest.fixture
def ns(kubeconfig: Path, local_node: ProcessRecord) -> Iterator[str]:
    name = unique("sa")
    create_namespace(kubeconfig, name)
    yield name
    kubectl(kubeconfig, "delete", "namespace", name, "--wait=false", check=False)


def apply(kubeconfig: Path, ns: str, *objs: dict[str, Any]) -> None:
    kubectl(kubeconfig, "-n", ns, "apply", "-f", "-",
            input="\n---\n".join(to_yaml(o) for o in objs))


def probe_pod(name: str, out: Path, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "probe", "image": "local/none",
                                 "command": ["python", "-c", textwrap.dedent(PROBE), str(out)]}
    container.update(spec.pop("container", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
                     "containers": [container], **spec}}


def run_to_completion(kubeconfig: Path, ns: str, name: str, out: Path,
                      timeout: float = 120) -> tuple[dict[str, Any], dict[str, Any]]:
    pod: dict[str, Any] = {}

    def finished() -> bool:
        nonlocal pod
        pod = get_json(kubeconfig, "-n", ns, "pod", name)
        return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    wait_for(f"{name} to finish", finished, timeout, interval=0.3,
             describe=lambda: json.dumps(pod.get("status")))
    assert pod.get("status", {}).get("phase") == "Succeeded", json.dumps(pod.get("status"))
    return pod, json.loads(out.read_text())


def jwt_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def test_pod_gets_its_service_accounts_rights_and_no_more(kubeconfig: Path, ns: str,
                                                          tmp_path: Path) -> None:
    apply(kubeconfig, ns,
          {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}},
          {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
           "metadata": {"name": "pod-reader"},
           "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
          {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": "pod-reader"},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                       "name": "pod-reader"},
           "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]})
    out = tmp_path / "reader.json"
    apply(kubeconfig, ns, probe_pod("reader", out, serviceAccountName="reader"))

    pod, seen = run_to_completion(kubeconfig, ns, "reader", out)

    assert seen["pods"]["rc"] == 0, seen["pods"]
    assert "pod/reader" in seen["pods"]["stdout"].split()  # its own namespace by default
    assert seen["secrets"]["rc"] != 0
    assert "Forbidden" in seen["secrets"]["stderr"], seen["secrets"]
    assert f"system:serviceaccount:{ns}:reader" in seen["secrets"]["stderr"]
    # The kubeconfig: the node's server and CA, the token bound to this very pod.
    config = json.loads(seen["kubeconfig"])
    admin = json.loads(kubectl(kubeconfig, "config", "view", "--raw", "-o", "json").stdout)
    assert config["clusters"][0]["cluster"] == {
        "server": admin["clusters"][0]["cluster"]["server"],
        "certificate-authority-data": admin["clusters"][0]["cluster"][
            "certificate-authority-data"]}
    claims = jwt_claims(config["users"][0]["user"]["token"])
    assert claims["sub"] == f"system:serviceaccount:{ns}:reader"
    assert claims["kubernetes.io"]["pod"] == {"name": "reader", "uid": pod["metadata"]["uid"]}
    # 3607 s is the kubelet's request, which the API server extends (to a year by default).
    assert claims["exp"] - claims["iat"] >= 3607
    assert Path(seen["KUBECONFIG"]).name == "kubeconfig"


def test_default_service_account_when_none_is_named(kubeconfig: Path, ns: str,
                                                    tmp_path: Path) -> None:
    out = tmp_path / "default.json"
    apply(kubeconfig, ns, probe_pod("plain", out))

    _pod, seen = run_to_completion(kubeconfig, ns, "plain", out)

    assert seen["KUBECONFIG"], "a pod with the default ServiceAccount gets credentials too"
    assert f"system:serviceaccount:{ns}:default" in seen["pods"]["stderr"]  # no rights at all
    assert "Forbidden" in seen["pods"]["stderr"]


def test_no_token_when_automount_is_off_or_kubeconfig_is_set(kubeconfig: Path, ns: str,
                                                             tmp_path: Path) -> None:
    off, own = tmp_path / "off.json", tmp_path / "own.json"
    mine = tmp_path / "my-kubeconfig"
    apply(kubeconfig, ns,
          probe_pod("off", off, automountServiceAccountToken=False),
          probe_pod("own", own, container={"env": [{"name": "KUBECONFIG", "value": str(mine)}]}))

    _pod, seen_off = run_to_completion(kubeconfig, ns, "off", off)
    _pod, seen_own = run_to_completion(kubeconfig, ns, "own", own)

    # Neither a token nor the node's own (admin) KUBECONFIG.
    assert seen_off["KUBECONFIG"] is None
    assert seen_own["KUBECONFIG"] == str(mine)
    assert seen_own["pods"]["rc"] != 0  # the pod's own (missing) kubeconfig, not a token
