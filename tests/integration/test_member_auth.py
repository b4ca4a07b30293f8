"""Only the operator steers a member (issue 21, item 1 and 5), against the real broker, API
server and local node.

The runtime alone: a live member in its group refuses `POST /leave`, `/rejoin` and `/activate`
without its group's token (401) or with another one (403), counts each refusal in
`staticfleet_member_control_refused_total`, names the caller in its log, and stays in the group as
the broker sees it; a token rotated in its file is taken without a restart.

With the operator: each group gets a Secret `<cg>-member-token`, owned by the ConsumerGroup and
mounted into the members; the operator's own calls (a scale-down's `/leave`) carry the token and
are taken; the Secret deleted by hand is made again (a new token, which the members read from their
updated volume) and the operator's calls keep working.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from staticfleet_dev import environment
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from staticfleet_dev.testkit import groups
from staticfleet_dev.testkit.kube import get_json, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from tests.integration.runtime_spark_helpers import produce, running, runtime_config
from tests.integration.support import (
    assigned_everywhere,
    consumer_group,
    member_ids,
    member_pods,
    patch_cg,
    ready_and_stable,
    summary,
    through,
)
from tests.support import unique

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dump_broker_log_on_failure")]

PORT = 8080
REFUSED = re.compile(
    r'^staticfleet_member_control_refused_total\{([^}]*)\} ([0-9.e+]+)$', re.MULTILINE)


def post(url: str, header: str | None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=b"", method="POST")
    if header is not None:
        request.add_header("Authorization", header)
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def refusals(base: str) -> dict[tuple[str, str], float]:
    """The member's refusal counter by (action, reason), the non-zero series."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for labels, value in REFUSED.findall(text):
        found = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if float(value):
            out[(found["action"], found["reason"])] = float(value)
    return out


def attack(base: str) -> list[tuple[int, str]]:
    """What any pod that reaches the member port could try: each request without a credential
    and with a made-up one."""
    out = []
    for path in ("/leave", "/rejoin", "/activate"):
        for header in (None, "Bearer not-the-groups-token"):
            code, body = post(f"{base}{path}", header)
            out.append((code, body.get("error", "")))
    return out


ATTACK_ANSWERS = [(401, "unauthorized"), (403, "forbidden")] * 3
ATTACK_COUNTS = {(action, reason): 1.0 for action in ("leave", "rejoin", "activate")
                 for reason in ("missing", "wrong")}


def test_a_live_member_refuses_requests_without_its_token_and_stays_in_the_group(
        kafka: KafkaBroker, kafka_admin: AdminClient, make_topic: Callable[..., str],
        tmp_path: Path, spark_connect: ConnectServer) -> None:
    topic = make_topic("in", 4)
    group = unique("g")
    instance = f"{group}-0"
    config = runtime_config(kafka.bootstrap, group, topic, sink={"type": "null"},
                            session_ms=30000, spark=through(spark_connect))
    produce(kafka.bootstrap, topic, [(b"k", b"v%04d" % i, i % 4) for i in range(200)])
    with running(config, tmp_path / "member.log", instance) as member:
        base = f"http://127.0.0.1:{member.port}"
        before = member.wait_status(lambda s: len(s["assignment"]) == 4
                                    and s["recordsProcessed"] == 200, 400, "processing")
        ids_before = member_ids(kafka_admin, group)

        answers = attack(base)
        counted = refusals(base)
        time.sleep(3)  # a leave taken would show by now (LeaveGroup at once, ~1 s)
        after = member.status() or {}
        ids_after = member_ids(kafka_admin, group)
        owned = assigned_everywhere(kafka_admin, group, [instance], 4)
        produce(kafka.bootstrap, topic, [(b"k", b"w%04d" % i, i % 4) for i in range(100)])
        member.wait_status(lambda s: s["recordsProcessed"] == 300, 60, "still processing")

        # The group's token rotated in the file (as a kubelet updates a mounted Secret): the
        # running process takes the new one, refuses the old one, and is not restarted.
        pid = member.proc.pid
        fresh = member.token_file.with_name(member.token_file.name + ".new")
        fresh.write_text("rotated-token")
        os.replace(fresh, member.token_file)
        old = member.post("/rejoin", member.token)
        rejoin = member.post("/rejoin", "rotated-token")
        member.wait_status(lambda s: s["rejoins"] == 1, 60, "rejoined")
        leave = member.post("/leave", "rotated-token")
        member.wait_status(lambda s: s["state"] == "left", 60, "out of the group")
        log = member.text()
        assert member.proc.pid == pid and member.proc.poll() is None
    assert answers == ATTACK_ANSWERS, answers
    assert counted == ATTACK_COUNTS, counted
    # Still in the group with the same registration, holding every partition.
    assert after["state"] == "running" and after["leaving"] is False, after
    assert after["memberId"] == before["memberId"] and after["rebalances"] == 0, after
    assert ids_after == ids_before and owned is not None, (ids_before, ids_after, owned)
    # Who called is logged (once for the burst: the rate limit), never the token.
    assert "refused POST /leave from 127.0.0.1: 401 missing" in log, log[-3000:]
    assert log.count("refused POST") == 1, "six refusals within 10 s make one line"
    assert member.token not in log and "rotated-token" not in log
    assert "control token changed" in log
    assert old[0] == 403 and rejoin == (202, {"accepted": "rejoin"}), (old, rejoin)
    assert leave == (202, {"accepted": "leave"})


