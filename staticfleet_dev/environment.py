"""The whole local environment as one unit: Kafka broker, control plane and local node.

An environment lives in a temporary directory and is registered by name in
`<cache>/envs/<name>.json` with the PIDs (and start times) of every process it started, so
`staticfleet env down` can stop exactly those processes later, from another process, also
after the Python process that started them has crashed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from staticfleet_dev.controlplane import ControlPlane, start_control_plane
from staticfleet_dev.kafka import (
    KafkaBroker,
    KafkaCluster,
    KafkaSettings,
    start_kafka,
    start_kafka_cluster,
)
from staticfleet_dev.procs import ProcessRecord, ServerFailed, is_alive, spawn, stop
from staticfleet_dev.tools import cache_root, tail

NODE_NAME = "local-node"


@dataclass
class LocalEnv:
    """A running (or recorded) local environment."""

    name: str
    root: Path
    bootstrap: str
    kubeconfig: Path
    server: str
    owner_pid: int
    records: list[ProcessRecord] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    brokers: int = 1
    """Kafka brokers: 1 (a single broker, process `kafka`) or 3 (processes `kafka-1` ...)."""

    @property
    def pod_log_dir(self) -> Path:
        return self.root / "pods"

    @property
    def kafka_log(self) -> Path:
        return self.root / "kafka" / "broker.log"

    def record(self, name: str) -> ProcessRecord | None:
        return next((r for r in self.records if r.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "root": str(self.root), "bootstrap": self.bootstrap,
                "kubeconfig": str(self.kubeconfig), "server": self.server,
                "owner_pid": self.owner_pid, "started_at": self.started_at,
                "brokers": self.brokers, "records": [r.to_dict() for r in self.records]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LocalEnv:
        return cls(name=d["name"], root=Path(d["root"]), bootstrap=d["bootstrap"],
                   kubeconfig=Path(d["kubeconfig"]), server=d["server"],
                   owner_pid=int(d["owner_pid"]), started_at=float(d["started_at"]),
                   records=[ProcessRecord.from_dict(r) for r in d["records"]],
                   brokers=int(d.get("brokers", 1)))

    def cluster(self) -> KafkaCluster:
        """The three-broker cluster of an environment started with `brokers=3`."""
        if self.brokers < 2:
            raise ServerFailed(f"environment {self.name!r} runs a single broker: start it with "
                               "`staticfleet env up --brokers 3` to stop, kill or restart brokers")
        records = {n: rec for n in range(1, self.brokers + 1)
                   if (rec := self.record(f"kafka-{n}")) is not None}
        return KafkaCluster.attach(self.root / "kafka", records)

    def replace_record(self, rec: ProcessRecord) -> None:
        """Record a restarted process in place of its previous run."""
        self.records = [rec if r.name == rec.name else r for r in self.records]

    def log_tails(self, lines: int = 30) -> str:
        return "\n".join(f"--- {r.name} ({r.log}) ---\n{tail(Path(r.log), lines)}"
                         for r in self.records)


def registry_dir() -> Path:
    path = cache_root() / "envs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _registry_file(name: str) -> Path:
    return registry_dir() / f"{name}.json"


def load(name: str) -> LocalEnv | None:
    path = _registry_file(name)
    if not path.exists():
        return None
    return LocalEnv.from_dict(json.loads(path.read_text()))


def registered() -> list[LocalEnv]:
    envs = []
    for path in sorted(registry_dir().glob("*.json")):
        try:
            envs.append(LocalEnv.from_dict(json.loads(path.read_text())))
        except (ValueError, KeyError):
            path.unlink()
    return envs


def save(env: LocalEnv) -> None:
    """Write the environment's record (atomically) so other processes can find and stop it."""
    path = _registry_file(env.name)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(env.to_dict(), indent=2))
    tmp.replace(path)


