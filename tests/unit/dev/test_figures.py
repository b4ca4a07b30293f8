"""The benchmarks' figure helpers on plain text and numbers: nearest-rank percentiles, the API
server's request counters by verb and resource, a histogram's quantiles over a window as
Prometheus estimates them (several processes' added), and the CPU of a process tree whose
members come and go."""

from __future__ import annotations

import os

import pytest

from staticfleet_dev.testkit import figures

pytestmark = pytest.mark.unit

APISERVER = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="pods",scope="namespace",verb="LIST"} 12
apiserver_request_total{code="200",resource="pods",scope="cluster",verb="LIST"} 3
apiserver_request_total{code="201",resource="events",scope="namespace",verb="POST"} 7
apiserver_request_total{code="200",resource="consumergroups",subresource="status",verb="PATCH"} 5
apiserver_request_total_other{verb="POST"} 1000
apiserver_request_duration_seconds_bucket{verb="POST",le="0.1"} 3
"""

HISTOGRAM = """\
# TYPE staticfleet_reconcile_duration_seconds histogram
staticfleet_reconcile_duration_seconds_bucket{le="0.01"} 10.0
staticfleet_reconcile_duration_seconds_bucket{le="0.1"} 90.0
staticfleet_reconcile_duration_seconds_bucket{le="1.0"} 100.0
staticfleet_reconcile_duration_seconds_bucket{le="+Inf"} 100.0
staticfleet_reconcile_duration_seconds_count 100.0
staticfleet_reconcile_duration_seconds_sum 4.2
"""


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([5.0], 50, 5.0),
    ([5.0], 99, 5.0),
    ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
    ([4.0, 3.0, 2.0, 1.0], 75, 3.0),
    ([float(n) for n in range(1, 101)], 99, 99.0),
    ([float(n) for n in range(1, 101)], 100, 100.0),
    ([1.0, 2.0], 0, 1.0),
])
def test_nearest_rank_percentile(values: list[float], q: float, expected: float) -> None:
    assert figures.percentile(values, q) == expected


def test_the_api_servers_requests_by_verb_and_resource() -> None:
    counts = figures.api_requests(APISERVER)
    assert counts == {("LIST", "pods"): 15, ("POST", "events"): 7,
                      ("PATCH", "consumergroups"): 5}, "other metrics' lines are not counted"
    assert figures.by_verb(counts) == {"LIST": 15, "POST": 7, "PATCH": 5}
    assert figures.writes(counts) == 12


def test_a_windows_requests_less_what_the_same_span_costs_idle() -> None:
    before = {("LIST", "pods"): 10.0, ("PATCH", "leases"): 100.0}
    after = {("LIST", "pods"): 40.0, ("PATCH", "leases"): 160.0, ("POST", "events"): 2.0}
    idle = {("PATCH", "leases"): 30.0, ("LIST", "pods"): 5.0}
    # The window is twice the idle span: the leases' 60 are all idle work, 10 of the 30 lists.
    assert figures.difference(after, before, idle, idle_scale=2.0) == {
        ("LIST", "pods"): 20.0, ("POST", "events"): 2.0}
    assert figures.difference(after, before) == {
        ("LIST", "pods"): 30.0, ("PATCH", "leases"): 60.0, ("POST", "events"): 2.0}


def test_a_histograms_quantiles_over_a_window() -> None:
    now = figures.buckets(HISTOGRAM, "staticfleet_reconcile_duration_seconds")
    assert now == [(0.01, 10.0), (0.1, 90.0), (1.0, 100.0), (float("inf"), 100.0)]
    assert figures.histogram_quantile(0.05, now) == pytest.approx(0.005)  # from 0 in the first
    assert figures.histogram_quantile(0.5, now) == pytest.approx(0.01 + 0.09 * 40 / 80)
    assert figures.histogram_quantile(0.99, now) == pytest.approx(0.1 + 0.9 * 9 / 10)
    before = [(0.01, 10.0), (0.1, 90.0), (1.0, 90.0), (float("inf"), 90.0)]
    window = figures.bucket_difference(now, before)
    assert window == [(0.01, 0.0), (0.1, 0.0), (1.0, 10.0), (float("inf"), 10.0)]
    assert figures.histogram_quantile(0.5, window) == pytest.approx(0.55)
    assert figures.histogram_quantile(0.5, figures.bucket_difference(now, now)) is None
    slow = [(0.5, 1.0), (1.0, 1.0), (float("inf"), 4.0)]
    assert figures.histogram_quantile(0.99, slow) == 1.0, "in +Inf: the highest finite bound"


def test_several_operators_histograms_as_one() -> None:
    one = [(0.01, 10.0), (0.1, 90.0), (float("inf"), 100.0)]
    other = [(0.01, 0.0), (0.1, 10.0), (float("inf"), 20.0)]
    both = figures.sum_buckets([one, other])
    assert both == [(0.01, 10.0), (0.1, 100.0), (float("inf"), 120.0)]
    assert figures.sum_buckets([one]) == one
    assert figures.sum_buckets([]) == []
    assert figures.histogram_quantile(0.5, both) == pytest.approx(0.01 + 0.09 * 50 / 90)


@pytest.mark.parametrize(("times", "expected"), [
    ([3.0, 9.5, 7.0], 9.5),
    ([3.0, None], None),  # a part never came
    ([], None),
    ([0.0], 0.0),
])
def test_the_last_of_several_parts_times(times: list[float | None],
                                         expected: float | None) -> None:
    assert figures.latest(times) == expected


def test_a_figure_rounded_or_not_measured() -> None:
    assert figures.rounded(1.26, 1) == 1.3
    assert figures.rounded(None, 1) is None


def test_the_cpu_of_a_tree_whose_members_come_and_go() -> None:
    before = {1: 10.0, 2: 5.0, 3: 1.0}
    after = {1: 12.5, 2: 5.5, 4: 0.25}  # 3 exited (its seconds went with it), 4 is new
    assert figures.cpu_used(before, after) == pytest.approx(3.25)


def test_this_process_is_in_its_own_tree() -> None:
    me = os.getpid()
    assert figures.children(me)[0] == me
    own = figures.rss_kib(me)
    assert own > 0
    # This process's RSS moves between two reads (pytest-xdist's IO thread allocates): a tree
    # that lost its root would be far below it, not a few pages.
    assert figures.tree_rss_kib(me) >= own * 0.9
    assert figures.rss_kib(2**22 + 12345) == 0, "gone: 0"
