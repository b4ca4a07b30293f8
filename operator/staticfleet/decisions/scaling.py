"""Which member ordinals should exist, and which go first on a scale-down (pure)."""

from __future__ import annotations

from collections.abc import Iterable


def desired_ordinals(replicas: int) -> tuple[int, ...]:
    """Ordinals 0..replicas-1."""
    return tuple(range(max(0, replicas)))


def ordinals_to_create(existing: Iterable[int], replicas: int) -> tuple[int, ...]:
    """Desired ordinals without a pod, lowest first."""
    have = set(existing)
    return tuple(o for o in desired_ordinals(replicas) if o not in have)


def ordinals_to_delete(existing: Iterable[int], replicas: int) -> tuple[int, ...]:
    """Ordinals beyond `replicas`, highest first (the reverse of creation, as a StatefulSet)."""
    return tuple(sorted((o for o in set(existing) if o >= replicas), reverse=True))


def idle_members(replicas: int, partitions: int) -> int:
    """Members that can hold no partition: a partition has one owner in a group."""
    return max(0, replicas - partitions)
