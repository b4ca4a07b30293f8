import json

import pytest

from consumer_runtime.metrics import Telemetry, p99

pytestmark = pytest.mark.unit
CONTRACT_KEYS = {"instanceId", "memberId", "groupId", "assignment", "rebalances", "takeovers",
                 "generation",
                 "assigns", "revokes", "lost", "startupSeconds", "processStart", "batchSecondsMax",
                 "batchSecondsP99", "recordsProcessed", "batchesProcessed", "deadLettered",
                 "lastPollAgeSeconds", "state", "processingReady", "waiting", "leaving",
                 "rejoins", "standby", "lastBatchAt", "lag",
                 "committed", "lastFetchAt", "drainedAt", "drainHoldSeconds",
                 "drainResubscribes", "staticLeave", "throughput", "lastPollAt",
                 "batchInFlight", "pausedWithWork"}


def telemetry(standby: bool = False) -> Telemetry:
    return Telemetry(namespace="ns", group="g", member="g-0", instance_id="g-0",
                     session_timeout_s=10, max_poll_interval_s=30, process_start=1000.0,
                     started_at=100.0, age_at_start=0.5, standby=standby)


def sample(t: Telemetry, name: str, **labels: str) -> float | None:
    return t.registry.get_sample_value(name, {"namespace": "ns", "group": "g", "member": "g-0",
                                              **labels})


def test_first_assignment_is_not_a_rebalance_later_ones_are() -> None:
    t = telemetry()
    assert t.assigned({("a", 0), ("a", 1)}, now=101.5, member_id="m1") == 2.0
    t.revoked({("a", 0), ("a", 1)}, lost=False)
    assert t.assigned({("a", 1)}, now=130.0, member_id="m1") is None
    t.revoked({("a", 1)}, lost=True)
    t.assigned({("a", 0)}, now=140.0, member_id="m2")
    status = t.status(now=140.0)
    assert (status["assigns"], status["revokes"], status["lost"], status["rebalances"]) == \
        (3, 1, 1, 2)
    assert status["assignment"] == [("a", 0)] and status["memberId"] == "m2"
    assert sample(t, "staticfleet_member_rebalances_total") == 2
    assert sample(t, "staticfleet_member_partition_events_total", event="lost") == 1
    assert sample(t, "staticfleet_member_assigned_partitions") == 1
    assert sample(t, "staticfleet_member_startup_seconds", phase="first_assignment") == 2.0


def test_a_member_that_only_gives_partitions_up_takes_over_nothing() -> None:
    """A group forming member by member (KIP-848 or cooperative: incremental callbacks): the
    first member gives partitions up to each joiner; those are rebalances, not takeovers. A
    member leaving then hands its partitions over: a takeover for the one that gets them."""
    t = telemetry()
    t.assigned({("a", 0), ("a", 1), ("a", 2)}, now=101.0, member_id="m1")
    for joined, given_up in ((110.0, {("a", 2)}), (120.0, {("a", 1)})):
        t.revoked(given_up, lost=False)
        t.assigned(set(), now=joined, member_id="m1")
    t.assigned({("a", 2)}, now=130.0, member_id="m1")  # the third member left
    status = t.status(now=130.0)
    assert (status["rebalances"], status["takeovers"]) == (3, 1)
    assert sample(t, "staticfleet_member_takeovers_total") == 1


def test_an_eager_rebalance_is_a_takeover_only_with_a_partition_not_held_before() -> None:
    """Eager (classic range, roundrobin): every rebalance revokes all and assigns anew."""
    t = telemetry()
    t.assigned({("a", 0), ("a", 1)}, now=101.0, member_id="m1")
    t.revoked({("a", 0), ("a", 1)}, lost=False)
    t.assigned({("a", 0)}, now=110.0, member_id="m1")  # a member joined
    t.revoked({("a", 0)}, lost=False)
    t.assigned({("a", 0), ("a", 1)}, now=120.0, member_id="m1")  # it left again
    assert (t.status(now=120.0)["rebalances"], t.status(now=120.0)["takeovers"]) == (2, 1)


