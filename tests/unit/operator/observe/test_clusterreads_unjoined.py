"""A classic group its new coordinator describes without the members it had (Empty, no
protocol type) is no answer for a while, not a group whose members all left: seen on Kafka 4.1
under load, about 8 s after the coordinator's kill, 80 ms before the new one logged "Loaded
classic group ... with 1 members"."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from staticfleet.decisions.snapshot import GroupMemberView, GroupView
from staticfleet.observe import clusteranswers as answers
from staticfleet.observe.clusterreads import VANISHED_S, ClusterReader, Registration, _Round

pytestmark = pytest.mark.unit


def classic(state: str, protocol_type: str, members: int) -> Any:
    rows: list[Any] = [(f"m-{i}", f"g-{i}", "client", "/10.0.0.1", b"", b"", {})
                       for i in range(members)]
    return (0, "g", state, protocol_type, "range" if members else "", rows, -2147483648, {})


@pytest.mark.parametrize(("state", "protocol_type", "members", "unjoined"), [
    ("Empty", "", 0, True),          # offsets only, or not loaded yet
    ("Empty", "consumer", 0, False),  # every member left: the type stays
    ("Stable", "consumer", 1, False),
    ("PreparingRebalance", "consumer", 1, False),
])
def test_which_classic_answers_tell_of_no_consumer_ever(
        state: str, protocol_type: str, members: int, unjoined: bool) -> None:
    outcome = answers.classic_outcome(classic(state, protocol_type, members))
    assert outcome.view is not None and outcome.view.state == state
    assert outcome.unjoined is unjoined


def reader() -> ClusterReader:
    """A reader without a client: only what `_settle_describe` uses."""
    r = ClusterReader.__new__(ClusterReader)
    r.lock = threading.Lock()
    r.registered = {"g": (Registration("g"), 0.0)}
    r.coordinators, r.kinds, r.vanished, r.joined = {"g": 1}, {}, {}, set()
    r.described = {}
    return r


def settle(r: ClusterReader, outcome: answers.Outcome, now: float) -> answers.Outcome:
    r._settle_describe("g", outcome, now, _Round(describe={"g": ["classic", "consumer"]}))
    return r.described["g"].outcome


def test_a_group_with_members_that_reads_unjoined_is_no_answer_until_it_lasts() -> None:
    r = reader()
    member = GroupMemberView(member_id="m-0", instance_id="g-0", client_id="c", host="h",
                             partitions=())
    with_member = answers.Outcome(GroupView("Stable", "classic", (member,)))
    unjoined = answers.Outcome(GroupView("Empty", "classic"), unjoined=True)
    assert settle(r, with_member, 0.0).view is not None
    said = settle(r, unjoined, 10.0)
    assert said.view is None and said.code < 0 and "loading" in said.text
    assert settle(r, with_member, 12.0).view == with_member.view  # the loaded group
    assert settle(r, unjoined, 20.0).view is None
    # still so after VANISHED_S: it is what the broker says
    assert settle(r, unjoined, 20.0 + VANISHED_S).view == GroupView("Empty", "classic")


def test_a_group_that_never_had_members_reads_empty_at_once() -> None:
    r = reader()
    unjoined = answers.Outcome(GroupView("Empty", "classic"), unjoined=True)
    assert settle(r, unjoined, 0.0).view == GroupView("Empty", "classic")
    # and one whose members all left (its type stays): Empty, no members, at once
    left = answers.Outcome(GroupView("Empty", "classic"))
    assert settle(r, left, 1.0).view == GroupView("Empty", "classic")
