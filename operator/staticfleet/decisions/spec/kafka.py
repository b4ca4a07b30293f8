"""`spec.kafka`: where the group's cluster is, which topics it reads and how its clients
connect (TLS, SASL, OAUTHBEARER, with Secret references), as typed, frozen dataclasses, and
`parse` for that section of a body. The clientProperties the operator owns are refused here with
the field to use instead (the CRD's CEL rules, repeated for bodies that did not pass the API
server). `kafkaclient` makes the clients' configurations from these.

`spec.kafka.topicPattern` is read here once for everyone (`topic_matcher`): a full match of
the topic name, in the syntax that means the same to the three engines that read it
(docs/consumergroup.md, "Topic patterns"), run in RE2 (linear time: a tenant's pattern cannot
hold the operator).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import re2

from member_contract import SASL_MECHANISMS, SECURITY_PROTOCOLS
from staticfleet.decisions.spec.bounds import TOPIC_PATTERN_MAX_LENGTH, bootstrap_addresses
from staticfleet.decisions.spec.fields import SpecError, as_obj, opt_str, req_str, str_list, str_map

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]

_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_GROUP_ID_RE = re.compile(r"^[a-zA-Z0-9._-]{1,200}$")



def _re2_options() -> Any:
    options = re2.Options()
    options.posix_syntax = True   # POSIX extended syntax: what librdkafka's regcomp reads
    options.one_line = True       # ^ and $ at the name's ends only (posix_syntax alone: lines)
    options.log_errors = False    # a refused pattern is an InvalidSpec, not a line on stderr
    return options


_RE2_OPTIONS = _re2_options()
_REPEAT = re.compile(r"\{[0-9]+(,[0-9]*)?\}")


def topic_pattern_problem(pattern: str) -> str | None:
    """Why `pattern` cannot be a `topicPattern`, or None: too long, or not a pattern that RE2,
    glibc's POSIX regex (a classic member's librdkafka) and the broker's RE2J read alike."""
    if not pattern:
        return "is empty; write a pattern, or list the topics in spec.kafka.topics"
    if len(pattern) > TOPIC_PATTERN_MAX_LENGTH:
        return (f"is {len(pattern)} characters long, longer than the "
                f"{TOPIC_PATTERN_MAX_LENGTH} allowed; shorten it")
    problem = _read_differently(pattern)
    if problem is not None:
        return problem
    try:
        re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode() if isinstance(exc.args[0], bytes) else str(exc)
        return (f"is not a POSIX extended regular expression as RE2 reads it ({reason}); "
                "there is no \\d, \\w, \\s, \\b or (?...): write [0-9], [a-zA-Z0-9_], "
                "plain (...) and so on")
    return None


def _read_differently(pattern: str) -> str | None:
    """The first place where RE2 (which accepts it) and glibc's POSIX regex would read
    `pattern` differently, or where POSIX leaves it undefined: a backslash inside a bracket
    expression, a `{` that is not a repetition, two repetition operators in a row."""
    i, bracket, repeated = 0, -1, False
    while i < len(pattern):
        ch, was_repeated, repeated = pattern[i], repeated, False
        if bracket >= 0:  # inside [...]: `bracket` is where its first member stands
            if ch == "\\":
                return (f"has a backslash inside a bracket expression at {i}: a classic "
                        "member's POSIX regex reads it as a literal, RE2 as an escape; write "
                        "the characters themselves (put - last, e.g. [a-z.-])")
            if ch == "[" and pattern[i + 1:i + 2] in (":", ".", "="):  # [:alpha:] and kin
                end = pattern.find(pattern[i + 1] + "]", i + 2)
                i = len(pattern) if end < 0 else end + 2
                continue
            if ch == "]" and i > bracket:
                bracket = -1
        elif ch == "\\":
            i += 1
        elif ch == "[":
            bracket = i = i + 1 + (pattern[i + 1:i + 2] == "^")
            continue
        elif ch in "*+?{":
            repeat = _REPEAT.match(pattern, i) if ch == "{" else None
            if ch == "{" and repeat is None:
                return (f"has a {{ at {i} that is not a repetition {{n}}, {{n,}} or {{n,m}}: "
                        "the engines read it differently; write a repetition or leave it out "
                        "(topic names hold no braces)")
            if was_repeated:
                return (f"has two repetition operators in a row at {i}, which POSIX leaves "
                        "undefined; group the first, e.g. (a+)* for a+*")
            repeated = True
            if repeat is not None:
                i = repeat.end()
                continue
        i += 1
    return None


