"""The operator's own settings (`decisions.settings`): how they are read from its environment,
and what a pass decides with them: the members' NetworkPolicy among the group's children, and
the test-only annotations honoured only when the operator allows them (else ignored, and the
status and an Event say so). The bench-only settings are never set by the chart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from staticfleet.decisions import conditions as c
from staticfleet.decisions.plan import decide, without_nulls
from staticfleet.decisions.settings import (
    ALLOW_TESTING_ANNOTATIONS_ENV,
    MEMBER_HTTP_VIA_ENV,
    MEMBER_INGRESS_FROM_ENV,
    OperatorSettings,
    SettingsError,
)
from staticfleet.decisions.spec.model import DYNAMIC_MEMBERSHIP_ANNOTATION, STOP_HANDOFF_ANNOTATION
from tests.unit.operator.snapshots import CG, WARM_NEW, WarmRoll, running, settled, snapshot
from tests.unit.operator.support import with_path

pytestmark = pytest.mark.unit

PEERS = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
          "podSelector": {"matchLabels": {"app.kubernetes.io/name": "staticfleet"}}},
         {"ipBlock": {"cidr": "10.1.0.0/16"}}]


# --- reading them ---------------------------------------------------------------------------

@pytest.mark.parametrize(("environ", "expected"), [
    ({}, OperatorSettings()),
    ({MEMBER_INGRESS_FROM_ENV: ""}, OperatorSettings()),
    ({MEMBER_INGRESS_FROM_ENV: '[{"ipBlock": {"cidr": "10.1.0.0/16"}}]'},
     OperatorSettings(member_ingress_from=({"ipBlock": {"cidr": "10.1.0.0/16"}},))),
    # An empty list: a policy that admits nobody (not: no policy).
    ({MEMBER_INGRESS_FROM_ENV: "[]"}, OperatorSettings(member_ingress_from=())),
    ({ALLOW_TESTING_ANNOTATIONS_ENV: "true"}, OperatorSettings(allow_testing_annotations=True)),
    ({ALLOW_TESTING_ANNOTATIONS_ENV: "False"}, OperatorSettings()),
    ({MEMBER_HTTP_VIA_ENV: " 127.0.0.1:18080 "},
     OperatorSettings(member_http_via=("127.0.0.1", 18080))),
    ({MEMBER_HTTP_VIA_ENV: "membersim.bench.svc:80"},
     OperatorSettings(member_http_via=("membersim.bench.svc", 80))),
    ({MEMBER_HTTP_VIA_ENV: ""}, OperatorSettings()),
])
def test_settings_from_the_environment(environ: dict[str, str],
                                       expected: OperatorSettings) -> None:
    assert OperatorSettings.from_env(environ) == expected


@pytest.mark.parametrize(("environ", "message"), [
    ({MEMBER_INGRESS_FROM_ENV: "[{"}, "is not JSON"),
    ({MEMBER_INGRESS_FROM_ENV: '{"ipBlock": {}}'}, "must be a JSON list"),
    ({MEMBER_INGRESS_FROM_ENV: "[{}]"}, "none of them empty"),
    ({ALLOW_TESTING_ANNOTATIONS_ENV: "yes"}, "must be true or false"),
    ({MEMBER_HTTP_VIA_ENV: "127.0.0.1"}, "must be host:port"),
    ({MEMBER_HTTP_VIA_ENV: ":18080"}, "must be host:port"),
    ({MEMBER_HTTP_VIA_ENV: "127.0.0.1:0"}, "must be host:port"),
    ({MEMBER_HTTP_VIA_ENV: "127.0.0.1:http"}, "must be host:port"),
])
def test_a_setting_the_operator_cannot_read_stops_it(environ: dict[str, str],
                                                      message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        OperatorSettings.from_env(environ)


@pytest.mark.parametrize("name", [ALLOW_TESTING_ANNOTATIONS_ENV, MEMBER_HTTP_VIA_ENV])
def test_the_chart_never_sets_a_bench_only_setting(name: str) -> None:
    chart = Path(__file__).resolve().parents[3] / "charts" / "staticfleet"
    files = [f for f in chart.rglob("*") if f.is_file()]
    assert any("STATICFLEET_MEMBER_INGRESS_FROM" in f.read_text() for f in files), \
        "the chart's files are where the operator's settings would be"
    assert [str(f) for f in files if name in f.read_text()] == []


def test_every_setting_is_in_the_install_guides_table() -> None:
    from staticfleet.decisions import settings

    guide = (Path(__file__).resolve().parents[3] / "docs" / "install.md").read_text()
    table = guide.split("### Operator settings", 1)[1].split("\n## ", 1)[0]
    names = {v for k, v in vars(settings).items() if k.endswith("_ENV")}
    assert {MEMBER_INGRESS_FROM_ENV, ALLOW_TESTING_ANNOTATIONS_ENV, MEMBER_HTTP_VIA_ENV} <= names
    assert {n for n in names if f"| `{n}` |" in table} == names


# --- the members' NetworkPolicy -------------------------------------------------------------

@pytest.mark.parametrize(("peers", "kinds"), [
    # Not started with sources (a development operator): no policy.
    (None, ["ConfigMap", "Service", "PodDisruptionBudget"]),
    (PEERS, ["ConfigMap", "Service", "PodDisruptionBudget", "NetworkPolicy"]),
])
def test_the_member_network_policy_is_a_child_of_every_group(peers: list[dict[str, Any]] | None,
                                                             kinds: list[str]) -> None:
    """One per group, in the group's namespace, whichever namespaces the operator watches: on
    the first pass and on every pass after (the apply layer sends it again only when it
    changed, or to correct drift)."""
    settings = OperatorSettings(member_ingress_from=None if peers is None else tuple(peers))
    first = decide(snapshot(CG, state="Dead", settings=settings))
    pods = running(first)
    later = decide(snapshot(CG, pods, previous=without_nulls(dict(first.status)),
                            settings=settings))
    for plan in (first, later):
        assert [ch["kind"] for ch in plan.children] == kinds
    if peers is not None:
        policy = later.children[-1]
        assert policy["metadata"]["namespace"] == CG["metadata"]["namespace"]
        assert policy["spec"]["ingress"][0]["from"] == PEERS
        selector = policy["spec"]["podSelector"]["matchLabels"]
        assert all(selector.items() <= p["metadata"]["labels"].items() for p in pods)


# --- the test-only annotations --------------------------------------------------------------

DYNAMIC = with_path(CG, "metadata.annotations", {DYNAMIC_MEMBERSHIP_ANNOTATION: "true"})
ALLOWED = OperatorSettings(allow_testing_annotations=True)


def _instance_ids(plan: Any) -> list[str | None]:
    return [next((e.get("value") for e in create.pod["spec"]["containers"][0]["env"]
                  if e["name"] == "STATICFLEET_GROUP_INSTANCE_ID"), None)
            for create in plan.create]


def test_a_test_only_annotation_is_ignored_and_said_so_without_the_setting() -> None:
    plan = decide(snapshot(DYNAMIC, state="Dead"))
    # Ignored: the members keep their group.instance.id (static membership).
    assert _instance_ids(plan) == ["orders-0", "orders-1", "orders-2"]
    cond = c.get_condition(plan.status["conditions"], c.TESTING_ANNOTATIONS)
    assert cond is not None and cond["status"] == "False"
    assert cond["reason"] == c.TESTING_ANNOTATIONS_IGNORED
    assert DYNAMIC_MEMBERSHIP_ANNOTATION in cond["message"]
    assert ALLOW_TESTING_ANNOTATIONS_ENV in cond["message"]
    (event,) = [e for e in plan.events if e.reason == c.TESTING_ANNOTATIONS_IGNORED]
    assert event.type == "Warning" and event.message == cond["message"]
    # Said once: the next pass keeps the condition and posts no second Event.
    pods = running(plan)
    again = decide(snapshot(DYNAMIC, pods, previous=without_nulls(dict(plan.status))))
    assert c.get_condition(again.status["conditions"], c.TESTING_ANNOTATIONS) == cond
    assert c.TESTING_ANNOTATIONS_IGNORED not in [e.reason for e in again.events]
    # The annotation removed: the condition goes.
    gone = decide(snapshot(CG, pods, previous=without_nulls(dict(again.status))))
    assert c.get_condition(gone.status["conditions"], c.TESTING_ANNOTATIONS) is None


def test_a_test_only_annotation_is_honoured_with_the_setting() -> None:
    plan = decide(snapshot(DYNAMIC, state="Dead", settings=ALLOWED))
    assert _instance_ids(plan) == [None, None, None]
    assert c.get_condition(plan.status["conditions"], c.TESTING_ANNOTATIONS) is None
    assert c.TESTING_ANNOTATIONS_IGNORED not in [e.reason for e in plan.events]
    _, status = settled(CG)
    assert c.get_condition(status["conditions"], c.TESTING_ANNOTATIONS) is None


@pytest.mark.parametrize("allowed", [False, True])
def test_a_handoff_without_a_drain_only_with_the_setting(allowed: bool) -> None:
    """The bench's warm handoff that stops the old member (`STOP_HANDOFF_ANNOTATION`): with the
    setting the old member is stopped; without it the handoff drains it, as in production."""
    roll = WarmRoll()
    stop_first = with_path(WARM_NEW, "metadata.annotations", {STOP_HANDOFF_ANNOTATION: "true"})
    roll.standby = running(roll.step(1), ready=False, tag="b")[0]
    roll.t += 5
    plan = decide(replace(snapshot(
        stop_first, [*roll.pods, roll.standby], previous=roll.status, in_group=(0, 1, 2),
        now_offset_s=roll.t, statuses=roll.statuses(standby="ready", standby_ready_at=roll.at(5)),
        settings=OperatorSettings(allow_testing_annotations=allowed))))
    if allowed:
        (stop,) = plan.delete
        assert plan.switchovers == () and stop.uid == roll.old2["metadata"]["uid"]
    else:
        (switch,) = plan.switchovers
        assert switch.old.uid == roll.old2["metadata"]["uid"] and plan.delete == ()
        cond = c.get_condition(plan.status["conditions"], c.TESTING_ANNOTATIONS)
        assert cond is not None and STOP_HANDOFF_ANNOTATION in cond["message"]
