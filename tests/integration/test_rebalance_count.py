"""The rebalance count against the real broker, the real API server, the local node and the
session's operator (issue 46, item 4): the count cannot swallow a rebalance.

- Every member of a group frozen (SIGSTOP) past its session timeout: the broker drops them and
  the group is Empty (a rebalance no member's counter can show), then they go on and join again
  (another). `status.rebalances` counts both: as many as the generations the broker made (its
  log), where the count before counted one at most.
- A credit of a rebalance counted from the group's state that no member's counter ever shows,
  as the operator before this change left it in `status.rebalancesFromState` and its
  successor reads it (a coordinator move counted twice from the state, with one counter
  increase, made one in the ledger e2e): it expires after one session timeout and a pass
  interval, where before it stayed until a counter increase paid it off; a scale-up's
  rebalance after it is counted.
- Each quiet group's `status.groupGeneration` (the newest generation its members report) is
  the broker's last stabilized generation: a credit counted from the state waits for the
  generation after the one it was counted in, and nothing else pays it off.

The members are real `consumer_runtime` processes whose Spark runs through the session's
Connect server (a Python process that starts in seconds): the subject is the operator's count.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit import ledger as kit
from staticfleet_dev.testkit.kube import kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from tests.e2e.support import member_process
from tests.integration.support import consumer_group, patch_cg, ready_and_stable, summary
from tests.support import unique

pytestmark = pytest.mark.integration

SESSION_S = 10
QUIET_S = 8.0


def status(kubeconfig: Path, namespace: str, name: str) -> dict[str, Any]:
    return dict(groups.get(kubeconfig, namespace, name).get("status") or {})


def quiet(kafka: KafkaBroker, kubeconfig: Path, namespace: str, name: str,
          members: int) -> tuple[int, int]:
    """Wait until the group is Ready and Stable with `members` members, the broker stabilized
    no generation for `QUIET_S` (seen as: its last one unchanged that long), the operator read
    every member's counter as it is now and no rebalance waits for its cause; then
    (status.rebalances, the broker's last generation)."""
    seen: dict[str, Any] = {"gen": None, "since": time.monotonic()}

    def settled() -> tuple[int, int] | None:
        gen = max(kafka.generations(name), default=0)
        if gen != seen["gen"]:
            seen.update(gen=gen, since=time.monotonic())
            return None
        if time.monotonic() - seen["since"] < QUIET_S:
            return None
        if ready_and_stable(kubeconfig, namespace, name, members) is None:
            return None
        st = seen["status"] = status(kubeconfig, namespace, name)
        if (st.get("rebalanceLedger") or {}).get("pending"):
            return None
        now = seen["counters"] = groups.member_counters(kubeconfig, namespace, name)
        read = st.get("memberRebalanceCounters") or {}
        if now is None or any(read.get(uid) != n for uid, n in now.items()):
            return None
        return int(st.get("rebalances") or 0), gen

    quiet_at = wait_for(f"{name} quiet with {members} members", settled, 240, interval=1,
                        describe=lambda: json.dumps({
                            "members' counters": seen.get("counters"), "generation": seen["gen"],
                            **{k: seen.get("status", {}).get(k) for k in (
                                "groupState", "rebalances", "memberRebalanceCounters",
                                "rebalancesFromState", "stateCountedRebalances",
                                "rebalanceLedger")}}, indent=1)[-4000:])
    # The generation the members report (librdkafka's) is the broker's: the one the credits
    # are tied to (the broker's last stabilized, in its log's order: it may start again).
    assert seen["status"].get("groupGeneration") == kafka.generations(name)[-1], (
        seen["status"].get("groupGeneration"), kafka.generations(name))
    return quiet_at


class StatusTrail:
    """The group's status as each pass wrote it, read every half second in a thread: what a
    count that went wrong was built from (printed with the assertion)."""

    KEYS = ("groupState", "rebalances", "groupGeneration", "memberRebalanceCounters",
            "stateCountedRebalances")

    def __init__(self, kubeconfig: Path, namespace: str, name: str) -> None:
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(kubeconfig, namespace, name),
                                        daemon=True)

    def _run(self, kubeconfig: Path, namespace: str, name: str) -> None:
        while not self._stop.wait(0.5):
            try:
                st = status(kubeconfig, namespace, name)
            except Exception as exc:  # a diagnostic: a failed read is a line of it
                st = {"error": str(exc)}
            line = json.dumps({k: st.get(k) for k in self.KEYS}, sort_keys=True)
            if not self.seen or self.seen[-1].split(" ", 1)[1] != line:
                self.seen.append(f"{time.strftime('%H:%M:%S')} {line}")

    def __enter__(self) -> StatusTrail:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def __str__(self) -> str:
        return "the status, pass by pass:\n" + "\n".join(self.seen)


