"""The CRD's structure: every field described, CEL rules where promised, examples that parse.

The API server itself checks the CRD in tests/integration/test_crd.py; here the checks are on
the YAML, in milliseconds.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from member_contract import SASL_MECHANISMS, SECURITY_PROTOCOLS
from staticfleet.decisions.rebalance.causes import CAUSES, SIGN_KINDS, Sign
from staticfleet.decisions.rebalance.ledger import RECENT, Entry, Ledger
from staticfleet.decisions.rollout.state import InFlight, Phase, RolloutState
from staticfleet.decisions.spec.fields import SpecError
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts.widening import State as WideningState
from staticfleet.decisions.timeouts.widening import Widening

ROOT = Path(__file__).resolve().parents[3]
CRD = ROOT / "crds" / "consumergroups.staticfleet.io.yaml"
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    return yaml.safe_load(CRD.read_text())


@pytest.fixture(scope="module")
def schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        node = node["properties"][part]
    return node


def test_every_field_has_a_description(schema: dict[str, Any]) -> None:
    # metadata is the API server's own (it refuses a schema there beyond type: object).
    missing = [
        p for p, n in walk(schema, "") if p != ".metadata" and not n.get("description", "").strip()
    ]
    assert missing == []


def test_status_has_a_schema_not_a_blank_cheque(schema: dict[str, Any]) -> None:
    status = at(schema, "status")
    assert not status.get("x-kubernetes-preserve-unknown-fields")
    for field in ("observedGeneration", "conditions", "members", "timeouts", "rollout"):
        assert field in status["properties"]
    phases = at(schema, "status.rollout.phase")["enum"]
    # The CRD's phases are the roller's, in the same order.
    assert phases == list(typing.get_args(Phase))
    assert "Halted" in phases and "RolledBack" in phases


def test_every_rollout_status_key_the_roller_writes_is_in_the_schema(
        schema: dict[str, Any]) -> None:
    """The API server prunes a status field the schema lacks: the roller's memory (a
    rollback's queue, say) would be lost on the next pass."""
    full = RolloutState(revision="r", started_at=datetime(2026, 1, 1, tzinfo=UTC),
                        finished_at=datetime(2026, 1, 1, tzinfo=UTC), rebalances_at_start=0,
                        in_flight=(InFlight(1, None),))
    written = set(full.to_status(0))
    assert written - set(at(schema, "status.rollout")["properties"]) == set()


def test_every_widening_key_the_operator_writes_is_in_the_schema(
        schema: dict[str, Any]) -> None:
    """`status.timeouts.widening` is the widening's only record: a key the schema lacks would be
    pruned, and an operator restarted mid-rollout would not know the group is widened."""
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    full = Widening("Restored", 62000, 45000, moment, widened_at=moment, stops_from=moment,
                    restored_at=moment, reason="why")
    node = at(schema, "status.timeouts.widening")
    assert set(full.to_status()) - set(node["properties"]) == set()
    assert node["properties"]["state"]["enum"] == list(typing.get_args(WideningState))


def test_the_rebalance_ledger_the_pass_writes_is_in_the_schema(schema: dict[str, Any]) -> None:
    """Every key of `status.rebalanceLedger` (and of its entries and signs) is in the schema
    (the API server would prune it), and the causes and signs are the code's, in its order."""
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    written = Ledger(recent=(Entry(moment, 1, 2, CAUSES[0], "e"),),
                     pending=(Entry(moment, 2, 3, scale="s", rollout="r"),),
                     signs=(Sign(SIGN_KINDS[0], moment, "s"),), foreign=("x",),
                     coordinator=1).to_status()
    node = at(schema, "status.rebalanceLedger")
    assert set(written) - set(node["properties"]) == set()
    for key in ("recent", "pending", "signs"):
        assert set(written[key][0]) - set(node["properties"][key]["items"]["properties"]) == set()
    recorded = node["properties"]["pending"]["items"]["properties"]["recorded"]["properties"]
    assert set(written["pending"][0]["recorded"]) - set(recorded) == set()
    assert at(schema, "status.rebalanceLedger.recent")["items"]["properties"]["cause"][
        "enum"] == list(CAUSES)
    assert at(schema, "status.rebalanceLedger.signs")["items"]["properties"]["sign"][
        "enum"] == list(SIGN_KINDS)
    assert at(schema, "status.rebalanceLedger.recent")["maxItems"] == RECENT


