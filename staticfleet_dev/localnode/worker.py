"""The local node's pod worker: one thread per pod (by UID) that starts its first container as a
process, restarts it with back-off, runs its probes, issues and renews its ServiceAccount token
as a kubeconfig, projects and refreshes its Secret volumes as files, publishes its status and
completes its deletion. Decisions come from the pure modules (lifecycle, probes, podstatus,
`staticfleet_dev.podenv`); this module carries them out."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from staticfleet_dev import podenv
from staticfleet_dev.localnode.api import ApiError, Kube, pod_path
from staticfleet_dev.localnode.ids import micro_time, rfc3339
from staticfleet_dev.localnode.lifecycle import (
    BACKOFF_RESET_AFTER,
    exit_code_of,
    grace_seconds,
    restart_delay,
    should_restart,
)
from staticfleet_dev.localnode.podstatus import (
    TERMINATION_MESSAGE_FILE_BYTES,
    ContainerView,
    Terminated,
    desired_status,
    ended_elsewhere,
    status_patch,
    terminated_reason,
    termination_message,
)
from staticfleet_dev.localnode.probes import ProbeTracker, parse_probe, run_probe
from staticfleet_dev.procs import spawn

log = logging.getLogger("staticfleet.localnode")

CONFIG_RETRY = 2.0
TOKEN_RETRY = 10.0
SECRET_VOLUME_SYNC = 5.0
"""How often a running pod's Secret volumes are read again (a kubelet: within about a minute)."""
FORCE_DELETE_GRACE = 2.0
TICK = 0.2


class Node(Protocol):
    """What a worker uses of the node that runs it (`LocalNode` in node.py, which imports this
    module: a protocol here, so that this module need not import node.py back)."""

    kube: Kube
    node_name: str
    log_dir: Path
    memory: str
    shutdown_grace: float

    def worker_done(self, worker: PodWorker) -> None: ...


