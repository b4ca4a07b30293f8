"""Sharded operators against the real API server and the real broker: two operator processes,
the default shard (`--shard default --other-shards b`) and shard `b`, each watching only the
ConsumerGroups its label selector picks (the API server filters the watch).

- each reconciles its own groups and no other: `status.shard`, and each operator's metrics
  carry only its groups (a pass sets `staticfleet_reconcile_last_timestamp_seconds`);
- a group relabelled from `b` to the default shard moves: `b` lets it go after its last pass
  (it clears `status.shard`), the default shard takes it then, well before the grace runs out,
  and its member pods are the same pods (same uids, none deleted); the new shard then acts on it
  (a scale-up);
- a shard that reads a group back and finds another shard's name in `status.shard` stops its
  passes over it (the check that covers a DELETED event a relisted watch never sent);
- a group moved while `b` is dead is taken over once the grace is over;
- a ConsumerGroup in shard `b` on the same Kafka group as an older one in the default shard is
  refused (`GroupIdInUse`), though neither shard watches the other's groups, and takes the Kafka
  group once the older one is deleted;
- two operators of one shard in one kopf peering object: the older runs passes, the newer runs
  none until the older stops, then takes the shard's groups.

The member pods run a placeholder process where the session's local node runs (no node: they
stay Pending); what is under test is which operator acts, not the members. The session's admin
operator is stopped meanwhile (it would reconcile every group).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from staticfleet.decisions.names import KAFKA_GROUP_LABEL
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import REPO, get_json, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from tests.integration.support import PLACEHOLDER, consumer_group, has_condition
from tests.support import unique

pytestmark = pytest.mark.integration

SHARD_LABEL = "staticfleet.io/shard"
GRACE_S = 20.0
"""The operators' handover grace (`STATICFLEET_SHARD_HANDOFF_SECONDS`): a live shard lets a
group go well within it; a dead one is taken over after it."""
PASS_METRIC = "staticfleet_reconcile_last_timestamp_seconds"


@pytest.fixture
def shard_operators(kubeconfig: Path, crds: None, no_admin_operator: None,
                    tmp_path: Path) -> Iterator[dict[str, OperatorProcess]]:
    env = {"STATICFLEET_RESYNC_SECONDS": "2", "STATICFLEET_SHARD_HANDOFF_SECONDS": str(GRACE_S),
           "STATICFLEET_SHARD_CHECK_SECONDS": "3"}
    ops = {
        "default": OperatorProcess(kubeconfig=kubeconfig, log=tmp_path / "default.log",
                                   extra_env=env, allow_testing_annotations=True,
                                   args=("--shard", "default", "--other-shards", "b")),
        "b": OperatorProcess(kubeconfig=kubeconfig, log=tmp_path / "b.log", extra_env=env,
                             allow_testing_annotations=True, args=("--shard", "b")),
    }
    started: list[OperatorProcess] = []
    try:
        for op in ops.values():
            started.append(op.start())
        yield ops
    finally:
        for op in started:
            op.stop()
        for name, op in ops.items():
            print(f"--- operator {name} ---\n{op.log_tail(60)}")


def group(name: str, bootstrap: str, topic: str, shard: str | None,
          replicas: int = 1) -> dict[str, Any]:
    cg = consumer_group(name, bootstrap=bootstrap, topics=[topic], replicas=replicas,
                        command=PLACEHOLDER)
    if shard is not None:
        cg["metadata"]["labels"] = {SHARD_LABEL: shard}
    return cg


def reconciled_by(kubeconfig: Path, namespace: str, name: str, shard: str) -> dict[str, Any]:
    """The group once `shard` reconciled its current generation."""
    return groups.wait_status(
        kubeconfig, namespace, name, lambda cg: (cg.get("status") or {}).get("shard") == shard
        and cg["status"].get("observedGeneration") == cg["metadata"]["generation"],
        90, f"{name} reconciled by shard {shard}")


def last_passes(op: OperatorProcess, namespace: str) -> dict[str, float]:
    """When this operator last finished a pass over each group of `namespace` (its metrics)."""
    found = {}
    for line in op.metrics().splitlines():
        if line.startswith(PASS_METRIC + "{") and f'namespace="{namespace}"' in line:
            found[line.split('group="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
    return found


def passes_over(op: OperatorProcess, namespace: str) -> set[str]:
    """The groups of `namespace` this operator has run a pass over."""
    return set(last_passes(op, namespace))


def pod_uids(kubeconfig: Path, namespace: str, name: str) -> dict[str, str]:
    """The group's member pods, name -> uid, each asserted not terminating."""
    out = {}
    for pod in groups.pods(kubeconfig, namespace, name):
        assert not pod["metadata"].get("deletionTimestamp"), pod["metadata"]["name"]
        out[pod["metadata"]["name"]] = pod["metadata"]["uid"]
    return out


