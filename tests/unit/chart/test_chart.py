"""The Helm chart: lint, render with each optional feature, schema refusals, RBAC, CRD drift."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .support import CHART, KUBE_VERSION, REPO, Rendered, run

pytestmark = pytest.mark.unit

# watchNamespaces ["*"]: the operator's ClusterRole and the users' view and edit roles; the
# members' NetworkPolicy is the operator's to make, beside each group.
CLUSTER_KINDS = ["ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "Deployment",
                 "Service", "ServiceAccount"]
ALL_NAMESPACES = ("--set", "watchNamespaces={*}")
# The default, the release's namespace: its Role there, the CRD watch's ClusterRole (the users'
# roles as above).
BASE_KINDS = sorted([*CLUSTER_KINDS, "Role", "RoleBinding"])
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def test_helm_lint_strict(helm: Path) -> None:
    proc = run([helm, "lint", "--strict", CHART])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


def test_helm_lint_with_every_feature(helm: Path) -> None:
    proc = run(
        [
            helm,
            "lint",
            "--strict",
            CHART,
            "--set",
            "serviceMonitor.enabled=true,memberPodMonitor.enabled=true",
            "--set",
            "prometheusRule.enabled=true,grafanaDashboard.enabled=true",
            "--set",
            "watchNamespaces={team-a,team-b}",
        ]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_chart_yaml_declares_kube_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["kubeVersion"].startswith(">=")


def test_old_kubernetes_is_refused(render: Callable[..., Rendered]) -> None:
    out = render("--kube-version", "1.27.0")
    assert out.returncode != 0
    assert "chart requires kubeVersion" in out.stderr


def _check_valid_kubernetes(docs: list[dict[str, Any]]) -> None:
    """What the API server would refuse before any schema: shape, names, label values."""
    for doc in docs:
        assert set(doc) >= {"apiVersion", "kind", "metadata"}, doc
        meta = doc["metadata"]
        name = meta["name"]
        pattern = DNS_SUBDOMAIN if doc["kind"].endswith(("Role", "RoleBinding")) else DNS_LABEL
        assert pattern.match(name) and len(name) <= 63, f"bad name {name!r} of {doc['kind']}"
        for key, value in (meta.get("labels") or {}).items():
            assert isinstance(value, str), f"label {key} of {name} is not a string: {value!r}"
            assert len(value) <= 63
        for value in (meta.get("annotations") or {}).values():
            assert isinstance(value, str)


def test_default_render(render: Callable[..., Rendered]) -> None:
    out = render()
    assert out.kinds() == BASE_KINDS
    _check_valid_kubernetes(out.docs)
    deploy = out.one("Deployment")
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    pod = deploy["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["staticfleet", "operator", "run"]
    assert container["args"] == ["--namespace=staticfleet-system", "--metrics-host=$(POD_IP)",
                                 "--metrics-port=8080", "--health-port=8081"]
    # Metrics and health bind the pod's IP; the probes (no host: the pod IP) reach them there.
    assert container["env"][0] == {
        "name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-health"}
    assert container["image"] == "staticfleet/operator:0.1.0"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http-metrics": 8080, "http-health": 8081}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["serviceAccountName"] == out.one("ServiceAccount")["metadata"]["name"]
    # The Service selects the operator pod, with the immutable labels only.
    service = out.one("Service")
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == selector
    assert selector.items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] == "http-metrics"


def test_crds_are_included(render: Callable[..., Rendered]) -> None:
    out = render("--include-crds")
    crd = out.one("CustomResourceDefinition")
    assert crd["metadata"]["name"] == "consumergroups.staticfleet.io"


@pytest.mark.parametrize(
    ("flag", "extra_kinds"),
    [
        ("serviceMonitor.enabled=true", ["ServiceMonitor"]),
        ("memberPodMonitor.enabled=true", ["PodMonitor"]),
        ("prometheusRule.enabled=true", ["PrometheusRule"]),
        ("grafanaDashboard.enabled=true", ["ConfigMap"]),
    ],
)
def test_optional_feature(
    render: Callable[..., Rendered], flag: str, extra_kinds: list[str]
) -> None:
    out = render("--set", flag)
    assert out.kinds() == sorted(BASE_KINDS + extra_kinds)
    _check_valid_kubernetes(out.docs)


def test_service_monitor_keeps_the_group_namespace_label(render: Callable[..., Rendered]) -> None:
    out = render(
        "--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.release=kps"
    )
    sm = out.one("ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "kps"
    endpoint = sm["spec"]["endpoints"][0]
    assert endpoint["port"] == "http-metrics"
    assert endpoint["honorLabels"] is True
    assert sm["spec"]["selector"]["matchLabels"] == out.one("Service")["spec"]["selector"]


def test_member_pod_monitor_selects_member_pods(render: Callable[..., Rendered]) -> None:
    pm = render("--set", "memberPodMonitor.enabled=true").one("PodMonitor")
    assert pm["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "staticfleet-member",
        "app.kubernetes.io/managed-by": "staticfleet",
    }
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["staticfleet-system"]}
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "http"
    every = render("--set", "memberPodMonitor.enabled=true", *ALL_NAMESPACES)
    assert every.one("PodMonitor")["spec"]["namespaceSelector"] == {"any": True}
    scoped = render("--set", "memberPodMonitor.enabled=true", "--set", "watchNamespaces={a,b}")
    assert scoped.one("PodMonitor")["spec"]["namespaceSelector"] == {"matchNames": ["a", "b"]}


# --- NetworkPolicy: only the operator and Prometheus reach a member's port --------------------
# The chart renders no NetworkPolicy: it tells the operator which sources to admit
# (STATICFLEET_MEMBER_INGRESS_FROM), and the operator makes the policy beside each ConsumerGroup,
# in whatever namespace it lives (tests/integration/test_member_network_policy.py).

def _operator_env(out: Rendered) -> dict[str, str]:
    container = out.one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def _member_pods() -> list[dict[str, Any]]:
    """Member pods as the operator builds them (a member and a warm-handoff standby), with
    podLabels of the user's own."""
    from staticfleet.decisions.builders import build_member_pod, member_spec_view
    from staticfleet.decisions.spec.model import ConsumerGroupSpec
    from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
    from tests.unit.operator.support import body

    group = ConsumerGroupSpec.from_body(body(template={
        "image": "staticfleet/member:0.1.0", "podLabels": {"team": "shop"}}))
    timeouts = EffectiveTimeouts(session_timeout_ms=45000, heartbeat_interval_ms=3000,
                                 max_poll_interval_ms=300000, sources={})
    view = member_spec_view(group, timeouts)
    return [build_member_pod(group, 0, view), build_member_pod(group, 1, view, standby=True)]


