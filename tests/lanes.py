"""How `make test` shares this machine between its pytest-xdist workers (its lanes).

- Every test module is one unit of work, handed to the next free worker longest first, by the
  seconds it took in the last measured run (`tests/durations.json`, written by
  `python -m tests.lanes junit.xml` from a run's `--junitxml`). A module that is not in the file
  yet counts `UNMEASURED_S`.
- A module marked `exclusive` (`pytestmark = pytest.mark.exclusive`) is CPU heavy: its members
  run local Spark, or it makes load, or the figures it prints compare two runs. It holds one
  lock across the workers while it runs (`exclusive`), so no two such modules ever overlap and
  each runs beside the light modules only, as it did when the suite had two lanes. The scheduler
  hands a worker a module that is not exclusive while an exclusive one runs on another worker,
  so no worker waits on the lock while other work is left (`pick`).

The workers tell the scheduler which modules are exclusive through the run's directory
(`RUN_DIR_ENV`, made by the controller before the workers start): the scheduler sees test ids
only, not markers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

DURATIONS = Path(__file__).with_name("durations.json")
UNMEASURED_S = 60.0
"""What a module missing from `DURATIONS` is taken to cost (a new module: about an integration
module's median)."""
RUN_DIR_ENV = "STATICFLEET_TEST_RUN_DIR"
EXCLUSIVE_FILE = "exclusive.json"
LOCK_FILE = "exclusive.lock"
WAITS: list[tuple[str, float]] = []
"""(module, seconds) each exclusive module waited for the lock, in this process."""


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def durations() -> dict[str, float]:
    """Each module's measured seconds (setup, calls and teardown of its tests summed)."""
    if not DURATIONS.exists():
        return {}
    return {k: float(v) for k, v in json.loads(DURATIONS.read_text())["modules"].items()}


def longest_first(nodeids: Iterable[str], seconds: Mapping[str, float]) -> list[str]:
    """The modules of `nodeids`, longest first (ties: collection order)."""
    modules = list(dict.fromkeys(module_of(n) for n in nodeids))
    return sorted(modules, key=lambda m: -seconds.get(m, UNMEASURED_S))


def pick(queue: Iterable[str], exclusive: set[str], exclusive_elsewhere: bool) -> str:
    """The module a free worker takes from `queue` (longest first): the first, unless an
    exclusive module runs on another worker, then the first that is not exclusive (the first
    of all when only exclusive ones are left: that worker waits for the lock)."""
    queue = list(queue)
    if exclusive_elsewhere:
        for module in queue:
            if module not in exclusive:
                return module
    return queue[0]


def run_dir() -> Path | None:
    raw = os.environ.get(RUN_DIR_ENV)
    return Path(raw) if raw else None


def make_run_dir() -> None:
    """The controller's (or a run without workers'): the run's directory, inherited by the
    workers through the environment."""
    if not os.environ.get(RUN_DIR_ENV):
        os.environ[RUN_DIR_ENV] = tempfile.mkdtemp(prefix="staticfleet-lanes-")


def tell_exclusive(modules: Iterable[str]) -> None:
    """A worker's: the exclusive modules it collected (every worker collects the same)."""
    where = run_dir()
    if where is None:
        return
    tmp = where / f"{EXCLUSIVE_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(sorted(set(modules))))
    tmp.replace(where / EXCLUSIVE_FILE)


def told_exclusive() -> set[str]:
    where = run_dir()
    if where is None or not (where / EXCLUSIVE_FILE).exists():
        return set()
    return set(json.loads((where / EXCLUSIVE_FILE).read_text()))


@contextlib.contextmanager
def exclusive(module: str) -> Iterator[None]:
    """Hold the run's exclusive lock while `module` runs (a run without a run directory, one
    pytest process, has nothing to share)."""
    where = run_dir()
    if where is None:
        yield
        return
    with open(where / LOCK_FILE, "a+") as lock:
        began = time.monotonic()
        fcntl.flock(lock, fcntl.LOCK_EX)
        WAITS.append((module, time.monotonic() - began))
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def scheduler(config: Any, log: Any) -> Any:
    """`--dist loadfile` with the order and the exclusive rule above."""
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):  # type: ignore[misc]
        exclusive: set[str] | None = None
        """The workers' answer, read once: the collection does not change during the run."""

        def _split_scope(self, nodeid: str) -> str:
            return module_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if self.exclusive is None:
                self.exclusive = told_exclusive()
            exclusive = self.exclusive
            elsewhere = any(
                scope in exclusive and not all(work.values())
                for other, assigned in self.assigned_work.items() if other is not node
                for scope, work in assigned.items())
            chosen = pick(self.workqueue, exclusive, elsewhere)
            self.workqueue.move_to_end(chosen, last=False)
            super()._assign_work_unit(node)

    return LaneScheduling(config, log)


def from_junit(paths: Iterable[Path]) -> dict[str, float]:
    """Each module's seconds from `--junitxml` reports (pytest writes a test's setup, call and
    teardown as its one `time`)."""
    seconds: dict[str, float] = {}
    for path in paths:
        for case in ET.parse(path).iter("testcase"):
            classname = case.get("classname") or ""
            parts = classname.split(".")
            # tests.e2e.test_demo (or ...test_x.SomeClass): the module is the first test_ part.
            upto = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
            module = "/".join(parts[:upto + 1]) + ".py"
            seconds[module] = seconds.get(module, 0.0) + float(case.get("time") or 0.0)
    return seconds


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m tests.lanes JUNIT.xml... (writes tests/durations.json)",
              file=sys.stderr)
        return 2
    seconds = from_junit(Path(a) for a in argv)
    DURATIONS.write_text(json.dumps({
        "about": "Each test module's seconds (its tests' setup, call and teardown summed) in "
                 "one measured run of `make test`; the scheduler hands modules out longest "
                 "first (tests/lanes.py). Written by `python -m tests.lanes junit.xml`.",
        "modules": {m: round(s, 1) for m, s in sorted(seconds.items(), key=lambda kv: -kv[1])},
    }, indent=1) + "\n")
    print(f"{len(seconds)} modules, {sum(seconds.values()) / 60:.1f} min of work")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
