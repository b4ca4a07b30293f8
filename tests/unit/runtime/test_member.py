"""The poll loop's lifecycle (consumer_runtime/member.py) without a broker: drain, hold, leave,
resubscribe, the exit of a drained member whose replacement holds its instance id, and what
/status says of a batch in flight.

`Member.run` runs as it does in a pod, on this thread, with a scripted consumer in place of
librdkafka's (`Scripted._new_consumer`) and a scripted broker view in place of `GroupView`
(`Scripted._group_view`). Each `consume()` call plays the next step of the script: the broker's
part (an assignment, records) or the operator's (a drain, a stop). Time is a `Clock` that moves
only when the loop waits: by a poll's timeout when the poll returns nothing, by `rest` while
the loop has nothing to do. The batch worker is the real thread pool, running `Handler`.
"""

from __future__ import annotations

import threading
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from consumer_runtime.leaving import BUSY_POLL_S, DRAIN_CHECK_S
from consumer_runtime.member import HANDOVER_POLL_S, Member
from consumer_runtime.records import Batch
from consumer_runtime.termination import (
    REPLACED_FILE,
    Replaced,
    read_replaced,
    replaced_path,
    write_replaced,
)
from member_contract import TERMINATION_MESSAGE_PATH_ENV
from tests.unit.runtime.memberworld import (
    INSTANCE,
    P0,
    P1,
    START,
    Msg,
    ScriptedConsumer,
    Step,
    World,
    assign,
    do,
    fetch,
    msgs,
    setup,
    status,
    stop,
    until,
    wall,
)

pytestmark = pytest.mark.unit


def first_batch_done() -> list[Step]:
    """In the group with two partitions, one batch of five records processed and committed."""
    return [assign(P0, P1), fetch(msgs(P0, range(0, 5))),
            until(lambda m: m.telemetry.batches_processed == 1 and m.inflight is None)]


# -- drain, hold, and the end of the hold: replaced, not replaced, no answer ---------------------

@pytest.mark.parametrize(
    ("hold_s", "taken", "replaced", "consumers", "resubscribes"), [
        (5.0, [True], True, 1, 0),
        (5.0, [None, None, True], True, 1, 0),
        (5.0, [False], False, 2, 1),
        (0.0, [True], True, 1, 0),
        (2.5, [None, False], False, 2, 1),
    ], ids=["replaced: exits", "no answer, then replaced: exits", "not replaced: back",
            "no hold: asks at once", "no answer, then not replaced: back"])
def test_a_drained_member_holds_then_exits_when_replaced_or_subscribes_again(
        hold_s: float, taken: list[bool | None], replaced: bool, consumers: int,
        resubscribes: int) -> None:
    """After the drain the consumer is closed and nothing is asked for the hold; then the
    broker's view decides: another member id holds the instance id -> the run ends with exit 0
    and no new consumer (a join would fence the replacement); nobody -> the same static member
    subscribes again, and its return is no rebalance; no answer -> asked again every
    DRAIN_CHECK_S."""
    answers: list[tuple[str | None, bool]] = []
    back = [assign(P0, P1), until(lambda m: m.joined), stop()]
    member, world, _ = setup([*first_batch_done(),
                              do(lambda m: answers.append(m.drain(hold_s, 0.0))), *back],
                             taken=taken)

    assert member.run() == 0

    closed = world.first("close")
    asks = [t for t, _ in world.asked]
    assert answers == [(None, False)], "the drain is taken; the loop carries it out"
    assert world.events[0][1] == "subscribe"
    assert world.whats().index("commit") < world.whats().index("close"), \
        "the batch before the drain is committed before the consumer closes"
    assert asks[0] == pytest.approx(closed + hold_s), "the group is asked once the hold is over"
    assert [b - a for a, b in pairwise(asks)] == \
        pytest.approx([DRAIN_CHECK_S] * (len(asks) - 1))
    assert not world.taken_answers, "every scripted answer was asked for"
    assert member.replaced is replaced
    assert len(world.consumers) == consumers
    assert [c.closed for c in world.consumers] == [True] * consumers
    st = status(member)
    assert st["drainResubscribes"] == resubscribes
    if replaced:
        assert st["state"] == "drained" and st["drainedAt"] is not None
        assert world.steps, "a replaced member polls no more"
        assert member.closed_at is not None and member.failure is None
    else:
        assert not world.steps
        assert st["drainedAt"] is None and st["rebalances"] == 0, \
            "a static member's return after a drain is not a rebalance"
        assert world.events[-2][1] == "assigned" and world.events[-2][2][0] == "member-2"


