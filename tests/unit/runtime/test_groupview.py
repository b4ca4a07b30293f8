"""The group as its coordinator describes it (groupview.GroupView), without a broker: the two
describe APIs' messages byte for byte against Kafka's layouts (the wire kit's DescribeGroups v5,
ConsumerGroupDescribe v0 and a classic consumer's assignment, `kafkawire.messages`), what each
answer says as a table, and the view's questions against a scripted stand-in for kafka-python's
KafkaClient: which API it asks first, when it asks the other, and that every failure is None,
never an exception."""

from __future__ import annotations

import ast
import gc
import io
import logging
import struct
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.errors import KafkaConnectionError
from kafka.protocol.api import RequestHeaderV2

import consumer_runtime
from consumer_runtime.config import RuntimeConfig, parse_config
from consumer_runtime.groupview import (
    CLASSIC_DESCRIBE,
    CONSUMER_DESCRIBE,
    Described,
    GroupMember,
    GroupView,
    describe_order,
    read_classic,
    read_consumer,
)
from kafkawire.messages import ConsumerGroupDescribe, DescribeGroups, classic_assignment
from tests.unit.runtime.fakes import NEVER_ANSWERED, Future, scripted_send
from tests.unit.runtime.support import base

pytestmark = pytest.mark.unit

# -- Kafka's primitive types, by hand -------------------------------------------------------


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def string(s: str | None) -> bytes:
    """A (non-flexible) STRING / NULLABLE_STRING: int16 length, -1 for null."""
    return i16(-1) if s is None else i16(len(s.encode())) + s.encode()


def blob(b: bytes | None) -> bytes:
    """BYTES / NULLABLE_BYTES: int32 length, -1 for null."""
    return i32(-1) if b is None else i32(len(b)) + b


def array(*items: bytes) -> bytes:
    return i32(len(items)) + b"".join(items)


def uvarint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def cstring(s: str | None) -> bytes:
    """A flexible version's COMPACT_STRING: unsigned varint length + 1, 0 for null."""
    return b"\x00" if s is None else uvarint(len(s.encode()) + 1) + s.encode()


def carray(*items: bytes) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


def cblob(b: bytes | None) -> bytes:
    """A flexible version's COMPACT_BYTES: unsigned varint length + 1, 0 for null."""
    return b"\x00" if b is None else uvarint(len(b) + 1) + b


NO_TAGS = b"\x00"
NO_OPERATIONS = i32(-2**31)
TOPIC_ID = bytes(range(16))


# -- a classic consumer's assignment ------------------------------------------------------------


def classic_assignment_bytes(version: int, *topics: tuple[str, list[int]],
                             user_data: bytes | None = None) -> bytes:
    return i16(version) + array(*(string(t) + array(*(i32(p) for p in ps))
                                  for t, ps in topics)) + blob(user_data)


@pytest.mark.parametrize(("raw", "expected"), [
    (b"", set()),
    (None, set()),
    (classic_assignment_bytes(0, ("a", [0, 3])), {("a", 0), ("a", 3)}),
    (classic_assignment_bytes(3, ("a", [1]), ("b", [0, 2]), user_data=b"\x01\x02"),
     {("a", 1), ("b", 0), ("b", 2)}),
    (classic_assignment_bytes(1), set()),
], ids=["none yet", "null", "version 0", "version 3 with user data", "empty"])
def test_a_classic_assignment_decodes_to_its_partitions(raw: bytes | None,
                                                        expected: set[tuple[str, int]]) -> None:
    assert classic_assignment(raw) == expected


def test_a_classic_assignment_cut_short_is_an_error() -> None:
    with pytest.raises(ValueError):  # struct.error is a ValueError too
        classic_assignment(classic_assignment_bytes(0, ("a", [0, 3]))[:-6])


# -- DescribeGroups v5 (the wire kit's: kafkawire.messages) -----------------------------------

DescribeGroupsResponse = DescribeGroups.RESPONSE_TYPE


