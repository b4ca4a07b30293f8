"""Rollout benchmark: what a rolling restart costs a consumer group, side by side in one run.

N members (4) on P partitions (12) under a steady produce rate, the scenarios side by side:

- warm:      staticfleet's roller, static membership, warm handoff (the default strategy): each
             replacement starts in standby; once it is ready the old member is drained and the
             replacement activated the moment the drain answers (a switchover);
- warm-stop: the same handoff without the drain (a test-only annotation): the old member is
             stopped and the replacement activated once its process exited, as before drains;
- recreate:  the same roller, strategy Recreate: stop the member, then cold-start its replacement;
- dynamic:   the recreate roller with the instance ids dropped (the test-only switch);
- short:    static membership with a session timeout shorter than a restart. staticfleet refuses to
            roll that group (it says which timeout it would need), so this scenario restarts the
            members the way a plain StatefulSet-style roller does: delete, wait until Ready, next.

Each scenario's group is rolled `--rollouts` times in a row (`--protocol`: classic or consumer,
KIP-848). For each: rebalances during the rollouts (new generations in the broker's log; the
operator's count for KIP-848), per member and rollout the absence (the old consumer's close -> the
replacement's first assignment) and the processing gap (the old process's last batch end -> the
replacement's first batch end), both the operator's figures from the members' own clocks
(status.rollout.handoffs), as p50 / p99 / max, and where each gap went (the old member's drain tail:
its last batch end -> its consumer's close; out of the group: the close -> the replacement's
assignment; first batch: the assignment -> the replacement's first batch end); the longest
processing gap seen by this bench (the longest time one ordinal's serving process went without
processing a record, sampled once a second, so up to 1 s coarse); the throughput of the members that
are not restarting during the rollout as a ratio of their steady-state throughput (with warm handoff
the replacements' Spark starts fall in that window too), and the rollouts' total time.
The members write every record to an output topic: once the group committed everything, the
values produced that the output lacks are counted lost (must be 0), and those written twice.

Run: python bench/rollout.py [--rate 400] [--settle 20] [--members 4] [--partitions 12]
     [--rollouts 1] [--protocol classic] [--scenarios warm,warm-stop,recreate,dynamic]
     [--spark local|connect] [--keep-logs DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from staticfleet.decisions.conditions import parse_rfc3339
from staticfleet.decisions.spec.model import STOP_HANDOFF_ANNOTATION
from staticfleet_dev import environment
from staticfleet_dev.kafka import KafkaBroker, KafkaSettings
from staticfleet_dev.spark_connect import start_connect_server
from staticfleet_dev.stream import SteadyProducer, committed_lag, read_all
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import create_namespace, install_crds, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for

MEMBERS, PARTITIONS = 4, 12


@dataclass
class Sampler:
    """Reads every member's /status once a second: records processed per pod uid."""

    kubeconfig: Path
    namespace: str
    name: str
    samples: list[tuple[float, dict[int, tuple[str, int, bool]]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Sampler:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self._sample()
            except Exception as exc:  # keep sampling; the errors are reported at the end
                self.errors.append(repr(exc))

    def _sample(self) -> None:
        members = groups.pods(self.kubeconfig, self.namespace, self.name)
        with ThreadPoolExecutor(len(members) or 1) as pool:
            answers = list(pool.map(_status, members))
        snap: dict[int, tuple[str, int, bool]] = {}
        for pod, st in zip(members, answers, strict=True):
            if st is None or st.get("standby") is not None:
                continue  # not answering, or a warm replacement not yet in the group
            ordinal = int(pod["metadata"]["labels"]["staticfleet.io/ordinal"])
            ready = any(c["type"] == "Ready" and c["status"] == "True"
                        for c in (pod.get("status") or {}).get("conditions") or [])
            deleting = bool(pod["metadata"].get("deletionTimestamp"))
            snap[ordinal] = (pod["metadata"]["uid"], int(st.get("recordsProcessed") or 0),
                             ready and not deleting)
        self.samples.append((time.monotonic(), snap))

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time, over ordinals, between two samples in which the ordinal's serving
        process had processed more records (a new process: any record), within the window."""
        longest = 0.0
        ordinals = {o for _t, snap in self.samples for o in snap}
        for ordinal in ordinals:
            last: tuple[str, int] | None = None
            progress = [start]
            for t, snap in self.samples:
                if ordinal not in snap:
                    continue
                uid, count, _serving = snap[ordinal]
                if last is not None and ((uid == last[0] and count > last[1])
                                         or (uid != last[0] and count > 0)):
                    progress.append(t)
                last = (uid, count)
            moments = [t for t in progress if start <= t <= end] + [end]
            longest = max([longest] + [b - a for a, b in pairwise(moments)])
        return longest

    def rates(self, start: float, end: float) -> dict[int, list[tuple[float, float, bool]]]:
        """Per ordinal: (time, records/s over the last second, serving) within [start, end]."""
        out: dict[int, list[tuple[float, float, bool]]] = {}
        for (t0, a), (t1, b) in zip(self.samples, self.samples[1:], strict=False):
            if t1 < start or t1 > end:
                continue
            for ordinal, (uid, count, serving) in b.items():
                prev = a.get(ordinal)
                if prev is None or prev[0] != uid or not prev[2] or not serving:
                    out.setdefault(ordinal, []).append((t1, 0.0, False))
                    continue
                out.setdefault(ordinal, []).append((t1, (count - prev[1]) / (t1 - t0), True))
        return out


def _status(pod: dict[str, Any]) -> dict[str, Any] | None:
    ip = (pod.get("status") or {}).get("podIP")
    try:
        with urllib.request.urlopen(f"http://{ip}:8080/status", timeout=5) as r:
            return dict(json.load(r))
    except (OSError, ValueError):
        return None


@dataclass
class Result:
    scenario: str
    rebalances: int
    longest_absence_ms: int
    session_ms: int
    others_ratio: float
    rollout_s: float
    gap_seen_s: float = float("nan")
    gap_operator_ms: int | None = None
    note: str = ""
    absences_ms: list[int] = field(default_factory=list)
    """Every member's absence in every rollout (the operator's handoffs)."""
    gaps_ms: list[int] = field(default_factory=list)
    """Every member's processing gap in every rollout (the operator's handoffs)."""
    parts_ms: dict[str, list[int]] = field(default_factory=dict)
    """Where each processing gap went (`gap_parts`), part by part."""
    produced: int = 0
    lost: int = 0
    """Values produced that never reached the output topic."""
    duplicates: int = 0
    """Values the output topic holds more than once (processed again after a restart)."""


GAP_PARTS = ("drain tail", "out of the group", "first batch")


def gap_parts(handoff: dict[str, Any]) -> dict[str, int] | None:
    """A handoff's processing gap in its three parts, from its own figures: the old member's
    last batch end -> its consumer's close (`processingGapFrom` -> `absentFrom`), the close ->
    the replacement's assignment (`absenceMs`), the assignment -> the replacement's first batch
    end (the rest). None without those figures (a cold restart, a frozen old member)."""
    gap, closed, began = (handoff.get("processingGapMs"), handoff.get("absentFrom"),
                          handoff.get("processingGapFrom"))
    if gap is None or not closed or not began:
        return None
    tail = round((parse_rfc3339(closed) - parse_rfc3339(began)).total_seconds() * 1000)
    absence = int(handoff["absenceMs"])
    return dict(zip(GAP_PARTS, (tail, absence, int(gap) - tail - absence), strict=True))


def rank(values: list[int], q: float) -> int:
    """The q-quantile of `values` by nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def percentiles(values: list[int]) -> str:
    """p50 / p99 / max, or '-' without values."""
    if not values:
        return "-"
    return f"{rank(values, 0.5)} / {rank(values, 0.99)} / {max(values)}"


