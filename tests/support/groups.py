"""ConsumerGroup objects for tests, and waiting on their status."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.support.kube import kubectl, to_yaml


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
        "apiVersion": "staticfleet.io/v1alpha1", "kind": "ConsumerGroup",
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


def wait_status(kubeconfig: Path, namespace: str, name: str, check: Any, timeout: float,
                what: str) -> dict[str, Any]:
    """Poll the ConsumerGroup until `check(obj)` is true; fail with its status otherwise."""
    deadline = time.monotonic() + timeout
    obj: dict[str, Any] = {}
    while time.monotonic() < deadline:
        obj = get(kubeconfig, namespace, name)
        if check(obj):
            return obj
        time.sleep(0.5)
    raise AssertionError(f"{name}: not {what} after {timeout:.0f}s; status:\n"
                         f"{json.dumps(obj.get('status'), indent=1)[:4000]}")


def ready(obj: dict[str, Any]) -> bool:
    st = obj.get("status") or {}
    conds = {c["type"]: c for c in st.get("conditions") or []}
    return (conds.get("Ready", {}).get("status") == "True"
            and st.get("observedGeneration") == obj["metadata"]["generation"])
