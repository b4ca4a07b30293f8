"""Issue 46 item 1: a member's `/status` cannot hold the operator. Each exchange with a member has
a wall-clock deadline and a body cap (`observe.memberhttp`), a group's reads take at most a fair
share of the shared workers (`observe.memberreads`), and a slow answer alone never replaces a
member (`rollout.warm`) but is said (`members.slow`).

The members here are real HTTP servers on loopback addresses of this machine (127.0.0.x, outside
the local node's pod range; one port for all of them, as pods share the member port), written to
misbehave the way a bug in a team's image does: one byte every half second, a body of 100 MB."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from staticfleet import apply, service
from staticfleet.decisions.members.slow import NOT_READ, slow_member_events, slow_members
from staticfleet.decisions.snapshot import Snapshot
from staticfleet.memory import Memory
from staticfleet.observe import memberhttp, memberreads

pytestmark = pytest.mark.unit

STATUS = b'{"memberId": "m-1", "state": "serving"}'


class Handler(socketserver.BaseRequestHandler):
    """What the member at this address answers: `kind` of its server."""

    server: Member

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(30)
        try:
            sock.recv(65536)
            kind = self.server.kind
            if kind == "fast":
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(STATUS), STATUS))
            elif kind == "trickle":  # a large Content-Length, then one byte every half second
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
                for _ in range(1000):
                    if self.server.stopping.is_set():
                        return
                    sock.sendall(b" ")
                    time.sleep(0.5)
            elif kind == "huge":  # 100 MB, fast, and no Content-Length to warn of it
                sock.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"pad\": \"")
                chunk = b"x" * (1 << 20)
                for _ in range(100):
                    sock.sendall(chunk)
                    self.server.sent += len(chunk)
            elif kind == "trickle-headers":  # one header byte every half second
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 1000:
                    if self.server.stopping.is_set():
                        return
                    sock.sendall(bytes([byte]))
                    time.sleep(0.5)
        except OSError:
            return


class Member(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, ip: str, port: int, kind: str) -> None:
        self.kind, self.sent, self.stopping = kind, 0, threading.Event()
        super().__init__((ip, port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()


Start = Callable[[str, str], "Member"]


@pytest.fixture
def members(monkeypatch: pytest.MonkeyPatch) -> Iterator[Start]:
    """Starts member servers at 127.0.0.x (ip, kind), all on one free port: the operator's
    member port here."""
    probe = socket.socket()
    probe.bind(("127.0.0.151", 0))
    port = probe.getsockname()[1]
    probe.close()
    monkeypatch.setattr(memberhttp, "MEMBER_PORT", port)
    servers: list[Member] = []

    def start(ip: str, kind: str) -> Member:
        servers.append(Member(ip, port, kind))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.mark.parametrize("kind", ["trickle", "trickle-headers"])
def test_a_member_that_sends_one_byte_every_half_second_is_cut_at_the_deadline(
        members: Start, kind: str) -> None:
    """On main the socket timeout (2 s a read) never fired: each byte came in time, and the read
    was still blocked after minutes (the pass's `fut.result()` had no bound either)."""
    members("127.0.0.151", kind)
    began = time.monotonic()
    read = memberhttp.read_status("127.0.0.151", memberhttp.MEMBER_PORT, deadline_s=1.0)
    took = time.monotonic() - began
    assert read.status is None and read.slow is not None and "within 1 s" in read.slow, read
    assert took < 2.5, f"the exchange took {took:.1f} s past its deadline of 1 s"
    assert memberhttp.read_member_status("127.0.0.151", memberhttp.MEMBER_PORT, 1.0) is None


def test_a_body_of_100_mb_is_refused_after_the_cap_not_read_whole(members: Start) -> None:
    huge = members("127.0.0.152", "huge")
    read = memberhttp.read_status("127.0.0.152", memberhttp.MEMBER_PORT, deadline_s=10.0)
    assert read.status is None and read.slow is not None and "bytes" in read.slow, read
    time.sleep(0.2)
    assert huge.sent < 100 << 20, "the operator read the whole body"


def test_a_declared_length_over_the_cap_is_refused_before_the_body() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.153", 0))
    sock.listen()

    def answer() -> None:
        conn, _ = sock.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n{")
        time.sleep(3)
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    began = time.monotonic()
    read = memberhttp.read_status("127.0.0.153", sock.getsockname()[1], deadline_s=2.0)
    assert read.slow is not None and "100000000 bytes" in read.slow, read
    assert time.monotonic() - began < 1.0, "refused on the header, not at the deadline"
    sock.close()


def test_a_refusals_body_is_quoted_to_its_cap() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.154", 0))
    sock.listen()

    def answer() -> None:
        conn, _ = sock.accept()
        conn.recv(65536)
        body = b"no " * 100_000
        conn.sendall(b"HTTP/1.1 409 Conflict\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    refused = memberhttp.ask_member("127.0.0.154", sock.getsockname()[1], "rejoin", ("t",))
    assert refused is not None and refused.status == 409
    assert len(refused.reason) <= memberhttp.REASON_CAP + 20, len(refused.reason)
    sock.close()


def test_eight_slow_members_of_one_group_do_not_delay_another_groups_reads(
        members: Start) -> None:
    """The issue's finding: eight members answering one byte every half second held the pool
    of eight, and every other group's pass waited behind them. Here the hostile group's pass
    starts first; the normal group's reads are answered at once, and the hostile pass ends
    within its budget with its members slow, not blocked."""
    hostile = [members(f"127.0.0.{160 + i}", "trickle") for i in range(8)]
    normal = [members(f"127.0.0.{180 + i}", "fast") for i in range(2)]
    clients, memory = service.Clients(kube=cast(apply.Kube, object())), Memory()

    def pods(servers: list[Member], group: str) -> list[dict[str, Any]]:
        return [{"metadata": {"uid": f"{group}-{i}"},
                 "status": {"podIP": s.server_address[0]}} for i, s in enumerate(servers)]

    hostile_result: list[Any] = []
    began = time.monotonic()
    passing = threading.Thread(target=lambda: hostile_result.append(service._member_statuses(
        pods(hostile, "bad"), clients, memory, "bad-group")))
    passing.start()
    time.sleep(0.3)  # the hostile reads are under way
    normal_began = time.monotonic()
    statuses, slow = service._member_statuses(pods(normal, "ok"), clients, memory, "ok-group")
    normal_took = time.monotonic() - normal_began
    assert set(statuses) == {"ok-0", "ok-1"} and not slow
    assert normal_took < 1.0, f"the normal group's reads waited {normal_took:.1f} s"
    passing.join(memberreads.BUDGET_S + 3)
    assert not passing.is_alive(), "the hostile group's pass had no bound"
    assert time.monotonic() - began <= memberreads.BUDGET_S + 2.5
    bad_statuses, bad_slow = hostile_result[0]
    assert not bad_statuses and set(bad_slow) == {f"bad-{i}" for i in range(8)}, bad_slow
    assert any(why == NOT_READ for why in bad_slow.values()), "reads beyond its share waited"
    clients.member_reads.close()


def test_reads_take_turns_between_groups_within_a_share() -> None:
    """The scheduler alone (a read that records itself and, for group a, blocks until told):
    one group never has more than its share of the workers at once, and another group's read
    runs while the first group's are all still under way (no timing: a's reads wait on a gate)."""
    lock, running, most = threading.Lock(), dict[str, int](), dict[str, int]()
    gate = threading.Event()

    def read(ip: str) -> memberhttp.StatusRead:
        group = ip.split("/")[0]
        with lock:
            running[group] = running.get(group, 0) + 1
            most[group] = max(most.get(group, 0), running[group])
        if group == "a":
            gate.wait(10)
        with lock:
            running[group] -= 1
        return memberhttp.StatusRead({"ok": True})

    reads = memberreads.MemberReads(read, workers=4, per_group=2)
    a = threading.Thread(target=reads.read, args=("a", {f"a{i}": f"a/{i}" for i in range(10)}))
    a.start()
    deadline = time.monotonic() + 5
    while running.get("a") != 2 and time.monotonic() < deadline:  # a's share under way
        time.sleep(0.01)
    got = reads.read("b", {"b0": "b/0"}, budget_s=5.0)
    assert got["b0"][0].status == {"ok": True}, "b waited behind a's queue"
    with lock:
        assert running.get("a") == 2 and most["a"] == 2, (running, most)
    gate.set()
    a.join()
    assert most["a"] == 2, most
    reads.close()


def test_slow_members_are_named_in_one_bounded_warning() -> None:
    pods = tuple({"metadata": {"uid": f"u{i}", "name": f"orders-{i}"}} for i in range(8))
    snap = Snapshot(body={"metadata": {"name": "orders", "namespace": "ns"}},
                    now=datetime.now(UTC), pods=pods,
                    slow_members={**{f"u{i}": "no whole answer within 2 s" for i in range(7)},
                                  "u7": NOT_READ})
    assert set(slow_members(snap)) == {f"orders-{i}" for i in range(7)}, "not-read is not slow"
    (event,) = slow_member_events(snap)
    assert event.type == "Warning" and event.reason == "MemberStatusSlow"
    assert "orders-0" in event.message and "and 4 more" in event.message
    assert "orders-6" not in event.message and len(event.message) < 1024


def test_the_slow_warning_is_posted_once_per_change() -> None:
    notices = Memory().notices
    assert notices.due("uid", "MemberStatusSlow", "a")
    assert not notices.due("uid", "MemberStatusSlow", "a")
    assert notices.due("uid", "MemberStatusSlow", "a, b")
    assert notices.due("other", "MemberStatusSlow", "a, b")
