"""The Helm chart against the real control plane: lint, a server-side dry-run of every rendering,
and a real `helm install` whose operator pod runs under the local node with the chart's own
ServiceAccount (the local node hands it a TokenRequest token as a kubeconfig), so a ConsumerGroup
becoming Ready and scaling down proves the chart's RBAC is enough: the every-namespace install
(`watchNamespaces: ["*"]`), whose operator creates the members' token Secret without any `patch`
on Secrets, and makes the members' NetworkPolicy in the group's namespace (accepted by the API
server, its selectors matching the real pods; the environment has no CNI, so nothing enforces
it). The same
install carries the users' aggregated roles, which the kube-controller-manager's ClusterRole
aggregation controller folds into `view`, `edit` and `admin`.

The session's admin operator (the `operator` fixture) must not run next to the chart's operator:
this module never requests it, and stops it for the duration when another module started it.
"""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from staticfleet_dev import build, environment, versions
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.procs import ProcessRecord
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import REPO, create_namespace, get_json, kubectl
from staticfleet_dev.testkit.poll import wait_for
from staticfleet_dev.tools import tail
from tests.support import unique

pytestmark = pytest.mark.integration

CHART = REPO / "charts" / "staticfleet"
MONITORING_CRDS = REPO / "tests" / "fixtures" / "monitoring-crds-minimal.yaml"
KUBE_VERSION = versions.KUBERNETES_VERSION.lstrip("v")


@pytest.fixture(scope="module")
def helm() -> Path:
    return build.helm_bin() / "helm"


def run(cmd: list[str | Path], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, check=False)


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.args}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def monitoring_crds(kubeconfig: Path) -> None:
    """Minimal monitoring.coreos.com CRDs (a test fixture, see the file's header)."""
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(MONITORING_CRDS))
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
            "crd/servicemonitors.monitoring.coreos.com", "crd/podmonitors.monitoring.coreos.com",
            "crd/prometheusrules.monitoring.coreos.com")


@pytest.fixture(scope="module")
def peering_crds(kubeconfig: Path) -> None:
    """kopf's peering CRDs (crds/kopf-peering/), which peering.enabled needs."""
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(REPO / "crds" / "kopf-peering"))
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
            "crd/clusterkopfpeerings.kopf.dev", "crd/kopfpeerings.kopf.dev")


@pytest.fixture
def release_ns(kubeconfig: Path) -> Iterator[str]:
    name = unique("sf-sys")
    create_namespace(kubeconfig, name)
    yield name
    kubectl(kubeconfig, "delete", "namespace", name, "--wait=false", check=False)


def test_helm_lint(helm: Path) -> None:
    ok(run([helm, "lint", "--strict", CHART]))
    ok(run([helm, "lint", "--strict", CHART, "--set", "watchNamespaces={a,b}",
            "--set", "serviceMonitor.enabled=true", "--set", "memberPodMonitor.enabled=true",
            "--set", "prometheusRule.enabled=true", "--set", "grafanaDashboard.enabled=true"]))


