"""Broker roll: how long each broker's restart and each coordinator move stalls the members
(issue 38, item 3).

Three brokers (KRaft, everything replicated 3, min.insync.replicas 2), the local control plane
and node, the operator as a real process with its defaults, one Spark Connect server for the
members' Spark. Three groups of `--members` members, each on a topic of its own with
`--partitions` partitions fed `--rate / 3` records/s: `classic` (classic protocol), `kip848`
(KIP-848) and `rolling` (`--rolling-protocol`), kept in a warm rollout the whole roll (a new one
starts as each completes). Their ids are picked so that each starts on a `__consumer_offsets`
partition of its own, so their coordinators start spread over the brokers.

The roll, each step timed from its start (its window ends where the next step starts):
  each broker in turn: SIGTERM (a controlled shutdown: the broker hands its leaderships over
  before it exits), `--down` s away, started again and waited in sync, then after `--settle` s
  a preferred-leader election moves leaderships and coordinators back (what the brokers' own
  leader rebalance does within 5 minutes); then the broker coordinating `rolling` is SIGKILLed
  as one of its members is in a handoff (waited for up to 2 minutes), started `--down` s later,
  and leaders elected again. Steps are `--settle` s apart.

Printed for each step and group, its coordinator before -> after the step (`*`: it moved) and
- fetch: from the step's start until every member that was fetching then fetched records again
  (each member's /status `lastFetchAt`, read every 0.25 s: up to ~0.3 s late);
- processed: from the step's start until every partition had a record appended after it written
  to the output topic by a member (the input topic's LogAppendTime; the output record's timestamp
  is the member's write), with `input`: until every partition had a record appended at all,
  which no member can beat, and the members' part: the longest over partitions from the first
  new record's append to its write. The row `quiet` gives the same figures for the 15 s before
  the roll (the members' usual latency), and the latency (write - append) is printed as p50 /
  p99 before the roll and over it.
For the whole roll: member process restarts (a pod's restartCount or its process's `processStart`
changed; a rollout's replacement pods are new pods, not restarts), new generations the brokers
stabilized (their logs: classic groups), partitions whose owner (instance id, as the members'
/status say) changed, the members' own rebalance counters and the operator's `status.rebalances`
(planned ones apart), the rollouts `rolling` completed with their handoffs' modes, and records
produced, lost (never written to the output topic) and written twice. Nothing here gates: a
timing is a figure.

Run: flock /tmp/staticfleet-heavy.lock python bench/broker_roll.py [--rate 1000] [--members 2]
     [--partitions 6] [--down 10] [--settle 20] [--rolling-protocol consumer] [--json]
     [--keep-logs DIR]
"""

from __future__ import annotations

import argparse
import bisect
import json
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

from confluent_kafka.admin import NewTopic

from staticfleet_dev import environment
from staticfleet_dev.kafka import CLUSTER_SETTINGS, KafkaCluster, KafkaSettings, offsets_partition
from staticfleet_dev.spark_connect import start_connect_server
from staticfleet_dev.stream import SteadyProducer, committed_lag, read_stamped
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import create_namespace, install_crds, kubectl
from staticfleet_dev.testkit.memberwatch import MemberWatch
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for

NAMESPACE = "broker-roll"
KINDS = ("classic", "kip848", "rolling")
QUIET_S = 15.0
"""The quiet row: the same figures over the last 15 s before the roll, as a baseline."""


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def group_ids(tag: str) -> dict[str, str]:
    """An id per kind, each on a `__consumer_offsets` partition of its own."""
    partitions = int(CLUSTER_SETTINGS["offsets.topic.num.partitions"])
    ids: dict[str, str] = {}
    used: set[int] = set()
    n = 0
    for kind in KINDS:
        while (part := offsets_partition(name := f"{kind}-{tag}-{n}", partitions)) in used:
            n += 1
        used.add(part)
        ids[kind] = name
    return ids


# --- the rolling group's rollouts -------------------------------------------------------------

