"""Run the operator: Kopf with staticfleet's handlers, Prometheus metrics, a liveness probe."""

from __future__ import annotations

import logging
import os
import time

import kopf
from prometheus_client import start_http_server

from staticfleet import allocator, kopfpatch
from staticfleet.decisions.settings import OTHER_SHARDS_ENV, SHARD_ENV, OperatorSettings
from staticfleet.metrics import REGISTRY

PRIORITY_CEILING_MS = 10**13
"""Above any start time in milliseconds since 1970 until the year 2286 (and below 2**53, so the
peering object's JSON holds it exactly)."""


def peering_priority(started_ms: int) -> int:
    """kopf's peering priority of an operator started at `started_ms`: the earlier it started,
    the higher. kopf pauses an operator while a peer of higher priority runs, and pauses every
    one while two share a priority; so the oldest of a shard's operators runs, a newer one waits
    as a standby and takes over when the older one is gone (its keep-alive ends at its exit, or
    expires `settings.peering.lifetime`, 60 s, after it died)."""
    return PRIORITY_CEILING_MS - started_ms


def listable(namespaces: list[str], all_namespaces: bool) -> tuple[str, ...] | None:
    """The namespaces a sharded operator lists ConsumerGroups in (`claims`): those it was given,
    or every namespace (None) when it watches all, or when one of them is a kopf pattern (a
    glob such as `team-*`, or a `!` exclusion), which no list request can name."""
    if all_namespaces or not namespaces or any(
            ch in n for n in namespaces for ch in "*?[!,"):
        return None
    return tuple(namespaces)


def run_operator(*, namespaces: list[str], all_namespaces: bool, metrics_port: int,
                 health_port: int, metrics_host: str = "0.0.0.0", shard: str | None = None,
                 other_shards: str | None = None, peering: str | None = None) -> int:
    """Serve until SIGTERM. Watches `namespaces`, or every namespace when none is given; with
    `shard`, only that shard's ConsumerGroups (`decisions.shards`); with `peering`, pauses while
    an older operator of the same peering object runs."""
    allocator.limit_arenas()  # before any thread: the passes' pool would hold an arena each
    import staticfleet.handlers  # noqa: F401  (registers the handlers with Kopf)

    flags = {SHARD_ENV: shard, OTHER_SHARDS_ENV: other_shards}
    # A setting it cannot read stops it here, not later; a flag wins over its variable.
    settings = OperatorSettings.from_env(
        {**os.environ, **{k: v for k, v in flags.items() if v is not None}})
    logging.basicConfig(level=os.environ.get("STATICFLEET_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # INFO is what the operator decided (one line per action, with its reasons); Kopf's own
    # INFO lines ("Handler ... succeeded." for every watched pod event) go below it.
    kopf_level = os.environ.get("STATICFLEET_KOPF_LOG_LEVEL", "WARNING")
    for name in ("kopf", "aiohttp.access"):
        logging.getLogger(name).setLevel(kopf_level)
    if settings.shard is not None:
        logging.getLogger(__name__).info(
            "shard %s: watching the ConsumerGroups selected by %r", settings.shard.name,
            settings.shard.selector())
    if metrics_port:
        start_http_server(metrics_port, addr=metrics_host, registry=REGISTRY)
    host = f"[{metrics_host}]" if ":" in metrics_host else metrics_host  # IPv6 pod IPs
    liveness = f"http://{host}:{health_port}/healthz" if health_port else None
    allocator.trim_periodically()
    kopfpatch.install()
    kopf.run(
        standalone=peering is None,
        peering_name=peering,
        priority=peering_priority(int(time.time() * 1000)) if peering else None,
        clusterwide=all_namespaces or not namespaces,
        namespaces=namespaces,
        liveness_endpoint=liveness,
        memo=kopf.Memo(settings=settings, namespaces=listable(namespaces, all_namespaces)),
    )
    return 0