def relabel(kubeconfig: Path, namespace: str, name: str, shard: str) -> float:
    kubectl(kubeconfig, "-n", namespace, "label", "cg", name, f"{SHARD_LABEL}={shard}",
            "--overwrite")
    return time.monotonic()


def test_each_shard_reconciles_its_own_groups_and_a_relabelled_group_moves_with_its_pods(
        shard_operators: dict[str, OperatorProcess], kubeconfig: Path, namespace: str,
        kafka: KafkaBroker, make_topic: Callable[..., str]) -> None:
    topic = make_topic("shards", 2)
    shard_of = {unique("plain"): None, unique("dflt"): "default", unique("typo"): "nobody",
                unique("b"): "b", unique("moved"): "b", unique("late"): "b"}
    for name, shard in shard_of.items():
        groups.apply(kubeconfig, namespace, group(name, kafka.bootstrap, topic, shard))
    expected = {name: "b" if shard == "b" else "default" for name, shard in shard_of.items()}
    for name, shard in expected.items():
        reconciled_by(kubeconfig, namespace, name, shard)
    ops = shard_operators
    # Each operator ran passes over its own groups only (the typo'd label falls to the default).
    mine = {s: {n for n, e in expected.items() if e == s} for s in ops}
    wait_for("every group in its shard's metrics", lambda: all(
        passes_over(op, namespace) == mine[s] for s, op in ops.items()), 30,
        describe=lambda: {s: passes_over(op, namespace) for s, op in ops.items()})

    # Moving a group: the pods stay the same pods.
    moved = next(n for n, s in shard_of.items() if n.startswith("moved"))
    uids = wait_for(f"the member pod of {moved}",
                    lambda: (u := pod_uids(kubeconfig, namespace, moved)) and len(u) == 1 and u)
    began = relabel(kubeconfig, namespace, moved, "default")
    reconciled_by(kubeconfig, namespace, moved, "default")
    took = time.monotonic() - began
    assert took < GRACE_S, f"the default shard took {took:.1f} s: it waited for the grace"
    assert f"{namespace}/{moved} left the ConsumerGroups this operator watches" in \
        ops["b"].log.read_text()
    assert "did not let the group go" not in ops["default"].log.read_text()
    wait_for("the moved group in the default shard's metrics only", lambda: (
        moved in passes_over(ops["default"], namespace)
        and moved not in passes_over(ops["b"], namespace)), 30)
    # Two passes of the new shard later, the same pod runs on, and the new shard acts on the
    # group: a scale-up makes member 1 beside it.
    first = last_passes(ops["default"], namespace)[moved]
    wait_for("two more passes over the moved group", lambda: last_passes(
        ops["default"], namespace)[moved] >= first + 2, 30)
    assert pod_uids(kubeconfig, namespace, moved) == uids
    kubectl(kubeconfig, "-n", namespace, "patch", "cg", moved, "--type", "merge",
            "-p", '{"spec": {"replicas": 2}}')
    reconciled_by(kubeconfig, namespace, moved, "default")
    both = wait_for("member 1 of the moved group", lambda: (
        u := pod_uids(kubeconfig, namespace, moved)) and len(u) == 2 and u, 60)
    assert uids.items() <= both.items()

    # A shard that reads its group back (every 3 s here) and finds another shard's name in
    # status.shard stops its passes, as it would for a relabelling its watch never reported;
    # it deletes nothing.
    kept = next(n for n, s in shard_of.items() if n.startswith("b-"))
    kept_uids = pod_uids(kubeconfig, namespace, kept)
    assert kept_uids
    kubectl(kubeconfig, "-n", namespace, "patch", "cg", kept, "--subresource=status",
            "--type", "merge", "-p", '{"status": {"shard": "default"}}')
    wait_for("shard b to stop its passes over a group it no longer holds", lambda: (
        f"{namespace}/{kept}: no longer this shard's (shard 'default' has taken it over)"
        in ops["b"].log.read_text() and kept not in passes_over(ops["b"], namespace)), 30)
    assert pod_uids(kubeconfig, namespace, kept) == kept_uids

    # A group moved while its shard is dead: the default shard waits the grace, then takes it.
    late = next(n for n, s in shard_of.items() if n.startswith("late"))
    late_uids = wait_for(f"the member pod of {late}",
                         lambda: (u := pod_uids(kubeconfig, namespace, late)) and len(u) == 1
                         and u)
    ops["b"].kill()
    began = relabel(kubeconfig, namespace, late, "default")
    reconciled_by(kubeconfig, namespace, late, "default")
    took = time.monotonic() - began
    assert took >= GRACE_S - 1, f"the default shard took a live-looking group in {took:.1f} s"
    assert f"{namespace}/{late}: shard 'b' did not let the group go within" in \
        ops["default"].log.read_text()
    assert pod_uids(kubeconfig, namespace, late) == late_uids


