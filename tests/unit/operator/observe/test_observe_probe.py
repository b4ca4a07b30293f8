"""A cluster that accepts no connection is reported at once, naming the address; a list of
addresses is probed side by side under one deadline, and the message counts the silent ones and
names at most a few (only loopback addresses: a port that refuses, a listener that never
accepts)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from staticfleet.decisions import clusters
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


@pytest.fixture
def silent() -> Iterator[list[str]]:
    """16 loopback listeners that never accept: a backlog of one, filled by a connection of
    the test's own, so a connection attempt waits for its timeout (no refusal, no answer)."""
    servers, fillers, addresses = [], [], []
    for _ in range(16):
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        filler = socket.create_connection(server.getsockname(), 1.0)
        servers.append(server)
        fillers.append(filler)
        addresses.append(f"127.0.0.1:{server.getsockname()[1]}")
    yield addresses
    for sock in (*fillers, *servers):
        sock.close()


def test_silent_addresses_are_probed_side_by_side_under_one_deadline(
        silent: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Main tried them one after another, 2 s each (32 s for 16) and quoted every address's
    error; now all are in flight at once and the answer comes at the one deadline."""
    in_flight, most = [0], [0]
    lock = threading.Lock()
    probe = kafkaadmin._probe

    def counted(*args: Any) -> None:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        try:
            probe(*args)
        finally:
            with lock:
                in_flight[0] -= 1

    monkeypatch.setattr(kafkaadmin, "_probe", counted)
    started = time.monotonic()
    why = kafkaadmin.unreachable(",".join(silent))
    took = time.monotonic() - started
    print(f"16 silent addresses probed in {took:.2f} s (deadline {kafkaadmin.PROBE_TIMEOUT_S} s)")
    assert most[0] == 16, "every address in flight at once"
    assert took < 2 * kafkaadmin.PROBE_TIMEOUT_S, "one deadline, not one per address"
    assert why is not None
    assert "none of its 16 addresses answered within 2 s (timed out: 16;" in why, why
    assert sum(a in why for a in silent) == kafkaadmin.PROBE_NAMED, why
    assert why.endswith("and 13 more)"), why


def test_the_message_counts_how_each_failed_and_stays_short(
        silent: list[str], closed: str) -> None:
    refused = []
    for _ in range(4):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        refused.append(f"127.0.0.1:{probe.getsockname()[1]}")
        probe.close()
    why = kafkaadmin.unreachable(",".join([*refused, *silent[:12]]), timeout=0.5)
    assert why is not None
    assert "(timed out: 12, connection refused: 4;" in why, why
    long = [f"{i:02d}{'b' * 250}:9092" for i in range(16)]
    message = kafkaadmin.probe_message(long, dict.fromkeys(long, "timed out"), 2.0)
    assert len(message) < 400 and message.count("bbbb...") == kafkaadmin.PROBE_NAMED, message


def test_one_accepting_address_answers_without_waiting_for_the_silent(
        silent: list[str], listening: str) -> None:
    started = time.monotonic()
    assert kafkaadmin.unreachable(",".join([*silent[:15], listening]), timeout=5.0) is None
    assert time.monotonic() - started < 2.5, "the first acceptance answers"


def test_messages_name_a_cluster_by_its_first_address() -> None:
    """`Admin.label`: a list of 16 addresses is not quoted whole in every message."""
    servers = ",".join(f"kafka-{i}.kafka.svc:9092" for i in range(16))
    assert clusters.label(servers) == "kafka-0.kafka.svc:9092 (and 15 more)"
    assert clusters.label(" k:9092 ") == "k:9092"
    assert len(clusters.label("x" * 300 + ":9092,b:1")) < 90