def _operator_policy(out: Rendered) -> dict[str, Any] | None:
    """The NetworkPolicy the operator started by this rendering makes for a group (None: it
    makes none), from the operator's own reading of its environment."""
    from staticfleet.decisions.builders import build_member_network_policy
    from staticfleet.decisions.settings import OperatorSettings
    from staticfleet.decisions.spec.model import ConsumerGroupSpec
    from tests.unit.operator.support import body

    settings = OperatorSettings.from_env(_operator_env(out))
    if settings.member_ingress_from is None:
        return None
    return build_member_network_policy(ConsumerGroupSpec.from_body(body()),
                                       settings.member_ingress_from)


@pytest.mark.parametrize("args", [[], ["--set", "watchNamespaces={team-a,team-b}"]])
def test_the_operator_makes_the_member_network_policy_in_every_mode(
    render: Callable[..., Rendered], args: list[str],
) -> None:
    """All namespaces (the default) or chosen ones: the operator gets the sources, and the
    policy it makes admits exactly the operator's pods and Prometheus to the member port."""
    out = render(*args)
    assert "NetworkPolicy" not in out.kinds()
    policy = _operator_policy(out)
    assert policy is not None
    _check_valid_kubernetes([policy])
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    # It selects every member pod the operator builds, standbys included, whatever the
    # group's podLabels; and only the member port is opened.
    selector = spec["podSelector"]["matchLabels"]
    for pod in _member_pods():
        assert selector.items() <= pod["metadata"]["labels"].items(), pod["metadata"]
        ports = [p for c in pod["spec"]["containers"] for p in c.get("ports", ())]
        assert [p["name"] for p in ports] == ["http"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    operator, prometheus = rule["from"]
    # The operator: its pods' selector labels, in the release namespace.
    deploy = out.one("Deployment")
    assert operator["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "staticfleet-system"}}
    assert operator["podSelector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    assert operator["podSelector"]["matchLabels"].items() <= (
        deploy["spec"]["template"]["metadata"]["labels"].items())
    # Prometheus, by default the Prometheus Operator's pods in `monitoring`.
    assert prometheus == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }


def test_network_policy_can_be_turned_off(render: Callable[..., Rendered]) -> None:
    """Off: the operator makes none, and gets no right on NetworkPolicies."""
    out = render("--set", "networkPolicy.enabled=false")
    assert _operator_policy(out) is None
    (role,) = _operator_roles(out, "ClusterRole")
    assert ("networking.k8s.io", "networkpolicies") not in _grants(role["rules"])


def test_network_policy_sources_are_configurable(
    render: Callable[..., Rendered], tmp_path: Path,
) -> None:
    """Lists of peers, so a user's list replaces the default whole (maps would merge with it:
    a user's namespace label ANDed with the default's `monitoring`)."""
    prometheus = [{"namespaceSelector": {"matchLabels": {"team": "observability"}},
                   "podSelector": {"matchExpressions": [
                       {"key": "app.kubernetes.io/name", "operator": "In",
                        "values": ["prometheus", "vmagent"]}]}}]
    extra = [{"ipBlock": {"cidr": "10.1.0.0/16"}}, {"podSelector": {"matchLabels": {"debug": "1"}}}]
    out = render(values={"networkPolicy": {"prometheus": prometheus, "extraFrom": extra}},
                 tmp=tmp_path)
    policy = _operator_policy(out)
    assert policy is not None
    assert policy["spec"]["ingress"][0]["from"][1:] == [*prometheus, *extra]
    # Without a Prometheus only the operator is admitted.
    alone = _operator_policy(render("--set", "networkPolicy.prometheus=null"))
    assert alone is not None
    (operator,) = alone["spec"]["ingress"][0]["from"]
    assert operator["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "sf"


def test_grafana_dashboard_config_map(render: Callable[..., Rendered]) -> None:
    cm = render(
        "--set",
        "grafanaDashboard.enabled=true",
        "--set",
        "grafanaDashboard.annotations.grafana_folder=Kafka",
    ).one("ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Kafka"}
    source = json.loads((CHART / "dashboards" / "staticfleet.json").read_text())
    assert json.loads(cm["data"]["staticfleet.json"]) == source


def test_grafana_alert_rules_config_map(render: Callable[..., Rendered]) -> None:
    """The Grafana-managed rules are the PrometheusRule's alerts: same names, expressions, for,
    labels and runbook links; they query the data source the value names."""
    from staticfleet_dev import grafana_alerts

    assert not [d for d in render().docs if d["kind"] == "ConfigMap"
                and d["metadata"]["name"].endswith("-grafana-alerts")], "optional, off"
    cm = render("--set", "grafanaAlerts.enabled=true",
                "--set", "grafanaAlerts.datasourceUid=prom-1").one("ConfigMap")
    assert cm["metadata"]["labels"]["grafana_alert"] == "1"
    doc = yaml.safe_load(cm["data"]["staticfleet-alerts.yaml"])
    (group,) = doc["groups"]
    assert doc["apiVersion"] == 1 and group["folder"] == "staticfleet"
    rules = {r["title"]: r for r in group["rules"]}
    alerts = {a["alert"]: a for a in grafana_alerts.prometheus_alerts()}
    assert set(rules) == set(alerts)
    for name, alert in alerts.items():
        ours = rules[name]
        query, threshold = ours["data"]
        assert query["datasourceUid"] == "prom-1" and threshold["datasourceUid"] == "__expr__"
        assert query["model"]["expr"] == " ".join(alert["expr"].split())
        assert ours["condition"] == threshold["refId"] == "B"
        assert threshold["model"]["expression"] == "A"
        assert ours["for"] == alert["for"] and ours["labels"] == alert["labels"]
        assert ours["annotations"]["runbook_url"] == alert["annotations"]["runbook_url"]
        assert "$value " not in ours["annotations"]["description"].replace("$values", "")


# --- RBAC: exactly what the operator needs -----------------------------------------------------

# Each verb has its caller (docs/security.md): kopf's watches, finalizer and Events, and the
# operator's apply layer (operator/staticfleet/apply.py). ConfigMaps, Services,
# PodDisruptionBudgets and NetworkPolicies are server-side applied and watched by label (a child
# someone changes or deletes is applied again), never read by name (no get; the garbage
# collector deletes them); the member token Secret is created, never changed (no patch on
# Secrets), and never listed or watched.
NAMESPACED_RULES = {
    ("staticfleet.io", "consumergroups"): {"list", "watch", "patch"},
    ("staticfleet.io", "consumergroups/status"): {"patch"},
    ("staticfleet.io", "consumergroups/scale"): {"patch"},
    ("staticfleet.io", "consumergroups/finalizers"): {"update"},
    ("", "pods"): {"list", "watch", "create", "patch", "delete"},
    ("", "configmaps"): {"list", "watch", "create", "patch"},
    ("", "services"): {"list", "watch", "create", "patch"},
    ("policy", "poddisruptionbudgets"): {"list", "watch", "create", "patch"},
    ("networking.k8s.io", "networkpolicies"): {"list", "watch", "create", "patch"},
    ("", "secrets"): {"get", "create"},
    ("", "events"): {"create"},
}
CRD_RULES = {("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"}}
USER_ROLES = {"sf-staticfleet-view", "sf-staticfleet-edit"}


def _grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert "*" not in (group, resource, *rule["verbs"]), rule
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def _operator_roles(out: Rendered, kind: str) -> list[dict[str, Any]]:
    return [d for d in out.docs if d["kind"] == kind and d["metadata"]["name"] not in USER_ROLES]


def test_rbac_all_namespaces(render: Callable[..., Rendered]) -> None:
    out = render(*ALL_NAMESPACES)
    assert out.kinds() == CLUSTER_KINDS
    (role,) = _operator_roles(out, "ClusterRole")
    # No `namespaces`: kopf lists them only when it watches chosen namespaces.
    assert _grants(role["rules"]) == NAMESPACED_RULES | CRD_RULES
    binding = out.one("ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    sa = out.one("ServiceAccount")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": sa["metadata"]["name"],
            "namespace": "staticfleet-system",
        }
    ]


def test_rbac_watch_namespaces(render: Callable[..., Rendered]) -> None:
    out = render("--set", "watchNamespaces={team-a,team-b}")
    assert out.kinds() == sorted([*CLUSTER_KINDS, "Role", "Role", "RoleBinding", "RoleBinding"])
    # Cluster-wide: only the CRD watch kopf needs; no namespaces, nothing namespaced.
    (cluster_role,) = _operator_roles(out, "ClusterRole")
    assert _grants(cluster_role["rules"]) == CRD_RULES
    (cluster_binding,) = _operator_roles(out, "ClusterRoleBinding")
    assert cluster_binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    roles = [d for d in out.docs if d["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert _grants(role["rules"]) == NAMESPACED_RULES
    for binding in (d for d in out.docs if d["kind"] == "RoleBinding"):
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"][0]["namespace"] == "staticfleet-system"
    args = out.one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["--namespace=team-a", "--namespace=team-b"]
    assert "--all-namespaces" not in args


def test_rbac_default_is_the_release_namespace(render: Callable[..., Rendered]) -> None:
    """The default install watches its own namespace: a Role there with every namespaced right,
    cluster-wide only the CRD watch; every namespace is `watchNamespaces: ["*"]`, said alone."""
    out = render()
    (role,) = (d for d in out.docs if d["kind"] == "Role")
    assert role["metadata"]["namespace"] == "staticfleet-system"
    assert _grants(role["rules"]) == NAMESPACED_RULES
    (binding,) = (d for d in out.docs if d["kind"] == "RoleBinding")
    assert binding["metadata"]["namespace"] == "staticfleet-system"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    for cluster_role in _operator_roles(out, "ClusterRole"):
        assert _grants(cluster_role["rules"]) == CRD_RULES
    args = out.one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=staticfleet-system" in args and "--all-namespaces" not in args
    assert "--all-namespaces" in render(*ALL_NAMESPACES).one("Deployment")[
        "spec"]["template"]["spec"]["containers"][0]["args"]


def test_rbac_watch_namespaces_has_no_namespaced_cluster_right(
    render: Callable[..., Rendered],
) -> None:
    """With watchNamespaces, whatever the operator may do to a namespaced resource it may do only
    through a Role: no ClusterRole it is bound to names a namespaced resource."""
    out = render("--set", "watchNamespaces={team-a}")
    cluster_scoped = {("apiextensions.k8s.io", "customresourcedefinitions")}
    for role in _operator_roles(out, "ClusterRole"):
        assert set(_grants(role["rules"])) <= cluster_scoped, role["metadata"]["name"]


VIEW_GRANTS = {
    ("staticfleet.io", "consumergroups"): {"get", "list", "watch"},
    ("staticfleet.io", "consumergroups/status"): {"get", "list", "watch"},
    ("staticfleet.io", "consumergroups/scale"): {"get", "list", "watch"},
}
EDIT_GRANTS = {
    ("staticfleet.io", "consumergroups"): {"create", "update", "patch", "delete",
                                           "deletecollection"},
    ("staticfleet.io", "consumergroups/scale"): {"update", "patch"},
}
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


@pytest.mark.parametrize("args", [[], ["--set", "watchNamespaces={team-a}"]])
def test_aggregated_user_roles(render: Callable[..., Rendered], args: list[str]) -> None:
    """`<fullname>-view` and `-edit` aggregate into the built-in view, edit and admin roles; no
    binding of the chart's names them (they are for people, bound through view/edit/admin)."""
    out = render(*args)
    view = out.one("ClusterRole", "sf-staticfleet-view")
    edit = out.one("ClusterRole", "sf-staticfleet-edit")
    assert _grants(view["rules"]) == VIEW_GRANTS
    assert _grants(edit["rules"]) == EDIT_GRANTS

    def aggregates(role: dict[str, Any]) -> set[str]:
        return {k.removeprefix(AGGREGATE) for k, v in role["metadata"]["labels"].items()
                if k.startswith(AGGREGATE) and v == "true"}

    assert aggregates(view) == {"view", "edit", "admin"}
    assert aggregates(edit) == {"edit", "admin"}
    # Nobody writes the status but the operator.
    assert not any(resource == "consumergroups/status" for _, resource in _grants(edit["rules"]))
    bound = {d["roleRef"]["name"] for d in out.docs if d["kind"].endswith("Binding")}
    assert not bound & USER_ROLES
    # A release named staticfleet gives the names of the Kubernetes convention.
    named = render("--set", "fullnameOverride=staticfleet")
    assert {"staticfleet-view", "staticfleet-edit"} <= {
        d["metadata"]["name"] for d in named.docs if d["kind"] == "ClusterRole"}
    off = render("--set", "rbac.aggregateClusterRoles=false", *args)
    assert not [d for d in off.docs if d["metadata"]["name"] in USER_ROLES]


def _doc_grants(section: str) -> dict[tuple[str, str], set[str]]:
    """The permission table of a docs/security.md section: `| group | resources | verbs | why |`."""
    grants: dict[tuple[str, str], set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[1].startswith("`"):
            continue
        group = "" if cells[0] == "core" else cells[0].strip("`")
        for resource in re.findall(r"`([^`]+)`", cells[1]):
            grants[(group, resource)] = {v.strip() for v in cells[2].split(",")}
    return grants


def test_security_doc_lists_every_permission(render: Callable[..., Rendered]) -> None:
    """docs/security.md's table is the chart's RBAC, verb for verb, and the docs link to it."""
    doc = (REPO / "docs" / "security.md").read_text()
    operator_section = doc.split("### The operator\n\n| API group")[1].split("\n\n")[0]
    documented = _doc_grants("| API group" + operator_section)
    (role,) = _operator_roles(render(*ALL_NAMESPACES), "ClusterRole")
    assert documented == _grants(role["rules"]) == NAMESPACED_RULES | CRD_RULES
    for page, link in (("README.md", "docs/security.md"), ("docs/install.md", "security.md"),
                       ("docs/install.md", "security.md#the-member-networkpolicy")):
        assert f"]({link})" in (REPO / page).read_text(), f"{page} does not link {link}"
    assert "## The member NetworkPolicy" in doc
    assert "### Member NetworkPolicy" in (REPO / "docs" / "install.md").read_text()


def test_rbac_and_service_account_can_be_turned_off(render: Callable[..., Rendered]) -> None:
    out = render(
        "--set",
        "rbac.create=false",
        "--set",
        "serviceAccount.create=false",
        "--set",
        "serviceAccount.name=existing",
    )
    # No RBAC at all, the users' aggregated roles included.
    assert out.kinds() == ["Deployment", "Service"]
    pod = out.one("Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "existing"


def test_values_are_passed_through(render: Callable[..., Rendered], tmp_path: Path) -> None:
    out = render(
        values={
            "image": {"repository": "registry.example/sf", "tag": "1.2.3", "pullPolicy": "Always"},
            "imagePullSecrets": [{"name": "regcred"}],
            "extraArgs": ["--verbose"],
            "extraEnv": [{"name": "FOO", "value": "bar"}],
            "podLabels": {"team": "kafka"},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "priorityClassName": "high",
            "fullnameOverride": "sf-op",
        },
        tmp=tmp_path,
    )
    deploy = out.one("Deployment", "sf-op")
    pod = deploy["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "registry.example/sf:1.2.3"
    assert container["imagePullPolicy"] == "Always"
    assert container["args"][-1] == "--verbose"
    assert {"name": "FOO", "value": "bar"} in container["env"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["priorityClassName"] == "high"
    assert deploy["spec"]["template"]["metadata"]["labels"]["team"] == "kafka"


# --- values.schema.json -------------------------------------------------------------------------

SCHEMA_PREFIX = "values don't meet the specifications of the schema(s)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "replicaCount=2"], "at '/replicaCount': value must be 1"),
        (["--set", "bogus=1"], "additional properties 'bogus' not allowed"),
        (["--set", "image.bogus=1"], "at '/image': additional properties 'bogus' not allowed"),
        (
            ["--set", "image.pullPolicy=Sometimes"],
            "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'",
        ),
        (["--set", "metrics.service.type=ExternalName"], "value must be one of"),
        (["--set", "metrics.port=70000"], "at '/metrics/port'"),
        (["--set", "watchNamespaces={Not_A_Namespace}"], "at '/watchNamespaces/0'"),
        # Every namespace is "*" alone.
        (["--set", "watchNamespaces={*,a}"], "at '/watchNamespaces'"),
        (["--set", "serviceMonitor.interval=often"], "at '/serviceMonitor/interval'"),
        (
            ["--set", "prometheusRule.alerts.NoSuchAlert.enabled=false"],
            "invalid propertyName 'NoSuchAlert'",
        ),
        (
            ["--set", "prometheusRule.alerts.StaticfleetLagGrowing.severity=page"],
            "value must be one of 'critical', 'warning', 'info'",
        ),
        # Gone: the operator makes the policy wherever a group lives.
        (["--set", "networkPolicy.namespaces={a}"],
         "at '/networkPolicy': additional properties 'namespaces' not allowed"),
        (
            ["--set", "networkPolicy.prometheus[0].podSelector.matchLabel.app=prometheus"],
            "at '/networkPolicy/prometheus/0/podSelector': additional properties 'matchLabel'",
        ),
        (
            ["--set", "networkPolicy.prometheus[0].podSelector.matchExpressions[0].key=a",
             "--set", "networkPolicy.prometheus[0].podSelector.matchExpressions[0].operator=Is"],
            "at '/networkPolicy/prometheus/0/podSelector/matchExpressions/0/operator'",
        ),
        (
            ["--set", "networkPolicy.extraFrom[0].podSelectr.app=x"],
            "at '/networkPolicy/extraFrom/0': additional properties 'podSelectr'",
        ),
        (["--set", "rbac.aggregateClusterRoles=yes"], "at '/rbac/aggregateClusterRoles'"),
    ],
)
def test_schema_refuses(render: Callable[..., Rendered], args: list[str], message: str) -> None:
    out = render(*args)
    assert out.returncode != 0
    assert SCHEMA_PREFIX in out.stderr
    assert message in out.stderr, out.stderr


def _walk_schema(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for key, child in node.get("properties", {}).items():
        found += _walk_schema(child, f"{path}.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict) and node[key].get("type") in ("object", "array"):
            found += _walk_schema(node[key], f"{path}.{key}")
    return found


def test_schema_is_documented_and_closed() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    for path, node in _walk_schema(schema, "")[1:]:
        assert node.get("description"), f"{path} has no description"
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"{path} is not closed"
    assert schema["additionalProperties"] is False


# Values whose defaults are Kubernetes objects (or lists of them), documented as a whole.
KUBERNETES_OBJECT_VALUES = ("podSecurityContext", "securityContext", "resources", "labels",
                            "prometheus")


def _leaf_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else key
        if (
            isinstance(value, dict)
            and value
            and key not in KUBERNETES_OBJECT_VALUES
        ):
            paths += _leaf_paths(value, path)
        else:
            paths.append(path)
    return paths


def test_every_value_is_in_the_schema_and_documented() -> None:
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    schema = json.loads((CHART / "values.schema.json").read_text())
    for path in _leaf_paths(values):
        node = schema
        for part in path.split("."):
            assert part in node.get("properties", {}), f"values.yaml {path} is not in the schema"
            node = node["properties"][part]
        assert re.match(r"^[a-z][a-zA-Z0-9]*$", part), f"{path} is not camelCase"
    # Every leaf value has its `# --` doc comment right above it (blocks are documented by their
    # leaves); keys inside the Kubernetes-object defaults of a documented value are exempt.
    lines = text.splitlines()
    documented_objects = KUBERNETES_OBJECT_VALUES
    inside: str | None = None
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*):\s*(.*)$", line)
        if not m:
            continue
        indent, key, rest = m.groups()
        if inside is not None and len(indent) > len(inside):
            continue
        inside = indent if key in documented_objects else None
        if rest == "" and key not in documented_objects:
            continue  # a block: its leaves carry the docs
        doc = lines[i - 1].strip()
        assert doc.startswith("#"), f"values.yaml line {i + 1} has no doc comment: {line}"
        j = i - 1
        while j > 0 and lines[j - 1].strip().startswith("#"):
            j -= 1
        assert lines[j].strip().startswith("# --"), f"values.yaml {key}: doc must start with '# --'"


def test_notes_render(helm: Path, tmp_path: Path) -> None:
    """NOTES.txt renders (helm template skips it: render it through a scratch template)."""
    chart = tmp_path / "staticfleet"
    shutil.copytree(CHART, chart)
    shutil.copy(CHART / "templates" / "NOTES.txt", chart / "notes.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n"
        '  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n'
    )
    cases = {
        "defaults": [],
        "scoped": ["--set", "watchNamespaces={a,b}", "--set", "prometheusRule.enabled=true"],
        "no policy": ["--set", "networkPolicy.enabled=false"],
        "every namespace": list(ALL_NAMESPACES),
    }
    rendered = {}
    for case, args in cases.items():
        proc = run(
            [
                helm,
                "template",
                "sf",
                chart,
                "-n",
                "ops",
                "--kube-version",
                KUBE_VERSION,
                "--show-only",
                "templates/zz-notes.yaml",
                *args,
            ]
        )
        assert proc.returncode == 0, proc.stderr
        notes = yaml.safe_load(proc.stdout)["data"]["notes"]
        assert "kubectl apply --server-side -f crds/" in notes
        assert "deployment/sf-staticfleet" in notes
        rendered[case] = notes
    assert rendered["defaults"].startswith(
        'staticfleet 0.1.0 is installed as release "sf" in namespace "ops".\n\n'
        "The operator watches ConsumerGroups (staticfleet.io/v1alpha1, short name cg) in "
        "namespace ops.\n")
    assert "short name cg) in all namespaces." in rendered["every namespace"]
    # An upgrade that kept every namespace says so; helm template has no release to look up.
    assert not any("It watched every namespace" in n for n in rendered.values())
    notes = rendered["scoped"]
    assert "these namespaces: a, b" in notes
    assert "memberPodMonitor.enabled=true" in notes
    assert "WARNING" not in notes
    # The operator makes the policy in every mode; where none guards the members, the notes
    # say so.
    for case in ("defaults", "scoped"):
        assert "the operator makes a NetworkPolicy beside each\nConsumerGroup" in rendered[case]
        assert "WARNING" not in rendered[case]
    assert "WARNING: networkPolicy.enabled=false" in rendered["no policy"]


# --- CRDs: one source, copied by scripts/sync-crds.py -------------------------------------------

SYNC = REPO / "scripts" / "sync-crds.py"


def test_chart_crds_in_sync_with_source() -> None:
    proc = run([sys.executable, SYNC, "--check"])
    assert proc.returncode == 0, proc.stderr
    assert "in sync" in proc.stdout


def _sync(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, SYNC, *args])


def test_sync_crds_detects_and_fixes_drift(tmp_path: Path) -> None:
    src, dst = tmp_path / "crds", tmp_path / "chart-crds"
    src.mkdir()
    (src / "a.yaml").write_text("kind: A\n")
    (src / "b.yaml").write_text("kind: B\n")
    dst.mkdir()
    (dst / "a.yaml").write_text("kind: A-old\n")
    (dst / "stale.yaml").write_text("kind: Stale\n")
    paths: list[str | Path] = ["--source", src, "--target", dst]

    check = _sync("--check", *paths)
    assert check.returncode == 1
    assert f"{dst / 'a.yaml'}: differs from {src / 'a.yaml'}" in check.stderr
    assert f"{dst / 'b.yaml'}: missing" in check.stderr
    assert f"{dst / 'stale.yaml'}: has no source" in check.stderr
    assert "fix: run `python scripts/sync-crds.py`" in check.stderr

    assert _sync(*paths).returncode == 0
    assert sorted(p.name for p in dst.iterdir()) == ["a.yaml", "b.yaml"]
    assert (dst / "a.yaml").read_text() == "kind: A\n"
    assert _sync("--check", *paths).returncode == 0


def test_sync_crds_refuses_an_empty_source(tmp_path: Path) -> None:
    proc = _sync("--check", "--source", tmp_path / "none", "--target", tmp_path / "t")
    assert proc.returncode == 2
    assert "no CRD files" in proc.stderr


def test_install_doc_covers_every_value_and_the_crd_step() -> None:
    doc = (REPO / "docs" / "install.md").read_text()
    assert "kubectl apply --server-side -f crds/" in doc
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    table = set(re.findall(r"^\| `([A-Za-z.]+)` \|", doc, re.M))
    assert set(_leaf_paths(values)) <= table, set(_leaf_paths(values)) - table


def _mib(quantity: str) -> float:
    units = {"Mi": 1.0, "Gi": 1024.0}
    return float(quantity[:-2]) * units[quantity[-2:]]


def test_the_default_resources_come_from_the_measured_footprint() -> None:
    """The default memory limit is at least 1.5x (the docs say about twice) the operator RSS
    bench/fleet_scale.py measured at 300 groups (docs/benchmarks.md), the request at least
    about that; docs/install.md's sizing table quotes the benchmark's figures. Fails when the
    limit falls back under the measured figure (the old 256Mi) or the figures drift apart."""
    bench = (REPO / "docs" / "benchmarks.md").read_text()
    row = next(line for line in bench.splitlines()
               if line.startswith("| (b) operator RSS, parent + children"))
    rss_300, rss_1000 = (float(c.strip().replace(",", "")) for c in row.split("|")[2:4])
    resources = yaml.safe_load((CHART / "values.yaml").read_text())["resources"]
    limit = _mib(resources["limits"]["memory"])
    request = _mib(resources["requests"]["memory"])
    assert limit >= 1.5 * rss_300, (limit, rss_300)
    assert request >= 0.95 * rss_300, (request, rss_300)
    sizing = (REPO / "docs" / "install.md").read_text().split("### Sizing")[1].split("\n## ")[0]
    assert f"| up to 300 | {rss_300} at 300" in sizing
    assert f"| 1,000 | {rss_1000:,.1f} " in sizing
    assert f"`memory: {resources['limits']['memory']}` (the default)" in sizing
    assert f"`memory: {resources['requests']['memory']}` (the default)" in sizing
