"""The per-cluster reads (`observe.clusterreads`, issue 37) against three real brokers: sixty
groups read together answer as the per-group reads (`observe.kafkareads`) answer for each,
with a few requests per coordinator, as the brokers' own request logs count them; and while a
coordinator is killed, every answer is right or absent, and every group is found again.

A third test takes the groups as a pass does (`observe.clusterpool`, what `service.gather`
asks): from the cluster's last read when it is fresh enough, alone when it is not.

The groups: classic static members and KIP-848 members (real confluent-kafka consumers with a
group.instance.id), groups that only have committed offsets (every member down), group ids
never used, and groups registered with the other protocol than their own (the reads ask the
other describe API for them). Both tests share the module's cluster: the first leaves all three
brokers running; the second makes groups of its own.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from staticfleet.decisions.snapshot import GroupView
from staticfleet.observe import clusterpool, kafkaadmin, kafkareads, lagreads
from staticfleet.observe.clusterreads import ClusterReader, Registration
from staticfleet_dev.kafka import KafkaCluster
from staticfleet_dev.testkit.consumers import PolledMember
from staticfleet_dev.testkit.poll import wait_for
from tests.support import unique

pytestmark = pytest.mark.integration

PARTITIONS = 3
RECORDS = 30
TP = tuple[str, int]


def normal(view: GroupView | None) -> GroupView | None:
    """A view with its members in one order (the two reads may list them in another), without
    the group epoch: the per-group read (librdkafka's DescribeConsumerGroups, the operator's
    fallback) does not give it, and the cluster's read is checked for it on its own
    (`epochs_given`)."""
    if view is None:
        return None
    return replace(view, epoch=None, members=tuple(sorted(view.members, key=lambda m: (
        m.instance_id or "", m.member_id))))


def epochs_given(view: GroupView | None) -> bool:
    """Whether the cluster's read of a group gives the epoch it should: a KIP-848 group with
    members has one (at least 1, its first member's join), a classic group has none."""
    if view is None:
        return False
    if view.protocol == "consumer" and view.members:
        return view.epoch is not None and view.epoch >= 1
    return view.protocol != "classic" or view.epoch is None


@pytest.fixture
def admin(logged_kafka_cluster: KafkaCluster) -> Iterator[kafkaadmin.Admin]:
    """The per-group reads' admin client (what the operator reads with today)."""
    pool = kafkaadmin.AdminPool()
    yield pool.get({"bootstrap.servers": logged_kafka_cluster.bootstrap})
    pool.close()


class Groups:
    """Topics with records, and groups on them: consumers (classic and KIP-848), groups with
    committed offsets only, group ids never used; `registrations` says how each is
    registered with the per-cluster reads (some with the other protocol than their own)."""

    def __init__(self, cluster: KafkaCluster, prefix: str, consumers: int, offsets_only: int,
                 never: int = 2) -> None:
        self.cluster = cluster
        self.topics = [cluster.make_topic(unique(f"{prefix}-t{i}"), PARTITIONS)
                       for i in range(3)]
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        for topic in self.topics:
            for i in range(RECORDS):
                producer.produce(topic, value=b"x", partition=i % PARTITIONS)
        assert producer.flush(60) == 0
        self.registrations: list[Registration] = []
        self.members: list[PolledMember] = []
        self.consumers: dict[str, str] = {}
        """Each consumer group's id -> its protocol."""
        for i in range(consumers):
            protocol = "consumer" if i % 2 else "classic"
            group, topic = unique(f"{prefix}-{protocol[:2]}{i}"), self.topics[i % 3]
            self.members.append(PolledMember(cluster.bootstrap, group, topic, protocol))
            self.consumers[group] = protocol
            told = protocol if i % 4 < 2 else ("classic" if protocol == "consumer" else "consumer")
            self.registrations.append(Registration(group, told, (topic,)))
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for i in range(offsets_only):
            group, topic = unique(f"{prefix}-off{i}"), self.topics[i % 3]
            offsets = [TopicPartition(topic, p, (i + p) % RECORDS) for p in range(PARTITIONS)]
            wait_for(f"group {group}'s offsets committed", lambda g=group, o=offsets: commit(
                admin, g, o), timeout=60)
            self.registrations.append(Registration(group, ("classic", "consumer")[i % 2],
                                                   (topic,)))
        for i in range(never):
            self.registrations.append(Registration(unique(f"{prefix}-never{i}"),
                                                   ("classic", "consumer")[i % 2],
                                                   (self.topics[0],)))

    def tps(self, registration: Registration) -> list[TP]:
        return [(t, p) for t in registration.topics for p in range(PARTITIONS)]

    def unsettled(self, admin: kafkaadmin.Admin) -> list[str]:
        """The consumers' groups not yet Stable with every partition of their topic assigned
        (they start at the topic's end, so they commit nothing: their committed offsets stay
        as they are, none)."""
        out = []
        for r in self.registrations:
            if r.group_id not in self.consumers:
                continue
            try:
                view = kafkareads.describe_group(admin, r.group_id, r.protocol)
            except kafkaadmin.KafkaUnavailable as exc:
                out.append(f"{r.group_id}: {exc}")
                continue
            if view.state != "Stable" or sum(len(m.partitions) for m in view.members) != 3:
                out.append(f"{r.group_id}: {view}")
        return out

    def settle(self, admin: kafkaadmin.Admin) -> None:
        wait_for("every consumer Stable with its partitions", lambda: not self.unsettled(admin),
                 timeout=120, describe=lambda: self.unsettled(admin))

    def close(self) -> None:
        for member in self.members:
            member.close()


def commit(admin: AdminClient, group: str, offsets: list[TopicPartition]) -> bool:
    """Commit `offsets` for `group`; whether every partition took it (a coordinator that is
    still loading refuses them one by one, COORDINATOR_LOAD_IN_PROGRESS, in a result that does
    not fail)."""
    for future in admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, offsets)]).values():
        try:
            answer = future.result(timeout=30)
        except TimeoutError:
            return False  # asked again: CI once waited 60 s for one answer, the machine loaded
        if any(tp.error is not None for tp in answer.topic_partitions):
            return False
    return True


