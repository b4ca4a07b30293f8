"""Watching something in the background while a test acts."""

from __future__ import annotations

import threading
from typing import Self


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
