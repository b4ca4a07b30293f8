"""The lanes of `make test` (tests/lanes.py): modules longest first, an exclusive module never
handed out beside another while other work is left, the figures read from a junit report."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import lanes

pytestmark = pytest.mark.unit


def test_modules_go_longest_first_and_an_unmeasured_one_counts_a_median() -> None:
    ids = ["tests/unit/test_a.py::t1", "tests/e2e/test_b.py::t", "tests/unit/test_a.py::t2",
           "tests/integration/test_new.py::t", "tests/integration/test_c.py::t"]
    seconds = {"tests/unit/test_a.py": 1.0, "tests/e2e/test_b.py": 300.0,
               "tests/integration/test_c.py": 90.0}
    assert lanes.longest_first(ids, seconds) == [
        "tests/e2e/test_b.py", "tests/integration/test_c.py", "tests/integration/test_new.py",
        "tests/unit/test_a.py"]


def test_an_exclusive_module_waits_while_another_runs_elsewhere_unless_only_they_are_left() -> None:
    queue = ["demo", "autoscaling", "light", "lighter"]
    heavy = {"demo", "autoscaling"}
    assert lanes.pick(queue, heavy, exclusive_elsewhere=False) == "demo"
    assert lanes.pick(queue, heavy, exclusive_elsewhere=True) == "light"
    assert lanes.pick(["demo", "autoscaling"], heavy, exclusive_elsewhere=True) == "demo"


def test_module_seconds_come_from_a_junit_report(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.e2e.test_demo" name="test_a" time="200.5"/>'
        '<testcase classname="tests.e2e.test_demo" name="test_b" time="10"/>'
        '<testcase classname="tests.unit.operator.test_decide.TestX" name="t" time="0.25"/>'
        '</testsuite></testsuites>')
    assert lanes.from_junit([report]) == {"tests/e2e/test_demo.py": 210.5,
                                          "tests/unit/operator/test_decide.py": 0.25}
