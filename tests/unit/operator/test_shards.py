"""Sharding (`decisions.shards`): the watch's label selector of each shard, that one
installation's shards own every group exactly once, how the settings read them, when a shard may
take a group over from another (a table), `status.shard`, the claim label that finds the same
Kafka group in other shards, and the peering priority that lets the oldest operator run."""

from __future__ import annotations

from dataclasses import replace
from itertools import product

import pytest

from staticfleet import cli
from staticfleet.decisions import conditions as c
from staticfleet.decisions.plan import decide, degraded, without_nulls
from staticfleet.decisions.settings import (
    OTHER_SHARDS_ENV,
    SHARD_ENV,
    OperatorSettings,
    SettingsError,
)
from staticfleet.decisions.shards import (
    SHARD_LABEL,
    Handoff,
    Shard,
    ShardError,
    handoff,
    selector,
    still_owned,
)
from staticfleet.decisions.snapshot import Problem, claim_key, claim_label, claim_of
from staticfleet.run import listable, peering_priority
from tests.unit.operator.snapshots import CG, running, snapshot
from tests.unit.operator.support import with_path

pytestmark = pytest.mark.unit

DEFAULT = Shard.parse("default", ["b", "c"])
B, C = Shard.parse("b"), Shard.parse("c")


# --- the selectors ----------------------------------------------------------------------------

@pytest.mark.parametrize(("shard", "expected"), [
    (None, None),
    (Shard.parse("b"), "staticfleet.io/shard=b"),
    # Sorted and without duplicates, so every replica of the shard watches the same.
    (Shard.parse("default", ["c", "b", "c"]), "staticfleet.io/shard notin (b,c)"),
    (Shard.parse("main", ["team-a-1"]), "staticfleet.io/shard notin (team-a-1)"),
])
def test_the_watch_selector_of_a_shard(shard: Shard | None, expected: str | None) -> None:
    assert selector(shard) == expected


LABEL_SETS = [None, {}, {"app": "x"}, {SHARD_LABEL: "b"}, {SHARD_LABEL: "c"},
              {SHARD_LABEL: "default"}, {SHARD_LABEL: "typo"}, {SHARD_LABEL: ""}]


@pytest.mark.parametrize("labels", LABEL_SETS)
def test_the_shards_of_one_installation_own_every_group_once(
        labels: dict[str, str] | None) -> None:
    """Disjoint and covering: the default shard and the named ones it leaves out."""
    owners = [s.name for s in (DEFAULT, B, C) if s.owns(labels)]
    assert len(owners) == 1, owners
    value = (labels or {}).get(SHARD_LABEL)
    assert owners == [value if value in ("b", "c") else "default"]


def test_a_named_shard_owns_its_label_only() -> None:
    assert [lbl for lbl in LABEL_SETS if B.owns(lbl)] == [{SHARD_LABEL: "b"}]
    assert not B.is_default and DEFAULT.is_default


@pytest.mark.parametrize(("name", "others", "message"), [
    ("", (), "is not a shard name"),
    ("B", (), "is not a shard name"),
    ("b_1", (), "is not a shard name"),
    ("-b", (), "is not a shard name"),
    ("b" * 41, (), "at most 40"),
    ("default", ("default",), "names this shard itself"),
    ("default", ("ok", "Bad"), "--other-shards: 'Bad'"),
])
def test_a_shard_name_the_api_server_or_a_deployment_would_refuse(
        name: str, others: tuple[str, ...], message: str) -> None:
    with pytest.raises(ShardError, match=message):
        Shard.parse(name, others)


# --- the settings -----------------------------------------------------------------------------

@pytest.mark.parametrize(("environ", "shard"), [
    ({}, None),
    ({SHARD_ENV: " "}, None),
    ({SHARD_ENV: "b"}, Shard("b")),
    ({SHARD_ENV: "default", OTHER_SHARDS_ENV: "c, b,"}, Shard("default", ("b", "c"))),
])
def test_the_shard_from_the_environment(environ: dict[str, str], shard: Shard | None) -> None:
    assert OperatorSettings.from_env(environ).shard == shard