def test_names_subresources_and_columns(crd: dict[str, Any]) -> None:
    spec = crd["spec"]
    assert spec["group"] == "staticfleet.io" and spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["cg"] and "staticfleet" in spec["names"]["categories"]
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Desired": ".spec.replicas",
        "Ready": ".status.readyReplicas",
        "State": ".status.groupState",
        "Rebalances": ".status.rebalances",
        "Rollout": ".status.rollout.phase",
        "Session": ".status.timeouts.sessionTimeoutMs",
        "Shard": ".status.shard",
        "Age": ".metadata.creationTimestamp",
    }
    # The shard shows with `kubectl get -o wide` only (most installations have none).
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority")]
    assert wide == ["Shard"]


CEL = [
    ("spec.kafka", "set exactly one of kafka.topics or kafka.topicPattern"),
    ("spec.kafka.security", "security.sasl is required"),
    ("spec.kafka.clientProperties", "may not set group.instance.id"),
    ("spec.kafka.clientProperties", "may not set sasl.* keys"),
    ("spec.kafka.clientProperties", "may set only the ssl.* keys ssl.cipher.suites"),
    ("spec.kafka.clientProperties", "may not set enable.ssl.certificate.verification"),
    ("spec.kafka.security.sasl", "sasl.oauthbearer is required with mechanism OAUTHBEARER"),
    ("spec.kafka.security.sasl", "sasl.usernameSecretRef and sasl.passwordSecretRef are required"),
    ("spec.membership", "assignmentStrategy applies to protocol classic only"),
    ("spec", "rollout.widenSessionTimeout applies to membership.protocol consumer"),
    ("spec.membership.timeouts", "at most a third of sessionTimeoutMs"),
    ("spec.membership.timeouts", "maxPollIntervalMs must be at least sessionTimeoutMs"),
    ("spec.processing.spark", "spark.connectUrl is required with mode connect"),
    ("spec.processing.sink", "sink.topic is required with type kafka"),
    ("spec.processing.sink", "sink.path is required with type parquet"),
    ("spec.template", "template.env may not set STATICFLEET_*"),
]


@pytest.mark.parametrize(("path", "message"), CEL, ids=[f"{p}:{m[:30]}" for p, m in CEL])
def test_cel_rules_are_present(schema: dict[str, Any], path: str, message: str) -> None:
    rules = at(schema, path).get("x-kubernetes-validations") or []
    assert any(message in r["message"] for r in rules), rules


def test_cel_rules_look_like_cel(schema: dict[str, Any]) -> None:
    """Balanced brackets and quotes, single-quoted strings, known functions only."""
    known = {"has", "startsWith", "all", "size", "exists", "split", "matches"}
    for path, node in walk(schema, ""):
        for rule in node.get("x-kubernetes-validations") or []:
            text = rule["rule"]
            assert text.count("(") == text.count(")"), (path, text)
            assert text.count("[") == text.count("]"), (path, text)
            assert text.count("'") % 2 == 0 and '"' not in text, (path, text)
            calls = set(re.findall(r"([A-Za-z_]+)\(", text))
            assert calls <= known, (path, calls - known)
            assert rule["message"].strip(), path


# Fields whose change the broker does not take as a static rejoin: (node, fieldPath, the CEL
# expression of their effective value when absent). Checked on the real API server in
# tests/integration/test_crd.py; here that each rule is a transition rule on the effective value.
TRANSITIONS = [
    ("", ".spec.kafka.groupId", "self.metadata.name"),
    ("spec.membership", ".protocol", "'classic'"),
    ("spec.membership", ".assignmentStrategy", "'range'"),
]


