"""A KIP-848 static member's own leave (staticleave.py), without a broker: what the coordinator's
answer means, the two messages byte for byte against Kafka's ConsumerGroupHeartbeat v1 layout
(the wire kit's, `kafkawire.messages`), the client's settings from librdkafka's properties (the
wire kit's, `kafkawire.settings`: its TLS from memory and OIDC corners are tested here, the rest
in tests/unit/test_kafkawire.py), and the asking again, against a scripted stand-in for
kafka-python's KafkaClient."""

from __future__ import annotations

import base64
import datetime
import io
import os
import ssl
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kafka.errors import KafkaConnectionError, KafkaError
from kafka.protocol.api import RequestHeaderV2
from kafka.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth

from consumer_runtime import staticleave
from consumer_runtime.staticleave import (
    LEAVE_STATIC_EPOCH,
    RETRY_S,
    LeaveResult,
    StaticLeave,
    StaticLeaveError,
    client_config,
    outcome,
    retry_pause,
    static_leave_request,
)
from kafkawire import settings as wirekit
from kafkawire.messages import ConsumerGroupHeartbeat
from kafkawire.settings import OidcToken, tls_context
from member_contract import LEAVE_GONE, LEAVE_LEFT, LEAVE_TAKEN, LEAVE_UNCONFIRMED
from tests.unit.runtime.fakes import NEVER_ANSWERED, Future, scripted_send

pytestmark = pytest.mark.unit

# -- what the coordinator's answer means ---------------------------------------------------------


@pytest.mark.parametrize(("error_code", "member_epoch", "expected"), [
    (0, -2, LEAVE_LEFT),
    (0, 0, LEAVE_UNCONFIRMED),
    (0, 7, LEAVE_UNCONFIRMED),
    (0, -1, LEAVE_UNCONFIRMED),
    (82, -1, LEAVE_TAKEN),
    (25, -1, LEAVE_GONE),
    (69, -1, LEAVE_GONE),
    (14, -1, None),
    (15, -1, None),
    (16, -1, None),
    (30, -1, LEAVE_UNCONFIRMED),
    (30, -2, LEAVE_UNCONFIRMED),
    (111, -1, LEAVE_UNCONFIRMED),
], ids=["left at epoch -2", "no error at epoch 0", "no error at epoch 7",
        "no error at epoch -1", "FENCED_INSTANCE_ID", "UNKNOWN_MEMBER_ID", "GROUP_ID_NOT_FOUND",
        "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR",
        "GROUP_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED at epoch -2",
        "UNRELEASED_INSTANCE_ID"])
def test_the_answer_says_where_the_instance_id_stands_or_to_ask_again(
        error_code: int, member_epoch: int, expected: str | None) -> None:
    assert outcome(error_code, member_epoch) == expected


def test_the_pause_between_tries_grows_and_stays_at_its_last_value() -> None:
    pauses = [retry_pause(n) for n in range(1, 9)]
    assert pauses == [0.05, 0.1, 0.2, 0.5, 1.0, 1.0, 1.0, 1.0]
    assert pauses == sorted(pauses) and pauses[-1] == RETRY_S[-1]


def test_the_status_reports_milliseconds_and_no_detail_as_none() -> None:
    assert LeaveResult(LEAVE_LEFT, 3, 0.12345).as_status() == {
        "outcome": "left", "tries": 3, "ms": 123.5, "detail": None}
    assert LeaveResult(LEAVE_UNCONFIRMED, 1, 2.0, "error 30: denied").as_status()["detail"] == (
        "error 30: denied")


# -- ConsumerGroupHeartbeat v1, byte for byte ----------------------------------------------------

NULL = b"\x00"  # a null compact string or array: unsigned varint 0
NO_TAGS = b"\x00"  # empty tagged fields
EPOCH_LEAVE = b"\xff\xff\xff\xfe"  # int32 -2
MINUS_ONE = b"\xff\xff\xff\xff"  # int32 -1


@pytest.mark.parametrize(("group", "member", "instance", "wire"), [
    ("g", "m", "i",
     b"\x02g" + b"\x02m" + EPOCH_LEAVE + b"\x02i"
     + NULL + MINUS_ONE + NULL + NULL + NULL + NULL + NO_TAGS),
    ("g" * 200, "m-\u00e9", "",
     # length 200 + 1 = 201 is the two-byte varint c9 01; "é" is two bytes of UTF-8; an empty
     # instance id is the varint 1, not null
     b"\xc9\x01" + b"g" * 200 + b"\x05m-\xc3\xa9" + EPOCH_LEAVE + b"\x01"
     + NULL + MINUS_ONE + NULL + NULL + NULL + NULL + NO_TAGS),
], ids=["short", "two-byte length, UTF-8, empty instance id"])
def test_the_leave_encodes_as_kafkas_consumer_group_heartbeat_v1(
        group: str, member: str, instance: str, wire: bytes) -> None:
    request = static_leave_request(group, member, instance)
    assert request.encode() == wire
    assert (request.API_KEY, request.API_VERSION, request.FLEXIBLE_VERSION) == (68, 1, True)
    assert request.RESPONSE_TYPE is ConsumerGroupHeartbeat.RESPONSE_TYPE
    assert isinstance(request.build_header(7, "c"), RequestHeaderV2)  # a flexible header


def test_the_leave_carries_the_static_leave_epoch_and_nulls_what_it_does_not_change() -> None:
    request = static_leave_request("g", "m", "i")
    assert LEAVE_STATIC_EPOCH == -2
    assert (request.group_id, request.member_id, request.member_epoch, request.instance_id) == (
        "g", "m", -2, "i")
    assert (request.rack_id, request.rebalance_timeout_ms, request.subscribed_topic_names,
            request.subscribed_topic_regex, request.server_assignor,
            request.topic_partitions) == (None, -1, None, None, None, None)


HEAD = b"\x00\x00\x00\x00"  # throttle_time_ms 0
HEARTBEAT_1000 = b"\x00\x00\x03\xe8"


def test_an_answer_without_an_assignment_decodes() -> None:
    buf = io.BytesIO(HEAD + b"\x00\x00" + NULL + b"\x02m" + EPOCH_LEAVE + HEARTBEAT_1000
                     + b"\xff" + NO_TAGS)
    answer = ConsumerGroupHeartbeat.RESPONSE_TYPE.decode(buf)
    assert buf.read() == b""  # every byte read, no more
    assert (answer.throttle_time_ms, answer.error_code, answer.error_message, answer.member_id,
            answer.member_epoch, answer.heartbeat_interval_ms, answer.assignment,
            answer._tagged_fields) == (0, 0, None, "m", -2, 1000, None, {})
    assert outcome(answer.error_code, answer.member_epoch) == LEAVE_LEFT


def test_an_answer_with_an_error_message_decodes() -> None:
    buf = io.BytesIO(HEAD + b"\x00\x10" + b"\x10This is not it." + NULL + MINUS_ONE
                     + b"\x00\x00\x00\x00" + b"\xff" + NO_TAGS)
    answer = ConsumerGroupHeartbeat.RESPONSE_TYPE.decode(buf)
    assert buf.read() == b""
    assert (answer.error_code, answer.error_message, answer.member_id, answer.member_epoch) == (
        16, "This is not it.", None, -1)


TOPIC_ID = bytes(range(16))


def test_an_answer_with_an_assignment_decodes_its_topics_and_partitions() -> None:
    assignment = (b"\x01"  # present
                  + b"\x02"  # a compact array of one topic
                  + TOPIC_ID + b"\x03" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x03" + NO_TAGS
                  + NO_TAGS)  # the assignment's tagged fields
    buf = io.BytesIO(HEAD + b"\x00\x00" + NULL + b"\x02m" + b"\x00\x00\x00\x05" + HEARTBEAT_1000
                     + assignment + NO_TAGS)
    answer = ConsumerGroupHeartbeat.RESPONSE_TYPE.decode(buf)
    assert buf.read() == b""
    assert answer.member_epoch == 5 and answer._tagged_fields == {}
    topics, tags = answer.assignment
    assert tags == {}
    assert topics == [(TOPIC_ID, [0, 3], {})]


def test_a_uuid_cut_short_is_an_error() -> None:
    cut = HEAD + b"\x00\x00" + NULL + b"\x02m" + EPOCH_LEAVE + HEARTBEAT_1000 + b"\x01\x02" + (
        TOPIC_ID[:10])
    with pytest.raises(ValueError, match="UUID"):
        ConsumerGroupHeartbeat.RESPONSE_TYPE.decode(io.BytesIO(cut))


def test_an_answer_encodes_back_to_the_same_bytes() -> None:
    wire = (HEAD + b"\x00\x00" + NULL + b"\x02m" + EPOCH_LEAVE + HEARTBEAT_1000 + b"\x01\x02"
            + TOPIC_ID + b"\x02\x00\x00\x00\x01" + NO_TAGS + NO_TAGS + NO_TAGS)
    assert ConsumerGroupHeartbeat.RESPONSE_TYPE.decode(io.BytesIO(wire)).encode() == wire


# -- the client's settings ------------------------------------------------------------------------


@dataclass(frozen=True)
class Pem:
    cert: str
    key: str


def self_signed(common_name: str, password: bytes | None = None) -> Pem:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password) if password
        else serialization.NoEncryption())
    return Pem(cert.public_bytes(serialization.Encoding.PEM).decode(),
               key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 encryption).decode())


@pytest.fixture(scope="module")
def ca() -> Pem:
    return self_signed("staticleave-test-ca")


@pytest.fixture(scope="module")
def client_pem() -> Pem:
    return self_signed("staticleave-test-client")


def ca_subjects(ctx: ssl.SSLContext) -> list[Any]:
    return [cert["subject"] for cert in ctx.get_ca_certs()]


CA_SUBJECT = ((("commonName", "staticleave-test-ca"),),)


def test_plaintext_is_the_default_and_takes_no_sasl_or_tls() -> None:
    conf = client_config({"bootstrap.servers": "a:9092,b:9093"}, "orders-0-leave")
    assert conf["bootstrap_servers"] == ["a:9092", "b:9093"]
    assert conf["client_id"] == "orders-0-leave"
    assert conf["security_protocol"] == "PLAINTEXT"
    assert not {"sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
                "sasl_oauth_token_provider", "ssl_context"} & conf.keys()
    assert conf["request_timeout_ms"] <= 5000  # a try never outlasts a few seconds


