"""What the per-cluster reads' answers say (`observe.clusteranswers`), from answers encoded and
decoded with the schemas the reads send (the wire kit's, `kafkawire.messages`, and
`observe.wire`'s): a table per request."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.coordinator.protocol import ConsumerProtocolMemberAssignment_v0

from kafkawire import messages
from staticfleet.decisions.snapshot import GroupMemberView, GroupView
from staticfleet.observe import clusteranswers as answers
from staticfleet.observe import wire

NOT_FOUND, LOADING, NOT_AVAILABLE, NOT_COORDINATOR, DENIED = 69, 14, 15, 16, 30


def decoded(request: Any, *values: Any) -> Any:
    """An answer to `request` as a broker's bytes decode: `values` encoded and decoded again."""
    tags = ({},) if request.FLEXIBLE_VERSION else ()
    response = request.RESPONSE_TYPE(*values, *tags)
    return request.RESPONSE_TYPE.decode(response.encode())


def assignment(*tps: tuple[str, int], version: int = 3) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, p in tps:
        by_topic.setdefault(topic, []).append(p)
    raw = ConsumerProtocolMemberAssignment_v0(version, sorted(by_topic.items()), b"")
    return bytes(raw.encode())


def classic(code: int, group: str, state: str, members: list[Any]) -> tuple[Any, ...]:
    return (code, group, state, "consumer", "range", members, -2147483648, {})


DESCRIBE_GROUPS = messages.DescribeGroups([], False, {})


def test_a_stable_classic_group_is_its_members_with_their_sorted_partitions() -> None:
    answer = decoded(DESCRIBE_GROUPS, 0, [classic(0, "g", "Stable", [
        ("m-1", "g-0", "c", "/10.0.0.1", b"", assignment(("t", 2), ("t", 0), ("a", 1)), {}),
        ("m-2", None, "c", "/10.0.0.2", b"", assignment(("t", 1), version=0), {})])])
    assert answers.described(answer) == {"g": answers.Outcome(GroupView("Stable", "classic", (
        GroupMemberView("m-1", "g-0", "c", "/10.0.0.1", (("a", 1), ("t", 0), ("t", 2))),
        GroupMemberView("m-2", None, "c", "/10.0.0.2", (("t", 1),)))))}


def test_a_classic_group_between_generations_shows_no_partitions() -> None:
    answer = decoded(DESCRIBE_GROUPS, 0, [classic(0, "g", "PreparingRebalance", [
        ("m-1", "g-0", "c", "/h", b"", b"", {}), ("m-2", "g-1", "c", "/h", b"", b"\x00", {})])])
    view = answers.described(answer)["g"].view
    assert view is not None and view.state == "PreparingRebalance"
    assert [m.partitions for m in view.members] == [(), ()]


@pytest.mark.parametrize(("code", "state", "elsewhere", "moving", "moved"), [
    (0, "Dead", True, False, False),
    (NOT_FOUND, "Dead", True, False, False),
    (NOT_COORDINATOR, "", False, True, True),
    (NOT_AVAILABLE, "", False, True, True),
    (LOADING, "", False, True, False),
    (DENIED, "", False, False, False),
], ids=["dead: none, or a consumer group", "GROUP_ID_NOT_FOUND", "NOT_COORDINATOR",
        "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS",
        "GROUP_AUTHORIZATION_FAILED"])
def test_a_classic_answer_without_members_says_why(code: int, state: str, elsewhere: bool,
                                                    moving: bool, moved: bool) -> None:
    outcome = answers.described(decoded(DESCRIBE_GROUPS, 0, [classic(code, "g", state, [])]))["g"]
    assert (outcome.view, outcome.elsewhere, outcome.moving, outcome.moved) == (
        None, elsewhere, moving, moved)
    assert (outcome.text != "") == (code != 0 and not elsewhere)


CONSUMER_DESCRIBE = messages.ConsumerGroupDescribe([], False, {})
TOPIC_ID = bytes(range(16))


def consumer_member(member_id: str, instance: str | None, owned: list[int],
                    target: list[int]) -> tuple[Any, ...]:
    def assigned(parts: list[int]) -> tuple[Any, ...]:
        return ([(TOPIC_ID, "t", parts, {})] if parts else [], {})
    return (member_id, instance, None, 5, "c", "/10.0.0.9", ["t"], None, assigned(owned),
            assigned(target), {})


def consumer(code: int, group: str, state: str, members: list[Any],
             message: str | None = None, epoch: int = 5) -> tuple[Any, ...]:
    return (code, message, group, state, epoch, 5, "uniform", members, -2147483648, {})


