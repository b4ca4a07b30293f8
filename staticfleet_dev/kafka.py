"""Apache Kafka 4.x on loopback (KRaft, combined broker+controller nodes): one broker, or a
three-node cluster on which a broker roll can be rehearsed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from staticfleet_dev import build
from staticfleet_dev.certs import KafkaTlsFiles
from staticfleet_dev.procs import (
    ProcessRecord,
    ServerFailed,
    free_ports,
    is_alive,
    port_open,
    spawn,
    stop,
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
    log_requests: bool = False
    """Log every request the broker completes (`kafka.request.logger` at DEBUG: API, client id),
    for benchmarks that count a client's requests."""

    @property
    def log4j2(self) -> str:
        if not self.log_requests:
            return LOG4J2
        return LOG4J2.replace("logger.request.level = WARN", "logger.request.level = DEBUG")

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
                      listeners: Sequence[tuple[Listener, int]] = (), *, node_id: int = 1,
                      voters: str | None = None) -> str:
    """One combined broker+controller node; `voters`: the quorum's `controller.quorum.voters`
    (default: this node alone)."""
    extra = "".join(f",{lst.name}://127.0.0.1:{p}" for lst, p in listeners)
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters or f"{node_id}@127.0.0.1:{controller_port}",
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
    log4j.write_text(settings.log4j2)
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


OFFSETS_TOPIC = "__consumer_offsets"


def java_hash(text: str) -> int:
    """Java's String.hashCode, which the brokers hash a group id with."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition(group_id: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of a group: its leader is the group's coordinator."""
    h = java_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


CLUSTER_SETTINGS = {
    "offsets.topic.replication.factor": "3",
    # Three partitions: groups' coordinators spread over the brokers.
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    # A killed broker is fenced (its partitions' leadership and the coordinators it held move)
    # after this long without a heartbeat to the controller quorum.
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "1000",
}
"""Settings of a three-node cluster beside `TEST_SETTINGS`: everything replicated 3, two
in sync to acknowledge, as a production cluster runs."""


@dataclass
class KafkaNode:
    """One node of a `KafkaCluster`: its id, its client address and how to run it again."""

    node_id: int
    workdir: Path
    bootstrap: str
    command: list[str]
    record: ProcessRecord

    @property
    def log(self) -> Path:
        return self.workdir / "broker.log"


