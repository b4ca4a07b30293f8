"""The rebalance ledger through `plan.decide`: what a pass notes, the entries it writes to
`status.rebalanceLedger`, the Warnings it posts and the counts by cause it exports."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Plan
from staticfleet.decisions.names import MEMBER_CONTAINER
from staticfleet.decisions.plan import decide, without_nulls
from staticfleet.decisions.rebalance import causes as ca
from staticfleet.decisions.rebalance import ledger as lg
from staticfleet.decisions.rebalance.planned import explain_rebalances
from staticfleet.decisions.rollout.state import RolloutState
from staticfleet.decisions.snapshot import GroupMemberView, Problem
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from tests.unit.operator.snapshots import CG, body, ordinal_of, settled, snapshot
from tests.unit.operator.support import NOW, with_path

pytestmark = pytest.mark.unit

FOREIGN = GroupMemberView("rdkafka-7f3a", None, "rdkafka", "/10.0.0.9", ())
Status = dict[str, Any]


def one_pass(cg: dict[str, Any], pods: list[dict[str, Any]], status: Status, *,
             counter: int = 0, at_s: float = 0, extra: tuple[GroupMemberView, ...] = (),
             coordinator: int | None = None, epoch: int | None = None,
             member_ids: dict[int, str] | None = None, state: str | None = None,
             listed: bool = True) -> tuple[Plan, Status]:
    """A pass at `at_s` whose members' counters read `counter` and whose group lists `extra`
    members besides them (`member_ids`: members listed under another member id)."""
    ids = member_ids or {}
    statuses = {p["metadata"]["uid"]: {"memberId": ids.get(ordinal_of(p), f"m-{ordinal_of(p)}"),
                                       "rebalances": counter} for p in pods}
    snap = snapshot(cg, pods, previous=status, statuses=statuses, now_offset_s=at_s)
    assert snap.group is not None
    members = tuple(replace(m, member_id=ids.get(int(str(m.instance_id).rsplit("-", 1)[1]),
                                                 m.member_id))
                    for m in snap.group.members)
    snap = replace(snap, group=replace(snap.group, members=(members + extra) if listed else (),
                                       epoch=epoch, state=state or snap.group.state),
                   coordinator=coordinator)
    plan = decide(snap)
    return plan, without_nulls(dict(plan.status))


def recent(status: Status) -> list[dict[str, Any]]:
    return list(status[lg.KEY]["recent"])


def warnings(plan: Plan) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in plan.events if e.type == "Warning"]


def test_a_settled_group_has_an_empty_ledger_and_a_quiet_pass_writes_nothing() -> None:
    pods, status = settled(CG)
    assert status[lg.KEY] == {"recent": []}
    plan, after = one_pass(CG, pods, status, at_s=600)
    assert after == {**status, "lastReconciled": after["lastReconciled"]}
    assert plan.metrics.rebalance_causes == {}


def test_a_foreign_member_joining_then_leaving_is_the_cause_each_time() -> None:
    pods, status = settled(CG)
    # Its join is seen before the members' counters move: a sign, no entry yet.
    plan, status = one_pass(CG, pods, status, extra=(FOREIGN,), at_s=10)
    assert [s["sign"] for s in status[lg.KEY]["signs"]] == [ca.FOREIGN_JOINED]
    assert status[lg.KEY]["foreignMembers"] == [FOREIGN.member_id]
    assert recent(status) == [] and warnings(plan) == []
    # The counters move: the rebalance waits for what a read later may show, then it is the
    # foreign member's, and its sign is spent.
    plan, status = one_pass(CG, pods, status, extra=(FOREIGN,), counter=1, at_s=20)
    assert recent(status) == [] and len(status[lg.KEY]["pending"]) == 1
    plan, status = one_pass(CG, pods, status, extra=(FOREIGN,), counter=1,
                            at_s=20 + lg.GATHER_S)
    [entry] = recent(status)
    assert (entry["rebalance"], entry["cause"]) == (1, ca.FOREIGN_MEMBER)
    assert "rdkafka-7f3a joined the group" in entry["evidence"]
    assert "client id rdkafka" in entry["evidence"]
    assert "signs" not in status[lg.KEY]
    assert plan.metrics.rebalance_causes == {ca.FOREIGN_MEMBER: 1}
    [(_, message)] = [w for w in warnings(plan) if w[0] == c.FOREIGN_MEMBER]
    assert "rebalance 1" in message and "group.id orders" in message
    # It leaves: the next rebalance is its too.
    _, status = one_pass(CG, pods, status, counter=2, at_s=40)
    plan, status = one_pass(CG, pods, status, counter=2, at_s=40 + lg.GATHER_S)
    assert [(e["rebalance"], e["cause"]) for e in recent(status)] == [
        (1, ca.FOREIGN_MEMBER), (2, ca.FOREIGN_MEMBER)]
    assert "left the group" in recent(status)[-1]["evidence"]
    assert "foreignMembers" not in status[lg.KEY]
    assert c.FOREIGN_MEMBER in [w[0] for w in warnings(plan)]


def test_a_group_described_without_its_members_says_nobody_left() -> None:
    """A KIP-848 group reconciling reads as Unknown with its members; a describe that could
    not be made, as Unknown without any: nobody left the group then."""
    pods, status = settled(CG)
    _, status = one_pass(CG, pods, status, extra=(FOREIGN,), state="Unknown", at_s=10)
    assert [s["sign"] for s in status[lg.KEY]["signs"]] == [ca.FOREIGN_JOINED]
    _, status = one_pass(CG, pods, status, extra=(FOREIGN,), state="Unknown", listed=False,
                         at_s=20)
    assert [s["sign"] for s in status[lg.KEY]["signs"]] == [ca.FOREIGN_JOINED]
    assert status[lg.KEY]["foreignMembers"] == [FOREIGN.member_id]


def test_the_first_pass_takes_a_foreign_member_already_there_as_it_is() -> None:
    pods, status = settled(CG)
    status = {k: v for k, v in status.items() if k != lg.KEY}  # an operator before the ledger
    _, status = one_pass(CG, pods, status, extra=(FOREIGN,), at_s=10)
    assert status[lg.KEY] == {"recent": [], "foreignMembers": [FOREIGN.member_id]}


def test_a_rebalance_without_evidence_waits_for_it_then_is_unknown() -> None:
    pods, status = settled(CG)
    plan, status = one_pass(CG, pods, status, counter=1, at_s=10)
    assert status[lg.KEY]["pending"] == [{"time": "2026-01-01T12:00:10Z", "rebalance": 1}]
    assert recent(status) == [] and plan.metrics.rebalance_causes == {}
    assert plan.deadline_s is not None and plan.deadline_s <= lg.SETTLE_S
    assert c.REBALANCE_UNEXPLAINED not in [w[0] for w in warnings(plan)]
    plan, status = one_pass(CG, pods, status, counter=1, at_s=10 + lg.SETTLE_S - 1)
    assert len(status[lg.KEY]["pending"]) == 1
    plan, status = one_pass(CG, pods, status, counter=1, at_s=10 + lg.SETTLE_S)
    [entry] = recent(status)
    assert entry["cause"] == ca.UNKNOWN and "no rule found evidence" in entry["evidence"]
    assert "pending" not in status[lg.KEY]
    assert plan.metrics.rebalance_causes == {ca.UNKNOWN: 1}
    [(_, message)] = [w for w in warnings(plan) if w[0] == c.REBALANCE_UNEXPLAINED]
    assert "rebalance 1 (counted at 2026-01-01T12:00:10Z) has no known cause" in message


def test_evidence_seen_a_pass_after_the_rebalance_explains_it() -> None:
    pods, status = settled(CG)
    _, status = one_pass(CG, pods, status, coordinator=1, at_s=5)
    assert status[lg.KEY]["coordinator"] == 1
    _, status = one_pass(CG, pods, status, counter=1, coordinator=1, at_s=10)
    assert len(status[lg.KEY]["pending"]) == 1
    _, status = one_pass(CG, pods, status, counter=1, coordinator=2, at_s=20)
    [entry] = recent(status)
    assert entry["cause"] == ca.COORDINATOR_MOVE
    assert "from broker 1 to broker 2" in entry["evidence"]
    assert entry["time"] == "2026-01-01T12:00:10Z", "when it was counted"
    assert status[lg.KEY]["coordinator"] == 2


def test_a_coordinator_not_known_this_pass_is_no_move() -> None:
    pods, status = settled(CG)
    _, status = one_pass(CG, pods, status, coordinator=1, at_s=5)
    _, status = one_pass(CG, pods, status, coordinator=None, at_s=10)
    assert status[lg.KEY]["coordinator"] == 1 and "signs" not in status[lg.KEY]


def crashed(pod: dict[str, Any], finished_s_ago: float, code: int = 137) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    finished = c.rfc3339(NOW - timedelta(seconds=finished_s_ago))
    out["status"]["containerStatuses"] = [{
        "name": MEMBER_CONTAINER, "restartCount": 1, "state": {"running": {}},
        "lastState": {"terminated": {"exitCode": code, "reason": "Error",
                                     "finishedAt": finished}}}]
    return out


@pytest.mark.parametrize(("finished_s_ago", "cause"), [
    (50, ca.MEMBER_CRASH), (45 + lg.GRACE_S + 30, None)],
    ids=["within the session timeout and the grace", "long before"])
def test_a_member_container_that_was_killed_is_the_cause(finished_s_ago: float,
                                                         cause: str | None) -> None:
    pods, status = settled(CG)
    pods = [crashed(p, finished_s_ago) if ordinal_of(p) == 1 else p for p in pods]
    _, status = one_pass(CG, pods, status, counter=1, at_s=10)
    _, status = one_pass(CG, pods, status, counter=1, at_s=10 + lg.GATHER_S)
    if cause is None:
        assert recent(status) == [], "pending: no evidence"
        return
    [entry] = recent(status)
    assert entry["cause"] == cause
    assert entry["evidence"].startswith(
        "member 1 (pod orders-1) exited at 2026-01-01T11:59:10Z: killed by SIGKILL (exit code "
        "137)")


def test_a_member_back_under_a_new_member_id_unasked_timed_out() -> None:
    pods, status = settled(CG)
    _, status = one_pass(CG, pods, status, counter=1, member_ids={1: "m-1-again"}, at_s=10)
    _, status = one_pass(CG, pods, status, counter=1, member_ids={1: "m-1-again"}, at_s=20)
    [entry] = recent(status)
    assert entry["cause"] == ca.MEMBER_TIMEOUT
    assert "member 1 (instance id orders-1) joined again as member m-1-again" in entry["evidence"]


@pytest.mark.parametrize(("state", "said"), [
    (RolloutState(revision="abc", phase="Pending", started_at=NOW, members_restarted=(1,),
                  reason="restarts need a session timeout of 6595 ms"),
     "the rollout to revision abc (Pending) restarted members [1]: restarts need"),
    (RolloutState(revision="abc", phase="Paused", started_at=NOW, members_restarted=(0,)),
     "(Paused) restarted members [0]"),
    (RolloutState(revision="abc", phase="Stopped", started_at=NOW, finished_at=NOW),
     "ended (Stopped)"),
    (RolloutState(revision="abc", phase="Pending", reason="restarts need more"), None),
    (RolloutState(revision="abc", phase="Complete", started_at=NOW - timedelta(seconds=500),
                  finished_at=NOW - timedelta(seconds=400)), None),
], ids=["refused after a restart", "paused", "stopped", "refused before any", "long over"])
def test_a_rollout_under_way_or_just_ended_is_evidence(state: RolloutState,
                                                       said: str | None) -> None:
    """Seen in the e2e: a rollout refused (RestartUnsafe) after its first restart is Pending
    again; its restart's rebalances are its."""
    found = lg.rollout_evidence(state, NOW + timedelta(seconds=10), 135)
    assert (found is None) if said is None else (found is not None and said in found), found


