"""Pod IP addresses of the local node: the lowest free one in the pod range, unique on the machine,
also across local nodes sharing the lock directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from staticfleet_dev.localnode.ids import IpPool, in_pod_range, listening_ips, next_pod_ip

pytestmark = pytest.mark.unit


def test_two_pools_never_share_an_address(tmp_path: Path) -> None:
    a, b = IpPool(tmp_path, listening=set), IpPool(tmp_path, listening=set)
    assert a.acquire("pod-a1") == "127.0.1.2"
    assert b.acquire("pod-b1") == "127.0.1.3"
    assert a.acquire("pod-a2") == "127.0.1.4"
    a.release("127.0.1.2")
    assert b.acquire("pod-b2") == "127.0.1.2"


def test_preferred_address_is_kept_when_free(tmp_path: Path) -> None:
    a, b = IpPool(tmp_path, listening=set), IpPool(tmp_path, listening=set)
    assert a.acquire("p", preferred="127.0.1.9") == "127.0.1.9"
    assert b.acquire("q", preferred="127.0.1.9") == "127.0.1.2"
    assert a.acquire("r", preferred="10.0.0.1") == "127.0.1.3"


def test_addresses_with_listeners_are_skipped(tmp_path: Path) -> None:
    pool = IpPool(tmp_path, listening=lambda: {"127.0.1.2", "127.0.1.4"})
    assert pool.acquire("a", preferred="127.0.1.4") == "127.0.1.3"
    assert pool.acquire("b") == "127.0.1.5"


PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0201007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1
   1: 0401007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2
   2: 0301007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 3
   3: 0100007F:4A38 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4
"""


def test_listening_ips() -> None:
    assert listening_ips(PROC_NET_TCP) == {"127.0.1.2", "127.0.1.4", "127.0.0.1"}


@pytest.mark.parametrize(("used", "ip"), [
    (set(), "127.0.1.2"),
    ({"127.0.1.2", "127.0.1.3"}, "127.0.1.4"),
    ({"127.0.1.3"}, "127.0.1.2"),
    ({f"127.0.1.{i}" for i in range(2, 255)}, "127.0.2.1"),
])
def test_next_pod_ip(used: set[str], ip: str) -> None:
    assert next_pod_ip(used) == ip


def test_next_pod_ip_exhausted() -> None:
    assert next_pod_ip({"127.0.1.2"}, first="127.0.1.2", last="127.0.1.2") is None


@pytest.mark.parametrize(("ip", "inside"), [
    ("127.0.1.2", True), ("127.0.1.1", False), ("127.0.0.1", False), ("127.0.2.0", False),
    ("10.0.0.1", False), (None, False), ("junk", False),
])
def test_in_pod_range(ip: str | None, inside: bool) -> None:
    assert in_pod_range(ip) is inside