FEATURES = {
    "defaults": [],
    "every namespace": ["--set", "watchNamespaces={*}"],
    "watchNamespaces": ["--set", "watchNamespaces={WATCHED}"],
    "networkPolicy own sources": [
        "--set-json", 'networkPolicy.prometheus=[{"namespaceSelector":{"matchExpressions":'
                      '[{"key":"team","operator":"In","values":["obs"]}]},"podSelector":{}}]',
        "--set-json", 'networkPolicy.extraFrom=[{"ipBlock":{"cidr":"10.9.0.0/16",'
                      '"except":["10.9.1.0/24"]}},{"podSelector":{"matchLabels":{"debug":"1"}}}]'],
    "no networkPolicy, no user roles": ["--set", "watchNamespaces={WATCHED}",
                                        "--set", "networkPolicy.enabled=false",
                                        "--set", "rbac.aggregateClusterRoles=false"],
    "serviceMonitor": ["--set", "serviceMonitor.enabled=true"],
    "memberPodMonitor": ["--set", "memberPodMonitor.enabled=true"],
    "memberPodMonitor+watchNamespaces": ["--set", "memberPodMonitor.enabled=true",
                                         "--set", "watchNamespaces={WATCHED}"],
    "prometheusRule": ["--set", "prometheusRule.enabled=true",
                       "--set", "prometheusRule.ruleLabels.team=kafka",
                       "--set", "prometheusRule.alerts.StaticfleetIdleMembers.enabled=false"],
    "grafanaDashboard": ["--set", "grafanaDashboard.enabled=true"],
    "shards, peering": ["--set", "shards={b,c}", "--set", "peering.enabled=true",
                        "--set", "replicaCount=2"],
    "shards, peering, watchNamespaces": ["--set", "shards={b}", "--set", "peering.enabled=true",
                                         "--set", "watchNamespaces={WATCHED}"],
    "no rbac, existing serviceaccount": ["--set", "rbac.create=false",
                                         "--set", "serviceAccount.create=false",
                                         "--set", "serviceAccount.name=default"],
}


@pytest.mark.parametrize("feature", list(FEATURES))
def test_every_rendering_passes_a_server_side_dry_run(
    helm: Path, kubeconfig: Path, crds: None, monitoring_crds: None, peering_crds: None,
    release_ns: str, feature: str,
) -> None:
    watched = unique("watched")
    create_namespace(kubeconfig, watched)
    try:
        args = [a.replace("WATCHED", watched) for a in FEATURES[feature]]
        manifest = ok(run([helm, "template", "sf", CHART, "--namespace", release_ns,
                           "--kube-version", KUBE_VERSION, *args]))
        kinds = sorted(d["kind"] for d in yaml.safe_load_all(manifest) if d)
        out = kubectl(kubeconfig, "apply", "--dry-run=server", "-f", "-", input=manifest).stdout
        assert out.count("(server dry run)") == len(kinds), out
        assert "Deployment" in kinds
        # The members' NetworkPolicy is the operator's to make, beside each group.
        assert "NetworkPolicy" not in kinds
    finally:
        kubectl(kubeconfig, "delete", "namespace", watched, "--wait=false", check=False)


def test_the_operator_pod_meets_the_restricted_pod_security_standard(
    helm: Path, kubeconfig: Path, release_ns: str,
) -> None:
    """The Deployment's pod, as the chart renders it by default, is admitted by a namespace
    that enforces `restricted`; the same pod without the chart's security contexts is refused
    (so the admission is what decides). Server-side dry runs of the pod itself: PodSecurity
    only warns about a Deployment, it enforces on pods."""
    kubectl(kubeconfig, "label", "namespace", release_ns,
            "pod-security.kubernetes.io/enforce=restricted")
    manifest = ok(run([helm, "template", "sf", CHART, "--namespace", release_ns,
                       "--kube-version", KUBE_VERSION]))
    (deployment,) = [d for d in yaml.safe_load_all(manifest) if d and d["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    # The chart's ServiceAccount is not installed here; the pod's security is the question.
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "operator", "labels": template["metadata"]["labels"]},
        "spec": {**template["spec"], "serviceAccountName": "default"}}

    def create(obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return kubectl(kubeconfig, "-n", release_ns, "create", "--dry-run=server", "-f", "-",
                       input=yaml.safe_dump(obj), check=False)

    admitted = create(pod)
    assert admitted.returncode == 0, admitted.stderr
    bare = {**pod, "spec": {**pod["spec"], "securityContext": {}, "containers": [
        {k: v for k, v in c.items() if k != "securityContext"}
        for c in pod["spec"]["containers"]]}}
    refused = create(bare)
    assert refused.returncode != 0 and 'violates PodSecurity "restricted:latest"' in (
        refused.stderr), refused.stderr


def test_schema_refuses_bad_values_at_install(helm: Path, kubeconfig: Path, crds: None,
                                             release_ns: str) -> None:
    proc = run([helm, "install", "sf", CHART, "--kubeconfig", kubeconfig,
                "--namespace", release_ns, "--set", "replicaCount=2"])
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema(s)" in proc.stderr, proc.stderr
    assert "at '/replicaCount': value must be 1" in proc.stderr, proc.stderr
    assert run([helm, "status", "sf", "--kubeconfig", kubeconfig,
                "--namespace", release_ns]).returncode != 0, "a release was recorded"


# --- a real install -----------------------------------------------------------------------------

def can_i(kubeconfig: Path, sa: str, verb: str, resource: str, *args: str) -> bool:
    proc = kubectl(kubeconfig, "auth", "can-i", verb, resource, f"--as={sa}", *args,
                   check=False)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), f"can-i {verb} {resource}: {proc.stdout}{proc.stderr}"
    return answer == "yes"


