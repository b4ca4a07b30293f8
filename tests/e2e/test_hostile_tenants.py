"""Issue 46: one tenant's ConsumerGroups cannot slow, stop or blind the operator for everyone else.

On the whole system (the session's operator process, the real broker, the API server, the local
node running real members): a normal two-member group rolls alone, then rolls again beside a
hostile namespace holding
(a) a group of 8 members whose image answers `/status` with a large Content-Length and one byte
    every half second;
(b) a member that answers `/status` with a body of 100 MB;
(c) a group whose `topicPattern` is catastrophic for a backtracking engine, with a topic name on
    the broker long enough to make Python's `re` take minutes on it;
(d) a group with the longest bootstrap list the CRD admits, none of which answers (loopback
    listeners that never accept, and loopback ports that refuse: nothing leaves this machine).

Asserted: the normal group's rollout beside them completes, with 0 rebalances and no record lost;
the operator is never restarted and its `/healthz` answers throughout; each hostile group has a
condition or an Event that names its problem, with a bounded message. The two rollouts' times are
printed side by side (a timing never gates CI)."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from staticfleet.decisions.spec.bounds import MAX_BOOTSTRAP_ADDRESSES
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import create_namespace, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import Poller, wait_for
from tests.e2e.support import drain, env_patch, trigger
from tests.support import unique

# exclusive: it prints a rollout's time alone and beside the hostile groups, compared.
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive,
              pytest.mark.usefixtures("dump_broker_log_on_failure")]

HOSTILE_MEMBER = """
import http.server, os, sys, time
KIND = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path in ("/healthz", "/readyz"):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if KIND == "trickle":
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            for _ in range(100000):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.5)
        else:
            self.send_response(200)
            self.send_header("Content-Length", str(100 << 20))
            self.end_headers()
            chunk = b"x" * (1 << 20)
            for _ in range(100):
                self.wfile.write(chunk)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer((os.environ["STATICFLEET_HTTP_HOST"], 8080), H).serve_forever()
"""
"""A member image with a bug in its `/status` handler (`spec.template.command`): the probes
answer, `/status` trickles (`trickle`) or is 100 MB (`huge`)."""

CATASTROPHIC = "([a-z._-]+)+X"
"""Exponential for a backtracking engine on a long name of those characters without an X."""
LONG_TOPIC = "a" * 40
"""At 24 characters Python's `re` took 0.7 s on the pattern, about 1.8x more per character."""
MESSAGE_CAP = 1024


class Health(Poller):
    """The operator's /healthz every half second: the longest it took to answer, and failures."""

    def __init__(self, operator: OperatorProcess) -> None:
        self.url = f"http://127.0.0.1:{operator.health_port}/healthz"
        self.longest, self.failures, self.polls = 0.0, [], 0

    def poll(self) -> None:
        began = time.monotonic()
        try:
            with urllib.request.urlopen(self.url, timeout=5) as resp:
                ok = resp.status == 200
        except OSError as exc:
            ok, err = False, str(exc)
        took = time.monotonic() - began
        self.polls += 1
        self.longest = max(self.longest, took)
        if not ok:
            self.failures.append(f"{time.strftime('%T')}: {locals().get('err', 'not 200')}")


@pytest.fixture
def silent_addresses() -> Iterator[list[str]]:
    """Loopback addresses that never answer Kafka: listeners that never accept (their backlog
    holds the connection; nothing is ever sent) and ports that refuse, alternately."""
    socks, addresses = [], []
    for i in range(MAX_BOOTSTRAP_ADDRESSES):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        if i % 2 == 0:
            sock.listen(1)  # never accepted
        addresses.append(f"127.0.0.1:{sock.getsockname()[1]}")
        socks.append(sock)  # odd ones bound, not listening: a connect is refused
    yield addresses
    for sock in socks:
        sock.close()


@pytest.fixture
def hostile_namespace(kubeconfig: Path) -> Iterator[str]:
    name = unique("hostile")
    create_namespace(kubeconfig, name)
    yield name
    kubectl(kubeconfig, "delete", "namespace", name, "--wait=false", check=False)


def roll(kubeconfig: Path, namespace: str, name: str, mark: str) -> tuple[float, dict[str, Any]]:
    """Trigger a rollout of the group and wait until it is complete: its seconds and status."""
    counters = groups.counters_settled(kubeconfig, namespace, name)
    began = time.monotonic()
    trigger(kubeconfig, namespace, name, env_patch(mark))
    obj = groups.wait_rollout(kubeconfig, namespace, name, 600)
    took = time.monotonic() - began
    status = obj["status"]
    assert status["rollout"]["rebalancesDuringRollout"] == 0, status["rollout"]
    assert not groups.rebalances_seen(counters, status), status
    return took, status


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


