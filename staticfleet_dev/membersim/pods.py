"""What the simulator reads from the API server's objects (pure): a member pod's facts, as its
process would see them (its environment, its labels and annotations, its token volume), and the
token in a group's member token Secret. The names are the operator's own (`decisions.names`,
`decisions.builders`, `member_contract`)."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from member_contract import CONFIG_ENV, GROUP_INSTANCE_ID_ENV, STANDBY_ENV
from staticfleet.decisions.builders import MEMBER_TOKEN_KEY, MEMBER_TOKEN_VOLUME
from staticfleet.decisions.members.observed import pod_ended
from staticfleet.decisions.names import (
    ACTIVATED_ANNOTATION,
    GROUP_LABEL,
    JOINED_AS_NEW_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGER,
    MEMBER_CONTAINER,
    ordinal_of,
)
from staticfleet_dev.membersim.members import PodFacts

POD_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGER},{GROUP_LABEL}"
"""The member pods of every ConsumerGroup (the operator's own pod index selects these)."""
SECRET_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGER}"
"""The operator's Secrets: each group's member token Secret carries its labels."""


def process_gone(pod: Mapping[str, Any]) -> bool:
    """The pod's process is no more, or about to be: its deletion was asked (a member stops
    on SIGTERM within milliseconds), or the pod ended (evicted)."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp")) or pod_ended(pod)


def pod_facts(pod: Mapping[str, Any]) -> PodFacts | None:
    """The facts of a member pod whose process runs (it has an IP; `process_gone` is not
    true); None for any other pod."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    ip = (pod.get("status") or {}).get("podIP")
    ordinal, group = ordinal_of(pod), labels.get(GROUP_LABEL)
    if not ip or ordinal is None or not group or process_gone(pod):
        return None
    env = _literal_env(pod)
    try:
        config = json.loads(env.get(CONFIG_ENV) or "{}")
    except ValueError:
        config = {}
    if not isinstance(config, dict):
        config = {}
    consumer = config.get("consumer") or {}
    return PodFacts(
        uid=str(meta.get("uid") or ""), name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""), group=str(group), ordinal=ordinal,
        ip=str(ip),
        instance_id=env.get(GROUP_INSTANCE_ID_ENV) or str(meta.get("name") or ""),
        group_id=str(config.get("groupId") or group),
        topics=tuple(str(t) for t in config.get("topics") or ()),
        kip848=consumer.get("group.protocol") == "consumer",
        standby=(env.get(STANDBY_ENV) == "true"
                 and annotations.get(ACTIVATED_ANNOTATION) != "true"),
        joined_as_new=annotations.get(JOINED_AS_NEW_ANNOTATION) == "true",
        token_secret=_token_secret(pod))


def _literal_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """The member container's variables that have a literal value."""
    for container in (pod.get("spec") or {}).get("containers") or ():
        if container.get("name") == MEMBER_CONTAINER:
            return {str(e.get("name")): str(e["value"]) for e in container.get("env") or ()
                    if e.get("value") is not None}
    return {}


def _token_secret(pod: Mapping[str, Any]) -> str | None:
    """The Secret of the pod's member token volume (None: a pod made before the token)."""
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        if volume.get("name") == MEMBER_TOKEN_VOLUME:
            return (volume.get("secret") or {}).get("secretName")
    return None


def secret_token(secret: Mapping[str, Any]) -> str | None:
    """The member token a Secret holds (its `token` key, whitespace stripped), as a member
    reads it from its mounted file; None when it holds none."""
    raw = (secret.get("data") or {}).get(MEMBER_TOKEN_KEY)
    if not raw:
        return None
    try:
        token = base64.b64decode(raw, validate=True).decode().strip()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return token or None