@lru_cache(maxsize=1024)
def topic_matcher(pattern: str) -> Callable[[str], bool]:
    """Whether a topic name is one `pattern` subscribes to: a full match, in RE2 (linear in
    the name's length), as the members' subscription (member_contract's
    `PATTERN_SUBSCRIPTION`) matches it. `pattern` has passed `topic_pattern_problem` (the
    spec parser's); RE2 refuses one that has not."""
    rx = re2.compile(pattern, _RE2_OPTIONS)
    return lambda name: rx.fullmatch(name) is not None

# clientProperties keys the operator owns, and the field to use instead (mirrors the CRD's CEL).
OWNED_CLIENT_PROPERTIES: Mapping[str, str] = {
    "group.id": "spec.kafka.groupId",
    "group.instance.id": "nothing: the operator gives member i the id <groupId>-<i>",
    "enable.auto.commit": "nothing: members store offsets after processing (at-least-once)",
    "enable.auto.offset.store": "nothing: members store offsets after processing (at-least-once)",
    "session.timeout.ms": "spec.membership.timeouts.sessionTimeoutMs",
    "heartbeat.interval.ms": "spec.membership.timeouts.heartbeatIntervalMs",
    "max.poll.interval.ms": "spec.membership.timeouts.maxPollIntervalMs",
    "bootstrap.servers": "spec.kafka.bootstrapServers",
    "group.protocol": "spec.membership.protocol",
    "partition.assignment.strategy": "spec.membership.assignmentStrategy",
    "auto.offset.reset": "spec.processing.autoOffsetReset",
    "security.protocol": "spec.kafka.security.protocol",
    "enable.ssl.certificate.verification": (
        "nothing: the broker's certificate is always verified (give its CA in "
        "spec.kafka.security.tls.caSecretRef)"),
    "enable.sasl.oauthbearer.unsecure.jwt": (
        "spec.kafka.security.sasl.oauthbearer: tokens come from the token endpoint"),
}
OWNED_CLIENT_PREFIXES: Mapping[str, str] = {
    "sasl.": "spec.kafka.security.sasl (with Secret references)",
}
SSL_TUNING_PROPERTIES = ("ssl.cipher.suites", "ssl.curves.list", "ssl.sigalgs.list")
"""The ssl.* clientProperties a user may set: they tune the TLS handshake and name no file and
no secret. The operator's admin client uses them too."""
SSL_REFUSAL = (
    "is not one of the ssl.* keys clientProperties take ("
    + ", ".join(SSL_TUNING_PROPERTIES)
    + "): certificates and keys come as PEM from Secrets through spec.kafka.security.tls "
    "(a member pod mounts no files, so *.location keys cannot work, and key material is "
    "never written inline), and verification cannot be switched off")


@dataclass(frozen=True)
class SecretKeyRef:
    """A key in a Secret of the ConsumerGroup's namespace."""

    name: str
    key: str


@dataclass(frozen=True)
class OAuthBearerSpec:
    """OAUTHBEARER with OIDC client credentials: librdkafka fetches a token from the endpoint
    with the client id and secret (HTTP Basic) and refreshes it before it expires."""

    token_endpoint_url: str
    client_id: SecretKeyRef
    client_secret: SecretKeyRef
    scope: str | None = None
    extensions: Mapping[str, str] | None = None
    """SASL extensions sent with the token (e.g. logicalCluster, identityPoolId)."""