def test_hostile_groups_cost_a_normal_group_nothing(
    kafka: KafkaBroker, kubeconfig: Path, operator: OperatorProcess, namespace: str,
    hostile_namespace: str, stream: dict[str, Any], spark_connect: ConnectServer,
    kafka_admin: AdminClient, silent_addresses: list[str],
) -> None:
    name = unique("normal")
    groups.start(kubeconfig, namespace, groups.consumer_group(
        name, kafka.bootstrap, stream["topic"], replicas=2, out_topic=stream["out"],
        strategy="WarmHandoff", connect_url=spark_connect.url))
    generations = kafka.generations(name)
    alone, _ = roll(kubeconfig, namespace, name, "alone")

    topic = f"{LONG_TOPIC}-{unique('p')}".replace("-", ".")
    kafka_admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    names = {key: unique(key) for key in ("trickle", "huge", "pattern", "bootstrap")}
    hostile = {
        "trickle": groups.consumer_group(
            names["trickle"], kafka.bootstrap, stream["topic"], replicas=8,
            command=["python", "-c", HOSTILE_MEMBER, "trickle"]),
        "huge": groups.consumer_group(
            names["huge"], kafka.bootstrap, stream["topic"], replicas=1,
            command=["python", "-c", HOSTILE_MEMBER, "huge"]),
        "pattern": groups.consumer_group(
            names["pattern"], kafka.bootstrap, stream["topic"], replicas=1,
            command=groups.PLACEHOLDER_MEMBER),
        "bootstrap": groups.consumer_group(
            names["bootstrap"], ",".join(silent_addresses), stream["topic"], replicas=1,
            command=groups.PLACEHOLDER_MEMBER),
    }
    kafka_spec = hostile["pattern"]["spec"]["kafka"]
    kafka_spec.pop("topics")
    kafka_spec["topicPattern"] = CATASTROPHIC
    pid = operator.pid
    with Health(operator) as health:
        for obj in hostile.values():
            groups.apply(kubeconfig, hostile_namespace, obj)
        # The hostile members run and their reads are under way before the rollout starts.
        wait_for("the trickling members running", lambda: sum(
            (p.get("status") or {}).get("phase") == "Running"
            for p in groups.pods(kubeconfig, hostile_namespace, names["trickle"])) == 8,
            timeout=180)
        time.sleep(10)
        beside, _ = roll(kubeconfig, namespace, name, "beside")
        found = {key: wait_for(f"{key}: a condition or Event naming its problem",
                               lambda key=key: problem_of(kubeconfig, hostile_namespace, key,
                                                          names[key]),
                               timeout=120, interval=2.0, describe=lambda key=key: (
                                   groups.get(kubeconfig, hostile_namespace, names[key])
                                   .get("status")))
                 for key in hostile}
    kafka_admin.delete_topics([topic])
    print(f"normal group's rollout: alone {alone:.1f} s, beside the hostile groups "
          f"{beside:.1f} s ({beside / alone:.2f}x); /healthz longest {health.longest:.2f} s over "
          f"{health.polls} polls; hostile problems: {found}")

    assert operator.pid == pid and operator.proc is not None and operator.proc.poll() is None, (
        "the operator was restarted")
    assert not health.failures, f"/healthz did not answer: {health.failures[:5]}"
    assert kafka.generations(name) == generations, "the normal group rebalanced"
    produced, out = drain(kafka, name, stream)
    missing = set(stream["producer"].produced) - set(out)
    assert produced > 0 and not missing, f"{len(missing)} of {produced} records lost"
    for key, said in found.items():
        assert len(said) <= MESSAGE_CAP, f"{key}: {len(said)} characters"
    assert f"{names['trickle']}-" in found["trickle"], found
    assert f"{names['huge']}-0" in found["huge"], found
    assert "127.0.0.1:" in found["bootstrap"] and found["bootstrap"].count("127.0.0.1:") <= 3


def problem_of(kubeconfig: Path, namespace: str, key: str, name: str) -> str | None:
    """What the hostile group `key` (named `name`) is told about its problem: its Degraded
    condition's message, or its Warning Event's, as `reason: message`."""
    obj = groups.get(kubeconfig, namespace, name)
    if key in ("trickle", "huge"):
        for event in groups.events(kubeconfig, namespace, name):
            if event.get("reason") == "MemberStatusSlow":
                return f"MemberStatusSlow: {event.get('message')}"
        return None
    if key == "pattern":  # RE2 matches it at once: the pattern matches no topic, and says so
        idle = conditions(obj).get("IdleMembers") or {}
        if idle.get("status") == "True" and "matches no topic" in str(idle.get("message")):
            return f"{idle['reason']}: {idle.get('message')}"
        return None
    degraded = conditions(obj).get("Degraded") or {}
    if degraded.get("status") == "True" and degraded.get("reason") == "KafkaUnreachable":
        return f"{degraded['reason']}: {degraded.get('message')}"
    return None
