"""Helpers the integration tests share: the operator tests' ConsumerGroups and what they
wait for, the secured groups' settings and Secrets, KIP-848 group configs and the runtime's
control records."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from staticfleet.decisions import builders
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.groups import PLACEHOLDER_MEMBER
from staticfleet_dev.testkit.kube import get_json, kubectl, load_example, to_yaml
from staticfleet_dev.testkit.probe import group_state
from staticfleet_dev.testkit.secured import Credentials

PLACEHOLDER = PLACEHOLDER_MEMBER
GROUP_LABEL = "staticfleet.io/group"


def consumer_group(name: str, *, bootstrap: str, topics: list[str], replicas: int = 3,
                   sink: dict[str, Any] | None = None, dead_letter_topic: str | None = None,
                   command: list[str] | None = None,
                   connect_url: str | None = None) -> dict[str, Any]:
    """examples/consumergroup.yaml pointed at the test broker and a test topic; its members'
    Spark local (one core) or, with `connect_url`, the session's Spark Connect server (for the
    tests whose subject is the operator's handling of pods, not the members' Spark: a member is
    then a Python process and starts in seconds, where a local JVM took 20-40 s here)."""
    cg = copy.deepcopy(load_example("consumergroup.yaml"))
    cg["metadata"]["name"] = name
    spec = cg["spec"]
    spec["replicas"] = replicas
    spec["kafka"]["bootstrapServers"] = bootstrap
    spec["kafka"]["topics"] = topics
    spec["processing"]["spark"] = ({"mode": "connect", "connectUrl": connect_url} if connect_url
                                   else {"mode": "local", "master": "local[1]"})
    spec["processing"]["sink"] = sink or {"type": "null"}
    if dead_letter_topic is None:
        spec["processing"].pop("deadLetterTopic", None)
    else:
        spec["processing"]["deadLetterTopic"] = dead_letter_topic
    # The member polls often and stops fast on SIGTERM; a short grace keeps deletions quick.
    spec["template"]["terminationGracePeriodSeconds"] = 10
    if command is not None:
        spec["template"]["command"] = command
    return cg


def with_sasl_plain(cg: dict[str, Any], secret: str) -> dict[str, Any]:
    """SASL/PLAIN over plaintext, the user name and password read from `secret`."""
    cg["spec"]["kafka"]["security"] = {"protocol": "SASL_PLAINTEXT", "sasl": {
        "mechanism": "PLAIN",
        "usernameSecretRef": {"name": secret, "key": "username"},
        "passwordSecretRef": {"name": secret, "key": "password"}}}
    return cg


def patch_cg(kubeconfig: Path, namespace: str, name: str, patch: dict[str, Any]) -> None:
    kubectl(kubeconfig, "-n", namespace, "patch", "consumergroup", name, "--type", "merge",
            "-p", json.dumps(patch))


def condition(cg: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (cg.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def has_condition(kubeconfig: Path, namespace: str, name: str, type_: str, status: str,
                  reason: str | None = None) -> dict[str, Any] | None:
    cond = condition(groups.get(kubeconfig, namespace, name), type_)
    if cond.get("status") == status and (reason is None or cond.get("reason") == reason):
        return cond
    return None


def member_pods(kubeconfig: Path, namespace: str, name: str,
                include_terminating: bool = False) -> dict[str, dict[str, Any]]:
    """The ConsumerGroup's member pods by name."""
    items = get_json(kubeconfig, "-n", namespace, "pods", "-l", f"{GROUP_LABEL}={name}")["items"]
    return {p["metadata"]["name"]: p for p in items
            if include_terminating or not p["metadata"].get("deletionTimestamp")}


def broker_assignment(admin: AdminClient, group_id: str) -> dict[str, list[tuple[str, int]]]:
    """The broker's view of a group: instance id -> assigned partitions (empty when no group)."""
    desc = admin.describe_consumer_groups([group_id])[group_id].result(timeout=10)
    return {m.group_instance_id or m.member_id:
            sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions or [])
            for m in desc.members}


def member_ids(admin: AdminClient, group_id: str) -> dict[str, str]:
    """instance id -> the broker's member id."""
    desc = admin.describe_consumer_groups([group_id])[group_id].result(timeout=10)
    return {m.group_instance_id: m.member_id for m in desc.members if m.group_instance_id}