@dataclass(frozen=True)
class SaslSpec:
    """A user name and password (PLAIN, SCRAM-*), or OAUTHBEARER's `oauthbearer`."""

    mechanism: str
    username: SecretKeyRef | None = None
    password: SecretKeyRef | None = None
    oauthbearer: OAuthBearerSpec | None = None


@dataclass(frozen=True)
class TlsSpec:
    ca: SecretKeyRef | None = None
    cert: SecretKeyRef | None = None
    key: SecretKeyRef | None = None


@dataclass(frozen=True)
class SecuritySpec:
    protocol: SecurityProtocol = "PLAINTEXT"
    sasl: SaslSpec | None = None
    tls: TlsSpec | None = None


@dataclass(frozen=True)
class KafkaSpec:
    bootstrap_servers: str
    group_id: str
    topics: tuple[str, ...] | None
    topic_pattern: str | None
    security: SecuritySpec
    client_properties: Mapping[str, str]
    admin_security: SecuritySpec | None = None
    """The operator's own connection (`spec.kafka.adminSecurity`), when it is not the members':
    then the members' principal needs rights on its group and topics only."""

    @property
    def operator_security(self) -> SecuritySpec:
        """How the operator's admin client connects: adminSecurity, else the members' own."""
        return self.admin_security or self.security

    @property
    def operator_security_path(self) -> str:
        return "spec.kafka.adminSecurity" if self.admin_security else "spec.kafka.security"


def _secret_ref(obj: Mapping[str, Any], key: str, path: str) -> SecretKeyRef | None:
    raw = obj.get(key)
    if raw is None:
        return None
    ref = as_obj(raw, f"{path}.{key}")
    return SecretKeyRef(
        name=req_str(ref, "name", f"{path}.{key}"), key=req_str(ref, "key", f"{path}.{key}")
    )


def _req_secret_ref(obj: Mapping[str, Any], key: str, path: str) -> SecretKeyRef:
    ref = _secret_ref(obj, key, path)
    if ref is None:
        raise SpecError(f"{path}.{key}", "is required")
    return ref


def parse(kafka: Mapping[str, Any], name: str) -> KafkaSpec:
    """The `spec.kafka` section of group `name` (its default group id)."""
    path = "spec.kafka"
    bootstrap = req_str(kafka, "bootstrapServers", path)
    bootstrap_addresses(bootstrap, f"{path}.bootstrapServers")
    topics = kafka.get("topics")
    pattern = opt_str(kafka, "topicPattern", path)
    if (topics is None) == (pattern is None):
        raise SpecError(path, "set exactly one of topics or topicPattern")
    parsed_topics: tuple[str, ...] | None = None
    if topics is not None:
        parsed_topics = str_list(kafka, "topics", path)
        if not parsed_topics:
            raise SpecError(f"{path}.topics", "must name at least one topic")
        for i, topic in enumerate(parsed_topics):
            if not _TOPIC_RE.match(topic):
                raise SpecError(f"{path}.topics[{i}]", f"{topic!r} is not a valid topic name")
    if pattern is not None and (problem := topic_pattern_problem(pattern)) is not None:
        raise SpecError(f"{path}.topicPattern", problem)
    group_id = opt_str(kafka, "groupId", path) or name
    if not _GROUP_ID_RE.match(group_id):
        raise SpecError(f"{path}.groupId", f"{group_id!r} must match {_GROUP_ID_RE.pattern}")
    client = str_map(kafka, "clientProperties", path) or {}
    for key in sorted(client):
        instead = OWNED_CLIENT_PROPERTIES.get(key) or next(
            (v for p, v in OWNED_CLIENT_PREFIXES.items() if key.startswith(p)), None
        )
        if instead is not None:
            raise SpecError(
                f"{path}.clientProperties[{key}]", f"is set by the operator; use {instead}"
            )
        if key.startswith("ssl.") and key not in SSL_TUNING_PROPERTIES:
            raise SpecError(f"{path}.clientProperties[{key}]", SSL_REFUSAL)
    return KafkaSpec(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        topics=parsed_topics,
        topic_pattern=pattern,
        security=_parse_security(as_obj(kafka.get("security"), f"{path}.security"),
                                 f"{path}.security"),
        client_properties=client,
        admin_security=(None if kafka.get("adminSecurity") is None else _parse_security(
            as_obj(kafka["adminSecurity"], f"{path}.adminSecurity"), f"{path}.adminSecurity")),
    )


