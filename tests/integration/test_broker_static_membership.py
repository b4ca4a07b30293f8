"""Proof that the broker the tests use implements static membership (KIP-345) faithfully.

Three members on a 6-partition topic. A static member restarted well inside the session
timeout must cost no rebalance; the same restart under dynamic membership must cost one
(so the first assertion cannot pass vacuously); and a static member that stays away longer
than the session timeout must cost exactly one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.testkit.poll import wait_for
from staticfleet_dev.testkit.probe import ProbeMember, group_state
from tests.support import unique

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dump_broker_log_on_failure")]

SESSION_MS = 10_000


@pytest.fixture
def members() -> Iterator[list[ProbeMember]]:
    started: list[ProbeMember] = []
    yield started
    for m in started:
        m.kill()


def start_group(kafka: KafkaBroker, admin: AdminClient, topic: str, group: str,
                members: list[ProbeMember], *, static: bool, session_ms: int = SESSION_MS
                ) -> None:
    for i in range(3):
        args = [kafka.bootstrap, group, topic, str(session_ms)]
        if static:
            args.append(f"{group}-{i}")
        members.append(ProbeMember(args).start())
    wait_for("all three members assigned", lambda: all(m.assignment() for m in members), 60)
    wait_for("group Stable", lambda: group_state(admin, group) == "STABLE", 30)
    assert sorted(p for m in members for p in m.assignment() or []) == [
        [topic, p] for p in range(6)], "the three members must share all six partitions"


def restart(member: ProbeMember) -> tuple[ProbeMember, float]:
    """SIGTERM the member, start it again at once; return the new member and the gap."""
    stopped_at = time.monotonic()
    member.terminate()
    again = ProbeMember(member.args).start()
    return again, time.monotonic() - stopped_at


def test_static_member_restart_inside_session_timeout_causes_no_rebalance(
    kafka: KafkaBroker, kafka_admin: AdminClient, make_topic: Callable[..., str],
    members: list[ProbeMember],
) -> None:
    topic, group = make_topic("static", 6), unique("g-static")
    start_group(kafka, kafka_admin, topic, group, members, static=True)
    generations_before = kafka.generations(group)
    old_partitions = members[1].assignment()
    mark = time.time()

    again, gap = restart(members[1])
    members.append(again)
    wait_for("the restarted member to get its assignment", again.assignment, 30)
    time.sleep(3)  # leave time for a rebalance to show up in the other members

    assert gap * 1000 < SESSION_MS / 2, f"restart took {gap:.1f}s, not well inside the timeout"
    assert again.assignment() == old_partitions
    for other in (members[0], members[2]):
        assert other.events_since(mark) == [], f"a member saw {other.events_since(mark)}"
    assert kafka.generations(group) == generations_before, "the broker formed a new generation"
    assert group_state(kafka_admin, group) == "STABLE"


def test_dynamic_member_restart_causes_a_rebalance(
    kafka: KafkaBroker, kafka_admin: AdminClient, make_topic: Callable[..., str],
    members: list[ProbeMember],
) -> None:
    topic, group = make_topic("dynamic", 6), unique("g-dynamic")
    start_group(kafka, kafka_admin, topic, group, members, static=False)
    generations_before = kafka.generations(group)
    mark = time.time()

    again, _gap = restart(members[1])
    members.append(again)
    wait_for("the restarted member to get an assignment", again.assignment, 30)
    wait_for("the other members to see the rebalance",
             lambda: all(m.events_since(mark) for m in (members[0], members[2])), 30)

    for other in (members[0], members[2]):
        kinds = {e["event"] for e in other.events_since(mark)}
        assert {"revoke", "assign"} <= kinds
    new_generations = [g for g in kafka.generations(group) if g not in generations_before]
    assert new_generations, "dynamic membership must show a new generation in the broker log"


def test_static_member_away_longer_than_session_timeout_causes_one_rebalance(
    kafka: KafkaBroker, kafka_admin: AdminClient, make_topic: Callable[..., str],
    members: list[ProbeMember],
) -> None:
    session_ms = 4000
    topic, group = make_topic("away", 6), unique("g-away")
    start_group(kafka, kafka_admin, topic, group, members, static=True, session_ms=session_ms)
    generations_before = kafka.generations(group)
    mark = time.time()

    members[1].terminate()
    wait_for("the coordinator to expire the absent static member",
             lambda: len(kafka.generations(group)) > len(generations_before),
             session_ms / 1000 + 20)
    time.sleep(session_ms / 1000 + 2)  # long enough for a second rebalance, if any, to happen

    new_generations = kafka.generations(group)[len(generations_before):]
    assert len(new_generations) == 1, f"expected exactly one new generation, saw {new_generations}"
    remaining = sorted(p for m in (members[0], members[2]) for p in m.assignment() or [])
    assert remaining == [[topic, p] for p in range(6)], "the two others must take over all six"
    for other in (members[0], members[2]):
        assert other.events_since(mark), "the others must have been reassigned"
