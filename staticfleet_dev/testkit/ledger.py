"""What a ConsumerGroup's rebalance ledger shows: `status.rebalanceLedger` and the operator's
`staticfleet_rebalances_by_cause_total`, read back for the tests."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from staticfleet_dev.testkit import groups

CAUSE_METRIC = "staticfleet_rebalances_by_cause_total"
TOTAL_METRIC = "staticfleet_rebalances_total"
_CAUSE = re.compile(r'cause="([^"]*)"')


def ledger(kubeconfig: Path, namespace: str, name: str) -> dict[str, Any]:
    """`status.rebalanceLedger` ({} before the first pass that keeps one)."""
    return dict((groups.get(kubeconfig, namespace, name).get("status") or {}).get(
        "rebalanceLedger") or {})


def causes(kubeconfig: Path, namespace: str, name: str) -> list[str]:
    """The causes of the entries in `recent`, oldest first."""
    return [e["cause"] for e in ledger(kubeconfig, namespace, name).get("recent") or ()]


def counted(metrics: str, metric: str, namespace: str, name: str) -> dict[str, float]:
    """The group's series of `metric` in the operator's /metrics text, by cause ("" for a
    series without one)."""
    out = {}
    for line in metrics.splitlines():
        if (line.startswith(metric + "{") and f'namespace="{namespace}"' in line
                and f'group="{name}"' in line):
            cause = _CAUSE.search(line)
            out[cause.group(1) if cause else ""] = float(line.rsplit(" ", 1)[1])
    return out
