"""`staticfleet env up|status|down`: the one entry point to the local environment, its
failure modes, and the promise that `down` leaves no process and no directory behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from staticfleet_dev import build, environment
from staticfleet_dev.kafka import KafkaSettings, start_kafka
from staticfleet_dev.procs import ServerFailed, is_alive, spawn, wait_until
from tests.support import unique

pytestmark = pytest.mark.integration

STATICFLEET = shutil.which("staticfleet") or "staticfleet"


def cli(*args: str, env: dict[str, str] | None = None,
        timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([STATICFLEET, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


@pytest.fixture
def env_name() -> Iterator[str]:
    name = unique("cli")
    yield name
    environment.down(name)


def assert_gone(state: dict[str, object], root: Path) -> None:
    for rec in environment.LocalEnv.from_dict(state).records:  # type: ignore[arg-type]
        assert not is_alive(rec), f"{rec.name} (pid {rec.pid}) still runs"
    assert not root.exists(), f"{root} was left behind"


def test_up_by_a_starter_killed_then_status_then_down(env_name: str) -> None:
    """One lifecycle: `env up` from a process that is then SIGKILLed (a crashed starter: its
    servers go on, orphans, and nothing of the starter cleaned up), then `status`, then `down`,
    which leaves no process and no directory."""
    starter = textwrap.dedent(f"""
        import os, signal, sys
        from staticfleet.cli import main
        sys.argv = ["staticfleet", "env", "up", "--name", {env_name!r}, "--json",
                    "--test-settings"]
        try:
            main()
        finally:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    up = subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True,
                        timeout=180)
    assert up.returncode == -signal.SIGKILL, up.stderr
    info = json.loads(up.stdout)
    assert info["up"] and info["bootstrap"].startswith("127.0.0.1:")
    assert {p["name"] for p in info["processes"]} == {
        "kafka", "etcd", "kube-apiserver", "kube-controller-manager", "local-node"}
    state = environment.load(env_name)
    assert state is not None and all(is_alive(r) for r in state.records), "orphans expected"
    kubeconfig = info["kubeconfig"]

    nodes = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "nodes", "-o", "json"],
                           capture_output=True, text=True, check=True)
    assert [n["metadata"]["name"] for n in json.loads(nodes.stdout)["items"]] == ["local-node"]
    helm = subprocess.run([str(build.helm_bin() / "helm"), "--kubeconfig", kubeconfig, "list",
                           "-A"], capture_output=True, text=True)
    assert helm.returncode == 0, helm.stderr
    status = cli("env", "status", "--name", env_name)
    assert status.returncode == 0 and "up" in status.stdout

    down = cli("env", "down", "--name", env_name)
    assert down.returncode == 0 and "stopped" in down.stdout
    assert_gone(state.to_dict(), state.root)
    after = cli("env", "status", "--name", env_name)
    assert after.returncode == 1 and "not up" in after.stdout


def test_down_stops_a_member_process_its_local_node_left_behind(tmp_path: Path) -> None:
    """A pod made while the local node shut down outlived it (a CI run left five member
    processes of its last case running, reparented to init): `down` stops what still works in
    the environment's pod directories, and only that."""
    name = f"test-strays-{os.getpid()}"
    root = Path(tempfile.mkdtemp(prefix="staticfleet-strays-"))
    env = environment.LocalEnv(name=name, root=root, bootstrap="", kubeconfig=root / "none",
                               server="", owner_pid=os.getpid())
    work = env.pod_log_dir / "work" / "ns_member-0_uid"
    work.mkdir(parents=True)
    elsewhere = tmp_path / "not-a-pod"
    elsewhere.mkdir()
    stray, other = (subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"],
                                     cwd=cwd, start_new_session=True)
                    for cwd in (work, elsewhere))
    try:
        environment.save(env)
        assert environment.pod_processes(env.pod_log_dir) == [stray.pid]
        assert environment.down(name)
        assert stray.wait(timeout=10) == -signal.SIGTERM
        assert other.poll() is None, "a process outside the pod directories is left alone"
        assert not root.exists()
    finally:
        for proc in (stray, other):
            proc.kill()
            proc.wait()


def test_missing_java_is_one_clear_line(tmp_path: Path, env_name: str) -> None:
    empty_path = tmp_path / "bin"
    empty_path.mkdir()
    env = {**os.environ, "PATH": str(empty_path)}
    proc = cli("env", "up", "--name", env_name, env=env)
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: java not found on PATH: install a JDK 17")


def test_missing_go_is_one_clear_line(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path), "STATICFLEET_CACHE": str(tmp_path / "cache")}
    proc = cli("env", "build", "etcd", env=env)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "error: go not found on PATH: install Go 1.26 or newer from https://go.dev/dl/ "
        "and put it on PATH")


def test_taken_port_fails_fast_with_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(ServerFailed, match=f"port 127.0.0.1:{port} .* already in use"):
            start_kafka(tmp_path, KafkaSettings(port=port))
        assert time.monotonic() - started < 5


def test_stale_data_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "meta.properties").write_text("cluster.id=old\n")
    with pytest.raises(ServerFailed, match="stale Kafka data directory"):
        start_kafka(tmp_path, KafkaSettings())


def test_invalid_broker_setting_fails_with_the_server_output(tmp_path: Path) -> None:
    settings = KafkaSettings(overrides={"group.min.session.timeout.ms": "soon"})
    with pytest.raises(ServerFailed) as err:
        start_kafka(tmp_path, settings)
    assert "group.min.session.timeout.ms" in str(err.value)


def test_a_server_that_dies_during_start_reports_its_log_tail(tmp_path: Path) -> None:
    _proc, rec = spawn("doomed", ["sh", "-c", "echo starting; echo fatal: no quorum; exit 3"],
                       log=tmp_path / "doomed.log")
    with pytest.raises(ServerFailed) as err:
        wait_until(lambda: False, rec=rec, timeout=30, what="ready")
    assert "doomed exited before ready" in str(err.value)
    assert "fatal: no quorum" in str(err.value)
