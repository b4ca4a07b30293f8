"""Prose that cannot drift: what the CRD, docs/consumergroup.md and docs/concepts.md say in words
is held to the code it describes, and the ConsumerGroup's API coordinates are spelled in one place.

Adding a rollout predicate (a row of `rollout.gates`) fails here until the CRD's `blockedBy`
description, the predicate table of docs/consumergroup.md and the list of checks in
docs/concepts.md name it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from staticfleet.decisions.rollout import gates, roller
from staticfleet.decisions.spec import model

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
CRDS = [ROOT / "crds" / "consumergroups.staticfleet.io.yaml",
        ROOT / "charts" / "staticfleet" / "crds" / "consumergroups.staticfleet.io.yaml"]

PREDICATES = {name for name, _ in (*gates.BEFORE_STOP, *gates.BEFORE_PREPARE)}
"""Every predicate of the rollout gates."""
BLOCKERS = PREDICATES | {gates.REPLACEMENT_CREATED, gates.REPLACEMENT_ANSWERS}
"""What `status.rollout.blockedBy` names while a rollout runs."""
ENDED = {f"Rollout{phase}" for phase in roller.ENDED_PHASES}
"""What it names for a rollout that ended (`roller.next_step`)."""


def _names(text: str) -> set[str]:
    """The CamelCase names in `text` (a predicate's, a phase's)."""
    return set(re.findall(r"\b[A-Z][a-z]+(?:[A-Z][a-z]*)+\b", text))


@pytest.mark.parametrize("path", CRDS, ids=["crds", "chart"])
def test_the_crd_describes_every_blocker_by_name(path: Path) -> None:
    schema = yaml.safe_load(path.read_text())["spec"]["versions"][0]["schema"]
    description = schema["openAPIV3Schema"]["properties"]["status"]["properties"]["rollout"][
        "properties"]["blockedBy"]["description"]
    listed = re.search(r"\((.*)\)", description, re.S)
    assert listed, description
    running, _, ended = listed.group(1).partition(";")
    assert (_names(running), _names(ended)) == (BLOCKERS, ENDED)


def test_the_api_docs_table_the_predicates() -> None:
    text = (ROOT / "docs" / "consumergroup.md").read_text()
    table = text[text.index("| predicate | holds when |"):].split("\n\n", 1)[0]
    assert set(re.findall(r"^\| `(\w+)` \|", table, re.M)) == BLOCKERS
    ended = re.search(r"A rollout that ended shows why it starts nobody:([^.]*)\.", text)
    assert ended and _names(ended.group(1)) == ENDED


def test_the_concepts_page_lists_the_checks_before_a_stop() -> None:
    text = (ROOT / "docs" / "concepts.md").read_text()
    listed = text[text.index("evaluates every safety check"):text.index("Every one that fails")]
    assert set(re.findall(r"`([A-Z][A-Za-z]+)`", listed)) == PREDICATES


# --- the API coordinates ----------------------------------------------------------------------

def _crd() -> dict[str, Any]:
    return yaml.safe_load(CRDS[0].read_text())


def test_the_api_coordinates_are_the_crds() -> None:
    spec = _crd()["spec"]
    coordinates = (model.API_GROUP, model.API_VERSION, model.PLURAL, model.KIND)
    assert coordinates == (spec["group"], spec["versions"][0]["name"], spec["names"]["plural"],
                           spec["names"]["kind"])


SPELLINGS = {model.API_GROUP, model.API_VERSION, model.PLURAL,
             f"{model.API_GROUP}/{model.API_VERSION}", f"{model.PLURAL}.{model.API_GROUP}"}
MODEL = Path(model.__file__).resolve()


def test_the_api_coordinates_are_spelled_in_the_model_only() -> None:
    """The operator and the development environment import the coordinates; a string that is
    one of them anywhere else is a second spelling. (The tests state them on purpose, as
    expectations, and YAML (the CRD, the chart's RBAC) cannot import.)"""
    found = [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}"
             for source in ("operator/staticfleet", "staticfleet_dev")
             for path in sorted((ROOT / source).rglob("*.py")) if path.resolve() != MODEL
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and node.value in SPELLINGS]
    assert found == []