def run_scenario(scenario: str, env: environment.LocalEnv, broker: KafkaBroker, admin: AdminClient,
                 rate: float, settle: float, rollouts: int = 1,
                 protocol: str = "classic", connect_url: str | None = None) -> Result:
    kc = env.kubeconfig
    namespace = f"bench-{scenario}-{int(time.time()) % 100000}"
    create_namespace(kc, namespace)
    name = f"bench-{scenario}"
    topic, out = f"{namespace}-in", f"{namespace}-out"
    for fut in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (topic, out)]).values():
        fut.result(30)
    session = 3000 if scenario == "short" else None
    obj = groups.consumer_group(name, env.bootstrap, topic, replicas=MEMBERS, session_ms=session,
                         dynamic=scenario == "dynamic", max_records=5000, protocol=protocol,
                         strategy="WarmHandoff" if scenario.startswith("warm") else "Recreate",
                         connect_url=connect_url, out_topic=out)
    if scenario == "warm-stop":
        obj["metadata"]["annotations"][STOP_HANDOFF_ANNOTATION] = "true"
    groups.start(kc, namespace, obj, timeout=300)
    # Produce only now, and let the members settle on the steady rate before measuring, so the
    # steady window is not a catch-up of what piled up while their Spark sessions started.
    producer = SteadyProducer(env.bootstrap, topic, rate=rate, keys=64).start()
    time.sleep(settle)
    wait_for(f"{name} to catch up on the backlog",
             lambda: committed_lag(env.bootstrap, name, topic) < rate, 300)
    sampler = Sampler(kc, namespace, name).start()
    time.sleep(settle)
    steady_from, steady_to = time.monotonic() - settle + 2, time.monotonic()
    generations = broker.generations(name)
    session_ms = int(groups.get(kc, namespace, name)["status"]["timeouts"]["sessionTimeoutMs"])

    started = time.monotonic()
    gap_operator = None
    absences: dict[int, tuple[float, float]] = {}
    absences_ms: list[int] = []
    gaps_ms: list[int] = []
    parts_ms: dict[str, list[int]] = {}
    operator_rebalances = 0
    if scenario == "short":
        longest = naive_roll(kc, namespace, name, absences, broker, admin)
        note = "staticfleet refused (RestartUnsafe); restarted by a naive delete-and-wait roller"
    else:
        longest, note = 0, ""
        for n in range(rollouts):
            kubectl(kc, "-n", namespace, "patch", "cg", name, "--type=merge", "-p",
                    json.dumps({"spec": {"rollout": {"restartNonce": f"bench-{n}"}}}))
            done = groups.wait_rollout(kc, namespace, name, 900,
                                       f"rolled out ({n + 1}/{rollouts})")
            ro = done["status"]["rollout"]
            longest = max(longest, int(ro["longestAbsenceMs"]))
            gap = ro.get("longestProcessingGapMs")
            gap_operator = gap if gap_operator is None or gap is None else max(gap_operator, gap)
            for h in ro.get("handoffs") or ():
                absences_ms.append(int(h["absenceMs"]))
                if h.get("processingGapMs") is not None:
                    gaps_ms.append(int(h["processingGapMs"]))
                for part, ms in (gap_parts(h) or {}).items():
                    parts_ms.setdefault(part, []).append(ms)
            operator_rebalances += int(ro.get("rebalancesDuringRollout") or 0)
            figures = [(h["ordinal"], h["absenceMs"], h.get("processingGapMs"))
                       for h in ro.get("handoffs") or ()]
            print(f"  rollout {n + 1}/{rollouts}: (member, absence ms, gap ms) {figures}",
                  flush=True)
    finished = time.monotonic()
    time.sleep(3)
    sampler.stop()

    rebalances = (len([g for g in broker.generations(name) if g not in generations])
                  if protocol == "classic" else operator_rebalances)
    ratio = others_ratio(sampler, steady_from, steady_to, started, finished)
    if sampler.errors or len(sampler.samples) < 5:
        print(f"  sampler: {len(sampler.samples)} samples, errors {sampler.errors[:3]}")
    produced = producer.stop()
    # Nothing lost: every value produced is in the output topic once the group committed all.
    groups.wait_caught_up(env.bootstrap, name, [topic], timeout=300)
    written = read_all(env.bootstrap, out, timeout=180)
    lost = len(set(producer.produced) - set(written))
    duplicates = len(written) - len(set(written))
    kubectl(kc, "delete", "namespace", namespace, "--wait=false", check=False)
    gap_seen = sampler.longest_gap(started, finished)
    return Result(scenario, rebalances, longest, session_ms, ratio, finished - started,
                  gap_seen, gap_operator, note, absences_ms, gaps_ms, parts_ms,
                  produced, lost, duplicates)