def test_the_assign_a_leaving_member_gets_is_not_a_rebalance() -> None:
    t = telemetry()
    t.assigned({("a", 0)}, now=101.0, member_id="m1")
    t.revoked({("a", 0)}, lost=False)
    t.assigned(set(), now=110.0, member_id="m1", rebalance=False)
    status = t.status(now=110.0)
    assert (status["assigns"], status["rebalances"]) == (2, 0)
    assert sample(t, "staticfleet_member_rebalances_total") in (None, 0)


def test_status_has_exactly_the_contract_fields() -> None:
    t = telemetry()
    t.batch_done(records=10, seconds=0.2, now=103.0)
    t.batch_done(records=5, seconds=0.4, now=104.0)
    t.dead_letters(1)
    status = t.status(now=104.0)
    assert set(status) == CONTRACT_KEYS
    json.dumps(status)
    assert status["startupSeconds"] == {"firstAssignment": None, "firstBatch": 3.5,
                                        "consumerMade": None, "standbyReady": None,
                                        "activated": None, "instanceReleaseWait": None}
    assert status["lastBatchAt"] == 1004.5 and status["standby"] is None
    assert (status["recordsProcessed"], status["batchesProcessed"], status["deadLettered"]) == \
        (15, 2, 1)
    assert status["batchSecondsMax"] == 0.4 and status["state"] == "starting"
    assert sample(t, "staticfleet_member_records_processed_total") == 15
    assert sample(t, "staticfleet_member_session_timeout_seconds") == 10


def test_throughput_is_records_per_second_and_busy_share_over_the_last_minute() -> None:
    t = telemetry()
    t.assigned({("a", 0)}, now=90.0, member_id="m1")
    assert t.status(now=99.0)["throughput"] is None  # Spark is not up: it processes nothing
    t.spark_started(True, now=100.0)
    t.batch_done(records=100, seconds=2.0, now=105.0)
    assert t.status(now=109.0)["throughput"] is None  # under 10 s holding partitions
    t.batch_done(records=300, seconds=3.0, now=120.0)
    assert t.status(now=120.0)["throughput"] == {"recordsPerSecond": 20.0, "busyRatio": 0.25,
                                                 "windowSeconds": 20.0,
                                                 "capacityRecordsPerSecond": None}
    # a minute later only the batches of the last 60 s count, and only their part in it
    t.batch_done(records=60, seconds=30.0, now=170.0)
    assert t.status(now=171.0)["throughput"] == {"recordsPerSecond": 6.0, "busyRatio": 0.55,
                                                 "windowSeconds": 60.0,
                                                 "capacityRecordsPerSecond": None}
    t.revoked({("a", 0)}, lost=False)
    assert t.status(now=172.0)["throughput"] is None  # holds nothing: serves nothing


def test_capacity_is_what_full_batches_did_and_is_remembered_fifteen_minutes() -> None:
    t = Telemetry(namespace="ns", group="g", member="g-0", instance_id="g-0",
                  session_timeout_s=10, max_poll_interval_s=30, process_start=1000.0,
                  started_at=100.0, max_records=100)
    t.spark_started(True, now=100.0)
    t.assigned({("a", 0)}, now=100.0, member_id="m1")
    t.batch_done(records=100, seconds=0.5, now=110.0)  # full: 200 records/s
    t.batch_done(records=80, seconds=0.6, now=111.0)   # full (80 %): together 180 / 1.1 s
    t.batch_done(records=10, seconds=0.4, now=112.0)   # small: its fixed cost says nothing
    assert t.status(now=120.0)["throughput"]["capacityRecordsPerSecond"] == 163.636
    # long after the load went, small batches only: the capacity is still known...
    t.batch_done(records=5, seconds=0.4, now=1000.0)
    assert t.status(now=1001.0)["throughput"]["capacityRecordsPerSecond"] == 163.636
    # ...for fifteen minutes
    t.batch_done(records=5, seconds=0.4, now=1012.0)
    assert t.status(now=1012.0)["throughput"]["capacityRecordsPerSecond"] is None


