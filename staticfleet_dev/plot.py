"""The demo's picture: records per second of every member over a rolling restart.

One panel per member, sharing the time axis (seconds since the rollout was triggered). A member's
restart (from its stop to its return, Ready again) is a red band labelled with how long it was
away; the rollout as a whole is a grey band behind every panel. The series and spans come from
`staticfleet_dev.demo`'s pure functions; this module only draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # after use(): the backend must be chosen first
from matplotlib.figure import Figure

Point = tuple[float, float]
Span = tuple[float, float | None]


def write_throughput_png(
    path: Path,
    series: Mapping[int, Sequence[Point]],
    spans: Mapping[int, Sequence[Span]],
    *,
    t0: float,
    rollout: Span | None,
    session_s: float | None,
    expected: float | None,
    title: str,
    notes: Mapping[int, str] | None = None,
) -> Path:
    """Draw throughput per member (`series[ordinal]` = [(unix time, records/s)]) with its
    restart `spans` (unix times; an open end runs to the last point) and a dashed line at the
    `expected` rate per member, times shown relative to `t0`, and write a PNG to `path`.
    `notes[ordinal]`: a line written in the member's row (its absence and processing gap as the
    operator measured them)."""
    ordinals = sorted(set(series) | set(spans))
    rows = max(1, len(ordinals))
    fig, axes = plt.subplots(rows, 1, figsize=(10, 1.9 * rows + 1.2), sharex=True, squeeze=False)
    last = max((t for pts in series.values() for t, _ in pts), default=t0) - t0
    top = max([r for pts in series.values() for _, r in pts] + [expected or 0.0, 1.0]) * 1.15
    for ax, ordinal in zip(axes[:, 0], ordinals, strict=False):
        if rollout is not None:
            end = rollout[1] - t0 if rollout[1] is not None else last
            ax.axvspan(rollout[0] - t0, end, color="0.92", zorder=0)
        if expected:
            ax.axhline(expected, color="0.45", lw=0.9, ls="--", zorder=1)
        pts = series.get(ordinal, [])
        ax.plot([t - t0 for t, _ in pts], [r for _, r in pts], color="tab:blue", lw=1.4)
        for start, stop in spans.get(ordinal, []):
            s = start - t0
            e = (stop - t0) if stop is not None else last
            ax.axvspan(s, e, color="tab:red", alpha=0.25, zorder=1)
            away = f"away {e - s:.1f}s" + (f" / session {session_s:.0f}s" if session_s else "")
            ax.annotate(away, xy=(e, top * 0.93), xytext=(4, 0), textcoords="offset points",
                        fontsize=8, color="tab:red", va="top")
        if notes and ordinal in notes:
            ax.text(0.99, 0.06, notes[ordinal], transform=ax.transAxes, ha="right",
                    va="bottom", fontsize=8, color="tab:purple")
        ax.set_ylim(0, top)
        ax.set_ylabel(f"member {ordinal}\nrecords/s", fontsize=9)
        ax.grid(True, axis="y", color="0.85", lw=0.6)
    axes[-1, 0].set_xlabel("seconds since the rolling restart was triggered  (grey: rollout, "
                           "red: member away, dashed: produced / members)")
    return _save(fig, path, title)


Panel = tuple[str, str, Sequence[tuple[str, Sequence[Point]]]]
"""(title, unit, [(legend, [(unix time, value)])]): one dashboard panel as Prometheus answered."""


def write_panels_png(path: Path, panels: Sequence[Panel], *, t0: float, rollout: Span | None,
                     title: str) -> Path:
    """Draw dashboard panels (one row each) from Prometheus' answers, times relative to `t0`,
    the rollout shaded, and write a PNG to `path`."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.2 * len(panels) + 1.0),
                             sharex=True, squeeze=False)
    for ax, (name, unit, series) in zip(axes[:, 0], panels, strict=True):
        if rollout is not None and rollout[1] is not None:
            ax.axvspan(rollout[0] - t0, rollout[1] - t0, color="0.92", zorder=0)
        for legend, points in series:
            ax.plot([t - t0 for t, _ in points], [v for _, v in points], lw=1.3, label=legend)
        if not series:
            ax.text(0.5, 0.5, "no series (nothing happened)", transform=ax.transAxes,
                    ha="center", va="center", color="0.4", fontsize=9)
        else:
            ax.legend(fontsize=7, loc="upper left", ncol=4, frameon=False)
        ax.set_title(name, fontsize=9, loc="left")
        ax.set_ylabel(unit, fontsize=8)
        ax.set_ylim(bottom=0)
        ax.grid(True, axis="y", color="0.85", lw=0.6)
    axes[-1, 0].set_xlabel("seconds since the rolling restart was triggered  (grey: rollout)")
    return _save(fig, path, title)


def _save(fig: Figure, path: Path, title: str) -> Path:
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