class RolloutKeeper:
    """Keeps a group in a rollout: each time its rollout is complete, starts the next one (a
    new `spec.rollout.restartNonce`), and records each completed one's handoffs."""

    def __init__(self, kubeconfig: Path, namespace: str, name: str) -> None:
        self.args = (kubeconfig, namespace, name)
        self.completed: list[dict[str, Any]] = []
        self.started = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RolloutKeeper:
        self._next()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _next(self) -> None:
        self.started += 1
        kubectl(self.args[0], "-n", self.args[1], "patch", "cg", self.args[2], "--type=merge",
                "-p", json.dumps({"spec": {"rollout": {"restartNonce": f"roll-{self.started}"}}}))

    def in_handoff(self) -> bool:
        ro = (groups.get(*self.args).get("status") or {}).get("rollout") or {}
        return any(f.get("phase") in ("Stopping", "Activating") for f in ro.get("inFlight") or ())

    def _run(self) -> None:
        while not self._stop.wait(2.0):
            try:
                obj = groups.get(*self.args)
            except Exception:  # the API server is busy; the next round asks again
                continue
            if groups.rollout_complete(obj) and len(self.completed) < self.started:
                ro = obj["status"]["rollout"]
                self.completed.append({
                    "modes": sorted(h.get("mode") for h in ro.get("handoffs") or ()),
                    "rebalancesDuringRollout": ro.get("rebalancesDuringRollout"),
                    "longestProcessingGapMs": ro.get("longestProcessingGapMs")})
                if not self._stop.is_set():
                    self._next()


# --- the roll ---------------------------------------------------------------------------------

@dataclass
class Step:
    label: str
    at: float
    before: dict[str, int | None]
    after: dict[str, int | None] = field(default_factory=dict)
    until: float = 0.0


def coordinators(cluster: KafkaCluster, ids: dict[str, str]) -> dict[str, int | None]:
    return {kind: cluster.coordinator(name) for kind, name in ids.items()}


def take_step(cluster: KafkaCluster, ids: dict[str, str], label: str,
              action: Callable[[], object]) -> Step:
    step = Step(label, time.time(), coordinators(cluster, ids))
    say(f"{label} (coordinators {step.before})")
    action()
    return step


def roll(args: argparse.Namespace, env: environment.LocalEnv, cluster: KafkaCluster,
         ids: dict[str, str], watch: MemberWatch, keeper: RolloutKeeper) -> list[Step]:
    steps: list[Step] = []

    def back(node: int) -> None:
        time.sleep(max(0.0, steps[-1].at + args.down - time.time()))
        cluster.start(node, timeout=300)
        env.replace_record(cluster.node(node).record)  # so that `env down` stops it
        environment.save(env)
        time.sleep(args.settle)
        steps.append(take_step(cluster, ids, f"broker {node} back, leaders elected",
                               cluster.elect_preferred_leaders))
        time.sleep(args.settle)

    for node in cluster.node_ids:
        steps.append(take_step(cluster, ids, f"broker {node} SIGTERM", partial(cluster.stop,
                                                                              node)))
        back(node)
    victim = cluster.coordinator(ids["rolling"])
    assert victim is not None, "the rolling group's coordinator is not known"
    try:
        wait_for("a member of the rolling group in its handoff",
                 lambda: watch.standby_ready(ids["rolling"]) or keeper.in_handoff(), 120,
                 interval=0.1)
        when = "in a handoff"
    except AssertionError:
        when = "no handoff seen in 2 min"
    steps.append(take_step(cluster, ids, f"broker {victim} SIGKILL ({when})",
                           partial(cluster.kill, victim)))
    back(victim)
    for step, following in pairwise(steps):
        step.after, step.until = following.before, following.at
    steps[-1].after, steps[-1].until = coordinators(cluster, ids), time.time()
    return steps


# --- what reached the output ------------------------------------------------------------------