def can_all(kubeconfig: Path, checks: Sequence[tuple[str, ...]]) -> list[bool]:
    """`can_i` of each (user, verb, resource, kubectl args...), asked side by side (each is a
    kubectl process and a request), in the order given."""
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda check: can_i(kubeconfig, *check), checks))


def http_get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def label_selector(selector: dict[str, Any]) -> str:
    """A NetworkPolicy's matchLabels as a `-l` selector (the chart uses matchLabels only)."""
    assert set(selector) == {"matchLabels"}, selector
    return ",".join(f"{k}={v}" for k, v in sorted(selector["matchLabels"].items()))


def check_network_policy(kubeconfig: Path, namespace: str, release_ns: str, group: str,
                         operator_pod: dict[str, Any]) -> None:
    """The policy the operator made in the group's namespace, as the API server stored it: owned
    by the group, it selects exactly the group's member pods and admits the real operator pod by
    its namespace's and its own labels."""
    (policy,) = get_json(kubeconfig, "-n", namespace, "networkpolicies")["items"]
    assert policy["metadata"]["name"] == f"{group}-members"
    owner = groups.get(kubeconfig, namespace, group)
    assert [r["uid"] for r in policy["metadata"]["ownerReferences"]] == [
        owner["metadata"]["uid"]]
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    selected = get_json(kubeconfig, "-n", namespace, "pods", "-l",
                        label_selector(spec["podSelector"]))["items"]
    members = groups.pods(kubeconfig, namespace, group)
    assert members and sorted(p["metadata"]["name"] for p in selected) == sorted(
        p["metadata"]["name"] for p in members)
    (rule,) = spec["ingress"]
    # The named port is the members' container port.
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    for member in members:
        assert {"name": "http", "containerPort": 8080, "protocol": "TCP"} in member["spec"][
            "containers"][0]["ports"]
    operator_peer = rule["from"][0]
    ns_labels = get_json(kubeconfig, "namespace", release_ns)["metadata"]["labels"]
    assert operator_peer["namespaceSelector"]["matchLabels"].items() <= ns_labels.items()
    assert operator_peer["podSelector"]["matchLabels"].items() <= (
        operator_pod["metadata"]["labels"].items())
    # No other pod of the release namespace, nor any pod of the group's, matches the operator.
    admitted = get_json(kubeconfig, "-n", release_ns, "pods", "-l",
                        label_selector(operator_peer["podSelector"]))["items"]
    assert [p["metadata"]["name"] for p in admitted] == [operator_pod["metadata"]["name"]]


def check_token_secret(kubeconfig: Path, namespace: str, group: str) -> None:
    """The members' token Secret, made by the operator under the chart's ServiceAccount (which
    may not patch Secrets): created, never applied, owned by the group, holding a token."""
    secret = get_json(kubeconfig, "-n", namespace, "secret", f"{group}-member-token",
                      "--show-managed-fields")
    assert secret["data"]["token"]
    owner = groups.get(kubeconfig, namespace, group)
    assert [r["uid"] for r in secret["metadata"]["ownerReferences"]] == [
        owner["metadata"]["uid"]]
    writes = [(f["manager"], f["operation"]) for f in secret["metadata"]["managedFields"]]
    assert writes == [("staticfleet", "Update")], writes


