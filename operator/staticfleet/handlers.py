"""Kopf handlers: thin. They keep an index of member pods, keep one daemon per ConsumerGroup that
runs `service.reconcile` whenever a pass is due, and wake it when something changes.

Level, not edge: every pass is the same whole pass. A pass is due when the ConsumerGroup's spec
(or its restart annotation) changed, when one of its member pods changed, when the previous pass
asked to look again (rollouts do, every second or so), and otherwise every `RESYNC_S`.

Cheap at scale: member pods come from a watch-backed Kopf index (no LIST per pass); the passes
run in a bounded thread pool, and one Kafka cluster's groups take at most `PER_CLUSTER` of its
workers, so a slow or dead cluster does not delay the groups of the others.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf

from staticfleet import apply, metrics, service
from staticfleet.decisions.conditions import DEGRADED, GROUP_ID_IN_USE
from staticfleet.decisions.names import GROUP_LABEL, MANAGED_BY_LABEL, MANAGER
from staticfleet.decisions.settings import OperatorSettings
from staticfleet.decisions.snapshot import Claimant, claim_key
from staticfleet.decisions.spec.model import (
    API_GROUP,
    API_VERSION,
    PLURAL,
    RESTARTED_AT_ANNOTATION,
)
from staticfleet.memory import Memory
from staticfleet.observe import clusterpool

RESYNC_S = float(os.environ.get("STATICFLEET_RESYNC_SECONDS", "10"))
WORKERS = int(os.environ.get("STATICFLEET_WORKERS", "16"))
PER_CLUSTER = max(1, WORKERS // 2)

Key = tuple[str, str]


def _plain(value: Any) -> Any:
    """Kopf's body views as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@dataclass
class Runner:
    """Runs passes in worker threads; wakes the daemons of groups whose pass is due."""

    clients: service.Clients
    memory: Memory = field(default_factory=Memory)
    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(WORKERS, thread_name_prefix="reconcile"))
    wakeups: dict[Key, asyncio.Event] = field(default_factory=dict)
    seen: dict[Key, tuple[Any, ...]] = field(default_factory=dict)
    clusters: dict[str, asyncio.Semaphore] = field(default_factory=dict)

    def wakeup(self, key: Key) -> asyncio.Event:
        return self.wakeups.setdefault(key, asyncio.Event())

    def wake(self, key: Key) -> None:
        event = self.wakeups.get(key)
        if event is not None:
            event.set()

    async def run(self, body: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
                  claimants: tuple[Claimant, ...] = ()) -> float:
        """One pass; returns when the next one is due (seconds)."""
        cluster = str(((body.get("spec") or {}).get("kafka") or {}).get("bootstrapServers"))
        slots = self.clusters.setdefault(cluster, asyncio.Semaphore(PER_CLUSTER))
        async with slots:
            loop = asyncio.get_running_loop()
            plan = await loop.run_in_executor(
                self.pool, service.reconcile, body, pods, self.clients, self.memory,
                datetime.now(UTC), claimants)
        return plan.requeue_after_s if plan.requeue_after_s is not None else RESYNC_S

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.clients.close()