def naive_roll(kc: Path, namespace: str, name: str, absences: dict[int, tuple[float, float]],
               broker: KafkaBroker, admin: AdminClient) -> int:
    """Delete each member pod (highest first), wait until its replacement is Ready, go on."""
    longest = 0.0
    for ordinal in reversed(range(MEMBERS)):
        pod = f"{name}-{ordinal}"
        old_uid = kubectl(kc, "-n", namespace, "get", "pod", pod, "-o",
                          "jsonpath={.metadata.uid}").stdout
        t0 = time.monotonic()
        kubectl(kc, "-n", namespace, "delete", "pod", pod, "--wait=false")

        def back(pod: str = pod, old_uid: str = old_uid) -> bool:
            out = kubectl(kc, "-n", namespace, "get", "pod", pod, "-o", "json",
                          check=False).stdout
            if not out:
                return False
            p = json.loads(out)
            return p["metadata"]["uid"] != old_uid and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions") or [])

        wait_for(f"{pod} back", back, 300)
        absences[ordinal] = (t0, time.monotonic())
        longest = max(longest, time.monotonic() - t0)
    return round(longest * 1000)


def others_ratio(sampler: Sampler, s0: float, s1: float, r0: float, r1: float) -> float:
    """Mean throughput of members while they serve during the rollout / their steady mean."""
    steady = [v for series in sampler.rates(s0, s1).values() for _t, v, ok in series if ok]
    during = [v for series in sampler.rates(r0, r1).values() for _t, v, ok in series if ok]
    if not steady or not during or statistics.mean(steady) == 0:
        return float("nan")
    return statistics.mean(during) / statistics.mean(steady)


