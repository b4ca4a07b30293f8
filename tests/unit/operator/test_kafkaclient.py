"""spec.kafka.security as librdkafka properties: the member's config.json and env, the operator's
admin client, and the messages that name credentials without showing them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import KafkaError

from consumer_runtime.config import ConfigError, parse_config
from staticfleet.credentials import kafka_problem
from staticfleet.decisions import conditions as c
from staticfleet.decisions import kafkaclient
from staticfleet.decisions.builders import build_member_pod, config_json, member_spec_view
from staticfleet.decisions.spec.fields import SpecError
from staticfleet.decisions.spec.kafka import SecretKeyRef
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.observe import kafkaadmin
from tests.unit.operator.support import TIMEOUTS, body, env_of, with_path

SECRETS = {("creds", "username"): "member", ("creds", "password"): "pa55word-x",
           ("oauth", "id"): "client-7", ("oauth", "secret"): "oauth-s3cret",
           ("tls", "ca"): "CA PEM", ("tls", "crt"): "CERT PEM", ("tls", "key"): "KEY PEM"}

SCRAM = {"protocol": "SASL_SSL",
         "sasl": {"mechanism": "SCRAM-SHA-512",
                  "usernameSecretRef": {"name": "creds", "key": "username"},
                  "passwordSecretRef": {"name": "creds", "key": "password"}},
         "tls": {"caSecretRef": {"name": "tls", "key": "ca"}}}
OAUTH = {"protocol": "SASL_SSL",
         "sasl": {"mechanism": "OAUTHBEARER", "oauthbearer": {
             "tokenEndpointUrl": "https://idp.example.com/token", "scope": "kafka",
             "extensions": {"logicalCluster": "lkc-1", "identityPoolId": "pool-2"},
             "clientIdSecretRef": {"name": "oauth", "key": "id"},
             "clientSecretSecretRef": {"name": "oauth", "key": "secret"}}}}
MTLS = {"protocol": "SSL",
        "tls": {"caSecretRef": {"name": "tls", "key": "ca"},
                "certSecretRef": {"name": "tls", "key": "crt"},
                "keySecretRef": {"name": "tls", "key": "key"}}}


def group(security: dict[str, Any], client: dict[str, str] | None = None) -> ConsumerGroupSpec:
    b = with_path(body(), "spec.kafka.security", security)
    if client:
        b = with_path(b, "spec.kafka.clientProperties", client)
    return ConsumerGroupSpec.from_body(b)


def lookup(ref: SecretKeyRef) -> str:
    return SECRETS[(ref.name, ref.key)]


def member_env(g: ConsumerGroupSpec) -> dict[str, str]:
    """The member's environment as the kubelet would resolve it from the Secrets."""
    out = {}
    for name, var in env_of(build_member_pod(g, 0, member_spec_view(g, TIMEOUTS))).items():
        ref = (var.get("valueFrom") or {}).get("secretKeyRef")
        if ref is not None:
            out[name] = SECRETS[(ref["name"], ref["key"])]
        elif "value" in var:
            out[name] = var["value"]
    return out


@pytest.mark.parametrize("security", [SCRAM, OAUTH, MTLS], ids=["scram", "oauth", "mtls"])
def test_the_member_and_the_operator_connect_alike(security: dict[str, Any]) -> None:
    """What the member's runtime makes of its config.json and env is what the operator's
    admin client is given (bar the consumer's own settings)."""
    g = group(security, {"ssl.curves.list": "P-256", "fetch.max.bytes": "1000000"})
    env = member_env(g)
    config = parse_config(json.loads(config_json(g, TIMEOUTS)), env)
    runtime = {**config.consumer, "bootstrap.servers": config.bootstrap_servers}
    admin = kafkaclient.admin_conf(g.kafka, lookup)
    assert {k: v for k, v in runtime.items() if k in admin} == admin
    assert admin["ssl.curves.list"] == "P-256" and "fetch.max.bytes" not in admin
    config = config_json(g, TIMEOUTS)
    for value in kafkaclient.sensitive_values(g.kafka.security, admin):
        assert value not in config, "a secret in config.json"


def test_oauthbearer_is_oidc_with_the_token_endpoint_settings() -> None:
    g = group(OAUTH)
    consumer = json.loads(config_json(g, TIMEOUTS))["consumer"]
    assert consumer["sasl.mechanism"] == "OAUTHBEARER"
    assert consumer["sasl.oauthbearer.method"] == "oidc"
    assert consumer["sasl.oauthbearer.token.endpoint.url"] == "https://idp.example.com/token"
    assert consumer["sasl.oauthbearer.scope"] == "kafka"
    assert consumer["sasl.oauthbearer.extensions"] == "identityPoolId=pool-2,logicalCluster=lkc-1"
    env = env_of(build_member_pod(g, 0, member_spec_view(g, TIMEOUTS)))
    assert env["STATICFLEET_OAUTHBEARER_CLIENT_SECRET"]["valueFrom"] == {
        "secretKeyRef": {"name": "oauth", "key": "secret"}}
    assert "STATICFLEET_SASL_PASSWORD" not in env


def test_a_member_without_its_oauth_client_secret_says_which_variable() -> None:
    g = group(OAUTH)
    env = {k: v for k, v in member_env(g).items() if k != "STATICFLEET_OAUTHBEARER_CLIENT_SECRET"}
    with pytest.raises(ConfigError, match="STATICFLEET_OAUTHBEARER_CLIENT_SECRET: not set"):
        parse_config(json.loads(config_json(g, TIMEOUTS)), env)


