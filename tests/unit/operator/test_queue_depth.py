"""`staticfleet_reconcile_queue_depth`: the passes that wait for a slot of their Kafka cluster."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from staticfleet import passes
from staticfleet.metrics import REGISTRY
from staticfleet.observe import kafkaadmin

pytestmark = pytest.mark.unit
DEPTH = "staticfleet_reconcile_queue_depth"


def test_passes_beyond_a_clusters_slots_are_counted_while_they_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    ran: list[str] = []

    def reconcile(body: Any, *_: Any) -> None:
        ran.append(body["spec"]["kafka"]["bootstrapServers"])
        gate.wait(10)

    monkeypatch.setattr(passes.service, "reconcile", reconcile)
    monkeypatch.setattr(passes.pace, "next_pass", lambda *_: None)

    async def scenario() -> tuple[float | None, float | None]:
        runner = passes.Runner(  # type: ignore[arg-type]
            clients=type("C", (), {"admins": kafkaadmin.AdminPool()})())
        one = {"spec": {"kafka": {"bootstrapServers": "one:9092"}}}
        other = {"spec": {"kafka": {"bootstrapServers": "other:9092"}}}
        tasks = [asyncio.create_task(runner.run(one, [])) for _ in range(passes.PER_CLUSTER + 3)]
        tasks.append(asyncio.create_task(runner.run(other, [])))  # its own cluster's slots
        await asyncio.sleep(0.3)
        waiting = REGISTRY.get_sample_value(DEPTH)
        gate.set()
        await asyncio.gather(*tasks)
        runner.pool.shutdown()
        return waiting, REGISTRY.get_sample_value(DEPTH)

    waiting, after = asyncio.run(scenario())
    assert (waiting, after) == (3, 0)
    assert ran.count("one:9092") == passes.PER_CLUSTER + 3 and ran.count("other:9092") == 1


def test_a_pass_waiting_for_a_slot_does_not_run_once_its_group_left_the_shard(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46 item 10: an old shard's pass that was already waiting for one of its cluster's
    workers ran in full after the group moved to another shard (which acts once the hand-off
    grace is over): two operators steering one group. Now it does not run."""
    gate = threading.Event()
    ran: list[str] = []

    def reconcile(body: Any, *_: Any) -> None:
        ran.append(body["metadata"]["uid"])
        gate.wait(10)

    monkeypatch.setattr(passes.service, "reconcile", reconcile)
    monkeypatch.setattr(passes.pace, "next_pass", lambda *_: None)

    async def scenario() -> Any:
        runner = passes.Runner(  # type: ignore[arg-type]
            clients=type("C", (), {"admins": kafkaadmin.AdminPool()})())
        busy = [asyncio.create_task(runner.run(
            {"metadata": {"uid": f"busy-{i}"}, "spec": {"kafka": {"bootstrapServers": "k:9092"}}},
            [])) for i in range(passes.PER_CLUSTER)]
        await asyncio.sleep(0.2)
        slot = passes.Slot("moved")
        waiting = asyncio.create_task(runner.run(
            {"metadata": {"uid": "moved"}, "spec": {"kafka": {"bootstrapServers": "k:9092"}}},
            [], (), slot))
        await asyncio.sleep(0.2)
        slot.left = True  # the group's label moved it to another shard meanwhile
        gate.set()
        due = await waiting
        await asyncio.gather(*busy)
        runner.pool.shutdown()
        return due

    due = asyncio.run(scenario())
    assert "moved" not in ran and len(ran) == passes.PER_CLUSTER, ran
    assert due is not None and due.delay_s == 0.0