@dataclass
class Stamps:
    """A group's input records by partition (append time ms, value) and when each value was
    first written to its output topic (ms)."""

    appended: dict[int, list[tuple[int, bytes]]]
    written: dict[bytes, int]
    duplicates: int
    """Output records of a value written before."""

    @classmethod
    def read(cls, bootstrap: str, topic: str, out: str) -> Stamps:
        appended: dict[int, list[tuple[int, bytes]]] = {}
        for value, part, at in read_stamped(bootstrap, topic, 600):
            appended.setdefault(part, []).append((at, value))
        for records in appended.values():
            records.sort()
        written: dict[bytes, int] = {}
        outputs = read_stamped(bootstrap, out, 600)
        for value, _, at in outputs:
            written[value] = min(at, written.get(value, at))
        return cls(appended, written, len(outputs) - len(written))

    def stall(self, t0: float, until: float) -> tuple[float, float, float]:
        """(processed, input, members' part): the longest time over partitions from `t0` until
        a record appended after it was written to the output, until one was appended, and from
        the first one's append to its write."""
        ms0, limit = t0 * 1000, until * 1000
        processed = appended = own = 0.0
        for records in self.appended.values():
            i = bisect.bisect_left(records, ms0, key=lambda r: r[0])
            at, value = records[i] if i < len(records) else (limit, b"")
            at, written = min(at, limit), min(self.written.get(value, limit), limit)
            appended = max(appended, (at - ms0) / 1000)
            processed = max(processed, (written - ms0) / 1000)
            own = max(own, (written - at) / 1000)
        return processed, appended, own

    def latency(self, since: float, until: float) -> list[float]:
        """Seconds from append to write of the records appended in the window."""
        return sorted((self.written[v] - at) / 1000 for records in self.appended.values()
                      for at, v in records
                      if since * 1000 <= at <= until * 1000 and v in self.written)


def quantile(values: list[float], q: float) -> float | None:
    return None if not values else values[min(len(values) - 1, int(q * len(values)))]


# --- the run ----------------------------------------------------------------------------------

def keeping_up(bootstrap: str, group: str, topic: str, rate: float) -> bool:
    """The group's committed offsets are less than a second of records behind."""
    return committed_lag(bootstrap, group, topic) < rate


def make_input(cluster: KafkaCluster, name: str, partitions: int) -> str:
    """An input topic whose records carry the broker's append time."""
    futures = cluster.admin().create_topics([NewTopic(
        name, partitions, replication_factor=len(cluster.nodes),
        config={"message.timestamp.type": "LogAppendTime"})])
    futures[name].result(30)
    return name


