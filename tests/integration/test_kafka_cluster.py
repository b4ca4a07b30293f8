"""The operator's reads of a group on a three-broker cluster while the group's coordinator
dies, comes back and moves again (issue 22). Real brokers, a real static member.

librdkafka aborts a process whose coordinator-bound admin request loses its coordinator
(confluentinc/librdkafka#4605): this test runs those reads in its own process, as the operator
does, so an abort would end the test run; the reads go through `staticfleet.coordinated`'s
child process, which may abort and is replaced."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer

from staticfleet.decisions.snapshot import GroupView
from staticfleet.observe import kafkaadmin, kafkareads
from staticfleet_dev.kafka import KafkaCluster
from staticfleet_dev.testkit.poll import wait_for
from tests.conftest import unique

pytestmark = pytest.mark.integration


class StaticMember:
    """A static member polling in a thread, so the group stays Stable."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "group.instance.id": f"{group}-0", "session.timeout.ms": 20000,
                                  "log_level": 3})
        self.consumer.subscribe([topic])
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.consumer.poll(0.2)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.consumer.close()


@pytest.fixture
def admin(kafka_cluster: KafkaCluster) -> Iterator[kafkaadmin.Admin]:
    pool = kafkaadmin.AdminPool()
    yield pool.get({"bootstrap.servers": kafka_cluster.bootstrap})
    pool.close()


def stable(admin: kafkaadmin.Admin, group: str) -> GroupView | None:
    try:
        view = kafkareads.describe_group(admin, group)
    except kafkaadmin.KafkaUnavailable:
        return None
    return view if view.state == "Stable" and view.members else None


def test_group_reads_ride_out_a_coordinator_kill_and_an_election(
        kafka_cluster: KafkaCluster, admin: kafkaadmin.Admin) -> None:
    topic = kafka_cluster.make_topic(unique("cl-in"), 3)
    group = unique("cl-g")
    member = StaticMember(kafka_cluster.bootstrap, group, topic)
    coordinator = kafka_cluster.node_ids[0]
    try:
        wait_for("the group Stable", lambda: stable(admin, group), 60)
        found = kafka_cluster.coordinator(group)
        assert found is not None and found in kafka_cluster.node_ids
        coordinator = found
        assert kafkareads.committed_offsets(admin, group, [(topic, 0)]) == {}
        generations = kafka_cluster.generations(group)
        assert generations, "the coordinator logged the group's generation"

        kafka_cluster.kill(coordinator)
        killed = time.monotonic()
        outcomes: list[str] = []
        while True:
            try:
                view = kafkareads.describe_group(admin, group)
                outcomes.append(view.state)
                if view.state == "Stable" and view.members:
                    break
            except kafkaadmin.CoordinatorMoving:
                outcomes.append("CoordinatorMoving")
            assert time.monotonic() - killed < 60, f"no answer from a new coordinator: {outcomes}"
        back_s = time.monotonic() - killed
        moved = kafka_cluster.coordinator(group)
        assert moved is not None and moved != coordinator
        assert not admin.pool.failed(admin.key), "two brokers answered: the cluster never failed"
        # docs/contracts.md "When the coordinator moves": the new coordinator loads the group
        # at the same generation and re-arms its members' session timers; no rebalance.
        loaded = f"Loaded classic group {group} with 1 members."
        assert loaded in kafka_cluster.node(moved).log.read_text(errors="replace")
        assert kafka_cluster.generations(group) == generations, kafka_cluster.rebalance_lines(group)
        assert view.by_instance()[f"{group}-0"].partitions == tuple((topic, p) for p in range(3))
        print(f"\ncoordinator {coordinator} killed: described again by {moved} after "
              f"{back_s:.1f} s ({outcomes.count('CoordinatorMoving')} reads CoordinatorMoving, "
              f"{admin.pool.child.started} child processes)")

        kafka_cluster.start(coordinator)
        kafka_cluster.elect_preferred_leaders()
        wait_for(f"the election to move the coordinator back to {coordinator}",
                 lambda: stable(admin, group) is not None
                 and kafka_cluster.coordinator(group) == coordinator, 60,
                 describe=lambda: f"coordinator now: {kafka_cluster.coordinator(group)}")
        assert kafkareads.committed_offsets(admin, group, [(topic, 0)]) == {}
    finally:
        member.close()
        kafka_cluster.start(coordinator)
