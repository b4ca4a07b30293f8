"""Conditions and the status object, from observations."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from staticfleet.decisions import conditions as c
from staticfleet.decisions.members.observed import ObservedMember
from staticfleet.decisions.rollout.state import GroupObservation, RolloutState
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.status import build_status, derive_conditions
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from staticfleet.decisions.timeouts.measurements import measurements_from_status, record_restart
from tests.unit.operator.support import NOW, body

GROUP = ConsumerGroupSpec.from_body(body())
TIMEOUTS = EffectiveTimeouts(45000, 3000, 300000, sources={"sessionTimeoutMs": "default"})


def test_set_condition_keeps_transition_time_when_status_holds() -> None:
    first = c.set_condition([], c.READY, "False", c.MEMBERS_NOT_READY, "1/3", NOW, 1)
    later = NOW + timedelta(minutes=1)
    same = c.set_condition(first, c.READY, "False", c.MEMBERS_NOT_READY, "2/3", later, 2)
    assert same[0]["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    assert same[0]["message"] == "2/3" and same[0]["observedGeneration"] == 2
    flipped = c.set_condition(same, c.READY, "True", c.ALL_MEMBERS_READY, "3/3", later, 2)
    assert flipped[0]["lastTransitionTime"] == "2026-01-01T12:01:00Z"
    assert first[0]["message"] == "1/3"  # input untouched


def test_set_condition_appends_and_keeps_others() -> None:
    conds = c.set_condition([], c.READY, "True", c.ALL_MEMBERS_READY, "", NOW, 1)
    conds = c.set_condition(conds, c.DEGRADED, "False", c.AS_EXPECTED, "", NOW, 1)
    assert [x["type"] for x in conds] == [c.READY, c.DEGRADED]
    assert c.get_condition(conds, c.DEGRADED) is not None
    assert c.get_condition(conds, c.IDLE_MEMBERS) is None


def members(ready: int, total: int = 3) -> tuple[ObservedMember, ...]:
    return tuple(
        ObservedMember(
            o, revision="r", ready=o < ready, in_group=o < ready, assignment=(("orders", o),)
        )
        for o in range(total)
    )


CONDITIONS = [
    (
        "all ready",
        GroupObservation(members(3), "Stable"),
        RolloutState(phase="Complete"),
        6,
        None,
        {
            c.READY: ("True", c.ALL_MEMBERS_READY),
            c.PROGRESSING: ("False", c.ROLLOUT_COMPLETE),
            c.DEGRADED: ("False", c.AS_EXPECTED),
            c.ROLLOUT_AT_RISK: ("False", c.RESTARTS_ON_TIME),
            c.IDLE_MEMBERS: ("False", c.NO_IDLE_MEMBERS),
        },
    ),
    (
        "one missing",
        GroupObservation(members(2), "Stable"),
        RolloutState(phase="Rolling"),
        6,
        None,
        {c.READY: ("False", c.MEMBERS_NOT_READY), c.PROGRESSING: ("True", c.ROLLING)},
    ),
    (
        "rebalancing",
        GroupObservation(members(3), "PreparingRebalance"),
        RolloutState(),
        6,
        None,
        {c.READY: ("False", c.GROUP_NOT_STABLE), c.PROGRESSING: ("False", c.ROLLOUT_IDLE)},
    ),
    (
        "at risk",
        GroupObservation(members(2), "Stable"),
        RolloutState(phase="AtRisk", reason="late"),
        6,
        None,
        {c.ROLLOUT_AT_RISK: ("True", c.RESTART_RUNNING_LATE)},
    ),
    (
        "stopped",
        GroupObservation(members(3), "Stable"),
        RolloutState(phase="Stopped", reason="x"),
        6,
        None,
        {
            c.ROLLOUT_AT_RISK: ("True", c.SESSION_TIMEOUT_EXCEEDED),
            c.DEGRADED: ("True", c.ROLLOUT_STOPPED),
            c.PROGRESSING: ("False", c.ROLLOUT_STOPPED),
        },
    ),
    (
        "idle members",
        GroupObservation(members(3), "Stable"),
        RolloutState(),
        2,
        None,
        {c.IDLE_MEMBERS: ("True", c.MORE_MEMBERS_THAN_PARTITIONS)},
    ),
    (
        "partitions unknown",
        GroupObservation(members(3), "Unknown"),
        RolloutState(),
        None,
        None,
        {c.IDLE_MEMBERS: ("Unknown", c.PARTITIONS_UNKNOWN)},
    ),
    (
        "refused: restarts do not fit the timeout the members run with",
        GroupObservation(members(3), "Stable"),
        RolloutState(phase="Pending"),
        6,
        "restarts need a session timeout of 92000 ms but the members run with 45000 ms",
        {
            c.DEGRADED: ("True", c.RESTART_UNSAFE),
            c.PROGRESSING: ("False", c.ROLLOUT_REFUSED),
            c.ROLLOUT_AT_RISK: ("True", c.RESTART_UNSAFE),
        },
    ),
    (
        "paused",
        GroupObservation(members(3), "Stable"),
        RolloutState(phase="Paused"),
        6,
        None,
        {c.PROGRESSING: ("False", c.ROLLOUT_PAUSED)},
    ),
]


@pytest.mark.parametrize(
    ("what", "observed", "rollout", "partitions", "refusal", "expected"),
    CONDITIONS,
    ids=[x[0] for x in CONDITIONS],
)
def test_derive_conditions(what, observed, rollout, partitions, refusal, expected) -> None:
    conds = derive_conditions(
        [],
        group=GROUP,
        observed=observed,
        rollout=rollout,
        timeouts=TIMEOUTS,
        partitions=partitions,
        now=NOW,
        refusal=refusal,
    )
    # UnassignedPartitions and BrokerBoundsKnown come from `plan` (derive_conditions(extra=)).
    assert [x["type"] for x in conds] == list(c.CONDITION_TYPES[:5])
    for type_, (status, reason) in expected.items():
        cond = c.get_condition(conds, type_)
        assert cond is not None and (cond["status"], cond["reason"]) == (status, reason), cond


def test_refused_rollout_and_unsafe_restarts() -> None:
    unsafe = EffectiveTimeouts(
        60000, 3000, 300000, sources={}, restart_safe=False, needed_session_timeout_ms=90000
    )
    conds = derive_conditions(
        [],
        group=GROUP,
        observed=GroupObservation(members(3), "Stable"),
        rollout=RolloutState(phase="Pending"),
        timeouts=unsafe,
        partitions=6,
        now=NOW,
    )
    assert c.get_condition(conds, c.PROGRESSING)["reason"] == c.ROLLOUT_REFUSED  # type: ignore[index]
    assert c.get_condition(conds, c.DEGRADED)["reason"] == c.RESTART_UNSAFE  # type: ignore[index]


@pytest.mark.parametrize(("partitions", "ready"), [(2, "True"), (3, "False")])
def test_an_idle_member_counts_as_ready_only_when_members_outnumber_partitions(
    partitions: int, ready: str
) -> None:
    idle = ObservedMember(ordinal=2, revision="r", ready=True, in_group=False, member_id="m-2")
    observed = GroupObservation((*members(2, total=2), idle), "Stable")
    conds = derive_conditions([], group=GROUP, observed=observed, rollout=RolloutState(),
                              timeouts=TIMEOUTS, partitions=partitions, now=NOW)
    assert c.get_condition(conds, c.READY)["status"] == ready  # type: ignore[index]


def test_refused_rollout_is_a_rollout_at_risk_with_its_reason() -> None:
    unsafe = EffectiveTimeouts(
        6000, 2000, 300000, sources={}, restart_safe=False, needed_session_timeout_ms=18000
    )
    conds = derive_conditions(
        [], group=GROUP, observed=GroupObservation(members(3), "Stable"),
        rollout=RolloutState(phase="Pending", reason="restarts need a session timeout of 18000"),
        timeouts=unsafe, partitions=6, now=NOW)
    risk = c.get_condition(conds, c.ROLLOUT_AT_RISK)
    assert risk is not None and (risk["status"], risk["reason"]) == ("True", c.RESTART_UNSAFE)
    assert "18000" in risk["message"]


def test_build_status() -> None:
    observed = GroupObservation(
        (*members(2, total=2), ObservedMember(2, pod_exists=False)), "Stable", rebalances=4
    )
    rollout = RolloutState(revision="r", phase="Complete")
    status = build_status(
        group=GROUP,
        observed=observed,
        rollout=rollout,
        update_revision="r",
        current_revision="q",
        timeouts=TIMEOUTS,
        partitions=2,
        measurements={"restartSecondsMax": 3.0},
        conditions=[],
    )
    assert status["observedGeneration"] == 4
    assert (status["replicas"], status["readyReplicas"]) == (2, 2)
    assert status["selector"].startswith("app.kubernetes.io/instance=orders,")
    assert status["groupState"] == "Stable" and status["rebalances"] == 4
    assert status["currentRevision"] == "r" and status["updateRevision"] == "r"
    assert status["partitions"] == 2 and status["idleMembers"] == 1
    assert status["timeouts"]["sessionTimeoutMs"] == 45000
    assert status["rollout"]["phase"] == "Complete"
    assert status["members"][0] == {
        "ordinal": 0,
        "instanceId": "orders-0",
        "pod": "orders-0",
        "phase": "Unknown",
        "ready": True,
        "revision": "r",
        "assignedPartitions": ["orders-0"],
    }
    assert status["members"][2]["phase"] == "Missing"


def test_record_restart_keeps_the_recent_window() -> None:
    m: dict[str, Any] | None = None
    for s in [50.0, *[5.0] * 10]:
        m = record_restart(m, s)
    assert m is not None
    assert m["restartSamples"] == 11 and len(m["restartSecondsRecent"]) == 10
    assert m["restartSecondsMax"] == 5.0  # the slow one aged out
    parsed = measurements_from_status({**m, "batchSecondsMax": 2.5})
    assert parsed.slowest_restart_s == 5.0 and parsed.slowest_batch_s == 2.5


def test_a_topic_pattern_that_matches_no_topic_says_so() -> None:
    """Issue 46 acceptance (c): a group whose pattern matches no topic (here the catastrophic
    one, which RE2 matches at once) is told so in IdleMembers, not only "0 partitions"."""
    from staticfleet.decisions.status import _idle

    status, reason, message = _idle(2, 0, "([a-z._-]+)+X")
    assert (status, reason) == ("True", c.MORE_MEMBERS_THAN_PARTITIONS)
    assert "matches no topic" in message and "([a-z._-]+)+X" in message
    assert "matches no topic" not in _idle(2, 0)[2], "named topics: no pattern to blame"
    assert _idle(2, 4, "orders-.*")[0] == "False"