def run(args: argparse.Namespace, env: environment.LocalEnv, cluster: KafkaCluster,
        connect_url: str) -> dict[str, Any]:
    kc, ns = env.kubeconfig, NAMESPACE
    ids = group_ids(time.strftime("%H%M%S"))
    protocols = {"classic": "classic", "kip848": "consumer", "rolling": args.rolling_protocol}
    topics = {kind: (make_input(cluster, f"{kind}-in", args.partitions),
                     cluster.make_topic(f"{kind}-out", args.partitions)) for kind in KINDS}
    for kind, name in ids.items():
        groups.apply(kc, ns, groups.consumer_group(
            name, env.bootstrap, topics[kind][0], replicas=args.members,
            out_topic=topics[kind][1], protocol=protocols[kind], strategy="WarmHandoff",
            connect_url=connect_url))
    for name in ids.values():
        groups.wait_status(kc, ns, name, groups.ready_and_idle, 600, "Ready")
    producers = {kind: SteadyProducer(env.bootstrap, topics[kind][0], rate=args.rate / 3,
                                      keys=64).start() for kind in KINDS}
    produce_from = time.time()
    say(f"groups {ids} Ready; producing {args.rate:.0f} records/s until the members keep up")
    for kind, name in ids.items():  # their first batches (Spark's warm-up) leave a backlog
        wait_for(f"{name} keeping up", partial(keeping_up, env.bootstrap, name,
                                               topics[kind][0], args.rate / 3), 600, interval=2)
    report: dict[str, Any] = {"ids": ids, "protocols": protocols}
    with MemberWatch(kc, ns) as watch:
        say(f"steady for {args.steady:.0f} s")
        time.sleep(args.steady)
        status_before = {kind: groups.get(kc, ns, name)["status"] for kind, name in ids.items()}
        generations = {kind: cluster.generations(name) for kind, name in ids.items()}
        roll_from = time.time()
        quiet = Step("(quiet: no broker touched)", roll_from - QUIET_S,
                     coordinators(cluster, ids))
        with RolloutKeeper(kc, ns, ids["rolling"]) as keeper:
            steps = [quiet, *roll(args, env, cluster, ids, watch, keeper)]
        quiet.after, quiet.until = quiet.before, roll_from
        roll_to = time.time()
        say("roll done; waiting for the rolling group's last rollout")
        groups.wait_rollout(kc, ns, ids["rolling"], 900, "its last rollout complete")
        time.sleep(3)
    status_after = {kind: groups.get(kc, ns, name)["status"] for kind, name in ids.items()}
    produced = {kind: p.stop() for kind, p in producers.items()}
    produce_to = time.time()
    for kind, name in ids.items():
        groups.wait_caught_up(env.bootstrap, name, [topics[kind][0]], timeout=900)
    say("reading the topics back")
    stamps = {kind: Stamps.read(env.bootstrap, *topics[kind]) for kind in KINDS}

    report["steps"] = []
    for step in steps:
        row: dict[str, Any] = {"step": step.label, "seconds": round(step.until - step.at, 1)}
        for kind in KINDS:
            fetch, stuck = watch.fetch_stall(ids[kind], step.at, step.until)
            processed, appended, own = stamps[kind].stall(step.at, step.until)
            row[kind] = {"coordinator": [step.before[kind], step.after[kind]],
                         "moved": step.before[kind] != step.after[kind],
                         "fetchStallS": round(fetch, 2), "membersNotFetchingAgain": stuck,
                         "fetchStallsByMember": {m: None if v is None else round(v, 2) for m, v
                                                 in watch.fetch_stalls(ids[kind], step.at,
                                                                       step.until).items()},
                         "processedStallS": round(processed, 2), "inputStallS": round(appended, 2),
                         "membersPartS": round(own, 2)}
        report["steps"].append(row)
    moves = [(row[k]["fetchStallS"], row["step"], k) for row in report["steps"] for k in KINDS
             if row[k]["moved"]]
    report["longestFetchStallOnAMove"] = max(moves, default=None)
    report["longestFetchStall"] = max((row[k]["fetchStallS"], row["step"], k)
                                      for row in report["steps"] for k in KINDS)
    report["groups"] = {}
    for kind, name in ids.items():
        rebalances = watch.rebalances(name)
        written = stamps[kind].written
        steady, rolling = (stamps[kind].latency(roll_from - args.steady, roll_from),
                           stamps[kind].latency(roll_from, roll_to))
        report["groups"][kind] = {
            "memberProcessRestarts": watch.restarted(name),
            "podsSeen": len(rebalances),
            "newGenerations": [g for g in cluster.generations(name) if g not in generations[kind]],
            "partitionsThatChangedOwner": watch.owner_changes(name),
            "memberRebalances": sum(rebalances.values()),
            "operatorRebalances": int(status_after[kind].get("rebalances") or 0)
            - int(status_before[kind].get("rebalances") or 0),
            "operatorPlannedRebalances": int(status_after[kind].get("plannedRebalances") or 0)
            - int(status_before[kind].get("plannedRebalances") or 0),
            "produced": produced[kind],
            "lost": len(set(producers[kind].produced) - set(written)),
            "writtenTwice": stamps[kind].duplicates,
            "producerFailures": producers[kind].failed[:3],
            "latencyS": {"steadyP50": quantile(steady, 0.5), "steadyP99": quantile(steady, 0.99),
                         "rollP50": quantile(rolling, 0.5), "rollP99": quantile(rolling, 0.99)},
        }
    report["rollouts"] = {"started": keeper.started, "completed": keeper.completed}
    report["producedPerSecond"] = round(sum(produced.values()) / (produce_to - produce_from), 1)
    report["rollSeconds"] = round(roll_to - roll_from, 1)
    return report