def bind_builtin_roles(kubeconfig: Path, namespace: str) -> dict[str, str]:
    """Users bound to the built-in view, edit and admin ClusterRoles in `namespace`, once the
    aggregation controller has folded the chart's roles into them; checks what each may do."""
    users = {role: f"{role}-user-{namespace}" for role in ("view", "edit", "admin")}
    for role, user in users.items():
        kubectl(kubeconfig, "-n", namespace, "create", "rolebinding", f"{role}-user",
                f"--clusterrole={role}", f"--user={user}")

    def rules_of(role: str) -> dict[str, set[str]]:
        rules = get_json(kubeconfig, "clusterrole", role).get("rules") or []
        out: dict[str, set[str]] = {}
        for rule in rules:
            if "staticfleet.io" in rule.get("apiGroups", ()):
                for resource in rule["resources"]:
                    out.setdefault(resource, set()).update(rule["verbs"])
        return out

    def aggregated() -> bool:
        edit, admin = rules_of("edit"), rules_of("admin")
        return all("create" in r.get("consumergroups", ()) and "update" in r.get(
            "consumergroups/scale", ()) for r in (edit, admin)) and "watch" in rules_of(
            "view").get("consumergroups", ())

    wait_for("the consumergroups rules aggregated into view, edit and admin", aggregated, 60)
    view = rules_of("view")
    assert view == {r: {"get", "list", "watch"} for r in (
        "consumergroups", "consumergroups/status", "consumergroups/scale")}, view
    ns = ("-n", namespace)
    cg = "consumergroups.staticfleet.io"
    checks: tuple[tuple[str, str, str, tuple[str, ...], bool], ...] = (
        (users["view"], "list", cg, (), True),
        (users["view"], "watch", cg, (), True),
        (users["view"], "create", cg, (), False),
        (users["view"], "update", cg, ("--subresource=scale",), False),
        (users["edit"], "create", cg, (), True),
        (users["edit"], "delete", cg, (), True),
        (users["edit"], "patch", cg, ("--subresource=scale",), True),
        (users["edit"], "patch", cg, ("--subresource=status",), False),
        (users["admin"], "deletecollection", cg, (), True),
        (users["admin"], "update", cg, ("--subresource=status",), False),
    )
    answers = can_all(kubeconfig, [(user, verb, resource, *extra, *ns)
                                   for user, verb, resource, extra, _ in checks])
    for (user, verb, resource, extra, allowed), answer in zip(checks, answers, strict=True):
        assert answer is allowed, f"{user} {verb} {resource} {extra}: expected {allowed}"
    return users


