"""Ports picked for one server's listeners never repeat (CI stopped a broker with two listeners
on one port when the kernel handed a just-closed port out again)."""
import socket

import pytest

from staticfleet_dev.procs import free_ports


def test_free_ports_are_distinct_and_bindable():
    for _ in range(200):
        ports = free_ports(6)
        assert len(set(ports)) == 6
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))


def test_group_coordinator_partition_hashes_as_java_does() -> None:
    from staticfleet_dev.kafka import java_hash, offsets_partition

    assert java_hash("") == 0
    assert java_hash("hello") == 99162322
    assert java_hash("polygenelubricants") == -(1 << 31)
    assert offsets_partition("polygenelubricants", 3) == 0, "Utils.abs(MIN_VALUE) is 0"
    assert offsets_partition("hello", 50) == 99162322 % 50


def test_a_cluster_id_is_what_kafka_storage_random_uuid_prints(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """16 bytes in URL-safe base64 without padding; never the zero or the reserved UUID, nor
    one whose text starts with a dash (kafka-storage would read it as an option)."""
    import base64
    import os

    from staticfleet_dev import kafka

    draws = iter([bytes(16), (1).to_bytes(16, "big"), b"\xfb" + bytes(15), b"\x01" * 16])
    monkeypatch.setattr(os, "urandom", lambda n: next(draws))
    cluster_id = kafka._cluster_id()
    assert cluster_id == base64.urlsafe_b64encode(b"\x01" * 16).rstrip(b"=").decode()
    assert len(cluster_id) == 22 and not cluster_id.startswith("-")
