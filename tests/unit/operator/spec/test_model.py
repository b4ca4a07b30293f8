"""ConsumerGroupSpec.from_body: defaults like the CRD, SpecError with the field path."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet.decisions.spec.fields import SpecError
from staticfleet.decisions.spec.model import DEFAULT_COMMAND, ConsumerGroupSpec
from tests.unit.operator.support import body, with_path


def test_defaults_match_the_crd() -> None:
    g = ConsumerGroupSpec.from_body(body())
    assert (g.name, g.namespace, g.generation, g.replicas) == ("orders", "shop", 4, 3)
    assert g.group_id == "orders"
    assert g.template.command == DEFAULT_COMMAND
    assert g.template.termination_grace_period_seconds == 30
    assert g.membership.protocol == "classic" and g.membership.assignment_strategy == "range"
    assert g.membership.timeouts.session_timeout_ms is None
    assert (
        g.membership.auto_tuning.enabled and g.membership.auto_tuning.restart_margin_percent == 150
    )
    assert g.processing.batch.max_records == 10000 and g.processing.spark.master == "local[2]"
    assert g.processing.sink.type == "null" and g.processing.auto_offset_reset == "earliest"
    assert g.rollout.max_unavailable == 1 and not g.rollout.paused
    assert g.restarted_at is None and not g.dynamic_membership_for_testing


def test_consumer_protocol_has_no_assignor() -> None:
    g = ConsumerGroupSpec.from_body(body(membership={"protocol": "consumer"}))
    assert g.membership.assignment_strategy is None


def test_annotations_are_read() -> None:
    b = with_path(
        body(),
        "metadata.annotations",
        {
            "staticfleet.io/restartedAt": "2026-01-01T00:00:00Z",
            "staticfleet.io/dynamic-membership-for-testing": "true",
        },
    )
    g = ConsumerGroupSpec.from_body(b, allow_testing=True)
    assert g.restarted_at == "2026-01-01T00:00:00Z" and g.dynamic_membership_for_testing
    assert g.ignored_testing_annotations == ()


@pytest.mark.parametrize("allow", [False, True])
def test_test_only_annotations_need_the_operators_setting(allow: bool) -> None:
    """An operator not started to allow them (production: the chart never sets it) ignores the
    test-only annotations and lists them, for the status to say so."""
    b = with_path(body(), "metadata.annotations", {
        "staticfleet.io/dynamic-membership-for-testing": "true",
        "staticfleet.io/handoff-without-drain-for-testing": "TRUE"})
    g = ConsumerGroupSpec.from_body(b, allow_testing=allow)
    assert g.dynamic_membership_for_testing is allow
    assert g.handoff_without_drain_for_testing is allow
    assert g.ignored_testing_annotations == (() if allow else (
        "staticfleet.io/dynamic-membership-for-testing",
        "staticfleet.io/handoff-without-drain-for-testing"))
    # Not set to "true": nothing to honour, nothing ignored.
    off = with_path(body(), "metadata.annotations",
                    {"staticfleet.io/dynamic-membership-for-testing": "false"})
    assert ConsumerGroupSpec.from_body(off).ignored_testing_annotations == ()


def test_full_security_parses() -> None:
    ref = {"name": "kafka-creds", "key": "user"}
    g = ConsumerGroupSpec.from_body(
        with_path(
            body(),
            "spec.kafka.security",
            {
                "protocol": "SASL_SSL",
                "sasl": {
                    "mechanism": "SCRAM-SHA-512",
                    "usernameSecretRef": ref,
                    "passwordSecretRef": {"name": "kafka-creds", "key": "pass"},
                },
                "tls": {"caSecretRef": {"name": "ca", "key": "ca.pem"}},
            },
        )
    )
    assert g.kafka.security.sasl is not None and g.kafka.security.sasl.username.key == "user"
    assert g.kafka.security.tls is not None and g.kafka.security.tls.ca is not None


OAUTH = {"tokenEndpointUrl": "https://idp.example.com/oauth2/token",
         "clientIdSecretRef": {"name": "oauth", "key": "client-id"},
         "clientSecretSecretRef": {"name": "oauth", "key": "client-secret"}}


def test_oauthbearer_parses() -> None:
    g = ConsumerGroupSpec.from_body(with_path(body(), "spec.kafka.security", {
        "protocol": "SASL_SSL", "sasl": {"mechanism": "OAUTHBEARER", "oauthbearer": {
            **OAUTH, "scope": "kafka", "extensions": {"logicalCluster": "lkc-1"}}}}))
    sasl = g.kafka.security.sasl
    assert sasl is not None and sasl.username is None and sasl.password is None
    assert sasl.oauthbearer is not None
    assert sasl.oauthbearer.client_secret.key == "client-secret"
    assert sasl.oauthbearer.scope == "kafka"
    assert sasl.oauthbearer.extensions == {"logicalCluster": "lkc-1"}


def test_ssl_tuning_client_properties_are_taken() -> None:
    g = ConsumerGroupSpec.from_body(with_path(body(), "spec.kafka.clientProperties", {
        "ssl.cipher.suites": "ECDHE-ECDSA-AES256-GCM-SHA384", "ssl.curves.list": "P-256"}))
    assert g.kafka.client_properties["ssl.curves.list"] == "P-256"


def test_an_ssl_file_client_property_is_refused_with_the_rule() -> None:
    with pytest.raises(SpecError) as err:
        ConsumerGroupSpec.from_body(with_path(body(), "spec.kafka.clientProperties", {
            "ssl.ca.location": "/etc/ssl/ca.pem"}))
    assert err.value.field_path == "spec.kafka.clientProperties[ssl.ca.location]"
    for said in ("ssl.cipher.suites", "PEM from Secrets", "spec.kafka.security.tls",
                 "mounts no files"):
        assert said in err.value.message


def test_security_contexts_are_the_users_values_or_none() -> None:
    t = ConsumerGroupSpec.from_body(body()).template
    assert t.security_context is None and t.container_security_context is None
    pod = {"runAsUser": 2000, "supplementalGroups": [3000],
           "seccompProfile": {"type": "Localhost", "localhostProfile": "member.json"},
           "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"}],
           "seLinuxOptions": {"level": "s0:c1,c2"}, "fsGroupChangePolicy": "OnRootMismatch"}
    container = {"readOnlyRootFilesystem": False, "capabilities": {"add": ["NET_BIND_SERVICE"]},
                 "appArmorProfile": {"type": "RuntimeDefault"}}
    t = ConsumerGroupSpec.from_body(with_path(with_path(
        body(), "spec.template.securityContext", pod),
        "spec.template.containerSecurityContext", container)).template
    assert t.security_context == pod and t.container_security_context == container


SC = "spec.template.securityContext"
CSC = "spec.template.containerSecurityContext"
SECURITY_INVALID: list[tuple[str, str, Any, str, str]] = [
    ("not an object", SC, "restricted", SC, "must be an object"),
    ("unknown field", SC, {"runAsNonroot": True}, f"{SC}.runAsNonroot", "unknown field"),
    ("container field on the pod", SC, {"readOnlyRootFilesystem": True},
     f"{SC}.readOnlyRootFilesystem", "unknown field"),
    ("uid a string", SC, {"runAsUser": "10001"}, f"{SC}.runAsUser", "must be an integer"),
    ("negative group", SC, {"fsGroup": -1}, f"{SC}.fsGroup", "must be an integer"),
    ("bool not a bool", CSC, {"readOnlyRootFilesystem": "yes"},
     f"{CSC}.readOnlyRootFilesystem", "true or false"),
    ("unknown seccomp type", SC, {"seccompProfile": {"type": "Default"}},
     f"{SC}.seccompProfile.type", "RuntimeDefault, Localhost, Unconfined"),
    ("Localhost without a profile", SC, {"seccompProfile": {"type": "Localhost"}},
     f"{SC}.seccompProfile.localhostProfile", "required with type Localhost"),
    ("profile without Localhost", CSC, {"seccompProfile": {
        "type": "RuntimeDefault", "localhostProfile": "x.json"}},
     f"{CSC}.seccompProfile.localhostProfile", "and only then"),
    ("capabilities not a list", CSC, {"capabilities": {"drop": "ALL"}},
     f"{CSC}.capabilities.drop", "list of non-empty strings"),
    ("root with the default runAsNonRoot", SC, {"runAsUser": 0}, f"{SC}.runAsUser",
     "0 is root"),
    ("root in the container", CSC, {"runAsUser": 0}, f"{CSC}.runAsUser", "0 is root"),
    ("privileged without escalation", CSC, {"privileged": True}, f"{CSC}.privileged",
     "allowPrivilegeEscalation true"),
    ("SYS_ADMIN without escalation", CSC, {"capabilities": {"add": ["CAP_SYS_ADMIN"]}},
     f"{CSC}.capabilities.add", "allowPrivilegeEscalation true"),
    ("sysctl without a value", SC, {"sysctls": [{"name": "kernel.shm_rmid_forced"}]},
     f"{SC}.sysctls[0].value", "is required"),
]


@pytest.mark.parametrize(("what", "path", "value", "field", "said"), SECURITY_INVALID,
                         ids=[i[0] for i in SECURITY_INVALID])
def test_an_invalid_security_context_names_the_field_and_says_why(
        what: str, path: str, value: Any, field: str, said: str) -> None:
    with pytest.raises(SpecError) as err:
        ConsumerGroupSpec.from_body(with_path(body(), path, value))
    assert err.value.field_path == field, str(err.value)
    assert said in err.value.message, str(err.value)


def test_root_is_accepted_when_the_user_asks_for_it_outright() -> None:
    """runAsNonRoot false with uid 0: the restricted standard refuses such pods, a namespace
    without it runs them; the kubelet does not refuse it, so neither does the spec."""
    t = ConsumerGroupSpec.from_body(with_path(body(), SC, {
        "runAsUser": 0, "runAsNonRoot": False})).template
    assert t.security_context == {"runAsUser": 0, "runAsNonRoot": False}


INVALID: list[tuple[str, str, Any, str]] = [
    ("long name", "metadata.name", "x" * 51, "metadata.name"),
    ("name not a DNS label", "metadata.name", "Orders", "metadata.name"),
    ("no kafka", "spec.kafka", None, "spec.kafka"),
    ("topics and pattern", "spec.kafka.topicPattern", "orders-.*", "spec.kafka"),
    ("empty topics", "spec.kafka.topics", [], "spec.kafka.topics"),
    ("bad topic", "spec.kafka.topics", ["a/b"], "spec.kafka.topics[0]"),
    ("bad group id", "spec.kafka.groupId", "a b", "spec.kafka.groupId"),
    (
        "owned property",
        "spec.kafka.clientProperties",
        {"group.id": "x"},
        "spec.kafka.clientProperties[group.id]",
    ),
    (
        "ssl property",
        "spec.kafka.clientProperties",
        {"ssl.key.pem": "x"},
        "spec.kafka.clientProperties[ssl.key.pem]",
    ),
    (
        "ssl file property",
        "spec.kafka.clientProperties",
        {"ssl.keystore.location": "/k.p12"},
        "spec.kafka.clientProperties[ssl.keystore.location]",
    ),
    (
        "verification off",
        "spec.kafka.clientProperties",
        {"enable.ssl.certificate.verification": "false"},
        "spec.kafka.clientProperties[enable.ssl.certificate.verification]",
    ),
    (
        "unsecured jwt",
        "spec.kafka.clientProperties",
        {"enable.sasl.oauthbearer.unsecure.jwt": "true"},
        "spec.kafka.clientProperties[enable.sasl.oauthbearer.unsecure.jwt]",
    ),
    (
        "sasl missing",
        "spec.kafka.security",
        {"protocol": "SASL_PLAINTEXT"},
        "spec.kafka.security.sasl",
    ),
    (
        "unknown mechanism",
        "spec.kafka.security",
        {"protocol": "SASL_SSL", "sasl": {"mechanism": "GSSAPI"}},
        "spec.kafka.security.sasl.mechanism",
    ),
    (
        "OAUTHBEARER without oauthbearer",
        "spec.kafka.security",
        {"protocol": "SASL_SSL", "sasl": {"mechanism": "OAUTHBEARER"}},
        "spec.kafka.security.sasl.oauthbearer",
    ),
    (
        "OAUTHBEARER with a password",
        "spec.kafka.security",
        {"protocol": "SASL_SSL", "sasl": {"mechanism": "OAUTHBEARER", "oauthbearer": OAUTH,
                                          "passwordSecretRef": {"name": "s", "key": "p"}}},
        "spec.kafka.security.sasl.passwordSecretRef",
    ),
    (
        "OAUTHBEARER without a client secret",
        "spec.kafka.security",
        {"protocol": "SASL_SSL", "sasl": {"mechanism": "OAUTHBEARER", "oauthbearer": {
            k: v for k, v in OAUTH.items() if k != "clientSecretSecretRef"}}},
        "spec.kafka.security.sasl.oauthbearer.clientSecretSecretRef",
    ),
    (
        "token endpoint not a URL",
        "spec.kafka.security",
        {"protocol": "SASL_SSL", "sasl": {"mechanism": "OAUTHBEARER", "oauthbearer": {
            **OAUTH, "tokenEndpointUrl": "idp.example.com/token"}}},
        "spec.kafka.security.sasl.oauthbearer.tokenEndpointUrl",
    ),
    (
        "an extension with a comma",
        "spec.kafka.security",
        {"protocol": "SASL_SSL", "sasl": {"mechanism": "OAUTHBEARER", "oauthbearer": {
            **OAUTH, "extensions": {"a": "b,c"}}}},
        "spec.kafka.security.sasl.oauthbearer.extensions[a]",
    ),
    (
        "oauthbearer with SCRAM",
        "spec.kafka.security",
        {"protocol": "SASL_SSL", "sasl": {"mechanism": "SCRAM-SHA-512", "oauthbearer": OAUTH,
                                          "usernameSecretRef": {"name": "s", "key": "u"},
                                          "passwordSecretRef": {"name": "s", "key": "p"}}},
        "spec.kafka.security.sasl.oauthbearer",
    ),
    (
        "sasl without SASL",
        "spec.kafka.security",
        {
            "protocol": "SSL",
            "sasl": {
                "mechanism": "PLAIN",
                "usernameSecretRef": {"name": "s", "key": "u"},
                "passwordSecretRef": {"name": "s", "key": "p"},
            },
        },
        "spec.kafka.security.sasl",
    ),
    (
        "cert without key",
        "spec.kafka.security.tls",
        {"certSecretRef": {"name": "s", "key": "c"}},
        "spec.kafka.security.tls",
    ),
    ("no image", "spec.template.image", None, "spec.template.image"),
    (
        "reserved env",
        "spec.template.env",
        [{"name": "STATICFLEET_HTTP_PORT", "value": "1"}],
        "spec.template.env[0]",
    ),
    (
        "reserved POD_NAME",
        "spec.template.env",
        [{"name": "A", "value": "1"}, {"name": "POD_NAME"}],
        "spec.template.env[1]",
    ),
    (
        "reserved label",
        "spec.template.podLabels",
        {"staticfleet.io/group": "x"},
        "spec.template.podLabels[staticfleet.io/group]",
    ),
    (
        "reserved annotation",
        "spec.template.podAnnotations",
        {"staticfleet.io/revision": "x"},
        "spec.template.podAnnotations[staticfleet.io/revision]",
    ),
    ("negative replicas", "spec.replicas", -1, "spec.replicas"),
    ("replicas not int", "spec.replicas", "3", "spec.replicas"),
    (
        "assignor with consumer",
        "spec.membership",
        {"protocol": "consumer", "assignmentStrategy": "range"},
        "spec.membership.assignmentStrategy",
    ),
    (
        "heartbeat over a third",
        "spec.membership.timeouts",
        {"sessionTimeoutMs": 9000, "heartbeatIntervalMs": 3001},
        "spec.membership.timeouts.heartbeatIntervalMs",
    ),
    (
        "max poll below session",
        "spec.membership.timeouts",
        {"sessionTimeoutMs": 9000, "maxPollIntervalMs": 8999},
        "spec.membership.timeouts.maxPollIntervalMs",
    ),
    (
        "margin below 100",
        "spec.membership.autoTuning",
        {"restartMarginPercent": 90},
        "spec.membership.autoTuning.restartMarginPercent",
    ),
    ("bad transform", "spec.processing.transform", "no_function", "spec.processing.transform"),
    (
        "connect without url",
        "spec.processing.spark",
        {"mode": "connect"},
        "spec.processing.spark.connectUrl",
    ),
    (
        "url not sc://",
        "spec.processing.spark",
        {"mode": "connect", "connectUrl": "http://x"},
        "spec.processing.spark.connectUrl",
    ),
    (
        "kafka sink without topic",
        "spec.processing.sink",
        {"type": "kafka"},
        "spec.processing.sink.topic",
    ),
    (
        "parquet sink without path",
        "spec.processing.sink",
        {"type": "parquet"},
        "spec.processing.sink.path",
    ),
    (
        "backoff above max",
        "spec.processing.retry",
        {"backoffMs": 10, "maxBackoffMs": 5},
        "spec.processing.retry.maxBackoffMs",
    ),
    (
        "bad regex",
        "spec.kafka",
        {"bootstrapServers": "k:9092", "topicPattern": "orders-("},
        "spec.kafka.topicPattern",
    ),
    ("max unavailable 0", "spec.rollout.maxUnavailable", 0, "spec.rollout.maxUnavailable"),
]


@pytest.mark.parametrize(("what", "path", "value", "field"), INVALID, ids=[i[0] for i in INVALID])
def test_invalid_spec_names_the_field(what: str, path: str, value: Any, field: str) -> None:
    with pytest.raises(SpecError) as err:
        ConsumerGroupSpec.from_body(with_path(body(), path, value))
    assert err.value.field_path == field, str(err.value)
