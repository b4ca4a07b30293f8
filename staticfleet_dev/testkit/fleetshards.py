"""The fleet bench's shards (bench/fleet_scale.py --shards K): which shard each group goes to and
by which label, the K operator processes run with the arguments the chart's shard Deployments
give them, which shard each group is held by (as the groups' status and each operator's own
metrics say, measured, not assumed), and the operators' CPU and memory sampled together.

The shards are those the chart runs with `shards: [s1, ..., sK-1]`: the default shard
(`--shard=default --other-shards=s1,...`) and K-1 named ones (`--shard=s1`). Group i goes to
shard i mod K; a named shard's groups carry its label `staticfleet.io/shard`, the default
shard's carry none (it owns the unlabelled groups, as when shards are added to a running
installation). With K = 1 there is one operator, not sharded, as before shards existed: its
shard is None throughout.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from staticfleet.decisions.shards import DEFAULT_SHARD, SHARD_LABEL, Shard, selector
from staticfleet_dev.testkit import figures
from staticfleet_dev.testkit.fleet import Settling, recorded_shard
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import Poller

HISTOGRAM = "staticfleet_reconcile_duration_seconds"
"""The operator's histogram of its passes' durations."""
QUEUE = "staticfleet_reconcile_queue_depth"
"""The operator's gauge of the passes waiting for a slot of their Kafka cluster."""
LAST_PASS = "staticfleet_reconcile_last_timestamp_seconds"
"""The operator's gauge of each group's last pass (Unix time), labels namespace and group: a
shard's operator keeps it for the groups it runs passes for, and drops it for a group it lets
go."""


@dataclass(frozen=True)
class Layout:
    """K shards over the groups, as the chart would run them."""

    count: int = 1

    @property
    def names(self) -> tuple[str | None, ...]:
        """The shards, the default one first; (None,): one operator, not sharded."""
        if self.count <= 1:
            return (None,)
        return (DEFAULT_SHARD, *(f"s{i}" for i in range(1, self.count)))

    @property
    def named(self) -> tuple[str, ...]:
        return tuple(n for n in self.names[1:] if n is not None)

    def shard_of(self, i: int) -> str | None:
        """The shard group i is given to: round-robin."""
        return self.names[i % len(self.names)]

    def labels(self, i: int) -> dict[str, str]:
        """Group i's labels: its named shard's, none for the default shard's (or unsharded)."""
        name = self.shard_of(i)
        return {} if name in (None, DEFAULT_SHARD) else {SHARD_LABEL: str(name)}

    def shard(self, name: str | None) -> Shard | None:
        """The operator's own view of shard `name` (its watch's selector)."""
        if name is None:
            return None
        return Shard.parse(name, self.named if name == DEFAULT_SHARD else ())

    def args(self, name: str | None) -> tuple[str, ...]:
        """`staticfleet operator run` arguments of the shard's operator, as the chart's
        Deployment of that shard passes them (charts/staticfleet/templates/deployment.yaml)."""
        if name is None:
            return ()
        if name == DEFAULT_SHARD:
            return (f"--shard={name}", f"--other-shards={','.join(self.named)}")
        return (f"--shard={name}",)

    def owners(self, labels: Mapping[str, str] | None) -> list[str | None]:
        """The shards whose selector takes a group with these labels: exactly one, when the
        selectors are disjoint and cover every group."""
        return [n for n in self.names if (s := self.shard(n)) is None or s.owns(labels)]


# --- which shard holds each group -------------------------------------------------------------

def passed_since(metrics: str, namespace: str, since: float) -> set[str]:
    """The groups of `namespace` an operator's metrics show a pass of at `since` (Unix time) or
    later."""
    return {labels.get("group", "") for labels, value in figures.samples(metrics, LAST_PASS)
            if labels.get("namespace") == namespace and value >= since}


