"""Scaling benchmark: what a scale-down and a scale-up cost the partitions, side by side in one run.

4 members on 12 partitions under a steady produce rate, for each protocol (classic, consumer):
scale 4 -> 3, then 3 -> 4. For each step: the longest time a partition had no owner in the
broker's assignment, the longest time a partition's committed offset did not move while records
arrived (unprocessed), and the same for the partitions that kept their owner (what a join
costs the others), beside the session timeout; rebalances (the operator's count, and how many of
them it planned); records lost (must be 0).

`--baseline REV` runs the same steps with the operator of git revision REV (from a worktree; the
members run this checkout's runtime either way), first, in the same run: today's figures beside the
baseline's.

Run: python bench/scaling.py [--rate 400] [--protocols classic,consumer] [--baseline REV]
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from staticfleet_dev import environment
from staticfleet_dev.kafka import KafkaSettings
from staticfleet_dev.stream import SteadyProducer, read_all
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import create_namespace, install_crds, kubectl
from staticfleet_dev.testkit.operator import Variant, worktree

MEMBERS, PARTITIONS = 4, 12
SESSION_MS = 30000


@dataclass
class Watch:
    """Samples, every 0.25 s, who owns each partition (the broker) and each partition's committed
    offset (the group), and keeps for each partition when it was last owned and last moved."""

    bootstrap: str
    group: str
    topic: str
    unowned_s: dict[int, float] = field(default_factory=dict)
    stalled_s: dict[int, float] = field(default_factory=dict)
    owners: dict[int, set[str]] = field(default_factory=dict)
    """Every member seen owning each partition (one: it never moved)."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Watch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        reader = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                           "enable.auto.commit": False})
        parts = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        now = time.monotonic()
        owned_at = dict.fromkeys(range(PARTITIONS), now)
        moved_at = dict.fromkeys(range(PARTITIONS), now)
        last: dict[int, int] = {}
        try:
            while not self._stop.wait(0.25):
                now = time.monotonic()
                try:
                    desc = admin.describe_consumer_groups([self.group])[self.group].result(10)
                    holder = {tp.partition: m.group_instance_id or m.member_id
                              for m in desc.members for tp in m.assignment.topic_partitions
                              if tp.topic == self.topic}
                    owned = set(holder)
                    committed = {tp.partition: tp.offset
                                 for tp in reader.committed(parts, timeout=10)}
                except KafkaException:
                    continue
                for p in range(PARTITIONS):
                    if p in owned:
                        owned_at[p] = now
                        self.owners.setdefault(p, set()).add(holder[p])
                    self.unowned_s[p] = max(self.unowned_s.get(p, 0.0), now - owned_at[p])
                    if committed.get(p) != last.get(p):
                        moved_at[p], last[p] = now, committed.get(p, -1)
                    self.stalled_s[p] = max(self.stalled_s.get(p, 0.0), now - moved_at[p])
        finally:
            reader.close()


@dataclass
class Step:
    operator: str
    protocol: str
    step: str
    unowned_s: float
    unprocessed_s: float
    kept_unprocessed_s: float
    """The longest unprocessed time of the partitions that kept their owner."""
    session_ms: int
    rebalances: int
    planned: int
    lost: int


def scale_step(kc: Path, namespace: str, name: str, env: environment.LocalEnv, topic: str,
               replicas: int, settle: float) -> tuple[float, float, int, int]:
    """Scale to `replicas`; the longest unowned and unprocessed times (s) until `settle` s after
    the group is Ready again, and never before the session timeout plus `settle` has passed
    since the scale (a removed static member that did not leave holds its partitions, listed
    by the broker as owned, until its session times out), and the rebalances (all, planned) the
    operator counted."""
    before = groups.get(kc, namespace, name)["status"]
    watch = Watch(env.bootstrap, name, topic).start()
    time.sleep(2)
    scaled = time.monotonic()
    kubectl(kc, "-n", namespace, "patch", "cg", name, "--type=merge", "-p",
            f'{{"spec": {{"replicas": {replicas}}}}}')
    groups.wait_status(kc, namespace, name, lambda o: groups.ready_and_idle(o)
                       and o["status"].get("replicas") == replicas, 300, f"Ready with {replicas}")
    time.sleep(max(settle, scaled + SESSION_MS / 1000 + settle - time.monotonic()))
    watch.stop()
    after = groups.get(kc, namespace, name)["status"]
    rebalances = int(after.get("rebalances") or 0) - int(before.get("rebalances") or 0)
    planned = int(after.get("plannedRebalances") or 0) - int(before.get("plannedRebalances") or 0)
    kept = [watch.stalled_s[p] for p, seen in watch.owners.items() if len(seen) == 1]
    return (max(watch.unowned_s.values()), max(watch.stalled_s.values()), max(kept, default=0.0),
            rebalances, planned)


