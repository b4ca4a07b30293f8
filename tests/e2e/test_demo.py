"""`staticfleet demo` end to end, as a user runs it: its own local environment, the operator,
two Spark members (the default is three; two keep every path of the demo, a handoff each, and
take about a third less of the e2e worker's time in CI), a short stream and a rolling restart;
then `--down` removes it all.

The report must show what the demo promises: every member restarted, no rebalance, every produced
record processed (committed), a throughput PNG; and nothing of the environment may be left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from staticfleet_dev import environment
from tests.support import unique

# exclusive: three members, each with its own local-Spark JVM, and a report of absences and
# processing gaps compared with docs/benchmarks.md: it runs beside no other heavy module.
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive]

DEMO_TIMEOUT_S = 1020
MEMBERS = 2


def demo_command(name: str) -> list[str]:
    exe = shutil.which("staticfleet")
    base = [exe] if exe else [sys.executable, "-m", "staticfleet.cli"]
    return [*base, "demo", "--down", "--json", "--name", name, "--settle", "10",
            "--rate", "100", "--members", str(MEMBERS)]


def processes_mentioning(text: str) -> list[str]:
    """Processes whose command line or environment contains `text` (the environment's root:
    the servers take it in their arguments, the operator and the members in their environment)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if text in cmdline or text in environ:
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


@pytest.fixture
def demo_name() -> Iterator[str]:
    name = unique("demo-e2e")
    yield name
    environment.down(name)  # only does something when the demo itself failed to


@pytest.mark.timeout(DEMO_TIMEOUT_S + 120)
def test_demo_rolls_without_rebalance_processes_everything_and_cleans_up(
    demo_name: str,
) -> None:
    try:
        proc = subprocess.run(demo_command(demo_name), capture_output=True, text=True,
                              timeout=DEMO_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the demo did not finish in {DEMO_TIMEOUT_S}s; output:\n"
                    f"{(exc.stderr or b'')[-6000:]!r}")
    assert proc.returncode == 0, (f"exit {proc.returncode}\n--- stderr ---\n{proc.stderr[-8000:]}"
                                  f"\n--- stdout ---\n{proc.stdout[-3000:]}")
    report: dict[str, Any] = json.loads(proc.stdout)
    print(json.dumps(report, indent=1))

    assert report["membersRestarted"] == MEMBERS
    assert report["rebalancesDuringRollout"] == 0
    assert report["brokerGenerationsDuringRollout"] == 0
    assert report["longestAbsenceMs"] < report["sessionTimeoutMs"]
    assert report["produced"] > 0
    assert report["processed"] == report["produced"]
    assert report["output"]["countSum"] >= report["produced"], "output rows lost records"
    assert report["tornDown"] is True

    # Rolled by warm handoff (the example's strategy): each member away about a second.
    assert report["strategy"] == "WarmHandoff"
    assert [h["mode"] for h in report["handoffs"]] == ["warm"] * MEMBERS, report["handoffs"]
    # Each member's own local Spark here (the operator-rule e2e cases share one Connect
    # server): the old member drained, its warm standby activated at once, a join's absence
    # (tens of ms) and a processing gap of a batch or two, both with their start.
    assert report["longestAbsenceMs"] < 1000, report["handoffs"]
    assert all(h.get("processingGapMs") is not None and h.get("absentFrom")
               and h.get("processingGapFrom") for h in report["handoffs"]), report["handoffs"]
    assert report["longestProcessingGapMs"] < 8000, report["handoffs"]
    # The dashboard panels drawn from the real Prometheus that scraped the demo had data.
    series = report["dashboardSeries"]
    assert series["Throughput per member (records/s)"] == MEMBERS, series
    assert series["Lag as the broker sees it"] >= 1, series
    assert series["Rebalances observed by the operator (5m)"] >= 1, series

    plots = [Path(report["plot"]), Path(report["dashboardPlot"])]
    try:
        for plot in plots:
            assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{plot} is not a PNG"
    finally:
        for plot in plots:
            plot.unlink(missing_ok=True)

    root = report["root"]
    assert environment.load(demo_name) is None, "the environment is still registered"
    assert not Path(root).exists(), f"{root} was not removed"
    assert not processes_mentioning(root), processes_mentioning(root)
