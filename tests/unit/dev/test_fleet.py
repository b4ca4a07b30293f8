"""The fleet benchmark's helpers on plain data: when a group counts as settled (a simulated
group's Empty broker view included), what holds the others, when a rollout's pods are all
replaced, and the brokers' logs read as they grow (requests by API and client, generations)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from staticfleet_dev.kafka import KafkaCluster, KafkaNode
from staticfleet_dev.procs import ProcessRecord
from staticfleet_dev.testkit import fleet

pytestmark = pytest.mark.unit


def group(*, generation: int = 2, observed: int = 2, ready: str = "True",
          ready_reason: str = "AllMembersReady", degraded: str = "False",
          degraded_reason: str = "AsExpected", state: str = "Stable", ready_pods: int = 3,
          phase: str = "Idle") -> dict[str, Any]:
    return {"metadata": {"name": "g", "generation": generation}, "spec": {"replicas": 3},
            "status": {"observedGeneration": observed, "groupState": state,
                       "readyReplicas": ready_pods, "rollout": {"phase": phase},
                       "conditions": [
                           {"type": "Ready", "status": ready, "reason": ready_reason},
                           {"type": "Degraded", "status": degraded, "reason": degraded_reason}]}}


@pytest.mark.parametrize(("obj", "settled", "held"), [
    (group(), True, None),
    (group(ready="False", ready_reason="GroupNotStable", state="Empty"), True, None),
    (group(ready="False", ready_reason="GroupNotStable", state="PreparingRebalance"), False,
     "Ready False: GroupNotStable"),
    (group(observed=1), False, "not observed at its generation"),
    (group(degraded="True", degraded_reason="KafkaUnreachable"), False,
     "Degraded: KafkaUnreachable"),
    (group(ready_pods=2), False, "member pods not all Ready"),
    (group(phase="Rolling"), False, "a rollout under way"),
    (group(phase="Complete"), True, None),
])
def test_when_a_group_is_settled(obj: dict[str, Any], settled: bool, held: str | None) -> None:
    assert fleet.settled(obj) is settled
    assert fleet.why_not_settled([obj]) == ({} if held is None else {held: 1})


def pod(name: str, revision: str, deleting: bool = False) -> Any:
    return SimpleNamespace(metadata=SimpleNamespace(
        labels={"staticfleet.io/group": name},
        annotations={"staticfleet.io/revision": revision},
        deletion_timestamp="2026-11-26T00:00:00Z" if deleting else None))


def test_a_group_switched_over_at_least_once() -> None:
    obj = {"metadata": {"name": "g"}, "spec": {"replicas": 2},
           "status": {"updateRevision": "new"}}
    other = pod("h", "new")
    assert fleet.first_switched(obj, [pod("g", "new"), pod("g", "old"), other])
    assert fleet.first_switched(obj, [pod("g", "new"), pod("g", "new")])
    assert not fleet.first_switched(obj, [pod("g", "old"), pod("g", "old"), other])
    assert not fleet.first_switched(obj, [pod("g", "old"), pod("g", "old"), pod("g", "new")]), (
        "a standby beside the old pods: not switched yet")
    assert not fleet.first_switched(obj, [pod("g", "new"), pod("g", "old", deleting=True)])
    assert not fleet.first_switched({**obj, "status": {}}, [pod("g", "new")] * 2)


def request(api: str, client: str) -> str:
    return (f'[2026-11-26 14:00:00,000] DEBUG Completed request:{{"requestHeader":'
            f'{{"requestApiKeyName":"{api}","clientId":"{client}"}}}} (kafka.request.logger)\n')


def test_the_brokers_logs_are_read_as_they_grow(tmp_path: Path) -> None:
    nodes = {}
    for n in (1, 2):
        (tmp_path / f"node-{n}").mkdir()
        nodes[n] = KafkaNode(n, tmp_path / f"node-{n}", f"127.0.0.1:{9000 + n}", [],
                             ProcessRecord(f"kafka-{n}", 0, 0, ""))
    records = fleet.BrokerRecords(KafkaCluster(tmp_path, nodes))
    nodes[1].log.write_text(request("OFFSET_FETCH", "staticfleet-operator")
                            + "INFO Stabilized group real generation 1 (x)\n"
                            + request("FETCH", "consumer-1"))
    late = request("LIST_OFFSETS", "staticfleet-operator")
    cut = late.index("-operator") + len("-op")
    nodes[2].log.write_text(request("DESCRIBE_GROUPS", "staticfleet-operator")
                            + late[:cut])  # a line half written
    first = records.read()
    assert fleet.operator_requests(first) == {"OFFSET_FETCH": 1, "DESCRIBE_GROUPS": 1}
    assert ("FETCH", "consumer-1") in first
    before = records.generation_counts(["real", "other"])
    assert before == {"real": 1, "other": 0}
    with nodes[2].log.open("a") as f:
        f.write(late[cut:] + "INFO Stabilized group real generation 2 (x)\n"
                "INFO Stabilized group other generation 1 (x)\n")
    with nodes[1].log.open("a") as f:
        f.write("INFO Stabilized group real generation 2 (x)\n")  # the same one, seen twice
    assert fleet.operator_requests(records.read()) == {"LIST_OFFSETS": 1}
    assert fleet.new_generations(before, records.generation_counts(["real", "other"])) == {
        "real": 1, "other": 1}
    assert records.read() == [], "nothing new"


def event(component: str | None, reporting: str | None, count: int | None) -> Any:
    return SimpleNamespace(source=SimpleNamespace(component=component) if component else None,
                           reporting_component=reporting, count=count)


def test_the_operators_events_counted_as_often_as_emitted() -> None:
    core = SimpleNamespace(list_event_for_all_namespaces=lambda: SimpleNamespace(items=[
        event("staticfleet", "staticfleet", 3),
        event(None, "staticfleet", None),  # an events.k8s.io Event: emitted once
        event("endpoint-slice-controller", None, 40),
        event("staticfleet-autoscaler", "staticfleet-autoscaler", 5),
        event("staticfleetish", None, 7),
    ]))
    assert fleet.operator_events(core) == 9