def main() -> int:
    global MEMBERS, PARTITIONS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=400.0, help="records produced per second")
    parser.add_argument("--settle", type=float, default=20.0, help="steady seconds before")
    parser.add_argument("--scenarios", default="warm,warm-stop,recreate,dynamic",
                        help="of warm, warm-stop, recreate, dynamic, short")
    parser.add_argument("--members", type=int, default=MEMBERS)
    parser.add_argument("--partitions", type=int, default=PARTITIONS)
    parser.add_argument("--rollouts", type=int, default=1, help="consecutive rollouts per group")
    parser.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    parser.add_argument("--spark", choices=("local", "connect"), default="local",
                        help="members' Spark: each its own local JVM, or one Spark Connect "
                        "server for all (what fits more members on a small machine)")
    parser.add_argument("--keep-logs", type=Path, metavar="DIR",
                        help="copy the operator's and the members' logs to DIR before the "
                        "environment is torn down (to read where a handoff's time went)")
    args = parser.parse_args()
    MEMBERS, PARTITIONS = args.members, args.partitions

    name = "bench-rollout"
    environment.down(name)
    t = time.monotonic()
    env = environment.up(name, kafka_settings=KafkaSettings.for_tests())
    print(f"environment up in {time.monotonic() - t:.1f}s", flush=True)
    broker = KafkaBroker(workdir=env.root / "kafka", bootstrap=env.bootstrap,
                         record=env.record("kafka"))  # type: ignore[arg-type]
    admin = AdminClient({"bootstrap.servers": env.bootstrap})
    install_crds(env.kubeconfig)
    connect = start_connect_server(env.root) if args.spark == "connect" else None
    # The dynamic and warm-stop scenarios use the test-only annotations.
    op = OperatorProcess(kubeconfig=env.kubeconfig, log=env.root / "operator.log",
                         env=env, allow_testing_annotations=True).start()
    results = []
    try:
        for scenario in args.scenarios.split(","):
            print(f"--- {scenario}", flush=True)
            results.append(run_scenario(scenario, env, broker, admin, args.rate, args.settle,
                                        args.rollouts, args.protocol,
                                        connect.url if connect else None))
            print(results[-1], flush=True)
    finally:
        op.stop()
        if connect is not None:
            connect.stop()
        if args.keep_logs is not None:
            keep_logs(env, args.keep_logs)
        environment.down(name)

    print(f"\n{MEMBERS} members, {PARTITIONS} partitions, {args.rate:.0f} records/s produced, "
          f"{args.rollouts} rollout(s) per scenario, protocol {args.protocol}, Spark "
          f"{args.spark}\n")
    head = ("scenario", "rebalances", "longest absence ms", "session ms", "gap seen s",
            "gap operator ms", "others' throughput", "rollout s")
    print("  ".join(f"{h:>18}" for h in head))
    for r in results:
        print("  ".join(f"{v:>18}" for v in (
            r.scenario, r.rebalances, r.longest_absence_ms, r.session_ms, f"{r.gap_seen_s:.1f}",
            "-" if r.gap_operator_ms is None else r.gap_operator_ms,
            f"{r.others_ratio:.2f}", f"{r.rollout_s:.1f}")))
    print("\nper member and rollout, the operator's figures (p50 / p99 / max ms):")
    for r in results:
        print(f"  {r.scenario:>10}: absence {percentiles(r.absences_ms)}; processing gap "
              f"{percentiles(r.gaps_ms)} ({len(r.gaps_ms)} handoffs)")
        if r.parts_ms:
            print(" " * 14 + "where the gap went: " + "; ".join(
                f"{part} {percentiles(r.parts_ms.get(part, []))}" for part in GAP_PARTS))
    print("\nrecords: " + "; ".join(
        f"{r.scenario} {r.produced:,} produced, {r.lost} lost, {r.duplicates:,} written twice"
        for r in results))
    warm = next((r for r in results if r.scenario == "warm" and r.gaps_ms), None)
    for r in results:
        if warm is not None and r is not warm and r.gaps_ms:
            p99 = rank(warm.gaps_ms, 0.99) / max(1, rank(r.gaps_ms, 0.99))
            p50 = rank(warm.gaps_ms, 0.5) / max(1, rank(r.gaps_ms, 0.5))
            print(f"warm / {r.scenario}: processing gap p99 {p99:.2f}, p50 {p50:.2f}")
    base = next((r for r in results if r.scenario == "recreate"), None)
    for r in results:
        if base is not None and r is not base and base.gap_seen_s > 0:
            print(f"{r.scenario} / recreate: longest processing gap seen "
                  f"{r.gap_seen_s / base.gap_seen_s:.2f}, rollout time "
                  f"{r.rollout_s / base.rollout_s:.2f}")
    for r in results:
        if r.note:
            print(f"{r.scenario}: {r.note}")
    return 0


def keep_logs(env: environment.LocalEnv, into: Path) -> None:
    """The operator's log and every pod's log directory, copied under `into`."""
    into.mkdir(parents=True, exist_ok=True)
    shutil.copy2(env.root / "operator.log", into / "operator.log")
    if env.pod_log_dir.exists():
        shutil.copytree(env.pod_log_dir, into / "pods", dirs_exist_ok=True)
    print(f"logs kept in {into}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
