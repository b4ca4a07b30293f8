"""Faults of the operator's own making, on the whole system: the real API server, the local node
running real members, the real broker, a steady stream, the operator as its own process (issue
34, items 1 and 2).

1. An operator killed in the middle of a warm handoff's switchover. The switchover drains the
   old member, activates its standby replacement and deletes the old pod. The status used to be
   written only after all three, so an operator that died in between left a handoff `Preparing`
   whose replacement was already active: its successor failed the handoff at the standby
   timeout and deleted the working replacement. Now the pass writes the handover to the status
   first, and a pass that finds the old pod still there resumes it. For each failpoint
   (`staticfleet.failpoints.SWITCHOVER_POINTS`: before the drain, after the drain, after the
   activation, after the delete) an operator armed with it starts a rollout of a 2-member
   group, kills itself (SIGKILL) at that point of the first switchover, stays down 10 s, and
   the test's usual operator takes over. The rollout completes, every member on the new
   revision, with no rebalance, nothing lost, no handoff failed, and no partition without a
   processing owner for more than 5 s (read from when the sink's records were written).
2. A member whose first batch takes 120 s. It starts on a backlog, so its buffer fills while
   that batch runs and it pauses its partitions on purpose: its polls return nothing for two
   minutes. The stall detector used to take that for a member that stopped fetching: it
   deleted the pod after its 60 s bound, the new process began the same slow batch, and the
   group made no progress, one restart a minute. Now the member reports its batch in flight
   (`/status` `batchInFlight`) and the detector leaves it be: the batch is processed once, the
   pod is never replaced, nothing is written twice, and no stall Event appears.

3. A batch that never ends (issue 46, item 6): a member whose first real batch takes 150 s
   under `maxPollIntervalMs` 20 s (its bound: 60 s, nothing measured yet). Before, a batch in
   flight was never judged however long; now, past its bound, `MembersStalled` turns True with
   the reason `BatchOverdue`, a Warning `BatchOverdue` Event names the member, the gauge
   `staticfleet_overdue_batches` shows 1, the member is never restarted, and once the batch
   ends the condition is False again, nothing lost.

The slow member (`slow_member`, its own namespace, topics and stream) starts before the crash
test and its two minutes run beside it: the two share the machine's time, not a group. The
stall detector looks at it on every pass of whichever operator runs meanwhile, the crashing
ones included; the operator is down 40 s of those two minutes, so the detector judges the
member on the passes of the other 80 s and after, well past its 60 s bound. The test's shared
operator is stopped for each crashing one's time: two operators on one group would steer it
twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from staticfleet import failpoints
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.stream import SteadyProducer, create_topic, longest_pause_s, read_timed
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import create_namespace, get_json, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from tests.e2e.support import drain, env_patch, trigger
from tests.support import unique

# exclusive: an e2e module runs the operator, members and a producer; on this machine's two
# cores two of them side by side overloaded it (tests/lanes.py).
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive,
              pytest.mark.usefixtures("dump_broker_log_on_failure")]

REPO = Path(__file__).resolve().parents[2]
DOWN_S = 10.0
FIRST_BATCH_S = 120
BACKLOG = 6000
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


@dataclass
class SlowMember:
    """The 1-member group of the long first batch, from its pod's creation."""

    name: str
    namespace: str
    stream: dict[str, Any]
    backlog: list[bytes]
    pod_name: str
    pod_uid: str
    made_at: float


@pytest.fixture(scope="module")
def slow_member(kafka: KafkaBroker, kubeconfig: Path,
                spark_connect: ConnectServer) -> Iterator[SlowMember]:
    """A member on a 6,000-record backlog whose first real batch takes 120 s, with the default
    recovery settings, in a namespace and with a stream of its own: started once, before the
    crash test, and judged by the long-batch test after it."""
    name, namespace = unique("slow"), unique("t")
    create_namespace(kubeconfig, namespace)
    topic, out = unique("slow-in"), unique("slow-out")
    for t in (topic, out):
        create_topic(kafka.bootstrap, t, 6)
    backlog = [f"{name}-backlog-{i:06d}".encode() for i in range(BACKLOG)]
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True})
    for value in backlog:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0, "the backlog was not delivered"
    stream = {"topic": topic, "out": out,
              "producer": SteadyProducer(kafka.bootstrap, topic, rate=100).start()}
    spec = groups.consumer_group(
        name, kafka.bootstrap, topic, replicas=1, out_topic=out, max_records=1000,
        connect_url=spark_connect.url,
        env=[{"name": "SLOW_FIRST_BATCH_S", "value": str(FIRST_BATCH_S)},
             {"name": "PYTHONPATH", "value": str(REPO)}])
    spec["spec"]["processing"]["transform"] = (
        "tests.integration.spark_test_transforms:slow_first_real_batch")
    try:
        groups.apply(kubeconfig, namespace, spec)
        pod = wait_for("the slow member's pod", lambda: next(
            iter(groups.pods(kubeconfig, namespace, name)), None), timeout=60)
        yield SlowMember(name, namespace, stream, backlog, pod["metadata"]["name"],
                         pod["metadata"]["uid"], time.monotonic())
    finally:
        stream["producer"].stop()
        kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=false", check=False)


