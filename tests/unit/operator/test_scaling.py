"""Scaling: which ordinals exist, which go first, how many members idle."""

from __future__ import annotations

import pytest

from staticfleet.decisions.scaling import (
    desired_ordinals,
    idle_members,
    ordinals_to_create,
    ordinals_to_delete,
)


@pytest.mark.parametrize(
    ("existing", "replicas", "create", "delete"),
    [
        ((), 3, (0, 1, 2), ()),
        ((0, 1, 2), 3, (), ()),
        ((0, 1, 2, 3, 4), 2, (), (4, 3, 2)),
        ((0, 2), 3, (1,), ()),
        ((0, 1), 0, (), (1, 0)),
        ((5,), 2, (0, 1), (5,)),
    ],
)
def test_create_and_delete(
    existing: tuple[int, ...], replicas: int, create: tuple[int, ...], delete: tuple[int, ...]
) -> None:
    assert ordinals_to_create(existing, replicas) == create
    assert ordinals_to_delete(existing, replicas) == delete


@pytest.mark.parametrize(
    ("replicas", "partitions", "idle"), [(3, 6, 0), (6, 6, 0), (10, 6, 4), (0, 6, 0), (2, 0, 2)]
)
def test_idle_members(replicas: int, partitions: int, idle: int) -> None:
    assert idle_members(replicas, partitions) == idle


def test_desired_ordinals() -> None:
    assert desired_ordinals(3) == (0, 1, 2) and desired_ordinals(0) == ()