def per_group(admin: kafkaadmin.Admin, groups: Groups) -> dict[str, tuple[Any, Any]]:
    """Each group's describe and committed offsets as the per-group reads give them. A group
    id no broker knows is Dead with the protocol the spec will make it with
    (`kafkareads.describe_group`'s word; librdkafka's fallback to DescribeGroups calls every
    such group classic, which no decision reads)."""
    out = {}
    for r in groups.registrations:
        view = kafkareads.describe_group(admin, r.group_id, r.protocol)
        if view.state == "Dead" and not view.members:
            view = GroupView("Dead", r.protocol)
        out[r.group_id] = (normal(view),
                           kafkareads.committed_offsets(admin, r.group_id, groups.tps(r)))
    return out


def counted(cluster: KafkaCluster, since: Mapping[int, int], client: str) -> Counter[str]:
    """The requests of `client` the brokers logged since the log sizes `since`."""
    time.sleep(1.0)  # a broker logs a request once it answered it
    return Counter(api for api, who in cluster.requests(since) if who == client)


def test_sixty_groups_read_together_answer_as_read_one_by_one_with_a_few_requests(
        logged_kafka_cluster: KafkaCluster, admin: kafkaadmin.Admin) -> None:
    cluster = logged_kafka_cluster
    groups = Groups(cluster, "cr", consumers=12, offsets_only=46)
    client = unique("cluster-reads")
    reader = None
    try:
        assert len(groups.registrations) == 60
        groups.settle(admin)
        reader = ClusterReader({"bootstrap.servers": cluster.bootstrap},
                               settings={"client_id": client})
        for r in groups.registrations:
            reader.register(r, 0.0)

        sizes = cluster.log_sizes()
        cold = reader.read(0.0)
        # Cold: the client connects (ApiVersions, and its own first metadata) and finds every
        # group's coordinator in one FindCoordinator.
        logged = counted(cluster, sizes, client)
        assert logged["FIND_COORDINATOR"] == cold["FIND_COORDINATOR"] == 1, (logged, cold)
        expected = per_group(admin, groups)
        ends = kafkareads.end_offsets(admin, [tp for t in groups.topics
                                              for tp in ((t, p) for p in range(PARTITIONS))])
        dead = [r for r in groups.registrations if "never" in r.group_id]
        for r in groups.registrations:
            read = reader.group(r.group_id)
            assert read.described is not None and read.committed is not None, r
            assert (normal(read.described.outcome.view), dict(read.committed.offsets)) == (
                expected[r.group_id]), r
            assert epochs_given(read.described.outcome.view), read.described.outcome.view
            assert {tp: end for tp, (_, end) in read.ends.items()} == {
                tp: ends[tp] for tp in groups.tps(r)}
            assert read.topics is not None and read.topics.counts == {
                t: PARTITIONS for t in r.topics}
        assert {expected[g][0].protocol for g in groups.consumers} == {"classic", "consumer"}
        assert [expected[r.group_id][0].state for r in dead] == ["Dead"] * len(dead)

        coordinators = set(reader.coordinators.values())
        leaders = {n for t in groups.topics for n in (
            cluster.admin().list_topics(t, timeout=10).topics[t].partitions[p].leader
            for p in range(PARTITIONS))}
        # At rest: an interval later, no offsets due: metadata and the describes alone, the
        # same answers.
        sizes = cluster.log_sizes()
        rest = reader.read(10.0)
        assert counted(cluster, sizes, client) == rest
        for r in groups.registrations:
            described = reader.group(r.group_id).described
            assert described is not None and described.at == 10.0
            assert normal(described.outcome.view) == expected[r.group_id][0], r
        assert rest["METADATA"] == 1 and not {"FIND_COORDINATOR", "OFFSET_FETCH",
                                              "LIST_OFFSETS"} & set(rest), rest
        # One DescribeGroups and one ConsumerGroupDescribe per coordinator; a group no broker
        # knows (the ids never used) is asked of the other API too: one more request per
        # coordinator and API at most.
        unknown = {(reader.coordinators[r.group_id], r.protocol) for r in groups.registrations
                   if expected[r.group_id][0].state == "Dead"}
        assert unknown and rest["DESCRIBE_GROUPS"] + rest["CONSUMER_GROUP_DESCRIBE"] <= (
            2 * len(coordinators) + len(unknown)), (rest, coordinators, unknown)
        # A minute on: the committed offsets (one OffsetFetch per coordinator) and the end
        # offsets (one ListOffsets per partition leader) are due.
        sizes = cluster.log_sizes()
        minute = reader.read(70.0)
        assert counted(cluster, sizes, client) == minute
        assert minute["OFFSET_FETCH"] <= len(coordinators), (minute, coordinators)
        assert minute["LIST_OFFSETS"] <= len(leaders), (minute, leaders)
        assert sum(minute.values()) <= 1 + 4 * len(coordinators) + len(unknown) + len(leaders)
        print(f"\n60 groups, {len(coordinators)} coordinators, {len(leaders)} leaders: "
              f"requests of a cold read {dict(cold)} (the brokers logged {dict(logged)}); "
              f"at rest (an interval) {dict(rest)}; "
              f"with the minute's offsets {dict(minute)}; per-group reads today: "
              f"{per_group_requests(cluster, admin, groups)}")
    finally:
        groups.close()
        if reader is not None:
            reader.close()


