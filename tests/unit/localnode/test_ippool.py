"""Pod IPs are unique on the machine, also across local nodes sharing the lock directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from staticfleet.localenv.localnode import IpPool

pytestmark = pytest.mark.unit


def test_two_pools_never_share_an_address(tmp_path: Path) -> None:
    a, b = IpPool(tmp_path), IpPool(tmp_path)
    assert a.acquire("pod-a1") == "127.0.1.2"
    assert b.acquire("pod-b1") == "127.0.1.3"
    assert a.acquire("pod-a2") == "127.0.1.4"
    a.release("127.0.1.2")
    assert b.acquire("pod-b2") == "127.0.1.2"


def test_preferred_address_is_kept_when_free(tmp_path: Path) -> None:
    a, b = IpPool(tmp_path), IpPool(tmp_path)
    assert a.acquire("p", preferred="127.0.1.9") == "127.0.1.9"
    assert b.acquire("q", preferred="127.0.1.9") == "127.0.1.2"
    assert a.acquire("r", preferred="10.0.0.1") == "127.0.1.3"
