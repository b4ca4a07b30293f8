"""Operator figures at scale: N ConsumerGroups, the operator restarted, and the cost at rest.

Brings up its own environment (Kafka, kube-apiserver/etcd/kube-controller-manager, the local
node), installs the CRD and runs the operator as a real process (`staticfleet operator run`,
default settings). With `--baseline REV` it runs the same measurements on the operator of an
earlier commit (a git worktree of REV) first, in the same environment and the same run, and
prints both columns and their ratio.

For each variant:
1. apply -> pods: from `kubectl apply` of a ConsumerGroup of 3 members to all 3 member pods
   existing (median and p90 of --runs, distinct names, each deleted before the next);
2. at rest with --groups groups of 3 members, over --window seconds: the API requests the
   operator makes per group per minute, from the API server's own `apiserver_request_total`
   (the increase while the operator runs minus the increase over a window with no operator, so
   the local node's and the controller manager's requests are not counted), the operator's CPU
   share (utime+stime from /proc) and its RSS;
3. Kafka at rest, over the same window: the requests the operator's clients (client id
   `staticfleet-operator`) make, counted in the brokers' own request logs (`kafka.request.logger`
   at DEBUG), per second per cluster and, for the lag and offsets reads (OffsetFetch,
   ListOffsets), per group per minute. Each group has committed offsets on the topic and no
   member in it (the placeholders run no consumer): the case where every member is down and the
   lag must come from the brokers; members that run report their lag themselves, and the
   operator then reads none;
4. catching up: the operator is stopped and started again; the figure is the time from the
   restart until every group was reconciled by the new process (its
   `staticfleet_reconcile_last_timestamp_seconds` at or after the restart; an operator without
   that metric is judged by `status.lastReconciled`, which it wrote on every pass).

Members are placeholders, not the member runtime: a ~10-line Python HTTP responder answering the
probes (200 on /healthz and /readyz, 404 elsewhere), so no Kafka consumer or Spark runs and the
figures isolate the operator.

Run: python bench/operator_figures.py [--groups 500] [--runs 10] [--baseline d67b5a7]
     [--brokers 3]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kubernetes import client, config

from staticfleet.decisions.conditions import parse_rfc3339
from staticfleet_dev import environment
from staticfleet_dev.kafka import KafkaCluster, KafkaNode, KafkaSettings
from staticfleet_dev.testkit import figures
from staticfleet_dev.testkit.groups import PLACEHOLDER_MEMBER as PLACEHOLDER
from staticfleet_dev.testkit.kube import create_namespace, install_crds, kubectl, to_yaml
from staticfleet_dev.testkit.operator import OperatorProcess, Variant, worktree
from staticfleet_dev.testkit.poll import wait_for

NAMESPACE = "figures"
MEMBERS = 3
SELECTOR = "app.kubernetes.io/managed-by=staticfleet,app.kubernetes.io/name=staticfleet-member"


def consumer_group(name: str, bootstrap: str, topic: str) -> dict[str, Any]:
    return {
        "apiVersion": "staticfleet.io/v1alpha1", "kind": "ConsumerGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": MEMBERS,
            "kafka": {"bootstrapServers": bootstrap, "topics": [topic]},
            "template": {"image": "placeholder", "command": PLACEHOLDER,
                         "terminationGracePeriodSeconds": 2},
            "processing": {"spark": {"master": "local[1]"}, "sink": {"type": "null"}},
        },
    }


def kafka_logs(env: Any) -> KafkaCluster:
    """The environment's brokers as a cluster (a single broker is a cluster of one), to read
    their request logs."""
    if env.brokers > 1:
        return env.cluster()
    rec = env.record("kafka")
    node = KafkaNode(1, env.root / "kafka", env.bootstrap, [], rec)
    return KafkaCluster(env.root / "kafka", {1: node})


def commit_offsets(bootstrap: str, topic: str, partitions: int, groups: int) -> None:
    """Records on `topic`, and an offset committed half-way for every group: each group has
    lag, and no member (the placeholders run no consumer)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(100 * partitions):
        producer.produce(topic, value=b"x", partition=i % partitions)
    producer.flush(60)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(groups):
        offsets = [TopicPartition(topic, p, 50) for p in range(partitions)]
        futures = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(f"cg-{i:03d}", offsets)])
        for fut in futures.values():
            fut.result(timeout=60)


def pods_by_group(core: client.CoreV1Api) -> dict[str, int]:
    items = core.list_namespaced_pod(NAMESPACE, label_selector=SELECTOR).items
    out: dict[str, int] = {}
    for p in items:
        if p.metadata.deletion_timestamp is None:
            group = p.metadata.labels["staticfleet.io/group"]
            out[group] = out.get(group, 0) + 1
    return out


