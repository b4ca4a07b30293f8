"""A KIP-848 group's session timeout widened for a rollout and set back (`timeouts.widening`),
against the real broker:

1. The group configs the operator sets really change on the broker, and the coordinator holds
   a stopped static member to them: under the tuned 2 s a member that stops loses its partitions
   to the other member after its session; raised to 12 s (as a rollout's widening raises it,
   then one heartbeat interval waited) the same member is away three tuned timeouts and comes
   back to its own partitions, nothing moved; set back to 2 s, a member that stops is detected
   at 2 s again. The members are bare confluent-kafka static members (`testkit.probe`): the
   subject is the broker's session, not the member runtime.
2. The operator as a real process, with a KIP-848 group whose members are placeholders (no
   consumer: the subject is the group's configs): an operator that finds the group's session
   timeout widened on the broker with no rollout (one that stopped between raising it and
   writing its status) sets the tuned value back, says so in an Event and in
   `status.timeouts.widening`, and restarts no member.
3. The record before the act, and nothing left behind (issue 46, items 5 and 7): an operator
   killed between writing a rollout's widening to the status and setting it on the broker (the
   failpoint `before-group-configs`) leaves the record with the broker unchanged; its successor
   reads the broker's value, raises it and goes on to Widened. Deleted mid-rollout (a member in
   flight), the ConsumerGroup sets the tuned value back on the broker before its finalizer goes.
   The member is a placeholder pod that ignores SIGTERM (its stop lasts its grace period: the
   rollout stays in flight) whose instance id a bare static member holds in the group (so the
   group is Stable and the member counts as in it); the restart the widening is sized from is
   written into `status.measurements` while no operator runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from staticfleet import failpoints
from staticfleet.decisions.timeouts import widening
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from staticfleet.observe import kafkaadmin, kafkareads
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.groups import PLACEHOLDER_MEMBER, OwnerWatch, owners
from staticfleet_dev.testkit.kube import kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from staticfleet_dev.testkit.probe import ProbeMember
from tests.support import unique

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dump_broker_log_on_failure")]

TUNED_MS, HEARTBEAT_MS, WIDENED_MS = 2000, 500, 12000
"""The test broker allows sessions from 1000 ms and heartbeats from 500 ms."""
AWAY_S = 6.0
"""How long the member stays away under the widened value: three tuned session timeouts, half
the widened one."""
SESSION = kafkareads.GROUP_SESSION_CONFIG


@pytest.fixture(scope="module")
def admin(kafka: KafkaBroker) -> Iterator[kafkaadmin.Admin]:
    """The operator's own admin handle on the test broker (as `AdminPool` hands it out)."""
    pool = kafkaadmin.AdminPool()
    yield pool.get({"bootstrap.servers": kafka.bootstrap})
    pool.close()


def member(kafka: KafkaBroker, group: str, topic: str, ordinal: int) -> ProbeMember:
    return ProbeMember([kafka.bootstrap, group, topic, "0", f"{group}-{ordinal}",
                        "consumer"]).start()


def split(kafka_admin: AdminClient, group: str) -> dict[str, set[tuple[str, int]]] | None:
    """Each member's partitions once both hold two; None before."""
    by_member: dict[str, set[tuple[str, int]]] = {}
    for tp, owner in owners(kafka_admin, group).items():
        by_member.setdefault(owner, set()).add(tp)
    return by_member if sorted(len(p) for p in by_member.values()) == [2, 2] else None


def all_with(kafka_admin: AdminClient, group: str, instance: str) -> bool:
    found = owners(kafka_admin, group)
    return len(found) == 4 and set(found.values()) == {instance}


def set_session(admin: kafkaadmin.Admin, group: str, tuned: EffectiveTimeouts,
                session_ms: int) -> None:
    """The group configs as the operator's pass sets them (`tuning.widen`): the tuned ones,
    with the session timeout in force."""
    kafkareads.set_group_configs(admin, group, {**tuned.group_configs("consumer"),
                                                SESSION: str(session_ms)})
    # The write is committed by the controller; the broker answering the read applies it from
    # the metadata log a moment later (CI, under load: read 10000 right after setting 2000).
    wait_for(f"the broker's session timeout of {group} at {session_ms} ms",
             lambda: kafkareads.group_session_timeout(admin, group) == session_ms,
             timeout=15, interval=0.2)


