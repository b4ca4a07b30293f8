"""The demo's picture: records per second of every member over a rolling restart.

One panel per member, sharing the time axis (seconds since the rollout was triggered). Each
member's restart is shaded with the operator's own figures (`status.rollout.handoffs`): red, its
absence from the group (the old process's close -> the replacement's first assignment), orange,
its processing gap (the old process's last batch end -> the replacement's first batch end),
each labelled in milliseconds; the rollout as a whole is a grey band behind every panel. The
series come from `staticfleet_dev.demo.samples`, the shades from `staticfleet_dev.demo.plots`
(both pure); this module only draws.
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
Shade = tuple[str, float, float]
"""(what, start, end) in unix seconds: "absence" or "gap", one member's restart figure."""
SHADES = {"absence": ("tab:red", "out of the group"), "gap": ("tab:orange", "processing gap")}


def write_throughput_png(
    path: Path,
    series: Mapping[int, Sequence[Point]],
    shades: Mapping[int, Sequence[Shade]],
    *,
    t0: float,
    rollout: Span | None,
    session_s: float | None,
    expected: float | None,
    title: str,
    notes: Mapping[int, str] | None = None,
) -> Path:
    """Draw throughput per member (`series[ordinal]` = [(unix time, records/s)]) with its
    restart figures shaded (`shades[ordinal]`, `Shade`) and a dashed line at the `expected`
    rate per member, times shown relative to `t0`, and write a PNG to `path`.
    `notes[ordinal]`: a line written in the member's row (its figures, spelled out)."""
    ordinals = sorted(set(series) | set(shades))
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
        for row, (what, start, stop) in enumerate(shades.get(ordinal, [])):
            color, label = SHADES[what]
            s, e = start - t0, stop - t0
            ax.axvspan(s, max(e, s + 0.05), color=color, alpha=0.3, zorder=1)
            text = f"{label} {round((stop - start) * 1000)} ms" + (
                f" / session {session_s:.0f} s" if session_s and what == "absence" else "")
            ax.annotate(text, xy=(e, top * (0.93 - 0.14 * row)), xytext=(4, 0),
                        textcoords="offset points", fontsize=8, color=color, va="top")
        if notes and ordinal in notes:
            ax.text(0.99, 0.06, notes[ordinal], transform=ax.transAxes, ha="right",
                    va="bottom", fontsize=8, color="tab:purple")
        ax.set_ylim(0, top)
        ax.set_ylabel(f"member {ordinal}\nrecords/s", fontsize=9)
        ax.grid(True, axis="y", color="0.85", lw=0.6)
    axes[-1, 0].set_xlabel("seconds since the rolling restart was triggered  (grey: rollout, "
                           "red: out of the group, orange: processing gap, dashed: produced / "
                           "members)")
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
