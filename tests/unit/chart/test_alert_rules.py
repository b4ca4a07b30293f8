"""The alert rules: promtool check/test, annotations and runbooks, contract metrics, the chart."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .contract import contract_metrics, metric_names
from .support import CHART, REPO, Rendered, run

pytestmark = pytest.mark.unit

RULES = CHART / "rules" / "staticfleet-alerts.yaml"
RULE_TESTS = sorted((CHART / "rules" / "tests").glob("*.yaml"))
ALERTS_DOC = REPO / "docs" / "alerts.md"


def _alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


ALERTS = _alerts()
ALERT_NAMES = [a["alert"] for a in ALERTS]


def test_the_alerts_the_project_asks_for() -> None:
    assert ALERT_NAMES == [
        "StaticfleetRebalanceRateHigh",
        "StaticfleetRebalanceRateCritical",
        "StaticfleetMemberRebalanceRateHigh",
        "StaticfleetRebalanceCauseUnknown",
        "StaticfleetRolloutAtRisk",
        "StaticfleetRolloutStuck",
        "StaticfleetIdleMembers",
        "StaticfleetLagGrowing",
        "StaticfleetLagTargetMissed",
        "StaticfleetMemberStalled",
        "StaticfleetDeadLetteredRecords",
        "StaticfleetStaticLeaveUnconfirmed",
    ]


def test_promtool_check_rules(promtool: Path) -> None:
    proc = run([promtool, "check", "rules", RULES])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in proc.stdout


def test_promtool_test_rules(promtool: Path) -> None:
    assert RULE_TESTS, "no promtool tests in rules/tests/"
    proc = run([promtool, "test", "rules", *RULE_TESTS], cwd=CHART / "rules" / "tests")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
    assert "FAILED" not in proc.stdout + proc.stderr


def test_promtool_test_rules_catches_a_wrong_expectation(promtool: Path, tmp_path: Path) -> None:
    """The tests can fail: one that expects a quiet alert where it fires is reported."""
    test = yaml.safe_load(RULE_TESTS[0].read_text())
    test["rule_files"] = [str(RULES)]
    first = test["tests"][0]
    for case in first["alert_rule_test"]:
        case["exp_alerts"] = []
    path = tmp_path / "wrong.yaml"
    path.write_text(yaml.safe_dump(test))
    proc = run([promtool, "test", "rules", path])
    assert proc.returncode == 1
    assert "FAILED" in proc.stdout + proc.stderr


def test_every_alert_fires_and_stays_quiet_in_the_promtool_tests() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert set(ALERT_NAMES) <= fires, f"never seen firing: {set(ALERT_NAMES) - fires}"
    assert set(ALERT_NAMES) <= quiet, f"never seen quiet: {set(ALERT_NAMES) - quiet}"


def _doc_sections() -> dict[str, str]:
    """GitHub anchor -> section text of docs/alerts.md."""
    sections: dict[str, str] = {}
    current = None
    for line in ALERTS_DOC.read_text().splitlines():
        m = re.match(r"^## (\S+)\s*$", line)
        if m:
            current = m.group(1).lower()
            sections[current] = ""
        elif current:
            sections[current] += line + "\n"
    return sections


@pytest.mark.parametrize("alert", ALERTS, ids=lambda a: a["alert"])
def test_alert_annotations_and_runbook(alert: dict[str, Any]) -> None:
    annotations = alert["annotations"]
    assert annotations["summary"].strip()
    assert len(annotations["description"]) > len(annotations["summary"])
    assert alert["labels"]["severity"] in {"critical", "warning", "info"}
    url = annotations["runbook_url"]
    assert url == f"docs/alerts.md#{alert['alert'].lower()}"
    section = _doc_sections().get(url.partition("#")[2])
    assert section is not None, f"docs/alerts.md has no section '## {alert['alert']}'"
    for part in ("**What it means.**", "**Likely causes.**", "**What to do.**"):
        assert part in section, f"{alert['alert']}: runbook lacks {part}"


@pytest.mark.parametrize("alert", ALERTS, ids=lambda a: a["alert"])
def test_alert_uses_contract_metrics(alert: dict[str, Any]) -> None:
    used = metric_names(alert["expr"])
    assert used
    assert used <= contract_metrics(), f"not in docs/contracts.md: {used - contract_metrics()}"
    # Everything is aggregated to the two labels the runbooks and the chart talk about.
    assert re.search(r"\bby \(namespace, group\)", alert["expr"])


def test_schema_lists_exactly_the_alerts() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    alerts = schema["properties"]["prometheusRule"]["properties"]["alerts"]
    assert alerts["propertyNames"]["enum"] == ALERT_NAMES


def _rendered_rules(out: Rendered) -> list[dict[str, Any]]:
    rule = out.one("PrometheusRule")
    return [r for g in rule["spec"]["groups"] for r in g["rules"]]


def test_prometheus_rule_is_the_rule_file(render: Callable[..., Rendered]) -> None:
    out = render("--set", "prometheusRule.enabled=true")
    source = yaml.safe_load(RULES.read_text())
    assert out.one("PrometheusRule")["spec"]["groups"] == source["groups"]


def test_prometheus_rule_overrides(render: Callable[..., Rendered], tmp_path: Path) -> None:
    out = render(
        values={
            "prometheusRule": {
                "enabled": True,
                "labels": {"release": "kps"},
                "ruleLabels": {"team": "kafka"},
                "runbookBaseUrl": "https://git.example/staticfleet/blob/main/",
                "alerts": {
                    "StaticfleetIdleMembers": {"enabled": False},
                    "StaticfleetRolloutStuck": {"for": "1h", "severity": "critical"},
                    "StaticfleetLagGrowing": {"expr": "vector(1)"},
                },
            }
        },
        tmp=tmp_path,
    )
    assert out.one("PrometheusRule")["metadata"]["labels"]["release"] == "kps"
    rules = {r["alert"]: r for r in _rendered_rules(out)}
    assert "StaticfleetIdleMembers" not in rules
    assert len(rules) == len(ALERTS) - 1
    assert rules["StaticfleetRolloutStuck"]["for"] == "1h"
    assert rules["StaticfleetRolloutStuck"]["labels"] == {"severity": "critical", "team": "kafka"}
    assert rules["StaticfleetLagGrowing"]["expr"] == "vector(1)"
    assert rules["StaticfleetRebalanceRateHigh"]["labels"] == {
        "severity": "warning",
        "team": "kafka",
    }
    assert rules["StaticfleetRebalanceRateHigh"]["annotations"]["runbook_url"] == (
        "https://git.example/staticfleet/blob/main/docs/alerts.md#staticfleetrebalanceratehigh"
    )
    # Prometheus' own templates pass through Helm untouched.
    assert "{{ $labels.namespace }}" in rules["StaticfleetRolloutAtRisk"]["annotations"]["summary"]


def test_rendered_prometheus_rule_passes_promtool(
    render: Callable[..., Rendered], promtool: Path, tmp_path: Path
) -> None:
    out = render(
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "prometheusRule.alerts.StaticfleetRolloutStuck.for=45m",
    )
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump({"groups": out.one("PrometheusRule")["spec"]["groups"]}))
    proc = run([promtool, "check", "rules", path])
    assert proc.returncode == 0, proc.stdout + proc.stderr