@pytest.mark.parametrize(("path", "field", "absent"), TRANSITIONS, ids=[t[1] for t in TRANSITIONS])
def test_fields_the_broker_cannot_roll_are_immutable_by_effective_value(
    schema: dict[str, Any], path: str, field: str, absent: str
) -> None:
    node = at(schema, path) if path else schema
    rules = [r for r in node.get("x-kubernetes-validations") or [] if r.get("fieldPath") == field]
    assert len(rules) == 1, node.get("x-kubernetes-validations")
    rule = rules[0]
    text = " ".join(rule["rule"].split())
    old_absent = absent.replace("self.", "oldSelf.")
    assert f"(has(self{field}) ? self{field} : {absent})" in text, text
    assert f"(has(oldSelf{field}) ? oldSelf{field} : {old_absent})" in text, text
    assert " == " in text, text
    assert rule["reason"] == "FieldValueForbidden"
    # The API server prefixes the field's path; the message says what to do instead.
    message = " ".join(rule["message"].split())
    assert message.startswith("cannot be changed") and "Instead, " in message, message


def test_transition_defaults_match_the_model() -> None:
    body = {"metadata": {"name": "orders"},
            "spec": {"kafka": {"bootstrapServers": "k:9092", "topics": ["t"]},
                     "template": {"image": "i"}}}
    group = ConsumerGroupSpec.from_body(body)
    assert group.kafka.group_id == "orders"
    assert group.membership.protocol == "classic"
    assert group.membership.assignment_strategy == "range"


def test_operator_owned_client_properties_match_the_model(schema: dict[str, Any]) -> None:
    from staticfleet.decisions.spec.kafka import OWNED_CLIENT_PROPERTIES

    rules = " ".join(
        r["rule"] for r in at(schema, "spec.kafka.clientProperties")["x-kubernetes-validations"]
    )
    for key in OWNED_CLIENT_PROPERTIES:
        assert f"'{key}'" in rules, key


def test_the_ssl_tuning_keys_match_the_model(schema: dict[str, Any]) -> None:
    from staticfleet.decisions.spec.kafka import SSL_TUNING_PROPERTIES

    rules = [r["rule"] for r in at(schema, "spec.kafka.clientProperties")[
        "x-kubernetes-validations"] if "'ssl.'" in r["rule"]]
    assert len(rules) == 1
    assert rules[0].endswith(
        "[" + ", ".join(f"'{k}'" for k in SSL_TUNING_PROPERTIES) + "])"), rules[0]


@pytest.mark.parametrize("security", ["security", "adminSecurity"])
def test_protocols_and_sasl_mechanisms_match_the_member_contract(schema: dict[str, Any],
                                                                 security: str) -> None:
    path = f"spec.kafka.{security}"
    assert tuple(at(schema, f"{path}.protocol")["enum"]) == SECURITY_PROTOCOLS
    assert tuple(at(schema, f"{path}.sasl.mechanism")["enum"]) == SASL_MECHANISMS


def test_defaults_match_the_model(schema: dict[str, Any]) -> None:
    assert at(schema, "spec.replicas")["default"] == 1
    assert at(schema, "spec.template.terminationGracePeriodSeconds")["default"] == 30
    assert at(schema, "spec.membership.protocol")["default"] == "classic"
    assert "default" not in at(schema, "spec.membership.assignmentStrategy")
    assert at(schema, "spec.membership.autoTuning.restartMarginPercent")["default"] == 150
    assert at(schema, "spec.processing.batch.maxRecords")["default"] == 10000
    assert at(schema, "spec.processing.spark.master")["default"] == "local[2]"
    assert at(schema, "spec.processing.autoOffsetReset")["default"] == "earliest"
    assert at(schema, "spec.rollout.maxUnavailable")["default"] == 1


