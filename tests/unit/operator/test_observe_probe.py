"""A cluster that accepts no connection is reported at once, naming the address."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from staticfleet.observe import kafkaadmin, kafkareads

pytestmark = pytest.mark.unit


@pytest.fixture
def listening() -> Iterator[str]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


@pytest.fixture
def closed() -> str:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    return f"127.0.0.1:{port}"


def test_an_address_that_accepts_is_reachable(listening: str, closed: str) -> None:
    assert kafkaadmin.unreachable(listening) is None
    assert kafkaadmin.unreachable(f"{closed},{listening}") is None, "one accepting is enough"


def test_no_address_accepting_names_each(closed: str) -> None:
    why = kafkaadmin.unreachable(closed)
    assert why is not None and closed in why and "refused" in why.lower()


def test_a_cluster_that_never_answered_fails_fast(closed: str) -> None:
    pool = kafkaadmin.AdminPool()
    admin = pool.get({"bootstrap.servers": closed})
    started = time.monotonic()
    with pytest.raises(kafkaadmin.KafkaUnavailable, match=closed):
        kafkareads.broker_bounds(admin)
    assert time.monotonic() - started < 3, "not the admin client's 10 s timeout"
    pool.close()


def test_a_client_no_pass_asked_for_is_closed(closed: str, listening: str) -> None:
    """A deleted group's cluster: its admin client goes once idle (librdkafka would reconnect
    to it forever); clients still asked for stay."""
    pool = kafkaadmin.AdminPool(idle_s=0.2)
    gone, kept = pool.get({"bootstrap.servers": closed}), pool.get({"bootstrap.servers": listening})
    pool.record(gone.key, "refused")
    time.sleep(0.3)
    again = pool.get({"bootstrap.servers": listening})
    assert set(pool.clients) == {kept.key} and gone.key not in pool.failures
    assert again.client is not kept.client, "idle too: a new client"
    assert pool.get({"bootstrap.servers": listening}).client is again.client
    pool.close()