def test_sasl_ssl_with_scram_maps_the_mechanism_credentials_and_a_tls_context(ca: Pem) -> None:
    conf = client_config({"bootstrap.servers": "b:9094", "security.protocol": "sasl_ssl",
                          "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "member",
                          "sasl.password": "s3cret", "ssl.ca.pem": ca.cert}, "c")
    assert conf["security_protocol"] == "SASL_SSL"
    assert conf["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (conf["sasl_plain_username"], conf["sasl_plain_password"]) == ("member", "s3cret")
    assert "sasl_oauth_token_provider" not in conf
    ctx = conf["ssl_context"]
    assert isinstance(ctx, ssl.SSLContext)
    assert ca_subjects(ctx) == [CA_SUBJECT]
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_sasl_plaintext_with_plain_has_no_tls_context() -> None:
    conf = client_config({"bootstrap.servers": "b:9092", "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "PLAIN", "sasl.username": "u",
                          "sasl.password": "p"}, "c")
    assert conf["security_protocol"] == "SASL_PLAINTEXT"
    assert (conf["sasl_mechanism"], conf["sasl_plain_username"],
            conf["sasl_plain_password"]) == ("PLAIN", "u", "p")
    assert "ssl_context" not in conf


def test_librdkafkas_sasl_mechanisms_spelling_is_taken_too() -> None:
    conf = client_config({"bootstrap.servers": "b:9092", "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanisms": "scram-sha-256"}, "c")
    assert conf["sasl_mechanism"] == "SCRAM-SHA-256"
    assert (conf["sasl_plain_username"], conf["sasl_plain_password"]) == ("", "")


def test_ssl_takes_a_tls_context_and_no_sasl(ca: Pem) -> None:
    conf = client_config({"bootstrap.servers": "b:9093", "security.protocol": "SSL",
                          "ssl.ca.pem": ca.cert}, "c")
    assert isinstance(conf["ssl_context"], ssl.SSLContext)
    assert "sasl_mechanism" not in conf


@pytest.mark.parametrize(("props", "key"), [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism"),
    ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism"),  # librdkafka's default: GSSAPI
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "AWS_MSK_IAM"}, "sasl.mechanism"),
    ({"security.protocol": "KERBEROS"}, "security.protocol"),
    ({"security.protocol": "SSL_PLAINTEXT"}, "security.protocol"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"},
     "sasl.oauthbearer.method"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
      "sasl.oauthbearer.method": "default"}, "sasl.oauthbearer.method"),
], ids=["GSSAPI", "GSSAPI by default", "unknown mechanism", "unknown protocol",
        "misspelt protocol", "OAUTHBEARER without a method", "OAUTHBEARER, method default"])
def test_settings_the_client_cannot_take_are_refused_naming_the_key(
        props: dict[str, str], key: str) -> None:
    with pytest.raises(StaticLeaveError, match=f"^{key}: "):
        client_config({"bootstrap.servers": "b:9092", **props}, "c")


def test_a_refusal_is_a_value_error() -> None:
    assert issubclass(StaticLeaveError, ValueError)
    assert StaticLeaveError is wirekit.Unsupported, "the leave refuses what the kit refuses"


def test_the_leaves_settings_are_the_kits_at_the_leaves_pace() -> None:
    props = {"bootstrap.servers": "b:9092", "socket.keepalive.enable": "true"}
    assert client_config(props, "orders-0-leave") == {
        **wirekit.client_settings(props, "orders-0-leave"), **staticleave.RECONNECT}


OIDC = {"bootstrap.servers": "b:9095", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "OIDC",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.oauthbearer.client.id": "member", "sasl.oauthbearer.client.secret": "s3cret",
        "sasl.oauthbearer.scope": "kafka", "sasl.oauthbearer.extensions": "a=1,b=2"}


def test_oauthbearer_with_oidc_gets_a_token_provider_from_the_properties() -> None:
    conf = client_config(OIDC, "c")
    assert conf["sasl_mechanism"] == "OAUTHBEARER"
    assert "sasl_plain_username" not in conf and "sasl_plain_password" not in conf
    provider = conf["sasl_oauth_token_provider"]
    assert isinstance(provider, OidcToken)
    assert (provider.url, provider.client_id, provider.client_secret, provider.scope) == (
        "https://idp.example/token", "member", "s3cret", "kafka")
    assert provider.extensions() == {"a": "1", "b": "2"}
    assert provider.ca is None


def test_the_token_endpoints_ca_gives_the_provider_a_tls_context(ca: Pem) -> None:
    provider = client_config({**OIDC, "https.ca.pem": ca.cert}, "c")["sasl_oauth_token_provider"]
    assert isinstance(provider.ca, ssl.SSLContext)
    assert ca_subjects(provider.ca) == [CA_SUBJECT]


@pytest.mark.parametrize(("pairs", "expected"), [
    ("", {}),
    ("a=1,b=2", {"a": "1", "b": "2"}),
    ("a=1,junk,b=x=y", {"a": "1", "b": "x=y"}),
    ("a=", {"a": ""}),
], ids=["none", "two", "a pair without = is skipped, = in a value kept", "empty value"])
def test_the_extensions_are_comma_separated_pairs(pairs: str, expected: dict[str, str]) -> None:
    assert OidcToken("https://idp/token", "id", "s", extension_pairs=pairs).extensions() == (
        expected)