def test_the_example_parses_into_the_model() -> None:
    group = ConsumerGroupSpec.from_body(
        yaml.safe_load((EXAMPLES / "consumergroup.yaml").read_text())
    )
    assert group.replicas == 3
    assert group.processing.transform == "consumer_runtime.transforms:count_by_key"
    assert group.processing.sink.type == "parquet"


@pytest.mark.parametrize(
    "example", sorted(p.name for p in EXAMPLES.glob("invalid-*.yaml")), ids=str
)
def test_invalid_examples_are_refused_by_the_model_too(example: str) -> None:
    with pytest.raises(SpecError):
        ConsumerGroupSpec.from_body(yaml.safe_load((EXAMPLES / example).read_text()))


# -- bounds: every field a tenant writes has one, the same in the CRD and the parser ----------

BOUND_KEYS = {"maxLength": "max_length", "maxItems": "max_items",
              "maxProperties": "max_properties", "maximum": "maximum"}


ELSEWHERE: set[str] = set()
"""Fields bounded elsewhere than `bounds.BOUNDS` (none now)."""


def spec_fields(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path, node in walk(at(schema, "spec"), "spec"):
        if path not in ELSEWHERE:
            yield path, node


def test_every_spec_field_has_a_bound(schema: dict[str, Any]) -> None:
    """A string without an enum has maxLength, a list maxItems, a map maxProperties, an integer
    a maximum; fails when a field is added to the spec without one (add its row to
    `decisions.spec.bounds.BOUNDS` and run scripts/ to put it in the CRD)."""
    missing = []
    for path, node in spec_fields(schema):
        kind = node.get("type")
        needs = {"string": "maxLength", "array": "maxItems", "integer": "maximum"}.get(kind)
        if kind == "string" and "enum" in node:
            needs = None
        if kind == "object" and isinstance(node.get("additionalProperties"), dict):
            needs = "maxProperties"
        if needs is not None and needs not in node:
            missing.append(f"{path} ({needs})")
    assert missing == []


def test_the_crds_bounds_are_the_parsers(schema: dict[str, Any]) -> None:
    """The parser checks what the CRD does (`bounds.BOUNDS`); fails when one changes alone."""
    from staticfleet.decisions.spec.bounds import BOUNDS, Bound

    crd: dict[str, Bound] = {}
    for path, node in spec_fields(schema):
        found = {attr: node[key] for key, attr in BOUND_KEYS.items() if key in node}
        if not found:
            continue
        rules = " ".join(r["rule"] for r in node.get("x-kubernetes-validations") or ())
        key_length = re.search(r"self\.all\(k, k\.size\(\) <= (\d+)\)", rules)
        if key_length:
            found["max_key_length"] = int(key_length.group(1))
        crd[path] = Bound(**found)
    assert crd == dict(BOUNDS)


def test_the_bootstrap_rules_count_what_the_parser_counts(schema: dict[str, Any]) -> None:
    from staticfleet.decisions.spec.bounds import MAX_ADDRESS_LENGTH, MAX_BOOTSTRAP_ADDRESSES

    rules = [r["rule"] for r in at(schema, "spec.kafka.bootstrapServers")[
        "x-kubernetes-validations"]]
    assert f"self.split(',').size() <= {MAX_BOOTSTRAP_ADDRESSES}" in rules
    # One linear-time match: a split and a loop over its items cost 2.8x the API server's
    # budget for one rule (a list of up to 4192 strings of up to 4192 characters).
    n = MAX_ADDRESS_LENGTH
    assert f"self.matches('^[^,]{{0,{n}}}(,[^,]{{0,{n}}})*$')" in rules


def test_every_invalid_example_names_the_field_it_is_refused_at() -> None:
    """Each invalid example says, in a `# Field:` line, which field the API server's refusal
    names (tests/integration/test_crd.py checks it there)."""
    for example in sorted(EXAMPLES.glob("invalid-*.yaml")):
        assert re.search(r"^# Field: spec\.\S+$", example.read_text(), re.M), example.name
