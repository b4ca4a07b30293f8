"""The test kit's pure parts: waiting until something is true, what a ConsumerGroup's status
says, and the files of the checkout it runs from."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from staticfleet_dev.testkit import groups, kube, poll
from staticfleet_dev.testkit.poll import wait_for, wait_unchanged

pytestmark = pytest.mark.unit


def test_wait_for_returns_the_first_truthy_answer() -> None:
    answers = iter([None, 0, [], {"ready": True}])
    assert wait_for("an answer", lambda: next(answers), timeout=5, interval=0) == {"ready": True}


def test_wait_for_asks_once_even_without_time_left() -> None:
    assert wait_for("an answer", lambda: "yes", timeout=0) == "yes"


def test_a_wait_that_runs_out_names_what_it_waited_for_and_what_it_saw_last() -> None:
    with pytest.raises(AssertionError, match=r"^timed out after 0s waiting for three members; "
                                             r"last: \[\]\nstatus: Degraded$"):
        wait_for("three members", lambda: [], timeout=0, describe=lambda: "status: Degraded")
    with pytest.raises(AssertionError) as failed:
        wait_for("a Ready group", lambda: False, timeout=0)
    assert str(failed.value) == "timed out after 0s waiting for a Ready group"


class Clock:
    """The poll module's clock: `sleep` moves it on, nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(poll, "time", SimpleNamespace(monotonic=clock.monotonic,
                                                      sleep=clock.sleep))
    return clock


def test_a_quiet_stretch_is_counted_from_the_last_change(clock: Clock) -> None:
    reads = iter(["a", "b", "b", "c", "c", "c", "c"])
    seen: list[tuple[float, str]] = []

    def read() -> str:
        seen.append((clock.now, value := next(reads)))
        return value

    assert wait_unchanged("no change", read, seconds=3, timeout=60) == "c"
    # "c" first read at 2 s, the same at 3, 4 and 5 s: three seconds without a change.
    assert seen[-1] == (5.0, "c") and seen[3] == (2.0, "c")


def test_the_key_decides_what_counts_as_a_change(clock: Clock) -> None:
    reads = iter([{"rv": 1, "t": t} for t in range(4)])
    last = wait_unchanged("no write", lambda: next(reads), seconds=2, timeout=60,
                          key=lambda obj: obj["rv"])
    assert last == {"rv": 1, "t": 3} and clock.now == 2


def test_a_wait_for_quiet_that_runs_out_shows_the_last_change(clock: Clock) -> None:
    reads = iter(range(100))
    with pytest.raises(AssertionError, match=r"^timed out after 3s waiting for no change\n"
                                             r"moved: 3 -> 4$"):
        wait_unchanged("no change", lambda: next(reads), seconds=2, timeout=3,
                       describe=lambda before, after: f"moved: {before} -> {after}")


def _cg(*, ready: str = "True", observed: int = 2, generation: int = 2,
        phase: str = "Idle", revision: str = "r2", update: str = "r2") -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "status": {
        "observedGeneration": observed, "updateRevision": update,
        "conditions": [{"type": "Ready", "status": ready}],
        "rollout": {"phase": phase, "revision": revision}}}


@pytest.mark.parametrize(("cg", "expected"), [
    (_cg(), True),
    (_cg(ready="False"), False),
    (_cg(observed=1), False),
    (_cg(phase="Rolling"), True),
    ({"metadata": {"generation": 1}}, False),
])
def test_ready(cg: dict[str, Any], expected: bool) -> None:
    assert groups.ready(cg) is expected


@pytest.mark.parametrize(("cg", "expected"), [
    (_cg(), True),
    (_cg(ready="False"), False),
    (_cg(observed=1), False),
    (_cg(phase="Rolling"), False),
    ({"metadata": {"generation": 1}}, False),
])
def test_ready_and_idle(cg: dict[str, Any], expected: bool) -> None:
    assert groups.ready_and_idle(cg) is expected


@pytest.mark.parametrize(("cg", "expected"), [
    (_cg(phase="Complete"), True),
    (_cg(phase="Rolling"), False),
    (_cg(phase="Complete", revision="r1"), False),   # a previous rollout's Complete
    (_cg(phase="Complete", observed=1), False),      # the new spec not yet seen
])
def test_rollout_complete(cg: dict[str, Any], expected: bool) -> None:
    assert groups.rollout_complete(cg) is expected


@pytest.mark.parametrize("name", ["crds", "examples/consumergroup.yaml"])
def test_the_kit_finds_its_files_in_the_checkout(name: str) -> None:
    assert kube.repo_file(*name.split("/")).exists()


def test_a_missing_file_names_the_path_and_what_to_do() -> None:
    with pytest.raises(FileNotFoundError, match=r"nosuch not found: the test kit \(and the demo\) "
                                                r"run from a source checkout"):
        kube.repo_file("nosuch")


def test_rebalances_seen_counts_a_rise_and_a_new_pods_counter_not_an_old_pods_past() -> None:
    from staticfleet_dev.testkit.groups import rebalances_seen

    before = {"old-0": 1, "old-1": 0}  # old-0 saw the group's formation
    quiet = {"memberRebalanceCounters": {"old-0": 1, "new-1": 0, "new-2": 0}}
    assert rebalances_seen(before, quiet) == {}
    assert rebalances_seen(before, {"memberRebalanceCounters": {"old-0": 2, "new-1": 1}}) == {
        "old-0": 1, "new-1": 1}
    assert rebalances_seen(before, {}) == {}


def test_the_longest_pause_is_per_key_in_the_order_produced() -> None:
    from staticfleet_dev.stream import longest_pause_s

    written = [(b"r1-00000000", 1000), (b"r1-00000032", 1300), (b"r1-00000001", 1000),
               (b"r1-00000064", 6300),  # key 0 waited 5 s
               (b"r1-00000033", 1400), (b"other", 99999), (b"r2-00000000", 50000)]
    assert longest_pause_s(written) == 5.0
    assert longest_pause_s(written[:3]) == 0.3
    assert longest_pause_s([]) == 0.0