def test_install_runs_the_operator_under_its_own_service_account(
    helm: Path, kubeconfig: Path, kafka: KafkaBroker, crds: None, local_node: ProcessRecord,
    local_env: environment.LocalEnv, no_admin_operator: None, release_ns: str, namespace: str,
    make_topic: Callable[..., str], tmp_path: Path,
) -> None:
    release = "sf"
    fullname = "sf-staticfleet"
    sa = f"system:serviceaccount:{release_ns}:{fullname}"
    values = tmp_path / "values.yaml"
    # Every namespace (the group is in another one), the members' NetworkPolicy on (the
    # default), resyncing sooner.
    values.write_text(yaml.safe_dump({
        "watchNamespaces": ["*"],
        "extraEnv": [{"name": "STATICFLEET_RESYNC_SECONDS", "value": "5"}]}))
    helm_args: list[str | Path] = ["--kubeconfig", kubeconfig, "--namespace", release_ns]

    def operator_log() -> str:
        logs = sorted(local_env.pod_log_dir.glob(f"{release_ns}_{fullname}-*.log"))
        return "\n".join(f"--- {p.name} ---\n{tail(p, 60)}" for p in logs)

    try:
        ok(run([helm, "install", release, CHART, *helm_args, "--values", values,
                "--wait", "--timeout", "240s"], timeout=300))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{operator_log()}") from None
    try:
        # The Deployment's pod: made by kube-controller-manager, run by the local node.
        pods = get_json(kubeconfig, "-n", release_ns, "pods", "-l",
                        f"app.kubernetes.io/instance={release}")["items"]
        assert len(pods) == 1
        pod = pods[0]
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert pod["spec"]["serviceAccountName"] == fullname
        ip = pod["status"]["podIP"]
        # Metrics and health on the pod's IP, not on every interface.
        metrics = wait_for("metrics on the pod IP",
                           lambda: http_get(f"http://{ip}:8080/metrics"), 30)
        assert "staticfleet_" in metrics
        assert http_get(f"http://{ip}:8081/healthz") is not None
        # `$(POD_IP)` expanded in the args: the local node's start marker shows the command.
        assert f"'--metrics-host={ip}'" in operator_log(), operator_log()

        # A ConsumerGroup reconciled by that operator, which holds only the chart's RBAC.
        topic = make_topic("chart", 2)
        name = unique("chart")
        groups.apply(kubeconfig, namespace, groups.consumer_group(
            name, kafka.bootstrap, topic, replicas=2))
        try:
            groups.wait_status(kubeconfig, namespace, name, groups.ready, 300, "Ready")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{operator_log()}") from None
        assert len(groups.pods(kubeconfig, namespace, name)) == 2
        wait_for("the group in the operator's metrics",
                 lambda: f'namespace="{namespace}"' in (
                     http_get(f"http://{ip}:8080/metrics") or ""), 30)
        log = operator_log()
        assert "Forbidden" not in log and " 403" not in log, log

        check_network_policy(kubeconfig, namespace, release_ns, name, pod)
        check_token_secret(kubeconfig, namespace, name)
        # A user holding the built-in `edit` scales the group through the aggregated role; the
        # operator, with the chart's RBAC only, asks the member to leave and deletes its pod.
        alice = bind_builtin_roles(kubeconfig, namespace)["edit"]
        kubectl(kubeconfig, "-n", namespace, "scale", "cg", name, "--replicas=1",
                f"--as={alice}")
        try:
            groups.wait_status(kubeconfig, namespace, name, lambda cg: groups.ready(cg) and len(
                groups.pods(kubeconfig, namespace, name)) == 1, 180, "Ready with 1 member")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{operator_log()}") from None
        log = operator_log()
        assert "Forbidden" not in log and " 403" not in log, log

        # What the ServiceAccount may do, and what it may not (docs/security.md).
        may: tuple[tuple[str, ...], ...] = (
            ("create", "pods", "-n", namespace),
            ("delete", "pods", "-n", namespace),
            ("patch", "pods", "-n", namespace),
            ("patch", "consumergroups.staticfleet.io", "--subresource=status", "-n", namespace),
            # The autoscaler's write of spec.replicas (spec.autoscaling).
            ("patch", "consumergroups.staticfleet.io", "--subresource=scale", "-n", namespace),
            ("update", "consumergroups.staticfleet.io", "--subresource=finalizers",
             "-n", namespace),
            ("create", "events", "-n", namespace),
            ("create", "poddisruptionbudgets.policy", "-n", namespace),
            # The children are watched (by label), so one someone changes is applied again.
            ("list", "configmaps", "-n", namespace),
            ("watch", "services", "-n", namespace),
            ("watch", "poddisruptionbudgets.policy", "-n", namespace),
            ("watch", "networkpolicies.networking.k8s.io", "-n", namespace),
            ("get", "secrets", "-n", namespace),
            # The members' token Secret <group>-member-token, created when missing.
            ("create", "secrets", "-n", namespace),
            # The members' NetworkPolicy <group>-members, server-side applied.
            ("create", "networkpolicies.networking.k8s.io", "-n", namespace),
            ("patch", "networkpolicies.networking.k8s.io", "-n", namespace),
            ("list", "customresourcedefinitions.apiextensions.k8s.io"),
        )
        may_not: tuple[tuple[str, ...], ...] = (
            ("watch", "namespaces"),
            ("delete", "namespaces"),
            ("update", "customresourcedefinitions.apiextensions.k8s.io"),
            ("delete", "customresourcedefinitions.apiextensions.k8s.io"),
            ("list", "secrets", "-n", "kube-system"),
            ("delete", "secrets", "-n", namespace),
            # No Secret can be changed: the token Secret is created once, never patched.
            ("patch", "secrets", "-n", namespace),
            ("update", "secrets", "-n", namespace),
            ("get", "networkpolicies.networking.k8s.io", "-n", namespace),
            ("delete", "networkpolicies.networking.k8s.io", "-n", namespace),
            ("get", "configmaps", "-n", namespace),
            ("delete", "services", "-n", namespace),
            ("update", "consumergroups.staticfleet.io", "-n", namespace),
            ("create", "events.events.k8s.io", "-n", namespace),
            ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
            ("create", "serviceaccounts", "--subresource=token", "-n", release_ns),
            ("delete", "consumergroups.staticfleet.io", "-n", namespace),
        )
        answers = can_all(kubeconfig, [(sa, *check) for check in (*may, *may_not)])
        for (verb, resource, *_), answer in zip(may, answers[:len(may)], strict=True):
            assert answer, f"cannot {verb} {resource}"
        for (verb, resource, *_), answer in zip(may_not, answers[len(may):], strict=True):
            assert not answer, f"may {verb} {resource}"
        # NOTE: in the all-namespaces mode the ClusterRole grants `get secrets` in every
        # namespace (kube-system included): the operator reads the Kafka credentials a group
        # references, and RBAC cannot narrow `get` to those. watchNamespaces confines it
        # (test_watch_namespaces_rbac_confines_secrets); docs/security.md says so.
        assert can_i(kubeconfig, sa, "get", "secrets", "-n", "kube-system")
    finally:
        uninstall = run([helm, "uninstall", release, *helm_args, "--wait", "--timeout", "120s"])
    ok(uninstall)
    # The operator is gone, its RBAC too; the CRD stays (Helm never deletes CRDs), and so do the
    # ConsumerGroup and its members, which run on without the operator.
    wait_for("the operator pod to go", lambda: not get_json(
        kubeconfig, "-n", release_ns, "pods", "-l", f"app.kubernetes.io/instance={release}"
    )["items"], 60)
    assert kubectl(kubeconfig, "-n", release_ns, "get", "deploy,sa,svc", "-o", "name").stdout \
        .split() == ["serviceaccount/default"]
    assert kubectl(kubeconfig, "get", "clusterrole", fullname, check=False).returncode != 0
    # The members' NetworkPolicy is the group's child: it stays with the group.
    assert [p["metadata"]["name"] for p in get_json(
        kubeconfig, "-n", namespace, "networkpolicies")["items"]] == [f"{name}-members"]
    # The aggregated roles went with the release, and the controller took their rules out of
    # `edit` again.
    wait_for("consumergroups gone from the built-in edit role", lambda: not can_i(
        kubeconfig, alice, "create", "consumergroups.staticfleet.io", "-n", namespace), 30)
    assert kubectl(kubeconfig, "get", "crd", "consumergroups.staticfleet.io").returncode == 0
    assert groups.get(kubeconfig, namespace, name)["metadata"]["name"] == name
    assert not can_i(kubeconfig, sa, "create", "pods", "-n", namespace)