def print_report(r: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"\n{args.members} members per group, {args.partitions} partitions per topic, "
          f"{args.rate:.0f} records/s asked ({r['producedPerSecond']} produced), brokers down "
          f"{args.down:.0f} s per restart, broker.session.timeout.ms {args.broker_session_ms}, "
          f"roll {r['rollSeconds']} s; groups {r['ids']}, protocols {r['protocols']}\n")
    print("seconds from the step's start until: every member fetched again / every partition's "
          "new records were processed (input: appended; the members' part: the first new\n"
          "record's append to its write); * the group's coordinator moved")
    print(f"{'step':36} {'window':>6}  " + "  ".join(f"{k:>40}" for k in KINDS))
    for row in r["steps"]:
        cells = []
        for kind in KINDS:
            c = row[kind]
            moved = "*" if c["moved"] else " "
            stuck = f" ({c['membersNotFetchingAgain']} not)" if c["membersNotFetchingAgain"] else ""
            cells.append(f"{moved}{c['coordinator'][0]}->{c['coordinator'][1]} "
                         f"{c['fetchStallS']:5.1f}{stuck} / {c['processedStallS']:5.1f} "
                         f"({c['inputStallS']:4.1f}, {c['membersPartS']:4.1f})")
        print(f"{row['step']:36} {row['seconds']:6.1f}  " + "  ".join(f"{c:>40}" for c in cells))
    print(f"\nlongest fetch stall on a coordinator move: {r['longestFetchStallOnAMove']}")
    print(f"longest fetch stall of any step:            {r['longestFetchStall']}\n")
    for kind, g in r["groups"].items():
        print(f"{kind}: process restarts {g['memberProcessRestarts']} (of {g['podsSeen']} pods "
              f"seen); new generations {g['newGenerations']}; partitions that changed owner "
              f"{g['partitionsThatChangedOwner']}; members' rebalances {g['memberRebalances']}; "
              f"operator's rebalances {g['operatorRebalances']} (planned "
              f"{g['operatorPlannedRebalances']})")
        print(f"{' ' * len(kind)}  records: {g['produced']:,} produced, {g['lost']} lost, "
              f"{g['writtenTwice']:,} written twice; "
              f"latency append->write s {g['latencyS']}; producer failures "
              f"{g['producerFailures']}")
    done = r["rollouts"]["completed"]
    modes = sorted({m for ro in done for m in ro["modes"]})
    print(f"rolling: {len(done)} rollouts completed of {r['rollouts']['started']} started, "
          f"handoffs {modes}, rebalances during them "
          f"{sum(int(ro['rebalancesDuringRollout'] or 0) for ro in done)}, longest processing "
          f"gap of each (ms) {[ro['longestProcessingGapMs'] for ro in done]}")


def keep_logs(env: environment.LocalEnv, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for log in [env.root / "operator.log", *env.root.glob("kafka/node-*/broker.log")]:
        if log.exists():
            shutil.copy2(log, into / log.relative_to(env.root).as_posix().replace("/", "_"))
    if env.pod_log_dir.exists():
        shutil.copytree(env.pod_log_dir, into / "pods", dirs_exist_ok=True)
    say(f"logs kept in {into}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=1000.0, help="records/s over the 3 groups")
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--down", type=float, default=10.0, help="seconds a broker stays down")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds between steps")
    ap.add_argument("--steady", type=float, default=30.0, help="steady seconds before the roll")
    ap.add_argument("--broker-session-ms", type=int,
                    default=int(CLUSTER_SETTINGS["broker.session.timeout.ms"]),
                    help="how long a killed broker keeps its leaderships (Kafka's default: 9000)")
    ap.add_argument("--rolling-protocol", choices=("classic", "consumer"), default="consumer")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--name", default="broker-roll", help="name of the local environment")
    ap.add_argument("--keep-logs", type=Path, metavar="DIR",
                    help="copy the operator's, the members' and the brokers' logs to DIR")
    args = ap.parse_args()
    environment.down(args.name)
    say("environment: 3 brokers, control plane, local node, Spark Connect, operator ...")
    settings = KafkaSettings.for_tests()
    settings.overrides["broker.session.timeout.ms"] = str(args.broker_session_ms)
    env = environment.up(args.name, kafka_settings=settings, with_node=True, brokers=3)
    op = None
    connect = None
    try:
        install_crds(env.kubeconfig)
        create_namespace(env.kubeconfig, NAMESPACE)
        connect = start_connect_server(env.root)
        op = OperatorProcess(kubeconfig=env.kubeconfig, log=env.root / "operator.log",
                             env=env).start()
        report = run(args, env, env.cluster(), connect.url)
    finally:
        if op is not None:
            op.stop()
        if connect is not None:
            connect.stop()
        if args.keep_logs is not None:
            keep_logs(env, args.keep_logs)
        environment.down(args.name)
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        print_report(report, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
