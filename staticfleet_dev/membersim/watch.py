"""The simulator's watch of the API server: the member pods of every ConsumerGroup and the
operator's Secrets (each group's member token), each a list followed by a watch from its
resourceVersion, listed again when the watch is refused (410 Gone) or fails. Through the local
node's raw JSON client (`staticfleet_dev.localnode.api`): plain dicts, no model objects, which
matters for thousands of pods."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from staticfleet_dev.localnode.api import ApiError, Kube
from staticfleet_dev.membersim.pods import POD_SELECTOR, SECRET_SELECTOR
from staticfleet_dev.membersim.server import Simulator

log = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 240
"""The API server ends each watch after this; it is resumed from the last resourceVersion."""

Listed = Callable[[Iterable[Mapping[str, Any]]], None]
Changed = Callable[[str, Mapping[str, Any]], None]


def watch_into(sim: Simulator, kubeconfig: Path, stopping: threading.Event) -> list[
        threading.Thread]:
    """Start the two watches (pods, Secrets) feeding `sim`; daemon threads, until `stopping`."""
    kube = Kube(kubeconfig)
    threads = [
        threading.Thread(target=watch_loop, name="membersim-pods", daemon=True,
                         args=(kube, "/api/v1/pods", POD_SELECTOR, sim.pods_listed,
                               sim.pod_changed, stopping)),
        threading.Thread(target=watch_loop, name="membersim-secrets", daemon=True,
                         args=(kube, "/api/v1/secrets", SECRET_SELECTOR, sim.secrets_listed,
                               sim.secret_changed, stopping)),
    ]
    for thread in threads:
        thread.start()
    return threads


def watch_loop(kube: Kube, path: str, selector: str, listed: Listed, changed: Changed,
               stopping: threading.Event) -> None:
    """List `path` (every namespace) with `selector`, then watch it, until `stopping`."""
    while not stopping.is_set():
        try:
            listing = kube.request("GET", path, query={"labelSelector": selector})
            listed(listing.get("items") or [])
            version = str(listing["metadata"]["resourceVersion"])
            while not stopping.is_set():
                resumed = _watch(kube, path, selector, version, changed, stopping)
                if resumed is None:
                    break  # the watch was refused (410 Gone): list again
                version = resumed
        except ApiError as exc:
            log.warning("watch %s: %s; listing again", path, exc)
            stopping.wait(1.0)
        except Exception:
            log.exception("watch %s failed; listing again", path)
            stopping.wait(1.0)


def _watch(kube: Kube, path: str, selector: str, version: str, changed: Changed,
           stopping: threading.Event) -> str | None:
    """One watch from `version`; the resourceVersion to resume from, or None to list again."""
    query = {"labelSelector": selector, "watch": "true", "resourceVersion": version,
             "allowWatchBookmarks": "true", "timeoutSeconds": WATCH_TIMEOUT_S}
    for event in kube.stream(path, query, WATCH_TIMEOUT_S + 15):
        if stopping.is_set():
            return version
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            log.info("watch %s ended: %s", path, obj.get("message"))
            return None
        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            changed(kind, obj)
    return version
