"""The chart's shards and peering: `shards` renders one Deployment per shard whose operators own
disjoint sets of ConsumerGroups (read from each Deployment's args with the operator's own
`decisions.shards`) and whose pods no other Deployment selects; `peering.enabled` gives each
Deployment a peering object of its own and the RBAC kopf needs for it; without either the
rendering is the chart's as it was."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from staticfleet.decisions.shards import DEFAULT_SHARD, SHARD_LABEL, Shard
from staticfleet_dev.testkit.fleetshards import Layout

from .support import CHART, KUBE_VERSION, REPO, Rendered, run

pytestmark = pytest.mark.unit

SCHEMA_PREFIX = "values don't meet the specifications of the schema(s)"


def _deployments(out: Rendered) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in out.docs if d["kind"] == "Deployment"}


def _args(deploy: dict[str, Any]) -> list[str]:
    return list(deploy["spec"]["template"]["spec"]["containers"][0]["args"])


def _flag(args: list[str], name: str) -> str | None:
    found = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    assert len(found) <= 1, args
    return found[0] if found else None


def _shard(deploy: dict[str, Any]) -> Shard | None:
    """The shard the Deployment's operator runs as, read the way the operator reads its flags."""
    args = _args(deploy)
    name = _flag(args, "shard")
    others = _flag(args, "other-shards")
    if name is None:
        assert others is None
        return None
    return Shard.parse(name, (others or "").split(",") if others else ())


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_without_shards_or_peering_the_rendering_is_the_default(
        render: Callable[..., Rendered], tmp_path: Path) -> None:
    explicit = render(values={"shards": [], "peering": {"enabled": False}, "replicaCount": 1},
                      tmp=tmp_path)
    assert explicit.stdout == render().stdout
    (deploy,) = _deployments(explicit).values()
    assert _shard(deploy) is None and _flag(_args(deploy), "peering") is None
    assert not [d for d in explicit.docs if d["kind"] in ("ClusterKopfPeering", "KopfPeering")]


LABEL_SETS = [{}, {"team": "a"}, {SHARD_LABEL: "default"}, {SHARD_LABEL: "b"},
              {SHARD_LABEL: "c"}, {SHARD_LABEL: "not-a-shard"}]