def test_the_oidc_token_provider_is_one_kafka_python_accepts() -> None:
    """kafka-python's OAUTHBEARER mechanism asserts that its provider is an
    AbstractTokenProvider when a BrokerConnection is made: anything else fails every
    connection."""
    conf = client_config(OIDC, "c")
    assert isinstance(conf["sasl_oauth_token_provider"], AbstractTokenProvider)
    mechanism = SaslMechanismOAuth(host="b", **conf)  # what BrokerConnection makes of it
    assert mechanism.token_provider is conf["sasl_oauth_token_provider"]


def test_the_oidc_token_comes_by_client_credentials_with_http_basic(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def urlopen(request: Any, timeout: float, context: Any) -> io.BytesIO:
        seen.update(request=request, timeout=timeout, context=context)
        return io.BytesIO(b'{"access_token": "tok-1", "token_type": "bearer", "expires_in": 60}')

    monkeypatch.setattr(wirekit.urllib.request, "urlopen", urlopen)
    provider = client_config(OIDC, "c")["sasl_oauth_token_provider"]
    assert provider.token() == "tok-1"
    request = seen["request"]
    assert (request.full_url, request.get_method()) == ("https://idp.example/token", "POST")
    assert request.get_header("Authorization") == (
        "Basic " + base64.b64encode(b"member:s3cret").decode())
    assert request.get_header("Content-type") == "application/x-www-form-urlencoded"
    assert urllib.parse.parse_qs(request.data.decode()) == {
        "grant_type": ["client_credentials"], "scope": ["kafka"]}
    assert seen["timeout"] > 0 and seen["context"] is None


def test_hostname_checks_are_on_unless_the_identification_algorithm_is_none(ca: Pem) -> None:
    assert tls_context({"ssl.ca.pem": ca.cert}).check_hostname
    assert tls_context({"ssl.ca.pem": ca.cert,
                        "ssl.endpoint.identification.algorithm": "https"}).check_hostname
    ctx = tls_context({"ssl.ca.pem": ca.cert, "ssl.endpoint.identification.algorithm": "NONE"})
    assert not ctx.check_hostname
    assert ctx.verify_mode == ssl.CERT_REQUIRED  # the broker's certificate is still verified


def test_the_ca_comes_from_a_file_too(ca: Pem, tmp_path: Path) -> None:
    path = tmp_path / "ca.pem"
    path.write_text(ca.cert)
    assert ca_subjects(tls_context({"ssl.ca.location": str(path)})) == [CA_SUBJECT]


class FileWrites:
    """What Python code opens for writing or creates on disk while it is on (`sys.audit`'s
    open, tempfile and os.mkdir events); an audit hook cannot be removed, so one is added once
    and switched on by `watching`."""

    active: list[tuple[str, Any]] | None = None
    hooked = False

    @classmethod
    def watching(cls) -> list[tuple[str, Any]]:
        if not cls.hooked:
            sys.addaudithook(cls._hook)
            cls.hooked = True
        cls.active = []
        return cls.active

    @classmethod
    def stop(cls) -> None:
        cls.active = None

    @classmethod
    def _hook(cls, event: str, args: tuple[Any, ...]) -> None:
        seen = cls.active
        if seen is None:
            return
        if event == "open":
            path, mode, flags = args
            writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
            if (mode and any(c in str(mode) for c in "wax+")) or (flags or 0) & writes:
                seen.append((event, path))
        elif event in ("tempfile.mkstemp", "tempfile.mkdtemp", "os.mkdir", "os.link",
                       "os.symlink", "os.rename"):
            seen.append((event, args))


@pytest.fixture
def file_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every file write or creation by Python code during the test (and the temp directory
    pointed at an empty one, to see that nothing lands there either)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = FileWrites.watching()
    try:
        yield seen
    finally:
        FileWrites.stop()
    assert list(tmp_path.iterdir()) == []


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_client_certificate_in_pem_text_loads_from_memory_and_writes_no_file(
        ca: Pem, client_pem: Pem, file_writes: list[Any]) -> None:
    fds = open_fds()
    ctx = tls_context({"ssl.ca.pem": ca.cert, "ssl.certificate.pem": client_pem.cert,
                       "ssl.key.pem": client_pem.key})
    assert isinstance(ctx, ssl.SSLContext)
    assert file_writes == [], "the key material went through a file"
    assert open_fds() <= fds, "the in-memory files are closed once read"


def test_the_file_watch_sees_a_file_written_the_old_way(tmp_path: Path,
                                                        file_writes: list[Any]) -> None:
    """The watch above is not blind: a private file of the kind the leave wrote before is
    seen."""
    path = tmp_path / "key.pem"
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write("x")
    path.unlink()
    assert ("open", str(path)) in [(event, str(target)) for event, target in file_writes]
    file_writes.clear()


def test_a_client_key_that_does_not_match_is_refused_and_writes_no_file(
        ca: Pem, client_pem: Pem, file_writes: list[Any]) -> None:
    fds = open_fds()
    with pytest.raises(ssl.SSLError):
        tls_context({"ssl.certificate.pem": client_pem.cert, "ssl.key.pem": ca.key})
    assert file_writes == [] and open_fds() <= fds


def test_an_encrypted_client_key_in_pem_text_takes_its_password_from_memory(
        file_writes: list[Any]) -> None:
    locked = self_signed("staticleave-test-locked-pem", password=b"pw")
    tls_context({"ssl.certificate.pem": locked.cert, "ssl.key.pem": locked.key,
                 "ssl.key.password": "pw"})
    with pytest.raises(ssl.SSLError):
        tls_context({"ssl.certificate.pem": locked.cert, "ssl.key.pem": locked.key,
                     "ssl.key.password": "wrong"})
    assert file_writes == []


def test_without_memory_files_a_key_in_pem_text_is_refused_not_written(
        client_pem: Pem, monkeypatch: pytest.MonkeyPatch, file_writes: list[Any]) -> None:
    monkeypatch.delattr(os, "memfd_create")
    with pytest.raises(StaticLeaveError, match=r"^ssl\.key\.pem: .*memfd_create"):
        tls_context({"ssl.certificate.pem": client_pem.cert, "ssl.key.pem": client_pem.key})
    assert file_writes == []


def test_an_encrypted_client_key_takes_its_password(tmp_path: Path) -> None:
    locked = self_signed("staticleave-test-locked", password=b"pw")
    (tmp_path / "cert.pem").write_text(locked.cert)
    (tmp_path / "key.pem").write_text(locked.key)
    files = {"ssl.certificate.location": str(tmp_path / "cert.pem"),
             "ssl.key.location": str(tmp_path / "key.pem")}
    tls_context({**files, "ssl.key.password": "pw"})
    tls_context({"ssl.certificate.pem": locked.cert, "ssl.key.pem": locked.key,
                 "ssl.key.password": "pw"})
    with pytest.raises(ssl.SSLError):
        tls_context({**files, "ssl.key.password": "wrong"})


@pytest.mark.parametrize("given", [
    {"ssl.certificate.pem"},
    {"ssl.key.pem"},
    {"ssl.certificate.location"},
    {"ssl.key.location"},
    {"ssl.certificate.location", "ssl.key.pem"},
], ids=["certificate text", "key text", "certificate file", "key file",
        "a file and the other's text"])
def test_a_client_certificate_without_its_key_is_refused(
        given: set[str], client_pem: Pem, tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text(client_pem.cert)
    (tmp_path / "key.pem").write_text(client_pem.key)
    values = {"ssl.certificate.pem": client_pem.cert, "ssl.key.pem": client_pem.key,
              "ssl.certificate.location": str(tmp_path / "cert.pem"),
              "ssl.key.location": str(tmp_path / "key.pem")}
    with pytest.raises(StaticLeaveError, match=r"^ssl\.certificate\.\*/ssl\.key\.\*: "):
        tls_context({key: values[key] for key in given})


# -- asking until the coordinator answers, against a scripted client ------------------------------

def coordinator(node: int, error_code: int = 0) -> SimpleNamespace:
    """A FindCoordinator answer."""
    return SimpleNamespace(error_code=error_code, coordinator_id=node)


def heartbeat(error_code: int = 0, member_epoch: int = -2,
              error_message: str | None = None) -> SimpleNamespace:
    """A ConsumerGroupHeartbeat answer."""
    return SimpleNamespace(error_code=error_code, error_message=error_message,
                           member_epoch=member_epoch)


@dataclass
class Cluster:
    """The brokers as the leave's clients see them: scripted answers to FindCoordinator, to the
    heartbeat and to await_ready (True once its script is used up), and a record of what every
    client made through `make_client` sent where."""

    finds: list[Any] = field(default_factory=list)
    beats: list[Any] = field(default_factory=list)
    ready: list[Any] = field(default_factory=list)
    least_loaded: int | None = 0
    sent: list[tuple[int, Any]] = field(default_factory=list)
    waits: list[tuple[int, int]] = field(default_factory=list)
    clients: list[FakeClient] = field(default_factory=list)

    def make_client(self, **config: Any) -> FakeClient:
        client = FakeClient(self, config)
        self.clients.append(client)
        return client

    def kinds(self) -> list[str]:
        return ["leave" if isinstance(request, ConsumerGroupHeartbeat) else "find"
                for _, request in self.sent]


class FakeClient:
    """Stands in for kafka-python's KafkaClient, the calls StaticLeave makes."""

    def __init__(self, cluster: Cluster, config: dict[str, Any]) -> None:
        self.cluster = cluster
        self.config = config
        self.closed = False
        self.close_error: BaseException | None = None

    def least_loaded_node(self) -> int | None:
        return self.cluster.least_loaded

    def await_ready(self, node: int, timeout_ms: int) -> bool:
        self.cluster.waits.append((node, timeout_ms))
        step = self.cluster.ready.pop(0) if self.cluster.ready else True
        if isinstance(step, BaseException):
            raise step
        return bool(step)

    def send(self, node: int, request: Any) -> Future:
        self.cluster.sent.append((node, request))
        return scripted_send(self.cluster.beats if isinstance(
            request, ConsumerGroupHeartbeat) else self.cluster.finds, request)

    def poll(self, timeout_ms: int, future: Future) -> None:
        assert timeout_ms >= 1 and isinstance(future, Future)

    def close(self) -> None:
        self.closed = True
        if self.close_error is not None:
            raise self.close_error


class Clock:
    """time.monotonic as staticleave sees it, moved on only by `sleep`."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(staticleave, "time", fake)
    return fake


PROPS = {"bootstrap.servers": "b:9092"}


def leave_for(cluster: Cluster) -> StaticLeave:
    return StaticLeave(PROPS, "g", "orders-0-leave", make_client=cluster.make_client)


def test_the_client_is_made_with_the_settings_of_the_properties(clock: Clock) -> None:
    cluster = Cluster(finds=[coordinator(3)], beats=[heartbeat()])
    leave_for(cluster).confirm("m-1", "orders-0", clock.now + 5, sleep=clock.sleep)
    assert [client.config for client in cluster.clients] == [
        client_config(PROPS, "orders-0-leave")]


def test_a_leave_finds_the_coordinator_then_sends_the_static_leave_there(clock: Clock) -> None:
    cluster = Cluster(finds=[coordinator(3)], beats=[heartbeat()], least_loaded=1)
    result = leave_for(cluster).confirm("m-1", "orders-0", clock.now + 5, sleep=clock.sleep)
    assert result == LeaveResult(LEAVE_LEFT, 1, 0.0, "")
    (find_node, find), (leave_node, leave) = cluster.sent
    assert find_node == 1  # the least loaded broker
    assert (find.API_KEY, find.API_VERSION, find.coordinator_key, find.coordinator_type) == (
        10, 1, "g", 0)  # FindCoordinator v1 for a group
    assert leave_node == 3  # the coordinator it named
    assert isinstance(leave, ConsumerGroupHeartbeat)
    assert (leave.group_id, leave.member_id, leave.member_epoch, leave.instance_id) == (
        "g", "m-1", -2, "orders-0")
    assert leave.encode() == static_leave_request("g", "m-1", "orders-0").encode()
    assert clock.sleeps == []
    assert cluster.waits == [(1, 5000), (3, 5000)]  # each wait bounded by the deadline


def test_not_coordinator_asks_a_new_coordinator_and_then_it_left(clock: Clock) -> None:
    cluster = Cluster(finds=[coordinator(3), coordinator(5)],
                      beats=[heartbeat(16, -1, "This is not the correct coordinator."),
                             heartbeat()])
    result = leave_for(cluster).confirm("m-1", "orders-0", clock.now + 20, sleep=clock.sleep)
    assert (result.outcome, result.tries, result.detail) == (LEAVE_LEFT, 2, "")
    assert cluster.kinds() == ["find", "leave", "find", "leave"]
    assert [node for node, _ in cluster.sent] == [0, 3, 0, 5]
    assert clock.sleeps == [RETRY_S[0]]
    # an answer, even a retriable one, keeps the connection
    assert len(cluster.clients) == 1 and not cluster.clients[0].closed


@pytest.mark.parametrize(("script", "kinds"), [
    ({"ready": [OSError("Connection refused")]}, ["find", "leave"]),
    ({"ready": [True, OSError("Connection refused")]}, ["find", "find", "leave"]),
    ({"ready": [False]}, ["find", "leave"]),
    ({"beats": [KafkaConnectionError("socket disconnected")]},
     ["find", "leave", "find", "leave"]),
    ({"beats": [NEVER_ANSWERED]}, ["find", "leave", "find", "leave"]),
    ({"finds": [NEVER_ANSWERED]}, ["find", "find", "leave"]),
    ({"finds": [coordinator(-1, error_code=15)]}, ["find", "find", "leave"]),
    ({"ready": [AssertionError("sasl_oauth_token_provider must implement ...")]},
     ["find", "leave"]),
    ({"beats": [RuntimeError("unexpected")]}, ["find", "leave", "find", "leave"]),
], ids=["no connection", "no connection to the coordinator", "not ready in time",
        "disconnected", "no answer to the leave", "no answer to the lookup",
        "lookup: COORDINATOR_NOT_AVAILABLE", "kafka-python's assertion", "any other error"])
def test_a_failed_try_drops_the_client_and_the_next_one_confirms(
        script: dict[str, list[Any]], kinds: list[str], clock: Clock) -> None:
    cluster = Cluster(finds=[*script.get("finds", []), coordinator(3), coordinator(3)],
                      beats=[*script.get("beats", []), heartbeat()],
                      ready=list(script.get("ready", [])))
    leave = leave_for(cluster)
    result = leave.confirm("m-1", "orders-0", clock.now + 20, sleep=clock.sleep)
    assert (result.outcome, result.tries) == (LEAVE_LEFT, 2)
    assert result.detail == ""  # the confirming answer had no error
    assert cluster.kinds() == kinds
    assert cluster.kinds()[-1] == "leave" and cluster.sent[-1][0] == 3
    assert clock.sleeps == [RETRY_S[0]]
    assert len(cluster.clients) == 2
    assert cluster.clients[0].closed and not cluster.clients[1].closed
    assert leave.client is cluster.clients[1]


@pytest.mark.parametrize(("script", "detail"), [
    ({"beats": [heartbeat(15, -1, "The coordinator is not available.")] * 9},
     "error 15: The coordinator is not available."),
    ({"beats": [heartbeat(14)] * 9}, "error 14:"),
    ({"ready": [OSError("Connection refused")] * 9}, "OSError: Connection refused"),
    ({"finds": [coordinator(-1, error_code=15)] * 9}, "OSError: FindCoordinator: error 15"),
    ({"ready": [AssertionError("bad provider")] * 9}, "AssertionError: bad provider"),
], ids=["COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "no connection",
        "no coordinator", "an error of any kind"])
def test_it_asks_again_until_the_deadline_then_is_unconfirmed_naming_the_last_error(
        script: dict[str, list[Any]], detail: str, clock: Clock) -> None:
    cluster = Cluster(finds=script.get("finds", [coordinator(3)] * 9),
                      beats=script.get("beats", []), ready=script.get("ready", []))
    began = clock.now
    result = leave_for(cluster).confirm("m-1", "orders-0", began + 1.0, sleep=clock.sleep)
    # 0.05 + 0.1 + 0.2 + 0.5 = 0.85 s asleep; a fifth pause of 1 s would pass the deadline
    assert (result.outcome, result.tries, result.detail) == (LEAVE_UNCONFIRMED, 5, detail)
    assert clock.sleeps == [0.05, 0.1, 0.2, 0.5]
    assert result.seconds == pytest.approx(0.85)
    assert clock.now < began + 1.0
    # each try began with a new coordinator lookup on the least loaded broker, its waits
    # bounded by what was left
    assert [node for node, _ in cluster.waits].count(0) == 5
    timeouts = [timeout for _, timeout in cluster.waits]
    assert timeouts[0] == 1000 and timeouts == sorted(timeouts, reverse=True)


def test_the_first_pause_that_would_pass_the_deadline_ends_the_asking(clock: Clock) -> None:
    """A sleep that does not move the clock: the tries go on until the pause that does not fit
    (0.05, 0.1 and 0.2 s do in 0.3 s, 0.5 s does not)."""
    cluster = Cluster(finds=[coordinator(3)] * 9, beats=[heartbeat(15)] * 9)
    result = leave_for(cluster).confirm("m-1", "orders-0", clock.now + 0.3,
                                        sleep=lambda _: None)
    assert (result.outcome, result.tries) == (LEAVE_UNCONFIRMED, 4)
    assert cluster.kinds() == ["find", "leave"] * 4


def test_a_deadline_already_past_still_gets_one_try(clock: Clock) -> None:
    cluster = Cluster(finds=[coordinator(3)], beats=[heartbeat(16)])
    result = leave_for(cluster).confirm("m-1", "orders-0", clock.now - 1, sleep=clock.sleep)
    assert (result.outcome, result.tries, result.detail) == (LEAVE_UNCONFIRMED, 1, "error 16:")
    assert cluster.waits == [(0, 1), (3, 1)]  # the shortest wait there is
    assert clock.sleeps == []


def test_no_reachable_broker_is_unconfirmed_without_sending(clock: Clock) -> None:
    cluster = Cluster(least_loaded=None)
    result = leave_for(cluster).confirm("m-1", "orders-0", clock.now + 1.0, sleep=clock.sleep)
    assert (result.outcome, result.detail) == (LEAVE_UNCONFIRMED, "OSError: no broker reachable")
    assert result.tries == 5 and cluster.sent == []


@pytest.mark.parametrize(("answer", "expected", "detail"), [
    (heartbeat(82, -1, "instance id orders-0 is held by another member"), LEAVE_TAKEN,
     "error 82: instance id orders-0 is held by another member"),
    (heartbeat(25, -1), LEAVE_GONE, "error 25:"),
    (heartbeat(69, -1, "Group g not found."), LEAVE_GONE, "error 69: Group g not found."),
    (heartbeat(30, -1, "Not authorized."), LEAVE_UNCONFIRMED, "error 30: Not authorized."),
    (heartbeat(0, 4), LEAVE_UNCONFIRMED, ""),
    (heartbeat(0, -2), LEAVE_LEFT, ""),
], ids=["FENCED_INSTANCE_ID", "UNKNOWN_MEMBER_ID", "GROUP_ID_NOT_FOUND",
        "GROUP_AUTHORIZATION_FAILED", "no error, another epoch", "left"])
def test_an_answer_that_says_where_the_instance_id_stands_ends_it_in_one_try(
        answer: SimpleNamespace, expected: str, detail: str, clock: Clock) -> None:
    cluster = Cluster(finds=[coordinator(3)], beats=[answer])
    result = leave_for(cluster).confirm("m-1", "orders-0", clock.now + 20, sleep=clock.sleep)
    assert (result.outcome, result.tries, result.detail) == (expected, 1, detail)
    assert cluster.kinds() == ["find", "leave"]
    assert clock.sleeps == []


def test_a_warmed_up_client_sends_only_the_leave_after_the_close(clock: Clock) -> None:
    cluster = Cluster(finds=[coordinator(3)], beats=[heartbeat()])
    leave = leave_for(cluster)
    leave.warm()
    assert cluster.kinds() == ["find"] and leave.coordinator == 3
    result = leave.confirm("m-1", "orders-0", clock.now + 20, sleep=clock.sleep)
    assert (result.outcome, result.tries) == (LEAVE_LEFT, 1)
    assert cluster.kinds() == ["find", "leave"] and len(cluster.clients) == 1


@pytest.mark.parametrize("error", [OSError("Connection refused"), AssertionError("bad")],
                         ids=["OSError", "any other error"])
def test_warming_up_keeps_its_errors_for_the_confirmation(error: Exception,
                                                          clock: Clock) -> None:
    cluster = Cluster(finds=[coordinator(3)], beats=[heartbeat()], ready=[error])
    leave = leave_for(cluster)
    leave.warm(timeout_s=1.0)
    assert leave.coordinator is None and cluster.sent == []
    assert cluster.waits == [(0, 1000)]  # warm's own timeout
    result = leave.confirm("m-1", "orders-0", clock.now + 20, sleep=clock.sleep)
    assert (result.outcome, result.tries) == (LEAVE_LEFT, 1)


def test_close_drops_the_client_even_one_that_fails_to_close(clock: Clock) -> None:
    cluster = Cluster(finds=[coordinator(3)], beats=[heartbeat()])
    leave = leave_for(cluster)
    leave.confirm("m-1", "orders-0", clock.now + 20, sleep=clock.sleep)
    cluster.clients[0].close_error = KafkaError("broken")
    leave.close()
    assert cluster.clients[0].closed and leave.client is None
    leave.close()  # nothing left to close


# -- nothing the leave meets escapes it (a member's stop must not fail on its leave) ---------------


@pytest.mark.parametrize(("props", "detail"), [
    ({"bootstrap.servers": "b:9093", "security.protocol": "SSL", "ssl.ca.pem": "not a PEM"},
     "SSLError: "),
    ({"bootstrap.servers": "b:9093", "security.protocol": "SSL",
      "ssl.ca.location": "/nonexistent/ca.pem"}, "FileNotFoundError: "),
    ({"security.protocol": "PLAINTEXT"}, "KeyError: 'bootstrap.servers'"),
], ids=["ssl.SSLError", "OSError", "KeyError"])
def test_settings_that_fail_to_load_make_every_leave_unconfirmed_at_once(
        props: dict[str, str], detail: str, clock: Clock) -> None:
    cluster = Cluster(finds=[coordinator(3)], beats=[heartbeat()])
    leave = StaticLeave(props, "g", "orders-0-leave", make_client=cluster.make_client)
    leave.warm()
    result = leave.confirm("m-1", "orders-0", clock.now + 20, sleep=clock.sleep)
    assert (result.outcome, result.tries, result.seconds) == (LEAVE_UNCONFIRMED, 0, 0.0)
    assert result.detail.startswith("the client's settings: " + detail), result.detail
    assert result.as_status()["detail"] == result.detail
    assert cluster.clients == [] and clock.sleeps == []  # no try can succeed: none is made
    leave.close()


def test_any_error_of_the_settings_is_kept_for_the_result(
        monkeypatch: pytest.MonkeyPatch, clock: Clock) -> None:
    def broken(props: Any, client_id: str) -> dict[str, Any]:
        raise RuntimeError("something unforeseen")

    monkeypatch.setattr(staticleave, "client_config", broken)
    result = leave_for(Cluster()).confirm("m-1", "orders-0", clock.now + 20, sleep=clock.sleep)
    assert (result.outcome, result.detail) == (
        LEAVE_UNCONFIRMED, "the client's settings: RuntimeError: something unforeseen")


def test_settings_the_client_cannot_take_are_still_refused_when_it_is_made() -> None:
    """The one error the constructor raises: the member catches it, says it once and leaves
    the leave to librdkafka's (leaving.py, `_static_leave`)."""
    with pytest.raises(StaticLeaveError, match=r"^sasl\.mechanism: "):
        StaticLeave({"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL",
                     "sasl.mechanism": "GSSAPI"}, "g", "c")


def test_oidc_without_a_token_endpoint_is_refused_naming_it() -> None:
    props = {k: v for k, v in OIDC.items() if k != "sasl.oauthbearer.token.endpoint.url"}
    with pytest.raises(StaticLeaveError, match=r"^sasl\.oauthbearer\.token\.endpoint\.url: "):
        client_config(props, "c")


def test_an_error_between_the_tries_is_an_unconfirmed_result(clock: Clock) -> None:
    cluster = Cluster(finds=[coordinator(3)] * 2, beats=[heartbeat(15)] * 2)
    leave = leave_for(cluster)

    def sleep(seconds: float) -> None:
        raise RuntimeError("interrupted")

    result = leave.confirm("m-1", "orders-0", clock.now + 20, sleep=sleep)
    assert (result.outcome, result.detail) == (LEAVE_UNCONFIRMED, "RuntimeError: interrupted")
    assert leave.client is None and cluster.clients[0].closed  # nothing kept


@pytest.mark.parametrize("error", [KafkaError("broken"), RuntimeError("unforeseen"),
                                   ssl.SSLError("bad record")],
                         ids=["kafka-python's", "any other", "ssl.SSLError"])
def test_a_client_that_fails_to_close_fails_neither_a_try_nor_close(
        error: Exception, clock: Clock) -> None:
    cluster = Cluster(finds=[coordinator(3)] * 2,
                      beats=[KafkaConnectionError("socket disconnected"), heartbeat()])
    leave = leave_for(cluster)
    leave.warm()
    cluster.clients[0].close_error = error
    result = leave.confirm("m-1", "orders-0", clock.now + 20, sleep=clock.sleep)
    assert (result.outcome, result.tries) == (LEAVE_LEFT, 2)  # the failed try dropped the client
    cluster.clients[1].close_error = error
    leave.close()
    assert leave.client is None and all(client.closed for client in cluster.clients)


def test_the_client_is_made_within_the_time_left(clock: Clock) -> None:
    """kafka-python's client connects and asks the API versions as it is made: it waits no
    longer than the deadline allows (api_version_auto_timeout_ms)."""
    cluster = Cluster(finds=[coordinator(3)] * 2, beats=[heartbeat()] * 2)
    leave_for(cluster).confirm("m-1", "orders-0", clock.now + 1.5, sleep=clock.sleep)
    leave_for(cluster).confirm("m-1", "orders-0", clock.now + 60, sleep=clock.sleep)
    assert [c.config["api_version_auto_timeout_ms"] for c in cluster.clients] == [1500, 5000]
