"""The operator's requests to a member, against the real broker.

POST /leave: a member removed for good finishes its batch, commits, and gives its partitions up
at once, in both protocols (a static member's close() would leave them to the session timeout,
30 s here). POST /rejoin: after both members of a classic group restarted with a topic added,
the new topic's partitions belong to nobody (a static member's rejoin with new subscription
metadata does not rebalance a Stable group) until one member rejoins. Nothing is lost on the way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit.groups import owners, wait_owned
from staticfleet_dev.testkit.poll import wait_for
from tests.integration.runtime_spark_helpers import (
    RuntimeProcess,
    committed,
    high_watermarks,
    produce,
    read_all,
    running,
    runtime_config,
    wait_committed_to_end,
)
from tests.integration.support import kip848, records, set_group_timeouts, through
from tests.support import unique

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dump_broker_log_on_failure")]
SESSION_MS = 30000  # long, so a hand-over that waits for it cannot pass for a fast one
HANDOVER_LIMIT_S = 5.0


def post(member: RuntimeProcess, path: str) -> tuple[int, dict[str, Any]]:
    """The operator's request: with the member's token."""
    return member.post(path)


def batches_of_100(admin: AdminClient, bootstrap: str, group: str, topic: str, out: str,
                   protocol: str, spark: dict[str, Any] | None = None) -> dict[str, Any]:
    """A member's config: batches of 100, kafka sink to `out`, the session timeout SESSION_MS
    (for a KIP-848 group set on the broker); local Spark unless `spark` says otherwise."""
    config = runtime_config(bootstrap, group, topic, sink={"type": "kafka", "topic": out},
                            max_records=100, session_ms=SESSION_MS, spark=spark)
    if protocol == "consumer":
        config = kip848(config)
        set_group_timeouts(admin, group, SESSION_MS)
    return config


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_leave_hands_the_partitions_over_at_once_and_loses_nothing(
        protocol: str, kafka: KafkaBroker, kafka_admin: AdminClient,
        make_topic: Callable[..., str], tmp_path: Path,
        spark_connect: ConnectServer) -> None:
    topic, out = make_topic("in", 6), make_topic("out", 6)
    group = unique("g")
    # Batches of 100 over a backlog, so one is in flight when the leave comes. Its length adds
    # twice to the hand-over with the classic protocol (the leaver finishes its batch before it
    # leaves, the other member finishes its own before it rejoins): 1.5 s batches made it 5.0 s.
    config = batches_of_100(kafka_admin, kafka.bootstrap, group, topic, out, protocol,
                            through(spark_connect))
    produced = records(topic, 0, 600, 6)
    everything = {(topic, p) for p in range(6)}
    stay, go = f"{group}-0", f"{group}-1"
    with running(config, tmp_path / "stay.log", stay) as a, \
            running(config, tmp_path / "go.log", go) as b:
        # The records once each member holds its half: produced before, the member that
        # joined first processed all of them while the other started (seen in CI with two
        # pytest workers), and the other never had a batch to show. "Each" holds some: the
        # first member alone holding all six (the group's first generation, before the
        # second joined) also has every partition owned by one of the two (seen in CI: the
        # second member then found every offset committed by the first).
        wait_for("both members holding partitions",
                 lambda: set(owners(kafka_admin, group).values()) == {stay, go}, 400,
                 interval=0.1, describe=lambda: f"owners: {owners(kafka_admin, group)}")
        wait_owned(kafka_admin, group, everything, {stay, go}, 60)
        produce(kafka.bootstrap, topic, produced)
        b.wait_status(lambda s: len(s["assignment"]) == 3 and s["batchesProcessed"] > 0, 400,
                      "processing its half")
        more = records(topic, 600, 600, 6)
        produce(kafka.bootstrap, topic, more)  # so that a batch is in flight at the leave
        produced += more
        b.wait_status(lambda s: s["batchesProcessed"] > 1, 60, "at work on the backlog")

        asked = time.monotonic()
        assert post(b, "/leave") == (202, {"accepted": "leave"})
        again = post(b, "/leave")
        handover_s = wait_owned(kafka_admin, group, everything, {stay}, SESSION_MS / 1000 + 30)
        left = b.wait_status(lambda s: s["state"] == "left", 30, "out of the group")
        assert b.proc.poll() is None, "a member that left stays up until its pod is deleted"
        assert b.get("/readyz")[0] == 503
        rejoin = post(b, "/rejoin")

        last = records(topic, 1200, 300, 6)
        produce(kafka.bootstrap, topic, last)
        produced += last
        wait_committed_to_end(kafka.bootstrap, group, topic, 6, a, timeout=400)
        stopped = time.monotonic()
        code = b.terminate(timeout=10)
        stop_s = time.monotonic() - stopped
        b_log = b.text()
        assert a.status() is not None and a.terminate() == 0, a.tail()
    print(f"{protocol}: every partition owned by the remaining member {handover_s:.2f} s after "
          f"POST /leave (session timeout {SESSION_MS} ms); leave to left "
          f"{time.monotonic() - asked:.1f} s incl. the rest of the test")
    assert handover_s < HANDOVER_LIMIT_S, b_log
    assert again[0] == 409 and again[1]["refused"] == "leave", again
    assert rejoin[0] == 409 and rejoin[1]["refused"] == "rejoin", rejoin
    assert left["leaving"] is True and left["assignment"] == [] and left["memberId"] == ""
    assert code == 0 and stop_s < 5, b_log
    assert "left group" in b_log and "the broker shows no partitions" in b_log, b_log
    written = [m.value() for m in read_all(kafka.bootstrap, out, 6)]
    assert set(written) == {v for _, v, _ in produced}


def test_rejoin_assigns_a_topic_that_nobody_owns_after_a_restart_with_it(
        kafka: KafkaBroker, kafka_admin: AdminClient, make_topic: Callable[..., str],
        tmp_path: Path,
        spark_connect: ConnectServer) -> None:
    t1, t2, out = make_topic("t1", 4), make_topic("t2", 2), make_topic("out", 4)
    group = unique("g")
    one = runtime_config(kafka.bootstrap, group, t1, sink={"type": "kafka", "topic": out},
                         session_ms=SESSION_MS, spark=through(spark_connect))
    both = json.loads(json.dumps(one))
    both["topics"] = [t1, t2]
    produced = records(t1, 0, 400, 4) + records(t2, 0, 200, 2)
    produce(kafka.bootstrap, t1, records(t1, 0, 400, 4))
    produce(kafka.bootstrap, t2, records(t2, 0, 200, 2))
    ids = {f"{group}-0", f"{group}-1"}
    old = {(t1, p) for p in range(4)}
    new = {(t2, p) for p in range(2)}

    with running(one, tmp_path / "a1.log", f"{group}-0") as a, \
            running(one, tmp_path / "b1.log", f"{group}-1") as b:
        # Stable with both in it: stopped during a rebalance, the restart would rebalance too.
        for m in (a, b):
            m.wait_status(lambda s: len(s["assignment"]) == 2, 400, "holding half of t1")
        wait_owned(kafka_admin, group, old, ids, 60)
        assert set(owners(kafka_admin, group).values()) == ids
        assert a.terminate() == 0 and b.terminate() == 0
    # Both back within the session timeout, now subscribed to t2 as well.
    with running(both, tmp_path / "a2.log", f"{group}-0") as a, \
            running(both, tmp_path / "b2.log", f"{group}-1") as b:
        for m in (a, b):
            m.wait_status(lambda s: s["assigns"] > 0 and s["processingReady"], 400, "back")
        time.sleep(3)
        before = owners(kafka_admin, group)
        assert set(before) == old, f"expected t2 to belong to nobody: {before}"

        asked = time.monotonic()
        assert post(a, "/rejoin") == (202, {"accepted": "rejoin"})
        again = post(a, "/rejoin")
        rejoin_s = wait_owned(kafka_admin, group, old | new, ids, 60)
        status = a.wait_status(lambda s: s["rejoins"] == 1, 30, "counting the rejoin")
        wait_committed_to_end(kafka.bootstrap, group, t2, 2, a, timeout=400)
        wait_committed_to_end(kafka.bootstrap, group, t1, 4, a, timeout=400)
        codes = (a.terminate(), b.terminate())
    print(f"rejoin: every partition of t1 and t2 owned {rejoin_s:.2f} s after POST /rejoin "
          f"({time.monotonic() - asked:.1f} s incl. the rest of the test)")
    assert again[0] == 409 and again[1]["reason"] == "a rejoin is already under way", again
    assert status["leaving"] is False and status["state"] == "running"
    assert codes == (0, 0)
    written = [m.value() for m in read_all(kafka.bootstrap, out, 4)]
    assert set(written) == {v for _, v, _ in produced}


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_standby_stays_out_of_the_group_until_activated_then_takes_over_in_a_second(
        protocol: str, kafka: KafkaBroker, kafka_admin: AdminClient,
        make_topic: Callable[..., str], tmp_path: Path) -> None:
    """A warm handoff's two processes of one instance id: the standby warms Spark up while the
    old member processes undisturbed; after the old one closed, POST /activate puts the standby
    in the group with the same partitions, no rebalance, nothing lost."""
    topic, out = make_topic("in", 4), make_topic("out", 4)
    group = unique("g")
    config = batches_of_100(kafka_admin, kafka.bootstrap, group, topic, out, protocol)
    instance = f"{group}-0"
    everything = {(topic, p) for p in range(4)}
    produced = records(topic, 0, 400, 4)
    produce(kafka.bootstrap, topic, produced)
    with running(config, tmp_path / "old.log", instance) as old, \
            running(config, tmp_path / "new.log", instance, {"STATICFLEET_STANDBY": "true"}) as new:
        old.wait_status(lambda s: len(s["assignment"]) == 4 and s["batchesProcessed"] > 0, 400,
                        "processing")
        warm = new.wait_status(lambda s: s["standby"] == "ready", 400, "standby-ready")
        old_member = owners(kafka_admin, group)
        refused = [post(new, path) for path in ("/leave", "/rejoin")]
        assert new.get("/readyz")[0] == 503, "a standby is not Ready before it owns partitions"
        more = records(topic, 400, 400, 4)
        produce(kafka.bootstrap, topic, more)
        produced += more
        old.wait_status(lambda s: s["recordsProcessed"] >= 500, 120, "processing the rest")
        before = old.status() or {}
        assert old.terminate(timeout=30) == 0, old.tail()
        closed = time.time()
        activated = post(new, "/activate")
        again = post(new, "/activate")
        handoff_s = wait_owned(kafka_admin, group, everything, {instance}, SESSION_MS / 1000)
        serving = new.wait_status(lambda s: s["startupSeconds"]["firstAssignment"] is not None,
                                  60, "in the group")
        in_group_s = serving["processStart"] + serving["startupSeconds"]["firstAssignment"] - closed
        last = records(topic, 800, 200, 4)
        produce(kafka.bootstrap, topic, last)
        produced += last
        wait_committed_to_end(kafka.bootstrap, group, topic, 4, new, timeout=200)
        after = new.status() or {}
        assert new.terminate(timeout=30) == 0, new.tail()
    print(f"{protocol}: standby ready {warm['startupSeconds']['standbyReady']:.1f} s after its "
          f"start; old member closed -> standby in the group {in_group_s:.2f} s "
          f"(owner seen by the broker after {handoff_s:.2f} s)")
    # While the standby waited, the old member alone held the instance id and its partitions.
    assert warm["memberId"] == "" and warm["assignment"] == [] and warm["assigns"] == 0
    assert set(old_member) == everything and set(old_member.values()) == {instance}
    assert before["rebalances"] == 0, "the standby disturbed the old member"
    assert [r[0] for r in refused] == [409, 409], refused
    assert activated == (202, {"accepted": "activate"}) and again[0] == 409, (activated, again)
    # The same partitions, as a static member's return: no rebalance seen by the new process.
    assert after["standby"] is None and after["rebalances"] == 0 and after["assigns"] == 1
    assert {tuple(tp) for tp in after["assignment"]} == everything
    assert in_group_s < 3.0, new.tail()
    # Warmed up on a made-up record (not on an empty batch, which warms far less).
    assert "spark warm-up took" in new.text() and "warm-up of the transform" not in new.text()
    written = [m.value() for m in read_all(kafka.bootstrap, out, 4)]
    assert set(written) == {v for _, v, _ in produced}


def test_a_standby_stopped_before_activation_never_joins(
        kafka: KafkaBroker, kafka_admin: AdminClient, make_topic: Callable[..., str],
        tmp_path: Path) -> None:
    topic = make_topic("in", 2)
    group = unique("g")
    config = runtime_config(kafka.bootstrap, group, topic, sink={"type": "null"},
                            session_ms=SESSION_MS)
    with running(config, tmp_path / "standby.log", f"{group}-0",
                 {"STATICFLEET_STANDBY": "true"}) as standby:
        status = standby.wait_status(lambda s: s["standby"] == "ready", 400, "standby-ready")
        began = time.monotonic()
        code = standby.terminate(timeout=30)
        stop_s = time.monotonic() - began
    desc = kafka_admin.describe_consumer_groups([group])[group].result(timeout=10)
    assert status["state"] == "standby" and status["processingReady"] is True
    assert code == 0 and stop_s < 10, standby.tail()
    assert "stopped in standby, never in the group" in standby.text()
    assert list(desc.members) == [], "a standby that was never activated joined the group"


def test_a_drain_processes_the_records_already_fetched_before_it_closes(
        kafka: KafkaBroker, make_topic: Callable[..., str], spark_connect: ConnectServer,
        tmp_path: Path) -> None:
    """The drain's last batch holds what the member had fetched and not yet processed (here
    waiting for a 60 s `maxWaitMs`): processed and committed before the consumer closes, so the
    replacement starts where it ended instead of fetching those records and processing them in
    its own first batch (the warm handoff's processing gap). Connect: the subject is the
    member's loop, not its Spark."""
    topic, out = make_topic("in", 2), make_topic("out", 2)
    group = unique("g")
    config = runtime_config(kafka.bootstrap, group, topic, sink={"type": "kafka", "topic": out},
                            max_records=10000, max_wait_ms=60000,
                            spark=through(spark_connect))
    first, rest = records(topic, 0, 100, 2), records(topic, 100, 200, 2)
    # Right after the assignment the first batch does not wait (catching up): it takes what
    # was waiting on the partitions (`first`, produced before the member joins), as the first
    # fetch brought it (all of it, or one partition's part); whatever comes after it waits for
    # maxWaitMs. (Produced after the join, `first` could come after every partition's first
    # fetch had answered empty, which ends the catching up: CI saw its batch wait the 60 s.)
    produce(kafka.bootstrap, topic, first)
    exit_report = tmp_path / "member.exit"
    with running(config, tmp_path / "member.log", f"{group}-0",
                 {"STATICFLEET_TERMINATION_MESSAGE_PATH": str(exit_report)}) as member:
        member.wait_status(lambda s: len(s["assignment"]) == 2 and s["processingReady"], 300,
                           "in the group, Spark ready")
        member.wait_status(lambda s: s["recordsProcessed"] > 0, 60, "the catching-up batch")
        producing = time.time()
        produce(kafka.bootstrap, topic, rest)
        member.wait_status(lambda s: (s["lastFetchAt"] or 0) >= producing, 30,
                           "a fetch of the rest")
        time.sleep(2.0)  # librdkafka prefetches the lot; the loop moves it into the buffer
        fetched = member.status() or {}
        asked = time.time()
        code, answer = post(member, "/drain?holdMs=60000&waitMs=30000")
        answered = time.time()
        drained = member.status() or {}
        offsets = committed(kafka.bootstrap, group, topic, 2)
        assert member.terminate(timeout=30) == 0, member.tail()
    print(f"drain answered in {answered - asked:.3f} s; its last batch ended "
          f"{answer.get('drainedAt', 0) - (answer.get('lastBatchAt') or 0):.3f} s before the "
          f"close")
    assert fetched["recordsProcessed"] <= 100, "the rest did not wait for maxWaitMs"
    assert (code, answer["drained"]) == (200, True), answer
    assert drained["recordsProcessed"] == 300, (
        f"the drain left {300 - drained['recordsProcessed']} fetched records to the replacement")
    assert asked <= answer["lastBatchAt"] <= answer["drainedAt"] <= answered, answer
    assert offsets == high_watermarks(kafka.bootstrap, topic, 2), "not committed before the close"
    written = {m.value() for m in read_all(kafka.bootstrap, out, 2)}
    assert written == {v for _, v, _ in first + rest}
    # Stopped after the drain, its clean exit reports the drain's close and last batch again
    # (for an operator that restarted and missed the drain's answer).
    report = json.loads(exit_report.read_text())
    assert report["lastBatchAt"] == answer["lastBatchAt"], (report, answer)
    assert abs(report["closedAt"] - answer["drainedAt"]) < 0.01, (report, answer)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_drain_frees_the_instance_id_at_once_and_a_drained_member_left_alone_comes_back(
        protocol: str, kafka: KafkaBroker, kafka_admin: AdminClient,
        make_topic: Callable[..., str], tmp_path: Path,
        spark_connect: ConnectServer) -> None:
    """Issue 23's drain, then replace, in both protocols. 1. A drained member that nobody
    replaces (the operator died between the two calls) subscribes again by itself at the end
    of its hold, as the same static member: the broker forms no new generation. 2. Drained
    again, the standby is activated the moment the drain answers and owns every partition
    within a second or two; the drained process, past its hold, sees its instance id held by
    the replacement and exits cleanly (a join would fence it). 3. A restart of its container
    (same termination message file, as a pod's restart policy gives it) stays out of the group
    and answers a drain sent again at once with the same drainedAt. Nothing is lost."""
    topic, out = make_topic("in", 4), make_topic("out", 4)
    group = unique("g")
    config = batches_of_100(kafka_admin, kafka.bootstrap, group, topic, out, protocol,
                            through(spark_connect))
    instance = f"{group}-0"
    everything = {(topic, p) for p in range(4)}
    produced = records(topic, 0, 400, 4)
    produce(kafka.bootstrap, topic, produced)
    old_env = {"STATICFLEET_TERMINATION_MESSAGE_PATH": str(tmp_path / "old.exit")}
    with running(config, tmp_path / "old.log", instance, old_env) as old, \
            running(config, tmp_path / "new.log", instance, {"STATICFLEET_STANDBY": "true"}) as new:
        old.wait_status(lambda s: len(s["assignment"]) == 4 and s["recordsProcessed"] >= 400,
                        400, "processing")
        generations = kafka.generations(group)

        # 1. Drained, not replaced: back by itself after the hold (1.5 s).
        first = post(old, "/drain?holdMs=1500")
        drained = old.status() or {}
        more = records(topic, 400, 200, 4)
        produce(kafka.bootstrap, topic, more)
        produced += more
        back = old.wait_status(lambda s: s["drainResubscribes"] == 1 and len(s["assignment"]) == 4
                               and s["recordsProcessed"] >= 600, 60, "subscribed again")

        # 2. Drained, then replaced at once.
        new.wait_status(lambda s: s["standby"] == "ready", 400, "standby-ready")
        asked = time.time()
        second = post(old, "/drain?holdMs=1500")
        answered = time.time()
        activated = post(new, "/activate")
        handoff_s = wait_owned(kafka_admin, group, everything, {instance}, SESSION_MS / 1000)
        serving = new.wait_status(lambda s: s["startupSeconds"]["firstAssignment"] is not None,
                                  60, "in the group")
        in_group_s = (serving["processStart"] + serving["startupSeconds"]["firstAssignment"]
                      - answered)
        # Past its hold (1.5 s) the old process sees the replacement and exits by itself.
        old_code = old.proc.wait(30)
        exit_s = time.time() - answered
        exit_report = json.loads((tmp_path / "old.exit").read_text())

        # 3. Its container restarts: it stays out, and answers a drain sent again at once.
        with running(config, tmp_path / "restart.log", instance, old_env) as restart:
            restarted = restart.wait_status(lambda s: s["state"] == "drained", 60, "up")
            redrain = post(restart, "/drain?holdMs=1500")
            time.sleep(3.0)  # past that hold: it must not subscribe again
            restarted_later = restart.status() or {}
            assert restart.terminate(timeout=30) == 0, restart.tail()
        restart_report = json.loads((tmp_path / "old.exit").read_text())
        last = records(topic, 600, 200, 4)
        produce(kafka.bootstrap, topic, last)
        produced += last
        wait_committed_to_end(kafka.bootstrap, group, topic, 4, new, timeout=200)
        after = new.status() or {}
        assert new.terminate(timeout=30) == 0, new.tail()
    print(f"{protocol}: drain answered in {answered - asked:.3f} s; drain answer -> standby in "
          f"the group {in_group_s:.3f} s (owner seen by the broker after {handoff_s:.2f} s); "
          f"drained process exited by itself {exit_s:.2f} s after the drain answer")
    assert first[0] == 200 and first[1]["drained"] is True, first
    assert drained["state"] == "drained" and drained["assignment"] == [], drained
    assert back["drainedAt"] is None and back["state"] != "drained"
    assert back["rebalances"] == 0, "a static member's return counted as a rebalance"
    assert second[0] == 200 and second[1]["drained"] is True, second
    assert second[1]["drainedAt"] is not None and second[1]["lastBatchAt"] is not None
    assert second[1]["lastBatchAt"] <= second[1]["drainedAt"] <= answered, second
    # The KIP-848 drain confirmed its static leave itself (consumer_runtime/staticleave.py): the
    # coordinator answered at the first try. A classic static member sends no leave.
    leave = second[1]["staticLeave"]
    if protocol == "consumer":
        assert leave["outcome"] == "left" and leave["tries"] == 1, leave
    else:
        assert leave is None, leave
    assert activated == (202, {"accepted": "activate"}), activated
    # Past its hold the drained process saw the replacement hold its instance id: it exited
    # cleanly, reporting the drain's close, and a restart of its container stayed out.
    assert old_code == 0 and "held by another process" in old.text(), old.tail()
    assert exit_s < 20, old.tail()
    assert exit_report["lastBatchAt"] == second[1]["lastBatchAt"], exit_report
    assert abs(exit_report["closedAt"] - second[1]["drainedAt"]) < 0.5, exit_report
    assert (restarted["drainedAt"], restarted["lastBatchAt"]) == \
        (second[1]["drainedAt"], second[1]["lastBatchAt"]), restarted
    assert redrain[0] == 200 and redrain[1]["drainedAt"] == second[1]["drainedAt"], redrain
    assert restarted_later["state"] == "drained" and restarted_later["assignment"] == [], \
        restarted_later
    assert restarted_later["memberId"] == "" and restarted_later["rebalances"] == 0
    assert restart_report == exit_report, "its exit reports the same close"
    assert after["rebalances"] == 0 and {tuple(tp) for tp in after["assignment"]} == everything
    assert in_group_s < 3.0, new.tail()
    if protocol == "classic":
        assert kafka.generations(group) == generations, "a drain formed a new generation"
    written = [m.value() for m in read_all(kafka.bootstrap, out, 4)]
    assert set(written) == {v for _, v, _ in produced}
