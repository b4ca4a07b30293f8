"""The Kafka wire kit (`kafkawire`), which both images ship: what it may import, and its
kafka-python settings from a librdkafka configuration (`kafkawire.settings`): what each
setting becomes, and what is refused rather than dropped. Each SASL mechanism and TLS
credential against the member contract's tables, for both its users:
tests/unit/test_member_contract.py. Its messages' layouts byte for byte: the users' tests
(tests/unit/runtime/test_staticleave.py, test_groupview.py; tests/unit/operator/observe/
test_clusteranswers.py); the TLS corners in depth: test_staticleave.py."""

from __future__ import annotations

import ast
import os
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest

from kafkawire.settings import OidcToken, Unsupported, tls_context
from kafkawire.settings import client_settings as kit_settings
from staticfleet_dev.certs import KafkaTlsFiles, generate_kafka

pytestmark = pytest.mark.unit

KIT = Path(__file__).resolve().parents[2] / "kafkawire"
BOOTSTRAP = {"bootstrap.servers": "k1:9092, k2:9092"}
CLIENT_ID = "a-client"


def client_settings(conf: dict[str, str]) -> dict[str, Any]:
    return kit_settings(conf, CLIENT_ID)


def test_the_kit_imports_kafka_python_the_standard_library_and_the_contract_only() -> None:
    """Both images ship the kit: anything else it imported would be a package one of them does
    not install (confluent_kafka, kopf), or code of the other image (.importlinter names ours)."""
    found: set[str] = set()
    for path in KIT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    assert "kafka" in found
    assert found - set(sys.stdlib_module_names) <= {"kafka", "kafkawire", "member_contract"}


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> KafkaTlsFiles:
    return generate_kafka(tmp_path_factory.mktemp("tls"), ("member",))


def test_plaintext_is_the_servers_and_the_callers_client_id() -> None:
    settings = client_settings(BOOTSTRAP)
    assert settings["bootstrap_servers"] == ["k1:9092", "k2:9092"]
    assert (settings["security_protocol"], settings["client_id"]) == ("PLAINTEXT", CLIENT_ID)
    assert not settings["allow_auto_create_topics"]
    assert "sasl_mechanism" not in settings and "ssl_context" not in settings


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_password_mechanism_takes_the_user_and_password(mechanism: str) -> None:
    settings = client_settings({**BOOTSTRAP, "security.protocol": "sasl_plaintext",
                                "sasl.mechanism": mechanism, "sasl.username": "u",
                                "sasl.password": "p"})
    assert (settings["sasl_mechanism"], settings["sasl_plain_username"],
            settings["sasl_plain_password"]) == (mechanism, "u", "p")
    assert "ssl_context" not in settings


def test_oauthbearer_asks_the_token_endpoint_with_the_clients_credentials() -> None:
    settings = client_settings({
        **BOOTSTRAP, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": "http://i/t",
        "sasl.oauthbearer.client.id": "id", "sasl.oauthbearer.client.secret": "s",
        "sasl.oauthbearer.extensions": "a=1, b=2"})
    provider = settings["sasl_oauth_token_provider"]
    assert provider == OidcToken("http://i/t", "id", "s", "", "a=1, b=2")
    assert provider.extensions() == {"a": "1", "b": "2"}


@pytest.mark.parametrize(("conf", "refused"), [
    ({"ssl.curves.list": "X25519"}, r"^ssl\.curves\.list: "),
    ({"sasl.kerberos.service.name": "kafka"}, r"^sasl\.kerberos\.service\.name: "),
    ({"https.ca.certificate.stores": "Root"}, r"^https\.ca\.certificate\.stores: "),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}, r"^sasl\.mechanism: "),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"},
     r"^sasl\.oauthbearer\.method: "),
    ({"security.protocol": "QUIC"}, r"^security\.protocol: "),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"},
     r"^ssl\.endpoint\.identification\.algorithm: "),
    ({"security.protocol": "SSL", "ssl.key.location": "/k"}, r"^ssl\.certificate\.\*"),
], ids=["an ssl property it does not carry", "a sasl property", "an https property",
         "a mechanism kafka-python lacks",
        "OAUTHBEARER without OIDC", "an unknown protocol", "another identification",
        "a key without its certificate"])
def test_what_it_cannot_honour_is_refused_not_dropped(conf: dict[str, str], refused: str) -> None:
    with pytest.raises(Unsupported, match=refused):
        client_settings({**BOOTSTRAP, **conf})


def test_what_tunes_librdkafkas_sockets_is_left_to_kafka_pythons_defaults() -> None:
    """Not a security setting: the member's connection properties carry socket.* and
    broker.address.* (consumer_runtime.membership.CONNECTION_PREFIXES)."""
    assert client_settings({**BOOTSTRAP, "socket.keepalive.enable": "true",
                            "broker.address.family": "v4"}) == client_settings(BOOTSTRAP)


def test_tls_trusts_the_ca_and_checks_the_brokers_name_unless_told_not_to(
        tls: KafkaTlsFiles) -> None:
    ca = tls.ca_cert.read_text()
    context = client_settings({**BOOTSTRAP, "security.protocol": "SSL",
                               "ssl.ca.pem": ca})["ssl_context"]
    assert [dict(s[0] for s in c["subject"])["commonName"] for c in context.get_ca_certs()] == [
        "staticfleet-kafka-ca"]
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    unchecked = tls_context({"ssl.ca.pem": ca, "ssl.endpoint.identification.algorithm": "NONE"})
    assert not unchecked.check_hostname and unchecked.verify_mode == ssl.CERT_REQUIRED
    tuned = tls_context({"ssl.ca.pem": ca, "ssl.cipher.suites": "ECDHE-ECDSA-AES256-GCM-SHA384"})
    below_tls13 = {c["name"] for c in tuned.get_ciphers() if c["protocol"] != "TLSv1.3"}
    assert below_tls13 == {"ECDHE-ECDSA-AES256-GCM-SHA384"}


def test_a_client_certificate_in_pem_text_loads_from_memory(tls: KafkaTlsFiles,
                                                            tmp_path: Path) -> None:
    cert, key = tls.client_pems("member")
    fds = set(os.listdir("/proc/self/fd"))
    tls_context({"ssl.ca.pem": tls.ca_cert.read_text(), "ssl.certificate.pem": cert,
                 "ssl.key.pem": key})
    assert set(os.listdir("/proc/self/fd")) <= fds, "the memory files are closed once read"
    with pytest.raises(ssl.SSLError):  # a key of another certificate
        tls_context({"ssl.certificate.pem": cert, "ssl.key.pem": tls.keystore.read_text()})
    (tmp_path / "c.pem").write_text(cert)
    (tmp_path / "k.pem").write_text(key)
    tls_context({"ssl.certificate.location": str(tmp_path / "c.pem"),
                 "ssl.key.location": str(tmp_path / "k.pem")})
