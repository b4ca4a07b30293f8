"""Session fixtures: the real servers, started by the project's own tooling.

A test that needs a server gets it from here. When a server cannot start, the fixture fails with
the server's log tail; nothing is ever skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from staticfleet.localenv.kafka import KafkaBroker, KafkaSettings, start_kafka
from staticfleet.localenv.procs import ServerFailed, stop


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One real Kafka 4.x broker for the test session, group minimums lowered for speed."""
    workdir = tmp_path_factory.mktemp("kafka")
    try:
        broker = start_kafka(workdir, KafkaSettings.for_tests())
    except ServerFailed as exc:
        pytest.fail(f"the Kafka broker did not start: {exc}", pytrace=False)
    yield broker
    stop(broker.record)


@pytest.fixture(scope="session")
def kafka_admin(kafka: KafkaBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka.bootstrap})


def unique(prefix: str) -> str:
    """A name no other test uses: topics, groups and namespaces are random per test."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


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


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep
