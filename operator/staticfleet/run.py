"""Run the operator: Kopf with staticfleet's handlers, Prometheus metrics, a liveness probe."""

from __future__ import annotations

import logging
import os

import kopf
from prometheus_client import start_http_server

from staticfleet.decisions.settings import OperatorSettings
from staticfleet.metrics import REGISTRY


def run_operator(*, namespaces: list[str], all_namespaces: bool, metrics_port: int,
                 health_port: int, metrics_host: str = "0.0.0.0") -> int:
    """Serve until SIGTERM. Watches `namespaces`, or every namespace when none is given."""
    import staticfleet.handlers  # noqa: F401  (registers the handlers with Kopf)

    OperatorSettings.from_env(os.environ)  # a setting it cannot read stops it here, not later
    logging.basicConfig(level=os.environ.get("STATICFLEET_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # INFO is what the operator decided (one line per action, with its reasons); Kopf's own
    # INFO lines ("Handler ... succeeded." for every watched pod event) go below it.
    kopf_level = os.environ.get("STATICFLEET_KOPF_LOG_LEVEL", "WARNING")
    for name in ("kopf", "aiohttp.access"):
        logging.getLogger(name).setLevel(kopf_level)
    if metrics_port:
        start_http_server(metrics_port, addr=metrics_host, registry=REGISTRY)
    host = f"[{metrics_host}]" if ":" in metrics_host else metrics_host  # IPv6 pod IPs
    liveness = f"http://{host}:{health_port}/healthz" if health_port else None
    kopf.run(
        standalone=True,
        clusterwide=all_namespaces or not namespaces,
        namespaces=namespaces,
        liveness_endpoint=liveness,
    )
    return 0
