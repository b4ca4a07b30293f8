"""The test kit's pure parts: waiting until something is true, what a ConsumerGroup's status
says, and the files of the checkout it runs from."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet_dev.testkit import groups, kube
from staticfleet_dev.testkit.poll import wait_for

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
