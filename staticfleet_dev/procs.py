"""Start, watch and stop the server processes of the local environment.

Every process is started in its own session, its PID and start time are recorded, and only
recorded processes are ever signalled: a PID that has been reused by another program since
(different start time) is left alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from staticfleet_dev.tools import tail


class ServerFailed(RuntimeError):
    """A server did not come up; the message carries its log tail."""


@dataclass
class ProcessRecord:
    """What is needed to find and stop a process later, even from another Python process."""

    name: str
    pid: int
    start_ticks: int
    log: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> ProcessRecord:
        return cls(name=str(data["name"]), pid=int(str(data["pid"])),
                   start_ticks=int(str(data["start_ticks"])), log=str(data["log"]))


def _start_ticks(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])


def is_alive(rec: ProcessRecord) -> bool:
    """True while the recorded process (same PID and same start time) still runs."""
    ticks = _start_ticks(rec.pid)
    if ticks is None or ticks != rec.start_ticks:
        return False
    try:
        state = Path(f"/proc/{rec.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def spawn(name: str, cmd: list[str], *, log: Path, env: dict[str, str] | None = None,
          cwd: Path | None = None) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Start `cmd` in its own session with output to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=cwd, start_new_session=True,
        )
    ticks = _start_ticks(proc.pid) or 0
    return proc, ProcessRecord(name=name, pid=proc.pid, start_ticks=ticks, log=str(log))


def wait_until(check: Callable[[], bool], *, rec: ProcessRecord, timeout: float,
               what: str) -> None:
    """Poll `check` until true; fail with the log tail if the process dies or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if not is_alive(rec):
            raise ServerFailed(f"{rec.name} exited before {what}; log {rec.log}:\n"
                               f"{tail(Path(rec.log))}")
        time.sleep(0.2)
    raise ServerFailed(f"{rec.name} not {what} after {timeout:.0f}s; log {rec.log}:\n"
                       f"{tail(Path(rec.log))}")


def stop(rec: ProcessRecord, *, grace: float = 10.0) -> None:
    """SIGTERM the recorded process group, wait `grace` seconds, then SIGKILL what is left."""
    if not is_alive(rec):
        return
    try:
        os.killpg(rec.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not is_alive(rec):
            _reap(rec.pid)
            return
        _reap(rec.pid)
        time.sleep(0.1)
    try:
        os.killpg(rec.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    for _ in range(50):
        _reap(rec.pid)
        if not is_alive(rec):
            return
        time.sleep(0.1)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that nothing listens on right now.

    All sockets stay bound until every port is picked: the kernel may hand out a port again as
    soon as its socket closes, and two listeners of one broker on one port stop it at start.
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return ports


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0