def test_describe_groups_v5_encodes_as_kafkas_layout() -> None:
    request = DescribeGroups(["orders"], False, {})
    assert request.encode() == carray(cstring("orders")) + b"\x00" + NO_TAGS
    assert (request.API_KEY, request.API_VERSION, request.FLEXIBLE_VERSION) == (15, 5, True)
    assert isinstance(request.build_header(7, "c"), RequestHeaderV2)  # a flexible version
    assert CLASSIC_DESCRIBE.request("orders").encode() == request.encode()


def classic_member(member_id: str, instance: str | None, assignment: bytes) -> bytes:
    return (cstring(member_id) + cstring(instance) + cstring("client") + cstring("/10.0.0.1")
            + cblob(b"") + cblob(assignment) + NO_TAGS)


def classic_answer(*groups: bytes) -> bytes:
    return i32(0) + carray(*groups) + NO_TAGS


def classic_group(group: str, members: list[bytes], state: str = "Stable",
                  error: int = 0, protocol_type: str = "consumer") -> bytes:
    return (i16(error) + cstring(group) + cstring(state) + cstring(protocol_type)
            + cstring("range") + carray(*members) + NO_OPERATIONS + NO_TAGS)


def decode(response_type: Any, wire: bytes) -> Any:
    buf = io.BytesIO(wire)
    answer = response_type.decode(buf)
    assert buf.read() == b"", "every byte read, no more"
    return answer


def test_a_describe_groups_v5_answer_decodes_with_instance_ids_and_assignments() -> None:
    wire = classic_answer(classic_group("orders", [
        classic_member("m-0", "orders-0", classic_assignment_bytes(1, ("a", [0, 1]))),
        classic_member("m-1", None, b""),
    ]))
    answer = decode(DescribeGroupsResponse, wire)
    assert read_classic(answer, "orders") == Described(members=(
        GroupMember("m-0", "orders-0", frozenset({("a", 0), ("a", 1)})),
        GroupMember("m-1", None, frozenset())))


GROUP_ID_NOT_FOUND, NOT_COORDINATOR, LOADING, NOT_AVAILABLE, DENIED = 69, 16, 14, 15, 30


@pytest.mark.parametrize(("group", "expected"), [
    (classic_group("orders", [], state="Empty"), Described()),
    (classic_group("orders", [], state="Empty", protocol_type=""), Described(absent=True)),
    (classic_group("orders", [], state="PreparingRebalance"), Described()),
    (classic_group("orders", [], state="Dead", protocol_type=""), Described(absent=True)),
    (classic_group("orders", [], state="", error=GROUP_ID_NOT_FOUND), Described(absent=True)),
    (classic_group("orders", [], state="", error=NOT_COORDINATOR),
     Described(error="error 16:", moved=True)),
    (classic_group("orders", [], state="", error=LOADING),
     Described(error="error 14:", moved=True)),
    (classic_group("orders", [], state="", error=NOT_AVAILABLE),
     Described(error="error 15:", moved=True)),
    (classic_group("orders", [], state="", error=DENIED), Described(error="error 30:")),
    (classic_group("orders", [], protocol_type="connect"),
     Described(error="group orders has protocol type 'connect', not a consumer group's")),
    (classic_group("other", []), Described(error="the answer does not describe group orders")),
], ids=["Empty: every member left", "Empty, no consumer ever (a coordinator just elected)",
        "rebalancing", "Dead: none, or a consumer group", "GROUP_ID_NOT_FOUND (v6)",
        "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE",
        "GROUP_AUTHORIZATION_FAILED", "not a consumer group", "another group"])
def test_what_a_describe_groups_answer_says(group: bytes, expected: Described) -> None:
    assert read_classic(decode(DescribeGroupsResponse, classic_answer(group)),
                        "orders") == expected


@pytest.mark.parametrize("state", ["PreparingRebalance", "CompletingRebalance"])
def test_between_generations_a_classic_members_partitions_are_not_known(state: str) -> None:
    """The coordinator shows assignments only in a Stable group: an empty one meanwhile does
    not mean released."""
    answer = decode(DescribeGroupsResponse, classic_answer(classic_group("orders", [
        classic_member("m-0", "orders-0", b"")], state=state)))
    assert read_classic(answer, "orders") == Described(members=(
        GroupMember("m-0", "orders-0", None),))