@dataclass(frozen=True)
class Holdings:
    """Which shard holds each group, measured two ways: the groups' `status.shard`, and the
    groups each shard's operator ran passes for (its metrics)."""

    by_status: dict[str | None, int]
    """Groups whose status names the shard, by shard (None: no shard named)."""
    by_passes: dict[str | None, int]
    """Groups the shard's operator ran a pass for, by shard."""
    by_none: tuple[str, ...]
    """Groups no operator ran a pass for, or (sharded) whose status names no shard."""
    by_two: tuple[str, ...]
    """Groups two or more operators ran passes for."""
    elsewhere: tuple[str, ...]
    """Groups whose status names another shard than the one their labels select (or whose
    labels select not exactly one)."""

    @property
    def sound(self) -> bool:
        return not (self.by_none or self.by_two or self.elsewhere)

    def report(self) -> dict[str, int]:
        return {"groupsHeldByNone": len(self.by_none), "groupsHeldByTwo": len(self.by_two),
                "groupsHeldElsewhere": len(self.elsewhere)}

    def shard_report(self, name: str | None) -> dict[str, int]:
        return {"groupsHeld": self.by_status.get(name, 0),
                "groupsPassed": self.by_passes.get(name, 0)}

    def describe(self, first: int = 10) -> str:
        return (f"by status {self.by_status}, passed {self.by_passes}; held by none "
                f"{len(self.by_none)} {list(self.by_none[:first])}, by two {len(self.by_two)} "
                f"{list(self.by_two[:first])}, elsewhere {len(self.elsewhere)} "
                f"{list(self.elsewhere[:first])}")


def holdings(layout: Layout, objs: Iterable[Mapping[str, Any]],
             passed: Mapping[str | None, set[str]]) -> Holdings:
    """The `Holdings` of the groups `objs`, given each shard's passed groups (`passed_since`)."""
    by_status: Counter[str | None] = Counter()
    by_none, by_two, elsewhere = [], [], []
    for obj in objs:
        name, recorded = obj["metadata"]["name"], recorded_shard(obj)
        by_status[recorded] += 1
        passers = [s for s, groups in passed.items() if name in groups]
        unrecorded = recorded is None and layout.count > 1
        if not passers or unrecorded:
            by_none.append(name)
        if len(passers) > 1:
            by_two.append(name)
        owners = layout.owners(obj["metadata"].get("labels"))
        if len(owners) != 1 or (not unrecorded and owners != [recorded]):
            elsewhere.append(name)
    return Holdings(
        by_status={s: by_status.get(s, 0) for s in (*layout.names, *by_status)},
        by_passes={s: len(passed.get(s, ())) for s in layout.names},
        by_none=tuple(sorted(by_none)), by_two=tuple(sorted(by_two)),
        elsewhere=tuple(sorted(elsewhere)))


def cold_start_figures(layout: Layout, given: Mapping[str, str | None],
                       progress: Mapping[str | None, Settling],
                       ) -> tuple[dict[str | None, dict[str, Any]], Settling]:
    """Each shard's first figures (`given`: group -> shard, `progress`: `fleet.wait_settled`),
    and the whole fleet's `Settling`: its last shard's times, what held every shard's groups."""
    shards = {s: {"shard": s, "selector": selector(layout.shard(s)),
                  "groupsGiven": list(given.values()).count(s),
                  "coldStartFirstPassSeconds": figures.rounded(p.first, 1),
                  "coldStartSeconds": figures.rounded(p.settled, 1)}
              for s, p in progress.items()}
    held: Counter[str] = Counter()
    for p in progress.values():
        held.update(p.held)
    return shards, Settling(figures.latest(p.first for p in progress.values()),
                            figures.latest(p.settled for p in progress.values()), dict(held))


# --- the operators ----------------------------------------------------------------------------

def start_all(ops: Mapping[str | None, OperatorProcess], timeout: float,
              ) -> dict[str | None, OperatorProcess]:
    """Start every shard's operator at once, then wait until each is healthy; if one fails,
    stop them all and raise."""
    try:
        for op in ops.values():
            op.launch()
        for op in ops.values():
            op.wait_healthy(timeout)
    except BaseException:
        for op in ops.values():
            op.stop()
        raise
    return dict(ops)


