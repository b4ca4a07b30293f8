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
) -> Path:
    """Draw throughput per member (`series[ordinal]` = [(unix time, records/s)]) with its
    restart `spans` (unix times; an open end runs to the last point) and a dashed line at the
    `expected` rate per member, times shown relative to `t0`, and write a PNG to `path`."""
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
        ax.set_ylim(0, top)
        ax.set_ylabel(f"member {ordinal}\nrecords/s", fontsize=9)
        ax.grid(True, axis="y", color="0.85", lw=0.6)
    axes[-1, 0].set_xlabel("seconds since the rolling restart was triggered  (grey: rollout, "
                           "red: member away, dashed: produced / members)")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
