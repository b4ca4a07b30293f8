"""Fleet scale: one operator and N ConsumerGroups on this machine, the cost envelope (issue 37).

One run brings up a three-broker Kafka cluster (every request logged: API and client id), the
local control plane and local node, kwok with enough fake Nodes, the member simulator
(`staticfleet_dev.membersim`, simulating the pods on kwok's pod network and relaying the others'
requests to them) and the operator as a real process (`STATICFLEET_MEMBER_HTTP_VIA` at the
simulator). N groups of 3 members go to kwok's Nodes, each with committed offsets on the cluster;
the first 20 have 1 member and a real confluent-kafka consumer in this process under that
member's instance id, so their describes return a member. One more group, `real`, runs 2 real
members (the runtime, Spark through a Spark Connect server) on the local node, fed steadily.

Scenarios, in this order (`--scenarios` picks some; the environment is made once):
  c  the real group rolls with only it present (an operator that has only it), as the baseline;
     then the N groups are made, the operator stopped;
  a  cold start: the operator starts with the N groups present; seconds until every group was
     observed at its generation, and until every group is settled (observed, Ready, not
     Degraded); the most passes waiting for a slot (its queue depth gauge), here and at rest;
  b  at rest for --rest-minutes: pass latency p50/p90/p99 (the operator's histogram
     staticfleet_reconcile_duration_seconds over the window), Kubernetes API requests/s by verb
     and writes by resource (apiserver_request_total over the window, less what the same span
     cost with no operator running before `a`), Events/s, Kafka requests/s by API key (the
     operator's client id in the brokers' request logs), member /status reads/s (the
     simulator's count), operator RSS (parent plus children) and CPU avg and peak (5 s samples);
  c  the real group rolls among the N at rest: its longest processing gap beside the one alone;
  d  50 simulated groups roll at once (e: the operator is killed -9 10 s in and started again);
     seconds until every rollout is complete, and until every pod of theirs is replaced;
  f  the broker coordinating the real group (and a third of the groups) is stopped for 60 s and
     started: the most groups Degraded, and seconds from its return until none is.
At the end `rebalances` (new generations the brokers stabilized for the real groups over the
scenarios) and `lost` (the real group's records produced that never reached its output topic).
A figure that cannot be measured is null with its reason in `notes`.

`--shards K` runs K operators as the chart's `shards: [s1, ..., sK-1]` would, the groups given
round-robin (`staticfleet_dev.testkit.fleetshards`); the figures above are then all operators'
together, `shards` has each one's own (the groups it holds as measured, its cold start, RSS, CPU,
passes), and `groupsHeldByNone`, `groupsHeldByTwo` and `groupsHeldElsewhere` should be 0. In e
every operator is killed. With K = 1, one operator, not sharded, as before.

Run: flock /tmp/staticfleet-heavy.lock python bench/fleet_scale.py [--groups 1000] [--json]
     [--scenarios a,b,c,d,e,f] [--rest-minutes 10] [--shards 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config

from staticfleet.decisions.names import GROUP_LABEL
from staticfleet.decisions.settings import MEMBER_HTTP_VIA_ENV
from staticfleet.decisions.spec.model import API_GROUP, API_VERSION
from staticfleet_dev import environment
from staticfleet_dev.kafka import KafkaCluster, KafkaSettings
from staticfleet_dev.kwok import manifests
from staticfleet_dev.kwok.process import Kwok, start_kwok, stop_kwok
from staticfleet_dev.spark_connect import ConnectServer, start_connect_server
from staticfleet_dev.stream import SteadyProducer, read_all
from staticfleet_dev.testkit import figures, fleet, fleetshards, groups
from staticfleet_dev.testkit.consumers import PolledMember
from staticfleet_dev.testkit.kube import create_namespace, install_crds, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for

NS, REAL_NS, REAL = "fleet", "fleet-real", "real"
WITH_CONSUMER = 20
AT_ONCE = 50
SCENARIOS = "abcdef"
REQUIRED = ("coldStartSeconds", "passP50Seconds", "passP99Seconds", "kubeWritesPerSecondAtRest",
            "kafkaRequestsPerSecondAtRest", "operatorRssMiB", "operatorCpuCoresAtRest",
            "rolloutGapMsAlone", "rolloutGapMsAmong", "rebalances", "lost")


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


@dataclass
class Fleet:
    args: argparse.Namespace
    env: environment.LocalEnv
    cluster: KafkaCluster
    kwok: Kwok
    sim: fleet.SimulatorProcess
    connect: ConnectServer
    custom: client.CustomObjectsApi
    core: client.CoreV1Api
    logdir: Path
    brokers: fleet.BrokerRecords
    producer: SteadyProducer
    real_topics: tuple[str, str]
    consumers: list[PolledMember] = field(default_factory=list)
    ops: dict[str | None, OperatorProcess] = field(default_factory=dict)  # by shard
    report: dict[str, Any] = field(default_factory=dict)
    by_shard: dict[str | None, dict[str, Any]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    blocked: set[str] = field(default_factory=set)  # d's rollouts the broker's view holds
    idle: tuple[float, dict[tuple[str, str], float]] | None = None
    """The API server's requests over a span with no operator: (seconds, counts)."""

    @property
    def names(self) -> list[str]:
        return [fleet.group_name(i) for i in range(self.args.groups)]

    @property
    def real_groups(self) -> list[str]:
        return [REAL, *self.names[:WITH_CONSUMER]]

    @property
    def layout(self) -> fleetshards.Layout:
        return fleetshards.Layout(self.args.shards)

    def start_operators(self, label: str) -> dict[str | None, OperatorProcess]:
        """Every shard's operator, started at once (one, not sharded, without --shards)."""
        return fleetshards.start_all({s: OperatorProcess(
            self.env.kubeconfig, self.logdir / f"operator-{label}{f'-{s}' if s else ''}.log",
            env=self.env, extra_env={MEMBER_HTTP_VIA_ENV: self.sim.address},
            args=self.layout.args(s)) for s in self.layout.names}, timeout=300)

    def list_groups(self) -> list[dict[str, Any]]:
        """From the watch cache: a quorum read of 2,000 groups timed out (504) in a cold start."""
        return list(self.custom.list_namespaced_custom_object(
            API_GROUP, API_VERSION, NS, "consumergroups", resource_version="0")["items"])

    def api_counts(self) -> dict[tuple[str, str], float]:
        text = kubectl(self.env.kubeconfig, "get", "--raw", "/metrics", timeout=60).stdout
        return dict(figures.api_requests(text))