def _parse_security(sec: Mapping[str, Any], path: str) -> SecuritySpec:
    protocol = opt_str(sec, "protocol", path) or "PLAINTEXT"
    if protocol not in SECURITY_PROTOCOLS:
        raise SpecError(f"{path}.protocol", f"unknown protocol {protocol!r}")
    sasl: SaslSpec | None = None
    raw_sasl = sec.get("sasl")
    if protocol.startswith("SASL_") and raw_sasl is None:
        raise SpecError(f"{path}.sasl", f"is required with protocol {protocol}")
    if raw_sasl is not None:
        if not protocol.startswith("SASL_"):
            raise SpecError(f"{path}.sasl", f"is only used with SASL_* protocols, not {protocol}")
        sasl = _parse_sasl(as_obj(raw_sasl, f"{path}.sasl"), f"{path}.sasl")
    tls: TlsSpec | None = None
    if sec.get("tls") is not None:
        t = as_obj(sec["tls"], f"{path}.tls")
        tls = TlsSpec(
            ca=_secret_ref(t, "caSecretRef", f"{path}.tls"),
            cert=_secret_ref(t, "certSecretRef", f"{path}.tls"),
            key=_secret_ref(t, "keySecretRef", f"{path}.tls"),
        )
        if (tls.cert is None) != (tls.key is None):
            raise SpecError(f"{path}.tls", "certSecretRef and keySecretRef must be set together")
    return SecuritySpec(protocol=protocol, sasl=sasl, tls=tls)  # type: ignore[arg-type]


def _parse_sasl(s: Mapping[str, Any], path: str) -> SaslSpec:
    mechanism = req_str(s, "mechanism", path)
    if mechanism not in SASL_MECHANISMS:
        raise SpecError(f"{path}.mechanism", f"unknown mechanism {mechanism!r} (one of "
                                             f"{', '.join(SASL_MECHANISMS)})")
    if mechanism != "OAUTHBEARER":
        if s.get("oauthbearer") is not None:
            raise SpecError(f"{path}.oauthbearer", "is only used with mechanism OAUTHBEARER")
        return SaslSpec(mechanism=mechanism,
                        username=_req_secret_ref(s, "usernameSecretRef", path),
                        password=_req_secret_ref(s, "passwordSecretRef", path))
    for key in ("usernameSecretRef", "passwordSecretRef"):
        if s.get(key) is not None:
            raise SpecError(f"{path}.{key}", "is not used with mechanism OAUTHBEARER (the "
                                             "client id and secret are in sasl.oauthbearer)")
    ob_path = f"{path}.oauthbearer"
    ob = as_obj(s.get("oauthbearer"), ob_path, required=True)
    url = req_str(ob, "tokenEndpointUrl", ob_path)
    if not url.startswith(("https://", "http://")):
        raise SpecError(f"{ob_path}.tokenEndpointUrl", f"must be an https:// (or http://) URL, "
                                                       f"got {url!r}")
    extensions = str_map(ob, "extensions", ob_path)
    for key, value in (extensions or {}).items():
        if not key or any(ch in key + value for ch in ",="):
            raise SpecError(f"{ob_path}.extensions[{key}]",
                            "keys must be non-empty and keys and values may not contain , or =")
    return SaslSpec(mechanism=mechanism, oauthbearer=OAuthBearerSpec(
        token_endpoint_url=url,
        client_id=_req_secret_ref(ob, "clientIdSecretRef", ob_path),
        client_secret=_req_secret_ref(ob, "clientSecretSecretRef", ob_path),
        scope=opt_str(ob, "scope", ob_path) or None,
        extensions=extensions or None,
    ))

