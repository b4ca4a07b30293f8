"""A fleet of simulated ConsumerGroups for the scale benchmark (bench/fleet_scale.py): their
objects (member pods on kwok's fake Nodes, answered by the member simulator), their committed
offsets on the cluster, the member simulator as a process, what their status says, and the
brokers' own records (requests by API and client, generations by group) read as the logs grow.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kubernetes.client.exceptions import ApiException

from staticfleet.decisions.names import GROUP_LABEL, MANAGER, REVISION_ANNOTATION
from staticfleet.decisions.spec.model import API_GROUP, API_VERSION, KIND
from staticfleet_dev.kafka import OFFSETS_TOPIC, KafkaCluster, offsets_partition, request_lines
from staticfleet_dev.kwok import manifests
from staticfleet_dev.membersim.members import Pace
from staticfleet_dev.membersim.server import STAND_INS, STATS
from staticfleet_dev.procs import ProcessRecord, free_port, spawn, wait_until
from staticfleet_dev.testkit import figures
from staticfleet_dev.testkit.consumers import PolledMember
from staticfleet_dev.testkit.kube import kubectl, to_yaml
from staticfleet_dev.testkit.poll import Poller

MEMBERS = 3
PARTITIONS = Pace().partitions
"""Partitions of every simulated group's topic: the simulator assigns that many per topic."""
TOPICS = 10
OPERATOR_CLIENT = "staticfleet-operator"
"""The operator's Kafka client id (its admin and per-cluster clients), in the request logs."""


def group_name(i: int) -> str:
    return f"fleet-{i:04d}"


def topic_of(i: int) -> str:
    return f"fleet-t{i % TOPICS}"


def sim_group(name: str, namespace: str, bootstrap: str, topic: str,
              replicas: int = MEMBERS, labels: Mapping[str, str] | None = None,
              ) -> dict[str, Any]:
    """A ConsumerGroup whose member pods go to kwok's fake Nodes (Running and Ready, no
    process), the simulator answering for them; `labels`, e.g. its shard's."""
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND,
        "metadata": {"name": name, "namespace": namespace,
                     **({"labels": dict(labels)} if labels else {})},
        "spec": {
            "replicas": replicas,
            "kafka": {"bootstrapServers": bootstrap, "topics": [topic]},
            "template": {"image": "staticfleet/member:simulated", "env": [],
                         "terminationGracePeriodSeconds": 2, **manifests.placement()},
            "processing": {"spark": {"master": "local[1]"}, "sink": {"type": "null"}},
        },
    }


def apply_all(kubeconfig: Path, docs: Sequence[dict[str, Any]], chunk: int = 50) -> None:
    """`kubectl apply` in chunks (one huge apply times out)."""
    for first in range(0, len(docs), chunk):
        kubectl(kubeconfig, "apply", "-f", "-", timeout=900,
                input="\n---\n".join(to_yaml(d) for d in docs[first:first + chunk]))


def commit_offsets(bootstrap: str, wanted: Mapping[str, str], records: int = 100) -> None:
    """Records on every topic of `wanted` (group id -> topic), then an offset committed
    half-way on each partition for every group, asked again for the groups whose coordinator
    was still loading (the admin client's result says so per partition and does not fail)."""
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for topic in sorted(set(wanted.values())):
        for n in range(records * PARTITIONS):
            producer.produce(topic, value=b"x", partition=n % PARTITIONS)
    producer.flush(60)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    left = dict(wanted)
    deadline = time.monotonic() + 600
    while left:
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(left)} groups' offsets not committed in 600 s")
        futures = {g: f for g, topic in left.items() for f in admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(g, [TopicPartition(topic, p, records // 2)
                                              for p in range(PARTITIONS)])]).values()}
        left = {g: left[g] for g, f in futures.items()
                if any(tp.error is not None for tp in f.result(timeout=120).topic_partitions)}
        if left:
            time.sleep(1)


# --- the member simulator as a process --------------------------------------------------------

@dataclass
class SimulatorProcess:
    """`python -m staticfleet_dev.membersim`, simulating the pods on kwok's pod network and
    relaying the others' requests to them."""

    record: ProcessRecord
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{self.address}{STATS}", timeout=10) as r:
            return dict(json.load(r))

    def stand_ins(self, rows: Sequence[tuple[str, str, str]]) -> None:
        """Name the real consumers that stand in Kafka for simulated members: (group id,
        instance id, member id)."""
        request = urllib.request.Request(f"http://{self.address}{STAND_INS}", method="POST",
                                         data=json.dumps([list(r) for r in rows]).encode())
        with urllib.request.urlopen(request, timeout=10):
            pass


