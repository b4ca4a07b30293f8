"""Pure builders of a ConsumerGroup's children, following docs/contracts.md.

Every builder returns a plain dict ready for the Kubernetes API. Owner references are not set here:
the apply layer adopts the children. Output is deterministic (same input, same dict, same JSON),
so the apply layer can compare and patch.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from member_contract import (
    ACTIVATED_ENV,
    CONFIG_ENV,
    GROUP_INSTANCE_ID_ENV,
    HEALTHZ,
    HTTP_HOST_ENV,
    HTTP_PORT,
    HTTP_PORT_ENV,
    HTTP_PORT_NAME,
    MEMBER_TOKEN_FILE_ENV,
    POD_NAME_ENV,
    POD_NAMESPACE_ENV,
    READYZ,
    STANDBY_ENV,
)
from staticfleet.decisions import kafkaclient
from staticfleet.decisions.names import (
    ACTIVATED_ANNOTATION,
    FINGERPRINT_ANNOTATION,
    INSTANCE_ID_ANNOTATION,
    MEMBER_CONTAINER,
    REVISION_ANNOTATION,
    SESSION_ANNOTATION,
    common_labels,
    config_map_name,
    instance_id,
    member_labels,
    member_name,
    member_token_secret_name,
    network_policy_name,
    pdb_name,
    replacement_name,
    selector_labels,
    service_name,
)
from staticfleet.decisions.reasons import FINGERPRINT_PARTS, MemberSpecView
from staticfleet.decisions.spec import podsecurity
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts

CONFIG_KEY = "config.json"

MEMBER_TOKEN_KEY = "token"
MEMBER_TOKEN_VOLUME = "member-token"
MEMBER_TOKEN_DIR = "/var/run/secrets/staticfleet.io/member-token"


# --- runtime configuration -----------------------------------------------------------------------


def runtime_config(group: ConsumerGroupSpec, timeouts: EffectiveTimeouts) -> dict[str, Any]:
    """The content of config.json (docs/contracts.md)."""
    kafka = group.kafka
    membership = group.membership
    consumer: dict[str, Any] = {
        **kafka.client_properties,
        **timeouts.client_properties(membership.protocol),
        "group.protocol": membership.protocol,
        "auto.offset.reset": group.processing.auto_offset_reset,
        **kafkaclient.security_properties(kafka.security),
    }
    if membership.assignment_strategy is not None:
        consumer["partition.assignment.strategy"] = membership.assignment_strategy
    p = group.processing
    return {
        "bootstrapServers": kafka.bootstrap_servers,
        "groupId": kafka.group_id,
        "topics": list(kafka.topics) if kafka.topics is not None else None,
        "topicPattern": kafka.topic_pattern,
        "namespace": group.namespace,
        "consumer": consumer,
        "processing": {
            "transform": p.transform,
            "spark": _spark_config(group),
            "batch": {
                "maxRecords": p.batch.max_records,
                "maxWaitMs": p.batch.max_wait_ms,
                "maxBytes": p.batch.max_bytes,
            },
            "sink": {"type": p.sink.type, "path": p.sink.path, "topic": p.sink.topic},
            "deadLetterTopic": p.dead_letter_topic,
            "retry": {
                "attempts": p.retry.attempts,
                "backoffMs": p.retry.backoff_ms,
                "maxBackoffMs": p.retry.max_backoff_ms,
            },
        },
    }


def config_json(group: ConsumerGroupSpec, timeouts: EffectiveTimeouts) -> str:
    """config.json as text: sorted keys, two-space indent, so equal configs are equal strings."""
    return json.dumps(runtime_config(group, timeouts), sort_keys=True, indent=2) + "\n"


def build_config_map(group: ConsumerGroupSpec, timeouts: EffectiveTimeouts) -> dict[str, Any]:
    """The ConfigMap `<cg>-config`: config.json of the update revision, for people to read.
    Members do not read it: each pod carries its revision's config in STATICFLEET_CONFIG."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_map_name(group),
            "namespace": group.namespace,
            "labels": common_labels(group),
        },
        "data": {CONFIG_KEY: config_json(group, timeouts)},
    }


