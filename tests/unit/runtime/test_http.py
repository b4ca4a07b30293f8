"""The member's HTTP server (http.py) against clients that are slow or silent: its per-connection
timeout. In process, on a loopback port; the timeout is made short (0.3 s) so that the test
waits for a real socket timeout without waiting long."""

from __future__ import annotations

import logging
import socket
import time
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from consumer_runtime import http
from consumer_runtime.http import serve
from tests.unit.runtime.support import telemetry

pytestmark = pytest.mark.unit
TIMEOUT_S = 0.3


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    s = serve(telemetry(), "127.0.0.1", 0, client_timeout_s=TIMEOUT_S)
    yield s
    s.shutdown()
    s.server_close()


def connect(server: ThreadingHTTPServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10)


def closed_after(sock: socket.socket) -> float:
    """Seconds until the server closes `sock` (a read gives end of file)."""
    began = time.monotonic()
    with sock:
        while sock.recv(4096):
            pass
    return time.monotonic() - began


def get(server: ThreadingHTTPServer, path: str) -> tuple[int, float]:
    began = time.monotonic()
    url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        return int(resp.status), time.monotonic() - began


def test_the_default_timeout_is_a_few_seconds() -> None:
    assert 1.0 <= http.CLIENT_TIMEOUT_S <= 10.0


@pytest.mark.parametrize("sends", [b"", b"GET /status HTTP/1.1\r\nHost: x\r\n",
                                   b"POST /drain HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"],
                         ids=["nothing", "headers never finished", "a body cut short"])
def test_a_silent_client_blocks_no_other_request_and_is_cut_off(
        sends: bytes, server: ThreadingHTTPServer, caplog: pytest.LogCaptureFixture) -> None:
    silent = [connect(server) for _ in range(8)]  # more than a few
    for sock in silent:
        sock.sendall(sends)
    with caplog.at_level(logging.DEBUG, logger="consumer_runtime.http"):
        # Another client is answered at once, while the silent ones hold their connections.
        status, seconds = get(server, "/status")
        assert status == 200 and seconds < TIMEOUT_S
        waited = [closed_after(sock) for sock in silent]
    # Each silent connection is closed by the server after the timeout (the first wait
    # includes the others' start; none lasts for the client's own 10 s).
    assert max(waited) < TIMEOUT_S + 2.0, waited
    # A timeout is a line at debug level, not a traceback.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_client_that_sends_its_request_in_time_is_answered(
        server: ThreadingHTTPServer) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /status HTTP/1.0\r\n")
        time.sleep(TIMEOUT_S / 3)  # slower than a burst, within the timeout
        sock.sendall(b"\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 200 "), answer[:80]


def test_a_burst_of_connections_is_queued_not_retried(server: ThreadingHTTPServer) -> None:
    """The listen backlog holds a burst: with socketserver's 5, the sixth connection's SYN was
    dropped and retried by the kernel a second later."""
    began = time.monotonic()
    burst = [connect(server) for _ in range(16)]
    took = time.monotonic() - began
    for sock in burst:
        sock.close()
    assert took < 0.5, f"16 connections took {took:.2f} s"