def keep_stand_ins(sim: SimulatorProcess, consumers: Sequence[PolledMember],
                   every_s: float = 2.0) -> threading.Event:
    """Tell the simulator, whenever it changes, which member id each real consumer has (its
    instance id is its simulated member's); until the returned event is set."""
    stopping = threading.Event()

    def run() -> None:
        told: list[tuple[str, str, str]] = []
        while not stopping.wait(every_s):
            rows = [(c.group, c.instance, c.member_id) for c in consumers if c.member_id]
            if rows != told:
                try:
                    sim.stand_ins(rows)
                    told = rows
                except OSError:
                    pass  # the simulator is gone or busy: told again next time

    threading.Thread(target=run, name="stand-ins", daemon=True).start()
    return stopping


def start_simulator(workdir: Path, kubeconfig: Path) -> SimulatorProcess:
    port = free_port()
    _p, rec = spawn("membersim", [
        sys.executable, "-m", "staticfleet_dev.membersim", "--kubeconfig", str(kubeconfig),
        "--listen", f"127.0.0.1:{port}", "--simulate", str(manifests.POD_NETWORK)],
        log=workdir / "membersim.log")
    sim = SimulatorProcess(rec, port)

    def answers() -> bool:
        try:
            sim.stats()
        except OSError:
            return False
        return True

    wait_until(answers, rec=rec, timeout=60, what="answering")
    return sim


# --- what the groups' status says -------------------------------------------------------------

def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}


def observed(obj: Mapping[str, Any]) -> bool:
    """The operator has a pass of the group's current generation on record."""
    return ((obj.get("status") or {}).get("observedGeneration")
            == obj["metadata"].get("generation"))


def settled(obj: Mapping[str, Any]) -> bool:
    """Reconciled: observed at its current generation, every member pod Ready, no rollout
    under way, not Degraded, and Ready; or, for a group whose members are all simulated (the
    broker sees no member of it: Empty), Ready False for just that reason (`GroupNotStable`),
    which is what the operator rightly says of an Empty group."""
    st = obj.get("status") or {}
    conds = _conditions(obj)
    ready = conds.get("Ready", {})
    return (observed(obj) and st.get("readyReplicas") == obj["spec"]["replicas"]
            and (st.get("rollout") or {}).get("phase") in ("Idle", "Complete")
            and conds.get("Degraded", {}).get("status") == "False"
            and (ready.get("status") == "True"
                 or (ready.get("reason") == "GroupNotStable" and st.get("groupState") == "Empty")))


def first_switched(obj: Mapping[str, Any], pods: Iterable[Any]) -> bool:
    """At least one member of the group was replaced: as many pods as its replicas, none
    terminating, one or more of its update revision (a warm handoff's standby beside the old
    pod is one pod too many)."""
    revision, name = (obj.get("status") or {}).get("updateRevision"), obj["metadata"]["name"]
    mine = [p for p in pods if (p.metadata.labels or {}).get(GROUP_LABEL) == name]
    return (bool(revision) and len(mine) == obj["spec"]["replicas"]
            and all(p.metadata.deletion_timestamp is None for p in mine)
            and any((p.metadata.annotations or {}).get(REVISION_ANNOTATION) == revision
                    for p in mine))


def recorded_shard(obj: Mapping[str, Any]) -> str | None:
    """The group's `status.shard`: the shard whose operator reconciles it (None: none named,
    as an operator that is not sharded leaves it)."""
    return (obj.get("status") or {}).get("shard") or None


def degraded(obj: Mapping[str, Any]) -> bool:
    return _conditions(obj).get("Degraded", {}).get("status") == "True"


