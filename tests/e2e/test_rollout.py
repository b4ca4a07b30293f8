"""Rolling restarts that never rebalance, proven on the whole system: the real API server, the
local node running real member processes (confluent-kafka + PySpark), the real broker, the
operator as its own process, and a steady stream of records.

The static rollout must cost zero rebalances and lose no record; the same rollout with dynamic
membership must cost at least one per member, so the first proof cannot pass vacuously.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from staticfleet import failpoints
from staticfleet.decisions.builders import HTTP_PORT
from staticfleet.decisions.names import ACTIVATED_ANNOTATION
from staticfleet.observe import memberhttp
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.prometheus import Prometheus
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import get_json
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import Poller, wait_for
from tests.e2e.support import check_dashboard, drain, env_patch, switchovers, trigger
from tests.support import unique

# exclusive: an e2e module runs the operator, members and a producer; on this machine's two
# cores two of them side by side overloaded it (tests/lanes.py).
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive,
              pytest.mark.usefixtures("dump_broker_log_on_failure")]

REPLICAS = 3
REBALANCE_ALERTS = ("StaticfleetRebalanceRateHigh", "StaticfleetMemberRebalanceRateHigh")


class UidTracker(Poller):
    """Polls the member pods twice a second and records every pod uid seen per ordinal."""

    def __init__(self, kubeconfig: Path, namespace: str, name: str) -> None:
        self.args = (kubeconfig, namespace, name)
        self.seen: dict[int, list[str]] = {}

    def started(self) -> None:
        self.poll()

    def poll(self) -> None:
        for pod in groups.pods(*self.args):
            ordinal = int(pod["metadata"]["labels"]["staticfleet.io/ordinal"])
            uids = self.seen.setdefault(ordinal, [])
            if pod["metadata"]["uid"] not in uids:
                uids.append(pod["metadata"]["uid"])


class AlertWatcher(Poller):
    """Polls Prometheus' /api/v1/alerts every 2 s and records, per alert name, when (seconds
    after entering) the group's alert was first seen pending and first seen firing."""

    interval = 2.0
    transient = (AssertionError, OSError)

    def __init__(self, prometheus: Prometheus, namespace: str, group: str,
                 names: tuple[str, ...] = REBALANCE_ALERTS) -> None:
        self.prometheus, self.namespace, self.group, self.names = (prometheus, namespace, group,
                                                                   names)
        self.first: dict[tuple[str, str], float] = {}
        self.t0 = time.monotonic()

    def started(self) -> None:
        self.t0 = time.monotonic()

    def poll(self) -> dict[str, str]:
        """The group's watched alerts now: name -> state."""
        now: dict[str, str] = {}
        for alert in self.prometheus.alerts():
            labels = alert["labels"]
            if (labels.get("alertname") in self.names and labels.get("group") == self.group
                    and labels.get("namespace") == self.namespace):
                name, state = labels["alertname"], alert["state"]
                if now.get(name) != "firing":
                    now[name] = state
                self.first.setdefault((name, state), round(time.monotonic() - self.t0, 1))
        return now


