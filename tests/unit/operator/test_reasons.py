"""restart_reasons: which parts changed between a pod and the desired member, as Events."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet.decisions import reasons as r
from staticfleet.decisions.builders import build_member_pod, member_spec_view
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from tests.unit.operator.support import body, with_path

TIMEOUTS = EffectiveTimeouts(45000, 3000, 300000, sources={})


def view(b: dict[str, Any]) -> r.MemberSpecView:
    return member_spec_view(ConsumerGroupSpec.from_body(b), TIMEOUTS)


def pod(b: dict[str, Any]) -> dict[str, Any]:
    g = ConsumerGroupSpec.from_body(b)
    return build_member_pod(g, 0, member_spec_view(g, TIMEOUTS))


BASE = body()
CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("image", with_path(BASE, "spec.template.image", "img:2"), [r.IMAGE_CHANGED]),
    ("pull policy", with_path(BASE, "spec.template.imagePullPolicy", "Always"), [r.IMAGE_CHANGED]),
    ("command", with_path(BASE, "spec.template.command", ["run"]), [r.COMMAND_CHANGED]),
    ("args", with_path(BASE, "spec.template.args", ["-v"]), [r.COMMAND_CHANGED]),
    ("env", with_path(BASE, "spec.template.env", [{"name": "A", "value": "1"}]), [r.ENV_CHANGED]),
    (
        "envFrom",
        with_path(BASE, "spec.template.envFrom", [{"secretRef": {"name": "s"}}]),
        [r.ENV_CHANGED],
    ),
    (
        "spark",
        with_path(BASE, "spec.processing.spark", {"master": "local[4]"}),
        [r.SPARK_CONF_CHANGED],
    ),
    ("batch", with_path(BASE, "spec.processing.batch", {"maxRecords": 5}), [r.PROCESSING_CHANGED]),
    (
        "client",
        with_path(BASE, "spec.kafka.clientProperties", {"client.rack": "a"}),
        [r.CLIENT_CONFIG_CHANGED],
    ),
    (
        "bootstrap",
        with_path(BASE, "spec.kafka.bootstrapServers", "other:9092"),
        [r.CLIENT_CONFIG_CHANGED],
    ),
    (
        "resources",
        with_path(BASE, "spec.template.resources", {"requests": {"cpu": "1"}}),
        [r.TEMPLATE_CHANGED],
    ),
    ("nonce", with_path(BASE, "spec.rollout.restartNonce", "x"), [r.MANUAL_RESTART]),
    (
        "image and nonce",
        with_path(
            with_path(BASE, "spec.template.image", "img:3"), "spec.rollout.restartNonce", "y"
        ),
        [r.IMAGE_CHANGED, r.MANUAL_RESTART],
    ),
    ("nothing", BASE, []),
]


@pytest.mark.parametrize(("what", "desired", "codes"), CASES, ids=[c[0] for c in CASES])
def test_reasons_name_the_changed_parts(
    what: str, desired: dict[str, Any], codes: list[str]
) -> None:
    reasons = r.restart_reasons(view(desired), pod(BASE))
    assert [x.code for x in reasons] == codes
    assert all(x.message.startswith("pod orders-0") for x in reasons)


def test_image_message_names_both_images() -> None:
    (reason,) = r.restart_reasons(view(with_path(BASE, "spec.template.image", "img:2")), pod(BASE))
    assert "staticfleet/member:0.1.0" in reason.message and "img:2" in reason.message


@pytest.mark.parametrize("fingerprint", [None, "not json", "[1]"])
def test_pod_without_a_usable_fingerprint_gets_one_generic_reason(fingerprint: str | None) -> None:
    old = pod(BASE)
    old["metadata"]["annotations"]["staticfleet.io/revision"] = "0000000000"
    if fingerprint is None:
        del old["metadata"]["annotations"]["staticfleet.io/fingerprint"]
    else:
        old["metadata"]["annotations"]["staticfleet.io/fingerprint"] = fingerprint
    (reason,) = r.restart_reasons(view(BASE), old)
    assert reason.code == r.TEMPLATE_CHANGED and "0000000000" in reason.message


def test_revision_differs_but_parts_equal() -> None:
    old = pod(BASE)
    old["metadata"]["annotations"]["staticfleet.io/revision"] = "stale"
    assert [x.code for x in r.restart_reasons(view(BASE), old)] == [r.TEMPLATE_CHANGED]


def test_pod_revision() -> None:
    assert r.pod_revision(pod(BASE)) == view(BASE).revision
    assert r.pod_revision({"metadata": {}}) is None