class DegradedWatch(Poller):
    """Lists the groups every 2 s (`list_groups()`) and keeps, per list, when and which were
    Degraded; a list that fails (the API server is not the subject) is skipped."""

    interval = 2.0
    transient = (Exception,)

    def __init__(self, list_groups: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self.list_groups = list_groups
        self.samples: list[tuple[float, set[str]]] = []

    def poll(self) -> None:
        objs = self.list_groups()
        self.samples.append((time.monotonic(), {o["metadata"]["name"] for o in objs
                                                if degraded(o)}))


def degraded_figures(samples: Sequence[tuple[float, set[str]]], stop: float, back: float,
                     ) -> tuple[int, float | None]:
    """Of `DegradedWatch` samples (less the groups left out) around a broker stopped at `stop`
    and back at `back` (monotonic): the most groups Degraded while it was away, and seconds
    from `back` until the last sample with one Degraded (None: some still are at the last)."""
    during = [len(d) for t, d in samples if stop <= t <= back]
    if not samples or samples[-1][1]:
        return max(during, default=0), None
    after = [t for t, d in samples if t > back and d]
    return max(during, default=0), round(max(after, default=back) - back, 1)


def why_not_settled(objs: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many groups are not settled, by what holds them (the first of: not observed yet,
    Degraded's reason, Ready's reason)."""
    out: Counter[str] = Counter()
    for obj in objs:
        if settled(obj):
            continue
        conds = _conditions(obj)
        if not observed(obj):
            out["not observed at its generation"] += 1
        elif degraded(obj):
            out[f"Degraded: {conds['Degraded'].get('reason')}"] += 1
        elif (obj.get("status") or {}).get("readyReplicas") != obj["spec"]["replicas"]:
            out["member pods not all Ready"] += 1
        elif ((obj.get("status") or {}).get("rollout") or {}).get("phase") not in (
                "Idle", "Complete"):
            out["a rollout under way"] += 1
        else:
            out[f"Ready {conds.get('Ready', {}).get('status')}: "
                f"{conds.get('Ready', {}).get('reason')}"] += 1
    return dict(out)


def coordinated_by(cluster: KafkaCluster, node: int, group_ids: Iterable[str]) -> list[str]:
    """The groups of `group_ids` whose coordinator is broker `node` now (the leader of their
    `__consumer_offsets` partition)."""
    meta = cluster.admin().list_topics(OFFSETS_TOPIC, timeout=10)
    parts = meta.topics[OFFSETS_TOPIC].partitions
    return [g for g in group_ids if parts[offsets_partition(g, len(parts))].leader == node]


NOT_OPERATORS = ("leases", "nodes", "endpoints", "endpointslices", "events")
"""Writes not the operator's: kwok renews its Nodes' Leases (after the idle span is taken off,
jitter); the controller manager retries, with Events, the Endpoints(Slices) of the groups'
headless Services, which it cannot make of kwok's loopback pod IPs. The operator's own Events
are counted from the Events themselves (`fleet.operator_events`)."""


def kube_rest_figures(api: Mapping[tuple[str, str], float], raw: Mapping[tuple[str, str], float],
                      events: float, took: float) -> dict[str, Any]:
    """The at-rest figures of the API server's requests over a window of `took` s: `api`, the
    window's requests by (verb, resource) less an idle span's; `raw`, not less it; `events`, the
    operators' Event writes (`operator_events`), which stand for all writes of Events."""
    mine = figures.writes({k: c for k, c in api.items() if k[1] not in NOT_OPERATORS})
    return {
        "kubeRequestsPerSecondAtRestByVerb": {
            v: round(c / took, 3) for v, c in sorted(figures.by_verb(api).items())},
        "kubeWritesPerSecondAtRest": round((mine + events) / took, 4),
        "kubeWritesAtRestByResource": {f"{verb} {res}": round(c / took, 4)
                                       for (verb, res), c in sorted(api.items())
                                       if verb in figures.WRITE_VERBS},
        "kubeWritesPerSecondAtRestWithoutIdleSubtraction": round(figures.writes(raw) / took, 3),
        "eventsPerSecondAtRest": round(events / took, 4)}


def operator_events(core: Any) -> int:
    """The Events the operator has written so far (kubernetes client `CoreV1Api`): each
    counted as often as it was emitted (`count`), so two reads' difference is its Event writes
    between them (a repeat is a PATCH of `count`)."""
    items = core.list_event_for_all_namespaces().items
    return sum(e.count or 1 for e in items if any(
        c == MANAGER or c.startswith(f"{MANAGER}-")  # staticfleet-autoscaler too
        for c in ((e.source and e.source.component) or "", e.reporting_component or "")))


# --- the brokers' own records, read as the logs grow ------------------------------------------

_STABILIZED = re.compile(r"Stabilized group (\S+) generation (\d+)")


@dataclass
class BrokerRecords:
    """Follows the broker logs of a cluster from where they were: the requests logged (API,
    client id) and every generation each group stabilized (a rebalance is a new one)."""

    cluster: KafkaCluster
    offsets: dict[int, int] = field(default_factory=dict)
    generations: dict[str, set[int]] = field(default_factory=dict)

    def read(self) -> list[tuple[str, str]]:
        """The requests logged since the last read; the generations are taken in on the way."""
        out: list[tuple[str, str]] = []
        for n, node in self.cluster.nodes.items():
            if not node.log.exists():
                continue
            with node.log.open("rb") as f:
                f.seek(self.offsets.get(n, 0))
                data = f.read()
            cut = data.rfind(b"\n") + 1  # a line being written is read next time
            self.offsets[n] = self.offsets.get(n, 0) + cut
            text = data[:cut].decode(errors="replace")
            out += request_lines(text)
            for m in _STABILIZED.finditer(text):
                self.generations.setdefault(m.group(1), set()).add(int(m.group(2)))
        return out

    def formed(self, groups: Iterable[str]) -> bool:
        """Whether each of `groups` has stabilized a generation, the logs read on (the
        requests read meanwhile are not kept)."""
        self.read()
        return all(self.generations.get(g) for g in groups)

    def generation_counts(self, groups: Iterable[str]) -> dict[str, int]:
        return {g: len(self.generations.get(g, ())) for g in groups}


def operator_requests(logged: Iterable[tuple[str, str]]) -> Counter[str]:
    """The operator's requests among logged (API, client id) pairs, by API."""
    return Counter(api for api, client in logged if client == OPERATOR_CLIENT)


def kafka_rest_figures(kafka: Mapping[str, int], took: float, groups: int) -> dict[str, Any]:
    """The at-rest figures of the operators' Kafka requests (`operator_requests`) over a window
    of `took` s with `groups` groups."""
    return {
        "kafkaRequestsPerSecondAtRest": round(sum(kafka.values()) / took, 2),
        "kafkaRequestsPerSecondAtRestByApi": {a: round(c / took, 3)
                                              for a, c in sorted(kafka.items())},
        "kafkaLagAndOffsetReadsPerGroupPerMinute": round(
            (kafka.get("OFFSET_FETCH", 0) + kafka.get("LIST_OFFSETS", 0)) * 60 / took / groups,
            4)}


def rollouts_figures(complete: Mapping[str, float], switched: Mapping[str, float],
                     completable: int, rollers: int) -> dict[str, Any]:
    """The figures of `rollers` rollouts at once, `completable` of which can complete: when
    each completed and first switched over (seconds since they began, by group)."""
    return {
        "rolloutsAtOnce": rollers, "rolloutsCompletable": completable,
        "rolloutsCompleted": len(complete),
        "rolloutsAllCompleteSeconds": (round(max(complete.values()), 1)
                                       if complete and len(complete) == completable else None),
        "rolloutsFirstSwitchover": len(switched),
        "rolloutsAllFirstSwitchoverSeconds": (round(max(switched.values()), 1)
                                              if switched and len(switched) == rollers else None)}


def new_generations(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """Groups that stabilized new generations between two `generation_counts`, how many."""
    return {g: n - before.get(g, 0) for g, n in after.items() if n > before.get(g, 0)}


@dataclass
class Settling:
    """One shard's cold start: seconds until every group given to it was first observed at its
    generation, until every one was settled and held by it (its `status.shard` names the shard),
    and what held the rest at the last look."""

    first: float | None = None
    settled: float | None = None
    held: dict[str, int] = field(default_factory=dict)


def note_settling(progress: Mapping[str | None, Settling], objs: Iterable[Mapping[str, Any]],
                  shards: Mapping[str, str | None], now: float) -> bool:
    """Take one list of the groups into each shard's `Settling` (`shards`: group name -> the
    shard it was given, None: not sharded); whether every shard has settled."""
    theirs: dict[str | None, list[Mapping[str, Any]]] = {}
    for obj in objs:
        if (name := obj["metadata"]["name"]) in shards:
            theirs.setdefault(shards[name], []).append(obj)
    expected = Counter(shards.values())
    for shard, s in progress.items():
        if s.settled is not None:
            continue
        mine = theirs.get(shard, [])
        if len(mine) < expected[shard]:
            s.held = {"not listed yet": expected[shard] - len(mine)}
            continue
        if s.first is None and all(observed(o) for o in mine):
            s.first = now
        elsewhere = Counter(f"status.shard {recorded_shard(o)!r}" for o in mine
                            if settled(o) and recorded_shard(o) != shard)
        s.held = {**why_not_settled(mine), **elsewhere}
        if not s.held:
            s.settled = now
    return all(s.settled is not None for s in progress.values())


def wait_settled(list_groups: Callable[[], Sequence[Mapping[str, Any]]],
                 shards: Mapping[str, str | None], timeout: float, since: float,
                 ) -> dict[str | None, Settling]:
    """Poll `list_groups()` every second until every group of `shards` (name -> the shard it
    was given) is settled and held by its shard, or for `timeout` s; each shard's `Settling`,
    its seconds from `since` (monotonic)."""
    progress = {shard: Settling() for shard in dict.fromkeys(shards.values())}
    every = 1.0 if len(shards) <= 1000 else 3.0  # the list is the bench's own load
    while time.monotonic() - since < timeout:
        try:
            groups = list_groups()
        except ApiException as exc:  # an API server busy with a cold start: ask again
            if exc.status is None or exc.status < 500:
                raise
            time.sleep(every)
            continue
        if note_settling(progress, groups, shards, time.monotonic() - since):
            break
        time.sleep(every)
    return progress
