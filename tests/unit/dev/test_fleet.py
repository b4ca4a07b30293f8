"""The fleet benchmark's helpers on plain data: when a group counts as settled (a simulated
group's Empty broker view included), what holds the others, each shard's cold start, when a
rollout's pods are all replaced, the brokers' logs read as they grow (requests by API and
client, generations), and the figures of the at-rest window, the rollouts and a broker's stop."""

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
    assert records.formed(["real"])
    assert not records.formed(["real", "other"])
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


def shard_group(name: str, shard: str | None, *, observed: int = 2, **kw: Any) -> dict[str, Any]:
    obj = group(observed=observed, **kw)
    obj["metadata"]["name"] = name
    if shard is not None:
        obj["status"]["shard"] = shard
    return obj


def test_each_shards_cold_start_settles_on_its_own() -> None:
    given = {"a": "default", "b": "s1", "c": "default"}
    progress = {"default": fleet.Settling(), "s1": fleet.Settling()}
    # 1 s: "c" is not listed yet; "b" observed, not settled.
    assert not fleet.note_settling(progress, [
        shard_group("a", "default"), shard_group("b", "s1", ready_pods=2)], given, 1.0)
    assert progress["default"] == fleet.Settling(None, None, {"not listed yet": 1})
    assert progress["s1"] == fleet.Settling(1.0, None, {"member pods not all Ready": 1})
    # 2 s: the default shard's groups settled, but "c" held by s1 is not the default's yet.
    assert not fleet.note_settling(progress, [
        shard_group("a", "default"), shard_group("b", "s1", ready_pods=2),
        shard_group("c", "s1"), shard_group("other", None)], given, 2.0)
    assert progress["default"] == fleet.Settling(2.0, None, {"status.shard 's1'": 1})
    # 3 s: all settled, each by its own shard.
    assert fleet.note_settling(progress, [
        shard_group("a", "default"), shard_group("b", "s1"), shard_group("c", "default")],
        given, 3.0)
    assert progress == {"default": fleet.Settling(2.0, 3.0, {}),
                        "s1": fleet.Settling(1.0, 3.0, {})}
    # Once settled, a shard keeps its time.
    assert fleet.note_settling(progress, [shard_group("a", None, observed=1)], given, 4.0)
    assert progress["default"].settled == 3.0


def test_one_operator_not_sharded_settles_groups_naming_no_shard() -> None:
    progress = {None: fleet.Settling()}
    given: dict[str, str | None] = {"a": None, "b": None}
    assert not fleet.note_settling(progress, [shard_group("a", None),
                                              shard_group("b", "s1")], given, 1.0)
    assert progress[None].held == {"status.shard 's1'": 1}
    assert fleet.note_settling(progress, [shard_group("a", None), shard_group("b", None)],
                               given, 2.0)
    assert progress[None] == fleet.Settling(1.0, 2.0, {})


def test_a_simulated_group_labelled_for_its_shard() -> None:
    doc = fleet.sim_group("g", "ns", "b:9092", "t", labels={"staticfleet.io/shard": "s1"})
    assert doc["metadata"]["labels"] == {"staticfleet.io/shard": "s1"}
    assert "labels" not in fleet.sim_group("g", "ns", "b:9092", "t")["metadata"]


def test_a_broker_stops_degraded_figures() -> None:
    samples = [(0.0, set()), (5.0, {"a", "b"}), (10.0, {"a"}), (62.0, {"a"}), (70.0, {"a"}),
               (75.0, set())]
    assert fleet.degraded_figures(samples, stop=1.0, back=60.0) == (2, 10.0)
    assert fleet.degraded_figures(samples[:-1], stop=1.0, back=60.0) == (2, None)
    assert fleet.degraded_figures([(0.0, set()), (61.0, set())], 1.0, 60.0) == (0, 0.0)
    assert fleet.degraded_figures([], 1.0, 60.0) == (0, None)


def test_the_at_rest_figures_of_the_api_server_and_kafka() -> None:
    api = {("GET", "pods"): 20.0, ("PATCH", "consumergroups"): 10.0,
           ("PUT", "leases"): 30.0, ("POST", "events"): 8.0}
    raw = {**api, ("PUT", "leases"): 90.0}
    r = fleet.kube_rest_figures(api, raw, events=5, took=10.0)
    assert r == {"kubeRequestsPerSecondAtRestByVerb": {"GET": 2.0, "PATCH": 1.0, "POST": 0.8,
                                                       "PUT": 3.0},
                 "kubeWritesPerSecondAtRest": 1.5,  # the group patches and the own Events
                 "kubeWritesAtRestByResource": {"PATCH consumergroups": 1.0,
                                                "POST events": 0.8, "PUT leases": 3.0},
                 "kubeWritesPerSecondAtRestWithoutIdleSubtraction": 10.8,
                 "eventsPerSecondAtRest": 0.5}
    k = fleet.kafka_rest_figures({"OFFSET_FETCH": 6, "DESCRIBE_GROUPS": 30}, took=60.0, groups=2)
    assert k == {"kafkaRequestsPerSecondAtRest": 0.6,
                 "kafkaRequestsPerSecondAtRestByApi": {"DESCRIBE_GROUPS": 0.5,
                                                       "OFFSET_FETCH": 0.1},
                 "kafkaLagAndOffsetReadsPerGroupPerMinute": 3.0}


def test_rollouts_at_once_figures() -> None:
    r = fleet.rollouts_figures({"a": 12.34, "b": 20.0}, {"a": 5.0, "b": 6.0, "c": 9.0},
                               completable=2, rollers=3)
    assert r == {"rolloutsAtOnce": 3, "rolloutsCompletable": 2, "rolloutsCompleted": 2,
                 "rolloutsAllCompleteSeconds": 20.0, "rolloutsFirstSwitchover": 3,
                 "rolloutsAllFirstSwitchoverSeconds": 9.0}
    short = fleet.rollouts_figures({"a": 1.0}, {}, completable=2, rollers=3)
    assert short["rolloutsAllCompleteSeconds"] is None
    assert short["rolloutsAllFirstSwitchoverSeconds"] is None
