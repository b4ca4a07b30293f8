"""`run_demo`, the entry point of `staticfleet demo`: runs the demo, prints the report (as JSON
with `--json`), says what is left running, and returns the exit code: 0 when every member was
restarted without a rebalance and every record produced was processed, else 2."""

from __future__ import annotations

import argparse
import json
import sys

from staticfleet_dev.demo.progress import Console
from staticfleet_dev.demo.report import format_report


def run_demo(args: argparse.Namespace) -> int:
    """Entry point of `staticfleet demo`; returns the exit code."""
    console = Console(sys.stderr if args.json else sys.stdout)
    # Imported once the demo's clock runs: its imports (the Kafka client, matplotlib, ...) take
    # seconds, which the demo's times have always counted (`seconds.total`, the printed times).
    from staticfleet_dev.demo.run import Demo

    demo = Demo(args, console)
    try:
        report = demo.run()
    except BaseException as exc:
        demo.did_not_finish(exc)
        raise
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
    demo.farewell(report)
    ok = (report["rebalancesDuringRollout"] == 0 and report["processed"] == report["produced"]
          and report["membersRestarted"] == report["members"])
    return 0 if ok else 2