@pytest.mark.parametrize("strategy", ["WarmHandoff", "Recreate"])
def test_static_rollout_costs_no_rebalance_and_loses_nothing(
    strategy: str, kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess,
    namespace: str, stream: dict[str, Any], prometheus: Prometheus, spark_connect: ConnectServer,
) -> None:
    """The members' Spark runs through the session's Connect server: the subject here is the
    roller (one member at a time, each inside the session timeout, switched over or restarted),
    what the operator reports and what Prometheus shows. The same warm rollout with each
    member's own local Spark JVM (a standby warming it, the old one shutting down beside it) is
    the demo's e2e (tests/e2e/test_demo.py), which asserts the same handoff figures."""
    name = unique("warm" if strategy == "WarmHandoff" else "static")
    groups.start(kubeconfig, namespace, groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=REPLICAS, out_topic=stream["out"],
        strategy=strategy, connect_url=spark_connect.url))
    time.sleep(5)  # steady consumption before the rollout
    counters_before = groups.counters_settled(kubeconfig, namespace, name)
    generations_before = kafka.generations(name)
    rebalance_lines_before = len(kafka.rebalance_lines(name))

    with UidTracker(kubeconfig, namespace, name) as tracker, \
            AlertWatcher(prometheus, namespace, name) as alerts:
        before = {o: uids[-1] for o, uids in tracker.seen.items()}
        started = time.time()
        trigger(kubeconfig, namespace, name, env_patch("1"))
        obj = groups.wait_rollout(kubeconfig, namespace, name, 600)
        completed = time.monotonic()
        time.sleep(3)

    status, rollout = obj["status"], obj["status"]["rollout"]
    assert sorted(rollout["membersRestarted"]) == list(range(REPLICAS))
    for ordinal in range(REPLICAS):
        assert tracker.seen[ordinal][0] == before[ordinal]
        assert len(tracker.seen[ordinal]) == 2, f"member {ordinal}: {tracker.seen[ordinal]}"
    # Zero rebalances, three ways: the broker, the operator's count, the members' counters.
    assert kafka.generations(name) == generations_before, "the broker formed a new generation"
    assert len(kafka.rebalance_lines(name)) == rebalance_lines_before
    assert rollout["rebalancesDuringRollout"] == 0
    assert not groups.rebalances_seen(counters_before, status), status
    assert rollout["longestAbsenceMs"] < status["timeouts"]["sessionTimeoutMs"]
    assert groups.ready(groups.get(kubeconfig, namespace, name))
    handoffs = {h["ordinal"]: h for h in rollout["handoffs"]}
    costs = [(o, h["absenceMs"], h.get("processingGapMs"), h.get("standbyReadyMs"))
             for o, h in sorted(handoffs.items())]
    print(f"{strategy}: rollout {rollout['startedAt']} -> {rollout['finishedAt']}; per member "
          f"(ordinal, absence ms, processing gap ms, standby-ready ms): {costs}")
    assert sorted(handoffs) == list(range(REPLICAS))
    # Both figures of every restart, from the members' own clocks: a drain's answer, or (a
    # Recreate's stop) the old process's clean-exit report, to the millisecond, where the
    # kubelet's finishedAt has whole seconds.
    assert all(h.get("processingGapMs") is not None and h.get("absentFrom")
               and h.get("processingGapFrom") for h in handoffs.values()), handoffs
    assert any(not h["absentFrom"].endswith(".000Z") for h in handoffs.values()), handoffs
    if strategy == "WarmHandoff":
        assert {h["mode"] for h in handoffs.values()} == {"warm"}, handoffs
        # Each old member was drained and its standby activated the moment the drain answered
        # (a switchover), not stopped and waited for: the operator says so per member, and the
        # absence (the old consumer's close -> the replacement's first assignment, from the
        # members' own clocks) is a join, tens of ms here, where the stop-and-wait way took
        # the kubelet's 1 s rounding and a pass. A cold start here takes 10-30 s.
        assert len(switchovers(operator, namespace, name)) == REPLICAS, operator.log_tail(80)
        assert rollout["longestAbsenceMs"] < 1000, handoffs
        assert rollout["longestProcessingGapMs"] < 8000, handoffs
        kill9_with_the_operator_stopped(kafka, kubeconfig, operator, prometheus, namespace,
                                        name, status["timeouts"]["sessionTimeoutMs"])

    produced, out = drain(kafka, name, stream)
    missing = set(stream["producer"].produced) - set(out)
    assert produced > 0 and not missing, f"{len(missing)} of {produced} records lost"

    # And through a real Prometheus evaluating the shipped rules: the members are scraped, and
    # no rebalance alert was ever pending or firing for this group, during or 30 s after.
    time.sleep(max(0.0, completed + 30 - time.monotonic()))
    series = prometheus.query(
        f'staticfleet_member_records_processed_total{{namespace="{namespace}",group="{name}"}}')
    assert {s["metric"]["member"] for s in series} == {f"{name}-{o}" for o in range(REPLICAS)}, (
        f"{series}\n{prometheus.targets()}")
    assert sum(float(s["value"][1]) for s in series) > 0
    assert prometheus.query(f'staticfleet_group_members{{namespace="{namespace}",'
                            f'group="{name}",state="ready"}} == {REPLICAS}'), "operator scrape"
    with AlertWatcher(prometheus, namespace, name) as last:
        assert last.poll() == {}, last.first
    assert alerts.first == {}, f"rebalance alerts (s after the rollout started): {alerts.first}"
    check_dashboard(prometheus, namespace, name, started)


