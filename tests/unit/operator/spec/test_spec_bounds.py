"""The spec parser refuses what the CRD's bounds refuse (`decisions.spec.bounds`), naming the
field, for a body that never passed this CRD (an operator running against an older one)."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet.decisions.spec.fields import SpecError
from staticfleet.decisions.spec.model import ConsumerGroupSpec

pytestmark = pytest.mark.unit


def body(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"kafka": {"bootstrapServers": "kafka:9092", "topics": ["orders"]},
                            "template": {"image": "staticfleet/member:0.1.0"}}
    for path, value in spec.items():
        node = base
        keys = path.split("__")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return {"metadata": {"name": "orders", "namespace": "team"}, "spec": base}


REFUSED = [
    ("17 bootstrap addresses",
     {"kafka__bootstrapServers": ",".join(f"k{i}:9092" for i in range(17))},
     "spec.kafka.bootstrapServers: may name at most 16 addresses, got 17"),
    ("a bootstrap address of 262 characters",
     {"kafka__bootstrapServers": "k:1," + "b" * 257 + ":9092"},
     "spec.kafka.bootstrapServers: address 2 has 262 characters, at most 261 are taken"),
    ("101 topics", {"kafka__topics": [f"t{i}" for i in range(101)]},
     "spec.kafka.topics: may have at most 100 items, got 101"),
    ("1001 replicas", {"replicas": 1001}, "spec.replicas: may be at most 1000, got 1001"),
    ("129 env variables", {"template__env": [{"name": f"V{i}"} for i in range(129)]},
     "spec.template.env: may have at most 128 items, got 129"),
    ("an env value of 8193 characters", {"template__env": [{"name": "V", "value": "x" * 8193}]},
     "spec.template.env[0].value: may have at most 8192 characters, got 8193"),
    ("65 client properties", {"kafka__clientProperties": {f"k{i}": "v" for i in range(65)}},
     "spec.kafka.clientProperties: may have at most 64 entries, got 65"),
    ("a client property value of 1025 characters",
     {"kafka__clientProperties": {"client.rack": "x" * 1025}},
     "spec.kafka.clientProperties[client.rack]: may have at most 1024 characters, got 1025"),
    ("a label key of 318 characters", {"template__podLabels": {"a" * 318: "v"}},
     "spec.template.podLabels: keys may have at most 317 characters"),
    ("an image of 1025 characters", {"template__image": "i" * 1025},
     "spec.template.image: may have at most 1024 characters, got 1025"),
]


@pytest.mark.parametrize(("what", "spec", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_field_past_its_bound_is_refused_naming_it(what: str, spec: dict[str, Any],
                                                     message: str) -> None:
    with pytest.raises(SpecError) as refused:
        ConsumerGroupSpec.from_body(body(**spec))
    assert message in str(refused.value)
    assert len(str(refused.value)) < 200, "the message never quotes the value"


def test_the_longest_bootstrap_list_is_taken() -> None:
    addresses = ",".join(f"{i:02d}{'b' * 254}:9092" for i in range(16))
    spec = ConsumerGroupSpec.from_body(body(kafka__bootstrapServers=addresses))
    assert spec.kafka.bootstrap_servers == addresses


def test_a_deeply_nested_passed_through_object_is_not_walked() -> None:
    """The bounds' walk stops where no row is below (an affinity nested 5000 deep would
    otherwise end the pass in a RecursionError, not a SpecError or a model)."""
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(5000):
        node["x"] = {}
        node = node["x"]
    spec = ConsumerGroupSpec.from_body(body(template__affinity=deep))
    assert spec.template.affinity is not None
