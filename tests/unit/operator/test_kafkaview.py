"""What a pass takes from its cluster's batched reads and what it asks the group alone
(`staticfleet.kafkaview`): the routing only, with the group's own describe recorded instead
of sent (the reads themselves are tested against real brokers in
tests/integration/test_cluster_reads.py)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from kafkawire.messages import COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
from staticfleet import kafkaview
from staticfleet.decisions.snapshot import GroupView
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.observe import kafkaadmin, kafkareads
from staticfleet.observe.clusteranswers import Outcome, no_answer
from staticfleet.observe.clusterheld import Described, GroupRead

pytestmark = pytest.mark.unit

SPEC = ConsumerGroupSpec.from_body({
    "apiVersion": "staticfleet.io/v1alpha1", "kind": "ConsumerGroup",
    "metadata": {"name": "orders", "namespace": "ns", "generation": 1},
    "spec": {"replicas": 1, "kafka": {"bootstrapServers": "k:9092", "topics": ["orders"]},
             "template": {"image": "member:1"},
             "processing": {"transform": "m:f", "sink": {"type": "null"}}}})
VIEW = GroupView(state="Stable", protocol="range")
ALONE = GroupView(state="Empty", protocol="")


def held(outcome: Outcome | None) -> GroupRead:
    return GroupRead(described=None if outcome is None else Described(0.0, outcome),
                     committed=None, ends={}, topics=None)


@pytest.fixture
def asked_alone(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    asked: list[str] = []

    def describe(admin: Any, group_id: str, protocol: str) -> GroupView:
        asked.append(group_id)
        return ALONE

    monkeypatch.setattr(kafkareads, "describe_group", describe)
    return asked


def test_an_answer_of_the_clusters_read_is_taken_as_it_is(asked_alone: list[str]) -> None:
    admin = cast(kafkaadmin.Admin, object())
    for seen_before in (True, False):
        assert kafkaview.described(admin, SPEC, held(Outcome(view=VIEW)), seen_before) is VIEW
    assert asked_alone == []


@pytest.mark.parametrize("outcome", [
    None,  # not read yet
    Outcome(code=COORDINATOR_NOT_AVAILABLE, text="error 15"),  # a new group, offsets topic made
    Outcome(code=COORDINATOR_LOAD_IN_PROGRESS, text="error 14"),
    no_answer("no reply"),
], ids=["unread", "not-available", "loading", "no-answer"])
def test_a_new_group_without_an_answer_is_asked_alone_before_anything_is_said_moving(
        asked_alone: list[str], outcome: Outcome | None) -> None:
    """CI, once: a group created seconds after the broker started got COORDINATOR_NOT_AVAILABLE
    in its cluster's read and its pass was Degraded at once (Warning CoordinatorMoving). The
    group's own describe asks again with fresh lookups for a few seconds first, as every read
    did before the cluster's reads."""
    admin = cast(kafkaadmin.Admin, object())
    assert kafkaview.described(admin, SPEC, held(outcome), seen_before=False) is ALONE
    assert asked_alone == ["orders"]


@pytest.mark.parametrize("code", [COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS])
def test_a_known_groups_moving_coordinator_is_said_at_once_and_asks_nothing_more(
        asked_alone: list[str], code: int) -> None:
    """A coordinator outage costs the groups it coordinated no per-group requests (a few
    seconds of retries each, one child process per cluster): their passes go on Degraded."""
    admin = cast(kafkaadmin.Admin, type("A", (), {"bootstrap": "k:9092", "label": "k:9092"})())
    with pytest.raises(kafkaadmin.CoordinatorMoving, match="coordinator is moving"):
        kafkaview.described(admin, SPEC, held(Outcome(code=code, text="error")), True)
    assert asked_alone == []


def test_a_known_group_with_no_answer_at_all_is_asked_alone(asked_alone: list[str]) -> None:
    admin = cast(kafkaadmin.Admin, object())
    assert kafkaview.described(admin, SPEC, held(no_answer("no reply")), True) is ALONE
    assert asked_alone == ["orders"]


def test_a_group_its_coordinator_may_be_loading_is_not_asked_alone(
        asked_alone: list[str]) -> None:
    """Issue 46 item 10: the cluster's reads hold a group whose members vanished from one
    answer to the next as no answer for 30 s (its coordinator may be loading it), and the pass
    then asked the group alone, of the same coordinator, which described it Empty without its
    members: the rule was undone. Now the pass is CoordinatorMoving and asks nothing; a group
    never described before is still asked alone."""
    admin = cast(kafkaadmin.Admin, type("A", (), {"bootstrap": "k:9092", "label": "k:9092"})())
    loading = no_answer("its coordinator describes the group without the members it had",
                        loading=True)
    with pytest.raises(kafkaadmin.CoordinatorMoving, match="members it had"):
        kafkaview.described(admin, SPEC, held(loading), seen_before=True)
    assert asked_alone == []
    assert kafkaview.described(admin, SPEC, held(loading), seen_before=False) is ALONE