def kill9_with_the_operator_stopped(kafka: KafkaBroker, kubeconfig: Path,
                                    operator: OperatorProcess, prometheus: Prometheus,
                                    namespace: str, name: str, session_ms: int) -> None:
    """Members stand on their own. After a warm rollout every member pod is a former standby
    (STATICFLEET_STANDBY=true); the operator marked each activated before activating it. With
    the operator stopped, a `kill -9` of member 1's process restarts its container in place
    (the local node, as a kubelet), and the new process joins the group at once: back within
    its cold start, inside the session timeout, with no rebalance. (Part of the warm rollout
    test: it needs the state that rollout leaves, and another warm rollout costs minutes.)"""
    pod = next(p for p in groups.pods(kubeconfig, namespace, name)
               if p["metadata"]["labels"]["staticfleet.io/ordinal"] == "1"
               and not p["metadata"].get("deletionTimestamp"))
    assert pod["metadata"]["annotations"].get(ACTIVATED_ANNOTATION) == "true", pod["metadata"]
    (container,) = pod["status"]["containerStatuses"]
    pid = int(container["containerID"].removeprefix("localnode://"))
    ip = pod["status"]["podIP"]
    generations, rebalance_lines = kafka.generations(name), len(kafka.rebalance_lines(name))

    # The dashboard check reads the operator's count of finished rollouts, which a restarted
    # operator starts again from nothing: Prometheus has scraped it twice before the stop.
    sel = f'{{namespace="{namespace}",group="{name}"}}'
    for series in ("staticfleet_rollouts_total", "staticfleet_rollout_duration_seconds_count"):
        wait_for(f"two scrapes of {series}", lambda series=series: prometheus.query(
            f"count_over_time({series}{sel}[10m]) >= 2"), timeout=30, interval=1.0)

    def processing_again() -> dict[str, Any] | None:
        status = memberhttp.read_member_status(ip, HTTP_PORT)
        started = status and status.get("processStart")
        first = status and (status.get("startupSeconds") or {}).get("firstBatch")
        return status if started and first is not None and started > killed else None

    operator.stop()
    try:
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        status = wait_for("member 1 processing again", processing_again, timeout=240,
                          interval=0.2)
    finally:
        operator.start()
    phases, started = status["startupSeconds"], status["processStart"]
    in_group_s = started + phases["firstAssignment"] - killed
    processing_s = started + phases["firstBatch"] - killed
    print(f"kill -9 of member 1 (pod {pod['metadata']['name']}, pid {pid}) with the operator "
          f"stopped: new process {started - killed:.1f} s after the kill, back in the group "
          f"after {in_group_s:.1f} s, processing again after {processing_s:.1f} s (its cold "
          f"start: {phases['firstBatch']:.1f} s to the first batch; session timeout "
          f"{session_ms} ms)")
    assert status["standby"] is None and phases.get("activated") is None, (
        "the restarted process waited in standby")
    assert status["memberId"] and status["state"] == "running", status
    assert in_group_s < session_ms / 1000, "back in the group after the session timeout"
    # Nothing but a cold start: the restart back-off (1 s), then the process's own start.
    assert started - killed < 5.0, "the container was not restarted at once"
    after = next(p for p in groups.pods(kubeconfig, namespace, name)
                 if p["metadata"]["uid"] == pod["metadata"]["uid"])
    assert after["status"]["containerStatuses"][0]["restartCount"] == (
        container["restartCount"] + 1), "restarted in place"
    assert kafka.generations(name) == generations, "the broker formed a new generation"
    assert len(kafka.rebalance_lines(name)) == rebalance_lines


