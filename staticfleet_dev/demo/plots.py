"""The demo's two PNGs and what goes into them: records/s per member over the rolling restart
(`demo-throughput.png`), each member's restart shaded and noted with the operator's own figures
(status.rollout.handoffs), and the shipped dashboard's rebalance, lag and throughput panels as
Prometheus answered their queries over the demo (`demo-dashboard.png`).

Reading the status and Prometheus' answers is pure; `dashboard_panels` asks Prometheus and the
`draw_*` functions write the PNGs (staticfleet_dev.plot draws them)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from staticfleet_dev.demo.group import GROUP, NAMESPACE
from staticfleet_dev.demo.samples import (
    Sample,
    cumulative_processed,
    parse_time,
    rollout_view,
    throughput,
)
from staticfleet_dev.plot import Panel, Shade, write_panels_png, write_throughput_png

if TYPE_CHECKING:
    from staticfleet_dev.prometheus import Prometheus

PLOT_NAME = "demo-throughput.png"

DEMO_PANELS = (("Rebalances observed by the operator (5m)", "rebalances"),
               ("Lag as the broker sees it", "records"),
               ("Throughput per member (records/s)", "records/s"))
"""The dashboard panels the demo draws from Prometheus (title, unit)."""


def plot_paths(root: Path, name: str, *, down: bool) -> tuple[Path, Path]:
    """Where the throughput and the dashboard PNGs go: the environment's directory `root`, or
    with `--down`, which removes that directory, `<cache>/demo/<name>-throughput.png` and its
    `-dashboard.png` beside it."""
    plot = root / PLOT_NAME
    if down:
        from staticfleet_dev.tools import cache_root

        plot = cache_root() / "demo" / f"{name}-throughput.png"
    return plot, plot.with_name(plot.name.replace("throughput", "dashboard"))


def handoff_notes(cg: Mapping[str, Any] | None) -> dict[int, str]:
    """Per member, what its restart cost as the operator measured it (status.rollout.handoffs,
    from the members' own clocks): its absence from the group and its processing gap, in ms."""
    out = {}
    for h in ((cg or {}).get("status") or {}).get("rollout", {}).get("handoffs") or ():
        gap = h.get("processingGapMs")
        out[int(h["ordinal"])] = (f"{h.get('mode')} restart: out of the group "
                                  f"{h['absenceMs']} ms (close -> assignment), processing gap "
                                  + (f"{gap} ms (last batch -> first batch)" if gap is not None
                                     else "n/a"))
    return out


def handoff_shades(cg: Mapping[str, Any] | None) -> dict[int, list[Shade]]:
    """Per member, its restart figures as spans in unix seconds (the PNG shades these): the
    absence from `absentFrom` for `absenceMs`, the processing gap from `processingGapFrom` for
    `processingGapMs`; a figure without its start is left out."""
    out: dict[int, list[Shade]] = {}
    for h in ((cg or {}).get("status") or {}).get("rollout", {}).get("handoffs") or ():
        shades = out.setdefault(int(h["ordinal"]), [])
        for what, start, ms in (("absence", h.get("absentFrom"), h.get("absenceMs")),
                                ("gap", h.get("processingGapFrom"), h.get("processingGapMs"))):
            at = parse_time(start)
            if at is not None and ms is not None:
                shades.append((what, at, at + ms / 1000))
    return out


def _legend(legend: str, labels: Mapping[str, str]) -> str:
    """A Grafana legend format with the series' labels filled in."""
    return re.sub(r"{{\s*(\w+)\s*}}", lambda m: labels.get(m.group(1), ""), legend)


def dashboard_panels(prometheus: Prometheus, start: float, end: float) -> list[Panel]:
    """The shipped dashboard's rebalance, lag and per-member throughput panels, as
    Prometheus answers their queries over [start, end] with this group selected."""
    from staticfleet_dev import dashboard

    out: list[Panel] = []
    for title, unit in DEMO_PANELS:
        graph = next(g for g in dashboard.graphs() if g.title == title)
        expr, legend = graph.queries[0]
        # Grafana's $__rate_interval for a 2 s scrape interval and a 2 s step: max(4 x
        # scrape interval, step + scrape interval) = 8 s. A 1m window would smooth the
        # members' first minute into a ramp (their series start inside it).
        answer = prometheus.query_range(
            dashboard.substitute(expr, NAMESPACE, GROUP, rate_interval="8s"), start, end,
            step=2.0)
        out.append((title, unit, [
            (_legend(legend, one["metric"]), [(float(t), float(v)) for t, v in one["values"]])
            for one in answer]))
    return out


def draw_throughput(path: Path, samples: Sequence[Sample], final: Mapping[str, Any], *,
                    rollout: tuple[float, float], rate: int, members: int) -> None:
    """Records/s per member over `samples`, times from the rollout's trigger, the rollout
    (triggered, complete) in grey, each member's restart figures in `final` (the ConsumerGroup)
    shaded and noted, a dashed line at the rate produced per member."""
    trigger, _ = rollout
    session_ms = rollout_view(final).session_ms
    write_throughput_png(
        path, throughput(cumulative_processed(samples)), handoff_shades(final),
        t0=trigger,
        rollout=rollout, session_s=session_ms / 1000 if session_ms else None,
        expected=rate / members, notes=handoff_notes(final),
        title=f"{NAMESPACE}/{GROUP}: records/s per member over a rolling restart "
              f"({rate} records/s produced)")


def draw_dashboard(path: Path, prometheus: Prometheus, *, since: float,
                   rollout: tuple[float, float]) -> dict[str, int]:
    """The dashboard panels over [since, now], times from the rollout's trigger, the rollout in
    grey; returns each panel's number of series (the report's `dashboardSeries`)."""
    trigger, _ = rollout
    panels = dashboard_panels(prometheus, since, time.time())
    write_panels_png(
        path, panels, t0=trigger,
        rollout=rollout,
        title=f"{NAMESPACE}/{GROUP}: the shipped Grafana dashboard's panels, as Prometheus "
              "answered them over the demo")
    return {title: len(series) for title, _unit, series in panels}
