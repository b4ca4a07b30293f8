"""The one layer that talks to the Kubernetes API.

It adopts children (owner references), server-side-applies them (but the members' token
Secret, which it only ever creates: `CREATE_ONLY`), creates, annotates and deletes member pods,
writes the ConsumerGroup's status and Events, reads Secrets, and, for a sharded operator,
labels ConsumerGroups with their Kafka group, lists them by it and clears `status.shard` when a
shard lets a group go. It turns `ApiException` into the project's own errors. Nothing else in
the operator imports the Kubernetes client.

It writes nothing at rest. A child is applied again only when its content changed, or when it
no longer holds what was applied: the handlers watch the children (label-selected, like the
member pods) and tell `noticed` of each change; a child someone edited (a field the operator
sets) or deleted is forgotten (`decisions.drift`), and its group's next pass, which the handlers
wake at once, applies it again. The operator's own writes, and changes to fields it does not
set, wake nothing. What it applied is remembered before the request is sent, so the watch's
event of that very write finds it. A Secret is read at most once per `Kube.secret_ttl_s`
(`SECRET_TTL_S`, 60 s, unless `STATICFLEET_SECRET_TTL_SECONDS` says otherwise).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ApiException as DynamicApiException

from staticfleet.decisions.drift import drift
from staticfleet.decisions.spec.model import PLURAL

FIELD_MANAGER = "staticfleet"
SECRET_TTL_S = 60.0
CREATE_ONLY = frozenset({("v1", "Secret")})
"""Children the operator creates and never changes (the members' token Secret, made only while
it is missing): created, never patched, so the operator needs no `patch` on Secrets."""


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


def adopt(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `obj` owned by `owner`, in the owner's namespace."""
    out = copy.deepcopy(dict(obj))
    meta = out.setdefault("metadata", {})
    meta["namespace"] = owner["metadata"]["namespace"]
    meta["ownerReferences"] = [owner_reference(owner)]
    return out


def _owner_uid(obj: Mapping[str, Any]) -> str:
    return str((obj["metadata"].get("ownerReferences") or [{}])[0].get("uid", ""))


def _error(exc: ApiException | DynamicApiException, what: str) -> ApplyError:
    status = int(getattr(exc, "status", 0) or 0)
    reason = getattr(exc, "reason", "") or ""
    body = getattr(exc, "body", "") or ""
    return ApplyError(f"{what}: HTTP {status} {reason} {str(body)[:300]}".strip(), status)


def _refused_field(exc: ApiException) -> str | None:
    """The field an Invalid (422) answer names first, e.g. `metadata.uid`."""
    try:
        causes = json.loads(exc.body or "{}").get("details", {}).get("causes") or []
    except (TypeError, ValueError, AttributeError):
        return None
    return str(causes[0].get("field")) if causes and isinstance(causes[0], dict) else None


class Drifted(NamedTuple):
    """A child that no longer holds what the operator applied to it (`Kube.noticed`)."""

    group: tuple[str, str]
    """Its ConsumerGroup (namespace, name), whose next pass applies it again."""
    child: str
    """`<kind> <name>`."""
    why: str


