"""The local node's own small client of the API server: raw JSON requests, patches and watch
streams through the kubernetes client's connection handling and kubeconfig loading, every failure
as an `ApiError` with the HTTP status (0: no response).

The operator keeps its Kubernetes client in `staticfleet.apply` alone; this package is the
written-down exception: the local node plays the kubelet and talks to the API itself."""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration
from kubernetes.watch.watch import iter_resp_lines


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class Kube:
    """Raw JSON access to the API server (dicts in, dicts out), through the kubernetes client's
    connection handling and kubeconfig loading."""

    def __init__(self, kubeconfig: Path) -> None:
        cfg = Configuration()
        kube_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        cfg.connection_pool_maxsize = 64
        self.api = ApiClient(cfg)
        # What pods get in their kubeconfig: the same server, the same CA (base64 PEM).
        self.server: str = cfg.host
        self.ca_data = (base64.b64encode(Path(cfg.ssl_ca_cert).read_bytes()).decode()
                        if cfg.ssl_ca_cert else "")

    def _send(self, method: str, path: str, body: Any, query: Mapping[str, Any] | None,
              content_type: str, timeout: float | tuple[float, float]) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        m, url, hdrs, b, _ = self.api.param_serialize(
            method=method, resource_path=path,
            query_params=[(k, str(v)) for k, v in query.items()] if query else None,
            header_params=headers, body=body, auth_settings=["BearerToken"])
        try:
            return self.api.call_api(m, url, hdrs, b, _request_timeout=timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, f"{method} {path}: {exc}") from exc

    @staticmethod
    def _error(resp: Any, data: bytes) -> ApiError:
        try:
            message = json.loads(data).get("message", "")
        except (ValueError, AttributeError):
            message = data[:300].decode(errors="replace")
        return ApiError(int(resp.status), message)

    def request(self, method: str, path: str, body: Any = None, *,
                query: Mapping[str, Any] | None = None,
                content_type: str = "application/json", timeout: float = 30) -> Any:
        resp = self._send(method, path, body, query, content_type, timeout)
        try:
            data = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, f"{method} {path}: {exc}") from exc
        if not 200 <= resp.status < 300:
            raise self._error(resp, data)
        return json.loads(data) if data else None

    def patch(self, path: str, body: Any, *, strategic: bool = True) -> Any:
        ctype = ("application/strategic-merge-patch+json" if strategic
                 else "application/merge-patch+json")
        return self.request("PATCH", path, body, content_type=ctype)

    def stream(self, path: str, query: Mapping[str, Any], read_timeout: float) -> Iterator[Any]:
        resp = self._send("GET", path, None, query, "", (10, read_timeout))
        raw = resp.response
        try:
            if not 200 <= resp.status < 300:
                raise self._error(resp, resp.read())
            for line in iter_resp_lines(raw):
                if line:
                    yield json.loads(line)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, f"watch {path}: {exc}") from exc
        finally:
            raw.close()
            raw.release_conn()


WATCH_TIMEOUT = 30
"""Seconds the API server keeps a pod watch open before it ends it (then it is listed again)."""


def watch_pods(kube: Kube, stopping: threading.Event, log: logging.Logger,
               resync: Callable[[list[dict[str, Any]]], None],
               observe: Callable[[str, dict[str, Any]], None]) -> None:
    """List every pod (`resync`), then watch from that list's version (`observe` each ADDED,
    MODIFIED or DELETED pod), and list again when the watch ends or fails, until `stopping`:
    the pod loop of the local node and of kwok's binder."""
    while not stopping.is_set():
        try:
            listing = kube.request("GET", "/api/v1/pods")
            resync(listing.get("items") or [])
            rv = listing["metadata"]["resourceVersion"]
            query = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                     "timeoutSeconds": WATCH_TIMEOUT}
            for event in kube.stream("/api/v1/pods", query, WATCH_TIMEOUT + 15):
                if stopping.is_set():
                    return
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    log.info("watch ended: %s", obj.get("message"))
                    break
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    observe(kind, obj)
        except ApiError as exc:
            log.warning("pod watch: %s; relisting", exc)
            stopping.wait(1.0)
        except Exception:
            log.exception("pod watch failed; relisting")
            stopping.wait(1.0)


def pod_path(ns: str, name: str, sub: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods/{name}" + (f"/{sub}" if sub else "")