def test_an_assignment_that_does_not_decode_is_no_answer() -> None:
    answer = decode(DescribeGroupsResponse, classic_answer(classic_group(
        "orders", [classic_member("m-0", "orders-0", b"\x00\x01\x00")])))
    found = read_classic(answer, "orders")
    assert found.error.startswith("an assignment that does not decode: ") and not found.members


# -- ConsumerGroupDescribe v0 (the wire kit's) ---------------------------------------------------

ConsumerGroupDescribeResponse_v0 = ConsumerGroupDescribe.RESPONSE_TYPE


def test_consumer_group_describe_v0_encodes_as_kafkas_layout() -> None:
    request = ConsumerGroupDescribe(["orders"], False, {})
    assert request.encode() == carray(cstring("orders")) + b"\x00" + NO_TAGS
    assert (request.API_KEY, request.API_VERSION, request.FLEXIBLE_VERSION) == (69, 0, True)
    assert isinstance(request.build_header(7, "c"), RequestHeaderV2)
    assert CONSUMER_DESCRIBE.request("orders").encode() == request.encode()


def topic_partitions(*topics: tuple[str, list[int]]) -> bytes:
    """An Assignment struct: its TopicPartitions, then its tagged fields."""
    return carray(*(TOPIC_ID + cstring(t) + carray(*(i32(p) for p in ps)) + NO_TAGS
                    for t, ps in topics)) + NO_TAGS


ASSIGNMENT_EPOCH = 7


def consumer_member(member_id: str, instance: str | None, *owned: tuple[str, list[int]],
                    target: tuple[tuple[str, list[int]], ...] = (),
                    epoch: int = ASSIGNMENT_EPOCH) -> bytes:
    return (cstring(member_id) + cstring(instance) + cstring(None) + i32(epoch)
            + cstring("client") + cstring("/10.0.0.1") + carray(cstring("a")) + cstring(None)
            + topic_partitions(*owned) + topic_partitions(*target) + NO_TAGS)


def consumer_group(group: str, members: list[bytes], state: str = "Stable", error: int = 0,
                   message: str | None = None) -> bytes:
    return (i16(error) + cstring(message) + cstring(group) + cstring(state) + i32(8)
            + i32(ASSIGNMENT_EPOCH) + cstring("uniform") + carray(*members) + NO_OPERATIONS
            + NO_TAGS)


def consumer_answer(*groups: bytes) -> bytes:
    return i32(0) + carray(*groups) + NO_TAGS


def test_a_consumer_group_describe_answer_decodes_with_the_current_assignment() -> None:
    wire = consumer_answer(consumer_group("orders", [
        consumer_member("Mx3v", "orders-0", ("a", [0, 3]), target=(("a", [0]),)),
        consumer_member("Qb7w", None),
    ], state="reconciling"))
    answer = decode(ConsumerGroupDescribeResponse_v0, wire)
    # The partitions are those the member holds now, not its target.
    assert read_consumer(answer, "orders") == Described(members=(
        GroupMember("Mx3v", "orders-0", frozenset({("a", 0), ("a", 3)})),
        GroupMember("Qb7w", None, frozenset())))


@pytest.mark.parametrize(("epoch", "known"), [
    (ASSIGNMENT_EPOCH, True),
    (ASSIGNMENT_EPOCH - 1, False),
    (-2, False),
], ids=["at the assignment epoch", "still to reconcile (revocation unacknowledged)",
        "a static member away (epoch -2)"])
def test_a_consumer_members_partitions_are_known_at_the_assignment_epoch(
        epoch: int, known: bool) -> None:
    """While a member has partitions to give up, it stays at its epoch and its current
    assignment already leaves them out: an empty assignment then does not mean released."""
    answer = decode(ConsumerGroupDescribeResponse_v0, consumer_answer(consumer_group("orders", [
        consumer_member("Mx3v", "orders-0", epoch=epoch)], state="reconciling")))
    (found,) = read_consumer(answer, "orders").members
    assert found.partitions == (frozenset() if known else None)


