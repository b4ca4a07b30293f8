"""A KIP-848 group's session timeout widened for a rollout (`spec.rollout.widenSessionTimeout`,
issue 38), on the whole system: the real API server, the local node running real members
(confluent-kafka with `group.protocol=consumer`, Spark through the session's Connect server),
the real broker, the operator as its own process, and a steady stream.

One group, two rollouts of a revision whose members start 9 s late (a `sleep` in the pod's
command, its length from the env the rollout changes), under a tuned session timeout of 8 s:

1. Widening off: the first restarted member is away longer than 8 s, the broker hands its
   partitions to the other member (a rebalance) and the rollout stops. The restart is measured.
2. Widening on, and the operator killed right after the first pod deletion (the failpoint
   `after-pod-delete`) and started again: before that first stop the operator raised the group's
   session timeout to what the measured restart needs and waited a heartbeat; its successor,
   a new process, finds the widening in the status, finishes the rollout with no partition moved
   although each restart outlasts the tuned 8 s, and sets the tuned value back once it is
   Complete.

The two rollouts share one group on purpose: the second needs the first's measured restart
(what the widening is sized from), and each proves its claim on its own rollout's window (who
owned each partition, the broker's session value, the rollout's status).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from staticfleet import failpoints
from staticfleet.decisions.conditions import parse_rfc3339
from staticfleet.observe import kafkaadmin, kafkareads
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import Poller, wait_for
from tests.e2e.support import drain, trigger
from tests.support import unique

# exclusive: an e2e module runs the operator, members and a producer; on this machine's two
# cores two of them side by side overloaded it (tests/lanes.py).
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive,
              pytest.mark.usefixtures("dump_broker_log_on_failure")]

REPLICAS = 2
TUNED_MS = 8000
"""The explicit session timeout: a member's start here (1-3 s with Spark Connect) fits it, so
the first rollout is not refused; a start 9 s late does not."""
SLOW_START_S = 9
MARGIN_PERCENT = 250
"""restartMarginPercent: the widened value (the measured restart x 250 % + 2 s) also covers the
restart that the operator's own death and start lengthen."""
SLOW = ["sh", "-c", 'sleep "${SLOW_START_S:-0}"; exec python -m consumer_runtime']


class SessionWatch(Poller):
    """The group's session timeout as the broker holds it, every 0.25 s, in the order seen."""

    interval = 0.25
    transient = (kafkaadmin.KafkaUnavailable, KafkaException)

    def __init__(self, admin: kafkaadmin.Admin, group: str) -> None:
        self.admin, self.group = admin, group
        self.seen: list[int | None] = []

    def poll(self) -> None:
        value = kafkareads.group_session_timeout(self.admin, self.group)
        if not self.seen or self.seen[-1] != value:
            self.seen.append(value)


def env_patch(env: list[dict[str, str]]) -> str:
    return json.dumps([{"op": "replace", "path": "/spec/template/env", "value": env}])