def _spark_config(group: ConsumerGroupSpec) -> dict[str, Any]:
    s = group.processing.spark
    return {
        "mode": s.mode,
        "connectUrl": s.connect_url,
        "master": s.master,
        "conf": dict(s.conf or {}),
    }


# --- revision ------------------------------------------------------------------------------------


def short_hash(value: Any) -> str:
    """10 hex characters of sha256 over canonical JSON of `value`."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), default=_jsonable)
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


def _jsonable(value: Any) -> Any:
    # Mappings and tuples from the frozen model; dict()/list() make them canonical JSON.
    return dict(value) if hasattr(value, "items") else list(value)


def member_spec_view(group: ConsumerGroupSpec, timeouts: EffectiveTimeouts) -> MemberSpecView:
    """The fingerprint parts (see `reasons`) and the revision derived from them."""
    t = group.template
    config = runtime_config(group, timeouts)
    processing = {k: v for k, v in config["processing"].items() if k != "spark"}
    client = {k: v for k, v in config.items() if k != "processing"}
    raw_parts: dict[str, Any] = {
        "image": [t.image, t.image_pull_policy],
        "command": [list(t.command), list(t.args)],
        "env": [
            _operator_env(group, 0, with_instance_id=False),
            list(t.env),
            list(t.env_from),
            group.dynamic_membership_for_testing,
        ],
        "spark": config["processing"]["spark"],
        "processing": processing,
        "client": client,
        "template": [
            t.resources,
            t.node_selector,
            list(t.tolerations),
            t.affinity,
            t.service_account_name,
            t.termination_grace_period_seconds,
            t.pod_labels,
            t.pod_annotations,
            # Only when set, so that pods made before the field existed keep their revision
            # (their defaults come with their next rollout).
            *([[t.security_context, t.container_security_context]]
              if t.security_context or t.container_security_context else []),
            # Only when asked for, likewise: pods made before the field existed mounted a token
            # and keep it until their next rollout.
            *([["automountServiceAccountToken"]] if t.automount_service_account_token else []),
        ],
        "nonce": [group.rollout.restart_nonce, group.restarted_at],
    }
    parts = {name: short_hash(raw_parts[name]) for name in FINGERPRINT_PARTS}
    return MemberSpecView(revision=short_hash(parts), parts=parts, image=t.image,
                          config=config_json(group, timeouts))


# --- member pod ----------------------------------------------------------------------------------


def _operator_env(
    group: ConsumerGroupSpec, ordinal: int, *, with_instance_id: bool, config: str | None = None
) -> list[dict[str, Any]]:
    """The operator's env vars (docs/contracts.md), in a fixed order. `config`: the revision's
    config.json, carried by the pod itself; None gives the reference form the fingerprint's
    `env` part has always hashed (the config's content is hashed in the `client`,
    `processing` and `spark` parts)."""
    config_env: dict[str, Any] = (
        {"name": CONFIG_ENV,
         "valueFrom": {"configMapKeyRef": {"name": config_map_name(group), "key": CONFIG_KEY}}}
        if config is None else {"name": CONFIG_ENV, "value": config})
    env: list[dict[str, Any]] = [config_env]
    if with_instance_id and not group.dynamic_membership_for_testing:
        env.append({"name": GROUP_INSTANCE_ID_ENV, "value": instance_id(group, ordinal)})
    env += [
        _field_env(POD_NAME_ENV, "metadata.name"),
        _field_env(POD_NAMESPACE_ENV, "metadata.namespace"),
        _field_env(HTTP_HOST_ENV, "status.podIP"),
        {"name": HTTP_PORT_ENV, "value": str(HTTP_PORT)},
    ]
    env += [_secret_env(sp.env, sp.ref.name, sp.ref.key)
            for sp in kafkaclient.secret_properties(group.kafka.security)]
    return env


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _standby_env() -> list[dict[str, Any]]:
    """A standby starts in standby until its pod says it was activated (`ACTIVATED_ANNOTATION`,
    empty while absent)."""
    return [{"name": STANDBY_ENV, "value": "true"},
            _field_env(ACTIVATED_ENV, f"metadata.annotations['{ACTIVATED_ANNOTATION}']")]


def _member_token_env() -> list[dict[str, Any]]:
    """Where the member finds the group's token: a file of the Secret volume, which the kubelet
    updates in place, so a rotated token reaches the member without a restart (an env var from
    the Secret would keep the old one until then). Like the volume, not part of the revision: a
    pod made before the token existed gets it at its next rollout."""
    return [{"name": MEMBER_TOKEN_FILE_ENV,
             "value": f"{MEMBER_TOKEN_DIR}/{MEMBER_TOKEN_KEY}"}]


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _member_container(group: ConsumerGroupSpec, ordinal: int, view: MemberSpecView,
                      standby: bool) -> dict[str, Any]:
    """The member container of pod `ordinal`: the template's image, command and env after the
    operator's own env, the HTTP port and its probes, the security context and mounts."""
    t = group.template
    container: dict[str, Any] = {
        "name": MEMBER_CONTAINER,
        "image": t.image,
        "command": list(t.command),
        "env": _operator_env(group, ordinal, with_instance_id=True, config=view.config)
        + _member_token_env()
        + (_standby_env() if standby else [])
        + [dict(v) for v in t.env],
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": HTTP_PORT, "protocol": "TCP"}],
        # A member that stops on an error writes it, one line, to its termination message
        # (/dev/termination-log), which the operator quotes; one that dies before it can (a
        # crash, an OOM kill) leaves the kubelet the end of its log instead.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "readinessProbe": {
            "httpGet": {"path": READYZ, "port": HTTP_PORT_NAME},
            "periodSeconds": 2,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": HEALTHZ, "port": HTTP_PORT_NAME},
            "initialDelaySeconds": 30,
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
    }
    if t.image_pull_policy:
        container["imagePullPolicy"] = t.image_pull_policy
    if t.args:
        container["args"] = list(t.args)
    if t.env_from:
        container["envFrom"] = [dict(v) for v in t.env_from]
    if t.resources is not None:
        container["resources"] = dict(t.resources)
    # The restricted Pod Security Standard by default (`podsecurity`); the root filesystem is
    # read-only, so the member, its JVM and Spark write to an emptyDir at /tmp.
    container["securityContext"] = podsecurity.container_context(t.container_security_context)
    container["volumeMounts"] = [{"name": podsecurity.TMP_VOLUME,
                                  "mountPath": podsecurity.TMP_PATH},
                                 {"name": MEMBER_TOKEN_VOLUME, "mountPath": MEMBER_TOKEN_DIR,
                                  "readOnly": True}]
    return container