def test_dynamic_rollout_rebalances_once_per_member_at_least(
    kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess, namespace: str,
    stream: dict[str, Any], prometheus: Prometheus, spark_connect: ConnectServer,
) -> None:
    name = unique("dynamic")
    groups.start(kubeconfig, namespace, groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=REPLICAS, out_topic=stream["out"],
        dynamic=True, connect_url=spark_connect.url))
    generations_before = kafka.generations(name)

    with AlertWatcher(prometheus, namespace, name) as alerts:
        trigger(kubeconfig, namespace, name, env_patch("1"))
        obj = groups.wait_rollout(kubeconfig, namespace, name, 600)
        rolled_out_after = round(time.monotonic() - alerts.t0, 1)
        # The shipped rule (>= 2 rebalances in 5m, for 1m) must fire for this rollout.
        count = f'staticfleet_rebalances_total{{namespace="{namespace}",group="{name}"}}'
        wait_for("StaticfleetRebalanceRateHigh firing within 240 s of the rollout's start",
                 lambda: ("StaticfleetRebalanceRateHigh", "firing") in alerts.first,
                 timeout=alerts.t0 + 240 - time.monotonic(), interval=2,
                 describe=lambda: f"rolled out after {rolled_out_after} s; first seen: "
                                  f"{alerts.first}; operator's count: {prometheus.query(count)}")
        # The members' own alert too: each restarted member's leave hands its partitions to the
        # others (takeovers), where the group's forming did not.
        taken = f'staticfleet_member_takeovers_total{{namespace="{namespace}",group="{name}"}}'
        wait_for("StaticfleetMemberRebalanceRateHigh firing within 300 s of the rollout's start",
                 lambda: ("StaticfleetMemberRebalanceRateHigh", "firing") in alerts.first,
                 timeout=alerts.t0 + 300 - time.monotonic(), interval=2,
                 describe=lambda: f"first seen: {alerts.first}; members' takeovers: "
                                  f"{prometheus.query(taken)}")
    print(f"rollout complete after {rolled_out_after} s; alerts first seen: {alerts.first}")

    new_generations = [g for g in kafka.generations(name) if g not in generations_before]
    assert len(new_generations) >= REPLICAS, f"only {new_generations} new generations"
    assert obj["status"]["rollout"]["rebalancesDuringRollout"] >= 1
    _produced, out = drain(kafka, name, stream)
    assert not set(stream["producer"].produced) - set(out)


def test_rollout_refuses_to_start_when_restarts_outlast_the_session_timeout(
    kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess, namespace: str,
    stream: dict[str, Any], spark_connect: ConnectServer,
) -> None:
    name = unique("slow")
    slow = ["sh", "-c", "sleep 8; exec python -m consumer_runtime"]
    groups.start(kubeconfig, namespace, groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=2, session_ms=6000, command=slow,
        connect_url=spark_connect.url))
    uids = {p["metadata"]["uid"] for p in groups.pods(kubeconfig, namespace, name)}

    trigger(kubeconfig, namespace, name, env_patch("1"))
    obj = groups.wait_status(
        kubeconfig, namespace, name,
        lambda o: any(c["type"] == "RolloutAtRisk" and c["status"] == "True"
                      for c in (o.get("status") or {}).get("conditions") or []),
        60, "refusing the rollout")
    time.sleep(8)

    cond = next(c for c in obj["status"]["conditions"] if c["type"] == "RolloutAtRisk")
    assert cond["reason"] == "RestartUnsafe"
    assert "session timeout" in cond["message"] and "6000" in cond["message"], cond
    needed = obj["status"]["timeouts"]["neededSessionTimeoutMs"]
    assert needed > 6000 and str(needed) in cond["message"], cond
    assert {p["metadata"]["uid"] for p in groups.pods(kubeconfig, namespace, name)} == uids
    assert obj["status"]["rollout"]["membersRestarted"] == []
    assert metric_value(operator.metrics(), "staticfleet_rollout_at_risk",
                        {"namespace": namespace, "group": name}) == 1.0