@pytest.mark.parametrize(("environ", "message"), [
    ({OTHER_SHARDS_ENV: "b"}, "set without STATICFLEET_SHARD"),
    ({SHARD_ENV: "Bad"}, "--shard: 'Bad' is not a shard name"),
])
def test_a_shard_setting_the_operator_cannot_use_stops_it(environ: dict[str, str],
                                                          message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        OperatorSettings.from_env(environ)


def test_the_command_line_flags() -> None:
    args = cli.parser(plugins=[]).parse_args([
        "operator", "run", "--shard", "default", "--other-shards", "b,c",
        "--peering", "sf-staticfleet"])
    assert (args.shard, args.other_shards, args.peering) == ("default", "b,c", "sf-staticfleet")
    plain = cli.parser(plugins=[]).parse_args(["operator", "run"])
    assert (plain.shard, plain.other_shards, plain.peering) == (None, None, None)


# --- handing a group over ---------------------------------------------------------------------

GRACE = 60.0


@pytest.mark.parametrize(("me", "recorded", "since", "now", "act", "wait_s", "says"), [
    # 1: nobody holds it, or this shard does.
    ("b", None, None, 100.0, True, 0.0, ""),
    ("b", "", None, 100.0, True, 0.0, ""),
    ("b", "b", None, 100.0, True, 0.0, ""),
    (None, None, None, 100.0, True, 0.0, ""),
    # 2: another shard holds it: wait the whole grace (its release wakes the daemon sooner).
    ("b", "default", None, 100.0, False, GRACE, "waiting until it lets the group go"),
    # An operator that is not sharded (the shards were merged back) waits the same.
    (None, "b", None, 100.0, False, GRACE, "shard 'b' reconciled this group last"),
    # 4: still within the grace: the rest of it.
    ("b", "default", 100.0, 130.0, False, 30.0, "30 s left"),
    # 3: past the grace: take it over, and say why.
    ("b", "default", 100.0, 160.0, True, 0.0, "did not let the group go within 60 s"),
    ("b", "default", 100.0, 500.0, True, 0.0, "takes the group over"),
])
def test_when_a_shard_may_act_on_a_group(me: str | None, recorded: str | None,
                                         since: float | None, now: float, act: bool,
                                         wait_s: float, says: str) -> None:
    got = handoff(me, recorded, since, now, GRACE)
    assert (got.act, got.wait_s) == (act, wait_s)
    assert says in got.message
    assert bool(got.message) == bool(says)


def test_a_shard_never_waits_for_itself_whatever_the_clock() -> None:
    for since, now in product((None, 0.0, 50.0), (0.0, 59.0, 1e9)):
        assert handoff("b", "b", since, now) == Handoff(act=True)


@pytest.mark.parametrize(("shard", "body", "why"), [
    (B, {"metadata": {"labels": {SHARD_LABEL: "b"}}, "status": {"shard": "b"}}, None),
    (B, {"metadata": {"labels": {SHARD_LABEL: "b"}}}, None),
    (DEFAULT, {"metadata": {}, "status": {"shard": "default"}}, None),
    (None, {"metadata": {"labels": {SHARD_LABEL: "b"}}, "status": {"shard": "b"}}, None),
    (B, None, "it no longer exists"),
    (None, None, "it no longer exists"),
    (B, {"metadata": {"labels": {SHARD_LABEL: "c"}}}, "staticfleet.io/shard=c selects another"),
    (B, {"metadata": {}}, "staticfleet.io/shard=(none) selects another"),
    (DEFAULT, {"metadata": {"labels": {SHARD_LABEL: "b"}}}, "shard=b selects another"),
    (B, {"metadata": {"labels": {SHARD_LABEL: "b"}}, "status": {"shard": "default"}},
     "shard 'default' has taken it over"),
])
def test_a_shard_reading_a_group_back_knows_whether_it_still_owns_it(
        shard: Shard | None, body: dict[str, object] | None, why: str | None) -> None:
    got = still_owned(shard, body)
    assert (got is None) == (why is None)
    assert why is None or why in (got or "")


# --- status.shard -------------------------------------------------------------------------------

def test_the_status_names_the_shard_that_reconciles_the_group() -> None:
    sharded = OperatorSettings(shard=B)
    first = decide(snapshot(CG, state="Dead", settings=sharded))
    assert first.status["shard"] == "b"
    later = decide(snapshot(CG, running(first), previous=without_nulls(dict(first.status)),
                            settings=sharded))
    assert later.status["shard"] == "b"
    # A pass that fails keeps saying so, and so does a pass of a shard that took it over.
    failed = degraded(replace(snapshot(CG, previous=dict(later.status), settings=sharded)),
                      Problem(c.KAFKA_UNREACHABLE, "down"))
    assert failed.status["shard"] == "b"
    moved = degraded(snapshot(CG, previous=dict(later.status),
                              settings=OperatorSettings(shard=DEFAULT)),
                     Problem(c.KAFKA_UNREACHABLE, "down"))
    assert moved.status["shard"] == "default"


def test_an_operator_that_is_not_sharded_writes_no_shard() -> None:
    held = without_nulls({**dict(decide(snapshot(CG, state="Dead")).status), "shard": "b"})
    plan = decide(snapshot(CG, previous=held))
    assert "shard" not in without_nulls(dict(plan.status))
    failed = degraded(snapshot(CG, previous=held), Problem(c.KAFKA_UNREACHABLE, "down"))
    assert "shard" not in failed.status


# --- the claim label ----------------------------------------------------------------------------

def test_the_claim_label_is_one_per_kafka_group() -> None:
    same = claim_key("b:9092, A:9092", "orders")
    assert same == claim_key("a:9092,b:9092", "orders")
    assert claim_label(same) == claim_label(claim_key("a:9092,b:9092", "orders"))
    assert claim_label(same) != claim_label(claim_key("a:9092,b:9092", "orders-2"))
    assert claim_label(same) != claim_label(claim_key("a:9092", "orders"))
    value = claim_label(same)
    assert len(value) <= 63 and value.isalnum()


def test_a_claimant_holds_its_group_until_it_is_refused_it() -> None:
    made = with_path(with_path(CG, "metadata.creationTimestamp", "2026-11-20T10:00:00Z"),
                     "metadata.uid", "u-1")
    key, claimant = claim_of(made)
    assert key == claim_key(CG["spec"]["kafka"]["bootstrapServers"], CG["metadata"]["name"])
    assert (claimant.name, claimant.created, claimant.holding) == (
        "orders", "2026-11-20T10:00:00Z", False)
    holding = with_path(made, "status", {"groupId": key[1]})
    assert claim_of(holding)[1].holding
    refused = with_path(holding, "status.conditions", [
        {"type": c.DEGRADED, "status": "True", "reason": c.GROUP_ID_IN_USE}])
    assert not claim_of(refused)[1].holding


# --- peering -------------------------------------------------------------------------------------

def test_the_oldest_operator_of_a_peering_has_the_highest_priority() -> None:
    started = 1_790_000_000_000
    assert peering_priority(started) > peering_priority(started + 1) > 0
    assert peering_priority(started) < 2**53


@pytest.mark.parametrize(("namespaces", "everywhere", "listed"), [
    ([], False, None),
    (["a", "b"], True, None),
    (["a", "b"], False, ("a", "b")),
    # kopf's patterns name no namespace a list request could use: list them all.
    (["team-*"], False, None),
    (["a", "!a-test"], False, None),
])
def test_where_a_sharded_operator_lists_other_shards_groups(
        namespaces: list[str], everywhere: bool, listed: tuple[str, ...] | None) -> None:
    assert listable(namespaces, everywhere) == listed
