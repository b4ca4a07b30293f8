"""The chart's Artifact Hub metadata: its CRD entry is the CRD's, its example is the repository's
example, so neither is a copy that drifts."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
import yaml

from .support import CHART, REPO

pytestmark = pytest.mark.unit

CHART_YAML = CHART / "Chart.yaml"
CRD = REPO / "crds" / "consumergroups.staticfleet.io.yaml"
EXAMPLE = REPO / "examples" / "consumergroup.yaml"


def _annotation(key: str) -> Any:
    annotations = yaml.safe_load(CHART_YAML.read_text())["annotations"]
    return yaml.safe_load(annotations[f"artifacthub.io/{key}"])


def test_the_crd_entry_names_the_crd() -> None:
    crd = yaml.safe_load(CRD.read_text())
    (entry,) = _annotation("crds")
    assert (entry["kind"], entry["version"], entry["name"]) == (
        crd["spec"]["names"]["kind"], crd["spec"]["versions"][0]["name"], crd["metadata"]["name"])
    assert entry["description"].strip()


def test_the_crd_example_is_the_repositorys_example() -> None:
    assert _annotation("crdsExamples") == [yaml.safe_load(EXAMPLE.read_text())]


def test_license_and_category() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert _annotation("license") == project["license"]
    assert _annotation("category") == "streaming-messaging"