def test_health_and_readiness_follow_poll_age_assignment_and_processing() -> None:
    t = telemetry()
    assert t.healthy(now=129.0) and not t.healthy(now=131.0)
    t.polled(now=105.0)
    assert not t.ready(now=105.0)
    t.assigned({("a", 0)}, now=105.0, member_id="m")
    assert not t.ready(now=106.0), "in the group but Spark is not up: not serving yet"
    t.processing_ready = True
    assert t.status(now=106.0)["processingReady"] is True
    assert t.ready(now=114.0) and not t.ready(now=116.0)
    t.revoked({("a", 0)}, lost=False)
    assert not t.ready(now=106.0)


def test_lag_comes_from_statistics_for_assigned_partitions_only() -> None:
    t = telemetry()
    t.assigned({("a", 0)}, now=101.0, member_id="m")
    stats = {"topics": {"a": {"partitions": {"0": {"consumer_lag": 42},
                                             "1": {"consumer_lag": 7},
                                             "-1": {"consumer_lag": 1}}}}}
    t.stats(json.dumps(stats))
    assert sample(t, "staticfleet_member_consumer_lag", topic="a", partition="0") == 42
    assert sample(t, "staticfleet_member_consumer_lag", topic="a", partition="1") is None
    assert t.status(now=102.0)["lag"] == [("a", 0, 42)], "/status reports what the operator reads"
    t.revoked({("a", 0)}, lost=False)
    assert sample(t, "staticfleet_member_consumer_lag", topic="a", partition="0") is None
    assert t.status(now=103.0)["lag"] == []


def test_status_reports_commits_and_the_last_fetch_for_assigned_partitions() -> None:
    t = telemetry()
    t.assigned({("a", 0), ("a", 1)}, now=101.0, member_id="m")
    t.polled(now=102.0)
    assert t.status(now=102.0)["lastFetchAt"] is None, "a poll that returned nothing"
    t.polled(now=103.0, records=5)
    t.committed(0.01, {("a", 0): 17})
    status = t.status(now=104.0)
    assert status["lastFetchAt"] == 1003.5 and status["committed"] == [("a", 0, 17)]
    t.revoked({("a", 0)}, lost=False)
    assert t.status(now=105.0)["committed"] == []


def test_last_poll_moves_with_every_poll_of_the_consumer_and_only_with_those() -> None:
    t = telemetry()
    assert t.status(now=101.0)["lastPollAt"] is None
    t.polled(now=102.0)
    assert t.status(now=102.0)["lastPollAt"] == 1002.5, "a poll that returned nothing"
    t.polled(now=103.0, records=3)
    status = t.status(now=103.0)
    assert status["lastPollAt"] == status["lastFetchAt"] == 1003.5
    t.ticked(now=150.0)  # drained, standby, waiting to join: no consumer to poll
    status = t.status(now=150.0)
    assert status["lastPollAt"] == 1003.5 and status["lastPollAgeSeconds"] == 0.0, \
        "alive for /healthz, but no poll"
    assert t.healthy(now=150.0)


def test_a_batch_in_flight_and_a_pause_for_work_show_until_they_end() -> None:
    t = telemetry()
    assert t.status(now=101.0)["batchInFlight"] is None
    assert t.status(now=101.0)["pausedWithWork"] is False
    t.batch_started(now=110.0, records=10000)
    t.paused_for_work(True)
    status = t.status(now=230.0)
    assert status["batchInFlight"] == {"startedAt": 1010.5, "records": 10000}
    assert status["pausedWithWork"] is True
    t.paused_for_work(False)
    t.batch_ended()
    t.batch_done(records=10000, seconds=120.0, now=230.0)
    status = t.status(now=231.0)
    assert status["batchInFlight"] is None and status["pausedWithWork"] is False
    assert status["lastBatchAt"] == 1130.5


def test_a_restart_of_a_replaced_member_shows_the_drain_of_the_process_before() -> None:
    t = telemetry()
    t.drained_before_restart(990.25, 989.5)
    status = t.status(now=101.0)
    assert (status["state"], status["drainedAt"], status["lastBatchAt"]) == \
        ("drained", 990.25, 989.5)
    assert status["drainHoldSeconds"] is None and status["assignment"] == []


@pytest.mark.parametrize(("values", "expected"), [([], None), ([3.0], 3.0),
                                                   (list(range(1, 101)), 99),
                                                   (list(range(1, 1001)), 990)])
