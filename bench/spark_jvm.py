"""A member's local Spark JVM, two variants side by side in one run.

Each variant runs in a fresh process, alternating (A B A B ...), as a member starts: the local
session, the standby's warm-up (count_by_key into the Parquet sink's scratch write), then
`--batches` batches of `--records` records through count_by_key into Parquet files. Printed
per variant: session start, warm-up, the first batch after the warm-up (what a warm handoff's
replacement runs first: its processing gap), batch p50/p99 and the JVM's CPU seconds (user +
system, from /proc), and the ratios of the second variant to the first.

    python bench/spark_jvm.py                     # default JVM vs -XX:TieredStopAtLevel=1
    python bench/spark_jvm.py --warm-up 1,500     # warm-up on 1 made-up record vs 500
    python bench/spark_jvm.py --conf spark.sql.shuffle.partitions=1   # the runtime's Spark
                                                  # settings vs the same with this one changed
    python bench/spark_jvm.py --rounds 3 --batches 60
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from consumer_runtime.spark import WARM_UP_RECORDS

C1_ONLY = "-XX:TieredStopAtLevel=1"


def one(conf: dict[str, str], records: int, batches: int, warm_up: int) -> dict[str, float]:
    """In this process: start (the runtime's local Spark settings, `conf` over them), warm up,
    run the batches; return the figures."""
    from consumer_runtime.config import SparkSettings
    from consumer_runtime.records import Batch
    from consumer_runtime.sinks import ParquetSink
    from consumer_runtime.spark import SparkBatch, start_session
    from consumer_runtime.transforms import count_by_key

    began = time.monotonic()
    session = start_session(SparkSettings("local", None, "local[2]", conf), "bench-jvm")
    started = time.monotonic() - began
    out = tempfile.mkdtemp(prefix="bench-jvm-")
    batch = SparkBatch(session, count_by_key, ParquetSink(out), "g", "m")
    began = time.monotonic()
    batch.warm_up(warm_up)
    warmed = time.monotonic() - began
    seconds = []
    for i in range(batches):
        rows = [_Rec(i * records + j) for j in range(records)]
        began = time.monotonic()
        batch.run(i + 1, Batch.of(rows))
        seconds.append(time.monotonic() - began)
    jvm = session.sparkContext._gateway.proc.pid  # type: ignore[attr-defined]
    with open(f"/proc/{jvm}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    first = seconds[0]
    seconds.sort()
    return {"sessionS": started, "warmUpS": warmed, "firstBatchS": first,
            "batchP50S": statistics.median(seconds),
            "batchP99S": seconds[min(len(seconds) - 1, int(len(seconds) * 0.99))],
            "jvmCpuS": cpu}


class _Rec:
    """A record as confluent_kafka gives it (the parts Batch.of reads)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def key(self) -> bytes:
        return b"key-%d" % (self.n % 50)

    def value(self) -> bytes:
        return b'{"n": %d}' % self.n

    def topic(self) -> str:
        return "orders"

    def partition(self) -> int:
        return self.n % 4

    def offset(self) -> int:
        return self.n

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self.n)

    def headers(self) -> None:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--options", default=C1_ONLY, help="the second variant's JVM options")
    parser.add_argument("--warm-up", help="A,B: compare warm-ups on A and B made-up records "
                        "(both with the runtime's JVM options) instead of JVM options")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="compare the runtime's Spark settings with the same and these "
                        "(repeatable) instead of JVM options")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--records", type=int, default=70)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--one-warm-up", type=int, default=WARM_UP_RECORDS,
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(json.loads(args.one), args.records, args.batches,
                             args.one_warm_up)))
        return 0
    jvm = "spark.driver.extraJavaOptions"
    variants: dict[str, tuple[dict[str, str], int]] = {
        "default JVM": ({jvm: ""}, WARM_UP_RECORDS),
        args.options: ({jvm: args.options}, WARM_UP_RECORDS)}
    if args.warm_up:
        sizes = [int(n) for n in args.warm_up.split(",")]
        variants = {f"warm-up on {n} records": ({}, n) for n in sizes}
    if args.conf:
        changed = dict(kv.split("=", 1) for kv in args.conf)
        variants = {"runtime's settings": ({}, WARM_UP_RECORDS),
                    " ".join(args.conf): (changed, WARM_UP_RECORDS)}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (conf, warm_up) in variants.items():
            proc = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), f"--one={json.dumps(conf)}",
                 f"--one-warm-up={warm_up}",
                 "--batches", str(args.batches), "--records", str(args.records)],
                capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            results[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"{name:>28}: {results[name][-1]}", flush=True)
    keys = ("sessionS", "warmUpS", "firstBatchS", "batchP50S", "batchP99S", "jvmCpuS")
    means = {name: {k: statistics.mean(r[k] for r in runs) for k in keys}
             for name, runs in results.items()}
    first, second = list(means)
    print(f"\nmeans over {args.rounds} runs each ({args.batches} batches of {args.records} "
          f"records; load {os.getloadavg()[0]:.1f} at the end):")
    for k in keys:
        print(f"  {k:>10}: {first} {means[first][k]:7.3f}  {second} {means[second][k]:7.3f}  "
              f"ratio {means[second][k] / means[first][k]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