# --- setting up -------------------------------------------------------------------------------

def bring_up(args: argparse.Namespace, logdir: Path) -> Fleet:
    settings = KafkaSettings.for_tests()
    settings.log_requests = True
    say("environment: 3 brokers, control plane, local node ...")
    env = environment.up(args.name, kafka_settings=settings, with_node=True, brokers=3)
    install_crds(env.kubeconfig)
    for ns in (NS, REAL_NS):
        create_namespace(env.kubeconfig, ns)
    nodes = math.ceil(args.groups * fleet.MEMBERS * 1.3 / manifests.DEFAULT_PODS_PER_NODE) + 1
    say(f"kwok with {nodes} fake Nodes, the member simulator, Spark Connect ...")
    kwok = start_kwok(env.root / "kwok", env.kubeconfig, nodes=nodes)
    env.records.extend(kwok.records)
    sim = fleet.start_simulator(env.root, env.kubeconfig)
    env.records.append(sim.record)
    environment.save(env)
    connect = start_connect_server(env.root)
    cluster = env.cluster()
    for t in range(fleet.TOPICS):
        cluster.make_topic(fleet.topic_of(t), fleet.PARTITIONS)
    real_topics = (cluster.make_topic("real-in", 6), cluster.make_topic("real-out", 6))
    say(f"offsets committed for {args.groups} groups ...")
    fleet.commit_offsets(env.bootstrap, {fleet.group_name(i): fleet.topic_of(i)
                                         for i in range(args.groups)})
    api = config.new_client_from_config(config_file=str(env.kubeconfig))
    f = Fleet(args, env, cluster, kwok, sim, connect, client.CustomObjectsApi(api),
              client.CoreV1Api(api), logdir, fleet.BrokerRecords(cluster),
              SteadyProducer(env.bootstrap, real_topics[0], rate=args.rate).start(),
              real_topics)
    f.consumers = [PolledMember(env.bootstrap, g, fleet.topic_of(i), instance=f"{g}-0")
                   for i, g in enumerate(f.names[:WITH_CONSUMER])]
    fleet.keep_stand_ins(sim, f.consumers)  # so that their pods are those members
    return f