def per_group_requests(cluster: KafkaCluster, admin: kafkaadmin.Admin,
                       groups: Groups) -> dict[str, int]:
    """What one pass of every group asks today, for the figures: the admin clients' requests
    (client id staticfleet-operator) while each group's describe, committed offsets, end
    offsets and topics are read once."""
    sizes = cluster.log_sizes()
    for r in groups.registrations:
        kafkareads.describe_group(admin, r.group_id, r.protocol)
        kafkareads.committed_offsets(admin, r.group_id, groups.tps(r))
        kafkareads.end_offsets(admin, groups.tps(r))
        kafkareads.topics_seen(admin, r.topics)
    return dict(counted(cluster, sizes, "staticfleet-operator"))


def test_a_killed_coordinators_groups_answer_right_or_not_at_all_and_are_found_again(
        logged_kafka_cluster: KafkaCluster, admin: kafkaadmin.Admin) -> None:
    cluster = logged_kafka_cluster
    groups = Groups(cluster, "ck", consumers=4, offsets_only=14)
    reader = None
    victim = None
    try:
        groups.settle(admin)
        truth = per_group(admin, groups)
        ends = kafkareads.end_offsets(admin, [(t, p) for t in groups.topics
                                              for p in range(PARTITIONS)])
        reader = ClusterReader({"bootstrap.servers": cluster.bootstrap})
        start = time.monotonic()
        for r in groups.registrations:
            reader.register(r, start)
        everyone = [r.group_id for r in groups.registrations]
        reader.read(start, offsets=everyone)
        assert all(right(reader, r.group_id, truth, ends) for r in groups.registrations)
        on = Counter(reader.coordinators.values())
        victim = on.most_common(1)[0][0]
        moved = sorted(g for g, n in reader.coordinators.items() if n == victim)

        cluster.kill(victim)
        killed = time.monotonic()
        absent: Counter[str] = Counter()
        while True:
            now = time.monotonic()
            reader.read(now, offsets=everyone)
            missing = [r.group_id for r in groups.registrations
                       if not right(reader, r.group_id, truth, ends, at=now)]
            absent.update(missing)
            if not missing:
                break
            assert now - killed < 90, f"not found again: {missing}"
            time.sleep(1.0)
        back_s = time.monotonic() - killed
        assert all(reader.coordinators[g] != victim for g in moved)
        print(f"\nbroker {victim} killed ({len(moved)} of {len(everyone)} groups' coordinator): "
              f"every group answered again after {back_s:.1f} s; reads without an answer, by "
              f"group: {sorted(absent.values(), reverse=True)}")
        assert set(absent) <= set(moved) | set(groups.consumers), absent
    finally:
        groups.close()
        if reader is not None:
            reader.close()
        if victim is not None:
            cluster.start(victim)


