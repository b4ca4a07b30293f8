"""Builders follow docs/contracts.md; the revision covers exactly what needs a restart."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from staticfleet.decisions.builders import (
    build_config_map,
    build_headless_service,
    build_member_network_policy,
    build_member_pod,
    build_member_token_secret,
    build_pdb,
    config_json,
    member_spec_view,
)
from staticfleet.decisions.names import instance_id, member_name, selector_labels, selector_string
from staticfleet.decisions.spec.fields import SpecError
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from tests.unit.operator.support import TIMEOUTS, body, env_of, with_path


def group(b: dict[str, Any] | None = None) -> ConsumerGroupSpec:
    return ConsumerGroupSpec.from_body(b or body())


def pod_for(b: dict[str, Any] | None = None, ordinal: int = 1) -> dict[str, Any]:
    g = group(b)
    return build_member_pod(g, ordinal, member_spec_view(g, TIMEOUTS))


def test_names_and_ids() -> None:
    g = group(with_path(body(), "spec.kafka.groupId", "orders-v2"))
    assert member_name(g, 2) == "orders-2"
    assert instance_id(g, 2) == "orders-v2-2"
    assert selector_string(g) == (
        "app.kubernetes.io/instance=orders,app.kubernetes.io/name=staticfleet-member,"
        "staticfleet.io/group=orders"
    )


def test_member_pod_follows_the_contract() -> None:
    pod = pod_for()
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "orders-1" and meta["namespace"] == "shop"
    assert meta["labels"] == {
        "app.kubernetes.io/name": "staticfleet-member",
        "app.kubernetes.io/instance": "orders",
        "app.kubernetes.io/managed-by": "staticfleet",
        "staticfleet.io/group": "orders",
        "staticfleet.io/ordinal": "1",
    }
    assert meta["annotations"]["staticfleet.io/instance-id"] == "orders-1"
    assert len(meta["annotations"]["staticfleet.io/revision"]) == 10
    assert "ownerReferences" not in meta
    assert spec["restartPolicy"] == "Always" and spec["terminationGracePeriodSeconds"] == 30
    (c,) = spec["containers"]
    assert c["name"] == "member" and c["command"] == ["python", "-m", "consumer_runtime"]
    assert c["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    env = env_of(pod)
    # The pod carries its revision's config (a container restarted in place must not read a
    # newer one from a shared ConfigMap).
    assert "valueFrom" not in env["STATICFLEET_CONFIG"]
    assert env["STATICFLEET_CONFIG"]["value"] == config_json(group(), TIMEOUTS)
    assert env["STATICFLEET_GROUP_INSTANCE_ID"]["value"] == "orders-1"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["STATICFLEET_HTTP_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["STATICFLEET_HTTP_PORT"]["value"] == "8080"


RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                  "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                        "readOnlyRootFilesystem": True}


@pytest.mark.parametrize("standby", [False, True], ids=["member", "standby replacement"])
def test_member_pods_meet_the_restricted_standard_by_default(standby: bool) -> None:
    """The member image's user (10001), no privilege escalation, no capabilities, seccomp
    RuntimeDefault; the root filesystem read-only with an emptyDir at /tmp, where the member,
    its JVM and Spark write."""
    g = group()
    pod = build_member_pod(g, 1, member_spec_view(g, TIMEOUTS), standby=standby)
    spec = pod["spec"]
    (c,) = spec["containers"]
    assert spec["securityContext"] == RESTRICTED_POD
    assert c["securityContext"] == RESTRICTED_CONTAINER
    assert c["volumeMounts"][0] == {"name": "tmp", "mountPath": "/tmp"}
    assert spec["volumes"][0] == {"name": "tmp", "emptyDir": {}}
    # The only other volume is the member token's Secret (allowed by `restricted`), read-only.
    assert [(v["name"], sorted(v)) for v in spec["volumes"][1:]] == [
        ("member-token", ["name", "secret"])]
    assert c["volumeMounts"][1]["readOnly"] is True


@pytest.mark.parametrize("standby", [False, True], ids=["member", "standby replacement"])
def test_member_pods_read_the_token_from_a_file_of_the_secret_volume(standby: bool) -> None:
    """A file, which the kubelet updates in place (a rotated token reaches the running member),
    not an env var from the Secret, which would keep the old token until a restart."""
    g = group()
    pod = build_member_pod(g, 1, member_spec_view(g, TIMEOUTS), standby=standby)
    (c,) = pod["spec"]["containers"]
    env = {e["name"]: e for e in c["env"]}
    path = env["STATICFLEET_MEMBER_TOKEN_FILE"]["value"]
    (mount,) = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    assert mount["readOnly"] is True and path.rsplit("/", 1)[1] == "token"
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    secret = build_member_token_secret(g, "t0k3n")
    assert volume["secret"] == {"secretName": secret["metadata"]["name"]} == {
        "secretName": "orders-member-token"}
    assert secret["kind"] == "Secret" and secret["type"] == "Opaque"
    assert secret["metadata"]["labels"] == {**selector_labels(g),
                                            "app.kubernetes.io/managed-by": "staticfleet"}
    assert base64.b64decode(secret["data"]["token"]) == b"t0k3n"
    assert not [e for e in c["env"] if "secretKeyRef" in (e.get("valueFrom") or {})
                and e["valueFrom"]["secretKeyRef"]["name"] == "orders-member-token"]


def test_the_users_security_context_merges_over_the_defaults() -> None:
    b = with_path(body(), "spec.template.securityContext",
                  {"runAsUser": 2000, "seccompProfile": {"type": "Localhost",
                                                         "localhostProfile": "member.json"}})
    b = with_path(b, "spec.template.containerSecurityContext",
                  {"readOnlyRootFilesystem": False, "capabilities": {"add": ["NET_BIND_SERVICE"]}})
    spec = pod_for(b)["spec"]
    assert spec["securityContext"] == {
        **RESTRICTED_POD, "runAsUser": 2000,
        "seccompProfile": {"type": "Localhost", "localhostProfile": "member.json"}}
    assert spec["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": False,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}
    assert pod_for()["spec"]["securityContext"] == RESTRICTED_POD, "the defaults are not touched"


def test_dynamic_membership_switch_drops_the_instance_id() -> None:
    b = with_path(
        body(), "metadata.annotations", {"staticfleet.io/dynamic-membership-for-testing": "true"}
    )
    g = ConsumerGroupSpec.from_body(b, allow_testing=True)
    assert "STATICFLEET_GROUP_INSTANCE_ID" not in env_of(
        build_member_pod(g, 1, member_spec_view(g, TIMEOUTS)))
    # An operator not started to allow it keeps the instance id (and the revision).
    assert env_of(pod_for(b))["STATICFLEET_GROUP_INSTANCE_ID"]["value"] == "orders-1"
    assert member_spec_view(group(b), TIMEOUTS) == member_spec_view(group(), TIMEOUTS)


def test_a_standby_pod_reads_its_activation_from_its_own_annotation() -> None:
    """A warm handoff's replacement starts in standby until its pod is marked activated; the
    mark reaches a restarted container through the downward API (resolved at each start)."""
    g = group()
    view = member_spec_view(g, TIMEOUTS)
    standby = env_of(build_member_pod(g, 1, view, standby=True))
    assert standby["STATICFLEET_STANDBY"]["value"] == "true"
    assert standby["STATICFLEET_ACTIVATED"]["valueFrom"] == {"fieldRef": {
        "fieldPath": "metadata.annotations['staticfleet.io/activated']"}}
    assert "staticfleet.io/activated" not in build_member_pod(
        g, 1, view, standby=True)["metadata"]["annotations"], "activated only by the operator"
    cold = env_of(build_member_pod(g, 1, view))
    assert "STATICFLEET_STANDBY" not in cold and "STATICFLEET_ACTIVATED" not in cold


def test_secrets_come_through_secret_key_refs() -> None:
    b = with_path(
        body(),
        "spec.kafka.security",
        {
            "protocol": "SASL_SSL",
            "sasl": {
                "mechanism": "PLAIN",
                "usernameSecretRef": {"name": "creds", "key": "u"},
                "passwordSecretRef": {"name": "creds", "key": "p"},
            },
            "tls": {
                "caSecretRef": {"name": "ca", "key": "ca.pem"},
                "certSecretRef": {"name": "tls", "key": "crt"},
                "keySecretRef": {"name": "tls", "key": "key"},
            },
        },
    )
    env = env_of(pod_for(b))
    expected = {
        "STATICFLEET_SASL_USERNAME": ("creds", "u"),
        "STATICFLEET_SASL_PASSWORD": ("creds", "p"),
        "STATICFLEET_SSL_CA_PEM": ("ca", "ca.pem"),
        "STATICFLEET_SSL_CERT_PEM": ("tls", "crt"),
        "STATICFLEET_SSL_KEY_PEM": ("tls", "key"),
    }
    for var, (name, key) in expected.items():
        assert env[var]["valueFrom"] == {"secretKeyRef": {"name": name, "key": key}}
    config = json.loads(config_json(group(b), TIMEOUTS))
    assert "sasl.password" not in config["consumer"] and "sasl.username" not in config["consumer"]
    assert config["consumer"]["sasl.mechanism"] == "PLAIN"


def test_user_template_is_carried_over() -> None:
    b = with_path(
        body(),
        "spec.template",
        {
            "image": "img:2",
            "imagePullPolicy": "Always",
            "command": ["run"],
            "args": ["--fast"],
            "env": [{"name": "LOG_LEVEL", "value": "debug"}],
            "envFrom": [{"configMapRef": {"name": "extra"}}],
            "resources": {"limits": {"memory": "1Gi"}},
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {}},
            "serviceAccountName": "member",
            "terminationGracePeriodSeconds": 60,
            "podLabels": {"team": "a"},
            "podAnnotations": {"note": "x"},
        },
    )
    pod = pod_for(b)
    c = pod["spec"]["containers"][0]
    assert c["image"] == "img:2" and c["imagePullPolicy"] == "Always"
    assert c["command"] == ["run"] and c["args"] == ["--fast"]
    assert c["env"][-1] == {"name": "LOG_LEVEL", "value": "debug"}
    assert c["envFrom"] == [{"configMapRef": {"name": "extra"}}]
    assert c["resources"] == {"limits": {"memory": "1Gi"}}
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"disk": "ssd"} and spec["serviceAccountName"] == "member"
    assert spec["terminationGracePeriodSeconds"] == 60 and spec["affinity"] == {"nodeAffinity": {}}
    assert (
        pod["metadata"]["labels"]["team"] == "a" and pod["metadata"]["annotations"]["note"] == "x"
    )


def test_config_json_follows_the_contract_and_is_deterministic() -> None:
    g = group()
    text = config_json(g, TIMEOUTS)
    assert text == config_json(group(), TIMEOUTS)
    config = json.loads(text)
    assert list(config) == sorted(config)
    assert config["bootstrapServers"] == "kafka:9092" and config["groupId"] == "orders"
    assert config["topics"] == ["orders"] and config["topicPattern"] is None
    assert config["namespace"] == "shop"
    assert config["consumer"] == {
        "session.timeout.ms": 45000,
        "heartbeat.interval.ms": 3000,
        "max.poll.interval.ms": 300000,
        "partition.assignment.strategy": "range",
        "group.protocol": "classic",
        "auto.offset.reset": "earliest",
        "security.protocol": "PLAINTEXT",
    }
    assert config["processing"] == {
        "transform": "consumer_runtime.transforms:identity",
        "spark": {"mode": "local", "connectUrl": None, "master": "local[2]", "conf": {}},
        "batch": {"maxRecords": 10000, "maxWaitMs": 1000, "maxBytes": 67108864},
        "sink": {"type": "null", "path": None, "topic": None},
        "deadLetterTopic": None,
        "retry": {"attempts": 3, "backoffMs": 500, "maxBackoffMs": 10000},
    }
    cm = build_config_map(g, TIMEOUTS)
    assert cm["metadata"]["name"] == "orders-config" and cm["data"]["config.json"] == text


def test_consumer_protocol_leaves_session_and_heartbeat_to_the_broker() -> None:
    g = group(body(membership={"protocol": "consumer"}))
    consumer = json.loads(config_json(g, TIMEOUTS))["consumer"]
    assert consumer["group.protocol"] == "consumer"
    for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
        assert key not in consumer
    assert consumer["max.poll.interval.ms"] == 300000


def test_client_properties_pass_through() -> None:
    g = group(with_path(body(), "spec.kafka.clientProperties", {"fetch.max.bytes": "1048576"}))
    assert json.loads(config_json(g, TIMEOUTS))["consumer"]["fetch.max.bytes"] == "1048576"


def test_service_and_pdb() -> None:
    g = group(body(rollout={"maxUnavailable": 2}))
    svc = build_headless_service(g)
    assert svc["metadata"]["name"] == "orders-members" and svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == selector_labels(g)
    pdb = build_pdb(g)
    assert pdb["spec"]["maxUnavailable"] == 2
    assert pdb["spec"]["selector"] == {"matchLabels": selector_labels(g)}


BASE_REVISION = member_spec_view(group(), TIMEOUTS).revision

CHANGES: list[tuple[str, dict[str, Any], bool]] = [
    ("image", with_path(body(), "spec.template.image", "img:2"), True),
    ("command", with_path(body(), "spec.template.args", ["--x"]), True),
    ("env", with_path(body(), "spec.template.env", [{"name": "A", "value": "1"}]), True),
    ("resources", with_path(body(), "spec.template.resources", {"limits": {"cpu": "1"}}), True),
    ("spark conf", with_path(body(), "spec.processing.spark", {"conf": {"a": "b"}}), True),
    ("transform", with_path(body(), "spec.processing.transform", "m:f"), True),
    ("client property", with_path(body(), "spec.kafka.clientProperties", {"a.b": "1"}), True),
    ("nonce", with_path(body(), "spec.rollout.restartNonce", "2"), True),
    ("securityContext", with_path(body(), "spec.template.securityContext",
                                  {"runAsUser": 20000}), True),
    ("containerSecurityContext", with_path(body(), "spec.template.containerSecurityContext",
                                           {"readOnlyRootFilesystem": False}), True),
    (
        "restartedAt",
        with_path(body(), "metadata.annotations", {"staticfleet.io/restartedAt": "t"}),
        True,
    ),
    ("replicas", with_path(body(), "spec.replicas", 7), False),
    ("maxUnavailable", with_path(body(), "spec.rollout.maxUnavailable", 2), False),
    ("paused", with_path(body(), "spec.rollout.paused", True), False),
    ("generation", with_path(body(), "metadata.generation", 9), False),
]


@pytest.mark.parametrize(("what", "changed", "restarts"), CHANGES, ids=[c[0] for c in CHANGES])
def test_revision_changes_exactly_for_what_needs_a_restart(
    what: str, changed: dict[str, Any], restarts: bool
) -> None:
    assert (member_spec_view(group(changed), TIMEOUTS).revision != BASE_REVISION) is restarts


def test_pods_without_a_security_context_keep_the_revision_they_had() -> None:
    """The defaults came with this operator version: a group that sets no security context
    keeps its revision (the one computed before them), so upgrading the operator restarts no
    member; its pods get the defaults at their next rollout."""
    assert BASE_REVISION == "f5e9b45051"


def test_revision_follows_the_timeouts() -> None:
    raised = EffectiveTimeouts(62000, 3000, 300000, sources=TIMEOUTS.sources)
    assert member_spec_view(group(), raised).revision != BASE_REVISION


# --- the members' NetworkPolicy --------------------------------------------------------------

OPERATOR_PEER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
                 "podSelector": {"matchLabels": {"app.kubernetes.io/name": "staticfleet",
                                                 "app.kubernetes.io/instance": "sf"}}}
PROMETHEUS_PEER = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}


def test_the_network_policy_admits_only_its_sources_to_the_member_port() -> None:
    g = group()
    policy = build_member_network_policy(g, [OPERATOR_PEER, PROMETHEUS_PEER])
    meta, spec = policy["metadata"], policy["spec"]
    assert (policy["apiVersion"], policy["kind"]) == ("networking.k8s.io/v1", "NetworkPolicy")
    assert (meta["name"], meta["namespace"]) == ("orders-members", "shop")
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "staticfleet"
    # Ingress only: members still reach Kafka, DNS and what their transforms call.
    assert spec["policyTypes"] == ["Ingress"]
    # It selects this group's members and standbys (whatever their podLabels), and no other
    # group's pods.
    selector = spec["podSelector"]["matchLabels"]
    view = member_spec_view(g, TIMEOUTS)
    for pod in (build_member_pod(g, 0, view), build_member_pod(g, 2, view, standby=True)):
        assert selector.items() <= pod["metadata"]["labels"].items()
    other = group(with_path(body(), "metadata.name", "payments"))
    other_pod = build_member_pod(other, 0, member_spec_view(other, TIMEOUTS))
    assert not selector.items() <= other_pod["metadata"]["labels"].items()
    # One rule: the member container's only port, by name, from the given sources only.
    (rule,) = spec["ingress"]
    (port,) = build_member_pod(g, 0, view)["spec"]["containers"][0]["ports"]
    assert rule["ports"] == [{"port": port["name"], "protocol": port["protocol"]}]
    assert rule["from"] == [OPERATOR_PEER, PROMETHEUS_PEER]
    # Plain data, its own copy, the same JSON every time (the apply layer compares it).
    rule["from"][0]["podSelector"]["matchLabels"]["x"] = "y"
    assert "x" not in OPERATOR_PEER["podSelector"]["matchLabels"]
    assert json.dumps(build_member_network_policy(g, [OPERATOR_PEER, PROMETHEUS_PEER]),
                      sort_keys=True) == json.dumps(
        build_member_network_policy(g, [OPERATOR_PEER, PROMETHEUS_PEER]), sort_keys=True)


def test_a_network_policy_without_sources_refuses_every_connection() -> None:
    """No sources: no ingress rule, which refuses everything; a rule with an empty `from`
    would admit every source instead."""
    spec = build_member_network_policy(group(), [])["spec"]
    assert spec["ingress"] == [] and spec["policyTypes"] == ["Ingress"]



def test_member_pods_mount_no_service_account_token_unless_the_spec_asks() -> None:
    """The runtime never calls the Kubernetes API: by default the pod says so (Kubernetes
    mounts a token otherwise, whatever the ServiceAccount); `automountServiceAccountToken: true`
    in the template mounts one, and is a new revision (the pods must be made again for it)."""
    assert pod_for()["spec"]["automountServiceAccountToken"] is False
    b = with_path(body(), "spec.template.serviceAccountName", "member")
    assert pod_for(b)["spec"]["automountServiceAccountToken"] is False
    asked = with_path(b, "spec.template.automountServiceAccountToken", True)
    assert pod_for(asked)["spec"]["automountServiceAccountToken"] is True
    assert member_spec_view(group(asked), TIMEOUTS).revision != member_spec_view(
        group(b), TIMEOUTS).revision
    # false said out loud is the default: the same revision as pods made before the field.
    said = with_path(b, "spec.template.automountServiceAccountToken", False)
    assert member_spec_view(group(said), TIMEOUTS) == member_spec_view(group(b), TIMEOUTS)
    with pytest.raises(SpecError, match="automountServiceAccountToken"):
        group(with_path(b, "spec.template.automountServiceAccountToken", "yes"))