def make_fleet(f: Fleet) -> None:
    docs = [fleet.sim_group(g, NS, f.env.bootstrap, fleet.topic_of(i),
                            replicas=1 if i < WITH_CONSUMER else fleet.MEMBERS,
                            labels=f.layout.labels(i))
            for i, g in enumerate(f.names)]
    t0 = time.monotonic()
    fleet.apply_all(f.env.kubeconfig, docs)
    say(f"{len(docs)} ConsumerGroups applied in {time.monotonic() - t0:.0f} s")


def measure_idle(f: Fleet) -> None:
    """The API server's requests over a span with no operator running (kwok's Leases, the
    controller manager, the local node, ...), to take off the at-rest window."""
    span = f.args.idle_seconds
    before, t0 = f.api_counts(), time.monotonic()
    time.sleep(span)
    f.idle = (time.monotonic() - t0, figures.difference(f.api_counts(), before))
    say(f"idle API requests over {f.idle[0]:.0f} s: {sum(f.idle[1].values()):.0f}")


# --- the real group's rollouts (c) ------------------------------------------------------------

def start_real(f: Fleet) -> None:
    obj = groups.consumer_group(REAL, f.env.bootstrap, f.real_topics[0], replicas=2,
                                out_topic=f.real_topics[1], strategy="WarmHandoff",
                                connect_url=f.connect.url)
    groups.start(f.env.kubeconfig, REAL_NS, obj, timeout=900)


def roll_real(f: Fleet, mark: str) -> dict[str, Any]:
    patch = {"spec": {"template": {"env": [{"name": "ROLLOUT_MARK", "value": mark}]}}}
    t0 = time.monotonic()
    f.custom.patch_namespaced_custom_object(API_GROUP, API_VERSION, REAL_NS, "consumergroups",
                                            REAL, patch)
    obj = groups.wait_rollout(f.env.kubeconfig, REAL_NS, REAL, timeout=900)
    took = time.monotonic() - t0
    rollout = obj["status"]["rollout"]
    gaps = [h.get("processingGapMs") for h in rollout.get("handoffs") or []]
    say(f"real group rolled ({mark}) in {took:.0f} s, processing gaps {gaps} ms")
    return {"seconds": round(took, 1), "longestProcessingGapMs": rollout.get(
        "longestProcessingGapMs"), "processingGapsMs": gaps,
        "longestAbsenceMs": rollout.get("longestAbsenceMs"),
        "rebalancesDuringRollout": rollout.get("rebalancesDuringRollout")}


# --- a: cold start ----------------------------------------------------------------------------

def cold_start(f: Fleet) -> None:
    t0 = time.monotonic()
    f.ops = f.start_operators("main")
    given = {g: f.layout.shard_of(i) for i, g in enumerate(f.names)}
    with fleetshards.QueueDepth(f.ops) as queue:
        f.by_shard, whole = fleetshards.cold_start_figures(
            f.layout, given, fleet.wait_settled(f.list_groups, given, f.args.settle_timeout, t0))
    f.report["queueDepthMaxColdStart"] = queue.most
    f.report["coldStartFirstPassSeconds"] = figures.rounded(whole.first, 1)
    f.report["coldStartSeconds"] = figures.rounded(whole.settled, 1)
    if whole.settled is None:
        f.notes["coldStartSeconds"] = (f"not every group settled within "
                                       f"{f.args.settle_timeout:.0f} s: {whole.held}")
    say(f"cold start: first pass of all {whole.first}, all settled {whole.settled} ({whole.held})")


# --- b: at rest -------------------------------------------------------------------------------

