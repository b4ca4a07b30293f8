"""`staticfleet demo`: a rolling restart of a static-membership consumer group, shown locally.

It brings up the local environment (broker, control plane, local node), installs the CRD, runs
the operator as a process registered with the environment (so `staticfleet env down` stops it),
creates the topic `orders` (12 partitions), produces a steady stream from a thread, applies the
example ConsumerGroup (examples/consumergroup.yaml, pointed at the local broker, Spark on one core,
Parquet under the environment's directory), waits until it is Ready, lets it consume for a while,
bumps `spec.rollout.restartNonce` and watches the rollout, lets it consume again, stops the
producer and waits until the group has committed every record. Then it reports, draws the
throughput per member (`demo-throughput.png` in the environment's directory; with `--down`, which
removes that directory, `<cache>/demo/<name>-throughput.png`) and either leaves everything running
or tears it down. The producer runs in the demo's process and stops with it: what is left running
is the environment, the operator and the (then idle) members.

"Processed" is what the group committed: the sum over partitions of the committed offsets, the
topic starting empty. That is what at-least-once guarantees; the Parquet output is counted too
(the `count` column of the per-key aggregates), where a batch processed twice would show as more.

The first half of this module is pure (parsing observed objects into samples, throughput series,
restart spans, progress lines, the report); the second half does the I/O.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

NAMESPACE = "staticfleet-demo"
GROUP = "orders"
TOPIC = "orders"
DLQ_TOPIC = "orders-dlq"
PARTITIONS = 12
MEMBER_PORT = 8080
EXAMPLE = "consumergroup.yaml"
PLOT_NAME = "demo-throughput.png"
THROUGHPUT_WINDOW_S = 5.0

Span = tuple[float, float | None]  # (member stopped, member back; None: not back yet)
Shade = tuple[str, float, float]  # staticfleet_dev.plot.Shade: ("absence" | "gap", start, end)

READY_TIMEOUT_S = 300.0
ROLLOUT_TIMEOUT_S = 600.0
"""As long as the roller itself gives a member (spec.rollout.progressDeadlineSeconds' default):
three standbys that each take 70-100 s to warm Spark up on a loaded 2-core machine made a 300 s
limit fail a rollout that was going well (CI, 2026-11-24)."""
DRAIN_TIMEOUT_S = 180.0


DEMO_PANELS = (("Rebalances observed by the operator (5m)", "rebalances"),
               ("Lag as the broker sees it", "records"),
               ("Throughput per member (records/s)", "records/s"))
"""The dashboard panels the demo draws from Prometheus (title, unit)."""


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


class DemoFailed(RuntimeError):
    """A step of the demo did not happen in time; the message says where to look."""


# ---------------------------------------------------------------------------------------------
# Pure: observed objects -> samples
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberSample:
    """One member pod as seen at one instant. `records` is its process's `recordsProcessed`
    (None when /status did not answer); a new process (new pod uid or container restart, told by
    `process_start`) counts from zero again."""

    ordinal: int
    uid: str
    ready: bool
    deleting: bool
    records: int | None = None
    process_start: float | None = None
    standby: bool = False
    """Its process is a warm handoff's replacement still waiting for activation."""


@dataclass(frozen=True)
class RolloutView:
    """What the ConsumerGroup's status says about the rollout at one instant."""

    phase: str | None = None
    restarted: int = 0
    current: int | None = None
    current_stopped_at: float | None = None
    in_flight: tuple[tuple[int, float], ...] = ()
    session_ms: int | None = None
    current_phase: str | None = None
    """The current member's handoff phase (status.rollout.inFlight[].phase)."""
    current_back_after: float | None = None
    """Seconds it was away, once it is back in the group."""


@dataclass(frozen=True)
class Sample:
    t: float
    members: tuple[MemberSample, ...]
    rollout: RolloutView = field(default_factory=RolloutView)

    def member(self, ordinal: int) -> MemberSample | None:
        return next((m for m in self.members if m.ordinal == ordinal), None)


def parse_time(value: str | None) -> float | None:
    """RFC 3339 (as the status writes it) to unix seconds."""
    if not value:
        return None
    return datetime.fromisoformat(value).timestamp()


def rollout_view(cg: Mapping[str, Any] | None) -> RolloutView:
    st = (cg or {}).get("status") or {}
    ro = st.get("rollout") or {}
    in_flight = tuple(
        (int(f["ordinal"]), stopped)
        for f in ro.get("inFlight") or []
        if (stopped := parse_time(f.get("stoppedAt"))) is not None
    )
    current: dict[str, Any] = next((f for f in ro.get("inFlight") or []
                    if f.get("ordinal") == ro.get("current")), {})
    closed = parse_time(current.get("closedAt")) or parse_time(current.get("stoppedAt"))
    back = parse_time(current.get("rejoinedAt"))
    return RolloutView(
        current_phase=current.get("phase"),
        current_back_after=(back - closed) if back is not None and closed is not None else None,
        phase=ro.get("phase"),
        restarted=len(ro.get("membersRestarted") or []),
        current=ro.get("current"),
        current_stopped_at=parse_time(ro.get("currentStoppedAt")),
        in_flight=in_flight,
        session_ms=(st.get("timeouts") or {}).get("sessionTimeoutMs"),
    )


def member_samples(pods: Iterable[Mapping[str, Any]],
                   statuses: Mapping[str, Mapping[str, Any] | None]) -> tuple[MemberSample, ...]:
    """Member pods (by label `staticfleet.io/ordinal`) with their /status, keyed by pod uid."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        ordinal = (meta.get("labels") or {}).get("staticfleet.io/ordinal")
        if ordinal is None:
            continue
        conds = (pod.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
        st = statuses.get(meta.get("uid", "")) or {}
        records = st.get("recordsProcessed")
        out.append(MemberSample(
            ordinal=int(ordinal), uid=meta.get("uid", ""), ready=ready,
            deleting=bool(meta.get("deletionTimestamp")),
            records=int(records) if records is not None else None,
            process_start=st.get("processStart"),
            standby=st.get("standby") is not None,
        ))
    # The serving pod of an ordinal first: a standby replacement beside it is not the member.
    return tuple(sorted(out, key=lambda m: (m.ordinal, m.deleting, m.standby)))


# ---------------------------------------------------------------------------------------------
# Pure: samples -> series, spans, progress
# ---------------------------------------------------------------------------------------------


def cumulative_processed(samples: Sequence[Sample]) -> dict[int, list[tuple[float, int]]]:
    """Per ordinal: [(t, records processed by all of its processes so far)].

    Each process's counter is kept at the highest value seen, so a restart adds a new counter
    instead of resetting the sum. A member that does not answer keeps its last total.
    """
    best: dict[int, dict[tuple[str, float | None], int]] = {}
    series: dict[int, list[tuple[float, int]]] = {}
    for s in samples:
        for m in s.members:
            if m.records is None:
                continue
            counters = best.setdefault(m.ordinal, {})
            key = (m.uid, m.process_start)
            counters[key] = max(counters.get(key, 0), m.records)
        for ordinal, counters in best.items():
            series.setdefault(ordinal, []).append((s.t, sum(counters.values())))
    return series


def processed_total(samples: Sequence[Sample]) -> int:
    return sum(pts[-1][1] for pts in cumulative_processed(samples).values() if pts)


def throughput(cumulative: Mapping[int, Sequence[tuple[float, int]]],
               window: float = THROUGHPUT_WINDOW_S) -> dict[int, list[tuple[float, float]]]:
    """Records per second per ordinal, averaged over the last `window` seconds at each point
    (batches arrive in bursts; a per-second difference would mostly show the batch size)."""
    out: dict[int, list[tuple[float, float]]] = {}
    for ordinal, pts in cumulative.items():
        rates: list[tuple[float, float]] = []
        j = 0
        for t, total in pts[1:]:
            while j < len(pts) - 1 and pts[j + 1][0] <= t - window:
                j += 1
            t0, total0 = pts[j]
            if t > t0:
                rates.append((t, (total - total0) / (t - t0)))
        out[ordinal] = rates
    return out


def restart_spans(samples: Sequence[Sample]) -> dict[int, list[Span]]:
    """Per ordinal: [(stopped, back)] for every time its pod was replaced.

    `stopped` is the operator's `inFlight[].stoppedAt` for the member when the status shows it,
    else the first sample in which the old pod is terminating or gone; `back` is the first
    sample in which a pod with a new uid is Ready (None if it never was).
    """
    spans: dict[int, list[Span]] = {}
    ordinals = sorted({m.ordinal for s in samples for m in s.members})
    for ordinal in ordinals:
        found: list[Span] = []
        uid: str | None = None
        start: float | None = None
        last_back = float("-inf")
        for s in samples:
            m = s.member(ordinal)
            if uid is None:
                uid = m.uid if m is not None else None
                continue
            if start is None:
                stopped = next((at for o, at in s.rollout.in_flight
                                if o == ordinal and at > last_back), None)
                if stopped is not None:
                    start = stopped
                elif m is None or m.deleting or m.uid != uid:
                    start = s.t
            if start is not None and m is not None and m.uid != uid and m.ready \
                    and not m.deleting:
                found.append((start, s.t))
                uid, start, last_back = m.uid, None, s.t
        if start is not None:
            found.append((start, None))
        spans[ordinal] = found
    return spans


def processing(sample: Sample) -> int:
    """Members whose current process has processed records (a member is Ready, in the group,
    before its Spark session has started; it processes only after)."""
    return len({m.ordinal for m in sample.members if not m.deleting and (m.records or 0) > 0})


def progress_line(elapsed: float, label: str, sample: Sample, members: int,
                  processed: int) -> str:
    """One line of the progress view, e.g.
    `[ 92.3s] rolling   restarted 1/3  member 2 away 3.1s / session 45.0s  ready 2/3
    processing 1/3  processed 12,345`."""
    ro = sample.rollout
    parts = [f"[{elapsed:6.1f}s] {label:<9}", f"restarted {ro.restarted}/{members}"]
    if ro.current is not None and ro.current_back_after is not None:
        parts.append(f"member {ro.current} back after {ro.current_back_after:.1f}s, "
                     "until its first batch")
    elif ro.current is not None and ro.current_stopped_at is not None:
        away = max(0.0, sample.t - ro.current_stopped_at)
        session = f" / session {ro.session_ms / 1000:.1f}s" if ro.session_ms else ""
        parts.append(f"member {ro.current} away {away:.1f}s{session}")
    elif ro.current is not None and ro.current_phase == "Preparing":
        parts.append(f"member {ro.current}: replacement warming up in standby")
    ready = sum(1 for m in sample.members if m.ready and not m.deleting)
    parts.append(f"ready {ready}/{members}")
    parts.append(f"processing {processing(sample)}/{members}")
    parts.append(f"processed {processed:,}")
    return "  ".join(parts)


# ---------------------------------------------------------------------------------------------
# Pure: the ConsumerGroup and the report
# ---------------------------------------------------------------------------------------------


def demo_group(example: Mapping[str, Any], *, bootstrap: str, members: int,
               output: Path) -> dict[str, Any]:
    """The example ConsumerGroup pointed at the local broker and topic, Spark on one core (to
    spare the machine), Parquet under `output`."""
    obj: dict[str, Any] = json.loads(json.dumps(example))
    spec = obj["spec"]
    obj["metadata"]["name"] = GROUP
    obj["metadata"]["namespace"] = NAMESPACE
    spec["replicas"] = members
    spec["kafka"]["bootstrapServers"] = bootstrap
    spec["kafka"]["topics"] = [TOPIC]
    spec["processing"]["spark"]["master"] = "local[1]"
    spec["processing"]["sink"] = {"type": "parquet", "path": str(output)}
    spec["processing"]["deadLetterTopic"] = DLQ_TOPIC
    return obj


def build_report(*, env_name: str, root: Path, members: int, final: Mapping[str, Any],
                 produced: int, committed: int, end_offsets: int, broker_generations: int,
                 output: Mapping[str, Any], spans: Mapping[int, Sequence[Span]],
                 seconds: Mapping[str, float], plot: Path, kubeconfig: Path,
                 torn_down: bool, panels: Path | None = None,
                 panel_series: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The final report (also the `--json` output)."""
    st = final.get("status") or {}
    ro = st.get("rollout") or {}
    observed = [round(b - a, 1) for ss in spans.values() for a, b in ss if b is not None]
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
        "absencesSeenS": sorted(observed),
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


# ---------------------------------------------------------------------------------------------
# I/O
# ---------------------------------------------------------------------------------------------


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


class Demo:
    """One run of the demo: the environment, the clock, the samples, the output."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.members = int(args.members)
        self.out = sys.stderr if args.json else sys.stdout
        self.started = time.monotonic()
        self.seconds: dict[str, float] = {}
        self.samples: list[Sample] = []
        self.env: Any = None
        self.metrics_port = 0
        self.prometheus: Any = None

    # -- printing and timing --------------------------------------------------------------

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def phase(self, key: str, what: str, since: float) -> None:
        took = time.monotonic() - since
        self.seconds[key] = took
        self.say(f"[{self.elapsed():6.1f}s] {what} in {took:.1f}s")

    # -- the cluster ------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        from staticfleet_dev.testkit.kube import kubectl

        try:
            return kubectl(self.env.kubeconfig, *args, input=input, check=check,
                           timeout=timeout)
        except AssertionError as exc:
            raise DemoFailed(str(exc)) from None

    def observe(self) -> tuple[Sample, dict[str, Any]]:
        """Pods and the ConsumerGroup in one kubectl call, and each member's /status."""
        from staticfleet.observe.memberhttp import read_member_status

        t = time.time()
        proc = self.kubectl("-n", NAMESPACE, "get", "pods,consumergroups", "-o", "json",
                            check=False, timeout=20)
        items: list[dict[str, Any]] = (json.loads(proc.stdout)["items"]
                                       if proc.returncode == 0 else [])
        pods = [i for i in items if i.get("kind") == "Pod"]
        cg: dict[str, Any] = next((i for i in items if i.get("kind") == "ConsumerGroup"), {})
        statuses = {
            p["metadata"]["uid"]: read_member_status(ip, MEMBER_PORT, timeout=1.0)
            for p in pods if (ip := (p.get("status") or {}).get("podIP"))
        }
        sample = Sample(t=t, members=member_samples(pods, statuses), rollout=rollout_view(cg))
        self.samples.append(sample)
        return sample, cg

    def watch(self, label: str, *, until: Callable[[dict[str, Any], Sample], bool] | None = None,
              at_least: float = 0.0, timeout: float = 0.0, every: float = 1.0,
              ) -> dict[str, Any]:
        """Sample once a second and print a progress line every `every` seconds; return the
        ConsumerGroup once `at_least` seconds have passed and `until(cg, sample)` holds; fail
        after `timeout` (0: none)."""
        begin = time.monotonic()
        printed = float("-inf")
        while True:
            tick = time.monotonic()
            sample, cg = self.observe()
            shown = label
            if sample.rollout.phase in ("Pending", "Rolling", "Paused", "AtRisk", "Stopped"):
                shown = sample.rollout.phase.lower()
            if tick - printed >= every - 0.05:
                printed = tick
                self.say(progress_line(self.elapsed(), shown, sample, self.members,
                                       processed_total(self.samples)))
            waited = time.monotonic() - begin
            if waited >= at_least and cg and (until is None or until(cg, sample)):
                return cg
            if sample.rollout.phase == "Stopped":
                raise DemoFailed(f"the operator stopped the rollout: {cg['status']['rollout']}")
            if timeout and waited > timeout:
                raise DemoFailed(f"{label}: not done after {timeout:.0f}s; ConsumerGroup status:"
                                 f"\n{json.dumps(cg.get('status'), indent=1)[:3000]}")
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))

    def start_operator(self) -> None:
        """The operator as a process registered with the environment, so that `staticfleet
        env down` stops it."""
        from staticfleet_dev.testkit.operator import OperatorProcess

        op = OperatorProcess(kubeconfig=self.env.kubeconfig, log=self.env.root / "operator.log",
                             env=self.env).start()
        self.metrics_port = op.metrics_port

    def start_prometheus(self) -> None:
        """A real Prometheus scraping the operator and the members (as a cluster's would), so the
        demo can draw what the shipped dashboard shows."""
        from staticfleet_dev.prometheus import ALERT_RULES, Prometheus, scrape_config

        self.prometheus = Prometheus(workdir=self.env.root / "prometheus", config=scrape_config(
            operator_target=f"127.0.0.1:{self.metrics_port}", kubeconfig=self.env.kubeconfig,
            rule_files=[ALERT_RULES]))
        try:
            self.prometheus.start()
        except AssertionError as exc:
            raise DemoFailed(f"Prometheus did not start: {exc}") from None

    def stop_prometheus(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()
            self.prometheus = None

    def dashboard_panels(self, start: float, end: float) -> list[Any]:
        """The shipped dashboard's rebalance, lag and per-member throughput panels, as
        Prometheus answers their queries over [start, end] with this group selected."""
        from staticfleet_dev import dashboard

        out = []
        for title, unit in DEMO_PANELS:
            graph = next(g for g in dashboard.graphs() if g.title == title)
            expr, legend = graph.queries[0]
            # Grafana's $__rate_interval for a 2 s scrape interval and a 2 s step: max(4 x
            # scrape interval, step + scrape interval) = 8 s. A 1m window would smooth the
            # members' first minute into a ramp (their series start inside it).
            answer = self.prometheus.query_range(
                dashboard.substitute(expr, NAMESPACE, GROUP, rate_interval="8s"), start, end,
                step=2.0)
            out.append((title, unit, [
                (_legend(legend, one["metric"]), [(float(t), float(v)) for t, v in one["values"]])
                for one in answer]))
        return out

    def setup_cluster(self) -> None:
        from staticfleet_dev.testkit.kube import create_namespace, install_crds

        try:
            install_crds(self.env.kubeconfig)
            create_namespace(self.env.kubeconfig, NAMESPACE)
        except (AssertionError, FileNotFoundError) as exc:
            raise DemoFailed(str(exc)) from None
        self.start_operator()
        self.start_prometheus()

    def generations(self) -> int:
        """Generations the broker's coordinator stabilized for the group so far."""
        text = self.env.kafka_log.read_text(errors="replace")
        return len(re.findall(rf"Stabilized group {re.escape(GROUP)} generation \d+", text))

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        from staticfleet_dev import environment
        from staticfleet_dev.kafka import KafkaSettings
        from staticfleet_dev.plot import write_panels_png, write_throughput_png
        from staticfleet_dev.stream import SteadyProducer, committed_offsets, create_topic
        from staticfleet_dev.testkit.groups import ready_and_idle, rollout_complete
        from staticfleet_dev.testkit.kube import load_example, to_yaml

        args = self.args
        t = time.monotonic()
        self.say(f"[{self.elapsed():6.1f}s] starting the local environment {args.name!r} "
                 "(Kafka broker, Kubernetes control plane, local node)")
        self.env = env = environment.up(args.name, kafka_settings=KafkaSettings(),
                                        brokers=int(getattr(args, "brokers", 1)))
        self.phase("envUp", f"environment up (broker {env.bootstrap}, root {env.root})", t)

        t = time.monotonic()
        self.setup_cluster()
        create_topic(env.bootstrap, TOPIC, PARTITIONS)
        create_topic(env.bootstrap, DLQ_TOPIC, 1)
        producer = SteadyProducer(env.bootstrap, TOPIC, rate=args.rate).start()
        output = env.root / "output" / "orders-counts"
        try:
            example = load_example(EXAMPLE)
        except FileNotFoundError as exc:
            raise DemoFailed(str(exc)) from None
        group = demo_group(example, bootstrap=env.bootstrap, members=self.members,
                           output=output)
        self.kubectl("apply", "-f", "-", input=to_yaml(group))
        self.phase("setup", f"CRD installed, operator running, topic {TOPIC!r} "
                            f"({PARTITIONS} partitions), producing {args.rate}/s, "
                            f"ConsumerGroup {NAMESPACE}/{GROUP} applied", t)

        t = time.monotonic()
        self.watch("starting", timeout=READY_TIMEOUT_S, every=5.0,
                   until=lambda cg, s: ready_and_idle(cg) and processing(s) == self.members)
        self.phase("membersReady", f"{self.members} members Ready and processing", t)

        t = time.monotonic()
        self.watch("steady", at_least=args.settle)
        self.phase("steadyBefore", "steady consumption", t)

        generations_before = self.generations()
        trigger = time.time()
        t = time.monotonic()
        self.say(f"[{self.elapsed():6.1f}s] rolling restart: "
                 f"kubectl -n {NAMESPACE} patch cg {GROUP} spec.rollout.restartNonce")
        self.kubectl("-n", NAMESPACE, "patch", "cg", GROUP, "--type=merge", "-p", json.dumps(
            {"spec": {"rollout": {"restartNonce": f"demo-{int(trigger)}"}}}))
        final = self.watch("rolling", until=lambda cg, _s: rollout_complete(cg),
                           timeout=ROLLOUT_TIMEOUT_S)
        finished = time.time()
        self.phase("rollout", "rollout complete", t)

        t = time.monotonic()
        # Back in the group is not yet processing: a new member first starts its Spark session.
        self.watch("steady", at_least=args.settle, timeout=READY_TIMEOUT_S,
                   until=lambda _cg, s: processing(s) == self.members)
        self.phase("steadyAfter", "every member processing again, steady consumption", t)

        t = time.monotonic()
        produced = producer.stop()
        if producer.failed:
            raise DemoFailed(f"the producer failed: {producer.failed[:5]}")
        self.say(f"[{self.elapsed():6.1f}s] producer stopped after {produced:,} records; "
                 "waiting until the group has committed them all")
        offsets = [0, 0]

        def caught_up(_cg: dict[str, Any], _s: Sample) -> bool:
            offsets[:] = committed_offsets(env.bootstrap, GROUP, TOPIC)
            return offsets[0] >= offsets[1] >= produced

        final = self.watch("draining", until=caught_up, timeout=DRAIN_TIMEOUT_S)
        self.phase("drain", "group caught up", t)

        spans = restart_spans([s for s in self.samples if s.t >= trigger - 5])
        rollout_samples = [s for s in self.samples if s.t >= trigger - args.settle]
        plot = env.root / PLOT_NAME
        if args.down:
            from staticfleet_dev.tools import cache_root

            plot = cache_root() / "demo" / f"{args.name}-throughput.png"
        session_ms = rollout_view(final).session_ms
        write_throughput_png(
            plot, throughput(cumulative_processed(rollout_samples)), handoff_shades(final),
            t0=trigger,
            rollout=(trigger, finished), session_s=session_ms / 1000 if session_ms else None,
            expected=args.rate / self.members, notes=handoff_notes(final),
            title=f"{NAMESPACE}/{GROUP}: records/s per member over a rolling restart "
                  f"({args.rate} records/s produced)")
        panels_plot = plot.with_name(plot.name.replace("throughput", "dashboard"))
        panels = self.dashboard_panels(trigger - args.settle, time.time())
        write_panels_png(
            panels_plot, panels, t0=trigger,
            rollout=(trigger, finished),
            title=f"{NAMESPACE}/{GROUP}: the shipped Grafana dashboard's panels, as Prometheus "
                  "answered them over the demo")
        self.stop_prometheus()
        summary = parquet_summary(output)
        generations = self.generations() - generations_before
        if args.down:
            t = time.monotonic()
            environment.down(args.name)
            self.phase("down", "environment torn down", t)
        self.seconds["total"] = self.elapsed()
        return build_report(
            env_name=args.name, root=env.root, members=self.members, final=final,
            produced=produced,
            committed=offsets[0], end_offsets=offsets[1], broker_generations=generations,
            output=summary, spans=spans, seconds=self.seconds, plot=plot, panels=panels_plot,
            panel_series={title: len(series) for title, _unit, series in panels},
            kubeconfig=env.kubeconfig, torn_down=bool(args.down))

    def farewell(self, report: dict[str, Any]) -> None:
        if report["tornDown"]:
            self.say(f"everything is stopped and removed; the plot is kept at {report['plot']}")
            return
        name = self.args.name
        self.say("\nEverything is still running (the producer stopped with the demo, so the "
                 "members are idle). Look around:")
        self.say(f"  export KUBECONFIG={self.env.kubeconfig}")
        self.say(f"  kubectl -n {NAMESPACE} get cg,pods")
        self.say(f"  kubectl -n {NAMESPACE} get cg {GROUP} -o jsonpath='{{.status.rollout}}'")
        self.say(f"  operator log: {self.env.root / 'operator.log'}; "
                 f"member logs: {self.env.pod_log_dir}")
        self.say(f"Stop it all with:\n  staticfleet env down --name {name}")


def run_demo(args: argparse.Namespace) -> int:
    """Entry point of `staticfleet demo`; returns the exit code."""
    demo = Demo(args)
    try:
        report = demo.run()
    except BaseException as exc:
        demo.stop_prometheus()
        if demo.env is not None:
            demo.say(f"\nthe demo did not finish ({type(exc).__name__})")
            demo.say(f"operator log: {demo.env.root / 'operator.log'}, "
                     f"member logs: {demo.env.pod_log_dir}")
            if args.down:
                from staticfleet_dev import environment

                environment.down(args.name)
                demo.say(f"environment {args.name!r} torn down")
            else:
                demo.say(f"it is left running: staticfleet env down --name {args.name}")
        raise
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
    demo.farewell(report)
    ok = (report["rebalancesDuringRollout"] == 0 and report["processed"] == report["produced"]
          and report["membersRestarted"] == report["members"])
    return 0 if ok else 2