def pass_figures(hist: Sequence[tuple[float, float]], took: float) -> dict[str, float | None]:
    """An operator's (or several's, `figures.sum_buckets`) passes over a window of `took` s,
    from its histogram's cumulative buckets over the window: quantiles and passes per second."""
    out: dict[str, float | None] = {
        f"passP{q}Seconds": figures.rounded(figures.histogram_quantile(q / 100, hist), 4)
        for q in (50, 90, 99)}
    out["passesPerSecondAtRest"] = round(hist[-1][1] / took, 2) if hist else None
    return out


@dataclass
class Usage:
    """CPU and resident memory of process trees (each operator with its children), sampled
    together; the figures are pure over the samples."""

    pids: Mapping[str | None, int]
    times: list[float] = field(default_factory=list)
    cpu: list[dict[str | None, dict[int, float]]] = field(default_factory=list)
    rss: list[dict[str | None, int]] = field(default_factory=list)

    def sample(self) -> None:
        self.times.append(time.monotonic())
        self.cpu.append({k: figures.tree_cpu_seconds(p) for k, p in self.pids.items()})
        self.rss.append({k: figures.tree_rss_kib(p) for k, p in self.pids.items()})

    def rss_kib(self, keys: Sequence[str | None]) -> float | None:
        """The trees `keys` together: the most resident memory in one sample, KiB."""
        return max((float(sum(s.get(k, 0) for k in keys)) for s in self.rss), default=None)

    def cores(self, keys: Sequence[str | None]) -> tuple[float | None, float | None]:
        """The trees `keys` together: CPU cores on average from the first sample to the last,
        and the most over one interval between samples (None without two samples)."""
        if len(self.times) < 2:
            return None, None

        def used(i: int, j: int) -> float:
            return sum(figures.cpu_used(self.cpu[i].get(k, {}), self.cpu[j].get(k, {}))
                       for k in keys)

        peak = max(used(i - 1, i) / (self.times[i] - self.times[i - 1])
                   for i in range(1, len(self.times)))
        return used(0, len(self.times) - 1) / (self.times[-1] - self.times[0]), peak

    def report(self, keys: Sequence[str | None]) -> dict[str, float | None]:
        """The bench's figures of the trees `keys` together, rounded."""
        rss, (avg, peak) = self.rss_kib(keys), self.cores(keys)
        return {"operatorRssMiB": None if rss is None else round(rss / 1024, 1),
                "operatorCpuCoresAtRest": figures.rounded(avg, 4),
                "operatorCpuCoresPeakAtRest": figures.rounded(peak, 3)}


@dataclass
class RestWindow:
    """The operators' own figures over a window: each one's pass histogram (`HISTOGRAM`, its
    metrics endpoint) and process tree, and all of them together."""

    ops: Mapping[str | None, OperatorProcess]
    usage: Usage
    before: dict[str | None, list[tuple[float, float]]]

    @classmethod
    def open(cls, ops: Mapping[str | None, OperatorProcess]) -> RestWindow:
        window = cls(ops, Usage({s: op.pid for s, op in ops.items()}), {
            s: figures.buckets(op.metrics(), HISTOGRAM) for s, op in ops.items()})
        window.usage.sample()
        return window

    def close(self, took: float, by_shard: Mapping[str | None, dict[str, Any]],
              ) -> dict[str, Any]:
        """All operators' figures over the window of `took` s (RSS and CPU summed, the pass
        histograms added); each one's go into its dict of `by_shard`."""
        hists = {s: figures.bucket_difference(figures.buckets(op.metrics(), HISTOGRAM),
                                              self.before[s]) for s, op in self.ops.items()}
        for s in self.ops:
            by_shard[s].update(pass_figures(hists[s], took), **self.usage.report([s]))
        return {**pass_figures(figures.sum_buckets(hists.values()), took),
                **self.usage.report(list(self.ops))}


class QueueDepth(Poller):
    """The most passes waiting for a slot (`QUEUE`), all operators together, every 2 s inside
    the `with` block."""

    interval = 2.0
    transient = (AssertionError, OSError)

    def __init__(self, ops: Mapping[str | None, OperatorProcess]) -> None:
        self.ops = ops
        self.most: float | None = None

    def poll(self) -> None:
        depth = sum(value for op in self.ops.values()
                    for _, value in figures.samples(op.metrics(), QUEUE))
        self.most = depth if self.most is None else max(self.most, depth)
