"""Session fixtures: the real servers, started by the project's own tooling.

A test that needs a server gets it from here. When a server cannot start, the fixture fails with
the server's log tail; nothing is ever skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from staticfleet.decisions.settings import MEMBER_INGRESS_FROM_ENV
from staticfleet_dev import environment
from staticfleet_dev.kafka import KafkaBroker, KafkaCluster, KafkaSettings, start_kafka_cluster
from staticfleet_dev.procs import ProcessRecord, ServerFailed, stop
from staticfleet_dev.spark_connect import ConnectServer, start_connect_server
from staticfleet_dev.testkit.kube import create_namespace, install_crds, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.secured import SecuredKafka
from staticfleet_dev.testkit.secured import secured_kafka as secured_kafka_broker
from staticfleet_dev.tools import tail
from tests import lanes
from tests.support import MEMBER_INGRESS_FROM, unique


@pytest.fixture(scope="session")
def local_env() -> Iterator[environment.LocalEnv]:
    """Kafka and the Kubernetes control plane for the whole session, registered so that
    `staticfleet env down --all` (or the next session) cleans up after a crashed run."""
    environment.reap_orphans("pytest-")
    name = f"pytest-{os.getpid()}"
    try:
        env = environment.up(name, kafka_settings=KafkaSettings.for_tests(), with_node=False)
    except ServerFailed as exc:
        pytest.fail(f"the local environment did not start: {exc}", pytrace=False)
    yield env
    environment.down(name)


@pytest.fixture(scope="session")
def kafka(local_env: environment.LocalEnv) -> KafkaBroker:
    """The real Kafka 4.x broker, group minimums lowered for speed."""
    rec = local_env.record("kafka")
    assert rec is not None
    return KafkaBroker(workdir=local_env.root / "kafka", bootstrap=local_env.bootstrap, record=rec)


@pytest.fixture(scope="session")
def kubeconfig(local_env: environment.LocalEnv) -> Path:
    """Admin kubeconfig of the real API server (RBAC on)."""
    return local_env.kubeconfig


@pytest.fixture(scope="session")
def local_node(local_env: environment.LocalEnv) -> Iterator[ProcessRecord]:
    """The local node: binds pods and runs them as processes."""
    try:
        rec = environment.start_local_node(local_env)
    except ServerFailed as exc:
        pytest.fail(f"the local node did not start: {exc}\n{local_env.log_tails()}",
                    pytrace=False)
    local_env.records.append(rec)
    environment.save(local_env)
    yield rec
    stop(rec, grace=30)


@pytest.fixture(scope="module")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    """A second broker for the module that asks (one per tier: it stops once that module's
    tests are done instead of loading the machine until the session ends), with four secured
    listeners (SSL, mutual TLS, SASL_SSL/SCRAM-SHA-512, SASL_SSL/OAUTHBEARER;
    `KafkaSettings.with_secured_listeners`) and the token endpoint of the OAUTHBEARER one.

    Sharing it is honest: a listener authenticates each connection by itself, and a client
    given one listener's address is only ever told that listener's address back (each listener
    advertises its own), so a test on one listener cannot pass through another. Tests isolate
    by topic and group names, and each grants its topic and group to its principal alone (ACLs),
    so a listener that authenticated the wrong principal fails its test. The session broker
    stays as it is (PLAINTEXT, no authorizer) for every other test."""
    try:
        with secured_kafka_broker(tmp_path_factory.mktemp("secured-kafka")) as broker:
            yield broker
    except ServerFailed as exc:
        pytest.fail(f"the secured broker did not start: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A three-broker cluster for the worker (lane) whose modules ask, made once: the modules
    that kill and restart brokers (the e2e broker failover and ledger walk, the integration
    cluster tests) share it, where each started its own. Everything replicated 3,
    min.insync.replicas 2, beside the session's single broker. Tests may stop, kill and
    restart its brokers; each leaves all three running (`KafkaCluster.start` is a no-op on a
    running one), and isolates by its own topic and group names."""
    with _three_brokers(tmp_path_factory, KafkaSettings.for_tests()) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def logged_kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A three-broker cluster like `kafka_cluster` whose brokers log every request they
    complete (`KafkaSettings.log_requests`: API and client id), for the tests that count a
    client's requests (`KafkaCluster.requests`). Not `kafka_cluster` itself: every consumer's
    fetches in that log would lengthen the log scans of its tests."""
    settings = replace(KafkaSettings.for_tests(), log_requests=True)
    with _three_brokers(tmp_path_factory, settings) as cluster:
        yield cluster


@contextlib.contextmanager
def _three_brokers(tmp_path_factory: pytest.TempPathFactory,
                   settings: KafkaSettings) -> Iterator[KafkaCluster]:
    root = tmp_path_factory.mktemp("kafka-cluster")
    try:
        cluster = start_kafka_cluster(root, settings=settings)
    except ServerFailed as exc:
        pytest.fail(f"the three-broker cluster did not start: {exc}", pytrace=False)
    # Registered like the session's environment, so a crashed run's brokers are stopped by
    # the next one (`environment.reap_orphans`).
    name = f"pytest-{os.getpid()}-cluster"
    environment.save(environment.LocalEnv(
        name=name, root=root, bootstrap=cluster.bootstrap, kubeconfig=root / "none",
        server="", owner_pid=os.getpid(), records=cluster.records, brokers=3))
    try:
        yield cluster
    finally:
        cluster.discard()  # its data is the module's: nothing to shut down gracefully
        environment.down(name)


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """One Spark Connect server for the session (started by the first test that asks).

    The e2e tests whose subject is the operator's rules (rollout gates, crashes, scale, security,
    brokers failing) run their members' Spark through it: each member is then a Python process
    with a Connect client instead of a JVM of its own, which on two cores took 30-100 s to start
    and warm up and made those tests slow. Sharing it is honest for them: every member still
    consumes with confluent-kafka, runs the transform as a Spark job and commits after the job
    returned; Connect sessions are per client, so no member sees another's data. The members'
    own local-Spark life (a standby warming its JVM, a JVM dying with its member) is the subject
    of the demo's e2e (a warm rollout of three local-Spark members) and of the runtime's
    integration tests, which keep local Spark."""
    try:
        server = start_connect_server(tmp_path_factory.mktemp("spark-connect"))
    except AssertionError as exc:
        pytest.fail(f"the Spark Connect server did not start: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kafka_admin(kafka: KafkaBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka.bootstrap})


@pytest.fixture(scope="session")
def crds(kubeconfig: Path) -> None:
    """The CRDs installed the way users install them: kubectl apply --server-side -f crds/."""
    install_crds(kubeconfig)


@pytest.fixture(scope="session")
def operator(local_env: environment.LocalEnv, crds: None, local_node: ProcessRecord,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The operator as a real process (`staticfleet operator run`), one for the session: with
    the NetworkPolicy sources the chart would give it (`MEMBER_INGRESS_FROM`), and allowed the
    test-only annotations that some tests set (the chart never allows them). Its passes come
    every 5 s while a group is busy, and it reads a Secret again after 5 s (the defaults: 10 and
    60 s): a test that deletes a Secret sees it missing, or made again, within a pass or two."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc = OperatorProcess(kubeconfig=local_env.kubeconfig, log=log,
                           extra_env={"STATICFLEET_RESYNC_SECONDS": "5",
                                      "STATICFLEET_SECRET_TTL_SECONDS": "5",
                                      MEMBER_INGRESS_FROM_ENV: json.dumps(MEMBER_INGRESS_FROM)},
                           allow_testing_annotations=True)
    try:
        proc.start()
    except ServerFailed as exc:
        pytest.fail(str(exc), pytrace=False)
    yield proc
    proc.stop()


@pytest.fixture
def no_admin_operator(request: pytest.FixtureRequest) -> Iterator[None]:
    """Stop the session's admin operator if another module started it; start it again after
    (for the tests whose own operators must be the only ones)."""
    active: OperatorProcess | None = None
    for fixturedef in request._fixturemanager.getfixturedefs("operator", request.node) or ():
        cached = fixturedef.cached_result
        if cached is not None and isinstance(cached[0], OperatorProcess):
            active = cached[0]
    if active is not None:
        active.stop()
    yield
    if active is not None:
        active.start()


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kubeconfig: Path,
              local_env: environment.LocalEnv) -> Iterator[str]:
    """A fresh namespace per test; on failure print Events, the operator log and pod logs."""
    name = unique("t")
    create_namespace(kubeconfig, name)
    yield name
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        events = kubectl(kubeconfig, "-n", name, "get", "events", "--sort-by=.lastTimestamp",
                         check=False).stdout
        print(f"--- events in {name} ---\n{events[-6000:]}")
        op = request.node.funcargs.get("operator")
        if isinstance(op, OperatorProcess):
            print(f"--- operator log ---\n{op.log_tail(120)}")
        for log in sorted(local_env.pod_log_dir.glob(f"{name}_*.log")):
            print(f"--- {log.name} ---\n{tail(log, 40)}")
    kubectl(kubeconfig, "delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def make_topic(kafka: KafkaBroker, kafka_admin: AdminClient) -> Callable[..., str]:
    """Create a fresh topic with `partitions` partitions and return its name."""

    def create(prefix: str = "t", partitions: int = 6) -> str:
        name = unique(prefix)
        futures = kafka_admin.create_topics([NewTopic(name, partitions, 1)])
        for fut in futures.values():
            fut.result(timeout=30)
        return name

    return create


def broker_log_tail(kafka: KafkaBroker) -> str:
    return kafka.log_tail(80)


@pytest.fixture
def dump_broker_log_on_failure(
    request: pytest.FixtureRequest, kafka: KafkaBroker
) -> Iterator[None]:
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"--- broker log tail ({Path(kafka.record.log)}) ---\n{broker_log_tail(kafka)}")


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        lanes.make_run_dir()  # before the workers start: they inherit it


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test carries the marker of its tier (its directory): unit, integration or e2e.
    The modules go longest first (tests/lanes.py: the next free worker takes the next one),
    and the workers tell the scheduler which of them are exclusive."""
    for item in items:
        tier = _tier(item.nodeid)
        if tier in ("unit", "integration", "e2e") and not item.get_closest_marker(tier):
            item.add_marker(getattr(pytest.mark, tier))
    order = {m: i for i, m in enumerate(lanes.longest_first(
        (item.nodeid for item in items), lanes.durations()))}
    items.sort(key=lambda item: order[lanes.module_of(item.nodeid)])
    lanes.tell_exclusive(lanes.module_of(item.nodeid) for item in items
                         if item.get_closest_marker("exclusive"))