def build_member_pod(
    group: ConsumerGroupSpec, ordinal: int, view: MemberSpecView,
    session_timeout_ms: int | None = None, *, standby: bool = False,
) -> dict[str, Any]:
    """Member pod `ordinal` running `view` (from `member_spec_view`), per docs/contracts.md;
    `session_timeout_ms`: the one it will join with (recorded as `SESSION_ANNOTATION`).
    `standby`: a warm handoff's replacement (`replacement_name`), whose process waits for
    POST /activate before it joins the group (`STATICFLEET_STANDBY`) until its pod carries
    `ACTIVATED_ANNOTATION` (`STATICFLEET_ACTIVATED`)."""
    t = group.template
    name = replacement_name(group, ordinal, view.revision) if standby else member_name(
        group, ordinal)
    spec: dict[str, Any] = {
        "hostname": name,
        "subdomain": service_name(group),
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": t.termination_grace_period_seconds,
        "securityContext": podsecurity.pod_context(t.security_context),
        "containers": [_member_container(group, ordinal, view, standby)],
        "volumes": [{"name": podsecurity.TMP_VOLUME, "emptyDir": {}},
                    {"name": MEMBER_TOKEN_VOLUME,
                     "secret": {"secretName": member_token_secret_name(group)}}],
    }
    if t.service_account_name:
        spec["serviceAccountName"] = t.service_account_name
    # No ServiceAccount token unless the spec asks for one: the runtime never calls the API.
    spec["automountServiceAccountToken"] = t.automount_service_account_token
    if t.node_selector:
        spec["nodeSelector"] = dict(t.node_selector)
    if t.tolerations:
        spec["tolerations"] = [dict(v) for v in t.tolerations]
    if t.affinity is not None:
        spec["affinity"] = dict(t.affinity)
    annotations = {
        **(t.pod_annotations or {}),
        REVISION_ANNOTATION: view.revision,
        FINGERPRINT_ANNOTATION: view.fingerprint_annotation(),
        INSTANCE_ID_ANNOTATION: instance_id(group, ordinal),
    }
    if session_timeout_ms is not None:
        annotations[SESSION_ANNOTATION] = str(session_timeout_ms)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": group.namespace,
            "labels": member_labels(group, ordinal),
            "annotations": annotations,
        },
        "spec": spec,
    }