def at_rest(f: Fleet) -> None:
    time.sleep(f.args.settle)
    window = f.args.rest_minutes * 60
    since, api0, sim0 = time.time(), f.api_counts(), f.sim.stats()
    f.brokers.read()
    events0 = fleet.operator_events(f.core)
    ops = fleetshards.RestWindow.open(f.ops)
    t0 = time.monotonic()
    with fleetshards.QueueDepth(f.ops) as queue:
        while time.monotonic() - t0 < window:
            time.sleep(5.0)
            ops.usage.sample()
    took = time.monotonic() - t0
    kafka = fleet.operator_requests(f.brokers.read())
    sim1, api1 = f.sim.stats(), f.api_counts()
    assert f.idle is not None
    idle_s, idle = f.idle
    api = figures.difference(api1, api0, idle, took / idle_s)
    raw = figures.difference(api1, api0)
    n, r = f.args.groups, f.report
    r.update(ops.close(took, f.by_shard))
    r["queueDepthMax"] = queue.most
    r.update(fleet.kube_rest_figures(api, raw, fleet.operator_events(f.core) - events0, took))
    r.update(fleet.kafka_rest_figures(kafka, took, n))
    statuses = sim1["requests"].get("status", 0) - sim0["requests"].get("status", 0)
    r["memberStatusReadsPerSecondAtRest"] = round(statuses / took, 2)
    rss = ops.usage.rss_kib(list(f.ops))
    r["operatorRssKiBPerGroup"] = None if rss is None else round(rss / n, 1)
    r["restSeconds"] = round(took)
    say(f"at rest over {took:.0f} s: pass p50/p99 {r['passP50Seconds']}/{r['passP99Seconds']} s, "
        f"writes/s {r['kubeWritesPerSecondAtRest']} {r['kubeWritesAtRestByResource']}, Kafka/s "
        f"{r['kafkaRequestsPerSecondAtRest']} {dict(kafka)}, RSS {r['operatorRssMiB']} MiB, "
        f"CPU {r['operatorCpuCoresAtRest']} (peak {r['operatorCpuCoresPeakAtRest']})")
    note_holdings(f, since)


def note_holdings(f: Fleet, since: float) -> None:
    """Which shard holds each group (`fleetshards.holdings`), by the groups' status now and by
    the operators' passes since `since` (Unix time)."""
    passed = {s: fleetshards.passed_since(op.metrics(), NS, since) for s, op in f.ops.items()}
    h = fleetshards.holdings(f.layout, f.list_groups(), passed)
    for s in f.layout.names:
        f.by_shard[s].update(h.shard_report(s))
    f.report.update(h.report())
    if not h.sound:
        f.notes["groupsHeld"] = h.describe()
    say(f"groups held {'' if h.sound else '(NOT ONE SHARD EACH) '}{h.describe()}")


# --- d, e: rollouts at once, the operator killed ----------------------------------------------

def roll_many(f: Fleet, kill: bool) -> None:
    """The first AT_ONCE groups roll: the WITH_CONSUMER ones whose member a real consumer stands
    in for, which can complete, and simulated-only ones, whose replacements the broker never
    shows back in the group (it sees no member of theirs: their group is Empty), so that their
    rollouts wait after their first switchover, rightly, until the session timeout stops them."""
    rollers = f.names[:AT_ONCE]
    completable, blocked = rollers[:WITH_CONSUMER], rollers[WITH_CONSUMER:]
    f.blocked = set(blocked)
    patch = {"spec": {"template": {"env": [{"name": "ROLLOUT_MARK", "value": "d"}]}}}
    selector = f"{GROUP_LABEL} in ({','.join(rollers)})"
    t0 = time.monotonic()
    for g in rollers:
        f.custom.patch_namespaced_custom_object(API_GROUP, API_VERSION, NS, "consumergroups",
                                                g, patch)
    complete: dict[str, float] = {}
    switched: dict[str, float] = {}
    killed_at = None
    while time.monotonic() - t0 < f.args.rollout_timeout:
        objs = {o["metadata"]["name"]: o for o in f.list_groups()
                if o["metadata"]["name"] in rollers}
        pods = f.core.list_namespaced_pod(NS, label_selector=selector).items
        now = time.monotonic() - t0
        for g, obj in objs.items():
            if g in completable and g not in complete and groups.rollout_complete(obj):
                complete[g] = now
            if g not in switched and fleet.first_switched(obj, pods):
                switched[g] = now
        if kill and killed_at is None and now >= f.args.kill_after:
            killed_at = now
            f.report["rolloutsCompleteBeforeKill"] = len(complete)
            f.report["rolloutsSwitchedBeforeKill"] = len(switched)
            say(f"kill -9 of the operators {now:.0f} s into the rollouts ({len(complete)} "
                f"complete, {len(switched)} switched over at least once)")
            for op in f.ops.values():
                op.kill()
            f.ops = f.start_operators("after-kill")
            f.report["killRestartHealthySeconds"] = round(time.monotonic() - t0 - now, 1)
        if len(complete) == len(completable) and len(switched) == len(rollers):
            break
        time.sleep(2.0)
    f.report.update(fleet.rollouts_figures(complete, switched, len(completable), len(rollers)))
    if kill:
        f.report["killedAfterSeconds"] = figures.rounded(killed_at, 1)
    f.notes["rolloutsCompletable"] = (
        f"of the {len(rollers)} rollouts only the {len(completable)} groups with a real "
        "consumer standing in for their member can complete: the broker shows no member of "
        f"the other {len(blocked)} (simulated members join no broker group), so the operator "
        "rightly waits after each one's first switchover for the replacement to rejoin the group, "
        "until the session timeout stops the rollout (Degraded RolloutStopped)")
    if len(complete) < len(completable):
        held = Counter(str(((o.get("status") or {}).get("rollout") or {}).get("phase"))
                       for o in f.list_groups() if o["metadata"]["name"] in completable
                       and o["metadata"]["name"] not in complete)
        f.notes["rolloutsAllCompleteSeconds"] = (
            f"{len(completable) - len(complete)} completable rollouts not complete within "
            f"{f.args.rollout_timeout:.0f} s; their phases: {dict(held)}")
    say(f"{len(complete)}/{len(completable)} completable rollouts complete, {len(switched)}/"
        f"{len(rollers)} switched over at least once, after {time.monotonic() - t0:.0f} s")