def form(kubeconfig: Path, namespace: str, kafka: KafkaBroker, name: str, topic: str,
         connect_url: str) -> tuple[int, int]:
    cg = consumer_group(name, bootstrap=kafka.bootstrap, topics=[topic], replicas=2,
                        connect_url=connect_url)
    cg["spec"]["membership"]["timeouts"] = {"sessionTimeoutMs": SESSION_S * 1000}
    groups.apply(kubeconfig, namespace, cg)
    wait_for("Ready with 2 members", lambda: ready_and_stable(kubeconfig, namespace, name, 2),
             timeout=240, interval=1, describe=lambda: summary(kubeconfig, namespace, name))
    return quiet(kafka, kubeconfig, namespace, name, 2)


def test_every_member_away_past_its_session_then_back_is_counted(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        make_topic: Callable[..., str], spark_connect: ConnectServer) -> None:
    name = unique("away")
    topic = make_topic("away", 4)
    before, gen_before = form(kubeconfig, namespace, kafka, name, topic, spark_connect.url)
    # The broker's rebalances are counted from its log's lines, not its generation: a classic
    # group that empties starts its generations again from 0 when it forms again (CI: 2 -> 2).
    lines_before = len(kafka.rebalance_lines(name))
    pids = [member_process(namespace, f"{name}-{o}")[0] for o in (0, 1)]
    with StatusTrail(kubeconfig, namespace, name) as trail:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            wait_for("the operator saw the group Empty", lambda: status(
                kubeconfig, namespace, name).get("groupState") == "Empty",
                timeout=SESSION_S + 60, interval=0.5,
                describe=lambda: summary(kubeconfig, namespace, name))
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        after, gen_after = quiet(kafka, kubeconfig, namespace, name, 2)
    print(trail)
    lines = kafka.rebalance_lines(name)
    made = len(lines) - lines_before
    print(f"the broker's rebalances {made} (generations {gen_before} -> {gen_after}); "
          f"status.rebalances {before} -> {after}")
    print("\n".join(lines[-6:]))
    assert made >= 2, "the group emptied and formed again: two rebalances at least"
    assert after - before == made, (before, after, gen_before, gen_after)
    causes = kit.causes(kubeconfig, namespace, name)
    assert "unknown" not in causes, kit.ledger(kubeconfig, namespace, name)


def test_a_credit_no_counter_shows_expires_and_the_next_rebalance_is_counted(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        make_topic: Callable[..., str], spark_connect: ConnectServer) -> None:
    name = unique("credit")
    topic = make_topic("credit", 4)
    before, gen_before = form(kubeconfig, namespace, kafka, name, topic, spark_connect.url)
    # A credit that no member's counter will ever show, as the operator before this change
    # wrote it (a count alone, no time), read by its successor: written while the operator is
    # stopped (a running one takes its own last write for the status it reads).
    operator.stop()
    try:
        kubectl(kubeconfig, "-n", namespace, "patch", "consumergroup", name,
                "--subresource=status", "--type=merge", "-p",
                json.dumps({"status": {"rebalancesFromState": 1}}))
    finally:
        operator.start()
    # Its window (the session timeout and a pass interval) runs from the first pass that
    # reads it, which may come a rest interval (60 s) after the write; a pass is due when it
    # ends. Before this change it never expired.
    started = time.monotonic()
    wait_for("the credit expired", lambda: not status(kubeconfig, namespace, name).get(
        "rebalancesFromState"), timeout=60 + SESSION_S + 10 + 40, interval=0.5,
        describe=lambda: json.dumps({k: status(kubeconfig, namespace, name).get(k) for k in (
            "rebalancesFromState", "stateCountedRebalances", "lastReconciled")}))
    print(f"the credit expired {time.monotonic() - started:.1f} s after it was written")
    assert status(kubeconfig, namespace, name).get("rebalances") == before, "nothing counted"
    patch_cg(kubeconfig, namespace, name, {"spec": {"replicas": 3}})
    after, gen_after = quiet(kafka, kubeconfig, namespace, name, 3)
    made = gen_after - gen_before
    print(f"the broker's generations {gen_before} -> {gen_after}; status.rebalances "
          f"{before} -> {after}")
    assert made >= 1
    assert after - before == made, (before, after, gen_before, gen_after)
    assert "scale" in kit.causes(kubeconfig, namespace, name), kit.ledger(
        kubeconfig, namespace, name)