# --- with the operator -----------------------------------------------------------------------


def token_secret(kubeconfig: Path, namespace: str, name: str) -> dict[str, Any] | None:
    proc = kubectl(kubeconfig, "-n", namespace, "get", "secret", f"{name}-member-token",
                   "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def token_of(secret: dict[str, Any]) -> str:
    return base64.b64decode(secret["data"]["token"]).decode()


def projected_token(local_env: environment.LocalEnv, pod: dict[str, Any]) -> str | None:
    """The member's token file as the local node projected its Secret volume."""
    m = pod["metadata"]
    path = (local_env.pod_log_dir / "work" / f"{m['namespace']}_{m['name']}_{m['uid']}"
            / "volumes" / "member-token" / "token")
    return path.read_text() if path.exists() else None


def pod_log(local_env: environment.LocalEnv, pod: dict[str, Any]) -> str:
    m = pod["metadata"]
    path = local_env.pod_log_dir / f"{m['namespace']}_{m['name']}_{m['uid']}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def scale_down_to_one(kubeconfig: Path, namespace: str, name: str, leaver: dict[str, Any],
                      local_env: environment.LocalEnv) -> str:
    """2 -> 1: the operator asks member 1 to leave (POST /leave with its token), then deletes
    it; the member's log says it took the request."""
    patch_cg(kubeconfig, namespace, name, {"spec": {"replicas": 1}})
    wait_for("member 1 gone", lambda: sorted(member_pods(
        kubeconfig, namespace, name, include_terminating=True)) == [f"{name}-0"],
        timeout=120, interval=1, describe=lambda: summary(kubeconfig, namespace, name))
    return pod_log(local_env, leaver)


def test_the_operator_makes_the_token_sends_it_and_remakes_it_when_deleted(
        operator: OperatorProcess, namespace: str, kubeconfig: Path, kafka: KafkaBroker,
        kafka_admin: AdminClient, make_topic: Callable[..., str],
        local_env: environment.LocalEnv, spark_connect: ConnectServer) -> None:
    topic = make_topic("auth", 4)
    name = unique("auth")
    groups.apply(kubeconfig, namespace,
             consumer_group(name, bootstrap=kafka.bootstrap, topics=[topic], replicas=2,
                            connect_url=spark_connect.url))
    wait_for("Ready with 2 members", lambda: ready_and_stable(kubeconfig, namespace, name, 2),
             timeout=300, interval=1, describe=lambda: summary(kubeconfig, namespace, name))
    uid = groups.get(kubeconfig, namespace, name)["metadata"]["uid"]

    # The Secret: made by the operator, owned by the ConsumerGroup, projected into each member.
    secret = token_secret(kubeconfig, namespace, name)
    assert secret is not None
    assert [r["uid"] for r in secret["metadata"]["ownerReferences"]] == [uid]
    first = token_of(secret)
    assert len(first) >= 32
    pods = member_pods(kubeconfig, namespace, name)
    for pod in pods.values():
        assert projected_token(local_env, pod) == first

    # Anyone else is refused, counted, and the member stays in the group.
    zero = pods[f"{name}-0"]
    base = f"http://{zero['status']['podIP']}:{PORT}"
    ids_before = member_ids(kafka_admin, name)
    answers = attack(base)
    counted = refusals(base)
    time.sleep(3)
    assert answers == ATTACK_ANSWERS, answers
    assert counted == ATTACK_COUNTS, counted
    assert member_ids(kafka_admin, name) == ids_before
    assert assigned_everywhere(kafka_admin, name, [f"{name}-0", f"{name}-1"], 4) is not None
    assert "refused POST /leave from 127.0.0.1" in pod_log(local_env, zero)

    # The Secret deleted by hand: made again (next pass after the operator's Secret cache
    # expired: 5 s for the session's operator, 60 s by default), with a new token, which the
    # members' volumes then hold.
    kubectl(kubeconfig, "-n", namespace, "delete", "secret", f"{name}-member-token")
    again = wait_for("the token Secret made again", lambda: (
        s := token_secret(kubeconfig, namespace, name)) and s["metadata"]["uid"] != secret[
            "metadata"]["uid"] and s, timeout=120, interval=1)
    second = token_of(again)
    assert second != first
    assert [r["uid"] for r in again["metadata"]["ownerReferences"]] == [uid]
    wait_for("every member holding the new token", lambda: all(
        projected_token(local_env, pod) == second for pod in pods.values()), timeout=30)

    # The operator's own call: a scale-down asks member 1 to leave, with the new token.
    leaver = pods[f"{name}-1"]
    log = scale_down_to_one(kubeconfig, namespace, name, leaver, local_env)
    assert "http: leave accepted" in log, log[-3000:]
    assert "refused POST" not in log, log[-3000:]
    # The member read its file again at the request (it had changed): no restart.
    assert "control token changed: read again" in log and log.count("starting container") == 1
    wait_for("member 0 holding every partition", lambda: assigned_everywhere(
        kafka_admin, name, [f"{name}-0"], 4), timeout=90)
    assert not [line for line in operator.log_tail(2000).splitlines()
                if name in line and "did not take" in line]
    assert refusals(base) == ATTACK_COUNTS, "the operator's calls were never refused"
    for pod in get_json(kubeconfig, "-n", namespace, "pods", "-l",
                        f"staticfleet.io/group={name}")["items"]:
        assert pod["spec"]["volumes"][1]["secret"]["secretName"] == f"{name}-member-token"