def up(name: str = "default", *, kafka_settings: KafkaSettings | None = None,
       with_node: bool = True, timeout: float = 120.0, brokers: int = 1) -> LocalEnv:
    """Start broker, control plane and local node; register them under `name`.

    `brokers`: 1, or 3 for a three-node KRaft cluster (everything replicated 3) on which
    broker rolls can be rehearsed (`LocalEnv.cluster`). Fails if an environment of that name is
    still running. On any failure everything
    started so far is stopped and removed, and the error carries the servers' log tails.
    """
    existing = load(name)
    if existing is not None:
        if any(is_alive(r) for r in existing.records):
            raise ServerFailed(f"environment {name!r} is already up (root {existing.root}); "
                               f"run `staticfleet env down --name {name}` first")
        down(name)
    root = Path(tempfile.mkdtemp(prefix=f"staticfleet-{name}-"))
    if brokers not in (1, 3):
        raise ValueError(f"brokers must be 1 or 3, got {brokers}")
    env = LocalEnv(name=name, root=root, bootstrap="", kubeconfig=root / "kubeconfig",
                   server="", owner_pid=os.getpid(), brokers=brokers)
    save(env)
    try:
        if brokers == 1:
            broker: KafkaBroker = start_kafka(root / "kafka", kafka_settings, timeout=timeout)
            env.records.append(broker.record)
            env.bootstrap = broker.bootstrap
        else:
            cluster = start_kafka_cluster(root / "kafka", brokers, kafka_settings,
                                          timeout=timeout)
            env.records.extend(cluster.records)
            env.bootstrap = cluster.bootstrap
        save(env)
        cp: ControlPlane = start_control_plane(root / "k8s", timeout=timeout)
        env.records.extend(cp.records)
        env.server = cp.server
        shutil.copy(cp.kubeconfig, env.kubeconfig)
        save(env)
        if with_node:
            env.records.append(start_local_node(env, timeout=timeout))
            save(env)
    except BaseException as exc:
        tails = env.log_tails()
        down(name)
        if isinstance(exc, ServerFailed):
            raise ServerFailed(f"{exc}\n{tails}") from exc
        raise
    return env


def start_local_node(env: LocalEnv, timeout: float = 60.0) -> ProcessRecord:
    """Run the local node as its own process and wait until its Node is Ready."""
    env.pod_log_dir.mkdir(parents=True, exist_ok=True)
    _proc, rec = spawn("local-node", [
        sys.executable, "-m", "staticfleet_dev.localnode", "--kubeconfig",
        str(env.kubeconfig), "--node-name", NODE_NAME, "--log-dir", str(env.pod_log_dir),
    ], log=env.root / "local-node.log")
    from staticfleet_dev.procs import wait_until

    wait_until(lambda: node_ready(env), rec=rec, timeout=timeout, what="registered and Ready")
    return rec


def _admin_ssl_context(env: LocalEnv) -> ssl.SSLContext:
    pki = env.root / "k8s" / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx


def node_ready(env: LocalEnv) -> bool:
    url = f"{env.server}/api/v1/nodes/{NODE_NAME}"
    try:
        with urllib.request.urlopen(url, context=_admin_ssl_context(env), timeout=2) as resp:
            node = json.load(resp)
    except OSError:
        return False
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def down(name: str = "default") -> bool:
    """Stop every process the environment recorded and remove its directory.

    Returns False when no environment of that name was registered.
    """
    env = load(name)
    if env is None:
        return False
    for rec in reversed(env.records):
        stop(rec, grace=15.0)
    stop_pod_processes(env.pod_log_dir)
    if env.root.exists() and env.root.name.startswith("staticfleet-"):
        shutil.rmtree(env.root, ignore_errors=True)
    _registry_file(name).unlink(missing_ok=True)
    return True


def pod_processes(pod_dir: Path) -> list[int]:
    """The processes working in the environment's pod directories (`pod_dir`)."""
    inside = str(pod_dir.resolve()) + os.sep
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if cwd.startswith(inside):
            found.append(int(proc.name))
    return found


def stop_pod_processes(pod_dir: Path, grace: float = 5.0) -> list[int]:
    """Stop what still runs in the pod directories once the local node is gone: a member whose
    pod was made while the node shut down outlived it (reparented to init; a CI run left five
    members of its last case running). SIGTERM to each process group, SIGKILL after `grace`;
    returns what is left."""
    pids = pod_processes(pod_dir)
    _signal_groups(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        time.sleep(0.1)
        pids = [pid for pid in pids if _pid_alive(pid)]
    _signal_groups(pids, signal.SIGKILL)
    return pod_processes(pod_dir)


def _signal_groups(pids: list[int], sig: signal.Signals) -> None:
    """Signal each process's group, never the caller's own."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != os.getpgrp():
                os.killpg(group, sig)


def status(name: str = "default") -> dict[str, Any]:
    """What is registered under `name` and which of its processes are alive."""
    env = load(name)
    if env is None:
        return {"name": name, "up": False, "processes": []}
    procs = [{"name": r.name, "pid": r.pid, "alive": is_alive(r), "log": r.log}
             for r in env.records]
    return {"name": name, "up": bool(procs) and all(p["alive"] for p in procs),
            "bootstrap": env.bootstrap, "kubeconfig": str(env.kubeconfig),
            "server": env.server, "root": str(env.root), "processes": procs}


def reap_orphans(prefix: str) -> list[str]:
    """Stop environments named `prefix*` whose owning process has died (crashed test runs)."""
    stopped = []
    for env in registered():
        if env.name.startswith(prefix) and not _pid_alive(env.owner_pid):
            down(env.name)
            stopped.append(env.name)
    return stopped


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