def run_protocol(label: str, protocol: str, env: environment.LocalEnv, admin: AdminClient,
                 rate: float, settle: float) -> list[Step]:
    kc = env.kubeconfig
    namespace = f"bench-scale-{label}-{protocol}-{int(time.time()) % 100000}"
    create_namespace(kc, namespace)
    name = f"scale-{protocol}"
    topic, out = f"{namespace}-in", f"{namespace}-out"
    for fut in admin.create_topics([NewTopic(topic, PARTITIONS, 1),
                                    NewTopic(out, PARTITIONS, 1)]).values():
        fut.result(30)
    groups.start(kc, namespace, groups.consumer_group(
        name, env.bootstrap, topic, replicas=MEMBERS, out_topic=out, session_ms=SESSION_MS,
        protocol=protocol, max_records=5000), timeout=300)
    producer = SteadyProducer(env.bootstrap, topic, rate=rate, keys=64).start()
    time.sleep(settle)
    steps = []
    for replicas, step in ((MEMBERS - 1, f"{MEMBERS} -> {MEMBERS - 1}"),
                           (MEMBERS, f"{MEMBERS - 1} -> {MEMBERS}")):
        unowned, stalled, kept, rebalances, planned = scale_step(kc, namespace, name, env, topic,
                                                           replicas, settle)
        steps.append(Step(label, protocol, step, unowned, stalled, kept, SESSION_MS, rebalances,
                          planned, 0))
        print(steps[-1], flush=True)
    produced = producer.stop()
    groups.wait_caught_up(env.bootstrap, name, [topic], timeout=300)
    lost = len(set(producer.produced) - set(read_all(env.bootstrap, out)))
    steps = [Step(**{**s.__dict__, "lost": lost}) for s in steps]
    print(f"  {produced} records produced, {lost} lost", flush=True)
    kubectl(kc, "delete", "namespace", namespace, "--wait=false", check=False)
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=400.0, help="records produced per second")
    parser.add_argument("--settle", type=float, default=15.0,
                        help="seconds of steady consumption before and after each step")
    parser.add_argument("--protocols", default="classic,consumer")
    parser.add_argument("--baseline", default=None, help="git revision of the operator to compare")
    args = parser.parse_args()

    name = "bench-scaling"
    environment.down(name)
    env = environment.up(name, kafka_settings=KafkaSettings.for_tests())
    admin = AdminClient({"bootstrap.servers": env.bootstrap})
    install_crds(env.kubeconfig)
    results: list[Step] = []
    with contextlib.ExitStack() as stack:
        variants = [Variant("staticfleet")]
        if args.baseline:
            variants.insert(0, Variant("baseline", stack.enter_context(
                worktree(args.baseline))))
        try:
            for variant in variants:
                op = variant.process(env.kubeconfig, env.root / f"{variant.label}.log").start()
                try:
                    for protocol in args.protocols.split(","):
                        print(f"--- {variant.label}, {protocol}", flush=True)
                        results += run_protocol(variant.label, protocol, env, admin, args.rate,
                                                args.settle)
                finally:
                    op.stop()
        finally:
            environment.down(name)

    print(f"\n{MEMBERS} members, {PARTITIONS} partitions, {args.rate:.0f} records/s, session "
          f"timeout {SESSION_MS} ms\n")
    head = ("operator", "protocol", "step", "unowned s (max)", "unprocessed s (max)",
            "kept owner: unproc. s", "session s", "rebalances", "planned", "lost")
    print("  ".join(f"{h:>21}" for h in head))
    for r in results:
        print("  ".join(f"{v:>21}" for v in (
            r.operator, r.protocol, r.step, f"{r.unowned_s:.1f}", f"{r.unprocessed_s:.1f}",
            f"{r.kept_unprocessed_s:.1f}", f"{r.session_ms / 1000:.0f}", r.rebalances,
            r.planned, r.lost)))
    if args.baseline:
        print("\nratio (staticfleet / baseline) of the longest unprocessed time:")
        for r in results:
            if r.operator != "staticfleet":
                continue
            base = next((b for b in results if b.operator == "baseline"
                         and b.protocol == r.protocol and b.step == r.step), None)
            if base and base.unprocessed_s:
                print(f"  {r.protocol:>9} {r.step}: {r.unprocessed_s / base.unprocessed_s:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
