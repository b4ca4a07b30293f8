"""Ports picked for one server's listeners never repeat (CI stopped a broker with two listeners
on one port when the kernel handed a just-closed port out again)."""
import socket

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
