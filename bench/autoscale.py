"""Autoscaling policies side by side on one load profile: staticfleet's autoscaler against a
KEDA-like offset-lag rule.

What runs is a model of a consumer group, not the system: a fleet of up to 24 partitions' worth
of members on this 2-core machine cannot show hours of load (the e2e case
tests/e2e/test_autoscaling.py shows the autoscaler on the real broker and API server, where every
change is a planned rebalance and nothing is lost). The model is stepped every `--step` seconds
of simulated time over a profile of several hours:

- members process `--capacity` records/s each once ready; a new member is ready `--start`
  seconds after the change that made it (scale-downs are immediate);
- every membership change stops the whole group for `--pause` seconds (the rebalance);
- in the sink-limited phase the group's throughput is capped (`--sink-cap`) whatever its size:
  more members cannot help there (an ineffective scale-up);
- what is not processed is lag; lag in seconds = backlog / records processed per second.

Policies, each deciding on what it could observe:
- staticfleet: `decisions.autoscaler.rules.decide_autoscaling` itself, every 10 s (the operator's
  resync), with its status memory carried from pass to pass, and members' throughput as
  `/status` reports it (rate, busy share, full-batch capacity);
- keda: KEDA's Kafka scaler through an HPA: desired = ceil(total lag / `--lag-threshold`),
  at most the partition count, at least 1, every 15 s, with the HPA's default behaviour (up at
  most max(100 %, 4 members) per 15 s; down to the highest desired count of the last 300 s).

Printed per policy: membership changes (total, per hour on average, the most in any hour),
replica counts that do not divide the 24 partitions (share of the time), lag in seconds (p50,
p99 over the phases where members can keep up, p99 and max over everything), seconds the group
stood still with a backlog (rebalance pauses), and seconds with more members than the sink can
use in the sink-limited stretch (an ineffective scale-up held).

`--real` runs both policies on the real system instead, compressed to fit this machine: the
local environment (Kafka broker, Kubernetes control plane, local node), the operator, members
processing through one Spark Connect server with a latency-bound transform (0.3 s per batch of
at most 50 records, `staticfleet_dev.testkit.transforms`), 24 partitions, an 11.5-minute profile
(base, a 4x step, base, a slow wave), one group per policy in turn: staticfleet's autoscaler
(`spec.autoscaling`, maxReplicas 8, target 10 s, windows of 60 s, budget 4 an hour), and a
KEDA-like scaler in this process writing the scale subresource as its own field manager (the
ConsumerGroup without `spec.autoscaling`: staticfleet only makes each of its steps planned).
Sampled every 5 s: lag (end minus committed offsets) in seconds at the records/s committed over
the last 10 s, spec.replicas; at the end: rebalances and planned rebalances, and every produced
record in the output topic.

Run: python bench/autoscale.py [--hours-scale 1.0] [--pause 2] [--start 30]
     python bench/autoscale.py --real
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from staticfleet import apply
from staticfleet.decisions.autoscaler.load import Load, MemberLoad
from staticfleet.decisions.autoscaler.rules import Situation, decide_autoscaling
from staticfleet.decisions.spec.autoscaling import AutoscalingSpec
from staticfleet_dev import environment
from staticfleet_dev.kafka import KafkaSettings
from staticfleet_dev.spark_connect import start_connect_server
from staticfleet_dev.stream import SteadyProducer, committed_offsets, read_all
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import create_namespace, install_crds, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess

PARTITIONS = 24
T0 = datetime(2026, 11, 25, tzinfo=UTC)


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    arrival: Callable[[float], float]
    """records/s at t seconds into the phase"""
    sink_cap: float | None = None
    elastic: bool = True
    """More members can keep the lag on target here (not the sink-limited stretch, nor the
    drain of its backlog after it)."""


def profile(base: float, scale: float, sink_cap: float) -> list[Phase]:
    """Base load, a 4x step, back to base, a sink-limited stretch (twice the base against a
    sink that takes little more than the base's members do), base, a slow wave, base."""
    def const(v: float) -> Callable[[float], float]:
        return lambda t: v
    wave_s = 7200 * scale
    return [
        Phase("base", 1800 * scale, const(base)),
        Phase("4x step", 1200 * scale, const(4 * base)),
        Phase("base again", 1800 * scale, const(base)),
        Phase("sink-limited", 1200 * scale, const(2 * base), sink_cap=sink_cap, elastic=False),
        Phase("base, draining", 2400 * scale, const(base), elastic=False),
        Phase("slow wave", wave_s, lambda t: base * (1.25 + 0.75 * math.sin(
            2 * math.pi * t / wave_s))),
        Phase("base at the end", 1800 * scale, const(base)),
    ]


@dataclass
class Group:
    """The modeled group: members, their readiness, the rebalance pause, the backlog."""

    capacity: float
    pause_s: float
    start_s: float
    replicas: int
    ready_at: list[float] = field(default_factory=list)
    paused_until: float = 0.0
    lag: float = 0.0
    changes: list[float] = field(default_factory=list)
    saturated_until: float = -1.0
    produced: float = 0.0
    ends: tuple[float, int] = (-60.0, 0)
    """(when last read, the end offsets' sum then), as the operator reads them"""

    def __post_init__(self) -> None:
        self.ready_at = [0.0] * self.replicas

    def scale(self, to: int, now: float) -> None:
        if to == self.replicas:
            return
        self.changes.append(now)
        self.paused_until = now + self.pause_s
        if to > self.replicas:
            self.ready_at += [now + self.start_s] * (to - self.replicas)
        else:
            self.ready_at = self.ready_at[:to]
        self.replicas = to

    def ready(self, now: float) -> int:
        return sum(1 for at in self.ready_at if at <= now)

    def step(self, now: float, dt: float, arrival: float, sink_cap: float | None) -> float:
        """Advance by dt; records processed per second in this step."""
        self.lag += arrival * dt
        self.produced += arrival * dt
        if now - self.ends[0] >= 60:  # the operator reads the end offsets once a minute
            self.ends = (now, int(self.produced))
        if now < self.paused_until:
            return 0.0
        can = self.ready(now) * self.capacity
        if sink_cap is not None:
            can = min(can, sink_cap)
        done = min(self.lag, can * dt)
        self.lag -= done
        if done >= 0.95 * can * dt and can > 0:
            self.saturated_until = now + 900  # full batches: the capacity is known 15 min
        return done / dt


class Staticfleet:
    """The operator's decision, every 10 s, its status memory carried over."""

    every_s = 10.0

    def __init__(self, spec: AutoscalingSpec) -> None:
        self.spec = spec
        self.previous: Mapping[str, Any] = {}

    def decide(self, g: Group, now: float, rate: float) -> int | None:
        ready = g.ready(now)
        per = rate / ready if ready else 0.0
        busy = min(1.0, per / g.capacity) if g.capacity else 0.0
        known = g.capacity if now < g.saturated_until else None
        load = Load(lag_records=int(g.lag), lag_age_s=5.0, members=tuple(
            MemberLoad(per, busy, known) for _ in range(ready)),
            # the model produces to the topic as a whole: its sum stands as one partition's
            end_offsets={("t", 0): (now - g.ends[0], g.ends[1])})
        situation = Situation(replicas=g.replicas, ready=ready,
                              group_state="Stable" if now >= g.paused_until else
                              "PreparingRebalance", rollout_in_progress=False)
        out = decide_autoscaling(self.spec, situation, load, {"t": PARTITIONS}, "range",
                                 self.previous, T0 + timedelta(seconds=now))
        self.previous = {k: v for k, v in out.status.items() if v is not None}
        return out.scale_to


class Keda:
    """KEDA's Kafka scaler (total lag / lagThreshold) through an HPA's default behaviour."""

    every_s = 15.0

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.recommendations: list[tuple[float, int]] = []

    def decide(self, g: Group, now: float, rate: float) -> int | None:
        wanted = max(1, min(PARTITIONS, math.ceil(g.lag / self.threshold)))
        self.recommendations = [(t, n) for t, n in self.recommendations if now - t < 300]
        self.recommendations.append((now, wanted))
        if wanted > g.replicas:
            return min(wanted, max(2 * g.replicas, g.replicas + 4))
        stabilized = max(n for _, n in self.recommendations)
        return stabilized if stabilized < g.replicas else None


def run(policy: Staticfleet | Keda, phases: list[Phase], args: argparse.Namespace
        ) -> dict[str, Any]:
    g = Group(capacity=args.capacity, pause_s=args.pause, start_s=args.start, replicas=8)
    now, next_decision = 0.0, 0.0
    lag_s: list[float] = []
    elastic_lag_s: list[float] = []
    uneven = ineffective = 0.0
    rate = 0.0
    for phase in phases:
        began = now
        useful = math.ceil(phase.sink_cap / args.capacity) if phase.sink_cap else PARTITIONS
        while now < began + phase.seconds:
            arrival = phase.arrival(now - began)
            rate = g.step(now, args.step, arrival, phase.sink_cap)
            lag_s.append(g.lag / rate if rate > 0 else (0.0 if g.lag < 1 else math.inf))
            if phase.elastic:
                elastic_lag_s.append(lag_s[-1])
            uneven += args.step if PARTITIONS % g.replicas else 0.0
            if g.replicas > useful:
                ineffective += args.step
            if now >= next_decision:
                to = policy.decide(g, now, rate)
                if to is not None:
                    g.scale(to, now)
                next_decision = now + policy.every_s
            now += args.step
    hours = now / 3600
    per_hour = max((sum(1 for c in g.changes if t <= c < t + 3600)
                    for t in range(0, int(now), 60)), default=0)
    finite = sorted(v for v in lag_s if math.isfinite(v))
    elastic = sorted(v for v in elastic_lag_s if math.isfinite(v))
    stopped = sum(1 for v in lag_s if not math.isfinite(v)) * args.step
    return {"changes": len(g.changes), "changesPerHour": len(g.changes) / hours,
            "mostInAnHour": per_hour, "unevenShare": uneven / now,
            "lagP50S": statistics.median(finite), "lagP99S": p99(finite),
            "lagP99ElasticS": p99(elastic), "lagMaxS": finite[-1],
            "stoppedWithBacklogS": stopped, "uselessMembersS": ineffective, "hours": hours}


def p99(values: list[float]) -> float:
    return values[min(len(values) - 1, int(len(values) * 0.99))]


# --- the real system, compressed --------------------------------------------------------------

REAL_MAX = 8
REAL_CAPACITY = 100.0
"""records/s one latency-bound member processes, about (50 records per 0.3 s call and a job)"""
REAL_BASE = 60.0
REAL_TARGET_S = 10


def real_profile() -> list[tuple[str, float, Callable[[float], float]]]:
    """(name, seconds, records/s at t): base, a 4x step, base, a slow wave; 11.5 minutes."""
    return [("base", 90, lambda t: REAL_BASE), ("4x step", 180, lambda t: 4 * REAL_BASE),
            ("base again", 120, lambda t: REAL_BASE),
            ("slow wave", 300, lambda t: REAL_BASE * (1.25 + 0.75 * math.sin(
                2 * math.pi * t / 300)))]


@dataclass
class Sampled:
    """What a run saw every 5 s: (seconds, lag records, lag seconds, spec.replicas)."""

    rows: list[tuple[float, int, float, int]] = field(default_factory=list)


class RealKeda:
    """The KEDA-like rule (`Keda`) on the real group: lag from the broker, the decision every
    15 s, written through the scale subresource as field manager `keda-like-bench`."""

    def __init__(self, threshold: float) -> None:
        self.rule = Keda(threshold)
        self.writes = 0

    def step(self, kube: apply.Kube, namespace: str, name: str, lag: int, replicas: int,
             now: float) -> None:
        seen = Group(capacity=0, pause_s=0, start_s=0, replicas=replicas)
        seen.lag = lag
        to = self.rule.decide(seen, now, 0.0)
        if to is not None and to != replicas:
            self.writes += 1
            kube.custom.patch_namespaced_custom_object_scale(
                "staticfleet.io", "v1alpha1", namespace, "consumergroups", name,
                {"spec": {"replicas": min(REAL_MAX, to)}}, field_manager="keda-like-bench",
                _content_type="application/merge-patch+json")


def real_run(policy: str, env: environment.LocalEnv, connect_url: str,
             kube: apply.Kube) -> dict[str, Any]:
    """One group through the profile under `policy` (staticfleet or keda-like)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    tag = uuid.uuid4().hex[:6]
    name, namespace = f"auto-{policy[:4]}-{tag}", f"bench-autoscale-{tag}"
    topic, out = f"in-{tag}", f"out-{tag}"
    admin = AdminClient({"bootstrap.servers": env.bootstrap})
    for future in admin.create_topics([NewTopic(t, 24, 1) for t in (topic, out)]).values():
        future.result(30)
    create_namespace(env.kubeconfig, namespace)
    spec = groups.consumer_group(name, env.bootstrap, topic, replicas=1, out_topic=out,
                                 max_records=50, connect_url=connect_url)
    spec["spec"]["processing"]["transform"] = "staticfleet_dev.testkit.transforms:latency_bound"
    spec["spec"]["processing"]["batch"]["maxWaitMs"] = 200
    if policy == "staticfleet":
        spec["spec"]["autoscaling"] = {
            "minReplicas": 1, "maxReplicas": REAL_MAX, "targetLagSeconds": REAL_TARGET_S,
            "scaleDownWindowSeconds": 60, "scaleUpCheckSeconds": 60,
            "maxMembershipChangesPerHour": 4}
    first = groups.start(env.kubeconfig, namespace, spec)["status"]
    keda = RealKeda(REAL_TARGET_S * REAL_CAPACITY) if policy == "keda-like" else None
    producers: list[SteadyProducer] = []
    sampled = Sampled()
    stop = threading.Event()

    def sample() -> None:
        began, last = time.monotonic(), None
        next_keda = 0.0
        while not stop.wait(5.0):
            now = time.monotonic() - began
            committed, end = committed_offsets(env.bootstrap, name, topic)
            rate = (committed - last[1]) / (now - last[0]) if last else 0.0
            last = (now, committed)
            lag = end - committed
            replicas = int(groups.get(env.kubeconfig, namespace, name)["spec"]["replicas"])
            lag_s = lag / rate if rate > 0 else (0.0 if lag == 0 else math.inf)
            sampled.rows.append((now, lag, lag_s, replicas))
            if keda is not None and now >= next_keda:
                keda.step(kube, namespace, name, lag, replicas, now)
                next_keda = now + keda.rule.every_s

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for phase, seconds, rate_at in real_profile():
            print(f"  {policy}: {phase} ({seconds:.0f} s)", flush=True)
            began = time.monotonic()
            while time.monotonic() - began < seconds:
                rate = rate_at(time.monotonic() - began)
                producer = SteadyProducer(env.bootstrap, topic, rate=rate).start()
                producers.append(producer)
                time.sleep(min(15.0, seconds - (time.monotonic() - began)))
                producer.stop()
    finally:
        for producer in producers:
            producer.stop()
        stop.set()
        sampler.join(10)
    groups.wait_caught_up(env.bootstrap, name, [topic], timeout=300)
    produced = [v for p in producers for v in p.produced]
    missing = set(produced) - set(read_all(env.bootstrap, out))
    final = groups.get(env.kubeconfig, namespace, name)["status"]
    counts = [r[3] for r in sampled.rows]
    # The changes each policy made (the 5 s samples miss one undone within a second).
    changes = (keda.writes if keda is not None
               else len((final.get("autoscaling") or {}).get("changes") or ()))
    finite = sorted(r[2] for r in sampled.rows if math.isfinite(r[2]))
    kubectl(env.kubeconfig, "delete", "namespace", namespace, "--wait=false")
    return {"policy": policy, "changes": changes,
            "rebalances": final["rebalances"] - first.get("rebalances", 0),
            "plannedRebalances": (final.get("plannedRebalances", 0)
                                  - first.get("plannedRebalances", 0)),
            "unevenShare": sum(1 for c in counts if 24 % c) / max(1, len(counts)),
            "lagP50S": statistics.median(finite) if finite else None,
            "lagP99S": p99(finite) if finite else None, "lagMaxS": finite[-1] if finite else None,
            "replicasSeen": sorted(set(counts)), "produced": len(produced),
            "lost": len(missing), "autoscaling": final.get("autoscaling", {}).get("changes")}


def real_system(policies: tuple[str, ...] = ("staticfleet", "keda-like")) -> int:
    name = "bench-autoscale"
    environment.down(name)
    env = environment.up(name, kafka_settings=KafkaSettings.for_tests())
    connect = start_connect_server(env.root)
    install_crds(env.kubeconfig)
    op = OperatorProcess(kubeconfig=env.kubeconfig, log=env.root / "operator.log",
                         env=env).start()
    kube = apply.Kube(apply.load_client(str(env.kubeconfig)))
    results = []
    try:
        for policy in policies:
            results.append(real_run(policy, env, connect.url, kube))
            print(json.dumps(results[-1]), flush=True)
    finally:
        op.stop()
        connect.stop()
        environment.down(name)
    print(f"\nthe real system, {sum(s for _, s, _ in real_profile()) / 60:.0f} minutes per "
          f"policy (base {REAL_BASE:.0f} records/s, a 4x step, a slow wave), 24 partitions, "
          f"at most {REAL_MAX} members of about {REAL_CAPACITY:.0f} records/s; staticfleet "
          f"target {REAL_TARGET_S} s; keda-like lagThreshold "
          f"{REAL_TARGET_S * REAL_CAPACITY:.0f}")
    keys = ("changes", "rebalances", "plannedRebalances", "unevenShare", "lagP50S", "lagP99S",
            "lagMaxS", "produced", "lost")
    print(f"{'':>20} " + " ".join(f"{r['policy']:>12}" for r in results))
    for key in keys:
        print(f"{key:>20} " + " ".join(f"{_shown(r[key]):>12}" for r in results))
    return 0 if all(r["lost"] == 0 for r in results) else 1


def _shown(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=float, default=500.0,
                        help="base records/s (4x of it needs 83 %% of 24 members)")
    parser.add_argument("--capacity", type=float, default=100.0, help="records/s per member")
    parser.add_argument("--pause", type=float, default=2.0,
                        help="seconds a membership change stops the group")
    parser.add_argument("--start", type=float, default=30.0,
                        help="seconds a new member takes to be ready")
    parser.add_argument("--sink-cap", type=float, default=850.0,
                        help="records/s the sink takes in the sink-limited phase")
    parser.add_argument("--lag-threshold", type=float, default=1000.0,
                        help="the KEDA-like rule's lagThreshold (records per member)")
    parser.add_argument("--target", type=float, default=30.0, help="targetLagSeconds")
    parser.add_argument("--hours-scale", type=float, default=1.0,
                        help="scale every phase's length")
    parser.add_argument("--step", type=float, default=1.0, help="simulated seconds per step")
    parser.add_argument("--real", action="store_true",
                        help="run the policies on the real system (about 15 minutes each)")
    parser.add_argument("--policies", default="staticfleet,keda-like",
                        help="with --real: which, in this order")
    args = parser.parse_args()
    if args.real:
        return real_system(tuple(args.policies.split(",")))
    phases = profile(args.base, args.hours_scale, args.sink_cap)
    spec = AutoscalingSpec(min_replicas=1, max_replicas=PARTITIONS,
                           target_lag_seconds=args.target)
    results = {"staticfleet": run(Staticfleet(spec), phases, args),
               "keda-like": run(Keda(args.lag_threshold), phases, args)}
    names = ", ".join(p.name for p in phases)
    print(f"{results['staticfleet']['hours']:.1f} simulated hours ({names}); "
          f"{PARTITIONS} partitions, {args.capacity:.0f} records/s per member, base "
          f"{args.base:.0f} records/s, a change stops the group {args.pause:.0f} s, a new member "
          f"is ready after {args.start:.0f} s; staticfleet target {args.target:.0f} s, budget 4/h; "
          f"keda-like lagThreshold {args.lag_threshold:.0f}")
    keys = ("changes", "changesPerHour", "mostInAnHour", "unevenShare", "lagP50S",
            "lagP99ElasticS", "lagP99S", "lagMaxS", "stoppedWithBacklogS", "uselessMembersS")
    print(f"{'':>20} {'staticfleet':>12} {'keda-like':>12} {'ratio':>8}")
    for key in keys:
        a, b = results["staticfleet"][key], results["keda-like"][key]
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"{key:>20} {a:12.2f} {b:12.2f} {ratio:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