def test_a_late_restart_stops_the_rollout_before_the_next_member(
    kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess, namespace: str,
    stream: dict[str, Any], tmp_path: Path, spark_connect: ConnectServer,
) -> None:
    name = unique("late")
    # Long enough that ordinary restarts fit even on a loaded machine (the operator would
    # rightly refuse the rollout otherwise); the late member sleeps far past it.
    session_ms = 45000
    groups.start(kubeconfig, namespace, groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=REPLICAS, session_ms=session_ms,
        connect_url=spark_connect.url))
    generations_before = kafka.generations(name)
    marker = tmp_path / "slow-once"
    # The new command makes member 1's replacement (and only its first start) 75 s late.
    slow_once = ["sh", "-c", f'if [ "$POD_NAME" = "{name}-1" ] && [ ! -e {marker} ]; then '
                 f"touch {marker}; sleep 75; fi; exec python -m consumer_runtime"]

    with UidTracker(kubeconfig, namespace, name) as tracker:
        first_uid_0 = tracker.seen[0][0]
        trigger(kubeconfig, namespace, name,
                f'[{{"op": "add", "path": "/spec/template/command", "value": {_json(slow_once)}}}]')
        obj = groups.wait_status(
            kubeconfig, namespace, name,
            lambda o: (o.get("status") or {}).get("rollout", {}).get("phase") == "Stopped",
            240, "stopped by the late member")
        # Member 1 comes back eventually; the roller must still leave member 0 alone.
        groups.wait_status(kubeconfig, namespace, name,
                           lambda o: (o.get("status") or {}).get("readyReplicas") == REPLICAS,
                           240, "all ready again")
        time.sleep(10)

    rollout = obj["status"]["rollout"]
    assert rollout["membersRestarted"] == [2], rollout
    assert tracker.seen[0] == [first_uid_0], "member 0 was restarted after the rollout stopped"
    cond = next(c for c in obj["status"]["conditions"] if c["type"] == "RolloutAtRisk")
    assert cond["status"] == "True" and "member 1" in cond["message"], cond
    new_generations = [g for g in kafka.generations(name) if g not in generations_before]
    assert 1 <= len(new_generations) <= 2, (
        f"the late member should cost its own rebalances only, saw {new_generations}")


