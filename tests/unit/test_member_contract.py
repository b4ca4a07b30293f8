"""The member contract (`member_contract`) holds both sides to one spelling.

The Kafka security tables are the ones a new mechanism or credential changes: each of the three
mappings that carry them (the operator's librdkafka configuration, the member's, and the wire
kit's kafka-python settings, `kafkawire.settings`, which the member's static leave and group
view and the operator's per-cluster reads both take) is tested here against them, one mechanism
at a time, so a row added to the contract fails every side that does not carry it yet (the
static leave's kafka-python client once kept a list of its own, where a missing mechanism left
every leave unconfirmed, quietly; and until the kit, the operator's reads and the member kept
two copies of the kafka-python settings, where a fix in one was missing in the other).
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path
from typing import Any

import kafka.sasl
import pytest

import member_contract
from consumer_runtime.config import parse_config
from consumer_runtime.staticleave import client_config
from kafkawire import settings as wirekit
from member_contract import (
    MECHANISM_CREDENTIALS,
    REQUESTS,
    SASL_MECHANISMS,
    SECRET_ENV,
    SECURITY_PROTOCOLS,
    TLS_CREDENTIALS,
)
from staticfleet.decisions import actions, kafkaclient
from staticfleet.decisions.spec import kafka as kafkaspec
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.observe import clientsettings
from tests.unit.operator.support import body, with_path

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def test_every_mechanism_has_its_row_and_every_credential_a_variable() -> None:
    assert tuple(MECHANISM_CREDENTIALS) == SASL_MECHANISMS
    used = {env for row in MECHANISM_CREDENTIALS.values() for env in row} | set(TLS_CREDENTIALS)
    assert used == set(SECRET_ENV)


def test_the_operators_spelling_of_the_protocols_and_requests_is_the_contracts() -> None:
    """The operator keeps two of the lists as types (a `Literal` cannot take a constant)."""
    assert typing.get_args(kafkaspec.SecurityProtocol) == SECURITY_PROTOCOLS
    assert set(typing.get_args(actions.Action)) <= set(REQUESTS)


def _security(mechanism: str) -> dict[str, Any]:
    """spec.kafka.security for `mechanism` over SASL_SSL, every credential from Secret `s`
    under its variable's name, and a CA. A mechanism new to the contract fails here until the
    operator's spec knows how to take its credentials."""
    ref = {name: {"name": "s", "key": env} for name, env in (
        ("usernameSecretRef", member_contract.SASL_USERNAME_ENV),
        ("passwordSecretRef", member_contract.SASL_PASSWORD_ENV),
        ("clientIdSecretRef", member_contract.OAUTHBEARER_CLIENT_ID_ENV),
        ("clientSecretSecretRef", member_contract.OAUTHBEARER_CLIENT_SECRET_ENV),
        ("caSecretRef", member_contract.SSL_CA_PEM_ENV))}
    if mechanism == "OAUTHBEARER":
        sasl = {"mechanism": mechanism, "oauthbearer": {
            "tokenEndpointUrl": "https://idp.example/token",
            "clientIdSecretRef": ref["clientIdSecretRef"],
            "clientSecretSecretRef": ref["clientSecretSecretRef"]}}
    else:
        sasl = {"mechanism": mechanism, "usernameSecretRef": ref["usernameSecretRef"],
                "passwordSecretRef": ref["passwordSecretRef"]}
    return {"protocol": "SASL_SSL", "sasl": sasl, "tls": {"caSecretRef": ref["caSecretRef"]}}


def _group(mechanism: str) -> ConsumerGroupSpec:
    return ConsumerGroupSpec.from_body(with_path(body(), "spec.kafka.security",
                                                 _security(mechanism)))


@pytest.mark.parametrize("mechanism", SASL_MECHANISMS)
def test_the_operator_gives_each_mechanism_its_credentials(mechanism: str) -> None:
    """The operator's librdkafka configuration: the member pod's secret variables and the
    admin client's properties are the contract's, for each mechanism."""
    security = _group(mechanism).kafka.security
    secrets = kafkaclient.secret_properties(security)
    assert [sp.env for sp in secrets] == [*MECHANISM_CREDENTIALS[mechanism],
                                          member_contract.SSL_CA_PEM_ENV]
    assert all(sp.prop == SECRET_ENV[sp.env] for sp in secrets)
    assert kafkaclient.security_properties(security)["sasl.mechanism"] == mechanism


def _member_consumer(mechanism: str) -> dict[str, Any]:
    """The member runtime's librdkafka properties for `mechanism`, from what the operator
    writes into config.json and the pod's env (each variable's value: its own name)."""
    security = _group(mechanism).kafka.security
    env = {sp.env: sp.env for sp in kafkaclient.secret_properties(security)}
    raw = {"bootstrapServers": "kafka:9092", "groupId": "orders", "topics": ["orders"],
           "consumer": {"session.timeout.ms": 30000, "heartbeat.interval.ms": 3000,
                        "max.poll.interval.ms": 300000,
                        **kafkaclient.security_properties(security)},
           "processing": {"transform": "consumer_runtime.transforms:identity",
                          "sink": {"type": "null"}}}
    return dict(parse_config(raw, env).consumer)