class PodWorker(threading.Thread):
    """Owns one pod (by UID) on this node: its process, probes, status and deletion."""

    def __init__(self, node: Node, pod: dict[str, Any], pod_ip: str) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.node = node
        self.uid: str = meta["uid"]
        self.ns: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.pod = pod
        self.pod_ip = pod_ip
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._gone = False
        self._shutdown = False
        base = f"{self.ns}_{self.pod_name}_{self.uid}"
        self.log_path = node.log_dir / f"{base}.log"
        self.default_workdir = node.log_dir / "work" / base
        self.termination_log = self.default_workdir / "termination-log"
        container = (pod.get("spec") or {}).get("containers", [{}])[0]
        self.container: dict[str, Any] = container
        prev = ((pod.get("status") or {}).get("containerStatuses") or [{}])[0]
        status = pod.get("status") or {}
        self.view = ContainerView(name=container.get("name", ""),
                                  image=container.get("image", ""),
                                  restart_count=int(prev.get("restartCount") or 0))
        self.attempted = bool(prev.get("state", {}).get("running")
                              or prev.get("state", {}).get("terminated")
                              or prev.get("lastState"))
        self.start_time: str = status.get("startTime") or rfc3339(time.time())
        self.finished = status.get("phase") in ("Succeeded", "Failed")
        self.proc: subprocess.Popen[bytes] | None = None
        self.proc_env: dict[str, str] = {}
        self.proc_cwd: Path = self.default_workdir
        self.started_mono = 0.0
        self.next_start = 0.0
        self.streak = 0
        self.permanent = False
        self.probes: dict[str, ProbeTracker] = {}
        self.last_sent: dict[str, Any] | None = None
        self.last_conditions: Sequence[Mapping[str, Any]] = list(status.get("conditions") or [])
        self.next_publish_retry = 0.0
        self.notes = podenv.unsupported_notes(pod)
        self.credentials_dir = self.default_workdir / "serviceaccount"
        self.secret_mounts = podenv.secret_mounts(pod, container)
        self.volumes_dir = self.default_workdir / "volumes"
        self.volume_files: dict[str, dict[str, str]] = {}
        """What each Secret volume's directory holds now (volume -> relative path -> text)."""
        self.next_volume_sync = 0.0
        self.token_refresh_at: float | None = None  # unix time; None: no token issued
        self.next_token_try = 0.0

    # -- called from other threads
    def update(self, pod: dict[str, Any]) -> None:
        with self._lock:
            self.pod = pod
        self._wake.set()

    def mark_gone(self) -> None:
        self._gone = True
        self._wake.set()

    def request_shutdown(self) -> None:
        self._shutdown = True
        self._wake.set()

    # -- the loop
    def run(self) -> None:
        try:
            while True:
                with self._lock:
                    pod = self.pod
                try:
                    if self._shutdown:
                        self._stop_process(min(grace_seconds(pod), self.node.shutdown_grace),
                                           "node shutting down")
                        return
                    if self._gone:
                        self._stop_process(FORCE_DELETE_GRACE, "pod was deleted")
                        return
                    if (pod.get("metadata") or {}).get("deletionTimestamp"):
                        if self._finish_deletion(pod):
                            return
                    elif not self.finished and ended_elsewhere(pod):
                        self._end(pod)
                    elif not self.finished:
                        self._step(pod)
                        self._publish(pod)
                except Exception:
                    log.exception("pod %s/%s: unexpected error", self.ns, self.pod_name)
                    time.sleep(1)
                self._wake.wait(TICK if self.proc else 1.0)
                self._wake.clear()
        finally:
            self.node.worker_done(self)

    def _step(self, pod: dict[str, Any]) -> None:
        now = time.monotonic()
        if (self.token_refresh_at is not None and time.time() >= self.token_refresh_at
                and now >= self.next_token_try):
            self._refresh_credentials(pod)
        if self.secret_mounts and self.volume_files and now >= self.next_volume_sync:
            self._sync_volumes()
        if self.proc is None:
            if self.view.terminated is None and not self.permanent and now >= self.next_start:
                self._start(pod)
            return
        rc = self.proc.poll()
        if rc is not None:
            self._on_exit(rc)
            return
        self._run_probes(now)

    def _set(self, **changes: Any) -> None:
        self.view = replace(self.view, **changes)

    def _marker(self, text: str) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as out:
            out.write(f"--- {micro_time(time.time())} localnode: {text} ---\n")

    def _fetch_sources(self) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
        cm_names, secret_names = podenv.referenced_sources(self.container)
        found: tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]] = ({}, {})
        for kind, names, into in (("configmaps", cm_names, found[0]),
                                  ("secrets", secret_names, found[1])):
            for name in names:
                try:
                    obj = self.node.kube.request(
                        "GET", f"/api/v1/namespaces/{self.ns}/{kind}/{name}")
                except ApiError as exc:
                    if exc.status == 404:
                        continue
                    raise
                into[name] = dict(obj.get("data") or {})
        return found

    def _container_config(self, pod: dict[str, Any]) -> tuple[list[str], dict[str, str]] | None:
        """The container's command and environment, as a kubelet makes them (the Secret volumes,
        the env from ConfigMaps and Secrets, the service account's token); None when it cannot
        start now (its waiting reason is set and `next_start` when to try again) or ever
        (`permanent`)."""
        ctx = podenv.PodContext(node_name=self.node.node_name, pod_ip=self.pod_ip,
                                node_memory=self.node.memory)
        try:
            mounted = self._project_volumes()
        except (podenv.ConfigError, ApiError) as exc:
            message = str(exc) if isinstance(exc, podenv.ConfigError) else (
                f"MountVolume.SetUp failed: reading a Secret: {exc}")
            if self.view.waiting_message != message:
                log.warning("pod %s/%s: %s", self.ns, self.pod_name, message)
            self._set(waiting_reason="ContainerCreating", waiting_message=message)
            self.next_start = time.monotonic() + CONFIG_RETRY
            return None
        try:
            configmaps, secrets = self._fetch_sources()
            pod_env = podenv.with_mounts(
                podenv.resolve_env(pod, self.container, configmaps=configmaps,
                                   secrets=secrets, ctx=ctx), mounted)
            cmd = podenv.build_command(self.container, pod_env, python=sys.executable)
        except podenv.ConfigError as exc:
            if self.view.waiting_reason != "CreateContainerConfigError":
                log.info("pod %s/%s: CreateContainerConfigError: %s", self.ns, self.pod_name, exc)
            self._set(waiting_reason="CreateContainerConfigError", waiting_message=str(exc))
            self.next_start = time.monotonic() + CONFIG_RETRY
            return None
        except podenv.NoEntrypoint as exc:
            self._set(waiting_reason="NoImageEntrypoint", waiting_message=str(exc))
            self.permanent = True
            return None
        except ApiError as exc:
            log.warning("pod %s/%s: reading ConfigMaps/Secrets: %s", self.ns, self.pod_name, exc)
            self.next_start = time.monotonic() + CONFIG_RETRY
            return None
        service_account = podenv.token_service_account(pod)
        if service_account:
            try:
                kubeconfig = self._credentials(pod, service_account)
            except ApiError as exc:
                message = (f'MountVolume.SetUp failed for volume "kube-api-access": '
                           f"ServiceAccount {self.ns}/{service_account}: {exc}")
                if self.view.waiting_message != message:
                    log.warning("pod %s/%s: %s", self.ns, self.pod_name, message)
                self._set(waiting_reason="ContainerCreating", waiting_message=message)
                self.next_start = time.monotonic() + CONFIG_RETRY
                return None
            pod_env = podenv.with_kubeconfig(pod_env, str(kubeconfig))
        return cmd, pod_env

    def _start(self, pod: dict[str, Any]) -> None:
        config = self._container_config(pod)
        if config is None:
            return
        cmd, pod_env = config
        # A new, empty termination message file for each container start, as a kubelet mounts.
        self.termination_log.parent.mkdir(parents=True, exist_ok=True)
        self.termination_log.write_bytes(b"")
        pod_env = podenv.with_termination_log(pod_env, str(self.termination_log))
        # Never the node's own credentials: a pod gets KUBECONFIG from its token or its spec.
        machine = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.proc_env = podenv.process_environment(
            machine, pod_env, bin_dir=os.path.dirname(sys.executable),
            hostname=self.pod_name)
        workdir = self.container.get("workingDir")
        self.proc_cwd = Path(workdir) if workdir else self.default_workdir
        self.proc_cwd.mkdir(parents=True, exist_ok=True)
        restart_count = self.view.restart_count + (1 if self.attempted else 0)
        self.attempted = True
        self._marker(f"starting container {self.view.name} (restart {restart_count}, "
                     f"ip {self.pod_ip}): {cmd!r}")
        now_wall = rfc3339(time.time())
        try:
            proc, _rec = spawn(f"{self.ns}/{self.pod_name}", cmd, log=self.log_path,
                               env=self.proc_env, cwd=self.proc_cwd)
        except OSError as exc:
            self._marker(f"container {self.view.name} failed to start: {exc}")
            self._set(restart_count=restart_count)
            self._after_exit(Terminated(exit_code=128, reason="StartError", finished_at=now_wall,
                                        message=str(exc)), ran_for=0.0)
            return
        self.proc = proc
        self.started_mono = time.monotonic()
        log.info("pod %s/%s: started pid %d (restart %d): %s", self.ns, self.pod_name,
                 proc.pid, restart_count, cmd)
        started = self._start_probes()
        self._set(running_since=now_wall, container_id=f"localnode://{proc.pid}",
                  terminated=None, waiting_message=None, restart_count=restart_count,
                  started=started, ready=started and "readiness" not in self.probes)

    def _start_probes(self) -> bool:
        """The container's probes, from its start; whether it counts as started at once (it has
        no startup probe)."""
        spec = self.container
        startup = parse_probe(spec.get("startupProbe"), spec)
        self.probes = {}
        for kind, probe_spec, initial in (
            ("startup", startup, False),
            ("liveness", parse_probe(spec.get("livenessProbe"), spec), True),
            ("readiness", parse_probe(spec.get("readinessProbe"), spec), False),
        ):
            if probe_spec is not None:
                self.probes[kind] = ProbeTracker(
                    spec=probe_spec, result=initial,
                    next_due=self.started_mono + probe_spec.initial_delay)
        return startup is None

    # -- Secret volumes, as files in the pod's own directory
    def _read_secret(self, name: str) -> dict[str, str] | None:
        """A Secret's `data` (base64), None when it does not exist."""
        try:
            obj = self.node.kube.request("GET", f"/api/v1/namespaces/{self.ns}/secrets/{name}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return dict(obj.get("data") or {})

    def _project_volumes(self) -> dict[str, str]:
        """Write every Secret volume's files (a kubelet mounts them before the container
        starts); return mount path -> local directory. Raises ConfigError (a missing Secret or
        key, the kubelet's words) or ApiError: the container cannot start yet."""
        mounted = {}
        for mount in self.secret_mounts:
            if mount.volume not in self.volume_files:
                files = podenv.secret_files(mount, self._read_secret(mount.secret))
                self._write_volume(mount.volume, files)
            mounted[mount.mount_path] = str(self.volumes_dir / mount.volume)
        self.next_volume_sync = time.monotonic() + SECRET_VOLUME_SYNC
        return mounted

    def _sync_volumes(self) -> None:
        """Bring the Secret volumes up to date with their Secrets, in place (a running process
        sees the new files, as with a kubelet). A Secret that is gone or lacks a key leaves the
        files as they are, as a kubelet does."""
        self.next_volume_sync = time.monotonic() + SECRET_VOLUME_SYNC
        for mount in self.secret_mounts:
            try:
                files = podenv.secret_files(mount, self._read_secret(mount.secret))
            except podenv.ConfigError:
                continue
            except ApiError as exc:
                log.warning("pod %s/%s: reading Secret %s for volume %s: %s", self.ns,
                            self.pod_name, mount.secret, mount.volume, exc)
                continue
            if files != self.volume_files.get(mount.volume):
                self._write_volume(mount.volume, files)
                log.info("pod %s/%s: volume %s updated from Secret %s", self.ns, self.pod_name,
                         mount.volume, mount.secret)

    def _write_volume(self, volume: str, files: Mapping[str, str]) -> None:
        """Make the volume's directory hold exactly `files`, each replaced atomically and only
        when its content changed (a reader that watches a file's identity sees real changes
        only)."""
        root = self.volumes_dir / volume
        root.mkdir(parents=True, exist_ok=True)
        before = self.volume_files.get(volume, {})
        for path, text in files.items():
            if before.get(path) != text or not (root / path).exists():
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                _write_private(root / path, text)
        for path in set(before) - set(files):
            with contextlib.suppress(OSError):
                (root / path).unlink()
        self.volume_files[volume] = dict(files)

    # -- in-cluster credentials as a kubeconfig
    def _credentials(self, pod: dict[str, Any], service_account: str) -> Path:
        """The pod's kubeconfig, with a token issued now unless the current one is still
        fresh (container restarts keep it, as the kubelet keeps the token volume)."""
        path = self.credentials_dir / "kubeconfig"
        if (self.token_refresh_at is None or time.time() >= self.token_refresh_at
                or not path.exists()):
            self._issue_token(pod, service_account)
        return path

    def _issue_token(self, pod: dict[str, Any], service_account: str) -> None:
        issued = time.time()
        resp = self.node.kube.request(
            "POST", f"/api/v1/namespaces/{self.ns}/serviceaccounts/{service_account}/token",
            podenv.token_request(pod))
        status = (resp or {}).get("status") or {}
        token = status.get("token")
        if not token:
            raise ApiError(0, "TokenRequest returned no token")
        try:
            expires = dt.datetime.fromisoformat(
                str(status.get("expirationTimestamp")).replace("Z", "+00:00")).timestamp()
        except ValueError:
            expires = issued + podenv.TOKEN_EXPIRATION_SECONDS
        kube = self.node.kube
        config = podenv.service_account_kubeconfig(
            server=kube.server, ca_data=kube.ca_data, token=token, namespace=self.ns,
            service_account=service_account)
        self.credentials_dir.mkdir(parents=True, exist_ok=True)
        ca_pem = base64.b64decode(kube.ca_data).decode() if kube.ca_data else ""
        # The files a mounted token volume has, plus the kubeconfig made of them.
        for name, text in (("token", token), ("namespace", self.ns), ("ca.crt", ca_pem),
                           ("kubeconfig", json.dumps(config, indent=1))):
            _write_private(self.credentials_dir / name, text)
        self.token_refresh_at = podenv.token_refresh_at(issued, expires)
        log.info("pod %s/%s: token for ServiceAccount %s issued, valid until %s", self.ns,
                 self.pod_name, service_account, rfc3339(expires))

    def _refresh_credentials(self, pod: dict[str, Any]) -> None:
        service_account = podenv.token_service_account(pod)
        if not service_account:
            self.token_refresh_at = None
            return
        try:
            self._issue_token(pod, service_account)
        except ApiError as exc:
            log.warning("pod %s/%s: renewing the ServiceAccount token: %s", self.ns,
                        self.pod_name, exc)
            self.next_token_try = time.monotonic() + TOKEN_RETRY

    def _run_probes(self, now: float) -> None:
        order = ("startup",) if not self.view.started else ("liveness", "readiness")
        for kind in order:
            tracker = self.probes.get(kind)
            if tracker is None or now < tracker.next_due:
                continue
            ok = run_probe(tracker.spec, pod_ip=self.pod_ip, env=self.proc_env,
                           cwd=self.proc_cwd)
            tracker.observe(ok)
            tracker.next_due = time.monotonic() + tracker.spec.period
            if kind == "startup":
                if tracker.result:
                    self._set(started=True, ready="readiness" not in self.probes)
                    for other in ("liveness", "readiness"):
                        if other in self.probes:
                            self.probes[other].next_due = max(self.probes[other].next_due, now)
                elif tracker.failures >= tracker.spec.failure_threshold:
                    self._kill_for_probe("startup", tracker)
                    return
            elif kind == "liveness" and not tracker.result:
                self._kill_for_probe("liveness", tracker)
                return
            elif kind == "readiness" and self.view.ready != tracker.result:
                log.info("pod %s/%s: ready=%s", self.ns, self.pod_name, tracker.result)
                self._set(ready=tracker.result)

    def _kill_for_probe(self, kind: str, tracker: ProbeTracker) -> None:
        grace = tracker.spec.termination_grace
        if grace is None:
            grace = grace_seconds({"spec": self.pod.get("spec")})
        log.info("pod %s/%s: %s probe failed %d times, restarting", self.ns, self.pod_name, kind,
                 tracker.failures)
        self._stop_process(grace, f"{kind} probe failed", message=f"{kind} probe failed")

    def _stop_process(self, grace: float, why: str, *, message: str | None = None,
                      restart: bool = True) -> int | None:
        """SIGTERM the process group, SIGKILL after `grace` s; record the exit."""
        proc = self.proc
        if proc is None:
            return None
        self._marker(f"stopping container {self.view.name}: {why} (SIGTERM, grace {grace:g}s)")
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=max(grace, 0.0))
        except subprocess.TimeoutExpired:
            self._marker(f"container {self.view.name} still running after {grace:g}s: SIGKILL")
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        code = self._on_exit(proc.returncode, message=message, restart=restart)
        return code

    def _on_exit(self, returncode: int, *, message: str | None = None,
                 restart: bool = True) -> int:
        proc = self.proc
        assert proc is not None
        _signal_group(proc.pid, signal.SIGKILL)  # leftovers in the container's group
        code = exit_code_of(returncode)
        self.proc = None
        ran_for = time.monotonic() - self.started_mono
        self._marker(f"container {self.view.name} exited with code {code}")
        log.info("pod %s/%s: pid %d exited with code %d after %.1fs", self.ns, self.pod_name,
                 proc.pid, code, ran_for)
        if message is None:
            message = self._termination_message(code)
        term = Terminated(exit_code=code, reason=terminated_reason(code),
                          finished_at=rfc3339(time.time()), started_at=self.view.running_since,
                          message=message or None, container_id=self.view.container_id)
        self._after_exit(term, ran_for=ran_for, restart=restart)
        return code

    def _termination_message(self, code: int) -> str | None:
        """What the container wrote to its termination message file, else (policy
        FallbackToLogsOnError, failed) the end of this run's log, as a kubelet reads them."""
        try:
            with self.termination_log.open("rb") as f:
                written = f.read(TERMINATION_MESSAGE_FILE_BYTES).decode(errors="replace")
        except OSError:
            written = ""
        policy = self.container.get("terminationMessagePolicy")
        log_text = ""
        if not written.strip() and policy == "FallbackToLogsOnError" and code != 0:
            with contextlib.suppress(OSError):
                log_text = self.log_path.read_text(errors="replace")
        return termination_message(written, policy, code, log_text)

    def _after_exit(self, term: Terminated, *, ran_for: float, restart: bool = True) -> None:
        if ran_for >= BACKOFF_RESET_AFTER:
            self.streak = 0
        policy = (self.pod.get("spec") or {}).get("restartPolicy")
        if restart and should_restart(policy, term.exit_code):
            delay = restart_delay(self.streak)
            self.streak += 1
            self.next_start = time.monotonic() + delay
            self._set(running_since=None, ready=False, started=False, terminated=None,
                      last_terminated=term, waiting_reason="CrashLoopBackOff",
                      waiting_message=(f"back-off {delay:g}s restarting failed container="
                                       f"{self.view.name} pod={self.pod_name}_{self.ns}"
                                       f"({self.uid})"))
        else:
            self._set(running_since=None, ready=False, started=False, terminated=term)

    def _finish_deletion(self, pod: dict[str, Any]) -> bool:
        """Stop the process, write the final state, delete with grace 0. True when done."""
        if self.proc is not None:
            self._stop_process(grace_seconds(pod), "pod is being deleted", restart=False)
            self._publish(pod)
        try:
            self.node.kube.request(
                "DELETE", pod_path(self.ns, self.pod_name),
                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                 "preconditions": {"uid": self.uid}})
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("pod %s/%s: completing deletion: %s", self.ns, self.pod_name, exc)
                return False
        log.info("pod %s/%s: deleted", self.ns, self.pod_name)
        return True

    def _end(self, pod: dict[str, Any]) -> None:
        """The pod's phase in the API became terminal by another's hand (an eviction): stop
        the container for good, as the kubelet does, and keep that phase, reason and
        message in the status (the container's final state is added)."""
        status = pod.get("status") or {}
        why = f"pod phase set to {status.get('phase')} ({status.get('reason') or 'no reason'})"
        log.info("pod %s/%s: %s: stopping its container for good", self.ns, self.pod_name, why)
        self._stop_process(grace_seconds(pod), why, restart=False)
        self._publish(pod, ended=status)
        self.finished = True

    def _publish(self, pod: dict[str, Any], ended: Mapping[str, Any] | None = None) -> None:
        if self.finished:  # terminal before this node took it: leave its status alone
            return
        desired = desired_status(pod, self.view, pod_ip=self.pod_ip, start_time=self.start_time,
                                 previous_conditions=self.last_conditions, now=time.time(),
                                 notes=self.notes, ended=ended)
        if desired == self.last_sent or time.monotonic() < self.next_publish_retry:
            return
        try:
            self.node.kube.patch(pod_path(self.ns, self.pod_name, "status"),
                                 status_patch(desired, self.uid))
        except ApiError as exc:
            if exc.status == 404 or (exc.status in (409, 422) and self._replaced()):
                # Gone, or the name is now a new pod's: the UID precondition refused it.
                self._gone = True
                return
            log.warning("pod %s/%s: status update: %s", self.ns, self.pod_name, exc)
            self.next_publish_retry = time.monotonic() + 1.0
            return
        self.last_sent = desired
        self.last_conditions = desired["conditions"]


    def _replaced(self) -> bool:
        """This pod's name is no longer this pod: deleted, or a new pod's (another UID)."""
        try:
            current = self.node.kube.request("GET", pod_path(self.ns, self.pod_name))
        except ApiError as exc:
            return exc.status == 404
        return bool(((current or {}).get("metadata") or {}).get("uid") != self.uid)


def _write_private(path: Path, text: str) -> None:
    """Replace `path` atomically with `text`, readable by this user only."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