def api_requests(kubeconfig: Path) -> tuple[float, float]:
    """The API server's own count of requests it served (apiserver_request_total): all of
    them, and those on consumergroups (which only the operator makes)."""
    counts = figures.api_requests(kubectl(kubeconfig, "get", "--raw", "/metrics",
                                          timeout=60).stdout)
    return (sum(counts.values()),
            sum(n for (_verb, resource), n in counts.items() if resource == "consumergroups"))


def requests_per_minute(kubeconfig: Path, window: float) -> tuple[float, float]:
    """(all, consumergroups) requests per minute over `window` seconds."""
    before = api_requests(kubeconfig)
    time.sleep(window)
    after = api_requests(kubeconfig)
    return ((after[0] - before[0] - 1) * 60 / window,  # -1: the first scrape
            (after[1] - before[1]) * 60 / window)


def reconciled_since(op: OperatorProcess, custom: client.CustomObjectsApi, groups: int,
                     since: float) -> bool:
    """Every group had a pass of this operator process finish at or after `since` (Unix)."""
    stamps = [line for line in op.metrics().splitlines()
              if line.startswith("staticfleet_reconcile_last_timestamp_seconds{")
              and 'group="cg-' in line]
    if stamps or _has_metric(op):
        return sum(1 for line in stamps if float(line.rsplit(" ", 1)[1]) >= since) == groups
    objs = custom.list_namespaced_custom_object(
        "staticfleet.io", "v1alpha1", NAMESPACE, "consumergroups")["items"]
    second = datetime.fromtimestamp(math.floor(since), UTC)
    return sum(1 for o in objs if o["metadata"]["name"].startswith("cg-")
               and (o.get("status") or {}).get("lastReconciled")
               and parse_rfc3339(o["status"]["lastReconciled"]) >= second) == groups


def _has_metric(op: OperatorProcess) -> bool:
    return "staticfleet_reconcile_last_timestamp_seconds" in op.metrics()


def measure(variant: Variant, env: Any, core: client.CoreV1Api,
            custom: client.CustomObjectsApi, topic: str, args: argparse.Namespace,
            idle_rpm: tuple[float, float], logdir: Path) -> dict[str, float]:
    """The figures of one operator; the --groups groups exist already."""
    out: dict[str, float] = {}
    op = variant.process(env.kubeconfig, logdir / f"operator-{variant.slug}.log")
    try:
        # Catching up with the groups another process (or nobody) reconciled before.
        t0 = time.time()
        op.start()
        wait_for("every group reconciled",
                 lambda: reconciled_since(op, custom, args.groups, t0), timeout=1800)
        out["first start -> all groups reconciled (s)"] = time.time() - t0

        latencies = []
        for i in range(args.runs):
            name = f"lat-{variant.slug}-{i}"
            doc = to_yaml(consumer_group(name, env.bootstrap, topic))
            t1 = time.monotonic()
            kubectl(env.kubeconfig, "apply", "-f", "-", input=doc)
            wait_for(f"3 pods of {name}", lambda n=name: pods_by_group(core).get(n) == MEMBERS,
                     timeout=120, interval=0.02)
            latencies.append(time.monotonic() - t1)
            kubectl(env.kubeconfig, "-n", NAMESPACE, "delete", "consumergroup", name,
                    "--wait=false")
            wait_for(f"pods of {name} gone", lambda n=name: n not in pods_by_group(core),
                     timeout=120, interval=0.2)
        out[f"apply -> 3 pods, median of {args.runs} (s)"] = statistics.median(latencies)
        out[f"apply -> 3 pods, p90 of {args.runs} (s)"] = figures.percentile(latencies, 90)

        time.sleep(args.settle)
        assert op.proc is not None
        cluster = kafka_logs(env)
        sizes = cluster.log_sizes()
        cpu0, t3 = figures.cpu_seconds(op.proc.pid), time.monotonic()
        rpm = requests_per_minute(env.kubeconfig, args.window)
        took = time.monotonic() - t3
        cpu = (figures.cpu_seconds(op.proc.pid) - cpu0) / took
        mine = [api for api, who in cluster.requests(sizes) if who == "staticfleet-operator"]
        reads = sum(1 for api in mine if api in ("OFFSET_FETCH", "LIST_OFFSETS"))
        out["at rest: Kafka requests/s of the operator (cluster)"] = len(mine) / took
        out["at rest: Kafka lag+offsets reads per group per minute"] = (
            reads * 60 / took / args.groups)
        for api in sorted(set(mine)):
            out[f"at rest: Kafka {api} per group per minute"] = (
                mine.count(api) * 60 / took / args.groups)
        out["at rest: API requests/min, all clients (operator running)"] = rpm[0]
        out["at rest: API requests/min, all clients (no operator)"] = idle_rpm[0]
        out["at rest: operator's API requests per group per minute (difference)"] = (
            (rpm[0] - idle_rpm[0]) / args.groups)
        out["at rest: consumergroups requests per group per minute"] = (
            (rpm[1] - idle_rpm[1]) / args.groups)
        out["at rest: operator CPU (% of one core)"] = 100 * cpu
        out["at rest: operator RSS (MiB)"] = figures.rss_kib(op.proc.pid) / 1024

        op.stop()
        t4 = time.time()
        op.proc = None
        op.start()
        wait_for("every group reconciled after the restart",
                 lambda: reconciled_since(op, custom, args.groups, t4), timeout=1800)
        out["restart -> all groups reconciled (s)"] = time.time() - t4
        out["member pods after the restart"] = sum(pods_by_group(core).values())
    finally:
        op.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--window", type=float, default=60.0,
                    help="seconds of each at-rest window")
    ap.add_argument("--settle", type=float, default=30.0,
                    help="seconds to wait before measuring at rest")
    ap.add_argument("--baseline", metavar="REV",
                    help="also measure the operator of this earlier commit, side by side")
    ap.add_argument("--name", default="figures", help="name of the local environment")
    ap.add_argument("--brokers", type=int, choices=(1, 3), default=1,
                    help="Kafka brokers of the environment")
    args = ap.parse_args()

    with contextlib.ExitStack() as stack:
        variants = [Variant("new")]
        if args.baseline:
            tree = stack.enter_context(worktree(args.baseline))
            variants.insert(0, Variant(f"baseline {args.baseline}", tree))
        return run(args, variants)