def test_a_drain_waits_for_the_batch_in_flight_and_commits_it_before_closing() -> None:
    """The drain pauses the partitions (not a pause for work), lets the running batch finish,
    commits it, and only then closes: the replacement starts after it."""
    seen: dict[str, Any] = {}
    answers: list[tuple[str | None, bool]] = []
    steps = [assign(P0), fetch(msgs(P0, range(0, 5))),
             until(lambda m: m.inflight is not None),
             do(lambda m: answers.append(m.drain(5.0, 0.0))),
             do(lambda m: seen.update(status(m))),
             do(lambda m: handler.release())]
    member, world, handler = setup(steps, taken=[True], gated=True)

    assert member.run() == 0

    whats = world.whats()
    assert whats.index("pause") < whats.index("commit") < whats.index("close")
    assert world.events[whats.index("commit")][2] == {P0: 5}
    assert answers == [(None, False)]
    assert seen["state"] == "draining" and seen["pausedWithWork"] is False, \
        "a drain's pause is not a pause for work"
    assert seen["batchInFlight"] is not None and seen["batchInFlight"]["records"] == 5
    st = status(member)
    assert st["recordsProcessed"] == 5 and st["batchInFlight"] is None
    assert st["committed"] == [] and st["assignment"] == [], "a drained member holds nothing"


def test_a_drain_processes_the_records_already_fetched_as_one_last_batch() -> None:
    """Records fetched and not yet handed out when the drain comes are processed and committed
    before the close, not left for the replacement to fetch again."""
    steps = [*first_batch_done(), fetch(msgs(P1, range(0, 3))),
             do(lambda m: m.drain(5.0, 0.0))]
    member, world, handler = setup(steps, taken=[True])

    assert member.run() == 0

    commits = [d for _, w, d in world.events if w == "commit"]
    assert handler.batches == [5, 3]
    assert commits == [{P0: 5}, {P1: 3}]
    assert world.whats()[-1] == "close"


def test_a_drain_asked_again_while_drained_answers_at_once_and_holds_from_then() -> None:
    """An operator that restarted sends its switchover again: the drained member answers at
    once with the drain it did (same drainedAt), and stays out for the new hold from then."""
    again: list[tuple[float, str | None, bool]] = []
    drained_at: list[float | None] = []

    def redrain(m: Member) -> None:
        drained_at.append(status(m)["drainedAt"])
        again.append((m.clock(), *m.drain(5.0, 0.0)))
        drained_at.append(status(m)["drainedAt"])

    def drain_then_again_in_4_s(m: Member) -> None:
        m.drain(5.0, 0.0)
        m.clock.at(m.clock() + 4.0, lambda: redrain(m))  # type: ignore[attr-defined]

    member, world, _ = setup([*first_batch_done(), do(drain_then_again_in_4_s)], taken=[True])

    assert member.run() == 0

    (asked_again, refused, drained), = again
    closed = world.first("close")
    assert closed < asked_again < closed + 5.0, "asked again during the first hold"
    assert (refused, drained) == (None, True), "answered at once: drained"
    assert drained_at[0] is not None and drained_at == [drained_at[0]] * 2
    assert world.asked[0][0] == pytest.approx(asked_again + 5.0), \
        "the hold runs from the second drain"


def test_a_stop_while_drained_ends_the_run_without_asking_the_group() -> None:
    member, world, _ = setup([*first_batch_done(), do(lambda m: m.drain(60.0, 0.0))])
    world.clock.at(START + 30.0, member.request_stop)

    assert member.run() == 0
    assert world.asked == [] and not member.replaced
    assert status(member)["state"] == "drained"