def summary(kubeconfig: Path, namespace: str, name: str) -> str:
    """The ConsumerGroup's status and its pods' readiness, for failure messages."""
    st = groups.get(kubeconfig, namespace, name).get("status") or {}
    keep = {k: st.get(k) for k in ("replicas", "readyReplicas", "groupState", "conditions",
                                   "members", "rollout")}
    pods = {n: [c["status"] for c in (p.get("status") or {}).get("conditions") or []
                if c["type"] == "Ready"] for n, p in member_pods(kubeconfig, namespace,
                                                                  name).items()}
    return f"status: {json.dumps(keep, indent=1)}\npods ready: {pods}"


def ready_and_stable(kubeconfig: Path, namespace: str, name: str,
                     replicas: int) -> dict[str, Any] | None:
    """The ConsumerGroup once Ready=True with `replicas` ready members, else None."""
    cg = groups.get(kubeconfig, namespace, name)
    st = cg.get("status") or {}
    if (condition(cg, "Ready").get("status") == "True"
            and st.get("readyReplicas") == replicas and st.get("groupState") == "Stable"
            and len(st.get("members") or []) == replicas):
        return cg
    return None


def assigned_everywhere(admin: AdminClient, group_id: str, instance_ids: list[str],
                        partitions: int) -> dict[str, list[tuple[str, int]]] | None:
    """The broker's assignment once exactly `instance_ids` are members, each holding at least
    one partition, and together all `partitions`; else None."""
    got = broker_assignment(admin, group_id)
    if sorted(got) != sorted(instance_ids) or not all(got.values()):
        return None
    if sum(len(v) for v in got.values()) != partitions:
        return None
    if group_state(admin, group_id) != "STABLE":
        return None
    return got


RECORDS = 40


TIMEOUTS = EffectiveTimeouts(
    session_timeout_ms=10000, heartbeat_interval_ms=1000, max_poll_interval_ms=60000,
    sources={"sessionTimeoutMs": "spec", "heartbeatIntervalMs": "spec",
             "maxPollIntervalMs": "spec"})


def group_body(name: str, creds: Credentials, topic: str, group_id: str,
               command: list[str] | None = None) -> dict[str, Any]:
    cg = consumer_group(name, bootstrap=creds.bootstrap, topics=[topic], replicas=1,
                        command=command)
    cg["spec"]["kafka"]["groupId"] = group_id
    cg["spec"]["kafka"]["security"] = copy.deepcopy(creds.security)
    return cg


def member_secret_env(spec: ConsumerGroupSpec, creds: Credentials) -> dict[str, str]:
    """The member pod's Secret-backed variables, resolved as the kubelet resolves them."""
    pod = builders.build_member_pod(spec, 0, builders.member_spec_view(spec, TIMEOUTS))
    out = {}
    for var in pod["spec"]["containers"][0]["env"]:
        ref = (var.get("valueFrom") or {}).get("secretKeyRef")
        if ref is not None:
            out[var["name"]] = creds.secret_value(ref["name"], ref["key"])
    return out


def apply_secrets(kubeconfig: Path, namespace: str, creds: Credentials) -> None:
    for name, data in creds.secrets.items():
        kubectl(kubeconfig, "-n", namespace, "apply", "-f", "-", input=to_yaml({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "stringData": data}))


def kip848(config: dict[str, Any]) -> dict[str, Any]:
    """A runtime config as the operator builds it for protocol consumer (builders.py)."""
    consumer = config["consumer"]
    for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
        consumer.pop(key, None)
    consumer["group.protocol"] = "consumer"
    return config


def set_group_timeouts(admin: AdminClient, group: str, session_ms: int,
                       heartbeat_ms: int = 1000) -> None:
    """The group configs the operator sets for a KIP-848 group."""
    entries = [ConfigEntry(name, str(value), incremental_operation=AlterConfigOpType.SET)
               for name, value in (("consumer.session.timeout.ms", session_ms),
                                   ("consumer.heartbeat.interval.ms", heartbeat_ms))]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def through(server: ConnectServer) -> dict[str, Any]:
    """A member's Spark settings for the session's Spark Connect server. The tests of the
    operator's requests (leave, rejoin, drain) share it: their subject is the consumer's part,
    and a member is then a Python process that starts in seconds (a local JVM took 15-25 s
    here). The standby tests keep local Spark: a standby warming its own JVM is their subject."""
    return {"mode": "connect", "connectUrl": server.url, "master": None, "conf": {}}


def records(topic: str, first: int, n: int, partitions: int) -> list[tuple[bytes, bytes, int]]:
    return [(b"k", f"{topic}:{i:06d}".encode(), i % partitions)
            for i in range(first, first + n)]