def test_the_operators_scale_down_is_the_cause() -> None:
    pods, status = settled(CG)
    two = with_path(CG, "spec.replicas", 2)
    _, status = one_pass(two, pods, status, at_s=1)
    assert status["plannedRebalance"]["reason"] == "ScaleDown"
    for at_s in (5, 5 + lg.GATHER_S):
        _, status = one_pass(two, [p for p in pods if ordinal_of(p) < 2], status, counter=1,
                             at_s=at_s)
    [entry] = recent(status)
    assert entry["cause"] == ca.SCALE and "ScaleDown (members [2])" in entry["evidence"]


def test_a_pass_the_brokers_did_not_answer_is_a_sign_of_a_broker_restart() -> None:
    pods, status = settled(CG)
    snap = replace(snapshot(CG, pods, previous=status, now_offset_s=5), problem=Problem(
        c.COORDINATOR_MOVING, "describing group orders: the group's coordinator is moving"))
    stopped = without_nulls(dict(decide(snap).status))
    [sign] = stopped[lg.KEY]["signs"]
    assert sign["sign"] == ca.BROKERS_UNANSWERED and "CoordinatorMoving" in sign["evidence"]
    _, status = one_pass(CG, pods, stopped, counter=1, at_s=20)
    _, status = one_pass(CG, pods, status, counter=1, at_s=20 + lg.GATHER_S)
    assert [e["cause"] for e in recent(status)] == [ca.BROKER_RESTART]