@pytest.mark.parametrize("mechanism", SASL_MECHANISMS)
def test_the_member_maps_each_mechanisms_variables_to_librdkafka(mechanism: str) -> None:
    consumer = _member_consumer(mechanism)
    assert consumer["sasl.mechanism"] == mechanism
    for env in (*MECHANISM_CREDENTIALS[mechanism], member_contract.SSL_CA_PEM_ENV):
        assert consumer[SECRET_ENV[env]] == env


def _member_props(mechanism: str) -> dict[str, str]:
    """What the member's static leave and group view give the wire kit: the consumer's
    librdkafka properties for `mechanism`."""
    return {k: str(v) for k, v in _member_consumer(mechanism).items()}


def _operator_conf(mechanism: str) -> dict[str, str]:
    """What the operator's per-cluster reads give the wire kit: its own librdkafka
    configuration (`kafkaclient.admin_conf`, each Secret's value its variable's name)."""
    return kafkaclient.admin_conf(_group(mechanism).kafka, lambda ref: ref.key)


KIT_USERS: dict[str, tuple[Any, Any]] = {
    "the member's static leave": (_member_props, lambda conf: client_config(conf, "c")),
    "the operator's per-cluster reads": (_operator_conf, clientsettings.client_settings),
}
"""Each user of the wire kit: where its librdkafka configuration comes from, and its settings."""


@pytest.mark.parametrize("mechanism", SASL_MECHANISMS)
@pytest.mark.parametrize("user", sorted(KIT_USERS))
def test_the_wire_kit_takes_each_mechanism_with_its_credentials(user: str,
                                                                mechanism: str) -> None:
    """The wire kit's kafka-python settings (`kafkawire.settings`), from each user's
    librdkafka configuration: the mechanism has its row and is one kafka-python has, and each
    credential reaches the client (a mechanism without one would leave every static leave
    unconfirmed, and that cluster's operator reads per group)."""
    assert tuple(wirekit.SASL_SETTINGS) == SASL_MECHANISMS
    assert mechanism in kafka.sasl.SASL_MECHANISMS
    source, settings_of = KIT_USERS[user]
    # SASL without TLS: the CA above is no certificate (TLS has tests of its own).
    settings = settings_of({**source(mechanism), "bootstrap.servers": "kafka:9092",
                            "security.protocol": "SASL_PLAINTEXT"})
    assert settings["sasl_mechanism"] == mechanism
    provider = settings.get("sasl_oauth_token_provider")
    reached = [*settings.values(), *(vars(provider).values() if provider is not None else ())]
    assert all(env in reached for env in MECHANISM_CREDENTIALS[mechanism])


def test_the_wire_kit_takes_every_credential_of_the_contract() -> None:
    """Every property a Secret fills (`SECRET_ENV`, TLS material included) is one the wire
    kit carries; a new one is refused there (`Unsupported`) until it is."""
    assert set(SECRET_ENV.values()) <= wirekit.TAKEN
    tls = {SECRET_ENV[env] for env in TLS_CREDENTIALS}
    assert tls == {"ssl.ca.pem", "ssl.certificate.pem", "ssl.key.pem"}
    assert {"ssl.certificate.pem", "ssl.key.pem"} <= {
        k for k in wirekit.TAKEN if k.startswith("ssl.")}
    assert all(k.startswith(wirekit.SECURITY_PREFIXES) for k in SECRET_ENV.values()), \
        "a credential outside the security prefixes would be dropped, not refused"


@pytest.mark.parametrize("user", sorted(KIT_USERS))
def test_every_protocol_of_the_contract_is_one_the_wire_kit_takes(user: str) -> None:
    _source, settings_of = KIT_USERS[user]
    for protocol in SECURITY_PROTOCOLS:
        props = {"bootstrap.servers": "kafka:9092", "security.protocol": protocol,
                 "sasl.mechanism": "PLAIN"}
        assert settings_of(props)["security_protocol"] == protocol


# --- one spelling -----------------------------------------------------------------------------

SPELLED = {value for name, value in vars(member_contract).items()
           if name.endswith("_ENV") and isinstance(value, str)
           and value.startswith("STATICFLEET_")}
SOURCES = ("operator/staticfleet", "consumer_runtime", "staticfleet_dev")


def test_the_member_variables_are_spelled_in_the_contract_only() -> None:
    """Every string that is exactly a member variable's name is the contract's: the operator,
    the runtime and the local node import it (prose that names one, a message or a docstring,
    is not a name to look up)."""
    found = [f"{path.relative_to(REPO)}:{node.lineno}: {node.value}"
             for source in SOURCES for path in sorted((REPO / source).rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and node.value in SPELLED]
    assert found == []
    assert len(SPELLED) >= 14
