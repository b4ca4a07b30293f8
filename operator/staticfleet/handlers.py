"""Kopf handlers: thin. Each one hands the ConsumerGroup to `service.reconcile`, then writes the
status it returns and posts its Events. No API calls, no timing math here.

Level, not edge: create, update, resume and a timer all run the same pass. The timer ticks every
second but only runs a pass when one is due: right after a change to a member pod, when the
previous pass asked to look again (rollouts do, every second or so), or every `RESYNC_S`
otherwise. One pass at a time per ConsumerGroup.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from staticfleet import apply, metrics, service
from staticfleet.decisions.builders import GROUP_LABEL, MANAGED_BY_LABEL, MANAGER
from staticfleet.statuspatch import merge_patch

GROUP, VERSION, PLURAL = "staticfleet.io", "v1alpha1", "consumergroups"
TICK_S = 1.0
RESYNC_S = float(os.environ.get("STATICFLEET_RESYNC_SECONDS", "10"))

_due: dict[tuple[str, str], float] = {}
_due_lock = threading.Lock()


def _plain(value: Any) -> Any:
    """Kopf's body views as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _mark_due(namespace: str, name: str, at: float) -> None:
    with _due_lock:
        _due[(namespace, name)] = min(at, _due.get((namespace, name), at))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix="staticfleet.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="staticfleet.io", key="last-handled-configuration")
    settings.posting.level = logging.INFO
    settings.execution.max_workers = int(os.environ.get("STATICFLEET_WORKERS", "16"))
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    memo.deps = service.Deps(kube=apply.Kube(apply.load_client(os.environ.get("KUBECONFIG"))))


@kopf.on.cleanup()
def close(memo: kopf.Memo, **_: Any) -> None:
    # The member-status pool is left to die with the process: timer passes may still be
    # finishing while Kopf cleans up, and a closed pool would fail them noisily.
    deps: service.Deps | None = getattr(memo, "deps", None)
    if deps is not None:
        deps.kube.api.close()


def _reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo) -> None:
    deps: service.Deps = memo.deps
    plain = _plain(body)
    meta = plain["metadata"]
    key = (meta["namespace"], meta["name"])
    lock = deps.lock_for(meta["uid"])
    if not lock.acquire(blocking=False):
        _mark_due(*key, time.monotonic() + 0.5)  # a pass is running; look again right after
        return
    try:
        outcome = service.reconcile(plain, deps, datetime.now(UTC))
    finally:
        lock.release()
    status_patch = merge_patch(plain.get("status") or {}, outcome.status)
    if status_patch:
        patch["status"] = status_patch
    for ev in outcome.events:
        kopf.event(body, type=ev.type, reason=ev.reason, message=ev.message)
    with _due_lock:
        _due[key] = time.monotonic() + (outcome.requeue_after or RESYNC_S)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def on_change(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    _reconcile(body, patch, memo)


@kopf.timer(GROUP, VERSION, PLURAL, interval=TICK_S, sharp=False)
def tick(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    meta = body["metadata"]
    with _due_lock:
        due = _due.get((meta["namespace"], meta["name"]), 0.0)
    if time.monotonic() >= due:
        _reconcile(body, patch, memo)


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def forget(namespace: str | None, name: str, **_: Any) -> None:
    if namespace is None:
        return
    metrics.forget(namespace, name)
    with _due_lock:
        _due.pop((namespace, name), None)


@kopf.on.event("", "v1", "pods", labels={MANAGED_BY_LABEL: MANAGER, GROUP_LABEL: kopf.PRESENT})
def member_pod_changed(namespace: str | None, labels: Mapping[str, str], **_: Any) -> None:
    """A member pod changed (ready, deleted, ...): reconcile its ConsumerGroup soon."""
    if namespace is not None:
        _mark_due(namespace, labels[GROUP_LABEL], time.monotonic() + 0.2)
