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