@dataclass
class Kube:
    """Operations on the API server used by the reconciler."""

    api: client.ApiClient
    applied: dict[tuple[str, str, str], tuple[str, Mapping[str, Any]]] = field(
        default_factory=dict)
    """What was last applied to each child (kind, namespace, name): its digest, and the child
    as sent (owner reference included), for `noticed` to compare the watched child with."""
    secrets: dict[tuple[str, str], tuple[float, dict[str, str]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    secret_ttl_s: float = SECRET_TTL_S
    """How long a Secret read is kept (`secret_data`)."""

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self._dynamic: DynamicClient | None = None

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:  # discovery costs requests: only when something is applied
            self._dynamic = DynamicClient(self.api)
        return self._dynamic

    def apply(self, obj: Mapping[str, Any]) -> bool:
        """Server-side apply `obj` (create or update the fields staticfleet owns), unless this
        content was applied last and the watch saw no drift since (`noticed`); a
        `CREATE_ONLY` kind is created instead (`create`). Returns whether it was sent."""
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace", ""), meta["name"])
        digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()
        with self.lock:
            last = self.applied.get(key)
            if last is not None and last[0] == digest:
                return False
            # Before the request: the watch's event of this write may come before its answer.
            sent = self.applied[key] = (digest, copy.deepcopy(dict(obj)))
        try:
            resource = self.dynamic.resources.get(api_version=obj["apiVersion"],
                                                  kind=obj["kind"])
            if (obj["apiVersion"], obj["kind"]) in CREATE_ONLY:
                self.create(resource, obj)
            else:
                try:
                    resource.server_side_apply(
                        body=dict(obj), name=meta["name"], namespace=meta.get("namespace"),
                        field_manager=FIELD_MANAGER, force_conflicts=True)
                except DynamicApiException as exc:
                    raise _error(exc, f"applying {obj['kind']} {meta['name']}") from exc
        except BaseException:
            with self.lock:
                if self.applied.get(key) is sent:
                    del self.applied[key]  # not applied: the next pass sends it again
            raise
        return True

    def noticed(self, live: Mapping[str, Any], gone: bool) -> Drifted | None:
        """The watch saw child `live` change (`gone`: deleted, or no longer selected by its
        labels). When it no longer holds what this operator applied to it, what was applied
        is forgotten, so that its group's next pass applies it again: the Drifted says which
        group. None for the operator's own write, a change to fields it does not set, and a
        child it applied nothing to (another shard's group, one it has not reached yet)."""
        meta = live.get("metadata") or {}
        key = (str(live.get("kind", "")), str(meta.get("namespace", "")), str(meta.get("name")))
        with self.lock:
            last = self.applied.get(key)
            why = None if last is None else drift(last[1], None if gone else live)
            if last is None or why is None:
                return None
            del self.applied[key]
        owner = (last[1]["metadata"].get("ownerReferences") or [{}])[0].get("name", "")
        return Drifted((key[1], str(owner)), f"{key[0]} {key[2]}", why)

    def missing(self, kinds: Sequence[tuple[str, str]], selector: str,
                namespaces: Sequence[str] | None = None) -> list[Drifted]:
        """The children this operator applied that the API server no longer has: one LIST of
        each of `kinds` ((apiVersion, kind)) by `selector`, in `namespaces` (None: all), held
        against what was applied before it. A watch that had to list again (HTTP 410) sends no
        DELETED for a child deleted meanwhile, and `noticed` never hears of it; this does. Each
        one found is forgotten (its group's next pass applies it again) and said, as `noticed`
        says drift. A child applied while the list ran is left for the next audit."""
        wanted = {kind for _, kind in kinds}
        with self.lock:
            before = {key: last for key, last in self.applied.items() if key[0] in wanted}
        if not before:
            return []
        present: set[tuple[str, str, str]] = set()
        for api_version, kind in kinds:
            resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
            for namespace in namespaces or (None,):
                try:
                    listed = resource.get(namespace=namespace, label_selector=selector)
                except DynamicApiException as exc:
                    raise _error(exc, f"listing {kind}s") from exc
                present |= {(kind, str(item.metadata.namespace), str(item.metadata.name))
                            for item in listed.items}
        out = []
        with self.lock:
            for key, last in before.items():
                if key in present or self.applied.get(key) is not last:
                    continue
                del self.applied[key]
                owner = (last[1]["metadata"].get("ownerReferences") or [{}])[0].get("name", "")
                out.append(Drifted((key[1], str(owner)), f"{key[0]} {key[2]}",
                                   "deleted (the API server's list no longer has it)"))
        return out

    def create(self, resource: Any, obj: Mapping[str, Any]) -> None:
        """Create `obj`. One that exists already is not changed: an ApplyError (409) says what
        to do; a Secret is read again from the API server next time."""
        meta = obj["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        try:
            resource.create(body=dict(obj), namespace=namespace or None,
                            field_manager=FIELD_MANAGER)
        except DynamicApiException as exc:
            if getattr(exc, "status", 0) != 409:
                raise _error(exc, f"creating {obj['kind']} {name}") from exc
            self.forget_secret(namespace, name)
            raise ApplyError(
                f"creating {obj['kind']} {namespace}/{name}: it exists already, without the "
                "content the operator reads from it (a Secret without its key, or one made "
                "meanwhile); the operator never changes it: delete it and the operator makes "
                "it again, or fill it in yourself", 409) from exc

    def forget(self, owner_uid: str) -> None:
        """Drop what is remembered of a deleted ConsumerGroup's children."""
        with self.lock:
            for key in [k for k, (_, obj) in self.applied.items() if _owner_uid(obj) == owner_uid]:
                del self.applied[key]

    def create_pod(self, pod: Mapping[str, Any]) -> dict[str, Any] | None:
        """Create a member pod; None when one of that name still exists (e.g. terminating)."""
        try:
            created = self.core.create_namespaced_pod(
                pod["metadata"]["namespace"], dict(pod))  # type: ignore[arg-type]
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise _error(exc, f"creating pod {pod['metadata']['name']}") from exc
        return dict(self.api.sanitize_for_serialization(created))

    def delete_pod(self, namespace: str, name: str, uid: str,
                   grace_seconds: int | None = None) -> dict[str, Any] | None:
        """Delete exactly the pod with this uid (a newer pod of the same name is left alone).

        Returns the pod as the deletion left it (terminating), None when it was already gone.
        """
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid),
                                      grace_period_seconds=grace_seconds)
        try:
            pod = self.core.delete_namespaced_pod(name, namespace, body=body)
        except ApiException as exc:
            if exc.status in (404, 409):
                return None
            raise _error(exc, f"deleting pod {name}") from exc
        out = self.api.sanitize_for_serialization(pod)
        return dict(out) if isinstance(out, dict) and out.get("kind") == "Pod" else None

    def annotate_pod(self, namespace: str, name: str, uid: str,
                     annotations: Mapping[str, str]) -> bool:
        """Merge `annotations` into exactly the pod with this uid (the uid in the patch is a
        precondition: the API server refuses to change it). Returns False when that pod is
        gone, or its name is a newer pod's."""
        body = {"metadata": {"uid": uid, "annotations": dict(annotations)}}
        try:
            self.core.patch_namespaced_pod(name, namespace, body,
                                           _content_type="application/merge-patch+json")
        except ApiException as exc:
            if exc.status == 404 or (exc.status == 422 and _refused_field(exc) == "metadata.uid"):
                return False
            raise _error(exc, f"annotating pod {name}") from exc
        return True

    def patch_status(self, owner: Mapping[str, Any], patch: Mapping[str, Any]) -> None:
        """Merge-patch the status subresource of a ConsumerGroup."""
        group, version = owner["apiVersion"].split("/")
        meta = owner["metadata"]
        try:
            self.custom.patch_namespaced_custom_object_status(
                group, version, meta["namespace"], PLURAL, meta["name"],
                {"status": dict(patch)}, _content_type="application/merge-patch+json")
        except ApiException as exc:
            if exc.status == 404:
                return  # deleted meanwhile
            raise _error(exc, f"writing the status of {meta['name']}") from exc

    def scale(self, owner: Mapping[str, Any], replicas: int, field_manager: str) -> bool:
        """Set a ConsumerGroup's spec.replicas through its scale subresource, as
        `field_manager`, only if it still is what `owner` says (a JSON patch's test): False
        when it changed meanwhile or the object is gone (the next pass decides again)."""
        group, version = owner["apiVersion"].split("/")
        meta = owner["metadata"]
        current = (owner.get("spec") or {}).get("replicas", 1)
        patch = [{"op": "test", "path": "/spec/replicas", "value": current},
                 {"op": "replace", "path": "/spec/replicas", "value": replicas}]
        try:
            self.custom.patch_namespaced_custom_object_scale(
                group, version, meta["namespace"], PLURAL, meta["name"], patch,
                field_manager=field_manager, _content_type="application/json-patch+json")
        except ApiException as exc:
            if exc.status in (404, 409, 422):
                return False
            raise _error(exc, f"scaling {meta['name']} to {replicas}") from exc
        return True

    def release_shard(self, owner: Mapping[str, Any], shard: str) -> bool:
        """Clear a ConsumerGroup's `status.shard` if it still names `shard` (a JSON patch's
        test): the shard lets the group go. False when it names another shard by now, or the
        group is gone."""
        group, version = owner["apiVersion"].split("/")
        meta = owner["metadata"]
        patch = [{"op": "test", "path": "/status/shard", "value": shard},
                 {"op": "remove", "path": "/status/shard"}]
        try:
            self.custom.patch_namespaced_custom_object_status(
                group, version, meta["namespace"], PLURAL, meta["name"], patch,
                _content_type="application/json-patch+json")
        except ApiException as exc:
            if exc.status in (404, 409, 422):
                return False
            raise _error(exc, f"releasing {meta['name']} from shard {shard}") from exc
        return True

    def read_group(self, owner: Mapping[str, Any]) -> dict[str, Any] | None:
        """The ConsumerGroup `owner` as the API server has it now (None: gone, or replaced by
        a newer object of its name). A list by name: the operator may list ConsumerGroups, not
        get them."""
        group, version = owner["apiVersion"].split("/")
        meta = owner["metadata"]
        try:
            answer: Any = self.custom.list_namespaced_custom_object(
                group, version, meta["namespace"], PLURAL,
                field_selector=f"metadata.name={meta['name']}")
        except ApiException as exc:
            raise _error(exc, f"reading {meta['name']}") from exc
        for item in answer.get("items") or ():
            if (item.get("metadata") or {}).get("uid") == meta["uid"]:
                return dict(item)
        return None

    def label_group(self, owner: Mapping[str, Any], labels: Mapping[str, str]) -> None:
        """Merge `labels` into a ConsumerGroup's own labels (exactly that object: its uid is
        a precondition)."""
        group, version = owner["apiVersion"].split("/")
        meta = owner["metadata"]
        body = {"metadata": {"uid": meta["uid"], "labels": dict(labels)}}
        try:
            self.custom.patch_namespaced_custom_object(
                group, version, meta["namespace"], PLURAL, meta["name"], body,
                field_manager=FIELD_MANAGER, _content_type="application/merge-patch+json")
        except ApiException as exc:
            if exc.status in (404, 422):
                return  # gone, or replaced by a newer object of its name
            raise _error(exc, f"labelling {meta['name']}") from exc

    def list_groups(self, api_version: str, label_selector: str,
                    namespaces: tuple[str, ...] | None) -> list[dict[str, Any]]:
        """The ConsumerGroups `label_selector` selects, in `namespaces` (None: all of them),
        as the API server's watch cache holds them."""
        group, version = api_version.split("/")
        found: list[Any]
        try:
            if namespaces is None:
                found = [self.custom.list_cluster_custom_object(
                    group, version, PLURAL, label_selector=label_selector, resource_version="0")]
            else:
                found = [self.custom.list_namespaced_custom_object(
                    group, version, ns, PLURAL, label_selector=label_selector,
                    resource_version="0") for ns in namespaces]
        except ApiException as exc:
            raise _error(exc, f"listing ConsumerGroups labelled {label_selector}") from exc
        return [dict(item) for answer in found for item in answer.get("items") or ()]

    def post_event(self, owner: Mapping[str, Any], type_: str, reason: str,
                   message: str) -> None:
        """A core/v1 Event about the ConsumerGroup `owner`."""
        meta = owner["metadata"]
        now = datetime.now(UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                                         namespace=meta["namespace"]),
            involved_object=client.V1ObjectReference(
                api_version=owner["apiVersion"], kind=owner["kind"], name=meta["name"],
                namespace=meta["namespace"], uid=meta["uid"]),
            type=type_, reason=reason, message=message[:1024], count=1,
            first_timestamp=now, last_timestamp=now,
            source=client.V1EventSource(component=FIELD_MANAGER),
            reporting_component=FIELD_MANAGER, reporting_instance=FIELD_MANAGER)
        try:
            self.core.create_namespaced_event(meta["namespace"], event)
        except ApiException as exc:
            raise _error(exc, f"posting an Event about {meta['name']}") from exc

    def secret_data(self, namespace: str, name: str) -> dict[str, str]:
        """A Secret's decoded data, read at most once per `secret_ttl_s`."""
        with self.lock:
            cached = self.secrets.get((namespace, name))
        if cached is not None and time.monotonic() - cached[0] < self.secret_ttl_s:
            return cached[1]
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                raise SecretMissing(f"Secret {namespace}/{name} does not exist", 404) from exc
            raise _error(exc, f"reading Secret {name}") from exc
        data = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
        with self.lock:
            self.secrets[(namespace, name)] = (time.monotonic(), data)
        return data

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        """One key of a Secret; SecretMissing names the Secret or the key that is absent."""
        data = self.secret_data(namespace, name)
        if key not in data:
            raise SecretMissing(f"Secret {namespace}/{name} has no key {key!r}", 404)
        return data[key]

    def secret_key(self, namespace: str, name: str, key: str) -> str | None:
        """One key of a Secret the operator keeps itself (the members' token), None while the
        Secret or the key does not exist or is empty; read as `secret_data` (cached)."""
        try:
            data = self.secret_data(namespace, name)
        except SecretMissing:
            return None
        return data.get(key) or None

    def forget_secret(self, namespace: str, name: str) -> None:
        """Read this Secret from the API server next time (it was changed by someone)."""
        with self.lock:
            self.secrets.pop((namespace, name), None)

    def close(self) -> None:
        self.api.close()
