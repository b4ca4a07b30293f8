"""Which ConsumerGroups, in every shard, use the same Kafka group as this one (I/O).

Two ConsumerGroups on one Kafka group fence each other's members; the oldest keeps the group
and the others run no members (`decisions.members.problems.group_id_holder`). Unsharded, the
operator sees every ConsumerGroup in its watch-backed index. A shard's watch holds only its own
groups, so a sharded operator also asks the API server: it labels each of its groups with a hash
of the Kafka group it uses (`names.KAFKA_GROUP_LABEL`), then lists the groups with the same
label, in whichever shard they are. A group made in another shard is seen once that shard has
labelled it (its first pass); two groups made within the same few seconds in two shards may
both run members until the later of their first passes, one pass.

A group that the list found alone is not listed again for `UNIQUE_KEPT_S` (`Listings`): at
rest every pass would otherwise list, 2,000 groups in two shards about 33 lists a second. A
group that shares its Kafka group with another shard's is listed on every pass, so that it takes
the group as soon as the other is deleted. What the bound costs: a group made while the older
one's shard had not labelled that one yet (that shard down) runs members beside it for at most
`UNIQUE_KEPT_S`, where it was one pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from staticfleet.apply import Kube
from staticfleet.decisions.names import KAFKA_GROUP_LABEL
from staticfleet.decisions.snapshot import Claimant, claim_label, claim_of

UNIQUE_KEPT_S = 120.0
"""How long a group the API server listed alone on its Kafka group is not listed again."""


@dataclass
class Listings:
    """Per group (uid), when the API server last listed it alone on its Kafka group, and that
    group's label value. Forgotten with the group."""

    alone_at: dict[str, tuple[float, str]] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    lock: threading.Lock = field(default_factory=threading.Lock)

    def alone(self, uid: str, label: str) -> bool:
        """Listed alone on the Kafka group `label` names within the last `UNIQUE_KEPT_S`."""
        with self.lock:
            listed = self.alone_at.get(uid)
        return listed is not None and listed[1] == label and (
            self.clock() - listed[0] < UNIQUE_KEPT_S)

    def note(self, uid: str, label: str, *, alone: bool) -> None:
        with self.lock:
            if alone:
                self.alone_at[uid] = (self.clock(), label)
            else:
                self.alone_at.pop(uid, None)

    def forget(self, uid: str) -> None:
        with self.lock:
            self.alone_at.pop(uid, None)


def across_shards(body: Mapping[str, Any], known: tuple[Claimant, ...], kube: Kube,
                  namespaces: tuple[str, ...] | None, listings: Listings,
                  cluster_ids: Mapping[str, str] | None = None) -> tuple[Claimant, ...]:
    """Every claimant of `body`'s Kafka group: `known` (this shard's index) and those the API
    server lists by the group's label in `namespaces` (None: all), after labelling `body`.
    The cluster is known by `cluster_ids` (`decisions.clusters`): a spelling of the cluster
    that this process never read is compared by its address set."""
    ids = cluster_ids or {}
    key, own = claim_of(body, ids)
    value = claim_label(key)
    labels = body["metadata"].get("labels") or {}
    if labels.get(KAFKA_GROUP_LABEL) == value and listings.alone(own.uid, value):
        return known
    if labels.get(KAFKA_GROUP_LABEL) != value:
        kube.label_group(body, {KAFKA_GROUP_LABEL: value})
    merged = {c.uid: c for c in known}
    for other in kube.list_groups(body["apiVersion"], f"{KAFKA_GROUP_LABEL}={value}",
                                  namespaces):
        other_key, claimant = claim_of(other, ids)
        if other_key == key:
            merged[claimant.uid] = claimant
    listings.note(own.uid, value, alone=set(merged) <= {own.uid, *(c.uid for c in known)})
    return tuple(merged.values())