def test_a_kafka_group_used_in_another_shard_is_refused(
        shard_operators: dict[str, OperatorProcess], kubeconfig: Path, namespace: str,
        kafka: KafkaBroker, make_topic: Callable[..., str]) -> None:
    topic = make_topic("claims", 2)
    kafka_group = unique("kg")
    older, younger = unique("older"), unique("younger")
    first = group(older, kafka.bootstrap, topic, None)
    first["spec"]["kafka"]["groupId"] = kafka_group
    groups.apply(kubeconfig, namespace, first)
    held = reconciled_by(kubeconfig, namespace, older, "default")
    assert held["status"]["groupId"] == kafka_group
    second = group(younger, kafka.bootstrap, topic, "b")
    second["spec"]["kafka"]["groupId"] = kafka_group
    groups.apply(kubeconfig, namespace, second)
    cond = wait_for(f"{younger} refused", lambda: has_condition(
        kubeconfig, namespace, younger, "Degraded", "True", "GroupIdInUse"), 60)
    assert f"ConsumerGroup {namespace}/{older}" in cond["message"]
    # Each shard labelled its group with the same claim; the older keeps running.
    labels = [groups.get(kubeconfig, namespace, n)["metadata"]["labels"] for n in (older, younger)]
    assert labels[0][KAFKA_GROUP_LABEL] == labels[1][KAFKA_GROUP_LABEL]
    assert groups.get(kubeconfig, namespace, younger)["status"]["shard"] == "b"
    assert not has_condition(kubeconfig, namespace, older, "Degraded", "True", "GroupIdInUse")
    assert not groups.pods(kubeconfig, namespace, younger)
    # The older one deleted, the younger takes the Kafka group at its next passes: a group that
    # shares its Kafka group with another shard's is listed again on every pass (one found
    # alone is not, for `claims.UNIQUE_KEPT_S`).
    kubectl(kubeconfig, "-n", namespace, "delete", "cg", older, "--wait=false")
    wait_for(f"{younger} takes {kafka_group} once {older} is gone", lambda: (
        groups.get(kubeconfig, namespace, younger)["status"].get("groupId") == kafka_group
        and groups.pods(kubeconfig, namespace, younger)), 60,
        describe=lambda: groups.get(kubeconfig, namespace, younger)["status"])
    assert not has_condition(kubeconfig, namespace, younger, "Degraded", "True", "GroupIdInUse")


def test_the_oldest_operator_of_a_shard_runs_and_a_newer_one_waits(
        kubeconfig: Path, crds: None, no_admin_operator: None, namespace: str, kafka: KafkaBroker,
        make_topic: Callable[..., str], tmp_path: Path) -> None:
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(REPO / "crds" / "kopf-peering"))
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
            "crd/clusterkopfpeerings.kopf.dev")
    peering, shard = unique("peering"), unique("p")
    kubectl(kubeconfig, "apply", "-f", "-", input=(
        f"apiVersion: kopf.dev/v1\nkind: ClusterKopfPeering\nmetadata:\n  name: {peering}\n"))
    env = {"STATICFLEET_RESYNC_SECONDS": "2", "STATICFLEET_KOPF_LOG_LEVEL": "INFO"}
    ops = [OperatorProcess(kubeconfig=kubeconfig, log=tmp_path / f"op{i}.log", extra_env=env,
                           allow_testing_annotations=True,
                           args=("--shard", shard, "--peering", peering)) for i in (1, 2)]
    name = unique("peered")
    try:
        ops[0].start()
        groups.apply(kubeconfig, namespace, group(name, kafka.bootstrap, make_topic("p", 2),
                                                  shard))
        reconciled_by(kubeconfig, namespace, name, shard)
        ops[1].start()
        wait_for("both operators in the peering object", lambda: len(
            get_json(kubeconfig, "clusterkopfpeering", peering).get("status") or {}) == 2)
        # The older keeps running passes; the newer runs none.
        first = last_passes(ops[0], namespace)[name]
        wait_for("three more passes of the older operator", lambda: last_passes(
            ops[0], namespace)[name] >= first + 4, 30)
        assert name not in passes_over(ops[1], namespace)
        # Paused from its start (a peering it must join: kopf starts it paused), never resumed.
        assert "Resuming operations after the pause" not in ops[1].log.read_text()
        # The older stops: the newer resumes and takes the group.
        ops[0].stop()
        wait_for("the newer operator's passes over the group", lambda: name in passes_over(
            ops[1], namespace), 60)
        reconciled_by(kubeconfig, namespace, name, shard)
    finally:
        for op in ops:
            op.stop()
            print(f"--- {op.log.name} ---\n{op.log_tail(40)}")
        kubectl(kubeconfig, "delete", "clusterkopfpeering", peering, check=False)