def test_a_long_message_is_quoted_to_its_last_clause_that_fits() -> None:
    said = ("finding the coordinator of group orders: error 15: ; the group's coordinator is "
            "moving (a broker restarted or a leader election moved it); the members find it")
    assert lg.clipped(said, 200) == said
    assert lg.clipped(said, 120) == "finding the coordinator of group orders: error 15: "
    assert lg.clipped("x" * 50, 20) == "x" * 20


def test_evidence_left_from_an_earlier_change_waits_for_what_a_read_later_shows() -> None:
    """Seen in the e2e: the coordinator's broker killed while a broker restart's sign was still
    in its window; the group's rebalance was counted before a read found the new coordinator."""
    pods, status = settled(CG)
    _, status = one_pass(CG, pods, status, coordinator=1, at_s=5)
    snap = replace(snapshot(CG, pods, previous=status, now_offset_s=10), problem=Problem(
        c.KAFKA_UNREACHABLE, "no bootstrap server accepts a connection"))
    status = without_nulls(dict(decide(snap).status))
    _, status = one_pass(CG, pods, status, counter=1, coordinator=1, at_s=40)
    assert recent(status) == [], "the brokers' sign alone does not decide it at once"
    _, status = one_pass(CG, pods, status, counter=1, coordinator=2, at_s=45)
    _, status = one_pass(CG, pods, status, counter=1, coordinator=2, at_s=40 + lg.GATHER_S)
    [entry] = recent(status)
    assert entry["cause"] == ca.COORDINATOR_MOVE, entry