# --- f: the coordinator's broker stopped ------------------------------------------------------

def broker_stop(f: Fleet) -> None:
    node = f.cluster.coordinator(REAL)
    assert node is not None, "the real group's coordinator is not known"
    theirs = fleet.coordinated_by(f.cluster, node, f.names)
    # Left out: groups Degraded before the stop, and d's simulated-only rollouts (stopped at
    # their session timeout, which may come during the stop).
    already = f.blocked | {o["metadata"]["name"] for o in f.list_groups() if fleet.degraded(o)}
    say(f"stopping broker {node}, coordinator of {len(theirs)} of the groups, for 60 s")
    with fleet.DegradedWatch(f.list_groups) as watch:
        samples = watch.samples
        t_stop = time.monotonic()
        f.cluster.stop(node)
        time.sleep(max(0.0, 60 - (time.monotonic() - t_stop)))
        t_start = time.monotonic()
        f.cluster.start(node, timeout=300)
        t_back = time.monotonic()
        f.env.replace_record(f.cluster.node(node).record)  # so that `env down` stops it
        environment.save(f.env)
        with contextlib.suppress(AssertionError):  # then reported as still Degraded
            wait_for("no group Degraded", lambda: samples and samples[-1][0] > t_back
                     and not samples[-1][1] - already, timeout=f.args.settle_timeout,
                     interval=1.0)
    r = f.report
    samples = [(t, d - already) for t, d in samples]
    r["brokerStopLeftOutDegradedBefore"] = len(already)
    r["brokerStopCoordinatedGroups"] = len(theirs)
    r["brokerStopDegradedMax"], r["brokerStopNoneDegradedSeconds"] = fleet.degraded_figures(
        samples, t_stop, t_back)
    r["brokerStartSeconds"] = round(t_back - t_start, 1)
    if r["brokerStopNoneDegradedSeconds"] is None:
        f.notes["brokerStopNoneDegradedSeconds"] = (
            f"{len(samples[-1][1]) if samples else '?'} groups still Degraded "
            f"{f.args.settle_timeout:.0f} s after the broker was back")
    say(f"broker {node} back after {r['brokerStartSeconds']} s of starting; most Degraded "
        f"{r['brokerStopDegradedMax']}, none Degraded {r['brokerStopNoneDegradedSeconds']} s "
        f"after it was back")


# --- the run ----------------------------------------------------------------------------------

