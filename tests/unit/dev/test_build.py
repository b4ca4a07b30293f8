"""The build steps' cache: a binary is reused only when it was built by the same recipe, and the
binaries of one module (prometheus, promtool) may be built by separate steps into one folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from staticfleet_dev import build

pytestmark = pytest.mark.unit


@pytest.fixture
def go_builds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[list[str]]:
    """Every `go build` the steps run, each writing its `-o` output; nothing reaches the network."""
    ran: list[list[str]] = []

    def run_logged(cmd: list[str], **_: object) -> None:
        ran.append(cmd)
        if cmd[1] == "build":
            out = Path(cmd[cmd.index("-o") + 1])
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text("binary")

    monkeypatch.setattr(build, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(build, "require_tool", lambda name: name)
    monkeypatch.setattr(build, "run_logged", run_logged)
    return ran


def _built(ran: list[list[str]]) -> list[str]:
    return [Path(cmd[cmd.index("-o") + 1]).name for cmd in ran if cmd[1] == "build"]


def test_prometheus_and_promtool_are_built_apart_into_one_folder(
        go_builds: list[list[str]]) -> None:
    assert build.prometheus_bin() == build.promtool_bin()
    assert _built(go_builds) == ["prometheus", "promtool"]
    go_builds.clear()
    build.prometheus_bin()
    build.promtool_bin()
    assert _built(go_builds) == [], "both reused"


def test_a_new_recipe_removes_the_binaries_of_the_old_one(go_builds: list[list[str]],
                                                          tmp_path: Path) -> None:
    bindir = build.prometheus_bin()
    build.promtool_bin()
    (tmp_path / f"prometheus-{build.versions.PROMETHEUS_MODULE_VERSION}" / ".complete").write_text(
        "an older recipe")
    go_builds.clear()
    build.prometheus_bin()
    assert _built(go_builds) == ["prometheus"]
    assert not (bindir / "promtool").exists(), "promtool of the old recipe is not reused"


def test_the_build_steps_and_their_order() -> None:
    """scripts/setup.sh names these steps (the demo's first, then the tests' and benches')."""
    assert list(build.STEPS) == ["kafka", "etcd", "k8s", "prometheus", "promtool", "helm",
                                 "kwok"]


def _setup_builds() -> dict[str, list[str]]:
    """scripts/setup.sh's build steps per target (`demo) EXTRA="dev"; BUILDS=(...)`)."""
    text = (Path(__file__).resolve().parents[3] / "scripts" / "setup.sh").read_text()
    return {target: steps.split() for target, steps in
            re.findall(r'^\s*(\w+)\) EXTRA="\w+"; BUILDS=\(([^)]*)\)', text, re.M)}


def test_setup_builds_for_the_demo_only_what_it_needs() -> None:
    builds = _setup_builds()
    assert builds["demo"] == ["etcd", "k8s", "prometheus"], "the demo runs no helm nor promtool"
    assert ["kafka", *builds["all"]] == list(build.STEPS), "the tests need every step"


def test_a_built_control_plane_is_found_without_the_network(
        go_builds: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a build asks the Go module proxy for Kubernetes' replace list: once built,
    `kubernetes_bin` (every `env up`) needs no network."""
    asked: list[str] = []

    def replaces(version: str) -> list[str]:
        asked.append(version)
        return ["k8s.io/api => k8s.io/api v0.36.3"]

    monkeypatch.setattr(build, "_kubernetes_replaces", replaces)
    first = build.kubernetes_bin()
    assert len(asked) == 1 and _built(go_builds) == ["kube-apiserver", "kube-controller-manager"]
    assert "replace k8s.io/api => k8s.io/api v0.36.3" in (
        first.parent / "wrapper" / "go.mod").read_text()

    def offline(version: str) -> list[str]:
        raise AssertionError("a start from the cache asked the network")

    monkeypatch.setattr(build, "_kubernetes_replaces", offline)
    assert build.kubernetes_bin() == first and len(_built(go_builds)) == 2
