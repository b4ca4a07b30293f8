"""A sharded operator's cross-shard claim check (`claims.across_shards`): the API server is asked
once per `UNIQUE_KEPT_S` for a group found alone, on every pass for one that is not."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet import claims
from staticfleet.decisions.names import KAFKA_GROUP_LABEL
from staticfleet.decisions.snapshot import claim_label, claim_of

pytestmark = pytest.mark.unit


def body(name: str, uid: str, labelled: bool = True) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "staticfleet.io/v1alpha1",
        "metadata": {"name": name, "namespace": "ns", "uid": uid,
                     "creationTimestamp": f"2026-11-26T10:00:0{uid[-1]}Z", "labels": {}},
        "spec": {"kafka": {"bootstrapServers": "k:9092", "groupId": "orders"}}}
    if labelled:
        obj["metadata"]["labels"][KAFKA_GROUP_LABEL] = claim_label(claim_of(obj)[0])
    return obj


class Listing:
    """The two calls `across_shards` makes of the API server, recorded."""

    def __init__(self, *listed: dict[str, Any]) -> None:
        self.listed = list(listed)
        self.lists = 0
        self.labelled: list[str] = []

    def label_group(self, obj: dict[str, Any], labels: dict[str, str]) -> None:
        self.labelled.append(obj["metadata"]["name"])

    def list_groups(self, api_version: str, selector: str,
                    namespaces: tuple[str, ...] | None) -> list[dict[str, Any]]:
        self.lists += 1
        return list(self.listed)


def test_a_group_found_alone_is_not_listed_again_until_the_bound() -> None:
    own = body("orders", "u1")
    clock = [100.0]
    kube, caches = Listing(own), claims.Listings(clock=lambda: clock[0])
    known = (claim_of(own)[1],)
    for _ in range(3):
        assert claims.across_shards(own, known, kube, None, caches) == known  # type: ignore[arg-type]
    assert kube.lists == 1
    clock[0] += claims.UNIQUE_KEPT_S + 1
    claims.across_shards(own, known, kube, None, caches)  # type: ignore[arg-type]
    assert kube.lists == 2


def test_a_group_sharing_its_kafka_group_with_another_shard_is_listed_every_pass() -> None:
    own, other = body("orders", "u2"), body("orders-b", "u1")
    kube, caches = Listing(own, other), claims.Listings()
    known = (claim_of(own)[1],)
    for _ in range(3):
        found = claims.across_shards(own, known, kube, None, caches)  # type: ignore[arg-type]
        assert {c.uid for c in found} == {"u1", "u2"}
    assert kube.lists == 3
    kube.listed = [own]  # the other one deleted: the next pass finds it gone
    assert {c.uid for c in claims.across_shards(own, known, kube, None, caches)} == {"u2"}  # type: ignore[arg-type]


def test_an_unlabelled_group_is_labelled_and_listed_even_when_it_was_found_alone() -> None:
    own = body("orders", "u1")
    kube, caches = Listing(own), claims.Listings()
    claims.across_shards(own, (claim_of(own)[1],), kube, None, caches)  # type: ignore[arg-type]
    moved = body("orders", "u1", labelled=False)  # someone took the label off
    claims.across_shards(moved, (claim_of(moved)[1],), kube, None, caches)  # type: ignore[arg-type]
    assert (kube.lists, kube.labelled) == (2, ["orders"])
