"""The per-cluster reads' Kafka requests at scale (issue 37): N groups on a three-broker cluster,
read together (`staticfleet.observe.clusterreads`) for a simulated span at rest, the requests
counted in the brokers' own request logs (`kafka.request.logger` at DEBUG: API and client id).

The groups have committed offsets on a few topics and no member (the case where the lag must
come from the brokers). Reads are made as the operator makes them at rest: one per interval,
the committed and end offsets once a minute. The reads' clock is simulated (the reads take time
as an argument: `--minutes` of reads take seconds), the requests are real. Printed: requests of
the cold read (the client connects and finds every coordinator), per interval at rest, per
second at rest, and the lag and offsets reads (OffsetFetch, ListOffsets) per group per minute;
beside them, what one pass of each group costs with the per-group reads (`kafkareads`) for the
first `--per-group` groups, scaled to N.

Run: python bench/cluster_reads.py [--groups 1000] [--minutes 3] [--per-group 50]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from staticfleet.observe import kafkaadmin, kafkareads
from staticfleet.observe.clusterreads import INTERVAL_S, ClusterReader, Registration
from staticfleet_dev.kafka import KafkaCluster, KafkaSettings, start_kafka_cluster

TOPICS = 10
PARTITIONS = 6
CLIENT = "cluster-reads-bench"


def commit_offsets(cluster: KafkaCluster, topics: list[str], groups: int) -> list[Registration]:
    """An offset committed on every partition of one topic for each group (asked again for
    the groups whose coordinator was still loading: the admin client's result carries that per
    partition and does not fail)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wanted = {f"bench-{i:04d}": [TopicPartition(topics[i % len(topics)], p, i % 7)
                                 for p in range(PARTITIONS)] for i in range(groups)}
    left = dict(wanted)
    deadline = time.monotonic() + 300
    while left:
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(left)} groups' offsets not committed in 300 s")
        futures = {g: f for g, offsets in left.items() for f in admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(g, offsets)]).values()}
        left = {g: left[g] for g, f in futures.items()
                if any(tp.error is not None for tp in f.result(timeout=120).topic_partitions)}
        if left:
            time.sleep(1)
    return [Registration(g, ("classic", "consumer")[i % 2], (offsets[0].topic,))
            for i, (g, offsets) in enumerate(wanted.items())]


def logged(cluster: KafkaCluster, sizes: dict[int, int], client: str) -> Counter[str]:
    time.sleep(1.0)  # a broker logs a request once it answered it
    return Counter(api for api, who in cluster.requests(sizes) if who == client)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--per-group", type=int, default=50)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cluster-reads-bench-"))
    cluster = start_kafka_cluster(root, settings=replace(KafkaSettings.for_tests(),
                                                         log_requests=True))
    try:
        topics = [cluster.make_topic(f"bench-t{i}", PARTITIONS) for i in range(TOPICS)]
        t0 = time.monotonic()
        registrations = commit_offsets(cluster, topics, args.groups)
        print(f"{args.groups} groups with committed offsets in {time.monotonic() - t0:.0f} s")
        reader = ClusterReader({"bootstrap.servers": cluster.bootstrap},
                               settings={"client_id": CLIENT})
        for r in registrations:
            reader.register(r, 0.0)
        sizes = cluster.log_sizes()
        took = time.monotonic()
        reader.read(0.0)
        took = time.monotonic() - took
        cold = logged(cluster, sizes, CLIENT)
        reads = int(args.minutes * 60 / INTERVAL_S)
        sizes = cluster.log_sizes()
        slowest = 0.0
        for n in range(1, reads + 1):
            for r in registrations:  # every group's pass registers it again
                reader.register(r, n * INTERVAL_S)
            started = time.monotonic()
            reader.read(n * INTERVAL_S)
            slowest = max(slowest, time.monotonic() - started)
        rest = logged(cluster, sizes, CLIENT)
        span_s = reads * INTERVAL_S
        coordinators = len(set(reader.coordinators.values()))
        answered = sum(1 for r in registrations
                       if (d := reader.group(r.group_id).described) is not None
                       and d.at == reads * INTERVAL_S and d.outcome.view is not None
                       and d.outcome.view.state == "Empty")
        if answered != args.groups:
            raise SystemExit(f"only {answered} of {args.groups} groups read as Empty")
        print(f"cold read ({took:.2f} s): {dict(cold)}")
        print(f"at rest, {reads} reads over {span_s / 60:.1f} simulated minutes "
              f"({coordinators} coordinators; slowest read {slowest:.2f} s): {dict(rest)}")
        print(f"  per interval ({INTERVAL_S:.0f} s): {sum(rest.values()) / reads:.1f} requests; "
              f"per second: {sum(rest.values()) / span_s:.2f}")
        minutes = span_s / 60
        for api in ("OFFSET_FETCH", "LIST_OFFSETS"):
            print(f"  {api} per group per minute: {rest[api] / args.groups / minutes:.4f}")
        reads_per_group = (rest["OFFSET_FETCH"] + rest["LIST_OFFSETS"]) / args.groups / minutes
        print(f"  lag and offsets reads per group per minute: {reads_per_group:.4f}")
        reader.close()

        pool = kafkaadmin.AdminPool()
        admin = pool.get({"bootstrap.servers": cluster.bootstrap})
        some = registrations[:args.per_group]
        sizes = cluster.log_sizes()
        for r in some:  # every pass (RESYNC_S)
            kafkareads.describe_group(admin, r.group_id, r.protocol)
            kafkareads.topics_seen(admin, r.topics)
        per_pass = logged(cluster, sizes, "staticfleet-operator")
        sizes = cluster.log_sizes()
        for r in some:  # once a minute (lagreads.READ_INTERVAL_S), with no member reporting
            kafkareads.committed_offsets(admin, r.group_id,
                                         [(t, p) for t in r.topics for p in range(PARTITIONS)])
        per_minute = logged(cluster, sizes, "staticfleet-operator")
        sizes = cluster.log_sizes()  # once a minute, one request per leader for the cluster
        kafkareads.end_offsets(admin, [(t, p) for t in topics for p in range(PARTITIONS)])
        ends = logged(cluster, sizes, "staticfleet-operator")
        pool.close()
        scale = args.groups / len(some)
        rate = ((sum(per_pass.values()) / INTERVAL_S + sum(per_minute.values()) / 60) * scale
                + sum(ends.values()) / 60)
        print(f"per-group reads of {len(some)} groups: each pass {dict(per_pass)}, each minute "
              f"{dict(per_minute)} and, for the cluster, {dict(ends)}; for {args.groups} groups "
              f"at rest: {rate:.0f} requests/s, OFFSET_FETCH per group per minute "
              f"{per_minute['OFFSET_FETCH'] / len(some):.2f}")
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
