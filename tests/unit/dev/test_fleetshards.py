"""The fleet bench's shards on plain data: K shards named and selected as the chart's, each given
its share round-robin and exactly one shard's selector taking each group; which shard holds each
group, from the groups' status and the operators' metrics (none, two, elsewhere told apart); the
operators' CPU and memory from samples; each shard's cold start and the whole fleet's."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from staticfleet.decisions.shards import SHARD_LABEL, Shard
from staticfleet_dev.testkit import fleetshards
from staticfleet_dev.testkit.fleet import Settling
from staticfleet_dev.testkit.fleetshards import Holdings, Layout

pytestmark = pytest.mark.unit


def test_one_shard_is_one_operator_not_sharded() -> None:
    one = Layout(1)
    assert one.names == (None,)
    assert one.args(None) == ()
    assert one.labels(7) == {}
    assert one.shard(None) is None
    assert one.owners({SHARD_LABEL: "s1"}) == [None]


@pytest.mark.parametrize(("k", "groups"), [(2, 40), (2, 2000), (3, 40), (4, 1000), (3, 41)])
def test_each_shard_is_given_its_share_and_selects_exactly_its_groups(k: int,
                                                                      groups: int) -> None:
    layout = Layout(k)
    assert layout.names == ("default", *(f"s{i}" for i in range(1, k)))
    given = Counter(layout.shard_of(i) for i in range(groups))
    assert set(given) == set(layout.names)
    assert max(given.values()) - min(given.values()) <= 1
    if groups % k == 0:
        assert set(given.values()) == {groups // k}
    for i in range(groups):
        # The operator's own selectors, from the arguments the operator is given, take the
        # group with the labels it is made with: one shard, the one it was given to.
        assert layout.owners(layout.labels(i)) == [layout.shard_of(i)]


def test_the_default_shards_groups_carry_no_label_and_its_operator_leaves_the_named() -> None:
    layout = Layout(3)
    assert [layout.labels(i) for i in range(3)] == [
        {}, {SHARD_LABEL: "s1"}, {SHARD_LABEL: "s2"}]
    assert layout.args("default") == ("--shard=default", "--other-shards=s1,s2")
    assert layout.args("s2") == ("--shard=s2",)
    assert layout.shard("default") == Shard("default", ("s1", "s2"))
    assert layout.owners({SHARD_LABEL: "typo"}) == ["default"]


def group(name: str, shard: str | None, labels: dict[str, str] | None = None,
          ) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}},
            "status": {"shard": shard} if shard else {}}


TWO = Layout(2)
LABELLED = {SHARD_LABEL: "s1"}


@pytest.mark.parametrize(("layout", "objs", "passed", "none", "two", "elsewhere"), [
    # Each group held by the shard its label selects, and passed by it alone.
    (TWO, [group("a", "default"), group("b", "s1", LABELLED)],
     {"default": {"a"}, "s1": {"b"}}, [], [], []),
    # Not sharded: no status.shard, one operator.
    (Layout(1), [group("a", None), group("b", None)], {None: {"a", "b"}}, [], [], []),
    # No operator ran a pass for "b"; "a"'s status names no shard.
    (TWO, [group("a", None), group("b", "s1", LABELLED)],
     {"default": {"a"}, "s1": set()}, ["a", "b"], [], []),
    # Both operators ran passes for "a".
    (TWO, [group("a", "default")], {"default": {"a"}, "s1": {"a"}}, [], ["a"], []),
    # "b" is labelled for s1 but the default shard holds it.
    (TWO, [group("b", "default", LABELLED)], {"default": {"b"}, "s1": set()}, [], [], ["b"]),
    # An operator that is not sharded wrote a shard.
    (Layout(1), [group("a", "s1")], {None: {"a"}}, [], [], ["a"]),
])
def test_which_shard_holds_each_group(layout: Layout, objs: list[dict[str, Any]],
                                      passed: dict[str | None, set[str]], none: list[str],
                                      two: list[str], elsewhere: list[str]) -> None:
    held = fleetshards.holdings(layout, objs, passed)
    assert (list(held.by_none), list(held.by_two), list(held.elsewhere)) == (none, two, elsewhere)
    assert held.sound is not (none or two or elsewhere)
    assert held.report() == {"groupsHeldByNone": len(none), "groupsHeldByTwo": len(two),
                             "groupsHeldElsewhere": len(elsewhere)}


def test_holdings_count_each_shards_groups() -> None:
    objs = [group("a", "default"), group("c", "default"), group("b", "s1", LABELLED)]
    held = fleetshards.holdings(TWO, objs, {"default": {"a", "c"}, "s1": {"b"}})
    assert held == Holdings(by_status={"default": 2, "s1": 1},
                            by_passes={"default": 2, "s1": 1}, by_none=(), by_two=(),
                            elsewhere=())
    assert held.shard_report("default") == {"groupsHeld": 2, "groupsPassed": 2}
    assert held.shard_report("s1") == {"groupsHeld": 1, "groupsPassed": 1}


METRICS = """\
# TYPE staticfleet_reconcile_last_timestamp_seconds gauge
staticfleet_reconcile_last_timestamp_seconds{namespace="fleet",group="fleet-0000"} 1.7e9
staticfleet_reconcile_last_timestamp_seconds{namespace="fleet",group="fleet-0001"} 1.6e9
staticfleet_reconcile_last_timestamp_seconds{namespace="fleet-real",group="real"} 1.7e9
staticfleet_reconcile_duration_seconds_count 12
"""


def test_the_groups_an_operator_ran_passes_for_since() -> None:
    assert fleetshards.passed_since(METRICS, "fleet", 1.65e9) == {"fleet-0000"}
    assert fleetshards.passed_since(METRICS, "fleet", 0) == {"fleet-0000", "fleet-0001"}
    assert fleetshards.passed_since("", "fleet", 0) == set()


def test_the_operators_cpu_and_memory_alone_and_together() -> None:
    usage = fleetshards.Usage(
        {"default": 10, "s1": 20}, times=[0.0, 5.0, 10.0],
        cpu=[{"default": {10: 1.0}, "s1": {20: 2.0}},
             {"default": {10: 2.0, 11: 0.5}, "s1": {20: 2.5}},  # a child came
             {"default": {10: 2.5}, "s1": {20: 3.0}}],           # and went
        rss=[{"default": 100, "s1": 300}, {"default": 400, "s1": 50},
             {"default": 200, "s1": 200}])
    assert usage.rss_kib(["default"]) == 400
    assert usage.rss_kib(["default", "s1"]) == 450  # the most in one sample, not the sum of maxima
    assert usage.cores(["s1"]) == (0.1, 0.1)
    # The average from the first sample to the last, as the bench always measured it: the child
    # gone by the last sample takes its seconds with it; the peak interval counts them.
    assert usage.cores(["default"]) == pytest.approx((0.15, 0.3))
    assert usage.cores(["default", "s1"]) == pytest.approx((0.25, 0.4))
    assert usage.report(["s1"]) == {"operatorRssMiB": 0.3, "operatorCpuCoresAtRest": 0.1,
                                    "operatorCpuCoresPeakAtRest": 0.1}
    assert fleetshards.Usage({"s1": 1}).report(["s1"]) == {
        "operatorRssMiB": None, "operatorCpuCoresAtRest": None,
        "operatorCpuCoresPeakAtRest": None}


def test_pass_figures_from_the_windows_buckets() -> None:
    hist = [(0.01, 50.0), (0.1, 90.0), (1.0, 100.0), (float("inf"), 100.0)]
    assert fleetshards.pass_figures(hist, 10.0) == {
        "passP50Seconds": 0.01, "passP90Seconds": 0.1, "passP99Seconds": 0.91,
        "passesPerSecondAtRest": 10.0}
    assert fleetshards.pass_figures([], 10.0)["passP99Seconds"] is None


def test_each_shards_cold_start_and_the_whole_fleets() -> None:
    given = {"a": "default", "b": "s1", "c": "default"}
    shards, whole = fleetshards.cold_start_figures(TWO, given, {
        "default": Settling(3.04, 9.96), "s1": Settling(4.0, None, {"Ready False: X": 1})})
    assert shards["default"] == {
        "shard": "default", "selector": "staticfleet.io/shard notin (s1)", "groupsGiven": 2,
        "coldStartFirstPassSeconds": 3.0, "coldStartSeconds": 10.0}
    assert shards["s1"]["selector"] == "staticfleet.io/shard=s1"
    assert shards["s1"]["coldStartSeconds"] is None
    assert whole == Settling(4.0, None, {"Ready False: X": 1})
    _, both = fleetshards.cold_start_figures(TWO, given, {
        "default": Settling(3.0, 9.0), "s1": Settling(4.0, 7.0)})
    assert (both.first, both.settled) == (4.0, 9.0)
