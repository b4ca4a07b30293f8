"""Lag-driven autoscaling on a rebalance budget, on the real broker and API server.

A group of members bound by a slow call per batch (not by CPU: more members really process
more on this 2-core machine) gets a load step: the autoscaler scales it up by the step that
brings the lag under its target, and back down in one step once the load has been low for its
window; every change is a planned rebalance, every count divides the partition count, nothing is
lost. Then a KEDA-like scaler writes the scale subresource: the autoscaler stands aside, and
staticfleet still makes the scaler's step planned.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from staticfleet import apply as kube_apply
from staticfleet_dev import dashboard
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.prometheus import Prometheus, dashboard_answers
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.stream import SteadyProducer, read_all
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.operator import OperatorProcess
from tests.support import unique

# exclusive: it makes load and the autoscaler decides on the members' measured throughput,
# which a second heavy module on the same two cores would change.
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive,
              pytest.mark.usefixtures("dump_broker_log_on_failure")]

PARTITIONS = 4
TARGET_S = 10
WINDOW_S = 20
CHECK_S = 30
BUDGET = 6
"""Membership changes an hour: room for a second step down (see step 2)."""


def events(kubeconfig: Path, namespace: str, name: str) -> list[dict[str, Any]]:
    return sorted(groups.events(kubeconfig, namespace, name),
                  key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or ()
                 if c["type"] == type_), {})


def scaled_to(replicas: int) -> Callable[[dict[str, Any]], bool]:
    def check(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        return (obj["spec"]["replicas"] == replicas and groups.ready(obj)
                and status.get("replicas") == replicas
                and status.get("readyReplicas") == replicas)
    return check


def test_a_load_step_scales_up_and_back_down_with_planned_rebalances_only_and_keda_is_obeyed(
    kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess, namespace: str,
    make_topic: Callable[..., str], spark_connect: ConnectServer, prometheus: Prometheus,
) -> None:
    name = unique("auto")
    topic, out = make_topic("auto-in", PARTITIONS), make_topic("auto-out", PARTITIONS)
    spec = groups.consumer_group(
        name, kafka.bootstrap, topic, replicas=1, out_topic=out, max_records=50,
        connect_url=spark_connect.url)
    spec["spec"]["processing"]["transform"] = "staticfleet_dev.testkit.transforms:latency_bound"
    spec["spec"]["processing"]["batch"]["maxWaitMs"] = 200
    spec["spec"]["autoscaling"] = {
        "minReplicas": 1, "maxReplicas": 8, "targetLagSeconds": TARGET_S,
        "scaleDownWindowSeconds": WINDOW_S, "scaleUpCheckSeconds": CHECK_S,
        "maxMembershipChangesPerHour": BUDGET}
    base = SteadyProducer(kafka.bootstrap, topic, rate=20).start()
    producers = [base]
    try:
        groups.apply(kubeconfig, namespace, spec)
        groups.wait_status(kubeconfig, namespace, name, groups.ready, 240, "Ready")
        steady = groups.wait_status(
            kubeconfig, namespace, name,
            lambda o: condition(o, "Autoscaling").get("reason") == "LagOnTarget", 90,
            "on target at the base load")
        formed = steady["status"]

        # 1. The load step: 15 times the base load, several times what one member does. The
        #    first step depends on the lag when the step is first seen; the group must end up
        #    keeping up, at an even count.
        began = time.monotonic()
        step = SteadyProducer(kafka.bootstrap, topic, rate=300).start()
        producers.append(step)
        up = groups.wait_status(kubeconfig, namespace, name,
                                lambda o: o["spec"]["replicas"] > 1, 120, "scaled up")
        auto = up["status"].get("autoscaling") or {}
        print(f"scaled up to {up['spec']['replicas']} {time.monotonic() - began:.1f} s after "
              f"the load step: {auto.get('lastScale')}")
        assert PARTITIONS % up["spec"]["replicas"] == 0, auto
        # LagOnTarget comes only once the last scale-up was judged (CHECK_S after it) and
        # the lag is within the target under the load.
        keeping_up = groups.wait_status(
            kubeconfig, namespace, name,
            lambda o: scaled_to(o["spec"]["replicas"])(o) and o["spec"]["replicas"] > 1
            and condition(o, "Autoscaling").get("reason") == "LagOnTarget", 300,
            "keeping up with the load: Ready, the scale-up judged, the lag on target")
        peak = keeping_up["spec"]["replicas"]
        print(f"keeping up at {peak} members {time.monotonic() - began:.1f} s after the step")
        step.stop()

        # 2. Low load again: after the scale-up was judged and the window passed, down in one
        #    step to what the window's peak arrival needs. A window that still holds the end of
        #    the load step (the arrival is measured between two reads of the end offsets, 15 s
        #    apart) needs more than one member (CI saw 4 -> 2 on a peak of 117 records/s), then
        #    the next window brings it to 1.
        down = groups.wait_status(kubeconfig, namespace, name, scaled_to(1),
                                  CHECK_S + 2 * WINDOW_S + 240, "scaled back down to 1")
        auto = down["status"]["autoscaling"]
        print(f"back to 1 {time.monotonic() - began:.1f} s after the load step: "
              f"{auto.get('lastScale')}")
        changes = [(int(a), int(b)) for e in events(kubeconfig, namespace, name)
                   if e["reason"] in ("ScalingUp", "ScalingDown")
                   for a, b in re.findall(r"scaling (\d+) -> (\d+)", e["message"])]
        ups = [c for c in changes if c[1] > c[0]]
        downs = [c for c in changes if c[1] < c[0]]
        assert changes == ups + downs, f"every step up before every step down: {changes}"
        assert all(a[1] == b[0] for a, b in itertools.pairwise(changes)), changes
        assert ups and ups[0][0] == 1, changes
        assert downs and downs[-1][1] == 1 and len(downs) <= 2, (
            f"down in one step to what the window's peak needs, not a member at a time: "
            f"{changes}")
        assert all(PARTITIONS % b == 0 for _, b in changes), changes
        assert len(auto["changes"]) == len(changes) <= BUDGET, (auto, changes)
        assert auto["budgetLeft"] == BUDGET - len(changes), auto
        status = down["status"]
        assert status["rebalances"] - formed["rebalances"] == (
            status["plannedRebalances"] - formed.get("plannedRebalances", 0)) > 0, (
            "every rebalance of the scale-up and the scale-down was planned", formed, status)
        metrics = operator.metrics()
        for series in ("staticfleet_consumergroup_lag_seconds",
                       "staticfleet_autoscaler_desired_replicas",
                       "staticfleet_autoscaler_budget_left",
                       "staticfleet_autoscaler_target_lag_seconds"):
            assert re.search(rf'^{series}{{[^}}]*group="{name}"', metrics, re.M), series
        assert re.search(rf'^staticfleet_autoscaler_budget_left{{[^}}]*group="{name}"[^}}]*}} '
                         rf'{BUDGET - len(changes)}\.0$', metrics, re.M)
        # The dashboard's autoscaling panels, asked of the Prometheus that scraped it.
        answers = dashboard_answers(prometheus, namespace, name)
        for graph in dashboard.graphs():
            if graph.only_with:
                assert any(series for _, series in answers[graph.title]), graph.title

        # 3. A KEDA-like scaler takes replicas over through the scale subresource: the
        #    autoscaler stands aside (it would scale down again), the step is still planned.
        kube = kube_apply.Kube(kube_apply.load_client(str(kubeconfig)))
        kube.custom.patch_namespaced_custom_object_scale(
            "staticfleet.io", "v1alpha1", namespace, "consumergroups", name,
            {"spec": {"replicas": 2}}, field_manager="keda-operator",
            _content_type="application/merge-patch+json")
        keda = groups.wait_status(kubeconfig, namespace, name, scaled_to(2), 180,
                                  "Ready with the scaler's 2")
        aside = condition(keda, "Autoscaling")
        assert (aside["status"], aside["reason"]) == ("False", "ReplicasOwnedElsewhere"), aside
        assert "keda-operator" in aside["message"]
        time.sleep(WINDOW_S + 10)  # long enough for the autoscaler to have scaled down
        held = groups.get(kubeconfig, namespace, name)
        assert held["spec"]["replicas"] == 2, held["status"].get("autoscaling")
        assert held["status"]["rebalances"] - formed["rebalances"] == (
            held["status"]["plannedRebalances"] - formed.get("plannedRebalances", 0))
        warnings = [(e["reason"], e["message"]) for e in events(kubeconfig, namespace, name)
                    if e["type"] == "Warning"]
        assert warnings == []
    finally:
        for producer in producers:
            producer.stop()

    produced: list[bytes] = []
    for producer in producers:
        assert not producer.failed, producer.failed
        produced += producer.produced
    groups.wait_caught_up(kafka.bootstrap, name, [topic])
    missing = set(produced) - set(read_all(kafka.bootstrap, out))
    assert produced and not missing, f"{len(missing)} of {len(produced)} records lost"
    print(json.dumps(groups.get(kubeconfig, namespace, name)["status"]["autoscaling"]))