@pytest.mark.parametrize("shards", [["b"], ["b", "c"]])
def test_each_shard_is_a_deployment_owning_its_own_groups(
        render: Callable[..., Rendered], shards: list[str]) -> None:
    out = render("--set", f"shards={{{','.join(shards)}}}")
    deploys = _deployments(out)
    assert sorted(deploys) == sorted(["sf-staticfleet", *(f"sf-staticfleet-{s}" for s in shards)])
    owners = {name: _shard(d) for name, d in deploys.items()}
    assert owners["sf-staticfleet"] == Shard("default", tuple(sorted(shards)))
    assert owners["sf-staticfleet"].selector() == (
        f"staticfleet.io/shard notin ({','.join(sorted(shards))})")
    for s in shards:
        assert owners[f"sf-staticfleet-{s}"] == Shard(s)
        assert owners[f"sf-staticfleet-{s}"].selector() == f"staticfleet.io/shard={s}"
    # Disjoint and covering: every ConsumerGroup has exactly one operator.
    for labels in LABEL_SETS:
        owning = [n for n, shard in owners.items() if shard is not None and shard.owns(labels)]
        assert len(owning) == 1, (labels, owning)
    # No Deployment's selector matches another's pods (the default's selector is the one it
    # had before shards: a Deployment's selector cannot change).
    assert deploys["sf-staticfleet"]["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "staticfleet", "app.kubernetes.io/instance": "sf"}
    for name, deploy in deploys.items():
        for other, theirs in deploys.items():
            labels = theirs["spec"]["template"]["metadata"]["labels"]
            assert _matches(deploy["spec"]["selector"]["matchLabels"], labels) == (
                name == other), (name, other)
        # Without peering: standalone, one pod.
        assert deploy["spec"]["replicas"] == 1
        assert _flag(_args(deploy), "peering") is None


@pytest.mark.parametrize("k", [2, 3])
def test_the_fleet_bench_runs_its_shards_as_the_chart_does(
        render: Callable[..., Rendered], k: int) -> None:
    """bench/fleet_scale.py --shards K starts its operators with `fleetshards.Layout`'s
    arguments: those of the chart's Deployments with `shards` its named shards."""
    layout = Layout(k)
    deploys = _deployments(render("--set", f"shards={{{','.join(layout.named)}}}"))
    rendered = {name: [a for a in _args(d) if a.startswith(("--shard=", "--other-shards="))]
                for name, d in deploys.items()}
    assert rendered == {("sf-staticfleet" if s == DEFAULT_SHARD else f"sf-staticfleet-{s}"):
                        list(layout.args(s)) for s in layout.names}


def test_every_shards_operator_pods_are_served_and_admitted_to_the_members(
        render: Callable[..., Rendered]) -> None:
    out = render("--set", "shards={b}", "--set", "serviceMonitor.enabled=true")
    deploys = _deployments(out)
    services = {d["metadata"]["name"]: d for d in out.docs if d["kind"] == "Service"}
    assert sorted(services) == ["sf-staticfleet-b-metrics", "sf-staticfleet-metrics"]
    monitor = out.one("ServiceMonitor")["spec"]["selector"]["matchLabels"]
    for name, deploy in deploys.items():
        pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
        (service,) = [s for s in services.values() if _matches(s["spec"]["selector"], pod_labels)]
        assert service["metadata"]["name"] == f"{name}-metrics"
        # One ServiceMonitor scrapes every shard's Service.
        assert _matches(monitor, service["metadata"]["labels"])
        # The NetworkPolicy every shard makes admits every shard's pods (a group moves).
        env = {e["name"]: e for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
        peers = json.loads(env["STATICFLEET_MEMBER_INGRESS_FROM"]["value"])
        for other in deploys.values():
            assert any(_matches(p["podSelector"]["matchLabels"],
                                other["spec"]["template"]["metadata"]["labels"])
                       for p in peers if "podSelector" in p and "namespaceSelector" in p
                       and p["namespaceSelector"]["matchLabels"] == {
                           "kubernetes.io/metadata.name": "staticfleet-system"})


def _peering_grants(out: Rendered, kind: str) -> list[tuple[str, set[str]]]:
    return [(r, set(rule["verbs"])) for d in out.docs if d["kind"] == kind
            for rule in d["rules"] if "kopf.dev" in rule["apiGroups"] for r in rule["resources"]]


def test_peering_gives_each_shard_its_own_peering_object(
        render: Callable[..., Rendered]) -> None:
    out = render("--set", "shards={b}", "--set", "peering.enabled=true",
                 "--set", "replicaCount=2", "--set", "watchNamespaces={*}")
    deploys = _deployments(out)
    peerings = {d["metadata"]["name"] for d in out.docs if d["kind"] == "ClusterKopfPeering"}
    names = {n: _flag(_args(d), "peering") for n, d in deploys.items()}
    # Distinct per shard, each the name of its Deployment and of a peering object.
    assert names == {n: n for n in deploys}
    assert peerings == set(deploys)
    assert all(d["spec"]["replicas"] == 2 for d in deploys.values())
    assert _peering_grants(out, "ClusterRole") == [
        ("clusterkopfpeerings", {"list", "watch", "patch"})]
    # Without peering the operator's roles grant nothing of kopf.dev.
    assert not _peering_grants(render("--set", "shards={b}", "--set", "watchNamespaces={*}"),
                               "ClusterRole")


def test_peering_in_watched_namespaces(render: Callable[..., Rendered]) -> None:
    out = render("--set", "shards={b}", "--set", "peering.enabled=true",
                 "--set", "watchNamespaces={team-a,team-b}")
    peerings = sorted((d["metadata"]["namespace"], d["metadata"]["name"])
                      for d in out.docs if d["kind"] == "KopfPeering")
    assert peerings == [(ns, n) for ns in ("team-a", "team-b")
                        for n in ("sf-staticfleet", "sf-staticfleet-b")]
    assert not [d for d in out.docs if d["kind"] == "ClusterKopfPeering"]
    assert _peering_grants(out, "Role") == [("kopfpeerings", {"list", "watch", "patch"})] * 2
    assert not _peering_grants(out, "ClusterRole")


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "replicaCount=2"], "at '/replicaCount': value must be 1"),
    (["--set", "shards={default}"], "at '/shards/0'"),
    (["--set", "shards={B}"], "at '/shards/0'"),
    (["--set", "shards={b,b}"], "at '/shards'"),
    (["--set", "peering.enabled=yes"], "at '/peering/enabled'"),
    (["--set", "peering.name=x"], "additional properties 'name'"),
])
def test_the_schema_refuses(render: Callable[..., Rendered], args: list[str],
                            message: str) -> None:
    out = render(*args)
    assert out.returncode != 0
    assert SCHEMA_PREFIX in out.stderr and message in out.stderr, out.stderr