@pytest.mark.parametrize(("group", "expected"), [
    (consumer_group("orders", [], state="empty"), Described()),
    (consumer_group("orders", [], state="dead"), Described(absent=True)),
    (consumer_group("orders", [], state="", error=GROUP_ID_NOT_FOUND,
                    message="Group orders is not a consumer group."), Described(absent=True)),
    (consumer_group("orders", [], state="", error=NOT_COORDINATOR,
                    message="This is not the correct coordinator."),
     Described(error="error 16: This is not the correct coordinator.", moved=True)),
    (consumer_group("orders", [], state="", error=LOADING), Described(error="error 14:",
                                                                        moved=True)),
    (consumer_group("orders", [], state="", error=DENIED, message="Not authorized."),
     Described(error="error 30: Not authorized.")),
    (consumer_group("other", []), Described(error="the answer does not describe group orders")),
], ids=["empty", "dead", "GROUP_ID_NOT_FOUND: none, or a classic group", "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS", "GROUP_AUTHORIZATION_FAILED", "another group"])
def test_what_a_consumer_group_describe_answer_says(group: bytes, expected: Described) -> None:
    assert read_consumer(decode(ConsumerGroupDescribeResponse_v0, consumer_answer(group)),
                         "orders") == expected


# -- which API first ------------------------------------------------------------------------------


def test_the_members_own_protocol_is_asked_first() -> None:
    assert describe_order("classic") == (CLASSIC_DESCRIBE, CONSUMER_DESCRIBE)
    assert describe_order("consumer") == (CONSUMER_DESCRIBE, CLASSIC_DESCRIBE)


@pytest.mark.parametrize(("versions", "classic", "consumer"), [
    ({15: (0, 6), 69: (0, 1)}, True, True),
    ({15: (1, 5)}, True, False),
    ({15: (0, 3), 69: (1, 1)}, False, False),
    ({}, False, False),
], ids=["Kafka 4", "before KIP-848", "too old, too new", "unknown"])
def test_an_api_is_asked_only_in_a_version_the_broker_takes(
        versions: dict[int, tuple[int, int]], classic: bool, consumer: bool) -> None:
    assert CLASSIC_DESCRIBE.taken_by(versions) is classic
    assert CONSUMER_DESCRIBE.taken_by(versions) is consumer


# -- the view, against a scripted client -----------------------------------------------------

KAFKA_4 = {10: (0, 6), 15: (0, 6), 68: (0, 1), 69: (0, 1)}
@dataclass
class Cluster:
    """Scripted answers by API key (10 FindCoordinator, 15 DescribeGroups, 69
    ConsumerGroupDescribe), the brokers' API versions, and what every client sent where."""

    answers: dict[int, list[Any]] = field(default_factory=dict)
    versions: dict[int, tuple[int, int]] = field(default_factory=lambda: dict(KAFKA_4))
    make_error: BaseException | None = None
    sent: list[tuple[int, int]] = field(default_factory=list)
    waits: list[int] = field(default_factory=list)
    clients: list[FakeClient] = field(default_factory=list)

    def make_client(self, **config: Any) -> FakeClient:
        if self.make_error is not None:
            raise self.make_error
        client = FakeClient(self, config)
        self.clients.append(client)
        return client

    def apis(self) -> list[int]:
        return [api for _, api in self.sent]


class FakeClient:
    def __init__(self, cluster: Cluster, config: dict[str, Any]) -> None:
        self.cluster = cluster
        self.config = config
        self.closed = False

    def least_loaded_node(self) -> int:
        return 0

    def get_api_versions(self) -> dict[int, tuple[int, int]]:
        return self.cluster.versions

    def await_ready(self, node: int, timeout_ms: int) -> bool:
        self.cluster.waits.append(timeout_ms)
        return True

    def send(self, node: int, request: Any) -> Future:
        self.cluster.sent.append((node, request.API_KEY))
        return scripted_send(self.cluster.answers.get(request.API_KEY) or [], request)

    def poll(self, timeout_ms: int, future: Future) -> None:
        assert timeout_ms >= 1

    def close(self) -> None:
        self.closed = True


