"""The demo's final report: the fields that `--json` prints (a documented interface: acceptance
checks read them), the table printed for people, and what it counts outside the
ConsumerGroup's status (the Parquet output, the broker's generations of the group).

"Processed" is what the group committed: the sum over partitions of the committed offsets, the
topic starting empty. That is what at-least-once guarantees; the Parquet output is counted too
(the `count` column of the per-key aggregates), where a batch processed twice would show as more.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from staticfleet_dev.demo.group import GROUP, NAMESPACE, PARTITIONS, TOPIC


def build_report(*, env_name: str, root: Path, members: int, final: Mapping[str, Any],
                 produced: int, committed: int, end_offsets: int, broker_generations: int,
                 output: Mapping[str, Any], seconds: Mapping[str, float], plot: Path,
                 kubeconfig: Path, torn_down: bool, panels: Path | None = None,
                 panel_series: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The final report (also the `--json` output). Its restart figures are the operator's
    own, from `status.rollout`: per member in `handoffs` (`absenceMs`, `processingGapMs`) and
    their longest (`longestAbsenceMs`, `longestProcessingGapMs`), the two figures the throughput
    PNG shades and the status shows."""
    st = final.get("status") or {}
    ro = st.get("rollout") or {}
    return {
        "environment": env_name,
        "root": str(root),
        "namespace": NAMESPACE,
        "consumerGroup": GROUP,
        "topic": TOPIC,
        "partitions": PARTITIONS,
        "members": members,
        "membersRestarted": len(ro.get("membersRestarted") or []),
        "rebalancesDuringRollout": ro.get("rebalancesDuringRollout"),
        "brokerGenerationsDuringRollout": broker_generations,
        "longestAbsenceMs": ro.get("longestAbsenceMs"),
        "longestProcessingGapMs": ro.get("longestProcessingGapMs"),
        "strategy": ro.get("strategy"),
        "handoffs": list(ro.get("handoffs") or []),
        "sessionTimeoutMs": (st.get("timeouts") or {}).get("sessionTimeoutMs"),
        "produced": produced,
        "processed": committed,
        "endOffsets": end_offsets,
        "output": dict(output),
        "plot": str(plot),
        "dashboardPlot": None if panels is None else str(panels),
        "dashboardSeries": dict(panel_series or {}),
        "kubeconfig": None if torn_down else str(kubeconfig),
        "tornDown": torn_down,
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
    }


def format_report(report: Mapping[str, Any]) -> str:
    """The report as a small table for people."""
    out = report["output"]
    absence = report["longestAbsenceMs"]
    session = report["sessionTimeoutMs"]
    absence_text = (f"{absence / 1000:.1f}s of a {session / 1000:.1f}s session timeout"
                    if absence is not None and session else str(absence))
    rows = [
        ("members restarted", f"{report['membersRestarted']}/{report['members']}"),
        ("rebalances during rollout",
         f"{report['rebalancesDuringRollout']} (operator), "
         f"{report['brokerGenerationsDuringRollout']} new generations (broker log)"),
        ("longest absence", absence_text),
        ("per member", "; ".join(
            f"{h['ordinal']}: {h['mode']}, absent {h['absenceMs'] / 1000:.1f}s, processing gap "
            + (f"{h['processingGapMs'] / 1000:.1f}s" if h.get("processingGapMs") is not None
               else "n/a")
            for h in report.get("handoffs") or []) or "-"),
        ("records produced", f"{report['produced']:,}"),
        ("records processed", f"{report['processed']:,} (committed offsets)"
         + ("" if report["processed"] == report["produced"] else "  <-- MISMATCH")),
        ("output rows", f"{out['rows']:,} per-key aggregates in {out['files']} files, "
                        f"counting {out['countSum']:,} records"),
        ("output", out["path"] + ("  (removed with the environment)"
                                  if report["tornDown"] else "")),
        ("throughput plot", report["plot"]),
        ("dashboard panels", str(report.get("dashboardPlot"))),
    ]
    width = max(len(k) for k, _ in rows)
    lines = ["", "staticfleet demo: report", "-" * 60]
    lines += [f"{k:<{width}}  {v}" for k, v in rows]
    lines.append("-" * 60)
    lines.append("  ".join(f"{k} {v:.1f}s" for k, v in report["seconds"].items()))
    return "\n".join(lines)


def parquet_summary(path: Path) -> dict[str, Any]:
    """Files, rows and the sum of the `count` column of the Parquet output under `path`."""
    import pyarrow.parquet as pq

    files = [p for p in sorted(path.rglob("*.parquet"))
             if not any(part.startswith(("_", ".")) for part in p.relative_to(path).parts)]
    rows = count = 0
    for f in files:
        table = pq.read_table(f, columns=["count"])
        rows += table.num_rows
        count += int(sum(v for v in table.column("count").to_pylist() if v is not None))
    return {"path": str(path), "files": len(files), "rows": rows, "countSum": count}


def generations(kafka_log: Path) -> int:
    """Generations the broker's coordinator stabilized for the group so far (its log)."""
    text = kafka_log.read_text(errors="replace")
    return len(re.findall(rf"Stabilized group {re.escape(GROUP)} generation \d+", text))