@pytest.mark.usefixtures("slow_member")  # its two minutes run beside this test
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


def test_a_two_minute_first_batch_is_processed_once_and_its_member_never_restarted(
    kafka: KafkaBroker, kubeconfig: Path, slow_member: SlowMember,
) -> None:
    slow = slow_member
    name, namespace = slow.name, slow.namespace

    def first_batch() -> dict[str, Any] | None:
        obj = groups.get(kubeconfig, namespace, name)
        measured = (obj.get("status") or {}).get("measurements") or {}
        return obj if measured.get("batchSecondsMax", 0) >= FIRST_BATCH_S - 5 else None

    wait_for("the slow first batch to be processed", first_batch,
             timeout=FIRST_BATCH_S + 180, interval=2)
    took = time.monotonic() - slow.made_at
    obj = groups.wait_status(kubeconfig, namespace, name, groups.ready_and_idle, 120, "Ready")
    now = get_json(kubeconfig, "-n", namespace, "pod", slow.pod_name)
    restarts = [c.get("restartCount", 0) for c in now["status"].get("containerStatuses") or ()]
    stall_events = [e.get("message") for e in json.loads(kubectl(
        kubeconfig, "-n", namespace, "get", "events", "-o", "json").stdout)["items"]
        if e.get("reason") in ("MemberStalled", "RestartingStalledMember")]
    _, out = drain(kafka, name, slow.stream)
    expected = set(slow.stream["producer"].produced) | set(slow.backlog)
    missing = expected - set(out)
    duplicates = len(out) - len(set(out))
    print(f"slow first batch: processed {took:.1f} s after the pod was made; pod replaced: "
          f"{now['metadata']['uid'] != slow.pod_uid}, container restarts {restarts}; stall "
          f"Events {stall_events}; status.stalledRestarts "
          f"{obj['status'].get('stalledRestarts')}; {len(expected)} records, {len(missing)} "
          f"lost, {duplicates} written twice")
    assert now["metadata"]["uid"] == slow.pod_uid and restarts == [0], "the member restarted"
    assert not stall_events, stall_events
    assert not obj["status"].get("stalledRestarts")
    assert not missing, f"{len(missing)} records lost"
    assert duplicates == 0, f"{duplicates} records written twice"


HUNG_BATCH_S = 150


def test_a_batch_that_never_ends_is_reported_and_its_member_left_alone(
    kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess, namespace: str,
    stream: dict[str, Any], spark_connect: ConnectServer,
) -> None:
    name = unique("hung")
    spec = groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=1, out_topic=stream["out"],
        connect_url=spark_connect.url, session_ms=10000,  # within max.poll.interval.ms
        env=[{"name": "SLOW_FIRST_BATCH_S", "value": str(HUNG_BATCH_S)},
             {"name": "PYTHONPATH", "value": str(REPO)}])
    spec["spec"]["processing"]["transform"] = (
        "tests.integration.spark_test_transforms:slow_first_real_batch")
    spec["spec"]["membership"]["timeouts"]["maxPollIntervalMs"] = 20000
    groups.apply(kubeconfig, namespace, spec)
    pod = wait_for("the member's pod", lambda: next(
        iter(groups.pods(kubeconfig, namespace, name)), None), timeout=60)

    def stalled(obj: dict[str, Any]) -> dict[str, Any] | None:
        return next((c for c in (obj.get("status") or {}).get("conditions") or ()
                     if c["type"] == "MembersStalled"), None)

    began = time.monotonic()
    obj = groups.wait_status(kubeconfig, namespace, name, lambda o: (
        (stalled(o) or {}).get("reason") == "BatchOverdue"), HUNG_BATCH_S + 60,
        "the batch reported overdue")
    seen_s = time.monotonic() - began
    cond = stalled(obj)
    assert cond is not None and cond["status"] == "True", cond
    events = groups.events(kubeconfig, namespace, name, "BatchOverdue")
    assert events and events[-1]["type"] == "Warning", events
    assert "member 0" in events[-1]["message"] and "past its bound of 60 s" in (
        events[-1]["message"]), events
    gauge = f'staticfleet_overdue_batches{{group="{name}",namespace="{namespace}"}} 1.0'
    wait_for("the gauge at 1", lambda: gauge in operator.metrics(), timeout=30)
    done = groups.wait_status(kubeconfig, namespace, name, lambda o: (
        (stalled(o) or {}).get("status") == "False"), HUNG_BATCH_S + 60, "the batch done")
    now = get_json(kubeconfig, "-n", namespace, "pod", pod["metadata"]["name"])
    restarts = [c.get("restartCount", 0) for c in now["status"].get("containerStatuses") or ()]
    print(f"hung batch: reported {seen_s:.0f} s after the group was applied: {cond['message']}; "
          f"cleared once it ended ({stalled(done)}); pod replaced "
          f"{now['metadata']['uid'] != pod['metadata']['uid']}, restarts {restarts}")
    assert now["metadata"]["uid"] == pod["metadata"]["uid"] and restarts == [0]
    assert not done["status"].get("stalledRestarts")
    produced, out = drain(kafka, name, stream)
    missing = set(stream["producer"].produced) - set(out)
    assert produced > 0 and not missing, f"{len(missing)} of {produced} records lost"
