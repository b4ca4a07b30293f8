"""The operator's malloc settings (glibc): this machine's C library is glibc."""

from __future__ import annotations

import subprocess
import sys

import pytest

from staticfleet import allocator

pytestmark = pytest.mark.unit


def test_the_arena_limit_is_left_to_a_malloc_arena_max_the_process_was_given() -> None:
    assert allocator.limit_arenas({"MALLOC_ARENA_MAX": "4"}) is False


def test_threads_share_two_arenas_once_limited() -> None:
    """In a fresh process: eight threads each allocating while the others hold their arenas
    make glibc open arenas of their own, at most two once limited (malloc_stats' count)."""
    probe = """
import ctypes, sys, threading
from staticfleet import allocator
if sys.argv[1] == "limit":
    assert allocator.limit_arenas({})
libc = ctypes.CDLL(None)
gate = threading.Barrier(8)
def work():
    gate.wait()
    keep = [bytearray(4096) for _ in range(2000)]
    gate.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc.malloc_stats()
"""
    def arenas(mode: str) -> int:
        done = subprocess.run([sys.executable, "-c", probe, mode], capture_output=True,
                              text=True, check=True, env={"PYTHONPATH": ":".join(sys.path)})
        return done.stderr.count("Arena ")

    assert arenas("limit") <= allocator.ARENAS < arenas("default")


def test_trim_gives_freed_pages_back() -> None:
    held = [bytearray(4096) for _ in range(20000)]  # 80 MiB from malloc, then freed
    keep = held[::1000]
    del held
    assert allocator.trim(), "malloc_trim released nothing after 80 MiB were freed"
    assert len(keep) == 20
