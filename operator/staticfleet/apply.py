"""The one layer that talks to the Kubernetes API.

It adopts children (owner references), creates or server-side-applies them, lists and deletes
member pods, and turns `ApiException` into the project's own errors. Nothing else in the
operator imports the Kubernetes client.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ApiException as DynamicApiException

FIELD_MANAGER = "staticfleet"
MEMBER_SELECTOR = (
    "app.kubernetes.io/managed-by=staticfleet,app.kubernetes.io/name=staticfleet-member"
)


class ApplyError(RuntimeError):
    """The API server refused or failed a request; `status` is its HTTP status."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class SecretMissing(ApplyError):
    """A Secret (or a key of it) referenced by the spec does not exist."""


def load_client(kubeconfig: str | None = None) -> client.ApiClient:
    """An API client from the given kubeconfig, the in-cluster config, or ~/.kube/config."""
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def owner_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def adopt(obj: dict[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `obj` owned by `owner`, in the owner's namespace."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    meta["namespace"] = owner["metadata"]["namespace"]
    meta["ownerReferences"] = [owner_reference(owner)]
    return out


def _error(exc: ApiException | DynamicApiException, what: str) -> ApplyError:
    status = int(getattr(exc, "status", 0) or 0)
    reason = getattr(exc, "reason", "") or ""
    body = getattr(exc, "body", "") or ""
    return ApplyError(f"{what}: HTTP {status} {reason} {str(body)[:300]}".strip(), status)


@dataclass
class Kube:
    """Operations on the API server used by the reconciler."""

    api: client.ApiClient

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.dynamic = DynamicClient(self.api)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply `obj` (create or update the fields staticfleet owns)."""
        resource = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        meta = obj["metadata"]
        try:
            result = resource.server_side_apply(
                body=obj, name=meta["name"], namespace=meta.get("namespace"),
                field_manager=FIELD_MANAGER, force_conflicts=True)
        except DynamicApiException as exc:
            raise _error(exc, f"applying {obj['kind']} {meta['name']}") from exc
        return dict(result.to_dict())

    def member_pods(self, namespace: str, group: str) -> list[dict[str, Any]]:
        """Every member pod of the ConsumerGroup `group`, terminating ones included."""
        try:
            pods = self.core.list_namespaced_pod(
                namespace, label_selector=f"{MEMBER_SELECTOR},staticfleet.io/group={group}")
        except ApiException as exc:
            raise _error(exc, f"listing the member pods of {group}") from exc
        return [self.api.sanitize_for_serialization(p) for p in pods.items]

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """Create a member pod; None when one of that name still exists (e.g. terminating)."""
        try:
            created = self.core.create_namespaced_pod(
                pod["metadata"]["namespace"], pod)  # type: ignore[arg-type]
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise _error(exc, f"creating pod {pod['metadata']['name']}") from exc
        return dict(self.api.sanitize_for_serialization(created))

    def delete_pod(self, namespace: str, name: str, uid: str,
                   grace_seconds: int | None = None) -> bool:
        """Delete exactly the pod with this uid (a newer pod of the same name is left alone).

        Returns False when it was already gone.
        """
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid),
                                      grace_period_seconds=grace_seconds)
        try:
            self.core.delete_namespaced_pod(name, namespace, body=body)
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise _error(exc, f"deleting pod {name}") from exc
        return True

    def check_secret_keys(self, namespace: str, refs: list[tuple[str, str]]) -> None:
        """Raise SecretMissing naming the first Secret or key that does not exist."""
        for name, key in refs:
            try:
                secret = self.core.read_namespaced_secret(name, namespace)
            except ApiException as exc:
                if exc.status == 404:
                    raise SecretMissing(f"Secret {namespace}/{name} does not exist", 404) from exc
                raise _error(exc, f"reading Secret {name}") from exc
            if key not in (secret.data or {}):
                raise SecretMissing(f"Secret {namespace}/{name} has no key {key!r}", 404)

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        """The decoded value of one key of a Secret (for the operator's own Kafka client)."""
        import base64

        self.check_secret_keys(namespace, [(name, key)])
        secret = self.core.read_namespaced_secret(name, namespace)
        return base64.b64decode((secret.data or {})[key]).decode()

    def delete_children(self, namespace: str, kind_api: list[tuple[str, str]],
                        names: list[str]) -> None:
        """Delete named children (used when a feature is turned off, e.g. the PDB at 0)."""
        for (api_version, kind), name in zip(kind_api, names, strict=True):
            resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
            try:
                resource.delete(name=name, namespace=namespace)
            except DynamicApiException as exc:
                if getattr(exc, "status", 0) != 404:
                    raise _error(exc, f"deleting {kind} {name}") from exc
