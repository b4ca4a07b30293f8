"""Names that say something must be used: the reasons and condition types in `conditions`, the
reasons docs/consumergroup.md lists, and names removed as dead stay removed."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from staticfleet.decisions import conditions

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
OPERATOR = ROOT / "operator" / "staticfleet"


def _constants() -> dict[str, str]:
    return {name: value for name, value in vars(conditions).items()
            if name.isupper() and isinstance(value, str)}


def test_every_condition_and_reason_constant_is_used_by_the_operator() -> None:
    """A reason nobody sets reads in the module (and the docs) as one the operator reports."""
    own = (OPERATOR / "decisions" / "conditions.py").read_text()
    rest = "\n".join(p.read_text() for p in OPERATOR.rglob("*.py")
                     if p.name != "conditions.py" or p.parent.name != "decisions")
    unused = [name for name in _constants()
              if not re.search(rf"\b{name}\b", rest)
              and len(re.findall(rf"\b{name}\b", own)) < 2]
    assert unused == []


def conditions_table() -> list[list[str]]:
    """The rows of docs/consumergroup.md's conditions table (`| Type | True means | Reasons |`)."""
    lines = (ROOT / "docs" / "consumergroup.md").read_text().splitlines()
    start = lines.index("| Type | True means | Reasons |")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        rows.append(line.strip("| ").split(" | "))
    return rows


def test_the_reasons_the_guide_lists_are_the_operators() -> None:
    """Every type and reason the conditions table of docs/consumergroup.md lists is one the
    operator sets."""
    listed = {name for row in conditions_table() for cell in (row[0], row[-1])
              for name in re.findall(r"`([A-Z][A-Za-z]+)`", cell)}
    assert len(listed) > 20
    assert listed - set(_constants().values()) == set()


@pytest.mark.parametrize(("module", "name"), [
    ("staticfleet.decisions.timeouts.rules", "restart_fits"),
    ("staticfleet.decisions.conditions", "SCALING"),
    ("staticfleet.decisions.conditions", "MEMBER_ACTIVATING"),
    ("staticfleet.apply", "MEMBER_SELECTOR"),
    ("staticfleet.observe.coordinated", "START_TIMEOUT_S"),
    ("staticfleet_dev.procs", "ensure_port_free"),
    ("staticfleet_dev.localnode.podstatus", "OWNED_CONDITIONS"),
    ("staticfleet.observe.kafkareads", "partition_counts"),
    ("staticfleet.observe.kafkareads", "group_lag"),
])
def test_dead_names_stay_removed(module: str, name: str) -> None:
    """Issue 34 item 10: names nothing used, removed."""
    assert not hasattr(importlib.import_module(module), name)