def right(reader: ClusterReader, group_id: str, truth: Mapping[str, tuple[Any, Any]],
          ends: Mapping[TP, int], at: float | None = None) -> bool:
    """Whether the reader answered for `group_id` in its read at `at` (the last one when None)
    as the per-group reads did before (`truth`): False when it has no answer from that read,
    or a group with members answers in the midst of a change its members may make while their
    coordinator moves (a rebalancing state, its partitions not shown). Anything else is wrong
    and fails the test at once: other members, other partitions, other offsets."""
    read = reader.group(group_id)
    view, committed = truth[group_id]
    described = read.described
    if described is None or (at is not None and described.at != at):
        return False
    got = normal(described.outcome.view)
    if got is None:
        return False
    if got != view:
        assert view.members and [m.instance_id for m in got.members] == [
            m.instance_id for m in view.members] and got.state != "Stable", (group_id, got, view)
        return False
    if read.committed is None or (at is not None and read.committed.at != at):
        return False
    assert dict(read.committed.offsets) == committed, group_id
    for tp, (read_at, end) in read.ends.items():
        if at is None or read_at == at:
            assert end == ends[tp], (group_id, tp)
    return True


def test_a_pass_takes_its_group_from_the_clusters_read_and_reads_it_alone_only_when_stale(
        logged_kafka_cluster: KafkaCluster, admin: kafkaadmin.Admin) -> None:
    """What `service.gather` does through `clusterpool` (issue 37 item 3), pass by pass with
    the time given: the first pass of the cluster reads it; a group registered since is read
    alone once; then the passes of an interval make no request, the interval's first pass
    reads every group, a group whose members are in flight is read alone again, and its lag
    comes from the cluster's reads with the figures the per-group reads give."""
    cluster = logged_kafka_cluster
    groups = Groups(cluster, "cp", consumers=2, offsets_only=4, never=0)
    pool = clusterpool.ClusterReads()
    try:
        groups.settle(admin)
        expected = per_group(admin, groups)
        t = time.monotonic()
        reader = pool.reader({"bootstrap.servers": cluster.bootstrap}, t)
        assert reader is not None
        regs = groups.registrations
        for r in regs:  # every group's first pass
            held = pool.group(reader, r, t, clusterpool.describe_age_s(False), owner=r.group_id)
            assert held.described is not None and held.committed is not None
            assert (normal(held.described.outcome.view), dict(held.committed.offsets)) == (
                expected[r.group_id])
            assert epochs_given(held.described.outcome.view), held.described.outcome.view

        def requests(now: float, in_flight: bool = False,
                     which: list[Registration] = regs) -> Counter[str]:
            before = Counter(reader.wire.sent)
            for r in which:
                pool.group(reader, r, now, clusterpool.describe_age_s(in_flight))
            return reader.wire.sent - before

        assert requests(t + 5) == Counter(), "within the interval: the last reads serve"
        whole = requests(t + 11)
        coordinators = set(reader.coordinators.values())
        assert whole["METADATA"] == 1 and "FIND_COORDINATOR" not in whole, whole
        assert whole["DESCRIBE_GROUPS"] + whole["CONSUMER_GROUP_DESCRIBE"] <= 2 * len(
            coordinators), (whole, coordinators)
        assert reader.last_requests == whole, "one read served every pass of the interval"
        alone = requests(t + 14, in_flight=True, which=regs[:1])
        assert sum(alone.values()) == 1 and alone.keys() <= {
            "DESCRIBE_GROUPS", "CONSUMER_GROUP_DESCRIBE"}, alone

        offsets_only = next(r for r in regs if r.group_id not in groups.consumers)
        now = t + 14.5
        before = Counter(reader.wire.sent)
        lag = lagreads.LagReads(clock=lambda: now).lag(
            admin, offsets_only.group_id, {offsets_only.topics[0]: PARTITIONS},
            offsets=clusterpool.GroupOffsets(reader, offsets_only.group_id))
        assert reader.wire.sent == before, "the offsets of the first read serve a minute"
        per_group_lag = lagreads.LagReads().lag(
            admin, offsets_only.group_id, {offsets_only.topics[0]: PARTITIONS})
        assert lag.by_partition == per_group_lag.by_partition != {}
        assert lag.age_s == 14.5
        pool.forget(regs[0].group_id)
        assert regs[0].group_id not in reader.registered
    finally:
        groups.close()
        pool.close()