@dataclass
class KafkaCluster:
    """Three combined broker+controller nodes (KRaft quorum of three) on loopback, and the
    operations a broker roll is made of: stop, kill, start one node, elect preferred leaders."""

    workdir: Path
    nodes: dict[int, KafkaNode]
    _admin: Any = None

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    @property
    def node_ids(self) -> list[int]:
        return sorted(self.nodes)

    @property
    def records(self) -> list[ProcessRecord]:
        return [self.nodes[n].record for n in self.node_ids]

    @classmethod
    def attach(cls, workdir: Path, records: Mapping[int, ProcessRecord]) -> KafkaCluster:
        """The cluster `start_kafka_cluster` made under `workdir` (from another process: the
        CLI), with its nodes' process records."""
        nodes = {}
        for n, rec in sorted(records.items()):
            node_dir = workdir / f"node-{n}"
            saved = json.loads((node_dir / "node.json").read_text())
            nodes[n] = KafkaNode(n, node_dir, saved["bootstrap"], list(saved["command"]), rec)
        return cls(workdir, nodes)

    def node(self, node_id: int) -> KafkaNode:
        if node_id not in self.nodes:
            raise ValueError(f"no broker {node_id}: the cluster has brokers {self.node_ids}")
        return self.nodes[node_id]

    def stop(self, node_id: int, grace: float = 60.0) -> None:
        """SIGTERM one broker (a controlled shutdown: it hands its leaderships over first)."""
        stop(self.node(node_id).record, grace=grace)

    def kill(self, node_id: int) -> None:
        """SIGKILL one broker: the controller fences it after `broker.session.timeout.ms`."""
        rec = self.node(node_id).record
        if is_alive(rec):
            os.killpg(rec.pid, signal.SIGKILL)
        stop(rec, grace=5)

    def start(self, node_id: int, timeout: float = 90.0) -> None:
        """Start a stopped broker again on its data and ports; return once it serves."""
        node = self.node(node_id)
        if is_alive(node.record):
            return
        offset = node.log.stat().st_size if node.log.exists() else 0
        _proc, node.record = spawn(f"kafka-{node_id}", node.command, log=node.log,
                                   cwd=node.workdir)
        port = int(node.bootstrap.rsplit(":", 1)[1])

        def started() -> bool:
            with node.log.open("rb") as f:
                f.seek(offset)
                return b"Kafka Server started" in f.read() and port_open(port)

        wait_until(started, rec=node.record, timeout=timeout, what="serving again")
        self.wait_in_sync(timeout)

    def admin(self) -> Any:
        """An admin client of the cluster (kept: a request's future needs its client alive)."""
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def elect_preferred_leaders(self, timeout: float = 30.0) -> None:
        """Move every partition's leadership to its preferred replica (what the brokers'
        periodic leader rebalance does), `__consumer_offsets` included: group coordinators
        move with it."""
        from confluent_kafka import ElectionType, KafkaException

        try:
            self.admin().elect_leaders(ElectionType.PREFERRED, None).result(timeout)
        except KafkaException as exc:  # ELECTION_NOT_NEEDED where the leader is preferred
            if "ELECTION_NOT_NEEDED" not in str(exc):
                raise

    def coordinator(self, group_id: str, timeout: float = 10.0) -> int | None:
        """The node coordinating `group_id` now: the leader of its `__consumer_offsets`
        partition, read from metadata (None: no leader). No request to a coordinator: librdkafka
        aborts a process whose coordinator-bound admin request loses its coordinator
        (confluentinc/librdkafka#4605), which a test that kills coordinators would meet."""
        from confluent_kafka import KafkaException

        try:
            topic = self.admin().list_topics(OFFSETS_TOPIC, timeout=timeout).topics[OFFSETS_TOPIC]
        except KafkaException:
            return None
        partition = topic.partitions.get(offsets_partition(group_id, len(topic.partitions)))
        return partition.leader if partition is not None and partition.leader >= 0 else None

    def wait_in_sync(self, timeout: float = 90.0) -> None:
        """Wait until every replica of every partition is in sync (what a rolling restart waits
        for before the next broker)."""
        deadline = time.monotonic() + timeout
        lagging: list[str] = []
        while time.monotonic() < deadline:
            topics = self.admin().list_topics(timeout=10).topics
            lagging = [f"{name}-{p.id}" for name, t in topics.items()
                       for p in t.partitions.values() if set(p.isrs) != set(p.replicas)]
            if not lagging:
                return
            time.sleep(0.5)
        raise ServerFailed(f"replicas not in sync after {timeout:.0f}s: {lagging[:10]}\n"
                           f"{self.log_tails()}")

    def make_topic(self, name: str, partitions: int) -> str:
        """Create `name` on every node. A node restarted by an earlier test can leave the kept
        client a broker handle destroyed under a request (`_DESTROY_BROKER`, seen in CI): that
        is asked again, and a topic the first try made counts as made."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        transient = {KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
                     KafkaError._ALL_BROKERS_DOWN, KafkaError.NOT_CONTROLLER}
        for attempt in range(3):
            futures = self.admin().create_topics(
                [NewTopic(name, partitions, replication_factor=len(self.nodes))])
            try:
                futures[name].result(30)
                return name
            except KafkaException as exc:
                code = exc.args[0].code()
                if attempt and code == KafkaError.TOPIC_ALREADY_EXISTS:
                    return name
                if code not in transient or attempt == 2:
                    raise
                time.sleep(1.0)
        return name

    def _logs(self) -> str:
        return "".join(n.log.read_text(errors="replace") for n in self.nodes.values()
                       if n.log.exists())

    def generations(self, group: str) -> list[int]:
        """Generations stabilized for `group` by any node (a coordinator move spreads them
        over the logs), without repeats, in order."""
        pattern = re.compile(rf"Stabilized group {re.escape(group)} generation (\d+)")
        return sorted({int(m.group(1)) for m in pattern.finditer(self._logs())})

    def rebalance_lines(self, group: str) -> list[str]:
        needle = f"Preparing to rebalance group {group} "
        return [ln for ln in self._logs().splitlines() if needle in ln]

    def requests(self, since: Mapping[int, int] | None = None) -> list[tuple[str, str]]:
        """(API name, client id) of each request logged since the logs' sizes `since`
        (`log_sizes`), with `KafkaSettings.log_requests`."""
        out = []
        for n, node in self.nodes.items():
            with node.log.open("rb") as f:
                f.seek((since or {}).get(n, 0))
                text = f.read().decode(errors="replace")
            out += request_lines(text)
        return out

    def log_sizes(self) -> dict[int, int]:
        return {n: node.log.stat().st_size for n, node in self.nodes.items()}

    def log_tails(self, lines: int = 30) -> str:
        return "\n".join(f"--- broker {n.node_id} ({n.log}) ---\n{tail(n.log, lines)}"
                         for n in self.nodes.values())

    def shutdown(self) -> None:
        """Stop every node at once. One after another, the last two waited out most of their
        grace for a quorum that had left before them (a 38 s teardown at a test module's end)."""
        with ThreadPoolExecutor(len(self.records)) as pool:
            list(pool.map(partial(stop, grace=30), self.records))


def start_kafka_cluster(workdir: Path, brokers: int = 3,
                        settings: KafkaSettings | None = None,
                        timeout: float = 120.0) -> KafkaCluster:
    """Format and start `brokers` combined nodes with one KRaft quorum; return once all
    serve. `settings.overrides` go over `CLUSTER_SETTINGS` (fixed ports and extra listeners
    are for one broker only)."""
    settings = settings or KafkaSettings.for_tests()
    if settings.port or settings.controller_port or settings.listeners:
        raise ValueError("a cluster picks its own ports and has only its PLAINTEXT listener")
    java = require_tool("java")
    libs = build.kafka_libs()
    ports = free_ports(2 * brokers)
    voters = ",".join(f"{n}@127.0.0.1:{ports[2 * (n - 1) + 1]}" for n in range(1, brokers + 1))
    overrides = {**CLUSTER_SETTINGS, **settings.overrides}
    base = [java, *java_opts(), "-cp", f"{libs}/*"]
    cluster_id = _cluster_id(base)
    nodes: dict[int, KafkaNode] = {}
    for n in range(1, brokers + 1):
        node_dir = workdir / f"node-{n}"
        data = node_dir / "data"
        if data.exists() and any(data.iterdir()):
            raise ServerFailed(f"stale Kafka data directory {data}: remove it "
                               "(staticfleet env down) or choose another working directory")
        data.mkdir(parents=True, exist_ok=True)
        port, cport = ports[2 * (n - 1)], ports[2 * (n - 1) + 1]
        props = node_dir / "server.properties"
        props.write_text(server_properties(data, port, cport, overrides, node_id=n,
                                           voters=voters))
        log4j = node_dir / "log4j2.properties"
        log4j.write_text(settings.log4j2)
        command = [java, *java_opts(), f"-Dlog4j2.configurationFile={log4j}", "-cp",
                   f"{libs}/*", "kafka.Kafka", str(props)]
        fmt = subprocess.run([*base, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                              "-c", str(props)], capture_output=True, text=True)
        if fmt.returncode != 0:
            raise ServerFailed(f"formatting KRaft storage of broker {n} failed:\n"
                               f"{fmt.stdout}\n{fmt.stderr}")
        (node_dir / "node.json").write_text(json.dumps(
            {"node_id": n, "bootstrap": f"127.0.0.1:{port}", "command": command}))
        _proc, rec = spawn(f"kafka-{n}", command, log=node_dir / "broker.log", cwd=node_dir)
        nodes[n] = KafkaNode(n, node_dir, f"127.0.0.1:{port}", command, rec)
    for node in nodes.values():
        wait_until(partial(_serving, node), rec=node.record, timeout=timeout, what="serving")
    return KafkaCluster(workdir, nodes)


_REQUEST_API = re.compile(r'"requestApiKeyName":"(\w+)"')
_REQUEST_CLIENT = re.compile(r'"clientId":"([^"]*)"')


def request_lines(text: str) -> list[tuple[str, str]]:
    """(API name, client id) of each `Completed request` line of a broker log."""
    out = []
    for line in text.splitlines():
        if "Completed request" not in line:
            continue
        api, client = _REQUEST_API.search(line), _REQUEST_CLIENT.search(line)
        if api and client:
            out.append((api.group(1), client.group(1)))
    return out


def _serving(node: KafkaNode) -> bool:
    return ("Kafka Server started" in node.log.read_text(errors="replace")
            and port_open(int(node.bootstrap.rsplit(":", 1)[1])))