def found_at(node: int, error_code: int = 0) -> SimpleNamespace:
    return SimpleNamespace(error_code=error_code, coordinator_id=node)


def classic(*groups: bytes) -> Any:
    return decode(DescribeGroupsResponse, classic_answer(*groups))


def consumer(*groups: bytes) -> Any:
    return decode(ConsumerGroupDescribeResponse_v0, consumer_answer(*groups))


CLASSIC_STABLE = classic(classic_group("orders", [
    classic_member("m-new", "orders-0", classic_assignment_bytes(0, ("a", [0, 1]))),
    classic_member("m-1", "orders-1", classic_assignment_bytes(0, ("a", [2]))),
]))
CLASSIC_DEAD = classic(classic_group("orders", [], state="Dead", protocol_type=""))
CONSUMER_STABLE = consumer(consumer_group("orders", [
    consumer_member("m-new", "orders-0", ("a", [0, 1])),
    consumer_member("m-1", "orders-1", ("a", [2])),
]))
CONSUMER_NOT_FOUND = consumer(consumer_group("orders", [], state="", error=GROUP_ID_NOT_FOUND))


def config(protocol: str, **consumer_props: Any) -> RuntimeConfig:
    raw = base()
    if protocol == "consumer":
        for key in ("session.timeout.ms", "heartbeat.interval.ms"):
            raw["consumer"].pop(key)
        raw["consumer"]["group.protocol"] = "consumer"
    raw["consumer"].update(consumer_props)
    return parse_config(raw, {"STATICFLEET_GROUP_INSTANCE_ID": "orders-0"})


def view(cluster: Cluster, protocol: str = "classic", **consumer_props: Any) -> GroupView:
    return GroupView(config(protocol, **consumer_props), make_client=cluster.make_client)


@pytest.mark.parametrize(("protocol", "answers", "asked"), [
    ("classic", {15: [CLASSIC_STABLE]}, [10, 15]),
    ("consumer", {69: [CONSUMER_STABLE]}, [10, 69]),
    ("classic", {15: [CLASSIC_DEAD], 69: [CONSUMER_STABLE]}, [10, 15, 69]),
    ("consumer", {69: [CONSUMER_NOT_FOUND], 15: [CLASSIC_STABLE]}, [10, 69, 15]),
], ids=["classic group, classic member", "consumer group, consumer member",
        "consumer group, classic member", "classic group, consumer member"])
def test_the_view_finds_the_group_by_either_api(protocol: str, answers: dict[int, list[Any]],
                                                asked: list[int]) -> None:
    cluster = Cluster(answers={10: [found_at(3)], **answers})
    v = view(cluster, protocol)
    assert v.held("orders-0", "m-new", timeout=2.0) == {("a", 0), ("a", 1)}
    assert cluster.apis() == asked
    assert [node for node, _ in cluster.sent[1:]] == [3] * (len(asked) - 1)  # the coordinator