def run(f: Fleet, wanted: str) -> None:
    gens = f.brokers.generation_counts
    f.brokers.read()
    if "c" in wanted:
        alone = f.start_operators("alone")
        try:
            start_real(f)
            f.brokers.read()
            base = gens(f.real_groups)
            f.report["rolloutAlone"] = roll_real(f, "alone")
        finally:
            for op in alone.values():
                op.stop()
    else:  # from when the stand-in consumers' groups formed: forming is no rebalance
        wait_for("their groups formed", lambda: f.brokers.formed(f.names[:WITH_CONSUMER]), 300)
        base = gens(f.real_groups)
    make_fleet(f)
    measure_idle(f)
    cold_start(f)  # a (the operators must run for every other scenario)
    if "b" in wanted:
        at_rest(f)
    else:
        note_holdings(f, 0.0)  # every pass since the operators started
    if "c" in wanted:
        f.report["rolloutAmong"] = roll_real(f, "among")
    if "d" in wanted or "e" in wanted:
        roll_many(f, kill="e" in wanted)
    if "f" in wanted:
        f.brokers.read()
        before_f = gens(f.real_groups)
        broker_stop(f)
        f.brokers.read()
        f.report["rebalancesDuringBrokerStop"] = sum(
            fleet.new_generations(before_f, gens(f.real_groups)).values())
    f.brokers.read()
    new = fleet.new_generations(base, gens(f.real_groups))
    f.report["rebalances"] = sum(new.values())
    f.report["rebalancesByGroup"] = new
    if "c" in wanted:
        produced = f.producer.stop()
        groups.wait_caught_up(f.env.bootstrap, REAL, [f.real_topics[0]], timeout=600)
        out = set(read_all(f.env.bootstrap, f.real_topics[1], timeout=120))
        f.report["produced"] = produced
        f.report["lost"] = len(set(f.producer.produced) - out)
        for k in ("Alone", "Among"):
            f.report[f"rolloutGapMs{k}"] = f.report[f"rollout{k}"]["longestProcessingGapMs"]
    else:
        f.notes.update(dict.fromkeys(("rolloutGapMsAlone", "rolloutGapMsAmong", "lost"),
                                     "scenario c not run"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help="a subset of a,b,c,d,e,f (a always runs: the others need it)")
    ap.add_argument("--rest-minutes", type=float, default=10.0)
    ap.add_argument("--settle", type=float, default=30.0,
                    help="seconds after the cold start before the at-rest window")
    ap.add_argument("--idle-seconds", type=float, default=60.0,
                    help="the window with no operator whose API requests are taken off")
    ap.add_argument("--settle-timeout", type=float, default=900.0)
    ap.add_argument("--rollout-timeout", type=float, default=900.0)
    ap.add_argument("--kill-after", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=50.0, help="records/s into the real group")
    ap.add_argument("--name", default="fleet", help="name of the local environment")
    ap.add_argument("--shards", type=int, default=1, choices=range(1, 41), metavar="K",
                    help="operators, one per shard, the groups given round-robin (1: unsharded)")
    args = ap.parse_args()
    wanted = "".join(s for s in args.scenarios.replace(",", "") if s in SCENARIOS)
    if args.groups < WITH_CONSUMER + AT_ONCE and ("d" in wanted or "e" in wanted):
        ap.error(f"--groups must be at least {WITH_CONSUMER + AT_ONCE} for d and e")
    logdir = Path(tempfile.mkdtemp(prefix="staticfleet-fleet-"))
    say(f"logs: {logdir}")
    started = time.monotonic()
    f = None
    try:
        f = bring_up(args, logdir)
        run(f, wanted)
    finally:
        if f is not None:
            for op in f.ops.values():
                op.stop()
            for consumer in f.consumers:
                consumer.close()
            f.producer.stop()
            f.connect.stop()
            stop_kwok(f.kwok, delete_nodes=False)
        environment.down(args.name)
    for key in REQUIRED:
        if key not in f.report:
            f.report[key] = None
            f.notes.setdefault(key, "its scenario was not run")
    f.report.update({"groups": args.groups, "scenarios": wanted, "shardCount": args.shards,
                     "shards": list(f.by_shard.values()),
                     "runSeconds": round(time.monotonic() - started), "notes": f.notes,
                     "logs": str(logdir)})
    if args.json:
        print(json.dumps(f.report, indent=1))
    else:
        for key, value in f.report.items():
            print(f"{key:48} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
