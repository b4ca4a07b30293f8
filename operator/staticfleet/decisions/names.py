"""The member pod's contract with the cluster, in one place (pure): the labels, annotations and
names the operator gives member pods and their children, and reads back (`ordinal_of`), as
docs/contracts.md describes them. What the member process itself is told (its environment, its
port, its endpoints) is in `builders`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from staticfleet.decisions.spec.model import ConsumerGroupSpec

MEMBER_CONTAINER = "member"
"""The member pod's container that runs the member process."""

# --- labels ---------------------------------------------------------------------------------

NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
GROUP_LABEL = "staticfleet.io/group"
ORDINAL_LABEL = "staticfleet.io/ordinal"
MEMBER_APP = "staticfleet-member"
MANAGER = "staticfleet"
KAFKA_GROUP_LABEL = "staticfleet.io/kafka-group"
"""On a ConsumerGroup, set by a sharded operator: a hash of the Kafka group it uses (cluster and
group id, `snapshot.claim_label`), so that a shard finds the groups of other shards that use the
same Kafka group with one label-selected list."""

# --- annotations ----------------------------------------------------------------------------

INSTANCE_ID_ANNOTATION = "staticfleet.io/instance-id"
SESSION_ANNOTATION = "staticfleet.io/session-timeout-ms"
"""The session timeout the member joins with: the broker holds it to this value while it
restarts later, whatever the spec says by then."""
ACTIVATED_ANNOTATION = "staticfleet.io/activated"
"""Set to "true" on a standby pod before the operator activates it. The pod's
`STATICFLEET_ACTIVATED` comes from it (downward API, resolved at each container start), so a
container of an activated member that restarts in place joins the group directly, with no call
from the operator."""
REVISION_ANNOTATION = "staticfleet.io/revision"
"""The revision (`reasons.MemberSpecView.revision`) the pod was made for."""
FINGERPRINT_ANNOTATION = "staticfleet.io/fingerprint"
"""One short hash per part of what requires a restart (`reasons.FINGERPRINT_PARTS`)."""
JOINED_AS_NEW_ANNOTATION = "staticfleet.io/joined-as-new"
"""Set ("true") on a member pod made for an ordinal that is new to the group (its first
creation, a scale-up, a member that left for a scale-down taken back): it joins as a new member,
and its wait for that rebalance (in an eager group, for the others' revokes) says nothing of a
restart (`measurements.cold_start_s`). Written by `pods.creates`."""


# --- names and labels of the children ---------------------------------------------------------


def member_name(group: ConsumerGroupSpec, ordinal: int) -> str:
    """Pod name of member `ordinal`: `<cg-name>-<ordinal>`."""
    return f"{group.name}-{ordinal}"


def replacement_name(group: ConsumerGroupSpec, ordinal: int, revision: str) -> str:
    """Pod name of member `ordinal`'s warm-handoff replacement for `revision`:
    `<cg-name>-<ordinal>-<first 5 characters of the revision>` (it runs beside the old pod)."""
    return f"{member_name(group, ordinal)}-{revision[:5]}"


def instance_id(group: ConsumerGroupSpec, ordinal: int) -> str:
    """group.instance.id of member `ordinal`: `<group.id>-<ordinal>`."""
    return f"{group.group_id}-{ordinal}"


def config_map_name(group: ConsumerGroupSpec) -> str:
    return f"{group.name}-config"


def service_name(group: ConsumerGroupSpec) -> str:
    """The headless Service giving members stable DNS names (`<pod>.<cg>-members`)."""
    return f"{group.name}-members"


def pdb_name(group: ConsumerGroupSpec) -> str:
    return f"{group.name}-members"


def network_policy_name(group: ConsumerGroupSpec) -> str:
    return f"{group.name}-members"


def member_token_secret_name(group: ConsumerGroupSpec) -> str:
    """The Secret holding the group's member token (`builders.MEMBER_TOKEN_KEY`)."""
    return f"{group.name}-member-token"


def selector_labels(group: ConsumerGroupSpec) -> dict[str, str]:
    """Labels that select exactly this group's member pods."""
    return {NAME_LABEL: MEMBER_APP, INSTANCE_LABEL: group.name, GROUP_LABEL: group.name}


def selector_string(group: ConsumerGroupSpec) -> str:
    """`status.selector` for the scale subresource (`k=v,k=v`, sorted)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(group).items()))


def common_labels(group: ConsumerGroupSpec) -> dict[str, str]:
    """Labels on every child: the selector labels plus managed-by."""
    return {**selector_labels(group), MANAGED_BY_LABEL: MANAGER}


def member_labels(group: ConsumerGroupSpec, ordinal: int) -> dict[str, str]:
    """Labels of member pod `ordinal`: the user's podLabels, then the operator's (which win)."""
    return {
        **(group.template.pod_labels or {}),
        **common_labels(group),
        ORDINAL_LABEL: str(ordinal),
    }


# --- read back ------------------------------------------------------------------------------


def ordinal_of(pod: Mapping[str, Any]) -> int | None:
    """The member ordinal a pod carries in its `ORDINAL_LABEL` (None: not a member pod)."""
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(ORDINAL_LABEL)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
