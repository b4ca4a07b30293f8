"""The ConsumerGroup CRD on the real API server: it installs with `kubectl apply`, teaches
with `kubectl explain`, and refuses invalid objects with messages a user understands."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from staticfleet_dev.testkit.kube import (
    create_namespace,
    install_crds,
    kubectl,
    load_example,
    to_yaml,
)
from tests.support import unique

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ns(kubeconfig: Path) -> str:
    install_crds(kubeconfig)
    name = unique("crd")
    create_namespace(kubeconfig, name)
    return name


def valid() -> dict[str, Any]:
    return {
        "apiVersion": "staticfleet.io/v1alpha1", "kind": "ConsumerGroup",
        "metadata": {"name": "orders"},
        "spec": {
            "replicas": 3,
            "kafka": {"bootstrapServers": "kafka:9092", "topics": ["orders"]},
            "template": {"image": "staticfleet/member:0.1.0"},
        },
    }


def with_spec(path: str, value: Any) -> dict[str, Any]:
    obj = valid()
    node = obj["spec"]
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return obj


def with_pattern(pattern: str) -> dict[str, Any]:
    """The valid object subscribing by `pattern` instead of its topics."""
    obj = with_spec("kafka.topicPattern", pattern)
    del obj["spec"]["kafka"]["topics"]
    return obj


def dry_run(kubeconfig: Path, ns: str, obj: dict[str, Any]) -> tuple[int, str]:
    proc = kubectl(kubeconfig, "-n", ns, "apply", "--dry-run=server", "-f", "-",
                   input=to_yaml(obj), check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_valid_object_and_example_are_accepted(kubeconfig: Path, ns: str) -> None:
    for obj in (valid(), load_example("consumergroup.yaml")):
        code, out = dry_run(kubeconfig, ns, obj)
        assert code == 0, out


INVALID = [
    ("replicas below zero", with_spec("replicas", -1), "spec.replicas"),
    ("heartbeat above a third of the session",
     with_spec("membership.timeouts", {"sessionTimeoutMs": 30000, "heartbeatIntervalMs": 15000}),
     "heartbeatIntervalMs must be at most a third of sessionTimeoutMs"),
    ("topics and a pattern", with_spec("kafka.topicPattern", "orders-.*"),
     "set exactly one of kafka.topics or kafka.topicPattern"),
    ("a topic pattern too long", with_pattern("o" * 257), "spec.kafka.topicPattern: Too long"),
    ("a topic name Kafka refuses", with_spec("kafka.topics", ["orders/eu"]), "spec.kafka.topics"),
    ("an operator-owned client property",
     with_spec("kafka.clientProperties", {"group.instance.id": "x"}),
     "clientProperties may not set group.instance.id"),
    ("auto commit through client properties",
     with_spec("kafka.clientProperties", {"enable.auto.commit": "true"}),
     "clientProperties may not set enable.auto.commit"),
    ("SASL without credentials", with_spec("kafka.security", {"protocol": "SASL_SSL"}),
     "security.sasl is required when security.protocol is SASL_PLAINTEXT or SASL_SSL"),
    ("an ssl file through client properties",
     with_spec("kafka.clientProperties", {"ssl.ca.location": "/etc/ssl/ca.pem"}),
     "clientProperties may set only the ssl.* keys ssl.cipher.suites"),
    ("certificate verification off",
     with_spec("kafka.clientProperties", {"enable.ssl.certificate.verification": "false"}),
     "the broker's certificate is always verified"),
    ("OAUTHBEARER without its token endpoint",
     with_spec("kafka.security", {"protocol": "SASL_SSL", "sasl": {"mechanism": "OAUTHBEARER"}}),
     "sasl.oauthbearer is required with mechanism OAUTHBEARER"),
    ("the operator's SASL without credentials",
     with_spec("kafka.adminSecurity", {"protocol": "SASL_SSL"}),
     "adminSecurity.sasl is required when adminSecurity.protocol is SASL_PLAINTEXT or SASL_SSL"),
    ("SCRAM without a password",
     with_spec("kafka.security", {"protocol": "SASL_SSL", "sasl": {
         "mechanism": "SCRAM-SHA-512", "usernameSecretRef": {"name": "s", "key": "u"}}}),
     "sasl.usernameSecretRef and sasl.passwordSecretRef are required"),
    ("connect mode without a URL", with_spec("processing.spark", {"mode": "connect"}),
     "spark.connectUrl is required with mode connect"),
    ("kafka sink without a topic", with_spec("processing.sink", {"type": "kafka"}),
     "sink.topic is required with type kafka"),
    ("an unknown assignor", with_spec("membership.assignmentStrategy", "sticky"),
     "spec.membership.assignmentStrategy"),
    ("assignor with KIP-848",
     with_spec("membership", {"protocol": "consumer", "assignmentStrategy": "range"}),
     "assignmentStrategy applies to protocol classic only"),
    ("session widening for a classic group", with_spec("rollout.widenSessionTimeout", True),
     "rollout.widenSessionTimeout applies to membership.protocol consumer (KIP-848) only"),
]


def test_session_widening_is_taken_where_it_applies_or_is_off(kubeconfig: Path, ns: str) -> None:
    code, out = dry_run(kubeconfig, ns, with_spec("rollout.widenSessionTimeout", True))
    assert code != 0 and "spec.rollout.widenSessionTimeout:" in out, out
    kip848 = with_spec("membership", {"protocol": "consumer"})
    for obj in (with_spec("rollout.widenSessionTimeout", False),
                {**kip848, "spec": {**kip848["spec"], "rollout": {"widenSessionTimeout": True}}},
                {**kip848, "spec": {**kip848["spec"], "rollout": {"widenSessionTimeout": False}}}):
        code, out = dry_run(kubeconfig, ns, obj)
        assert code == 0, out


@pytest.mark.parametrize(("what", "obj", "message"), INVALID, ids=[i[0] for i in INVALID])
def test_invalid_object_is_refused_with_its_message(
    kubeconfig: Path, ns: str, what: str, obj: dict[str, Any], message: str
) -> None:
    code, out = dry_run(kubeconfig, ns, obj)
    assert code != 0, f"{what} was accepted"
    assert message in out, out
    assert "spec.spec." not in out, out


def ref(name: str, key: str) -> dict[str, str]:
    return {"name": name, "key": key}


SECURITY = {
    "SSL": {"protocol": "SSL", "tls": {"caSecretRef": ref("kafka-ca", "ca.crt")}},
    "mutual TLS": {"protocol": "SSL", "tls": {"caSecretRef": ref("kafka-ca", "ca.crt"),
                                              "certSecretRef": ref("member-tls", "tls.crt"),
                                              "keySecretRef": ref("member-tls", "tls.key")}},
    "SCRAM": {"protocol": "SASL_SSL", "sasl": {"mechanism": "SCRAM-SHA-512",
                                               "usernameSecretRef": ref("scram", "username"),
                                               "passwordSecretRef": ref("scram", "password")}},
    "OAUTHBEARER": {"protocol": "SASL_SSL", "sasl": {"mechanism": "OAUTHBEARER", "oauthbearer": {
        "tokenEndpointUrl": "https://idp.example.com/oauth2/token", "scope": "kafka",
        "extensions": {"logicalCluster": "lkc-1"},
        "clientIdSecretRef": ref("oauth", "client-id"),
        "clientSecretSecretRef": ref("oauth", "client-secret")}}},
}


@pytest.mark.parametrize("mechanism", SECURITY)
def test_each_security_mechanism_is_accepted(kubeconfig: Path, ns: str, mechanism: str) -> None:
    obj = with_spec("kafka.security", SECURITY[mechanism])
    obj["spec"]["kafka"]["clientProperties"] = {"ssl.curves.list": "P-256"}
    obj["spec"]["kafka"]["adminSecurity"] = SECURITY[mechanism]
    code, out = dry_run(kubeconfig, ns, obj)
    assert code == 0, out


def test_unknown_field_is_refused(kubeconfig: Path, ns: str) -> None:
    obj = copy.deepcopy(valid())
    obj["spec"]["replica"] = 3
    proc = kubectl(kubeconfig, "-n", ns, "apply", "--dry-run=server", "--validate=strict",
                   "-f", "-", input=to_yaml(obj), check=False)
    assert proc.returncode != 0
    assert 'unknown field "spec.replica"' in proc.stderr


def test_explain_teaches_the_fields(kubeconfig: Path, ns: str) -> None:
    out = kubectl(kubeconfig, "explain", "consumergroups.spec.membership.timeouts").stdout
    for field in ("sessionTimeoutMs", "heartbeatIntervalMs", "maxPollIntervalMs"):
        assert field in out
    assert "DESCRIPTION" in out.upper()
    short = kubectl(kubeconfig, "-n", ns, "get", "cg").stderr
    assert "error" not in short.lower()


# -- changes the broker does not take as a static rejoin are refused on update ------------------

def membership(**fields: str) -> dict[str, Any]:
    return {"membership": fields} if fields else {}


def group_id(value: str | None) -> dict[str, Any]:
    return {"kafka": {"groupId": value}} if value is not None else {}


def with_fields(name: str, fields: dict[str, Any]) -> dict[str, Any]:
    obj = valid()
    obj["metadata"]["name"] = name
    for section, values in fields.items():
        if isinstance(values, dict):
            obj["spec"].setdefault(section, {}).update(values)
        else:
            obj["spec"][section] = values
    return obj


GROUP_ID_REFUSED = "spec.kafka.groupId: Forbidden: cannot be changed"
PROTOCOL_REFUSED = "spec.membership.protocol: Forbidden: cannot be changed"
ASSIGNOR_REFUSED = "spec.membership.assignmentStrategy: Forbidden: cannot be changed"
NAME = "<name>"

# (what, fields before, fields after, the refusal or None when the update is accepted).
# NAME stands for the object's metadata.name, the default of groupId.
UPDATES: list[tuple[str, dict[str, Any], dict[str, Any], str | None]] = [
    ("groupId set to another value", {}, group_id("orders-v2"), GROUP_ID_REFUSED),
    ("groupId changed", group_id("orders-a"), group_id("orders-b"), GROUP_ID_REFUSED),
    ("groupId removed, back to the name", group_id("orders-a"), {}, GROUP_ID_REFUSED),
    ("groupId set to the name it defaults to", {}, group_id(NAME), None),
    ("groupId equal to the name removed", group_id(NAME), {}, None),
    ("protocol classic to consumer", {}, membership(protocol="consumer"), PROTOCOL_REFUSED),
    ("protocol consumer to classic", membership(protocol="consumer"),
     membership(protocol="classic"), PROTOCOL_REFUSED),
    ("protocol consumer removed (classic)", membership(protocol="consumer"), {},
     PROTOCOL_REFUSED),
    ("protocol set to its default", {}, membership(protocol="classic"), None),
    ("assignor range to cooperative-sticky", membership(assignmentStrategy="range"),
     membership(assignmentStrategy="cooperative-sticky"), ASSIGNOR_REFUSED),
    ("assignor set to roundrobin", {}, membership(assignmentStrategy="roundrobin"),
     ASSIGNOR_REFUSED),
    ("assignor roundrobin removed (range)", membership(assignmentStrategy="roundrobin"), {},
     ASSIGNOR_REFUSED),
    ("assignor set to its default range", {}, membership(assignmentStrategy="range"), None),
    ("assignor range removed", membership(assignmentStrategy="range"), {}, None),
    ("other fields", {"kafka": {"groupId": "orders-a"}, "membership": {"protocol": "consumer"}},
     {"kafka": {"groupId": "orders-a", "topics": ["orders", "refunds"]}, "replicas": 5,
      "membership": {"protocol": "consumer", "timeouts": {"maxPollIntervalMs": 600000}},
      "template": {"image": "staticfleet/member:0.2.0"}}, None),
]


def named(fields: dict[str, Any], name: str) -> dict[str, Any]:
    return {s: {k: name if v == NAME else v for k, v in values.items()}
            if isinstance(values, dict) else values for s, values in fields.items()}


@pytest.mark.parametrize(("what", "before", "after", "refusal"), UPDATES,
                         ids=[u[0] for u in UPDATES])
def test_an_update_the_broker_cannot_take_as_a_static_rejoin_is_refused(
    kubeconfig: Path, ns: str, what: str, before: dict[str, Any], after: dict[str, Any],
    refusal: str | None,
) -> None:
    name = unique("upd")
    kubectl(kubeconfig, "-n", ns, "apply", "-f", "-",
            input=to_yaml(with_fields(name, named(before, name))))
    code, out = dry_run(kubeconfig, ns, with_fields(name, named(after, name)))
    if refusal is None:
        assert code == 0, f"{what} was refused: {out}"
        return
    assert code != 0, f"{what} was accepted"
    assert refusal in out, out
    field = refusal.split(":")[0]
    assert out.count(field) == 1, f"the field is named more than once: {out}"
    assert "instead" in out.lower(), f"the message does not say what to do: {out}"


def test_any_group_id_protocol_and_assignor_are_accepted_on_create(
    kubeconfig: Path, ns: str
) -> None:
    for fields in (group_id("orders-v2"), membership(protocol="consumer"),
                   membership(assignmentStrategy="cooperative-sticky"),
                   membership(protocol="classic", assignmentStrategy="roundrobin")):
        code, out = dry_run(kubeconfig, ns, with_fields(unique("new"), fields))
        assert code == 0, out


def test_the_autoscaler_writes_replicas_through_scale_and_reads_who_else_does(
        kubeconfig: Path, ns: str) -> None:
    """What the autoscaler relies on, on the real API server: its write through the scale
    subresource lands only while spec.replicas is what it read; a KEDA-like writer through the
    scale subresource then owns spec.replicas in managedFields (the autoscaler stands aside);
    a write of the manifest takes it back."""
    from kubernetes import client

    from staticfleet import apply as kube_apply
    from staticfleet.decisions.autoscaler.rules import FIELD_MANAGER, replicas_owner

    kube = kube_apply.Kube(kube_apply.load_client(str(kubeconfig)))
    obj = valid()
    obj["metadata"]["name"] = unique("auto")
    obj["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 6}
    kubectl(kubeconfig, "-n", ns, "apply", "-f", "-", input=to_yaml(obj))

    def read() -> dict[str, Any]:
        return dict(kube.custom.get_namespaced_custom_object(
            "staticfleet.io", "v1alpha1", ns, "consumergroups", obj["metadata"]["name"]))

    first = read()
    assert first["spec"]["autoscaling"] == {  # the CRD's defaults
        "minReplicas": 1, "maxReplicas": 6, "targetLagSeconds": 30,
        "maxMembershipChangesPerHour": 4, "scaleDownWindowSeconds": 600,
        "scaleUpCheckSeconds": 300}
    assert replicas_owner(first) is None  # kubectl's apply owns it: not through scale
    assert kube.scale(first, 6, FIELD_MANAGER)
    after = read()
    assert after["spec"]["replicas"] == 6
    assert replicas_owner(after) is None  # its own write
    assert not kube.scale(first, 2, FIELD_MANAGER), "a stale read must not be written"
    assert read()["spec"]["replicas"] == 6

    # a KEDA-like scaler writes through the scale subresource with its own field manager
    kube.custom.patch_namespaced_custom_object_scale(
        "staticfleet.io", "v1alpha1", ns, "consumergroups", obj["metadata"]["name"],
        {"spec": {"replicas": 3}}, field_manager="keda-operator",
        _content_type="application/merge-patch+json")
    keda = read()
    assert keda["spec"]["replicas"] == 3 and replicas_owner(keda) == "keda-operator"
    # the user sets replicas in the manifest again: handed back
    obj["spec"]["replicas"] = 2
    kubectl(kubeconfig, "-n", ns, "apply", "-f", "-", input=to_yaml(obj))
    back = read()
    assert back["spec"]["replicas"] == 2 and replicas_owner(back) is None, \
        back["metadata"]["managedFields"]
    with pytest.raises(client.ApiException) as refused:
        bad = copy.deepcopy(obj)
        bad["spec"]["autoscaling"] = {"minReplicas": 1}
        kube.custom.create_namespaced_custom_object(
            "staticfleet.io", "v1alpha1", ns, "consumergroups",
            {**bad, "metadata": {"name": unique("auto-bad")}})
    assert "maxReplicas" in str(refused.value.body)


# -- bounds: every example over one is refused, naming the field; the longest admitted is taken -

EXAMPLES = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "examples").glob(
    "invalid-*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_invalid_example_is_refused_naming_its_field(
        kubeconfig: Path, ns: str, example: str) -> None:
    """Each invalid example (examples/invalid-*.yaml) is refused by the real API server, with
    the field its `# Field:` line names."""
    text = (Path(__file__).resolve().parents[2] / "examples" / example).read_text()
    field = next(line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.startswith("# Field:"))
    code, out = dry_run(kubeconfig, ns, load_example(example))
    assert code != 0, f"{example} was accepted"
    assert f"{field}:" in out or f"{field}[" in out, out


def test_the_longest_bootstrap_list_the_crd_admits_is_taken(kubeconfig: Path, ns: str) -> None:
    """16 addresses of 261 characters each: the bounds refuse more, not this."""
    from staticfleet.decisions.spec.bounds import MAX_ADDRESS_LENGTH, MAX_BOOTSTRAP_ADDRESSES

    port = ":9092"
    host = "b" * (MAX_ADDRESS_LENGTH - len(port) - 2)
    addresses = [f"{i:02d}{host}{port}" for i in range(MAX_BOOTSTRAP_ADDRESSES)]
    code, out = dry_run(kubeconfig, ns, with_spec("kafka.bootstrapServers", ",".join(addresses)))
    assert code == 0, out
    code, out = dry_run(kubeconfig, ns, with_spec(
        "kafka.bootstrapServers", ",".join([*addresses[:-1], "x" + addresses[-1]])))
    assert code != 0 and "each address (host:port) may have at most 261 characters" in out, out
    code, out = dry_run(kubeconfig, ns, with_spec(
        "kafka.bootstrapServers", ",".join(f"k{i}:9092" for i in range(17))))
    assert code != 0 and "spec.kafka.bootstrapServers: Invalid value" in out, out
    assert "at most 16 addresses" in out, out
