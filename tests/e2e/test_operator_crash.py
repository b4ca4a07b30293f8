"""An operator killed in the middle of a warm handoff's switchover (issue 34, item 2), on the
whole system: the real API server, the local node running real members, the real broker, a
steady stream, the operator as its own process.

The switchover drains the old member, activates its standby replacement and deletes the old
pod. The status used to be written only after all three, so an operator that died in between
left a handoff `Preparing` whose replacement was already active: its successor failed the
handoff at the standby timeout and deleted the working replacement. Now the pass writes the
handover to the status first, and a pass that finds the old pod still there resumes it.

For each failpoint (`staticfleet.failpoints.SWITCHOVER_POINTS`: before the drain, after the
drain, after the activation, after the delete) an operator armed with it starts a rollout of
a 2-member group, kills itself (SIGKILL) at that point of the first switchover, stays down
10 s, and the test's usual operator takes over. The rollout completes, every member on the new
revision, with no rebalance, nothing lost, no handoff failed, and no partition without a
processing owner for more than 5 s (read from when the sink's records were written).

The test's shared operator is stopped for the crashing one's time: two operators on one group
would steer it twice.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from staticfleet import failpoints
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.stream import longest_pause_s, read_timed
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from tests.conftest import unique
from tests.e2e.test_rollout import drain, env_patch, trigger

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("dump_broker_log_on_failure")]

DOWN_S = 10.0
MAX_PAUSE_S = 5.0
"""No partition goes longer without a processing owner, whatever the operator does: a drained
member not replaced subscribes again after its hold (at most 2.5 s)."""


def _figures(handoffs: dict[int, dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    """Each handoff's mode, absence and processing gap (ms)."""
    return {o: (h.get("mode"), h.get("absenceMs"), h.get("processingGapMs"))
            for o, h in handoffs.items()}


def _reasons(kubeconfig: Path, namespace: str) -> list[str]:
    out = kubectl(kubeconfig, "-n", namespace, "get", "events", "-o", "json").stdout
    return [str(e.get("reason")) for e in json.loads(out)["items"]]


def test_an_operator_killed_at_any_point_of_a_switchover_leaves_a_rollout_its_successor_finishes(
    kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess,
    namespace: str, stream: dict[str, Any], spark_connect: ConnectServer, tmp_path: Path,
) -> None:
    """One group, one rollout per failpoint in turn: each starts from a group every member of
    which serves on the last revision (the claim is about one switchover, whatever came
    before), and the stream runs through all of them."""
    name = unique("crash")
    spec = groups.consumer_group(name, kafka.bootstrap, stream["topic"], replicas=2,
                                 out_topic=stream["out"], strategy="WarmHandoff",
                                 connect_url=spark_connect.url)
    groups.start(kubeconfig, namespace, spec)
    generations = kafka.generations(name)
    for point in failpoints.SWITCHOVER_POINTS:
        _crash_at(point, name, kubeconfig, operator, namespace, tmp_path)
    reasons = _reasons(kubeconfig, namespace)
    assert "HandoffFailed" not in reasons and "HandoffFellBackToColdStart" not in reasons
    assert kafka.generations(name) == generations, "the broker formed a new generation"
    produced, out = drain(kafka, name, stream)
    missing = set(stream["producer"].produced) - set(out)
    duplicates = len(out) - len(set(out))
    pause = longest_pause_s(read_timed(kafka.bootstrap, stream["out"]))
    print(f"operator crashes: {produced} records produced, {len(missing)} lost, "
          f"{duplicates} written twice; the longest a key went unprocessed {pause:.2f} s")
    assert produced > 0 and not missing, f"{len(missing)} of {produced} records lost"
    assert pause < MAX_PAUSE_S, f"a partition went {pause:.2f} s without a processing owner"


def _crash_at(point: str, name: str, kubeconfig: Path, operator: OperatorProcess,
              namespace: str, tmp_path: Path) -> None:
    """Roll the group with an operator armed with `point`; it dies there, stays down DOWN_S,
    and the test's operator finishes the rollout."""
    operator.stop()
    crashing = OperatorProcess(kubeconfig=kubeconfig, log=tmp_path / f"operator-{point}.log",
                               extra_env={"STATICFLEET_RESYNC_SECONDS": "5",
                                          failpoints.ENV: point})
    began = time.monotonic()
    try:
        crashing.start()
        trigger(kubeconfig, namespace, name, env_patch(f"crash-{point}"))
        assert crashing.proc is not None
        proc = crashing.proc
        wait_for(f"the operator to kill itself at {point}", lambda: proc.poll() is not None,
                 timeout=240, interval=0.2)
        died = time.monotonic() - began
        assert proc.returncode == -9, crashing.log_tail()
        assert f"failpoint {point}" in crashing.log_tail(), crashing.log_tail()
        mid = groups.get(kubeconfig, namespace, name)["status"]["rollout"]
        time.sleep(DOWN_S)
    finally:
        crashing.kill()
        operator.start()
    obj = groups.wait_rollout(kubeconfig, namespace, name, 300)
    rollout = obj["status"]["rollout"]
    handoffs = {h["ordinal"]: h for h in rollout["handoffs"]}
    print(f"{point}: died {died:.1f} s after the trigger, the status then "
          f"{[(f['ordinal'], f.get('phase')) for f in mid.get('inFlight') or ()]}; rolled out "
          f"{time.monotonic() - began:.1f} s after the trigger (operator down {DOWN_S:.0f} s); "
          f"handoffs (mode, absence ms, processing gap ms) {_figures(handoffs)}; "
          f"rebalances during the rollout {rollout['rebalancesDuringRollout']}")
    assert sorted(handoffs) == [0, 1] and all(h["mode"] == "warm" for h in handoffs.values())
    assert rollout["rebalancesDuringRollout"] == 0
