"""Operator figures: reconcile latency, memory at rest, and catching up after a restart.

Brings up its own environment (Kafka, kube-apiserver/etcd/kube-controller-manager, the local
node), installs the CRD and runs the operator as a real process (`staticfleet operator run`,
default settings), then measures:

1. reconcile latency: from the start of `kubectl apply` of a ConsumerGroup of 3 members to all 3
   member pods existing in the API (median and p90 of --runs, distinct names, each deleted before
   the next);
2. the operator's RSS at rest (VmRSS from /proc/<pid>/status) after those runs;
3. catching up after a restart: --groups ConsumerGroups of 3 members exist with all their pods;
   the operator is stopped (SIGTERM) and started again; the figure is the time from the restart
   moment until every ConsumerGroup's status.lastReconciled is at or after that moment.

Members are placeholders, not the member runtime: a ~10-line Python HTTP responder answering the
probes (200 on /healthz and /readyz, 404 elsewhere), so no Kafka consumer or Spark runs and the
figures isolate the operator. (A bare `sleep` would fail the liveness probe and be restarted by
the local node every minute, adding pod churn that is not the operator's doing.)

Run: python bench/operator_figures.py [--runs 10] [--groups 100]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kubernetes import client, config  # noqa: E402

from staticfleet.decisions.conditions import parse_rfc3339  # noqa: E402
from staticfleet_dev import environment  # noqa: E402
from staticfleet_dev.kafka import KafkaSettings  # noqa: E402
from tests.support.kube import create_namespace, install_crds, kubectl, to_yaml  # noqa: E402
from tests.support.operator import OperatorProcess  # noqa: E402

NAMESPACE = "figures"
MEMBERS = 3
PLACEHOLDER_CODE = """
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path in ("/healthz", "/readyz") else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer((os.environ["STATICFLEET_HTTP_HOST"], 8080), H).serve_forever()
"""
PLACEHOLDER = ["python", "-c", PLACEHOLDER_CODE]
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


def pods_by_group(core: client.CoreV1Api) -> dict[str, int]:
    items = core.list_namespaced_pod(NAMESPACE, label_selector=SELECTOR).items
    out: dict[str, int] = {}
    for p in items:
        if p.metadata.deletion_timestamp is None:
            group = p.metadata.labels["staticfleet.io/group"]
            out[group] = out.get(group, 0) + 1
    return out


def wait(what: str, check: Any, timeout: float, interval: float = 0.02) -> float:
    """Poll until `check()` is true; the monotonic time it was first seen true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit(f"no VmRSS for pid {pid}")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--name", default="figures", help="name of the local environment")
    args = ap.parse_args()

    print(f"bringing up environment {args.name!r} (Kafka, control plane, local node) ...",
          flush=True)
    env = environment.up(args.name, kafka_settings=KafkaSettings.for_tests(), with_node=True)
    op: OperatorProcess | None = None
    rows: list[tuple[str, str]] = []
    try:
        for attempt in range(3):  # `kubectl wait` may race the CRD's first status
            try:
                install_crds(env.kubeconfig)
                break
            except AssertionError:
                if attempt == 2:
                    raise
                time.sleep(1)
        create_namespace(env.kubeconfig, NAMESPACE)
        topic = "figures"
        admin = AdminClient({"bootstrap.servers": env.bootstrap})
        for fut in admin.create_topics([NewTopic(topic, 6, 1)]).values():
            fut.result(timeout=30)
        del admin  # no client left to complain once the broker is down
        api = config.new_client_from_config(config_file=str(env.kubeconfig))
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)

        # Outside the environment's directory, which `down` removes.
        log = Path(tempfile.mkdtemp(prefix="staticfleet-figures-")) / "operator.log"
        print(f"operator log: {log}", flush=True)
        op = OperatorProcess(kubeconfig=env.kubeconfig, log=log)
        op.start()
        assert op.proc is not None
        time.sleep(3)

        # 1. Reconcile latency, apply -> 3 pods exist.
        latencies = []
        for i in range(args.runs):
            name = f"lat-{i}"
            doc = to_yaml(consumer_group(name, env.bootstrap, topic))
            t0 = time.monotonic()
            kubectl(env.kubeconfig, "apply", "-f", "-", input=doc)
            t1 = wait(f"3 pods of {name}", lambda n=name: pods_by_group(core).get(n) == MEMBERS,
                      timeout=60)
            latencies.append(t1 - t0)
            print(f"  run {i + 1}: {t1 - t0:.3f} s", flush=True)
            kubectl(env.kubeconfig, "-n", NAMESPACE, "delete", "consumergroup", name,
                    "--wait=false")
            wait(f"pods of {name} gone", lambda n=name: n not in pods_by_group(core), timeout=60,
                 interval=0.2)
        time.sleep(10)  # at rest: no group left, nothing due
        rss_rest = rss_kib(op.proc.pid)

        # 3. Catch up after a restart with N groups of 3 placeholder members.
        docs = "\n---\n".join(to_yaml(consumer_group(f"cg-{i:03d}", env.bootstrap, topic))
                              for i in range(args.groups))
        t0 = time.monotonic()
        kubectl(env.kubeconfig, "apply", "-f", "-", input=docs, timeout=300)
        total = args.groups * MEMBERS
        t1 = wait(f"{total} member pods", lambda: sum(pods_by_group(core).values()) == total,
                  timeout=900, interval=0.5)
        cold = t1 - t0
        print(f"  {args.groups} groups applied, {total} pods exist after {cold:.1f} s", flush=True)
        time.sleep(20)  # let the pods start and settle
        rss_loaded = rss_kib(op.proc.pid)

        stop_t0 = time.monotonic()
        op.stop()
        stop_s = time.monotonic() - stop_t0  # OperatorProcess.stop: SIGKILL after 20 s
        # lastReconciled has second precision: restart exactly on a whole second, so "at or
        # after the restart second" means "reconciled by the new process".
        now = time.time()
        time.sleep(math.ceil(now) - now + 1.0)
        restart_wall = datetime.fromtimestamp(math.floor(time.time()), UTC)
        t_restart = time.monotonic()
        op.proc = None
        op.start()
        healthy = time.monotonic() - t_restart

        def all_caught_up() -> bool:
            objs = custom.list_namespaced_custom_object(
                "staticfleet.io", "v1alpha1", NAMESPACE, "consumergroups")["items"]
            fresh = [o for o in objs if (o.get("status") or {}).get("lastReconciled")
                     and parse_rfc3339(o["status"]["lastReconciled"]) >= restart_wall]
            return len(fresh) == args.groups

        t_done = wait("every group reconciled after the restart", all_caught_up, timeout=900,
                      interval=0.25)
        catch_up = t_done - t_restart
        rss_after = rss_kib(op.proc.pid)
        pods_after = sum(pods_by_group(core).values())

        rows = [
            ("reconcile latency, apply -> 3 pods exist, median "
             f"(n={args.runs})", f"{statistics.median(latencies):.3f} s"),
            (f"reconcile latency, p90 (n={args.runs})", f"{percentile(latencies, 90):.3f} s"),
            ("reconcile latency, min / max",
             f"{min(latencies):.3f} / {max(latencies):.3f} s"),
            ("operator RSS at rest (after the latency runs, no groups)",
             f"{rss_rest / 1024:.1f} MiB"),
            (f"cold start: apply {args.groups} groups -> {total} pods exist",
             f"{cold:.1f} s"),
            (f"operator RSS with {args.groups} groups / {total} members",
             f"{rss_loaded / 1024:.1f} MiB"),
            ("operator stop (SIGTERM -> exited; SIGKILL at 20 s)", f"{stop_s:.1f} s"),
            ("operator restart -> healthz answers", f"{healthy:.1f} s"),
            (f"restart -> all {args.groups} groups reconciled (lastReconciled >= restart)",
             f"{catch_up:.1f} s"),
            (f"operator RSS after the catch-up ({args.groups} groups)",
             f"{rss_after / 1024:.1f} MiB"),
            ("member pods after the restart (none recreated or lost)", f"{pods_after}"),
        ]
    finally:
        if op is not None:
            op.stop()
        environment.down(args.name)

    width = max(len(k) for k, _ in rows)
    print()
    print("members are PLACEHOLDERS (a tiny HTTP responder, no Kafka consumer, no Spark): the "
          "figures isolate the operator")
    print(f"{'figure':<{width}}  value")
    print(f"{'-' * width}  {'-' * 12}")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
