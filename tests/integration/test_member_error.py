"""A member that stops on its transform's error says so in its own words: the termination message
of its pod, as the local node reports it, is the transform's error (the exception's type, error
condition and message), never the last line of the JVM stack trace that ends its log.

The member pod is the operator's own (`builders.build_member_pod`), run by the local node against
the real broker and API server; no operator runs, so the pod keeps failing and restarting."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from staticfleet.decisions import builders
from staticfleet.decisions.members.observed import member_failure, refusal_line
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.procs import ProcessRecord
from staticfleet_dev.testkit.kube import create_namespace, kubectl, to_yaml
from staticfleet_dev.testkit.poll import wait_for
from tests.integration.runtime_spark_helpers import REPO, produce
from tests.integration.spark_test_transforms import POISON
from tests.support import unique

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dump_broker_log_on_failure")]

TIMEOUTS = EffectiveTimeouts(session_timeout_ms=10000, heartbeat_interval_ms=1000,
                             max_poll_interval_ms=60000, sources={})


@pytest.fixture
def ns(kubeconfig: Path, local_node: ProcessRecord) -> Iterator[str]:
    name = unique("err")
    create_namespace(kubeconfig, name)
    yield name
    kubectl(kubeconfig, "delete", "namespace", name, "--wait=false", check=False)


def member_pod(namespace: str, bootstrap: str, topic: str,
               group: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Member 0 of a one-member group whose transform calls `raise_error` on POISON records,
    with no dead-letter topic: such a batch fails for good and the member exits; and the
    group's member token Secret, which the pod mounts (the operator would make it)."""
    spec = ConsumerGroupSpec.from_body({
        "apiVersion": "staticfleet.io/v1alpha1", "kind": "ConsumerGroup",
        "metadata": {"name": group, "namespace": namespace, "generation": 1},
        "spec": {
            "replicas": 1,
            "kafka": {"bootstrapServers": bootstrap, "topics": [topic]},
            "template": {"image": "staticfleet/member:test",
                         "env": [{"name": "PYTHONPATH", "value": str(REPO)}]},
            "processing": {
                "transform": "tests.integration.spark_test_transforms:reject_poison",
                "spark": {"mode": "local", "master": "local[1]"},
                "batch": {"maxRecords": 100, "maxWaitMs": 200},
                "retry": {"attempts": 2, "backoffMs": 100, "maxBackoffMs": 200},
                "sink": {"type": "null"},
            },
        }})
    return (builders.build_member_pod(spec, 0, builders.member_spec_view(spec, TIMEOUTS)),
            builders.build_member_token_secret(spec, "t0ken"))


def test_a_transform_error_on_real_records_is_the_members_termination_message(
        kafka: KafkaBroker, make_topic: Callable[..., str], kubeconfig: Path, ns: str) -> None:
    topic, group = make_topic("in", 1), unique("g")
    produce(kafka.bootstrap, topic, [(b"k", b"fine", 0), (b"k", POISON, 0)])
    pod, token = member_pod(ns, kafka.bootstrap, topic, group)
    name = pod["metadata"]["name"]
    for obj in (token, pod):
        kubectl(kubeconfig, "-n", ns, "apply", "-f", "-", input=to_yaml(obj))

    def failed() -> dict[str, Any] | None:
        live = json.loads(kubectl(kubeconfig, "-n", ns, "get", "pod", name, "-o",
                                  "json").stdout)
        return live if member_failure(live) is not None else None

    live = wait_for("the member to exit on the failed batch", failed, timeout=300, interval=1.0)
    failure = member_failure(live)
    assert failure is not None and failure.exit_code == 1
    message = failure.message
    print(f"termination message: {message}")
    assert message.startswith("consumer_runtime: member stops: batch "), message
    assert message.endswith("failed 2 times and no dead-letter topic is set: "
                            "SparkRuntimeException: [USER_RAISED_EXCEPTION] poison record "
                            "SQLSTATE: P0001"), message
    assert "\n" not in message and " at org." not in message
    assert refusal_line(message) == message, "the operator quotes it as it is"
