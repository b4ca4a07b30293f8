"""Day-2 operations against the whole system: a member's process crashes and restarts in place.

Found on the earlier operator: an in-place container restart was measured as a restart as long
as the pod's age, the automatic session timeout and max.poll.interval.ms rose (x7.8 for a pod
230 s old), the revision changed, and every member was restarted without anyone asking. And a
container restarted while a rollout was paused ran the newest spec's config (one ConfigMap for
all revisions, read at each container start).

The first finding depended on the pod's age; this test used to sleep until the pods were 100 s
old to replay it. The decision is pure and a table test holds it for old pods
(tests/unit/operator/timeouts/test_decide_timeouts.py::test_a_crash_restarted_in_place_teaches_the_timeouts_nothing,
a pod three days old); here the crash happens as soon as the group is Ready, and the same
assertions (no timeout, revision or rollout change from a crash) hold on the whole system.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from tests.e2e.support import crash, member_process
from tests.support import unique

# exclusive: an e2e module runs the operator, members and a producer; on this machine's two
# cores two of them side by side overloaded it (tests/lanes.py).
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive,
              pytest.mark.usefixtures("dump_broker_log_on_failure")]

REPLICAS = 3


def transform_of(env: dict[str, str]) -> str:
    return str(json.loads(env["STATICFLEET_CONFIG"])["processing"]["transform"])


def test_crashes_restarted_in_place_change_no_timeout_and_run_their_own_revision(
    kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess, namespace: str,
    stream: dict[str, Any], spark_connect: ConnectServer,
) -> None:
    name = unique("crash")
    ready = groups.start(kubeconfig, namespace, groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=REPLICAS,
        connect_url=spark_connect.url))
    revision = ready["status"]["updateRevision"]
    session = ready["status"]["timeouts"]["sessionTimeoutMs"]
    max_poll = ready["status"]["timeouts"]["maxPollIntervalMs"]

    # 1. A crash restarts member 1's container in place; nothing else may follow from it.
    crash(kubeconfig, namespace, f"{name}-1")
    groups.wait_status(kubeconfig, namespace, name, groups.ready, 180, "Ready after the crash")
    time.sleep(15)  # several passes of the operator
    after = groups.get(kubeconfig, namespace, name)["status"]
    assert after["timeouts"]["sessionTimeoutMs"] == session, after["timeouts"]
    assert after["timeouts"]["maxPollIntervalMs"] == max_poll, after["timeouts"]
    assert after["updateRevision"] == revision, "the crash changed the revision"
    assert after["rollout"]["phase"] == "Idle", after["rollout"]
    assert not groups.events(kubeconfig, namespace, name, "MemberRestarting")
    assert "restartSecondsRecent" not in (after.get("measurements") or {}), after["measurements"]

    # 2. While a rollout is paused, a crashed member comes back with its own revision's config.
    kubectl(kubeconfig, "-n", namespace, "patch", "cg", name, "--type=merge", "-p", json.dumps(
        {"spec": {"rollout": {"paused": True},
                  "processing": {"transform": "consumer_runtime.transforms:count_by_key"}}}))
    groups.wait_status(kubeconfig, namespace, name,
                       lambda o: (o["status"].get("rollout") or {}).get("phase") == "Paused",
                       60, "the rollout paused")
    crash(kubeconfig, namespace, f"{name}-2")
    _, env = member_process(namespace, f"{name}-2")
    assert transform_of(env) == "consumer_runtime.transforms:identity", (
        "a container restarted during a paused rollout ran the new spec's transform")

    # 3. The requested rollout runs with no rebalance, and every member runs the new config.
    generations_before = kafka.generations(name)
    kubectl(kubeconfig, "-n", namespace, "patch", "cg", name, "--type=merge", "-p",
            '{"spec": {"rollout": {"paused": false}}}')
    done = groups.wait_rollout(kubeconfig, namespace, name, 600)
    assert done["status"]["rollout"]["rebalancesDuringRollout"] == 0
    assert kafka.generations(name) == generations_before, "the broker formed a new generation"
    for ordinal in range(REPLICAS):
        _, env = member_process(namespace, f"{name}-{ordinal}")
        assert transform_of(env) == "consumer_runtime.transforms:count_by_key"
    assert done["status"]["timeouts"]["sessionTimeoutMs"] <= 120000
