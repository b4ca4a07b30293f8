"""The two images as a user gets them (issue 48, item 1): built from the repository's
Dockerfiles by buildah on a Debian base made from packages (`staticfleet_dev.images`), run by
podman on the host's network, each through its own entry point.

- The operator image starts its default entry point (`staticfleet operator run`) against the
  session's API server from a mounted kubeconfig, serves its health and its metrics, and stops
  on SIGTERM; it runs as the non-root user and holds neither Spark nor the member runtime nor
  the development environment.
- The member image's default command (`python -m consumer_runtime`), as the non-root user,
  joins a group on the session's broker with its static instance id, processes every record
  through Spark's local mode on the image's own JRE, and leaves on SIGTERM.

Each image's size is printed. The images come from setup (`bash scripts/setup.sh`); a checkout
whose sources changed since builds them again here, from buildah's layer cache.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from staticfleet_dev import images
from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.procs import free_port
from staticfleet_dev.testkit.poll import wait_for
from tests.integration.runtime_spark_helpers import produce, runtime_config
from tests.support import unique

pytestmark = pytest.mark.integration

NON_ROOT = 10001
"""The user both Dockerfiles run as."""


@pytest.fixture(scope="module")
def operator_image() -> str:
    name = images.build("operator")
    print(f"operator image {name}: {images.size_bytes(name) / 2**20:.0f} MiB")
    return name


@pytest.fixture(scope="module")
def member_image() -> str:
    name = images.build("member")
    print(f"member image {name}: {images.size_bytes(name) / 2**20:.0f} MiB")
    return name


class Container:
    """A detached `podman run` and what a test asks of it."""

    def __init__(self, cid: str) -> None:
        self.cid = cid

    @classmethod
    def start(cls, image: str, *args: str, env: dict[str, str] | None = None,
              volumes: tuple[str, ...] = ()) -> Container:
        cmd = ["podman", "run", "--detach", "--network", "host"]
        for key, value in (env or {}).items():
            cmd += ["--env", f"{key}={value}"]
        for volume in volumes:
            cmd += ["--volume", volume]
        out = images.tool(*cmd, image, *args).stdout.strip().splitlines()
        return cls(out[-1])

    def logs(self) -> str:
        return images.tool("podman", "logs", self.cid, check=False).stdout or ""

    def exec(self, *args: str) -> subprocess.CompletedProcess[str]:
        return images.tool("podman", "exec", self.cid, *args, check=False)

    def running(self) -> bool:
        out = images.tool("podman", "inspect", "--format", "{{.State.Running}}", self.cid,
                          check=False).stdout.strip()
        return out == "true"

    def stop(self, grace_s: int = 20) -> tuple[int, float]:
        """SIGTERM, then SIGKILL after `grace_s`: (the exit code, seconds it took)."""
        started = time.monotonic()
        images.tool("podman", "stop", "--time", str(grace_s), self.cid, check=False)
        took = time.monotonic() - started
        code = images.tool("podman", "inspect", "--format", "{{.State.ExitCode}}", self.cid,
                           check=False).stdout.strip()
        return int(code or -1), took

    def remove(self) -> None:
        images.tool("podman", "rm", "--force", self.cid, check=False)


@pytest.fixture
def containers() -> Iterator[list[Container]]:
    started: list[Container] = []
    yield started
    for c in started:
        print(f"--- container {c.cid[:12]} log tail ---\n{c.logs()[-3000:]}")
        c.remove()


def get(url: str) -> tuple[int, bytes] | None:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status, resp.read()
    except OSError:
        return None


def probe(image: str, code: str) -> dict[str, Any]:
    """What `code` (Python, run by the image's interpreter) prints as JSON."""
    done = images.run(image, "-c", code, entrypoint="python")
    assert done.returncode == 0, done.stdout
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


WHAT_IS_INSIDE = """
import importlib.util, json, os, shutil
print(json.dumps({"uid": os.getuid(), "java": shutil.which("java"),
                  "modules": {m: importlib.util.find_spec(m) is not None for m in (
                      "staticfleet", "consumer_runtime", "staticfleet_dev", "pyspark",
                      "confluent_kafka", "kopf", "kafkawire", "member_contract")}}))
"""


def test_the_operator_image_runs_its_entry_point_as_non_root_and_holds_no_spark(
        operator_image: str, kubeconfig: Path, containers: list[Container],
        tmp_path: Path) -> None:
    inside = probe(operator_image, WHAT_IS_INSIDE)
    assert inside["uid"] == NON_ROOT
    assert inside["modules"] == {"staticfleet": True, "consumer_runtime": False,
                                 "staticfleet_dev": False, "pyspark": False,
                                 "confluent_kafka": True, "kopf": True, "kafkawire": True,
                                 "member_contract": True}, inside
    assert inside["java"] is None, "no JRE in the operator image"

    # The admin kubeconfig (its certificates inlined), readable by the image's user, as a
    # mounted Secret would be.
    config = tmp_path / "kubeconfig"
    config.write_bytes(kubeconfig.read_bytes())
    config.chmod(0o644)
    metrics, health = free_port(), free_port()
    namespace = unique("img")
    op = Container.start(
        operator_image, "operator", "run", "--namespace", namespace,
        "--metrics-port", str(metrics), "--metrics-host", "127.0.0.1",
        "--health-port", str(health), env={"KUBECONFIG": "/etc/staticfleet/kubeconfig"},
        volumes=(f"{config}:/etc/staticfleet/kubeconfig:ro",))
    containers.append(op)
    wait_for("the operator's /healthz answers 200", lambda: (
        (get(f"http://127.0.0.1:{health}/healthz") or (0,))[0] == 200 or None) if op.running()
        else pytest.fail(f"the operator container exited:\n{op.logs()[-3000:]}"),
        timeout=90, interval=1, describe=lambda: op.logs()[-2000:])
    answer = get(f"http://127.0.0.1:{metrics}/metrics")
    assert answer is not None and answer[0] == 200
    assert b"staticfleet_" in answer[1], answer[1][:500]
    code, took = op.stop()
    assert code == 0 and took < 15, (code, took, op.logs()[-2000:])


def test_the_member_image_processes_every_record_on_its_own_spark_as_non_root(
        member_image: str, kafka: KafkaBroker, make_topic: Callable[..., str],
        containers: list[Container], tmp_path: Path) -> None:
    topic = make_topic("img", 2)
    records = 300
    produce(kafka.bootstrap, topic, [(f"k{i}".encode(), f"v{i}".encode(), None)
                                     for i in range(records)])
    group = unique("img-member")
    config = runtime_config(kafka.bootstrap, group, topic, sink={"type": "null"},
                            session_ms=20000,
                            spark={"mode": "local", "connectUrl": None, "master": "local[1]",
                                   "conf": {}})
    token = tmp_path / "token"
    token.write_text(secrets.token_urlsafe(16))
    token.chmod(0o644)
    port = free_port()
    member = Container.start(member_image, env={
        "STATICFLEET_CONFIG": json.dumps(config), "STATICFLEET_GROUP_INSTANCE_ID": f"{group}-0",
        "POD_NAME": f"{group}-0", "POD_NAMESPACE": "test",
        "STATICFLEET_MEMBER_TOKEN_FILE": "/var/run/staticfleet/token",
        "STATICFLEET_HTTP_HOST": "127.0.0.1", "STATICFLEET_HTTP_PORT": str(port)},
        volumes=(f"{token}:/var/run/staticfleet/token:ro",))
    containers.append(member)

    def processed() -> dict[str, Any] | None:
        if not member.running():
            pytest.fail(f"the member container exited:\n{member.logs()[-3000:]}")
        answer = get(f"http://127.0.0.1:{port}/status")
        if answer is None or answer[0] != 200:
            return None
        status = dict(json.loads(answer[1]))
        return status if status.get("recordsProcessed", 0) >= records else None

    status = wait_for(f"the member processed {records} records", processed, timeout=240,
                      interval=2, describe=lambda: member.logs()[-3000:])
    assert status["recordsProcessed"] == records, status
    assert status["instanceId"] == f"{group}-0", status
    who = member.exec("sh", "-c", "id -u; java -version 2>&1 | head -1")
    assert who.returncode == 0, who.stdout
    uid, java = who.stdout.strip().splitlines()[:2]
    assert int(uid) == NON_ROOT and "openjdk" in java.lower(), who.stdout
    code, took = member.stop(grace_s=30)
    assert code == 0 and took < 30, (code, took, member.logs()[-2000:])
