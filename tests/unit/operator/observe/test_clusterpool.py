"""When a pass takes a group's describe from its cluster's last read and when it reads the group
again now (`observe.clusterpool`): a table over the answer's age, its state and whether members
are in flight. The reads themselves run against real brokers (tests/integration/
test_cluster_reads.py)."""

from __future__ import annotations

import pytest

from staticfleet.decisions.snapshot import GroupView
from staticfleet.observe import clusterheld, clusterpool, lagreads
from staticfleet.observe.clusteranswers import Outcome, no_answer
from staticfleet.observe.clusterheld import Described, GroupRead

NOW = 1000.0
INTERVAL = 10.0


def held(age: float | None, outcome: Outcome) -> GroupRead:
    described = None if age is None else Described(NOW - age, outcome)
    return GroupRead(described, None, {}, None)


STABLE = Outcome(GroupView("Stable", "classic"))
REBALANCING = Outcome(GroupView("PreparingRebalance", "classic"))


@pytest.mark.parametrize(("age", "outcome", "in_flight", "serves"), [
    (None, STABLE, False, False),
    (0.0, STABLE, False, True),
    (9.0, STABLE, False, True),
    (10.0, STABLE, False, False),
    (3.0, STABLE, True, False),
    (1.0, STABLE, True, True),
    (3.0, REBALANCING, False, False),
    (1.0, REBALANCING, False, True),
    (3.0, Outcome(GroupView("Dead", "consumer")), False, True),
    (0.0, no_answer("broker 2 refused the connection"), False, True),
    (1.0, no_answer("broker 2 refused the connection"), False, False),
], ids=["never read", "read by this pass", "an interval not over", "an interval old",
        "members in flight", "members in flight, fresh", "a group changing",
        "a group changing, fresh", "a group not made yet", "no answer in this pass's read",
        "no answer before"])
def test_a_groups_describe_serves_the_pass_or_is_read_again(
        age: float | None, outcome: Outcome, in_flight: bool, serves: bool) -> None:
    age_s = clusterpool.describe_age_s(in_flight, INTERVAL)
    assert clusterpool.serves(held(age, outcome), NOW, age_s) is serves


def test_members_in_flight_want_a_describe_as_fresh_as_a_rollout_does() -> None:
    assert clusterpool.describe_age_s(False, INTERVAL) == INTERVAL
    assert clusterpool.describe_age_s(True, INTERVAL) == clusterpool.FRESH_S
    assert clusterpool.describe_age_s(True, 1.0) == 1.0


def test_the_cluster_reads_ages_are_the_lag_reads_own() -> None:
    """Written twice (the observe layers keep the two modules apart): held to one value."""
    assert clusterpool.FRESH_S == lagreads.ROLLOUT_AGE_S
    assert clusterheld.OFFSETS_INTERVAL_S == lagreads.READ_INTERVAL_S
