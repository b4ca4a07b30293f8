"""ConsumerGroup objects for tests and benchmarks, what their status says and waiting on it;
and the Kafka group as the broker sees it (who owns each partition, what is committed)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from staticfleet.decisions.spec.model import API_GROUP, API_VERSION, KIND
from staticfleet.observe import memberhttp
from staticfleet_dev.stream import committed_lag
from staticfleet_dev.testkit.kube import kubectl, to_yaml
from staticfleet_dev.testkit.poll import Poller, wait_for

PLACEHOLDER_MEMBER = ["python", "-c", """
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path in ("/healthz", "/readyz") else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer((os.environ["STATICFLEET_HTTP_HOST"], 8080), H).serve_forever()
"""]
"""A member stand-in (`spec.template.command`) that only answers the probes (200 on /healthz
and /readyz): no Kafka consumer, no Spark. A bare sleep would be killed by the liveness probe
every minute, which the operator rightly reports as a failing member."""


def consumer_group(name: str, bootstrap: str, topic: str, *, replicas: int = 3,
                   out_topic: str | None = None, session_ms: int | None = None,
                   command: list[str] | None = None, dynamic: bool = False,
                   max_records: int = 2000, env: list[dict[str, str]] | None = None,
                   protocol: str = "classic", strategy: str = "Recreate",
                   connect_url: str | None = None) -> dict[str, Any]:
    """A small group: identity transform, Kafka sink (or null), one Spark core per member, or
    the Spark Connect server at `connect_url` (the session's `spark_connect` fixture).
    `strategy`: spec.rollout.strategy (Recreate unless a test is about warm handoffs: the
    tests of the roller's own rules keep the member pods' names)."""
    sink: dict[str, Any] = {"type": "kafka", "topic": out_topic} if out_topic else {"type": "null"}
    # The heartbeat is the operator's (1000 ms, or a third of a shorter session): a member's
    # leave reaches the others at their next heartbeat, so it bounds a scale-down's hand-over.
    timeouts: dict[str, int] = {} if session_ms is None else {"sessionTimeoutMs": session_ms}
    template: dict[str, Any] = {"image": "staticfleet/member:test",
                                "terminationGracePeriodSeconds": 30,
                                "env": env or []}
    if command:
        template["command"] = command
    obj: dict[str, Any] = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND,
        "metadata": {"name": name, "annotations": {}},
        "spec": {
            "replicas": replicas,
            "kafka": {"bootstrapServers": bootstrap, "topics": [topic]},
            "template": template,
            "membership": {"timeouts": timeouts, "protocol": protocol},
            "rollout": {"strategy": strategy},
            "processing": {
                "transform": "consumer_runtime.transforms:identity",
                "spark": ({"mode": "connect", "connectUrl": connect_url} if connect_url
                          else {"mode": "local", "master": "local[1]"}),
                "batch": {"maxRecords": max_records, "maxWaitMs": 500},
                "sink": sink,
            },
        },
    }
    if dynamic:
        obj["metadata"]["annotations"]["staticfleet.io/dynamic-membership-for-testing"] = "true"
    return obj


def apply(kubeconfig: Path, namespace: str, obj: dict[str, Any]) -> None:
    kubectl(kubeconfig, "-n", namespace, "apply", "-f", "-", input=to_yaml(obj))


def get(kubeconfig: Path, namespace: str, name: str) -> dict[str, Any]:
    out = kubectl(kubeconfig, "-n", namespace, "get", "cg", name, "-o", "json").stdout
    return dict(json.loads(out))


def pods(kubeconfig: Path, namespace: str, name: str) -> list[dict[str, Any]]:
    out = kubectl(kubeconfig, "-n", namespace, "get", "pods", "-l",
                  f"staticfleet.io/group={name}", "-o", "json").stdout
    return list(json.loads(out)["items"])


def events(kubeconfig: Path, namespace: str, name: str,
           reason: str | None = None) -> list[dict[str, Any]]:
    """The ConsumerGroup's Events (of one `reason`, or all)."""
    out = kubectl(kubeconfig, "-n", namespace, "get", "events", "--field-selector",
                  f"involvedObject.kind=ConsumerGroup,involvedObject.name={name}", "-o",
                  "json").stdout
    return [e for e in json.loads(out)["items"] if reason is None or e.get("reason") == reason]


def ready(obj: Mapping[str, Any]) -> bool:
    """Ready, observed at its current generation."""
    st = obj.get("status") or {}
    conds = {c.get("type"): c for c in st.get("conditions") or []}
    return (conds.get("Ready", {}).get("status") == "True"
            and st.get("observedGeneration") == obj["metadata"].get("generation"))


def ready_and_idle(obj: Mapping[str, Any]) -> bool:
    """Ready, observed at its current generation, and no rollout pending."""
    return ready(obj) and ((obj.get("status") or {}).get("rollout") or {}).get("phase") == "Idle"


def rollout_complete(obj: Mapping[str, Any]) -> bool:
    """The rollout of the current spec has finished (not a previous revision's Complete)."""
    st = obj.get("status") or {}
    ro = st.get("rollout") or {}
    return (ro.get("phase") == "Complete" and ro.get("revision") == st.get("updateRevision")
            and st.get("observedGeneration") == obj["metadata"].get("generation"))


def wait_status(kubeconfig: Path, namespace: str, name: str,
                check: Callable[[dict[str, Any]], Any], timeout: float, what: str,
                interval: float = 0.5) -> dict[str, Any]:
    """Poll the ConsumerGroup every `interval` seconds until `check(obj)` is true and return
    it; fail with its last status otherwise."""
    last: dict[str, Any] = {}

    def matches() -> dict[str, Any] | None:
        nonlocal last
        last = get(kubeconfig, namespace, name)
        return last if check(last) else None

    return dict(wait_for(f"{name}: {what}", matches, timeout=timeout, interval=interval,
                         describe=lambda: "status:\n" + json.dumps(last.get("status"),
                                                                   indent=1)[:4000]))


def counters_settled(kubeconfig: Path, namespace: str, name: str,
                     timeout: float = 60) -> dict[str, int]:
    """`status.memberRebalanceCounters` once it holds a counter for every member pod there is:
    the rebalances each member process saw so far (the group's formation, say)."""
    def settled(obj: Mapping[str, Any]) -> bool:
        uids = {p["metadata"]["uid"] for p in pods(kubeconfig, namespace, name)}
        return bool(uids) and uids <= set((obj.get("status") or {}).get(
            "memberRebalanceCounters") or {})

    obj = wait_status(kubeconfig, namespace, name, settled, timeout,
                      "a rebalance counter for every member pod")
    return {uid: int(n) for uid, n in obj["status"]["memberRebalanceCounters"].items()}


def member_counters(kubeconfig: Path, namespace: str, name: str) -> dict[str, int] | None:
    """Each running member's own rebalance counter (its /status `rebalances`), by pod uid;
    None while one does not answer."""
    out = {}
    for pod in pods(kubeconfig, namespace, name):
        ip = (pod.get("status") or {}).get("podIP")
        if pod["metadata"].get("deletionTimestamp"):
            continue
        answer = memberhttp.read_member_status(ip, memberhttp.MEMBER_PORT) if ip else None
        if answer is None:
            return None
        out[pod["metadata"]["uid"]] = int(answer.get("rebalances") or 0)
    return out


def rebalances_seen(before: Mapping[str, int], after: Mapping[str, Any]) -> dict[str, int]:
    """The member pods (uid) whose own rebalance counter rose from `before`
    (`counters_settled`) to the status `after`, by how much; a pod made since counts from 0.
    An old pod still terminating at `after` keeps what it saw before, which is not counted."""
    now = after.get("memberRebalanceCounters") or {}
    return {uid: int(n) - before.get(uid, 0) for uid, n in now.items()
            if int(n) != before.get(uid, 0)}


def start(kubeconfig: Path, namespace: str, obj: dict[str, Any],
          timeout: float = 240) -> dict[str, Any]:
    """Apply a ConsumerGroup and wait until it is Ready with no rollout pending."""
    apply(kubeconfig, namespace, obj)
    return wait_status(kubeconfig, namespace, obj["metadata"]["name"], ready_and_idle, timeout,
                       "Ready")


def start_all(kubeconfig: Path, namespace: str, objs: Sequence[dict[str, Any]],
              timeout: float = 240) -> list[dict[str, Any]]:
    """`start` for several ConsumerGroups that form side by side: apply them all, then wait
    until each is Ready with no rollout pending (`timeout` each)."""
    for obj in objs:
        apply(kubeconfig, namespace, obj)
    return [wait_status(kubeconfig, namespace, obj["metadata"]["name"], ready_and_idle, timeout,
                        "Ready") for obj in objs]


def wait_rollout(kubeconfig: Path, namespace: str, name: str, timeout: float,
                 what: str = "rolled out") -> dict[str, Any]:
    """Wait until the rollout of the group's current spec is complete; the group then."""
    return wait_status(kubeconfig, namespace, name, rollout_complete, timeout, what)


def wait_caught_up(bootstrap: str, group: str, topics: Sequence[str],
                   timeout: float = 180) -> None:
    """Wait until the Kafka consumer group `group` has committed every record of `topics`."""
    def lag() -> dict[str, int]:
        return {topic: committed_lag(bootstrap, group, topic) for topic in topics}

    wait_for(f"{group} to catch up", lambda: all(n <= 0 for n in lag().values()),
             timeout=timeout, interval=1.0,
             describe=lambda: f"records not yet committed, per topic: {lag()}")


TP = tuple[str, int]
"""A topic partition: (topic, partition)."""


def owners(admin: AdminClient, group: str) -> dict[TP, str]:
    """Who owns each partition, as the broker says (instance id, else member id, by topic
    partition); nothing while the coordinator cannot answer (it may be moving)."""
    try:
        desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
    except KafkaException:
        return {}
    return {(tp.topic, tp.partition): m.group_instance_id or m.member_id
            for m in desc.members for tp in m.assignment.topic_partitions}


class OwnerWatch(Poller):
    """Each partition's owners in order (`owners`), as the broker shows them every `interval`
    seconds inside a `with` block; `moved()` the partitions that changed owner."""

    transient = (KafkaException,)

    def __init__(self, admin: AdminClient, group: str, interval: float = 0.2) -> None:
        self.admin, self.group, self.interval = admin, group, interval
        self.history: dict[TP, list[str]] = {}

    def poll(self) -> None:
        for tp, owner in owners(self.admin, self.group).items():
            seen = self.history.setdefault(tp, [])
            if not seen or seen[-1] != owner:
                seen.append(owner)

    def moved(self) -> dict[TP, list[str]]:
        return {tp: o for tp, o in self.history.items() if len(o) > 1}


def wait_owned(admin: AdminClient, group: str, wanted: set[TP], by: set[str],
               timeout: float) -> float:
    """Seconds until every partition of `wanted` is owned by one of `by`, as the broker says."""
    began = time.monotonic()
    seen: dict[TP, str] = {}

    def owned() -> bool:
        nonlocal seen
        seen = owners(admin, group)
        return wanted <= set(seen) and {seen[tp] for tp in wanted} <= by

    wait_for(f"all of {sorted(wanted)} owned by {sorted(by)}", owned, timeout, interval=0.1,
             describe=lambda: f"owners: {seen}")
    return time.monotonic() - began