def test_operator_killed_mid_rollout_resumes_without_restarting_twice(
    kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess, namespace: str,
    stream: dict[str, Any], spark_connect: ConnectServer, tmp_path: Path,
) -> None:
    """One member restarted, the operator is killed; then an operator that dies right after
    its next pod DELETE (`failpoints.AFTER_POD_DELETE`) restarts the next member, and stays
    down until that pod is gone. Its successor counts that restart from the status journaled
    ahead of the DELETE (CI, once, before the journal: membersRestarted [0, 2] of 3, the
    member recreated as a pod gone missing)."""
    name = unique("resume")
    groups.start(kubeconfig, namespace, groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=REPLICAS,
        connect_url=spark_connect.url))
    generations_before = kafka.generations(name)

    with UidTracker(kubeconfig, namespace, name) as tracker:
        trigger(kubeconfig, namespace, name, env_patch("1"))
        groups.wait_status(
            kubeconfig, namespace, name,
            lambda o: len((o.get("status") or {}).get("rollout", {}).get("membersRestarted")
                          or []) >= 1, 300, "one member restarted")
        operator.kill()
        crashing = OperatorProcess(kubeconfig=kubeconfig, log=tmp_path / "operator-crash.log",
                                   extra_env={failpoints.ENV: failpoints.AFTER_POD_DELETE})
        try:
            # The rollout is under way: its next pass may delete a pod, and so kill this
            # operator, before it answered /healthz (CI, once).
            crashing.launch()
            assert crashing.proc is not None
            proc = crashing.proc
            wait_for("the operator to kill itself after a pod DELETE",
                     lambda: proc.poll() is not None, timeout=120, interval=0.2)
            assert proc.returncode == -9, crashing.log_tail()
            # With no operator up, nothing recreates it: the successor finds it missing.
            wait_for("the deleted member pod to be gone", lambda: len(
                groups.pods(kubeconfig, namespace, name)) == REPLICAS - 1,
                timeout=60, interval=0.5)
        finally:
            crashing.kill()
            operator.start()  # whatever happened: the next tests need the shared operator
        obj = groups.wait_rollout(kubeconfig, namespace, name, 600,
                                  "rolled out after the operator restart")
        time.sleep(3)

    for ordinal in range(REPLICAS):
        assert len(tracker.seen[ordinal]) == 2, f"member {ordinal}: {tracker.seen[ordinal]}"
    assert sorted(obj["status"]["rollout"]["membersRestarted"]) == list(range(REPLICAS))
    assert kafka.generations(name) == generations_before


def metric_value(text: str, name: str, labels: dict[str, str]) -> float | None:
    """The value of one sample in Prometheus text exposition, or None when absent."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def test_a_replacement_that_cannot_start_stops_the_warm_rollout_and_the_member_keeps_serving(
    kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess, namespace: str,
    stream: dict[str, Any], spark_connect: ConnectServer,
) -> None:
    """Make before break: a replacement whose transform cannot be imported fails in standby;
    the old member was never stopped, so nothing rebalances and nothing is lost."""
    name = unique("badwarm")
    groups.start(kubeconfig, namespace, groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=REPLICAS, out_topic=stream["out"],
        strategy="WarmHandoff", connect_url=spark_connect.url))
    generations_before = kafka.generations(name)
    live_before = {p["metadata"]["uid"] for p in groups.pods(kubeconfig, namespace, name)}
    trigger(kubeconfig, namespace, name, '[{"op": "replace", "path": '
            '"/spec/processing/transform", "value": "staticfleet_no_such_module:run"}]')
    obj = groups.wait_status(
        kubeconfig, namespace, name,
        lambda o: (o.get("status") or {}).get("rollout", {}).get("phase") == "Stopped",
        300, "stopped by the failed replacement")
    time.sleep(5)
    rollout = obj["status"]["rollout"]
    live_after = {p["metadata"]["uid"] for p in groups.pods(kubeconfig, namespace, name)
                  if not p["metadata"].get("deletionTimestamp")}
    warnings = [e for e in cg_events(kubeconfig, namespace, name)
                if e["reason"] == "HandoffFailed"]
    print(f"rollout stopped: {rollout['reason']}")
    assert "failed before it was standby-ready" in rollout["reason"], rollout
    assert "staticfleet_no_such_module" in rollout["reason"], rollout
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning", warnings
    assert live_after == live_before, "a member was stopped, or the replacement was left"
    assert rollout["membersRestarted"] == [] and rollout["rebalancesDuringRollout"] == 0
    assert kafka.generations(name) == generations_before, "the broker formed a new generation"
    assert groups.ready(groups.get(kubeconfig, namespace, name))
    produced, out = drain(kafka, name, stream)
    missing = set(stream["producer"].produced) - set(out)
    assert produced > 0 and not missing, f"{len(missing)} of {produced} records lost"


def cg_events(kubeconfig: Path, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(
        kubeconfig, "-n", namespace, "events", "--field-selector",
        f"involvedObject.kind=ConsumerGroup,involvedObject.name={name}")["items"]
    return items