def test_a_shard_deployment_name_too_long_is_refused(render: Callable[..., Rendered]) -> None:
    out = render("--set", f"fullnameOverride={'x' * 40}", "--set", f"shards={{{'b' * 30}}}")
    assert out.returncode != 0
    assert "longer than 63 characters" in out.stderr, out.stderr


def test_the_peering_crds_define_what_the_chart_renders(
        render: Callable[..., Rendered]) -> None:
    crds = list(yaml.safe_load_all(
        (REPO / "crds" / "kopf-peering" / "peerings.kopf.dev.yaml").read_text()))
    kinds = {(c["spec"]["group"], c["spec"]["names"]["kind"], c["spec"]["scope"])
             for c in crds}
    assert kinds == {("kopf.dev", "ClusterKopfPeering", "Cluster"),
                     ("kopf.dev", "KopfPeering", "Namespaced")}
    rendered = {(d["apiVersion"], d["kind"]) for args in (
        ["--set", "watchNamespaces={*}"], []) for d in render(
        "--set", "peering.enabled=true", *args).docs if d["apiVersion"].startswith("kopf.dev")}
    assert rendered == {("kopf.dev/v1", "ClusterKopfPeering"), ("kopf.dev/v1", "KopfPeering")}
    assert {c["spec"]["versions"][0]["name"] for c in crds} == {"v1"}


def test_the_notes_name_every_shard_and_the_peering_crds(helm: Path, tmp_path: Path) -> None:
    """NOTES.txt (rendered through a scratch template, as in test_chart.py)."""
    chart = tmp_path / "staticfleet"
    shutil.copytree(CHART, chart)
    shutil.copy(CHART / "templates" / "NOTES.txt", chart / "notes.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n"
        '  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n')

    def notes(*args: str) -> str:
        proc = run([helm, "template", "sf", chart, "-n", "ops", "--kube-version", KUBE_VERSION,
                    "--show-only", "templates/zz-notes.yaml", *args])
        assert proc.returncode == 0, proc.stderr
        return str(yaml.safe_load(proc.stdout)["data"]["notes"])

    sharded = notes("--set", "shards={b,c}", "--set", "peering.enabled=true")
    for deployment in ("sf-staticfleet", "sf-staticfleet-b", "sf-staticfleet-c"):
        assert f"rollout status deployment/{deployment}\n" in sharded
    assert "not labelled with one of\nb, c" in sharded
    assert "kubectl apply --server-side -f crds/kopf-peering/" in sharded
    plain = notes()
    assert "shards" not in plain and "kopf-peering" not in plain
    assert "rollout status deployment/sf-staticfleet\n" in plain
    assert "crds/\n\nThe operator runs one replica per Deployment" in plain