# -- leave ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("protocol", "gives_up"), [
    ("classic", "unsubscribe"), ("consumer", "subscribe"),
], ids=["classic: unsubscribe", "consumer: a subscription no topic matches"])
def test_a_leave_gives_the_partitions_up_waits_for_the_broker_then_stays_up(
        protocol: str, gives_up: str) -> None:
    """A leave finishes and commits the batch, gives the partitions up while still a member,
    asks the broker until it shows none of them, closes, and then stays up (exit 0 only at the
    stop): an exit would get the container restarted and the new process would join again."""
    steps = [*first_batch_done(), do(lambda m: m.request("leave"))]
    member, world, _ = setup(steps, held=[{P0}, None, set()], protocol=protocol)
    code: list[int] = []
    runner = threading.Thread(target=lambda: code.append(member.run()))
    runner.start()
    try:
        for _ in range(200):
            if status(member)["state"] == "left":
                break
            runner.join(0.01)
        runner.join(0.05)
        assert runner.is_alive(), "a member that left stays up until SIGTERM"
    finally:
        member.request_stop()
        runner.join(5)
    assert code == [0]

    whats = world.whats()
    assert whats.index("commit") < whats.index(gives_up, 1) < whats.index("revoked") \
        < whats.index("close")
    if protocol == "consumer":
        assert world.events[whats.index("subscribe", 1)][2] == ("member-1", ("^$",))
        assert member.leave_client.confirmed == ["member-1"]  # type: ignore[union-attr]
        assert status(member)["staticLeave"]["outcome"] == "left"
    assert [w for _, w in world.asked] == ["held"] * 3, "asked until the broker shows nothing"
    st = status(member)
    assert (st["state"], st["assignment"], st["memberId"]) == ("left", [], "")
    assert len(world.consumers) == 1


# -- what /status says of a batch: in flight, paused for work, the last poll ---------------------

def test_status_shows_the_batch_in_flight_and_the_pause_for_work_while_it_runs() -> None:
    """Two batches gathered while the first runs: the member pauses its partitions (its polls
    return nothing on purpose, so lastFetchAt stands still) and says so, with the batch in
    flight; lastPollAt moves with every poll. Once the batch is done all of it clears."""
    seen: list[dict[str, Any]] = []
    steps = [assign(P0), fetch(msgs(P0, range(0, 5))),
             until(lambda m: m.inflight is not None),
             fetch(msgs(P0, range(5, 15)), took=3.0),
             until(lambda m: m.paused_with_work),
             do(lambda m: seen.append(status(m))),
             fetch([], took=1.0),
             do(lambda m: seen.append(status(m))),
             do(lambda m: handler.release()),
             until(lambda m: m.telemetry.batches_processed == 3 and m.inflight is None),
             do(lambda m: seen.append(status(m))),
             stop()]
    member, world, handler = setup(steps, gated=True)

    assert member.run() == 0

    fetches = [t for t, w, _ in world.events if w == "fetched"]
    started, fetched = fetches[0], fetches[1]  # the first batch went out right after its fetch
    paused, later, done = seen
    assert paused["pausedWithWork"] is True
    assert paused["batchInFlight"] == {"startedAt": wall(started), "records": 5}
    assert paused["lastFetchAt"] == wall(fetched)
    assert later["lastFetchAt"] == paused["lastFetchAt"], "paused: the polls fetch nothing"
    assert later["lastPollAt"] > paused["lastPollAt"] >= paused["lastFetchAt"]
    assert later["batchInFlight"] == paused["batchInFlight"]
    assert done["pausedWithWork"] is False and done["batchInFlight"] is None
    assert done["recordsProcessed"] == 15
    assert [w for w in world.whats() if w in ("pause", "resume")] == ["pause", "resume"]


# -- the exit when replaced leaves word for a restart of the container ---------------------------

def test_a_replaced_record_is_found_by_a_restart_of_the_same_member_only(
        tmp_path: Path) -> None:
    env = {TERMINATION_MESSAGE_PATH_ENV: str(tmp_path / "termination-log")}
    record = Replaced(group_id="orders", instance_id=INSTANCE, drained_at=1_700_000_010.5,
                      closed_at=1_700_000_010.25, last_batch_at=1_700_000_009.0)
    assert read_replaced(env, "orders", INSTANCE) is None, "a first start"
    assert replaced_path(env) == tmp_path / REPLACED_FILE
    assert write_replaced(env, record)
    assert read_replaced(env, "orders", INSTANCE) == record
    assert read_replaced(env, "orders", "orders-1") is None
    assert read_replaced(env, "other", INSTANCE) is None
    assert read_replaced(env, "orders", None) is None
    (tmp_path / REPLACED_FILE).write_text('{"groupId": "orders"}')
    assert read_replaced(env, "orders", INSTANCE) is None, "not a record"


def test_a_replaced_record_that_cannot_be_written_says_so(tmp_path: Path) -> None:
    env = {TERMINATION_MESSAGE_PATH_ENV: str(tmp_path / "missing" / "termination-log")}
    record = Replaced("orders", INSTANCE, 1.0, 1.0, None)
    assert write_replaced(env, record) is False



# -- the next batch, prepared while the worker is busy -------------------------------------------