def test_the_broker_holds_a_stopped_member_to_the_widened_session_and_then_the_tuned_again(
    kafka: KafkaBroker, kafka_admin: AdminClient, admin: kafkaadmin.Admin,
    make_topic: Callable[..., str],
) -> None:
    topic, group = make_topic("widen", 4), unique("g848")
    a, b = f"{group}-0", f"{group}-1"
    tuned = EffectiveTimeouts(TUNED_MS, HEARTBEAT_MS, 300000, {})
    set_session(admin, group, tuned, TUNED_MS)
    members = [member(kafka, group, topic, 0), member(kafka, group, topic, 1)]
    try:
        wait_for("two members with two partitions each", lambda: split(kafka_admin, group), 60)

        # 1: Tuned: a member that stops loses its partitions once its session ran out.
        stopped = time.monotonic()
        members[1].terminate()
        wait_for(f"{a} to own every partition", lambda: all_with(kafka_admin, group, a),
                 TUNED_MS / 1000 + 20, interval=0.1)
        tuned_moved_s = time.monotonic() - stopped
        members[1] = member(kafka, group, topic, 1)
        before = wait_for("the split again", lambda: split(kafka_admin, group), 60)

        # 2: Widened as a rollout's widening does it: the value the pass decides, set, then one
        # heartbeat interval (and the slack) waited before the stop.
        raised = widening.next_widening(None, WIDENED_MS, "a rollout", "", TUNED_MS,
                                        HEARTBEAT_MS, None, datetime.now(UTC))
        assert raised.record is not None and raised.set_ms == WIDENED_MS
        set_session(admin, group, tuned, raised.set_ms)
        in_force = widening.next_widening(raised.record, WIDENED_MS, "a rollout", "", TUNED_MS,
                                          HEARTBEAT_MS, WIDENED_MS, datetime.now(UTC))
        assert in_force.record is not None and in_force.record.state == "Widened"
        time.sleep(in_force.recheck_s or 0)
        with OwnerWatch(kafka_admin, group, interval=0.1) as watch:
            members[1].terminate()
            time.sleep(AWAY_S)
            held = owners(kafka_admin, group)
            members[1] = member(kafka, group, topic, 1)
            after = wait_for("the stopped member back with its partitions", lambda: (
                s if (s := split(kafka_admin, group)) and s.get(b) == before[b] else None), 60)
        assert {tp for tp, o in held.items() if o == a} == before[a], held
        assert watch.moved() == {}, f"partitions moved while widened: {watch.moved()}"
        assert after == before

        # 3: Set back once no rollout needs it: a member that stops is detected at 2 s again.
        restored = widening.next_widening(in_force.record, WIDENED_MS, None, "no rollout",
                                          TUNED_MS, HEARTBEAT_MS, None, datetime.now(UTC))
        assert restored.set_ms == TUNED_MS and restored.event is not None
        set_session(admin, group, tuned, restored.set_ms)
        time.sleep((HEARTBEAT_MS + widening.HEARTBEAT_SLACK_MS) / 1000)
        stopped = time.monotonic()
        members[1].terminate()
        wait_for(f"{a} to own every partition", lambda: all_with(kafka_admin, group, a),
                 TUNED_MS / 1000 + 20, interval=0.1)
        restored_moved_s = time.monotonic() - stopped
    finally:
        for m in members:
            m.kill()
    print(f"a stopped member's partitions moved after {tuned_moved_s:.1f} s (tuned "
          f"{TUNED_MS} ms); widened to {WIDENED_MS} ms it was away {AWAY_S:.0f} s and came "
          f"back to them; restored, they moved after {restored_moved_s:.1f} s")
    for moved_s in (tuned_moved_s, restored_moved_s):
        # Its session ran out: not at once (a leave would have moved them), not long after.
        assert (TUNED_MS - HEARTBEAT_MS) / 1000 - 0.2 < moved_s < TUNED_MS / 1000 + 5


def test_an_operator_that_finds_the_group_widened_with_no_rollout_sets_the_tuned_value_back(
    kafka: KafkaBroker, admin: kafkaadmin.Admin, kubeconfig: Path, operator: OperatorProcess,
    namespace: str, make_topic: Callable[..., str],
) -> None:
    """The operator stopped between raising the session timeout and writing its status: its
    successor reads the group's session timeout on its first pass and sets it back."""
    name, session_ms = unique("wide"), 6000
    groups.apply(kubeconfig, namespace, groups.consumer_group(
        name, kafka.bootstrap, make_topic("wide", 2), replicas=1, session_ms=session_ms,
        command=PLACEHOLDER_MEMBER, protocol="consumer"))
    wait_for("the tuned session timeout on the broker", lambda: (
        kafkareads.group_session_timeout(admin, name) == session_ms
        and (groups.get(kubeconfig, namespace, name).get("status") or {}).get("timeouts")), 60)
    (pod,) = groups.pods(kubeconfig, namespace, name)

    operator.stop()
    try:
        kafkareads.set_group_configs(admin, name, {SESSION: "30000"})
    finally:
        operator.start()
    wait_for("the tuned session timeout back on the broker",
             lambda: kafkareads.group_session_timeout(admin, name) == session_ms, 60)
    obj = groups.wait_status(kubeconfig, namespace, name, lambda o: (
        (o["status"]["timeouts"].get("widening") or {}).get("state") == "Restored"), 30,
        "the widening recorded as restored")
    record = obj["status"]["timeouts"]["widening"]
    assert record["sessionTimeoutMs"] == 30000, record
    assert record["tunedSessionTimeoutMs"] == session_ms, record
    events = groups.events(kubeconfig, namespace, name, "SessionRestored")
    assert events and "the broker held 30000 ms" in events[-1]["message"], events
    (now,) = groups.pods(kubeconfig, namespace, name)
    assert now["metadata"]["uid"] == pod["metadata"]["uid"], "the member was restarted"