def test_a_kip848_rollout_slower_than_the_session_rebalances_unwidened_and_not_widened(
    kafka: KafkaBroker, kafka_admin: AdminClient, kubeconfig: Path, operator: OperatorProcess,
    namespace: str, stream: dict[str, Any], spark_connect: ConnectServer, tmp_path: Path,
) -> None:
    began = time.monotonic()
    name = unique("widen")
    spec = groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=REPLICAS, out_topic=stream["out"],
        session_ms=TUNED_MS, protocol="consumer", command=SLOW, connect_url=spark_connect.url)
    spec["spec"]["rollout"]["widenSessionTimeout"] = False
    spec["spec"]["membership"]["autoTuning"] = {"restartMarginPercent": MARGIN_PERCENT}
    groups.start(kubeconfig, namespace, spec, timeout=180)
    pool = kafkaadmin.AdminPool()
    admin = pool.get({"bootstrap.servers": kafka.bootstrap})
    assert kafkareads.group_session_timeout(admin, name) == TUNED_MS

    # 1: Widening off: the late member's partitions move to the other member.
    with groups.OwnerWatch(kafka_admin, name) as moves, SessionWatch(admin, name) as sessions:
        trigger(kubeconfig, namespace, name, env_patch(
            [{"name": "SLOW_START_S", "value": str(SLOW_START_S)}]))
        stopped = groups.wait_status(kubeconfig, namespace, name, lambda o: (
            o["status"].get("rollout", {}).get("phase") == "Stopped"), 120,
            "the unwidened rollout stopped by the late member")
        measured = groups.wait_status(kubeconfig, namespace, name, lambda o: max(
            o["status"].get("measurements", {}).get("restartSecondsRecent") or [0])
            > SLOW_START_S, 120, "the late restart measured")
    off_rollout = stopped["status"]["rollout"]
    print(f"widening off: partitions moved {moves.moved()}; rollout {off_rollout['phase']}: "
          f"{off_rollout['reason']}; restarts measured "
          f"{measured['status']['measurements']['restartSecondsRecent']} s; broker session "
          f"{sessions.seen} ms")
    assert moves.moved(), "no partition moved: the late member did not cost a rebalance"
    assert "longer than the session timeout 8000 ms" in off_rollout["reason"], off_rollout
    assert sessions.seen == [TUNED_MS] and "widening" not in stopped["status"]["timeouts"]

    # 2: Widening on, a new revision; the operator dies right after the first pod deletion.
    operator.stop()
    crashing = OperatorProcess(kubeconfig=kubeconfig, log=tmp_path / "operator-crash.log",
                               extra_env={"STATICFLEET_RESYNC_SECONDS": "5",
                                          failpoints.ENV: failpoints.AFTER_POD_DELETE})
    with groups.OwnerWatch(kafka_admin, name) as moves, SessionWatch(admin, name) as sessions:
        try:
            crashing.launch()
            trigger(kubeconfig, namespace, name, json.dumps([
                {"op": "replace", "path": "/spec/rollout/widenSessionTimeout", "value": True},
                {"op": "replace", "path": "/spec/template/env", "value": [
                    {"name": "SLOW_START_S", "value": str(SLOW_START_S)},
                    {"name": "ROLLOUT_MARK", "value": "2"}]}]))
            assert crashing.proc is not None
            proc = crashing.proc
            wait_for("the operator to kill itself after the first pod DELETE",
                     lambda: proc.poll() is not None, timeout=120, interval=0.2)
            assert proc.returncode == -9, crashing.log_tail()
            mid = groups.get(kubeconfig, namespace, name)["status"]
        finally:
            crashing.kill()
            operator.start()  # a new process: what it knows of the widening is the status
        done = groups.wait_rollout(kubeconfig, namespace, name, 300,
                                   "rolled out after the operator's restart")
        restored = groups.wait_status(kubeconfig, namespace, name, lambda o: (
            o["status"]["timeouts"].get("widening", {}).get("state") == "Restored"), 30,
            "the tuned session timeout set back")
        time.sleep(1)
    rollout, record = done["status"]["rollout"], restored["status"]["timeouts"]["widening"]
    widened_ms = record["sessionTimeoutMs"]
    absences = [(h["ordinal"], h["absenceMs"]) for h in rollout["handoffs"]]
    print(f"widening on: at the kill {mid['timeouts'].get('widening')}; broker session "
          f"{sessions.seen} ms; absences (ordinal, ms) {absences}; partitions moved "
          f"{moves.moved()}; rebalances during the rollout {rollout['rebalancesDuringRollout']}; "
          f"{time.monotonic() - began:.0f} s since the test began")
    # The first stop came after the widening was in force and a heartbeat had passed.
    assert mid["timeouts"]["widening"]["state"] == "Widened", mid["timeouts"]
    assert mid["rollout"]["inFlight"], mid["rollout"]
    assert sessions.seen == [TUNED_MS, widened_ms, TUNED_MS], sessions.seen
    assert widened_ms > TUNED_MS and record["tunedSessionTimeoutMs"] == TUNED_MS
    # Each restart outlasted the tuned session timeout, and nothing moved.
    assert min(a for _, a in absences) > TUNED_MS, absences
    assert max(a for _, a in absences) < widened_ms, absences
    assert moves.moved() == {}, f"partitions moved: {moves.moved()}"
    assert rollout["rebalancesDuringRollout"] == 0 and sorted(
        rollout["membersRestarted"]) == list(range(REPLICAS)), rollout
    assert parse_rfc3339(record["restoredAt"]) >= parse_rfc3339(rollout["finishedAt"]), (
        record, rollout)
    assert kafkareads.group_session_timeout(admin, name) == TUNED_MS
    # Raised by the operator that died, set back by its successor.
    assert "SessionWidened" in crashing.log.read_text()
    assert "SessionRestored" not in crashing.log.read_text()
    assert f"{namespace}/{name}: event Normal SessionRestored" in operator.log.read_text()
    assert [e["reason"] for e in groups.events(kubeconfig, namespace, name)
            if e["reason"].startswith("Session")].count("SessionWidened") == 1
    pool.close()

    produced, out = drain(kafka, name, stream)
    missing = set(stream["producer"].produced) - set(out)
    assert produced > 0 and not missing, f"{len(missing)} of {produced} records lost"
