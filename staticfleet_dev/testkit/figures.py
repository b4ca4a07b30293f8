"""What a benchmark reads off the processes and servers it runs, for its figures: a process's
(and its children's) memory and CPU from /proc, the API server's own request counters
(`apiserver_request_total`), a Prometheus histogram's quantiles over a window, and
nearest-rank percentiles. The parsing is pure (tested on plain text); the /proc readers take a
pid.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"})
"""The `verb` label values of `apiserver_request_total` that change something."""

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


# --- numbers ----------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (`q` in 0..100) of values (at least one)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def rounded(value: float | None, digits: int) -> float | None:
    """`round`, None staying None (a figure not measured)."""
    return None if value is None else round(value, digits)


def latest(times: Iterable[float | None]) -> float | None:
    """The last of several parts' times (seconds), None if a part has none (never came)."""
    values = list(times)
    if not values or any(v is None for v in values):
        return None
    return max(v for v in values if v is not None)


# --- the Prometheus text format ---------------------------------------------------------------

def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of the metric `name` in a Prometheus text exposition: (labels, value)."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None or m.group(1) != name:
            continue
        out.append((dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


def api_requests(text: str) -> dict[tuple[str, str], float]:
    """The API server's count of the requests it served so far (`apiserver_request_total`,
    summed over codes, scopes and the rest), by (verb, resource)."""
    out: dict[tuple[str, str], float] = {}
    for labels, value in samples(text, "apiserver_request_total"):
        key = (labels.get("verb", ""), labels.get("resource", ""))
        out[key] = out.get(key, 0.0) + value
    return out


def by_verb(counts: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """(verb, resource) counts summed per verb."""
    out: dict[str, float] = {}
    for (verb, _resource), n in counts.items():
        out[verb] = out.get(verb, 0.0) + n
    return out


def writes(counts: Mapping[tuple[str, str], float]) -> float:
    return sum(n for (verb, _resource), n in counts.items() if verb in WRITE_VERBS)


def difference(after: Mapping[tuple[str, str], float], before: Mapping[tuple[str, str], float],
               idle: Mapping[tuple[str, str], float] | None = None,
               idle_scale: float = 1.0) -> dict[tuple[str, str], float]:
    """`after - before` per key, less `idle * idle_scale` (what the same span costs with the
    process under study stopped, scaled to this span), never below 0; zero keys dropped."""
    out = {}
    for key in set(after) | set(before):
        n = after.get(key, 0.0) - before.get(key, 0.0)
        if idle is not None:
            n -= idle.get(key, 0.0) * idle_scale
        if n > 1e-9:
            out[key] = n
    return out


def buckets(text: str, name: str) -> list[tuple[float, float]]:
    """The cumulative buckets of the (unlabelled, or summed over labels) histogram `name`:
    (upper bound, count), by bound, +Inf last."""
    out: dict[float, float] = {}
    for labels, value in samples(text, f"{name}_bucket"):
        le = float(labels["le"])
        out[le] = out.get(le, 0.0) + value
    return sorted(out.items())


def bucket_difference(after: Sequence[tuple[float, float]],
                      before: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The cumulative buckets of the observations made between two reads."""
    earlier = dict(before)
    return [(le, n - earlier.get(le, 0.0)) for le, n in after]


def sum_buckets(many: Iterable[Sequence[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The cumulative buckets of several processes' histograms of one name (the same bounds),
    as one: by bound, +Inf last."""
    out: dict[float, float] = {}
    for one in many:
        for le, n in one:
            out[le] = out.get(le, 0.0) + n
    return sorted(out.items())


def histogram_quantile(q: float, cumulative: Sequence[tuple[float, float]]) -> float | None:
    """The `q` (0..1) quantile of a histogram's cumulative buckets, as Prometheus'
    `histogram_quantile` estimates it: linear within the bucket it falls in (from 0 for the
    first), the highest finite bound when it falls in +Inf. None without observations."""
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    rank = q * cumulative[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for le, count in cumulative:
        if count >= rank:
            if math.isinf(le):
                return lower_bound
            if count == lower_count:
                return le
            return lower_bound + (le - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = le, count
    return lower_bound


# --- processes --------------------------------------------------------------------------------

def children(pid: int) -> list[int]:
    """`pid` and every process under it (children, their children, ...), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += parents.get(p, [])
    return out


def rss_kib(pid: int) -> int:
    """Resident memory of one process (VmRSS), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and every process under it."""
    return sum(rss_kib(p) for p in children(pid))


def tree_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds so far of a process and every process under it, by pid (a child that exits
    takes its seconds with it: compare per pid)."""
    return {p: cpu_seconds(p) for p in children(pid)}


def cpu_used(before: Mapping[int, float], after: Mapping[int, float]) -> float:
    """CPU seconds used between two `tree_cpu_seconds` reads (a process new since counts
    from 0)."""
    return sum(max(0.0, s - before.get(p, 0.0)) for p, s in after.items())