def run(args: argparse.Namespace, variants: list[Variant]) -> int:

    print(f"bringing up environment {args.name!r} (Kafka, control plane, local node) ...",
          flush=True)
    settings = KafkaSettings.for_tests()
    settings.log_requests = True
    env = environment.up(args.name, kafka_settings=settings, with_node=True,
                         brokers=args.brokers)
    results: dict[str, dict[str, float]] = {}
    try:
        install_crds(env.kubeconfig)
        create_namespace(env.kubeconfig, NAMESPACE)
        topic = "figures"
        admin = AdminClient({"bootstrap.servers": env.bootstrap})
        for fut in admin.create_topics([NewTopic(topic, 6)]).values():
            fut.result(timeout=30)
        del admin  # no client left to complain once the broker is down
        commit_offsets(env.bootstrap, topic, 6, args.groups)
        api = config.new_client_from_config(config_file=str(env.kubeconfig))
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        logdir = Path(tempfile.mkdtemp(prefix="staticfleet-figures-"))
        print(f"operator logs: {logdir}", flush=True)

        # The groups, created by the first variant's operator.
        op = variants[0].process(env.kubeconfig, logdir / "operator-create.log").start()
        t0 = time.monotonic()
        for first in range(0, args.groups, 25):  # in chunks: one huge apply times out
            docs = "\n---\n".join(
                to_yaml(consumer_group(f"cg-{i:03d}", env.bootstrap, topic))
                for i in range(first, min(first + 25, args.groups)))
            kubectl(env.kubeconfig, "apply", "-f", "-", input=docs, timeout=900)
        total = args.groups * MEMBERS
        wait_for(f"{total} member pods", lambda: sum(pods_by_group(core).values()) == total,
                 timeout=3600, interval=1)
        print(f"{args.groups} groups, {total} pods after {time.monotonic() - t0:.1f} s",
              flush=True)
        op.stop()
        time.sleep(args.settle)
        idle_rpm = requests_per_minute(env.kubeconfig, args.window)
        print(f"API requests per minute with no operator running: {idle_rpm[0]:.1f}",
              flush=True)
        for variant in variants:
            print(f"measuring {variant.label} ...", flush=True)
            results[variant.label] = measure(variant, env, core, custom, topic, args, idle_rpm,
                                             logdir)
            print(f"  {results[variant.label]}", flush=True)
    finally:
        environment.down(args.name)

    labels = [v.label for v in variants]
    rows = list(results[labels[-1]])
    width = max(len(r) for r in rows)
    print()
    print(f"{args.groups} groups of {MEMBERS} PLACEHOLDER members (a tiny HTTP responder, no "
          f"Kafka consumer, no Spark) on {args.brokers} broker(s): the figures isolate the "
          "operator; Kafka sees each group with committed offsets and no member")
    head = "".join(f"{label:>24}" for label in labels)
    ratio = f"{'new / baseline':>16}" if len(labels) == 2 else ""
    print(f"{'figure':<{width}}{head}{ratio}")
    for row in rows:
        values = [results[label].get(row) for label in labels]
        cells = "".join(f"{v:>24.3f}" if v is not None else f"{'-':>24}" for v in values)
        if len(values) == 2 and values[0] and values[1] is not None:
            cells += f"{values[1] / values[0]:>16.2f}"
        print(f"{row:<{width}}{cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
