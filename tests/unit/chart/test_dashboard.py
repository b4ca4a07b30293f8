"""The Grafana dashboard: structure, variables, and metric names from docs/contracts.md only."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from .contract import contract_metrics, metric_names
from .support import CHART, run

pytestmark = pytest.mark.unit

DASHBOARD = CHART / "dashboards" / "staticfleet.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels += panel.get("panels", [])
    return panels


def _graphs(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in _panels(dashboard) if p["type"] != "row"]


def test_top_level(dashboard: dict[str, Any]) -> None:
    assert re.match(r"^[a-zA-Z0-9_-]{1,40}$", dashboard["uid"])
    assert dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["id"] is None, "an id ties the JSON to one Grafana database"
    assert "staticfleet" in dashboard["tags"]


def test_templating_variables(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert list(variables) == ["datasource", "namespace", "group"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "group"):
        var = variables[name]
        assert var["type"] == "query"
        assert var["datasource"] == DATASOURCE
        assert var["multi"] and var["includeAll"]
        assert var["allValue"] == ".*"
        assert var["query"].startswith("label_values(") and f", {name})" in var["query"]
        assert metric_names(var["query"]) <= contract_metrics()
    assert 'namespace=~"$namespace"' in variables["group"]["query"]


def test_panels_structure(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert set(pos) == {"h", "w", "x", "y"} and all(isinstance(v, int) for v in pos.values())
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"panel {panel['title']!r} overlaps another"
                cells.add((x, y))
    for panel in _graphs(dashboard):
        assert panel["title"] and panel.get("description"), panel["id"]
        assert panel["type"] in {
            "timeseries",
            "stat",
            "state-timeline",
            "gauge",
            "bargauge",
            "table",
        }
        assert panel["datasource"] == DATASOURCE
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE
            assert target["expr"].strip()
            assert "legendFormat" in target


def test_every_expression_uses_contract_metrics(dashboard: dict[str, Any]) -> None:
    known = contract_metrics()
    for panel in _graphs(dashboard):
        for target in panel["targets"]:
            used = metric_names(target["expr"])
            assert used, f"{panel['title']}: {target['expr']} reads no staticfleet metric"
            assert used <= known, f"{panel['title']}: not in docs/contracts.md: {used - known}"
            # Every query honours the dashboard's filters.
            assert 'namespace=~"$namespace"' in target["expr"]
            assert 'group=~"$group"' in target["expr"]


def _panel_metrics(dashboard: dict[str, Any]) -> list[set[str]]:
    return [
        set().union(*(metric_names(t["expr"]) for t in p["targets"])) for p in _graphs(dashboard)
    ]


@pytest.mark.parametrize(
    ("topic", "together"),
    [
        ("rebalances", {"staticfleet_rebalances_total"}),
        ("rebalances seen by members", {"staticfleet_member_rebalances_total"}),
        ("rebalances by cause", {"staticfleet_rebalances_by_cause_total"}),
        (
            "member absence during rollouts against the session timeout",
            {"staticfleet_member_absence_seconds", "staticfleet_effective_timeout_seconds"},
        ),
        ("rollout state", {"staticfleet_rollout_in_progress", "staticfleet_rollout_at_risk"}),
        ("lag", {"staticfleet_member_consumer_lag"}),
        ("throughput", {"staticfleet_member_records_processed_total"}),
        (
            "batch time against max.poll.interval.ms",
            {
                "staticfleet_member_batch_processing_seconds",
                "staticfleet_member_max_poll_interval_seconds",
            },
        ),
        ("effective timeouts", {"staticfleet_effective_timeout_seconds"}),
    ],
)
def test_required_panel(dashboard: dict[str, Any], topic: str, together: set[str]) -> None:
    assert any(together <= used for used in _panel_metrics(dashboard)), f"no panel shows {topic}"


def test_expressions_parse(dashboard: dict[str, Any], promtool: Path, tmp_path: Path) -> None:
    """Every query is valid PromQL: promtool checks them as recording rules."""
    rules = []
    for panel in _graphs(dashboard):
        for target in panel["targets"]:
            expr = (
                target["expr"]
                .replace("$__rate_interval", "5m")
                .replace("$namespace", ".*")
                .replace("$group", ".*")
            )
            rules.append(
                {"record": f"dashboard:panel{panel['id']}:{target['refId'].lower()}", "expr": expr}
            )
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    proc = run([promtool, "check", "rules", path])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules)} rules found" in proc.stdout
