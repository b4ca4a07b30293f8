"""Waiting until something is true, and watching something in the background while acting."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Self


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0,
             interval: float = 0.5, describe: Callable[[], Any] | None = None) -> Any:
    """Call `check` every `interval` seconds until it returns something truthy, and return that.
    `check` runs at least once. After `timeout` seconds fail naming `what`, the last value
    `check` returned (left out when it was a bare None or False) and what `describe()` says
    then. An exception of `check` ends the wait at once."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    seen = "" if last is None or last is False else f"; last: {last!r}"
    context = f"\n{describe()}" if describe is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{seen}{context}")


def wait_unchanged(what: str, read: Callable[[], Any], seconds: float, timeout: float,
                   interval: float = 1.0, key: Callable[[Any], Any] = lambda value: value,
                   describe: Callable[[Any, Any], Any] | None = None) -> Any:
    """Call `read` every `interval` seconds until `key` of what it returns has stayed the same
    for `seconds`, and return the last value read. A change starts the count again from the
    read that saw it, so the quiet stretch is counted from the last change, not from the next
    whole window after it; the claim is the same: the reads at both ends of `seconds` and every
    one between agree. After `timeout` fail as `wait_for` does, with `describe(before, after)`
    of the last change seen (the two values read on either side of it)."""
    first = read()
    state = {"since": time.monotonic(), "last": first, "before": first}

    def quiet() -> bool:
        value = read()
        if key(value) != key(state["last"]):
            state.update(since=time.monotonic(), before=state["last"])
        state["last"] = value
        return time.monotonic() - state["since"] >= seconds

    wait_for(what, quiet, timeout, interval,
             describe=None if describe is None else lambda: describe(state["before"],
                                                                     state["last"]))
    return state["last"]


class Poller:
    """Calls `poll()` every `interval` seconds in a daemon thread inside a `with` block; a poll
    that raises one of `transient` is skipped. `started()` runs once on entering."""

    interval = 0.5
    transient: tuple[type[BaseException], ...] = (AssertionError,)

    def __enter__(self) -> Self:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def started(self) -> None:
        """Runs on entering, before the first poll."""

    def poll(self) -> object:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except self.transient:
                continue
