"""Which Kafka cluster a ConsumerGroup's `bootstrapServers` names, however it is spelled.

Two spellings of one cluster are one cluster: for the per-cluster worker cap (`passes.Runner`:
a group on a slow cluster takes that cluster's share of the workers, not everyone's) and for
"the same Kafka group twice" (`snapshot.claim_key`). A cluster is known by its cluster id once
a read of it said it (`observe.kafkaadmin.AdminPool.note_cluster_id`: every spelling that
answered with that id is then that cluster), and before by its normalized address set
(`address_set`: sorted, deduplicated, lower-cased, whitespace stripped). Two lists that name
different brokers of one cluster are one cluster only once the id is known.
"""

from __future__ import annotations

from collections.abc import Mapping

ADDRESSES_PREFIX = "addresses:"
CLUSTER_ID_PREFIX = "cluster-id:"


def addresses(bootstrap: str) -> tuple[str, ...]:
    """The distinct addresses of a bootstrap list, lower-cased, stripped and sorted."""
    return tuple(sorted({a.strip().lower() for a in bootstrap.split(",") if a.strip()}))


def address_set(bootstrap: str) -> str:
    """The cluster's identity before its id is known: its normalized address set."""
    return ADDRESSES_PREFIX + ",".join(addresses(bootstrap))


def identity(bootstrap: str, cluster_ids: Mapping[str, str]) -> str:
    """The cluster's identity: its id when a read of this address set gave one
    (`cluster_ids`, by `address_set`), else the address set."""
    found = address_set(bootstrap)
    cluster_id = cluster_ids.get(found)
    return CLUSTER_ID_PREFIX + cluster_id if cluster_id else found


def label(bootstrap: str) -> str:
    """How a message names the cluster: its first address, and how many others the list has
    (a list of 16 long names quoted whole in every message of every pass would be kilobytes)."""
    found = [a.strip() for a in bootstrap.split(",") if a.strip()]
    if not found:
        return "?"
    first = found[0] if len(found[0]) <= 64 else found[0][:61] + "..."
    return first if len(found) == 1 else f"{first} (and {len(found) - 1} more)"
