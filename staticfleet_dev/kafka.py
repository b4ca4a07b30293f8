"""A single-node Apache Kafka 4.x broker (KRaft, combined broker+controller) on loopback."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from staticfleet_dev import build
from staticfleet_dev.certs import KafkaTlsFiles
from staticfleet_dev.procs import (
    ProcessRecord,
    ServerFailed,
    free_ports,
    port_open,
    spawn,
    wait_until,
)
from staticfleet_dev.tools import require_tool, tail

LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.coordinator.name = org.apache.kafka.coordinator.group
logger.coordinator.level = INFO
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""

# Lowered for tests so groups form quickly and short session timeouts are allowed.
TEST_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.heartbeat.interval.ms": "1000",
}


@dataclass(frozen=True)
class Listener:
    """A client listener beside PLAINTEXT: its name, its security protocol, and its own
    settings, written as `listener.name.<name in lower case>.<key>`."""

    name: str
    protocol: str
    settings: Mapping[str, str] = field(default_factory=dict)


SECURED_LISTENERS = ("SSL", "MTLS", "SCRAM", "OAUTH")
"""The listeners of `KafkaSettings.with_secured_listeners`, by name."""
SCRAM_MECHANISM = "SCRAM-SHA-512"


@dataclass
class KafkaSettings:
    """Broker settings; `overrides` land in server.properties as given. `listeners` are served
    beside PLAINTEXT (which stays the inter-broker listener), each on a port of its own;
    `scram_users` (name -> password) get SCRAM-SHA-512 credentials when the storage is
    formatted (`kafka-storage format --add-scram`)."""

    port: int = 0
    controller_port: int = 0
    overrides: dict[str, str] = field(default_factory=dict)
    listeners: tuple[Listener, ...] = ()
    scram_users: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def for_tests(cls) -> KafkaSettings:
        return cls(overrides=dict(TEST_SETTINGS))

    @classmethod
    def with_acls(cls, users: Mapping[str, str]) -> KafkaSettings:
        """A broker whose client listener takes SASL/PLAIN logins (`users`: name -> password,
        `admin` among them) and authorizes them with ACLs (StandardAuthorizer): `admin` may do
        anything; any other user only what ACLs grant it."""
        if "admin" not in users:
            raise ValueError("with_acls: the users must include 'admin' (the super user)")
        logins = " ".join(f'user_{name}="{password}"' for name, password in users.items())
        return cls(overrides={
            **TEST_SETTINGS,
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.plaintext.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="admin" password="{users["admin"]}" {logins};'),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # The controller listener is PLAINTEXT on loopback: its principal is ANONYMOUS.
            "super.users": "User:admin;User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        })

    @classmethod
    def with_secured_listeners(cls, tls: KafkaTlsFiles,
                               scram_users: Mapping[str, str]) -> KafkaSettings:
        """Test settings plus four client listeners on TLS, with the certificates of `tls`
        (`certs.generate_kafka`):

        - SSL: server TLS only; the client is ANONYMOUS.
        - MTLS: mutual TLS; a client certificate signed by the CA is required and its CN is
          the principal (`ssl.principal.mapping.rules`).
        - SCRAM: SASL_SSL with SCRAM-SHA-512; `scram_users` are its logins.
        - OAUTH: SASL_SSL with OAUTHBEARER. No validator is configured, so the broker uses
          Kafka's unsecured JWS validator (OAuthBearerUnsecuredValidatorCallbackHandler): a
          token must be an unsigned JWS (alg "none") with `exp` and `sub`; `sub` is the
          principal. No signature is checked.

        ACLs are enforced (StandardAuthorizer) only on resources that have some: a resource
        without ACLs is open to every principal, and ANONYMOUS (PLAINTEXT, SSL, the controller)
        is a super user. A test proves which principal a listener authenticated by granting a
        topic to that principal alone."""
        scram_jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        # The broker's own login on the listener (it never logs in to itself through it).
        oauth_jaas = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                      'required unsecuredLoginStringClaim_sub="kafka-broker";')
        return cls(
            overrides={
                **TEST_SETTINGS,
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(tls.keystore),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(tls.ca_cert),
                "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
                "authorizer.class.name":
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:ANONYMOUS",
                "allow.everyone.if.no.acl.found": "true",
            },
            listeners=(
                Listener("SSL", "SSL"),
                Listener("MTLS", "SSL", {"ssl.client.auth": "required"}),
                Listener("SCRAM", "SASL_SSL", {
                    "sasl.enabled.mechanisms": SCRAM_MECHANISM,
                    f"{SCRAM_MECHANISM.lower()}.sasl.jaas.config": scram_jaas}),
                Listener("OAUTH", "SASL_SSL", {
                    "sasl.enabled.mechanisms": "OAUTHBEARER",
                    "oauthbearer.sasl.jaas.config": oauth_jaas}),
            ),
            scram_users=dict(scram_users),
        )


def server_properties(data_dir: Path, port: int, controller_port: int,
                      overrides: dict[str, str],
                      listeners: Sequence[tuple[Listener, int]] = ()) -> str:
    extra = "".join(f",{lst.name}://127.0.0.1:{p}" for lst, p in listeners)
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": (f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}"
                      f"{extra}"),
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}{extra}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT" + "".join(
            f",{lst.name}:{lst.protocol}" for lst, _ in listeners),
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "auto.create.topics.enable": "false",
        "log.segment.bytes": str(64 * 1024 * 1024),
    }
    props.update(overrides)
    for lst, _ in listeners:
        props.update({f"listener.name.{lst.name.lower()}.{k}": v
                      for k, v in lst.settings.items()})
    return "".join(f"{k}={v}\n" for k, v in props.items())


def java_opts(heap_mb: int = 512) -> list[str]:
    return [f"-Xms{heap_mb // 2}m", f"-Xmx{heap_mb}m", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true"]


@dataclass
class KafkaBroker:
    """A running broker: its address, its directory and its process record."""

    workdir: Path
    bootstrap: str
    record: ProcessRecord
    listeners: Mapping[str, str] = field(default_factory=dict)
    """The address of each listener of `KafkaSettings.listeners`, by name."""

    @property
    def log(self) -> Path:
        return Path(self.record.log)

    def log_tail(self, lines: int = 60) -> str:
        return tail(self.log, lines)

    def generations(self, group: str) -> list[int]:
        """Generations the coordinator stabilized for `group`, read from the broker log."""
        pattern = re.compile(rf"Stabilized group {re.escape(group)} generation (\d+)")
        return [int(m.group(1)) for m in pattern.finditer(self.log.read_text(errors="replace"))]

    def rebalance_lines(self, group: str) -> list[str]:
        """Log lines in which the coordinator prepares a rebalance of `group`."""
        needle = f"Preparing to rebalance group {group} "
        return [ln for ln in self.log.read_text(errors="replace").splitlines() if needle in ln]


def start_kafka(workdir: Path, settings: KafkaSettings | None = None,
                timeout: float = 90.0) -> KafkaBroker:
    """Format KRaft storage under `workdir` and start the broker; return once it serves."""
    settings = settings or KafkaSettings()
    java = require_tool("java")
    libs = build.kafka_libs()
    data = workdir / "data"
    if data.exists() and any(data.iterdir()):
        raise ServerFailed(f"stale Kafka data directory {data}: remove it (staticfleet env down) "
                           "or choose another working directory")
    data.mkdir(parents=True, exist_ok=True)
    picked = free_ports(2 + len(settings.listeners))
    port = settings.port or picked[0]
    cport = settings.controller_port or picked[1]
    for p, what in ((port, "the Kafka listener"), (cport, "the Kafka controller")):
        if port_open(p):
            raise ServerFailed(f"port 127.0.0.1:{p} for {what} is already in use")
    listeners = list(zip(settings.listeners, picked[2:], strict=True))
    props = workdir / "server.properties"
    props.write_text(server_properties(data, port, cport, settings.overrides, listeners))
    log4j = workdir / "log4j2.properties"
    log4j.write_text(LOG4J2)
    classpath = f"{libs}/*"
    base = [java, *java_opts(), f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]
    log = workdir / "broker.log"
    scram = [arg for name, password in sorted(settings.scram_users.items()) for arg in (
        "--add-scram", f"{SCRAM_MECHANISM}=[name={name},password={password}]")]
    fmt = subprocess.run(
        [*base, "kafka.tools.StorageTool", "format", "-t", _cluster_id(base), "-c", str(props),
         *scram],
        capture_output=True, text=True,
    )
    if fmt.returncode != 0:
        raise ServerFailed(f"formatting KRaft storage failed:\n{fmt.stdout}\n{fmt.stderr}")
    env = dict(os.environ)
    _proc, rec = spawn("kafka", [*base, "kafka.Kafka", str(props)], log=log, env=env,
                       cwd=workdir)

    def started() -> bool:
        return ("Kafka Server started" in log.read_text(errors="replace")
                and all(port_open(p) for p in (port, *(p for _, p in listeners))))

    wait_until(started, rec=rec, timeout=timeout, what="serving")
    return KafkaBroker(workdir=workdir, bootstrap=f"127.0.0.1:{port}", record=rec,
                       listeners={lst.name: f"127.0.0.1:{p}" for lst, p in listeners})


def _cluster_id(base: list[str]) -> str:
    out = subprocess.run([*base, "kafka.tools.StorageTool", "random-uuid"],
                         capture_output=True, text=True)
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    if out.returncode != 0 or not lines:
        raise ServerFailed(f"kafka StorageTool random-uuid failed:\n{out.stdout}\n{out.stderr}")
    return lines[-1]