@pytest.mark.parametrize(("security", "mechanism", "credentials"), [
    (SCRAM, "SASL_SSL/SCRAM-SHA-512",
     "the SASL user name and SASL password from Secret creds (keys username, password); "
     "the CA certificate from Secret tls (key ca)"),
    (OAUTH, "SASL_SSL/OAUTHBEARER",
     "the OAuth client id and OAuth client secret from Secret oauth (keys id, secret)"),
    (MTLS, "SSL with a client certificate (mutual TLS)",
     "the CA certificate, client certificate and client key from Secret tls "
     "(keys ca, crt, key)"),
    ({"protocol": "SSL"}, "SSL", "no credentials"),
], ids=["scram", "oauth", "mtls", "ssl"])
def test_messages_name_the_mechanism_and_the_secrets(
        security: dict[str, Any], mechanism: str, credentials: str) -> None:
    sec = group(security).kafka.security
    assert kafkaclient.mechanism(sec) == mechanism
    assert kafkaclient.credentials(sec) == credentials


def test_an_auth_failure_is_degraded_naming_mechanism_and_secret_never_the_secret() -> None:
    g = group(SCRAM)
    conf = kafkaclient.admin_conf(g.kafka, lookup)
    exc = kafkaadmin.KafkaAuthFailed(
        "describing the cluster at 127.0.0.1:9093: SASL authentication error: Authentication "
        "failed during authentication due to invalid credentials with SASL mechanism "
        "SCRAM-SHA-512 (user member, password pa55word-x)")
    problem = kafka_problem(g, exc, conf)
    assert problem.reason == c.KAFKA_AUTHENTICATION_FAILED
    assert "SASL_SSL/SCRAM-SHA-512" in problem.message
    assert "Secret creds (keys username, password)" in problem.message
    assert "pa55word-x" not in problem.message and "password ***" in problem.message
    assert problem.retry_after_s is not None
    plain = kafka_problem(g, kafkaadmin.KafkaUnavailable("no answer within 10s"), conf)
    assert plain.reason == c.KAFKA_UNREACHABLE


@pytest.mark.parametrize(("code", "text", "auth"), [
    (KafkaError._AUTHENTICATION, "SASL authentication error: invalid credentials", True),
    (KafkaError._AUTHENTICATION, "Failed to acquire SASL OAUTHBEARER token: 401", True),
    (KafkaError._SSL, "SSL handshake failed: certificate verify failed", True),
    (KafkaError._TRANSPORT, "Receive failed: error:0A000416:SSL routines::ssl/tls alert "
                            "certificate unknown", True),
    (KafkaError._TRANSPORT, "Connection refused", False),
    (KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down", False),
], ids=["sasl", "oauth", "ssl", "alert", "refused", "down"])
def test_auth_errors_are_told_from_an_unreachable_cluster(code: int, text: str,
                                                          auth: bool) -> None:
    assert kafkaadmin.is_auth_error(KafkaError(code, text)) is auth


ADMIN = {"protocol": "SASL_SSL",
         "sasl": {"mechanism": "SCRAM-SHA-512",
                  "usernameSecretRef": {"name": "ops", "key": "username"},
                  "passwordSecretRef": {"name": "ops", "key": "password"}},
         "tls": {"caSecretRef": {"name": "tls", "key": "ca"}}}


def with_admin(security: dict[str, Any], admin: dict[str, Any]) -> ConsumerGroupSpec:
    return ConsumerGroupSpec.from_body(with_path(
        with_path(body(), "spec.kafka.security", security), "spec.kafka.adminSecurity", admin))


def test_the_operator_connects_with_adminsecurity_and_the_members_with_security() -> None:
    """adminSecurity is the operator's principal only: its credentials go to the admin client
    and nowhere near a member pod; the members keep theirs."""
    g = with_admin(SCRAM, ADMIN)
    ops = {("ops", "username"): "operator", ("ops", "password"): "0ps-pa55"}
    admin = kafkaclient.admin_conf(g.kafka, lambda ref: {**SECRETS, **ops}[(ref.name, ref.key)])
    assert (admin["sasl.username"], admin["sasl.password"]) == ("operator", "0ps-pa55")
    pod = json.dumps(build_member_pod(g, 0, member_spec_view(g, TIMEOUTS)))
    assert '"ops"' not in pod, "a member pod references the operator's Secret"
    assert member_env(g)["STATICFLEET_SASL_USERNAME"] == "member"
    assert "0ps-pa55" not in config_json(g, TIMEOUTS)
    assert kafkaclient.admin_conf(group(SCRAM).kafka, lookup)["sasl.username"] == "member", (
        "without adminSecurity the operator uses the members' principal")


def test_a_refused_operator_principal_names_adminsecurity() -> None:
    g = with_admin(SCRAM, ADMIN)
    problem = kafka_problem(g, kafkaadmin.KafkaAuthFailed("SASL authentication error"), {})
    assert "Secret ops (keys username, password)" in problem.message
    assert "spec.kafka.adminSecurity" in problem.message and "Secret creds" not in problem.message


def test_adminsecurity_is_checked_like_security() -> None:
    with pytest.raises(SpecError, match=r"spec\.kafka\.adminSecurity\.sasl: is required"):
        with_admin(SCRAM, {"protocol": "SASL_PLAINTEXT"})