def test_a_dynamic_member_listed_under_its_member_id_has_not_left() -> None:
    """A dynamic member has no instance id in the broker's list: it is found by member id."""
    pods, status = settled(CG)
    snap = snapshot(CG, pods, previous=status, now_offset_s=10)
    assert snap.group is not None and snap.spec is not None
    dynamic = replace(snap.spec, dynamic_membership_for_testing=True)
    anonymous = tuple(replace(m, instance_id=None) for m in snap.group.members)
    seen = explain_rebalances(snap, snap.group, 45000)
    group = replace(snap.group, members=anonymous)
    assert lg.members_left(snap, dynamic, group, seen, RolloutState()) == []
    [sign] = lg.members_left(snap, dynamic, replace(group, members=anonymous[1:]), seen,
                             RolloutState())
    assert sign.says == "member 0 (pod orders-0) left the group (it was member m-0)"


def test_a_kip848_entry_quotes_the_group_epoch() -> None:
    cg = body(membership={"protocol": "consumer"})
    pods, status = settled(cg)
    plan, status = one_pass(cg, pods, status, counter=1, epoch=12, at_s=10)
    assert status[lg.KEY]["pending"][0]["epoch"] == 12
    plan, status = one_pass(cg, pods, status, counter=1, epoch=12, at_s=50)
    assert recent(status)[0]["epoch"] == 12
    assert "group epoch 12" in dict(warnings(plan))[c.REBALANCE_UNEXPLAINED]


def test_an_entry_counted_before_its_epoch_was_read_takes_the_first_epoch_past_the_last() -> None:
    """The members' counters are read each pass, the group's describe may be older: a rebalance
    counted from a describe that still shows the epoch before it (or none: a new group) takes
    the first epoch past it read while it waits; one that never moves past keeps its read."""
    cg = body(membership={"protocol": "consumer"})
    pods, status = settled(cg)
    _, status = one_pass(cg, pods, status, counter=1, epoch=None, at_s=10)
    assert "epoch" not in status[lg.KEY]["pending"][0]
    _, status = one_pass(cg, pods, status, counter=1, epoch=7, at_s=15)
    assert status[lg.KEY]["pending"][0]["epoch"] == 7
    _, status = one_pass(cg, pods, status, counter=1, epoch=8, at_s=50)
    assert recent(status)[0]["epoch"] == 7, "the first epoch read past the one before"
    # The next rebalance counted while the describe still shows 7: it takes 9 once read.
    _, status = one_pass(cg, pods, status, counter=2, epoch=7, at_s=60)
    assert status[lg.KEY]["pending"][0]["epoch"] == 7
    _, status = one_pass(cg, pods, status, counter=2, epoch=9, at_s=65)
    assert status[lg.KEY]["pending"][0]["epoch"] == 9
    # One counted from a fresh read keeps it, whatever is read later.
    _, status = one_pass(cg, pods, status, counter=3, epoch=10, at_s=70)
    _, status = one_pass(cg, pods, status, counter=3, epoch=11, at_s=75)
    assert [e.get("epoch") for e in status[lg.KEY]["pending"]] == [9, 10]