@pytest.mark.parametrize(("instance", "member_id", "held", "taken"), [
    ("orders-0", "m-new", {("a", 0), ("a", 1)}, False),
    ("orders-0", "m-drained", {("a", 0), ("a", 1)}, True),
    ("orders-7", "m-7", set(), False),
], ids=["itself", "its id taken by a replacement", "not in the group"])
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_held_and_taken_by_another(protocol: str, instance: str, member_id: str,
                                   held: set[tuple[str, int]], taken: bool) -> None:
    described = CLASSIC_STABLE if protocol == "classic" else CONSUMER_STABLE
    cluster = Cluster(answers={10: [found_at(3)], 15: [described] * 2, 69: [described] * 2})
    v = view(cluster, protocol)
    assert v.held(instance, member_id, timeout=2.0) == held
    assert v.taken_by_another(instance, member_id, timeout=2.0) is taken
    assert cluster.apis().count(10) == 1, "the coordinator is found once and kept"
    assert len(cluster.clients) == 1 and not cluster.clients[0].closed


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_no_api_knows_is_no_answer(protocol: str) -> None:
    """A coordinator that has just taken the group over says so until it loaded the group
    (seen on Kafka 4.1 after a kill): not "nobody holds anything"."""
    cluster = Cluster(answers={10: [found_at(3)], 15: [CLASSIC_DEAD] * 2,
                               69: [CONSUMER_NOT_FOUND] * 2})
    v = view(cluster, protocol)
    assert v.held("orders-0", "m-0", timeout=2.0) is None
    assert v.taken_by_another("orders-0", "m-0", timeout=2.0) is None
    assert sorted(cluster.apis()) == [10, 15, 15, 69, 69]


def test_a_broker_without_consumer_groups_is_not_asked_for_one() -> None:
    cluster = Cluster(answers={10: [found_at(3)], 15: [CLASSIC_DEAD]}, versions={15: (0, 5)})
    assert view(cluster).held("orders-0", "m-0", timeout=2.0) is None
    assert cluster.apis() == [10, 15]


@pytest.mark.parametrize(("protocol", "described"), [
    ("classic", classic(classic_group("orders", [
        classic_member("m-new", "orders-0", b""),
        classic_member("m-1", "orders-1", b"")], state="PreparingRebalance"))),
    ("consumer", consumer(consumer_group("orders", [
        consumer_member("m-new", "orders-0", epoch=ASSIGNMENT_EPOCH - 1),
        consumer_member("m-1", "orders-1", ("a", [2]))], state="reconciling"))),
], ids=["classic, rebalancing", "consumer, revocation unacknowledged"])
def test_partitions_not_known_now_are_no_answer_but_who_is_in_is(
        protocol: str, described: Any) -> None:
    cluster = Cluster(answers={10: [found_at(3)], 15: [described] * 3, 69: [described] * 3})
    v = view(cluster, protocol)
    assert v.held("orders-0", "m-new", timeout=2.0) is None
    assert v.taken_by_another("orders-0", "m-drained", timeout=2.0) is True
    assert v.held("orders-7", "m-7", timeout=2.0) == set()  # not listed: holds nothing


def test_a_broker_without_describe_groups_v5_gives_no_answer() -> None:
    """Before v4 (Kafka 2.4, with v5) the answer has no instance ids, and the view cannot say
    who holds what: unknown."""
    cluster = Cluster(answers={10: [found_at(3)]}, versions={15: (0, 3), 69: (0, 0)})
    assert view(cluster).held("orders-0", "m-0", timeout=2.0) is None
    assert cluster.apis() == [10]


@pytest.mark.parametrize("error", [NOT_COORDINATOR, LOADING, NOT_AVAILABLE])
def test_a_moving_coordinator_is_no_answer_and_is_looked_up_again(error: int) -> None:
    moving = classic(classic_group("orders", [], state="", error=error))
    cluster = Cluster(answers={10: [found_at(3), found_at(5)], 15: [moving, CLASSIC_STABLE]})
    v = view(cluster)
    assert v.held("orders-0", "m-new", timeout=2.0) is None
    assert v.held("orders-0", "m-new", timeout=2.0) == {("a", 0), ("a", 1)}
    assert cluster.sent == [(0, 10), (3, 15), (0, 10), (5, 15)]
    assert len(cluster.clients) == 1, "an answer keeps the connection"


def test_a_refusal_is_no_answer() -> None:
    denied = consumer(consumer_group("orders", [], state="", error=DENIED))
    cluster = Cluster(answers={10: [found_at(3)], 69: [denied]})
    assert view(cluster, "consumer").taken_by_another("orders-0", "m-0", timeout=2.0) is None
    assert cluster.apis() == [10, 69], "the other API is not asked after a refusal"