# --- member token --------------------------------------------------------------------------------


def build_member_token_secret(group: ConsumerGroupSpec, token: str) -> dict[str, Any]:
    """The Secret `<cg>-member-token`: the bearer token the member pods require on every
    request that changes them, which the operator sends. `token` is made by the caller (random,
    once: the service's gather makes one only while the Secret does not exist), so this stays
    pure."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": member_token_secret_name(group),
            "namespace": group.namespace,
            "labels": common_labels(group),
        },
        "data": {MEMBER_TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


# --- service and disruption budget ---------------------------------------------------------------


def build_headless_service(group: ConsumerGroupSpec) -> dict[str, Any]:
    """Headless Service `<cg>-members`: stable DNS for members, ready or not."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(group),
            "namespace": group.namespace,
            "labels": common_labels(group),
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(group),
            "ports": [{"name": HTTP_PORT_NAME, "port": HTTP_PORT, "targetPort": HTTP_PORT_NAME,
                       "protocol": "TCP"}],
        },
    }


def build_pdb(group: ConsumerGroupSpec) -> dict[str, Any]:
    """PodDisruptionBudget: voluntary evictions take at most rollout.maxUnavailable members."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": pdb_name(group),
            "namespace": group.namespace,
            "labels": common_labels(group),
        },
        "spec": {
            "maxUnavailable": group.rollout.max_unavailable,
            "selector": {"matchLabels": selector_labels(group)},
        },
    }


# --- network policy ------------------------------------------------------------------------------


def build_member_network_policy(group: ConsumerGroupSpec,
                                sources: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """NetworkPolicy `<cg>-members`: ingress to the group's member pods (standbys too: they
    carry the selector labels) only on their port `http`, and only from `sources`
    (NetworkPolicyPeer objects: the operator's pods and the Prometheus that scrapes the members,
    as the operator's settings name them). Every other ingress to those pods is refused; egress
    is left alone. No sources: no ingress rule at all, which refuses everything (a rule with an
    empty `from` would admit everyone)."""
    rules = ([{"ports": [{"port": HTTP_PORT_NAME, "protocol": "TCP"}],
               "from": [copy.deepcopy(dict(peer)) for peer in sources]}] if sources else [])
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": network_policy_name(group),
            "namespace": group.namespace,
            "labels": common_labels(group),
        },
        "spec": {
            "podSelector": {"matchLabels": selector_labels(group)},
            "policyTypes": ["Ingress"],
            "ingress": rules,
        },
    }