@pytest.mark.parametrize(("counted", "before", "read", "expected"), [
    (None, (), 4, 4),
    (None, (), None, None),
    (3, (3,), 4, 4),
    (3, (3,), 3, 3),
    (5, (3,), 6, 5),
    (2, (9,), 1, 2),
], ids=["none-read", "none-at-all", "stale-then-past", "stale-still", "fresh", "group-made-again"])
def test_which_entries_take_this_passes_epoch(counted: int | None, before: tuple[int, ...],
                                              read: int | None, expected: int | None) -> None:
    """An entry counted with epoch `counted` after rebalances of epochs `before`, in a pass
    that reads `read`: the epoch it has after."""
    earlier = tuple(lg.Entry(NOW - timedelta(seconds=60 - i), i + 1, e, cause="scale")
                    for i, e in enumerate(before))
    (got,) = lg.with_epochs((lg.Entry(NOW, len(earlier) + 1, counted),), earlier, read)
    assert got.epoch == expected


def test_rebalances_counted_in_one_pass_share_the_epoch_taken() -> None:
    two = (lg.Entry(NOW, 4, 3), lg.Entry(NOW, 5, 3))
    earlier = (lg.Entry(NOW - timedelta(seconds=30), 3, 3, cause="scale"),)
    assert [e.epoch for e in lg.with_epochs(two, earlier, 5)] == [5, 5]


def test_recent_keeps_the_last_ten_and_a_sign_that_is_not_consumed_explains_them_all() -> None:
    pods, status = settled(CG)
    _, status = one_pass(CG, pods, status, coordinator=1, at_s=5)
    _, status = one_pass(CG, pods, status, counter=12, coordinator=2, at_s=10)
    plan, status = one_pass(CG, pods, status, counter=12, coordinator=2, at_s=20)
    assert [e["rebalance"] for e in recent(status)] == list(range(3, 13))
    assert plan.metrics.rebalance_causes == {ca.COORDINATOR_MOVE: 12}


def test_the_ledger_reads_back_what_it_writes() -> None:
    ledger = lg.Ledger(
        recent=(lg.Entry(NOW, 3, 7, ca.SCALE, "asked"),),
        pending=(lg.Entry(NOW, 4), lg.Entry(NOW, 5, scale="planned", rollout="rolling")),
        signs=(ca.Sign(ca.MEMBER_LEFT, NOW, "member 1 left"),),
        foreign=("x",), coordinator=2)
    assert lg.Ledger.from_status(without_nulls(ledger.to_status())) == ledger


SPEC = ConsumerGroupSpec.from_body(CG)


@pytest.mark.parametrize(("instance", "client", "member_id", "mine"), [
    ("orders-0", "orders-0", "x", True),
    ("orders-12", "rdkafka", "x", True),
    (None, "orders-2", "x", True),  # dynamic membership: the pod's name as client id
    (None, "orders-2-4f9c1", "x", True),  # a warm replacement's pod
    (None, "rdkafka", "m-0", True),  # a member id one of our pods reports
    (None, "rdkafka", "x", False),
    ("orders-x", "orders-", "x", False),
    ("billing-0", "billing-0", "x", False),
])
def test_which_members_are_ours(instance: str | None, client: str, member_id: str,
                                mine: bool) -> None:
    member = GroupMemberView(member_id, instance, client, "h", ())
    assert lg.ours(member, SPEC, {"m-0"}) is mine


JOINED = ca.Sign(ca.FOREIGN_JOINED, NOW, "member a joined the group")
ALSO_JOINED = ca.Sign(ca.FOREIGN_JOINED, NOW + timedelta(seconds=1), "member b joined the group")


def entries_decided(entries: tuple[lg.Entry, ...], *signs: ca.Sign, at_s: float = 20
                    ) -> tuple[list[tuple[int, str | None, str]], tuple[ca.Sign, ...]]:
    ev = ca.Evidence(now=NOW + timedelta(seconds=at_s), window_s=100, signs=signs)
    decided, _, left = lg.decide(entries, ev)
    return [(e.rebalance, e.cause, e.evidence) for e in decided], left