def _tier(nodeid: str) -> str:
    """The tier of a test id (`tests/<tier>/...`)."""
    parts = nodeid.split("/", 2)
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else ""


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` (`make test`), modules longest first, exclusive modules apart
    (tests/lanes.py). pytest-xdist's own `loadgroup` cannot say "not beside": it pins a group
    to one worker, and it renames test ids, which pytest 9 derives and no longer lets a plugin
    set."""
    if config.getvalue("dist") != "loadfile":
        return None
    return lanes.scheduler(config, log)


@pytest.fixture(scope="module", autouse=True)
def exclusive_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module marked `exclusive` runs with no other exclusive module on any worker."""
    if request.node.get_closest_marker("exclusive") is None:
        yield
        return
    with lanes.exclusive(request.node.nodeid):
        yield


TIER_SECONDS: dict[str, dict[str, float]] = {}
"""Per tier (unit, integration, e2e): the seconds of each test, setup + call + teardown, by
test id (with pytest-xdist the workers' reports arrive interleaved)."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == "exclusive_wait_s":
            WAITED[lanes.module_of(report.nodeid)] = float(value)
    tier = next((t for t in ("unit", "integration", "e2e") if t in report.keywords), "other")
    seconds = TIER_SECONDS.setdefault(tier, {})
    seconds[report.nodeid] = seconds.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """What each tier cost in this run (docs/benchmarks.md's CI table is read from this line): the
    tests' own seconds summed, which with pytest-xdist is more than the wall time."""
    if not TIER_SECONDS:
        return
    parts = [f"{tier} {sum(s.values()) / 60:.1f} min ({len(s)} tests, slowest "
             f"{max(s.values()):.0f} s)"
             for tier, s in sorted(TIER_SECONDS.items(), key=lambda kv: -sum(kv[1].values()))
             if s]
    workers = getattr(terminalreporter.config.option, "numprocesses", None)
    over = f" (summed over {workers} workers)" if workers else ""
    terminalreporter.write_sep("=", f"time per tier{over}: " + "; ".join(parts))
    waited = [w for w in WAITED.values() if w > 0]
    if WAITED:
        terminalreporter.write_line(
            f"exclusive modules: {len(WAITED)}, waited for one another "
            f"{sum(waited):.0f} s in all (longest {max(waited, default=0):.0f} s)")


WAITED: dict[str, float] = {}
"""Seconds each exclusive module waited for the lock, as the workers reported them."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    """Hand a module's wait for the exclusive lock to the controller with its first test's
    setup report (a worker's `user_properties` reach `pytest_runtest_logreport` there)."""
    result = yield
    module = lanes.module_of(item.nodeid)
    waits = [s for m, s in lanes.WAITS if m == module]
    if waits and not any(k == "exclusive_wait_s" for k, _ in item.user_properties):
        item.user_properties.append(("exclusive_wait_s", waits[-1]))
    return result


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


@pytest.fixture(scope="session")
def prometheus(operator: OperatorProcess, kubeconfig: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Prometheus scraping the session operator and every member pod every 2 s and
    evaluating the shipped rule file (charts/staticfleet/rules/staticfleet-alerts.yaml) as it is."""
    from staticfleet_dev.prometheus import ALERT_RULES, Prometheus, scrape_config

    prom = Prometheus(workdir=tmp_path_factory.mktemp("prometheus"), config=scrape_config(
        operator_target=f"127.0.0.1:{operator.metrics_port}", kubeconfig=kubeconfig,
        rule_files=[ALERT_RULES]))
    try:
        prom.start()
    except AssertionError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield prom
    prom.stop()