@pytest.mark.parametrize("failure", [
    {10: [KafkaConnectionError("socket disconnected"), found_at(3)]},
    {10: [found_at(-1, error_code=15), found_at(3)]},
    {10: [NEVER_ANSWERED, found_at(3)]},
    {10: [found_at(3), found_at(3)], 15: [KafkaConnectionError("reset"), CLASSIC_STABLE]},
    {10: [found_at(3), found_at(3)], 15: [NEVER_ANSWERED, CLASSIC_STABLE]},
    {10: [found_at(3), found_at(3)], 15: [RuntimeError("unforeseen"), CLASSIC_STABLE]},
    {10: [found_at(3), found_at(3)], 15: [SimpleNamespace(groups=None), CLASSIC_STABLE]},
], ids=["lookup disconnected", "lookup: COORDINATOR_NOT_AVAILABLE", "lookup unanswered",
        "describe disconnected", "describe unanswered", "any other error",
        "an answer that makes no sense"])
def test_a_failure_is_no_answer_and_the_next_question_starts_afresh(
        failure: dict[int, list[Any]]) -> None:
    cluster = Cluster(answers={15: [CLASSIC_STABLE], **failure})
    v = view(cluster)
    assert v.held("orders-0", "m-new", timeout=2.0) is None
    assert v.held("orders-0", "m-new", timeout=2.0) == {("a", 0), ("a", 1)}
    assert len(cluster.clients) == 2 and cluster.clients[0].closed


def test_no_broker_reachable_is_no_answer() -> None:
    cluster = Cluster(make_error=KafkaConnectionError("NoBrokersAvailable"))
    v = view(cluster)
    assert v.held("orders-0", "m-0", timeout=2.0) is None
    assert v.taken_by_another("orders-0", "m-0", timeout=2.0) is None


def test_each_question_waits_no_longer_than_its_timeout() -> None:
    cluster = Cluster(answers={10: [found_at(3)], 15: [CLASSIC_STABLE]})
    view(cluster).held("orders-0", "m-new", timeout=0.7)
    assert cluster.clients[0].config["api_version_auto_timeout_ms"] <= 700
    assert cluster.waits and max(cluster.waits) <= 700


@pytest.mark.parametrize("props", [
    {"security.protocol": "SSL", "ssl.ca.pem": "not a PEM"},
    {"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
    {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"},
], ids=["ssl.SSLError", "OSError", "settings kafka-python cannot take"])
def test_settings_that_do_not_load_give_no_answers_and_no_error(
        props: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster(answers={10: [found_at(3)], 15: [CLASSIC_STABLE]})
    with caplog.at_level(logging.WARNING, logger="consumer_runtime"):
        v = view(cluster, **props)
        assert v.held("orders-0", "m-0", timeout=2.0) is None
        assert v.taken_by_another("orders-0", "m-0", timeout=2.0) is None
        v.close()
    assert cluster.clients == []
    assert [r.levelno for r in caplog.records] == [logging.WARNING]  # said once, as made


def test_close_closes_the_connection_and_so_does_a_forgotten_view() -> None:
    cluster = Cluster(answers={10: [found_at(3)] * 2, 15: [CLASSIC_STABLE] * 2})
    v = view(cluster)
    v.held("orders-0", "m-new", timeout=2.0)
    v.close()
    assert cluster.clients[0].closed
    v.close()  # nothing left to close
    forgotten = view(cluster)
    forgotten.held("orders-0", "m-new", timeout=2.0)
    del forgotten
    gc.collect()
    assert cluster.clients[1].closed


# -- the member makes no librdkafka admin request (librdkafka#4605) ------------------------------


def test_no_runtime_module_uses_librdkafkas_admin_client() -> None:
    """librdkafka 2.16 can abort the process when an admin request loses its coordinator: the
    member asks the coordinator through kafka-python only (GroupView, StaticLeave)."""
    offenders = []
    for path in sorted(Path(consumer_runtime.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n.startswith("confluent_kafka.admin") or n.endswith(".AdminClient")
                   for n in names):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