def test_p99_nearest_rank(values: list[float], expected: float | None) -> None:
    assert p99(values) == expected


def test_a_member_waiting_to_get_in_says_why_and_is_not_ready() -> None:
    t = telemetry()
    t.processing_ready = True
    t.polled(now=110.0)
    t.wait_began("UnreleasedInstanceId", "the broker still holds g-0", now=105.0)
    t.wait_began("UnreleasedInstanceId", "the broker still holds g-0", now=105.0)
    status = t.status(now=110.0)
    assert status["waiting"] == {"reason": "UnreleasedInstanceId",
                                 "message": "the broker still holds g-0",
                                 "sinceSeconds": 5.0, "attempts": 2}
    assert t.healthy(now=110.0) and not t.ready(now=110.0)
    t.wait_over()
    t.assigned({("a", 0)}, now=111.0, member_id="m")
    assert t.status(now=111.0)["waiting"] is None and t.ready(now=111.0)


def test_leaving_is_not_ready_and_left_holds_nothing() -> None:
    t = telemetry()
    t.processing_ready = True
    t.assigned({("a", 0)}, now=101.0, member_id="m")
    assert t.ready(now=101.0)
    t.leave_accepted()
    assert not t.ready(now=101.0) and t.status(now=101.0)["leaving"] is True
    t.left()
    status = t.status(now=102.0)
    assert (status["state"], status["assignment"], status["memberId"]) == ("left", [], "")
    assert sample(t, "staticfleet_member_assigned_partitions") == 0


def test_rejoins_are_counted() -> None:
    t = telemetry()
    t.rejoined()
    assert t.status(now=101.0)["rejoins"] == 1


def test_no_session_timeout_series_when_the_broker_owns_it() -> None:
    t = Telemetry(namespace="ns", group="g", member="g-0", instance_id="g-0",
                  session_timeout_s=None, max_poll_interval_s=30, process_start=1000.0,
                  started_at=100.0)
    assert sample(t, "staticfleet_member_session_timeout_seconds") is None
    assert sample(t, "staticfleet_member_max_poll_interval_seconds") == 30


def test_a_standby_warms_then_is_ready_then_activated_and_is_never_ready_before() -> None:
    t = telemetry(standby=True)
    assert t.status(now=101.0)["state"] == "standby"
    assert t.status(now=101.0)["standby"] == "warming"
    t.processing_ready = True
    t.became_standby_ready(now=104.0)
    status = t.status(now=104.0)
    assert status["standby"] == "ready" and status["startupSeconds"]["standbyReady"] == 4.5
    assert not t.ready(now=104.0), "a standby holds no partitions: not Ready"
    assert sample(t, "staticfleet_member_startup_seconds", phase="standby_ready") == 4.5
    t.activated(now=110.0)
    t.assigned({("a", 0)}, now=110.5, member_id="m")
    t.polled(now=110.5)
    status = t.status(now=110.5)
    assert status["standby"] is None and status["state"] == "running"
    assert status["startupSeconds"]["activated"] == 10.5
    assert status["rebalances"] == 0 and t.ready(now=110.5)
    t.became_standby_ready(now=111.0)
    assert t.status(now=111.0)["standby"] is None, "ready after activation changes nothing"


def test_a_confirmed_static_leave_shows_in_status_and_counts_by_outcome() -> None:
    t = telemetry()
    assert t.status(now=101.0)["staticLeave"] is None
    assert sample(t, "staticfleet_member_static_leaves_total", outcome="unconfirmed") == 0
    t.static_leave_confirmed({"outcome": "left", "tries": 1, "ms": 8.5, "detail": None})
    t.static_leave_confirmed({"outcome": "unconfirmed", "tries": 12, "ms": 20000.0,
                              "detail": "error 15: "})
    assert t.status(now=102.0)["staticLeave"] == {"outcome": "unconfirmed", "tries": 12,
                                                  "ms": 20000.0, "detail": "error 15: "}
    assert sample(t, "staticfleet_member_static_leaves_total", outcome="left") == 1
    assert sample(t, "staticfleet_member_static_leaves_total", outcome="unconfirmed") == 1
    assert sample(t, "staticfleet_member_static_leaves_total", outcome="taken") == 0