def test_a_foreign_sign_explains_every_rebalance_counted_with_the_first_one() -> None:
    """A cooperative group rebalances twice for one join; the members' counters show both at
    once."""
    at = NOW + timedelta(seconds=5)
    decided, left = entries_decided((lg.Entry(at, 1), lg.Entry(at, 2)), JOINED)
    assert [cause for _, cause, _ in decided] == [ca.FOREIGN_MEMBER] * 2
    assert left == ()


def test_the_operators_record_when_it_was_counted_explains_a_rebalance() -> None:
    """Seen in the e2e: a new group's joins were counted as planned (Create), but the group
    was Ready by the time the entry was decided, and the planned joins no longer showed."""
    at = NOW + timedelta(seconds=5)
    decided, _ = entries_decided((lg.Entry(at, 1, scale="the operator's planned rebalance "
                                                      "Create (members [0, 1])"),
                                  lg.Entry(at, 2, rollout="the rollout restarts members [1]")))
    assert [(cause, said) for _, cause, said in decided] == [
        (ca.SCALE, "the operator's planned rebalance Create (members [0, 1])"),
        (ca.ROLLOUT, "the rollout restarts members [1]")]


def test_a_spent_foreign_sign_explains_no_rebalance_counted_in_a_later_pass() -> None:
    decided, left = entries_decided((lg.Entry(NOW + timedelta(seconds=5), 1),
                                     lg.Entry(NOW + timedelta(seconds=8), 2)), JOINED)
    assert [(n, cause) for n, cause, _ in decided] == [(1, ca.FOREIGN_MEMBER)]
    assert left == ()


def test_two_foreign_members_two_rebalances_each_its_own() -> None:
    at = NOW + timedelta(seconds=5)
    decided, left = entries_decided((lg.Entry(at, 1), lg.Entry(at, 2)), ALSO_JOINED, JOINED)
    assert [(cause, said.split(" joined")[0]) for _, cause, said in decided] == [
        (ca.FOREIGN_MEMBER, "member a"), (ca.FOREIGN_MEMBER, "member b")]
    assert left == ()


def test_evidence_goes_to_the_oldest_rebalance_waiting_and_the_ledger_stays_in_order() -> None:
    pods, status = settled(CG)
    _, status = one_pass(CG, pods, status, counter=1, at_s=10)
    _, status = one_pass(CG, pods, status, counter=2, extra=(FOREIGN,), at_s=20)
    assert [(e["rebalance"], e["cause"]) for e in recent(status)] == [(1, ca.FOREIGN_MEMBER)]
    assert [e["rebalance"] for e in status[lg.KEY]["pending"]] == [2]
    _, status = one_pass(CG, pods, status, counter=2, extra=(FOREIGN,), at_s=50)
    assert [(e["rebalance"], e["cause"]) for e in recent(status)] == [
        (1, ca.FOREIGN_MEMBER), (2, ca.UNKNOWN)]


def test_a_forming_groups_rebalance_with_a_member_past_its_session_is_a_warning() -> None:
    """A group not Ready (no rebalance planned) whose member 2 left the group while the
    operator asked nothing of it: its session ran out. The rebalance is no part of the group
    forming: the Warning UnexpectedRebalance, not the Normal `Rebalanced ... while forming`."""
    pods, status = settled(CG)
    status = with_path(status, "conditions", [
        {**cond, "status": "False"} if cond["type"] == c.READY else cond
        for cond in status["conditions"]])
    status.pop("plannedRebalance", None)
    snap = snapshot(CG, pods, previous=status, in_group=(0, 1), now_offset_s=10, statuses={
        p["metadata"]["uid"]: {"memberId": f"m-{ordinal_of(p)}", "rebalances": 1}
        for p in pods if ordinal_of(p) != 2})
    plan = decide(snap)
    said = [(e.type, e.reason, e.message) for e in plan.events
            if e.reason in (c.REBALANCED, c.UNEXPECTED_REBALANCE)]
    assert [(t, r) for t, r, _ in said] == [("Warning", c.UNEXPECTED_REBALANCE)], said
    assert "while forming, and a member was past its session timeout: member 2" in said[0][2]
    # Without a member gone, a forming group's rebalance stays the Normal Event.
    snap = snapshot(CG, pods, previous=status, now_offset_s=10, statuses={
        p["metadata"]["uid"]: {"memberId": f"m-{ordinal_of(p)}", "rebalances": 1}
        for p in pods})
    assert [(e.type, e.reason) for e in decide(snap).events
            if e.reason in (c.REBALANCED, c.UNEXPECTED_REBALANCE)] == [("Normal", c.REBALANCED)]