def test_watch_namespaces_rbac_confines_secrets(helm: Path, kubeconfig: Path, crds: None,
                                                release_ns: str) -> None:
    """The RBAC of the watchNamespaces mode, applied without the operator (no second operator
    may run): Secrets readable in the watched namespace only, nothing namespaced elsewhere."""
    watched = unique("watched")
    create_namespace(kubeconfig, watched)
    fullname = f"rb-{release_ns}"[:40]
    sa = f"system:serviceaccount:{release_ns}:{fullname}"
    manifest = ok(run([helm, "template", "rb", CHART, "--namespace", release_ns,
                       "--kube-version", KUBE_VERSION, "--set", f"fullnameOverride={fullname}",
                       "--set", f"watchNamespaces={{{watched}}}",
                       "--show-only", "templates/rbac.yaml",
                       "--show-only", "templates/serviceaccount.yaml"]))
    try:
        kubectl(kubeconfig, "apply", "-f", "-", input=manifest)
        assert can_i(kubeconfig, sa, "get", "secrets", "-n", watched)
        assert can_i(kubeconfig, sa, "create", "pods", "-n", watched)
        assert can_i(kubeconfig, sa, "patch", "consumergroups.staticfleet.io",
                     "--subresource=status", "-n", watched)
        assert not can_i(kubeconfig, sa, "get", "secrets", "-n", "kube-system")
        assert not can_i(kubeconfig, sa, "list", "secrets", "-n", watched)
        assert not can_i(kubeconfig, sa, "create", "pods", "-n", "default")
        assert not can_i(kubeconfig, sa, "watch", "namespaces")
        assert can_i(kubeconfig, sa, "list", "customresourcedefinitions.apiextensions.k8s.io")
    finally:
        kubectl(kubeconfig, "delete", "-f", "-", "--wait=false", input=manifest, check=False)
        kubectl(kubeconfig, "delete", "namespace", watched, "--wait=false", check=False)