def test_a_consumer_group_is_its_members_with_their_current_assignment_and_its_epoch() -> None:
    answer = decoded(CONSUMER_DESCRIBE, 0, [consumer(0, "g", "stable", [
        consumer_member("m-1", "g-0", [3, 1], [3, 1]),
        consumer_member("m-2", "g-1", [], [0])], epoch=7)])
    assert answers.described(answer) == {"g": answers.Outcome(GroupView("Stable", "consumer", (
        GroupMemberView("m-1", "g-0", "c", "/10.0.0.9", (("t", 1), ("t", 3))),
        GroupMemberView("m-2", "g-1", "c", "/10.0.0.9", ())), epoch=7))}


@pytest.mark.parametrize(("code", "elsewhere", "moved"), [
    (NOT_FOUND, True, False), (NOT_COORDINATOR, False, True), (DENIED, False, False)])
def test_a_consumer_answer_without_members_says_why(code: int, elsewhere: bool,
                                                     moved: bool) -> None:
    answer = decoded(CONSUMER_DESCRIBE, 0, [consumer(code, "g", "Dead", [], "why")])
    outcome = answers.described(answer)["g"]
    assert (outcome.view, outcome.elsewhere, outcome.moved) == (None, elsewhere, moved)
    if not elsewhere:
        assert outcome.text.endswith(f"error {code}: why")


@pytest.mark.parametrize(("given", "classic", "consumer"), [
    ("Stable", "Stable", "Stable"), ("stable", "Stable", "Stable"), ("EMPTY", "Empty", "Empty"),
    ("CompletingRebalance", "CompletingRebalance", "Unknown"),
    ("Assigning", "Unknown", "Unknown"), ("reconciling", "Unknown", "Unknown"),
    (None, "Unknown", "Unknown")])
def test_states_are_spelled_as_the_per_group_reads_spell_them(
        given: str | None, classic: str, consumer: str) -> None:
    """librdkafka's spelling: a KIP-848 group that is Assigning or Reconciling is Unknown."""
    assert answers.state_name(given) == classic
    assert answers.state_name(given, answers.CONSUMER_STATES) == consumer


def test_a_reconciling_consumer_group_is_unknown_with_its_members() -> None:
    answer = decoded(CONSUMER_DESCRIBE, 0, [consumer(0, "g", "Reconciling", [
        consumer_member("m-1", "g-0", [0], [0, 1])])])
    view = answers.described(answer)["g"].view
    assert view is not None and view.state == "Unknown" and len(view.members) == 1


def test_coordinators_by_group_or_why_none() -> None:
    answer = decoded(messages.FindCoordinator(0, [], {}), 0, [
        ("a", 2, "b2", 9092, 0, None, {}), ("b", -1, "", -1, NOT_AVAILABLE, "no leader", {})])
    found = answers.coordinators(answer)
    assert found["a"] == (2, answers.Outcome())
    node, outcome = found["b"]
    assert node is None and outcome.moved and "no leader" in outcome.text


def test_committed_offsets_leave_out_errors_and_partitions_never_committed() -> None:
    answer = decoded(messages.OffsetFetch([], False, {}), 0, [
        ("a", [("t", [(0, 42, 3, "", 0, {}), (1, -1, -1, "", 0, {}), (2, 7, -1, None, 3, {})],
                {})], 0, {}),
        ("b", [], NOT_COORDINATOR, {}), ("c", [], 0, {})])
    told = answers.committed(answer)
    assert told["a"] == (answers.Outcome(), {("t", 0): 42})
    assert told["b"][0].moved and told["b"][1] == {}
    assert told["c"] == (answers.Outcome(), {})  # a group that committed nothing: an answer


def test_end_offsets_leave_out_partitions_with_an_error() -> None:
    answer = decoded(wire.ListOffsets(-1, 0, []), 0, [
        ("t", [(0, 0, -1, 120, 4), (1, 6, -1, -1, -1), (2, 0, -1, 0, 4)])])
    assert answers.end_offsets(answer) == {("t", 0): 120, ("t", 2): 0}


def test_topics_counts_leaders_and_missing() -> None:
    response = wire.Metadata.RESPONSE_TYPE(
        0, [(1, "h", 9092, None)], "c", 1, [
            (0, "t", False, [(0, 0, 1, 0, [1], [1], []), (0, 1, -1, 0, [1], [], [1])], set()),
            (3, "gone", False, [], set()), (29, "secret", False, [], set())], set())
    seen = answers.topics(wire.Metadata.RESPONSE_TYPE.decode(response.encode()))
    assert seen.counts == {"t": 2} and seen.missing == {"gone"} and seen.errors == {"secret": 29}
    assert seen.leaderless(["t"]) == {("t", 1)} and seen.leaderless(["other"]) == frozenset()
