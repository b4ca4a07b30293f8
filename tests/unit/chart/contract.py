"""The metric names of docs/contracts.md: the only ones alerts and dashboard may use."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CONTRACTS = REPO / "docs" / "contracts.md"
_NAME = re.compile(r"\bstaticfleet_[a-z0-9_]+")
# Series Prometheus derives from a histogram.
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def contract_metrics() -> set[str]:
    """Every `staticfleet_*` metric name docs/contracts.md lists."""
    names = set(_NAME.findall(CONTRACTS.read_text()))
    assert names, f"no staticfleet_* metric in {CONTRACTS}"
    return names


def metric_names(expr: str) -> set[str]:
    """The staticfleet metric names a PromQL expression reads, histogram suffixes removed."""
    names = set()
    for name in _NAME.findall(expr):
        for suffix in _HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name.removesuffix(suffix) in contract_metrics():
                name = name.removesuffix(suffix)
        names.add(name)
    return names