def revoke(*tps: tuple[str, int]) -> Step:
    """The broker takes `tps` away (an incremental revoke, inside this poll)."""
    def step(world: World, consumer: ScriptedConsumer) -> list[Msg]:
        consumer.assigned -= set(tps)
        world.log("revoked", sorted(tps))
        consumer.callbacks["revoke"](consumer, [TopicPartition(t, p) for t, p in tps])
        return []
    return step


def test_the_next_batch_is_prepared_while_the_worker_is_busy_and_handed_over_as_that_object(
        ) -> None:
    """Due while batch 1 runs, batch 2 is cut and given to `prepare` at once; the worker then
    gets that very object, and the commits stay in order, each after its batch."""
    prepared: list[tuple[int, Batch]] = []
    steps = [assign(P0, P1), fetch(msgs(P0, range(0, 5))),
             until(lambda m: m.inflight is not None),
             fetch(msgs(P1, range(0, 5))),
             until(lambda m: bool(prepared)),
             do(lambda m: handler.release()),
             until(lambda m: m.telemetry.batches_processed == 2 and m.inflight is None),
             stop()]
    member, world, handler = setup(steps, gated=True, prepare=lambda n, b: prepared.append((n, b)))

    assert member.run() == 0

    assert [(n, len(b)) for n, b in prepared] == [(2, 5)]
    assert handler.objects[1][0] == 2 and handler.objects[1][1] is prepared[0][1]
    commits = [d for _, w, d in world.events if w == "commit"]
    assert commits == [{P0: 5}, {P1: 5}]


def test_a_revoke_prepares_the_staged_batch_again_without_the_revoked_partition() -> None:
    """A staged batch loses the records of a revoked partition: `prepare` hears of the batch
    that will run (a new object), and no offset of the revoked partition is committed."""
    prepared: list[tuple[int, Batch]] = []
    steps = [assign(P0, P1), fetch(msgs(P0, range(0, 5))),
             until(lambda m: m.inflight is not None),
             fetch(msgs(P0, range(5, 8)) + msgs(P1, range(0, 2))),
             until(lambda m: bool(prepared)),
             revoke(P1),
             do(lambda m: handler.release()),
             until(lambda m: m.telemetry.batches_processed == 2 and m.inflight is None),
             stop()]
    member, world, handler = setup(steps, gated=True, prepare=lambda n, b: prepared.append((n, b)))

    assert member.run() == 0

    assert [(n, sorted(b.ranges)) for n, b in prepared] == [(2, [P0, P1]), (2, [P0])]
    assert handler.objects[1][1] is prepared[1][1]
    commits = [d for _, w, d in world.events if w == "commit"]
    assert commits == [{P0: 5}, {P0: 8}]


def test_while_the_next_batch_waits_for_the_worker_polls_come_back_within_the_handover_wait(
        ) -> None:
    """The worker's end is noticed within HANDOVER_POLL_S, not after a busy poll's wait."""
    marks: dict[str, int] = {}

    def mark(name: str) -> Step:
        def step(world: World, consumer: ScriptedConsumer) -> list[Msg]:
            marks[name] = world.calls
            return []
        return step

    steps = [assign(P0), fetch(msgs(P0, range(0, 5))),
             until(lambda m: m.inflight is not None),
             mark("before"), fetch(msgs(P0, range(5, 10))), mark("due"),
             *[do(lambda m: None)] * 5, do(lambda m: handler.release()),
             until(lambda m: m.telemetry.batches_processed == 2 and m.inflight is None),
             stop()]
    member, world, handler = setup(steps, gated=True)

    assert member.run() == 0

    timeouts = world.consumers[0].timeouts
    before = [t for n, t in timeouts if n <= marks["before"] and n > 2]
    waiting = [t for n, t in timeouts if marks["due"] <= n < marks["due"] + 6]
    assert before and max(before) == BUSY_POLL_S, "a batch in flight, nothing due: busy polls"
    assert len(waiting) == 6 and max(waiting) <= HANDOVER_POLL_S


def test_status_reports_the_generation_of_the_last_assignment() -> None:
    """Each assign's generation (librdkafka's, from the consumer's group metadata) is the one
    `/status` reports: the operator ties the credits of a classic group's count to it."""
    seen: list[dict[str, Any]] = []
    steps = [assign(P0), do(lambda m: seen.append(status(m))),
             assign(P1), do(lambda m: seen.append(status(m))), stop()]
    member, _, _ = setup(steps)

    assert member.run() == 0
    assert [(x["assigns"], x["generation"]) for x in seen] == [(1, 1), (2, 2)]
