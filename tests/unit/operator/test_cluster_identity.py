"""One Kafka cluster, however its bootstrap list is spelled: its normalized address set before
its id is known, its cluster id after; for the per-cluster worker cap and the group's claim."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from staticfleet import passes
from staticfleet.decisions import clusters
from staticfleet.decisions.snapshot import claim_key, claim_of, same_cluster
from staticfleet.observe import kafkaadmin

pytestmark = pytest.mark.unit


def test_an_address_set_is_sorted_deduplicated_lower_cased_and_stripped() -> None:
    assert clusters.addresses(" B:9092, a:9092 ,b:9092,,A:9092\t") == ("a:9092", "b:9092")
    assert clusters.address_set("b:9092,a:9092") == clusters.address_set(" A:9092 , B:9092,a:9092")
    assert clusters.address_set("a:9092") != clusters.address_set("a:9093")


def test_the_cluster_id_once_known_makes_two_lists_one_cluster() -> None:
    pool = kafkaadmin.AdminPool()
    first, second = "kafka-0.kafka:9092,kafka-1.kafka:9092", "KAFKA-2.kafka:9092"
    assert pool.identity(first) != pool.identity(second), "different brokers, id unknown"
    pool.note_cluster_id(first, "MkU3OEVBNTcwNTJENDM2Qg")
    pool.note_cluster_id(" kafka-2.kafka:9092 ", "MkU3OEVBNTcwNTJENDM2Qg")
    assert pool.identity(first) == pool.identity(second) == "cluster-id:MkU3OEVBNTcwNTJENDM2Qg"
    assert pool.identity("kafka-1.kafka:9092,kafka-0.kafka:9092") == pool.identity(first)
    pool.note_cluster_id("other:9092", None)
    assert pool.identity("other:9092") == "addresses:other:9092"


def test_cluster_ids_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafkaadmin, "CLUSTER_IDS_KEPT", 3)
    pool = kafkaadmin.AdminPool()
    for i in range(5):
        pool.note_cluster_id(f"k{i}:9092", f"id{i}")
    assert list(pool.identities().values()) == ["id2", "id3", "id4"]


def group(name: str, servers: str, created: str = "2026-11-20T10:00:00Z") -> dict[str, Any]:
    return {"apiVersion": "staticfleet.io/v1alpha1", "kind": "ConsumerGroup",
            "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}",
                         "creationTimestamp": created},
            "spec": {"kafka": {"bootstrapServers": servers, "groupId": "orders"}}}


def test_two_spellings_of_one_cluster_claim_one_group() -> None:
    """Main compared only the sorted lower-cased string: a duplicate or a list that names
    another broker of the cluster was another group."""
    old = group("old", "kafka-0:9092,kafka-1:9092")
    new = group("new", "kafka-1:9092, KAFKA-0:9092,kafka-1:9092")
    assert claim_key("kafka-0:9092,kafka-1:9092", "orders") == claim_of(new)[0]
    other = group("other", "kafka-2:9092")
    claimants = tuple(claim_of(g)[1] for g in (old, new, other))
    assert {c.name for c in same_cluster(claimants, new, {})} == {"old", "new"}
    ids = {clusters.address_set("kafka-0:9092,kafka-1:9092"): "X",
           clusters.address_set("kafka-2:9092"): "X"}
    assert {c.name for c in same_cluster(claimants, new, ids)} == {"old", "new", "other"}
    assert {c.name for c in same_cluster(claimants, other, ids)} == {"old", "new", "other"}


def test_two_spellings_of_one_cluster_share_its_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """`passes.Runner`'s per-cluster cap is keyed by the cluster, not the raw string (main:
    each spelling of a list of silent addresses had a cap of its own, together every worker)."""
    gate = threading.Event()
    monkeypatch.setattr(passes.service, "reconcile", lambda *_: gate.wait(10))
    monkeypatch.setattr(passes.pace, "next_pass", lambda *_: None)
    pool = kafkaadmin.AdminPool()
    pool.note_cluster_id("c:9092", "X")
    pool.note_cluster_id("d:9092", "X")
    spellings = ["a:9092,b:9092", "b:9092, A:9092", "B:9092,a:9092,a:9092", "c:9092", "d:9092"]

    async def scenario() -> tuple[int, int]:
        runner = passes.Runner(clients=type("C", (), {"admins": pool})())  # type: ignore[arg-type]
        tasks = [asyncio.create_task(runner.run(
            {"spec": {"kafka": {"bootstrapServers": spellings[i % len(spellings)]}}}, []))
            for i in range(4 * passes.PER_CLUSTER)]
        await asyncio.sleep(0.3)
        slots = len(runner.clusters)
        running = sum(passes.PER_CLUSTER - s._value for s in runner.clusters.values())
        gate.set()
        await asyncio.gather(*tasks)
        runner.pool.shutdown()
        return slots, running

    slots, running = asyncio.run(scenario())
    assert slots == 2, "two clusters: {a, b} by its address set, X by its id"
    assert running == 2 * passes.PER_CLUSTER
