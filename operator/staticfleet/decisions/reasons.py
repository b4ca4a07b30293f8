"""Why a member needs a restart (the roller, `rollout.roller`, decides when).

The builder records on every member pod, besides `staticfleet.io/revision`, the annotation
`staticfleet.io/fingerprint`: a JSON object of one short hash per part of what requires a restart:

    image       template.image, imagePullPolicy
    command     the effective command and args
    env         template.env, envFrom, security Secret references, the instance-id switch
    spark       processing.spark (mode, connectUrl, master, conf)
    processing  the rest of processing (transform, batch, sink, dead letters, retry)
    client      the Kafka client part of config.json (servers, group, topics, timeouts, properties)
    template    the rest of the pod (resources, scheduling, service account, grace period,
                pod labels and annotations)
    nonce       spec.rollout.restartNonce and the staticfleet.io/restartedAt annotation

The revision is the hash of these parts, so comparing parts of a pod with the desired ones tells
which changed. Each reason carries a message that becomes a Kubernetes Event on the ConsumerGroup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from staticfleet.decisions.conditions import (
    CLIENT_CONFIG_CHANGED,
    COMMAND_CHANGED,
    ENV_CHANGED,
    IMAGE_CHANGED,
    MANUAL_RESTART,
    PROCESSING_CHANGED,
    SPARK_CONF_CHANGED,
    TEMPLATE_CHANGED,
)
from staticfleet.decisions.names import FINGERPRINT_ANNOTATION, REVISION_ANNOTATION

FINGERPRINT_PARTS = (
    "image",
    "command",
    "env",
    "spark",
    "processing",
    "client",
    "template",
    "nonce",
)


_PART_REASONS: Mapping[str, tuple[str, str]] = {
    "image": (IMAGE_CHANGED, "the image changed"),
    "command": (COMMAND_CHANGED, "the command or its arguments changed"),
    "env": (ENV_CHANGED, "the environment (env, envFrom or credentials references) changed"),
    "spark": (SPARK_CONF_CHANGED, "the Spark configuration changed"),
    "processing": (
        PROCESSING_CHANGED,
        "the processing configuration (transform, batch, sink, dead letters or retry) changed",
    ),
    "client": (
        CLIENT_CONFIG_CHANGED,
        "the Kafka client configuration (servers, topics, timeouts or client properties) changed",
    ),
    "template": (
        TEMPLATE_CHANGED,
        "the pod template (resources, scheduling, service account, "
        "grace period, labels or annotations) changed",
    ),
    "nonce": (
        MANUAL_RESTART,
        "a restart was requested (spec.rollout.restartNonce or the "
        "staticfleet.io/restartedAt annotation changed)",
    ),
}


@dataclass(frozen=True)
class MemberSpecView:
    """What a member should run: its revision and the fingerprint parts behind it.

    Built by `builders.member_spec_view(group, timeouts)`; the same for every ordinal.
    """

    revision: str
    parts: Mapping[str, str]
    image: str
    config: str = ""
    """The runtime configuration of this revision (config.json); each pod carries its own copy,
    so a container restarted in place runs its revision's config, not the newest."""

    def fingerprint_annotation(self) -> str:
        """The value of `staticfleet.io/fingerprint` (canonical JSON)."""
        return json.dumps(dict(self.parts), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class RestartReason:
    """One reason to restart a member; `message` is written as an Event."""

    code: str
    message: str


def pod_revision(pod: Mapping[str, Any]) -> str | None:
    """The revision a pod was built from (its `staticfleet.io/revision` annotation)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(REVISION_ANNOTATION)
    return value if isinstance(value, str) else None


def restart_reasons(
    desired: MemberSpecView, observed_pod: Mapping[str, Any]
) -> list[RestartReason]:
    """Why `observed_pod` must be restarted to run `desired`; empty when it runs the revision."""
    meta = observed_pod.get("metadata") or {}
    name = meta.get("name", "?")
    revision = pod_revision(observed_pod)
    if revision == desired.revision:
        return []
    observed_parts = _parse_fingerprint((meta.get("annotations") or {}).get(FINGERPRINT_ANNOTATION))
    if observed_parts is None:
        return [
            RestartReason(
                TEMPLATE_CHANGED,
                f"pod {name} runs revision {revision or 'unknown'} without a recorded fingerprint; "
                f"the members now run revision {desired.revision}",
            )
        ]
    result: list[RestartReason] = []
    for part in FINGERPRINT_PARTS:
        if observed_parts.get(part) == desired.parts.get(part):
            continue
        code, what = _PART_REASONS[part]
        message = f"pod {name}: {what}"
        if part == "image":
            old = _container_image(observed_pod)
            message = f"pod {name}: the image changed from {old or 'unknown'} to {desired.image}"
        result.append(RestartReason(code, message))
    if not result:
        result.append(
            RestartReason(
                TEMPLATE_CHANGED,
                f"pod {name} runs revision {revision or 'unknown'}, the members now run "
                f"revision {desired.revision}",
            )
        )
    return result


def _parse_fingerprint(value: Any) -> dict[str, str] | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    return {str(k): str(v) for k, v in parsed.items()}


def _container_image(pod: Mapping[str, Any]) -> str | None:
    containers = (pod.get("spec") or {}).get("containers") or []
    member = next((c for c in containers if c.get("name") == "member"), None)
    return member.get("image") if member else None