def _change_key(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a ConsumerGroup, when it changes, makes a pass due (not its status)."""
    meta = body.get("metadata") or {}
    return (meta.get("generation"), (meta.get("annotations") or {}).get(RESTARTED_AT_ANNOTATION),
            meta.get("deletionTimestamp"))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration")
    # Our own Events carry the decisions; Kopf posts only its warnings and errors.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    memo.runner = Runner(service.Clients(
        kube=apply.Kube(apply.load_client(os.environ.get("KUBECONFIG"))),
        settings=OperatorSettings.from_env(os.environ),
        reads=clusterpool.ClusterReads(interval_s=RESYNC_S)))


@kopf.on.cleanup()
def close(memo: kopf.Memo, **_: Any) -> None:
    runner: Runner | None = getattr(memo, "runner", None)
    if runner is not None:
        runner.close()


@kopf.index("", "v1", "pods", labels={MANAGED_BY_LABEL: MANAGER, GROUP_LABEL: kopf.PRESENT})
def member_pods(namespace: str | None, labels: Mapping[str, str], body: kopf.Body,
                **_: Any) -> dict[Key, dict[str, Any]]:
    """Member pods by (namespace, ConsumerGroup), kept current by the pod watch."""
    return {(namespace or "", labels[GROUP_LABEL]): _plain(body)}


def _claim_key(body: Mapping[str, Any]) -> tuple[str, str]:
    kafka = (body.get("spec") or {}).get("kafka") or {}
    return claim_key(str(kafka.get("bootstrapServers") or ""),
                     str(kafka.get("groupId") or body["metadata"]["name"]))


@kopf.index(API_GROUP, API_VERSION, PLURAL)
def group_ids(body: kopf.Body, **_: Any) -> dict[tuple[str, str], Claimant]:
    """Every ConsumerGroup by the Kafka group it uses (cluster, group id)."""
    meta = body["metadata"]
    key = _claim_key(body)
    holding = ((body.get("status") or {}).get("groupId") == key[1]
               and _degraded_reason(body) != GROUP_ID_IN_USE)
    return {key: Claimant(meta["namespace"], meta["name"], meta["creationTimestamp"],
                          meta["uid"], holding)}


def _degraded_reason(body: Mapping[str, Any]) -> str | None:
    for cond in (body.get("status") or {}).get("conditions") or ():
        if cond.get("type") == DEGRADED and cond.get("status") == "True":
            return str(cond.get("reason"))
    return None


@kopf.on.event("", "v1", "pods", labels={MANAGED_BY_LABEL: MANAGER, GROUP_LABEL: kopf.PRESENT})
async def member_pod_changed(namespace: str | None, labels: Mapping[str, str],
                             body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A member pod changed (ready, deleted, ...): its ConsumerGroup's pass is due. When its
    process closed is kept, because the pod may be gone before that pass."""
    memo.runner.memory.exits.note_closed(_plain(body))
    memo.runner.wake((namespace or "", labels[GROUP_LABEL]))


@kopf.on.event(API_GROUP, API_VERSION, PLURAL)
async def group_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """The spec or the restart annotation changed: a pass is due (a status write is not)."""
    meta = body["metadata"]
    key = (meta["namespace"], meta["name"])
    if memo.runner.seen.get(key) != _change_key(body):
        memo.runner.wake(key)


@kopf.daemon(API_GROUP, API_VERSION, PLURAL, cancellation_timeout=5.0)
async def keep_reconciled(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped,
                          **kwargs: Any) -> None:
    """One ConsumerGroup's passes, for as long as it exists."""
    runner: Runner = memo.runner
    index: kopf.Index[Key, dict[str, Any]] = kwargs["member_pods"]
    claims: kopf.Index[tuple[str, str], Claimant] = kwargs["group_ids"]
    meta = body["metadata"]
    key = (meta["namespace"], meta["name"])
    wake = runner.wakeup(key)
    try:
        while not stopped:
            wake.clear()
            plain = _plain(body)
            runner.seen[key] = _change_key(plain)
            pods = list(index.get(key, []))
            claimants = tuple(claims.get(_claim_key(plain), []))
            delay = await runner.run(plain, pods, claimants)
            await _sleep(wake, stopped, delay)
    finally:
        runner.wakeups.pop(key, None)
        runner.seen.pop(key, None)


async def _sleep(wake: asyncio.Event, stopped: kopf.DaemonStopped, delay: float) -> None:
    """Until woken, stopped, or `delay` seconds passed."""

    async def until_stopped() -> None:
        await stopped.wait()

    waits = {asyncio.ensure_future(wake.wait()), asyncio.ensure_future(until_stopped())}
    try:
        await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


@kopf.on.delete(API_GROUP, API_VERSION, PLURAL, optional=True)
def forget(namespace: str | None, name: str, uid: str, memo: kopf.Memo, **_: Any) -> None:
    if namespace is None:
        return
    metrics.forget(namespace, name)
    memo.runner.memory.forget(uid)
    memo.runner.clients.forget(uid)
