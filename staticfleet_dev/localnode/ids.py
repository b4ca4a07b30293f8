"""Time stamps, node labels, pod keys and pod IP addresses of the local node. All pure but
`IpPool`, which holds the loopback addresses it hands out machine-wide as locked files and skips
those something listens on (/proc/net/tcp)."""

from __future__ import annotations

import datetime as dt
import fcntl
import ipaddress
import os
import platform
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

HOST_IP = "127.0.0.1"
FIRST_POD_IP = "127.0.1.2"
LAST_POD_IP = "127.0.255.254"


def rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_labels(node_name: str) -> dict[str, str]:
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(),
                                                                       platform.machine())
    return {"kubernetes.io/hostname": node_name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": arch, "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": arch}


def next_pod_ip(used: set[str], first: str = FIRST_POD_IP, last: str = LAST_POD_IP) -> str | None:
    """The lowest free loopback address in [first, last], skipping .0 and .255."""
    lo, hi = int(ipaddress.IPv4Address(first)), int(ipaddress.IPv4Address(last))
    for n in range(lo, hi + 1):
        if n & 0xFF in (0, 255):
            continue
        ip = str(ipaddress.IPv4Address(n))
        if ip not in used:
            return ip
    return None


def listening_ips(proc_net_tcp: str) -> set[str]:
    """IPv4 addresses with a listening TCP socket, from the text of /proc/net/tcp."""
    found = set()
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != "0A":
            continue
        addr = fields[1].split(":")[0]
        try:
            found.add(str(ipaddress.IPv4Address(bytes.fromhex(addr)[::-1])))
        except ValueError:
            continue
    return found


def _listening_now() -> set[str]:
    try:
        return listening_ips(Path("/proc/net/tcp").read_text())
    except OSError:
        return set()


class IpPool:
    """Pod IPs, unique on the machine: each address in use is held as an flock on
    `<lock_dir>/<ip>.lock`, so two local nodes (two environments, a test session next to a
    demo) never hand out the same address. The kernel drops the locks when a node exits.
    Addresses something already listens on (a leftover process) are skipped too."""

    def __init__(self, lock_dir: Path,
                 listening: Callable[[], set[str]] = _listening_now) -> None:
        self.lock_dir = lock_dir
        self.listening = listening
        self.held: dict[str, int] = {}  # ip -> fd of its lock file

    def _try_lock(self, ip: str, owner: str) -> bool:
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_dir / f"{ip}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {owner}\n".encode())
        self.held[ip] = fd
        return True

    def acquire(self, owner: str, preferred: str | None = None) -> str | None:
        busy = self.listening()
        if in_pod_range(preferred) and preferred not in self.held and preferred is not None \
                and preferred not in busy and self._try_lock(preferred, owner):
            return preferred
        tried = set(self.held) | busy
        while (ip := next_pod_ip(tried)) is not None:
            if self._try_lock(ip, owner):
                return ip
            tried.add(ip)
        return None

    def release(self, ip: str) -> None:
        fd = self.held.pop(ip, None)
        if fd is not None:
            os.close(fd)


def in_pod_range(ip: str | None) -> bool:
    try:
        n = int(ipaddress.IPv4Address(ip or ""))
    except ValueError:
        return False
    return (int(ipaddress.IPv4Address(FIRST_POD_IP)) <= n <= int(ipaddress.IPv4Address(LAST_POD_IP))
            and n & 0xFF not in (0, 255))


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def default_ip_lock_dir() -> Path:
    return Path(tempfile.gettempdir()) / "staticfleet-localnode-ips"