def _operator_args(kubeconfig: Path, namespace: str, deployment: str) -> list[str]:
    deploy = get_json(kubeconfig, "-n", namespace, "deployment", deployment)
    return list(deploy["spec"]["template"]["spec"]["containers"][0]["args"])


def test_an_upgrade_keeps_an_install_that_watches_every_namespace(
    helm: Path, kubeconfig: Path, crds: None, release_ns: str,
) -> None:
    """A release that watches every namespace (earlier charts' default; here installed with
    `watchNamespaces={*}`, which makes the same ClusterRole and ClusterRoleBinding), upgraded
    with the value empty (the defaults, as an upgrade from those charts brings it), keeps every
    namespace: the chart finds its ClusterRoleBinding (lookup) and NOTES.txt says so. A fresh
    install with the value empty watches its own namespace. The operator pods never run (a
    nodeSelector no node has): this is about what Helm writes."""
    release = "up"
    fullname = f"up-{release_ns}"[:40]
    pending = ["--set-string", "nodeSelector.staticfleet-test/nowhere=true",
               "--set", f"fullnameOverride={fullname}"]
    helm_args: list[str | Path] = ["--kubeconfig", kubeconfig, "--namespace", release_ns]
    fresh = f"{release}-fresh"
    try:
        ok(run([helm, "install", release, CHART, *helm_args, *pending,
                "--set", "watchNamespaces={*}"]))
        assert "--all-namespaces" in _operator_args(kubeconfig, release_ns, fullname)
        notes = ok(run([helm, "upgrade", release, CHART, *helm_args, *pending]))
        assert "--all-namespaces" in _operator_args(kubeconfig, release_ns, fullname)
        assert kubectl(kubeconfig, "get", "clusterrolebinding", fullname, check=False
                       ).returncode == 0
        assert "It watched every namespace before this upgrade and still does" in notes
        # Narrowing is a value said out loud: the release's namespace by name.
        ok(run([helm, "upgrade", release, CHART, *helm_args, *pending,
                "--set", f"watchNamespaces={{{release_ns}}}"]))
        assert _operator_args(kubeconfig, release_ns, fullname)[0] == f"--namespace={release_ns}"
        assert kubectl(kubeconfig, "get", "clusterrolebinding", fullname, check=False
                       ).returncode != 0
        # A fresh install, value empty: its own namespace, whatever else the cluster holds.
        ok(run([helm, "install", fresh, CHART, *helm_args,
                "--set-string", "nodeSelector.staticfleet-test/nowhere=true",
                "--set", f"fullnameOverride={fullname}-f"]))
        args = _operator_args(kubeconfig, release_ns, f"{fullname}-f")
        assert f"--namespace={release_ns}" in args and "--all-namespaces" not in args
    finally:
        for name in (release, fresh):
            run([helm, "uninstall", name, *helm_args, "--wait=false"])
