"""Which ConsumerGroups, in every shard, use the same Kafka group as this one (I/O).

Two ConsumerGroups on one Kafka group fence each other's members; the oldest keeps the group
and the others run no members (`decisions.members.problems.group_id_holder`). Unsharded, the
operator sees every ConsumerGroup in its watch-backed index. A shard's watch holds only its own
groups, so a sharded operator also asks the API server: it labels each of its groups with a hash
of the Kafka group it uses (`names.KAFKA_GROUP_LABEL`), then lists the groups with the same
label, in whichever shard they are. A group made in another shard is seen once that shard has
labelled it (its first pass); two groups made within the same few seconds in two shards may
both run members until the later of their first passes, one pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from staticfleet.apply import Kube
from staticfleet.decisions.names import KAFKA_GROUP_LABEL
from staticfleet.decisions.snapshot import Claimant, claim_label, claim_of


def across_shards(body: Mapping[str, Any], known: tuple[Claimant, ...], kube: Kube,
                  namespaces: tuple[str, ...] | None) -> tuple[Claimant, ...]:
    """Every claimant of `body`'s Kafka group: `known` (this shard's index) and those the API
    server lists by the group's label in `namespaces` (None: all), after labelling `body`."""
    key, _ = claim_of(body)
    value = claim_label(key)
    labels = body["metadata"].get("labels") or {}
    if labels.get(KAFKA_GROUP_LABEL) != value:
        kube.label_group(body, {KAFKA_GROUP_LABEL: value})
    merged = {c.uid: c for c in known}
    for other in kube.list_groups(body["apiVersion"], f"{KAFKA_GROUP_LABEL}={value}",
                                  namespaces):
        other_key, claimant = claim_of(other)
        if other_key == key:
            merged[claimant.uid] = claimant
    return tuple(merged.values())
