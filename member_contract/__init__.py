"""The member contract in one spelling: what the operator gives a member pod and asks of it, and
what the member (`consumer_runtime`) reads and answers. docs/contracts.md says what each name
means; this package only spells them, so that both images import one spelling.

Constants here, the types of the two documents a member answers with in `member_contract.status`
(its `/status`, the drain's answer), and nothing of ours imported (an import-linter contract): the
operator image and the member image both ship this package, and neither may bring the other's
code with it.

* The environment a member reads (`*_ENV`), its HTTP port and endpoints.
* The operator's POST requests (`REQUESTS`) and the outcomes of a KIP-848 static leave
  (`LEAVE_OUTCOMES`), as the member's `/status` and metrics say them.
* How a member's Kafka client connects: `SECURITY_PROTOCOLS`, `SASL_MECHANISMS`, which Secret
  each credential comes from (`SECRET_ENV`: the member's variable -> librdkafka's property) and
  which credentials each mechanism needs (`MECHANISM_CREDENTIALS`). The operator's librdkafka
  configuration, the member's environment and the static leave's kafka-python configuration
  are each tested against these tables: adding a mechanism here fails every side that does not
  carry it.
* The regex a member subscribes to for a `topicPattern` (`PATTERN_SUBSCRIPTION`).
"""

from __future__ import annotations

from collections.abc import Mapping

# --- the environment -------------------------------------------------------------------------

CONFIG_ENV = "STATICFLEET_CONFIG"
"""The runtime configuration (config.json) as JSON text, carried by the pod."""
CONFIG_FILE_ENV = "STATICFLEET_CONFIG_FILE"
"""A file holding the configuration, instead of CONFIG_ENV (a runtime run by hand)."""
STANDBY_ENV = "STATICFLEET_STANDBY"
ACTIVATED_ENV = "STATICFLEET_ACTIVATED"
GROUP_INSTANCE_ID_ENV = "STATICFLEET_GROUP_INSTANCE_ID"
HTTP_HOST_ENV = "STATICFLEET_HTTP_HOST"
HTTP_PORT_ENV = "STATICFLEET_HTTP_PORT"
MEMBER_TOKEN_FILE_ENV = "STATICFLEET_MEMBER_TOKEN_FILE"
TERMINATION_MESSAGE_PATH_ENV = "STATICFLEET_TERMINATION_MESSAGE_PATH"
POD_NAME_ENV = "POD_NAME"
POD_NAMESPACE_ENV = "POD_NAMESPACE"

SASL_USERNAME_ENV = "STATICFLEET_SASL_USERNAME"
SASL_PASSWORD_ENV = "STATICFLEET_SASL_PASSWORD"
SSL_CA_PEM_ENV = "STATICFLEET_SSL_CA_PEM"
SSL_CERT_PEM_ENV = "STATICFLEET_SSL_CERT_PEM"
SSL_KEY_PEM_ENV = "STATICFLEET_SSL_KEY_PEM"
OAUTHBEARER_CLIENT_ID_ENV = "STATICFLEET_OAUTHBEARER_CLIENT_ID"
OAUTHBEARER_CLIENT_SECRET_ENV = "STATICFLEET_OAUTHBEARER_CLIENT_SECRET"

# --- HTTP ------------------------------------------------------------------------------------

HTTP_PORT = 8080
HTTP_PORT_NAME = "http"

HEALTHZ = "/healthz"
READYZ = "/readyz"
STATUS = "/status"
METRICS = "/metrics"

LEAVE = "leave"
REJOIN = "rejoin"
ACTIVATE = "activate"
DRAIN = "drain"
REQUESTS = (LEAVE, REJOIN, ACTIVATE, DRAIN)
"""The operator's requests, each a `POST /<request>` with the group's bearer token."""

# --- a KIP-848 static leave, as /status `staticLeave.outcome` says it -------------------------

LEAVE_LEFT = "left"
"""The coordinator holds the instance id for its return (member epoch -2)."""
LEAVE_TAKEN = "taken"
"""Another process holds the instance id (FENCED_INSTANCE_ID): the replacement is in."""
LEAVE_GONE = "gone"
"""The group does not know the instance id (its session expired, or the group is gone)."""
LEAVE_UNCONFIRMED = "unconfirmed"
"""No answer that says where the instance id stands, within the time given."""
LEAVE_OUTCOMES = (LEAVE_LEFT, LEAVE_TAKEN, LEAVE_GONE, LEAVE_UNCONFIRMED)

# --- a topicPattern's subscription -----------------------------------------------------------

PATTERN_SUBSCRIPTION = "^({pattern})$"
"""What a member passes to `Consumer.subscribe` for `spec.kafka.topicPattern` (`.format(
pattern=...)`): anchored at both ends, so that both protocols match the whole topic name, as
the operator counts it (`staticfleet.decisions.spec.kafka.topic_matcher`). A classic member's
librdkafka searches with POSIX `regexec` (a bare `^pattern` matched every name it prefixes);
for KIP-848 librdkafka sends `(^(pattern)$)` to the broker, whose RE2J matches the whole name.
A group, not `(?:...)`: POSIX regcomp refuses that."""

# --- how a member's Kafka client connects ----------------------------------------------------

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

SECRET_ENV: Mapping[str, str] = {
    SASL_USERNAME_ENV: "sasl.username",
    SASL_PASSWORD_ENV: "sasl.password",
    SSL_CA_PEM_ENV: "ssl.ca.pem",
    SSL_CERT_PEM_ENV: "ssl.certificate.pem",
    SSL_KEY_PEM_ENV: "ssl.key.pem",
    OAUTHBEARER_CLIENT_ID_ENV: "sasl.oauthbearer.client.id",
    OAUTHBEARER_CLIENT_SECRET_ENV: "sasl.oauthbearer.client.secret",
}
"""Credentials the operator gives a member from Secrets, as environment variables, and the
librdkafka property each fills."""

_USER_AND_PASSWORD = (SASL_USERNAME_ENV, SASL_PASSWORD_ENV)
MECHANISM_CREDENTIALS: Mapping[str, tuple[str, ...]] = {
    "PLAIN": _USER_AND_PASSWORD,
    "SCRAM-SHA-256": _USER_AND_PASSWORD,
    "SCRAM-SHA-512": _USER_AND_PASSWORD,
    "OAUTHBEARER": (OAUTHBEARER_CLIENT_ID_ENV, OAUTHBEARER_CLIENT_SECRET_ENV),
}
"""The credentials (their variables in `SECRET_ENV`) each SASL mechanism needs; one row per
entry of `SASL_MECHANISMS`."""
TLS_CREDENTIALS = (SSL_CA_PEM_ENV, SSL_CERT_PEM_ENV, SSL_KEY_PEM_ENV)
"""The TLS material (their variables in `SECRET_ENV`): a CA, a client certificate and its key."""