STUBBORN_MEMBER = [*PLACEHOLDER_MEMBER[:2], (
    "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + PLACEHOLDER_MEMBER[2])]
"""A placeholder whose stop lasts its pod's grace period (it ignores SIGTERM)."""


def widening_of(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(((obj.get("status") or {}).get("timeouts") or {}).get("widening") or {})


def test_a_widening_killed_before_its_config_write_is_finished_and_a_deletion_restores_it(
    kafka: KafkaBroker, admin: kafkaadmin.Admin, kubeconfig: Path, operator: OperatorProcess,
    namespace: str, make_topic: Callable[..., str], tmp_path: Path,
) -> None:
    name, session_ms = unique("wkill"), 6000
    topic = make_topic("wkill", 2)
    spec = groups.consumer_group(name, kafka.bootstrap, topic, replicas=1,
                                 session_ms=session_ms, command=STUBBORN_MEMBER,
                                 protocol="consumer")
    groups.apply(kubeconfig, namespace, spec)
    wait_for("the tuned session timeout on the broker", lambda: (
        kafkareads.group_session_timeout(admin, name) == session_ms
        and (groups.get(kubeconfig, namespace, name).get("status") or {}).get("timeouts")), 60)
    holder = member(kafka, name, topic, 0)  # member 0's instance id, in the group
    try:
        groups.wait_status(kubeconfig, namespace, name, lambda o: (
            o["status"].get("groupState") == "Stable"), 60, "the group Stable")
        operator.stop()
        # A measured restart of 10 s: what the widening is sized from.
        kubectl(kubeconfig, "-n", namespace, "patch", "cg", name, "--subresource=status",
                "--type=merge", "-p", json.dumps({"status": {"measurements": {
                    "restartSecondsRecent": [10.0], "restartSecondsMax": 10.0}}}))
        crashing = OperatorProcess(kubeconfig=kubeconfig, log=tmp_path / "crashing.log",
                                   extra_env={failpoints.ENV: failpoints.BEFORE_GROUP_CONFIGS})
        try:
            crashing.launch().wait_healthy()
            time.sleep(3)  # its first passes: nothing to set, it stays up
            assert crashing.proc is not None and crashing.proc.poll() is None, (
                crashing.log_tail())
            kubectl(kubeconfig, "-n", namespace, "patch", "cg", name, "--type=json", "-p",
                    json.dumps([{"op": "add", "path": "/spec/template/env/-",
                                 "value": {"name": "ROLLOUT_MARK", "value": "1"}}]))
            proc = crashing.proc
            wait_for("the operator to kill itself before the config write",
                     lambda: proc.poll() is not None, timeout=60, interval=0.2)
            assert proc.returncode == -9, crashing.log_tail()
        finally:
            crashing.kill()
        recorded = widening_of(groups.get(kubeconfig, namespace, name))
        on_broker = kafkareads.group_session_timeout(admin, name)
        print(f"killed between record and act: the status says {recorded}, the broker holds "
              f"{on_broker} ms")
        assert recorded.get("state") == "Raising", recorded
        widened_ms = int(recorded["sessionTimeoutMs"])
        assert widened_ms > session_ms and on_broker == session_ms, (recorded, on_broker)

        operator.start()
        obj = groups.wait_status(kubeconfig, namespace, name, lambda o: (
            widening_of(o).get("state") == "Widened"), 60, "the widening in force")
        assert kafkareads.group_session_timeout(admin, name) == widened_ms
        raised = groups.events(kubeconfig, namespace, name, "SessionWidened")
        assert any(f"the broker held {session_ms} ms" in e["message"] for e in raised), raised
        groups.wait_status(kubeconfig, namespace, name, lambda o: (
            (o["status"].get("rollout") or {}).get("inFlight")), 60, "member 0 in flight")
        assert kafkareads.group_session_timeout(admin, name) == widened_ms, "restored early"

        # Deleted mid-rollout: the tuned value is back on the broker, the group goes.
        deleted = time.monotonic()
        kubectl(kubeconfig, "-n", namespace, "delete", "cg", name, "--wait=false")
        wait_for("the tuned session timeout back on the broker", lambda: (
            kafkareads.group_session_timeout(admin, name) == session_ms), 30, interval=0.2)
        restored_s = time.monotonic() - deleted
        wait_for("the ConsumerGroup gone", lambda: name not in kubectl(
            kubeconfig, "-n", namespace, "get", "cg", "-o", "name").stdout, 60)
        print(f"widened {widened_ms} ms ({obj['status']['timeouts']['widening']['reason']}); "
              f"deleted mid-rollout, the tuned {session_ms} ms back {restored_s:.1f} s later")
    finally:
        holder.kill()
