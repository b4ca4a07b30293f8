"""Warm rollouts when the cluster or a process does not play along (issue 20), on the whole
system: the real API server (its ResourceQuota admission), the local node running real members,
the real broker, the operator as its own process, and a steady stream.

* No room for a standby: a `ResourceQuota` of `pods: 4` for a 3-member group with `maxSurge: 2`
  and `maxUnavailable: 1`. The second standby is refused by the API server; that member is
  restarted the cold way (`fallback: Recreate`), and the predicates never let two members be
  stopped at once. Zero rebalances, nothing lost.
* A frozen old member: the member process is SIGSTOPped before its stop; it heartbeats no
  more and exits only at its SIGKILL, and its absence is counted from its last answer, not
  as the 1 s from that exit to its replacement's join. In the same rollout, a late first pass:
  the operator is frozen (SIGSTOP) while the next handoff's old member exits, and thawed 10 s
  later; its first pass after the exit sends the activation and does not fall back.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from staticfleet.decisions.spec.model import STOP_HANDOFF_ANNOTATION
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import get_json, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import Poller, wait_for
from tests.e2e.support import drain, env_patch, member_process, trigger
from tests.support import unique

# exclusive: an e2e module runs the operator, members and a producer; on this machine's two
# cores two of them side by side overloaded it (tests/lanes.py).
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive,
              pytest.mark.usefixtures("dump_broker_log_on_failure")]


class StoppedAtOnce(Poller):
    """Polls `status.rollout.inFlight` and records the most members seen stopped and not yet
    serving at the same time, and every handoff phase seen."""

    def __init__(self, kubeconfig: Path, namespace: str, name: str) -> None:
        self.args = (kubeconfig, namespace, name)
        self.most = 0
        self.phases: set[tuple[int, str]] = set()

    def poll(self) -> None:
        rollout = (groups.get(*self.args).get("status") or {}).get("rollout") or {}
        flights = rollout.get("inFlight") or ()
        for f in flights:
            self.phases.add((int(f["ordinal"]), str(f.get("phase"))))
        away = [f for f in flights if f.get("phase") in ("Stopping", "Activating", "Rejoining")]
        self.most = max(self.most, len(away))


def events(kubeconfig: Path, namespace: str, reason: str) -> list[str]:
    out = kubectl(kubeconfig, "-n", namespace, "get", "events", "-o", "json").stdout
    return [e.get("message") or "" for e in json.loads(out)["items"] if e.get("reason") == reason]


def test_no_room_for_a_standby_falls_back_cold_and_stops_one_member_at_a_time(
    kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess, namespace: str,
    stream: dict[str, Any], spark_connect: ConnectServer,
) -> None:
    name = unique("quota")
    spec = groups.consumer_group(name, kafka.bootstrap, stream["topic"], replicas=3,
                                 out_topic=stream["out"], strategy="WarmHandoff",
                                 connect_url=spark_connect.url)
    spec["spec"]["rollout"].update({"maxSurge": 2, "maxUnavailable": 1})
    groups.start(kubeconfig, namespace, spec)
    quota = {"apiVersion": "v1", "kind": "ResourceQuota",
             "metadata": {"name": "pods", "namespace": namespace},
             "spec": {"hard": {"pods": "4"}}}
    kubectl(kubeconfig, "apply", "-f", "-", input=json.dumps(quota))
    # The quota controller fills in its usage first.
    wait_for("the ResourceQuota's usage", lambda: get_json(
        kubeconfig, "-n", namespace, "resourcequota", "pods").get("status", {}).get("used"),
        timeout=30)
    time.sleep(3)
    generations = kafka.generations(name)

    with StoppedAtOnce(kubeconfig, namespace, name) as watch:
        trigger(kubeconfig, namespace, name, env_patch("quota"))
        obj = groups.wait_rollout(kubeconfig, namespace, name, 600)
    rollout = obj["status"]["rollout"]
    modes = {h["ordinal"]: h["mode"] for h in rollout["handoffs"]}
    print(f"quota: handoffs {rollout['handoffs']}; most stopped at once {watch.most}; "
          f"phases seen {sorted(watch.phases)}")
    assert sorted(modes) == [0, 1, 2]
    assert "cold" in modes.values() and "warm" in modes.values(), modes
    fallbacks = events(kubeconfig, namespace, "HandoffFellBackToColdStart")
    assert any("could not be created" in m and "quota" in m for m in fallbacks), fallbacks
    assert watch.most == 1, "two members were stopped at once with maxUnavailable 1"
    assert kafka.generations(name) == generations, "the broker formed a new generation"
    assert rollout["rebalancesDuringRollout"] == 0
    produced, out = drain(kafka, name, stream)
    missing = set(stream["producer"].produced) - set(out)
    assert produced > 0 and not missing, f"{len(missing)} of {produced} records lost"


def test_a_frozen_old_member_and_a_late_first_pass(
    kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess, namespace: str,
    stream: dict[str, Any], spark_connect: ConnectServer,
) -> None:
    """One 2-member warm rollout by stop-and-wait handoffs (the switchover's fallback), two
    things going wrong (one group for both: they touch different members, one after the other).

    Member 1's old process is frozen (SIGSTOP) once its standby is ready, held there 12 s
    (the rollout paused: the stop waits), then the rollout goes on: the frozen process gets
    its SIGTERM but exits only at its SIGKILL, 5 s later, and its replacement joins a moment
    after. Counted from that exit the absence is about 1 s; the broker has had no heartbeat for
    17 s, and that is what the roller records (from the process's last /status answer).
    The freeze stays under the liveness probe's 20-30 s, which would restart a frozen member.

    Then the operator itself is frozen for 10 s while member 0's old process exits: its first
    pass after the exit is late. It sends the activation and does not fall back to a cold
    start: member 0's handoff stays warm (its absence is the operator's 10 s)."""
    name = unique("frozen")
    # The session timeout is set, not tuned: the frozen member's 30-40 s away is measured as a
    # restart, and a tuned timeout (45 s with the fast Connect members) would then refuse
    # member 0's handoff (RestartUnsafe) before the late pass could be tested.
    spec = groups.consumer_group(name, kafka.bootstrap, stream["topic"], replicas=2,
                                 out_topic=stream["out"], strategy="WarmHandoff",
                                 session_ms=120000, connect_url=spark_connect.url)
    spec["spec"]["template"]["terminationGracePeriodSeconds"] = 5
    # The stop-and-wait handoff (what a switchover falls back to when the drain is refused or
    # late): with a drain, the activation goes out in the same pass and there is no late first
    # pass to test. The drain's own fallback (no answer in time: stop instead) is tested in
    # tests/unit/operator/observe/test_ask_member.py (test_a_switchover_activates_the_standby_...).
    spec["metadata"]["annotations"][STOP_HANDOFF_ANNOTATION] = "true"
    groups.start(kubeconfig, namespace, spec)
    generations = kafka.generations(name)
    trigger(kubeconfig, namespace, name, json.dumps([
        {"op": "add", "path": "/spec/template/env/-",
         "value": {"name": "ROLLOUT_MARK", "value": "frozen"}}]))

    def preparing(obj: dict[str, Any]) -> bool:
        flights = ((obj.get("status") or {}).get("rollout") or {}).get("inFlight") or ()
        return any(f.get("phase") == "Preparing" for f in flights)

    groups.wait_status(kubeconfig, namespace, name, preparing, 120, "preparing")
    kubectl(kubeconfig, "-n", namespace, "patch", "cg", name, "--type=merge", "-p",
            json.dumps({"spec": {"rollout": {"paused": True}}}))
    obj = groups.wait_status(kubeconfig, namespace, name, lambda o: any(
        b.get("name") == "NotPaused" and len(o["status"]["rollout"]["blockedBy"]) == 1
        for b in ((o.get("status") or {}).get("rollout") or {}).get("blockedBy") or ()),
        300, "held back by the pause alone (the standby ready)")
    print("blockedBy while paused:", obj["status"]["rollout"]["blockedBy"])
    pid, _ = member_process(namespace, f"{name}-1")
    os.kill(pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    time.sleep(12)
    kubectl(kubeconfig, "-n", namespace, "patch", "cg", name, "--type=merge", "-p",
            json.dumps({"spec": {"rollout": {"paused": False}}}))

    # Member 0's turn: freeze the operator as soon as its old member is being stopped.
    groups.wait_status(kubeconfig, namespace, name, lambda o: any(
        f.get("ordinal") == 0 and f.get("phase") == "Stopping"
        for f in ((o.get("status") or {}).get("rollout") or {}).get("inFlight") or ()),
        300, "member 0 seen Stopping", interval=0.1)
    assert operator.proc is not None
    os.kill(operator.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(10)  # member 0's old process exits meanwhile (it drains in about a second)
    finally:
        os.kill(operator.proc.pid, signal.SIGCONT)

    obj = groups.wait_rollout(kubeconfig, namespace, name, 300)
    rollout = obj["status"]["rollout"]
    handoffs = {h["ordinal"]: h for h in rollout["handoffs"]}
    print(f"frozen member and late pass: rolled out {time.monotonic() - frozen_at:.1f} s after "
          f"the freeze; handoffs {handoffs}")
    assert handoffs[1]["absenceMs"] > 12000, handoffs[1]
    assert handoffs[0]["mode"] == "warm", handoffs[0]
    assert events(kubeconfig, namespace, "HandoffFellBackToColdStart") == []
    assert kafka.generations(name) == generations, "the broker formed a new generation"
    _produced, out = drain(kafka, name, stream)
    assert not set(stream["producer"].produced) - set(out), "records lost"
