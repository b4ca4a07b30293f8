"""compute_timeouts: tables for the rules and hysteresis, hypothesis for 'always holds'."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from staticfleet.decisions.spec.model import TimeoutsSpec
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from staticfleet.decisions.timeouts.inputs import BrokerBounds, Measurements
from staticfleet.decisions.timeouts.rules import (
    TimeoutRuleError,
    compute_timeouts,
    needed_session_timeout_ms,
    restart_need_ms,
    step_up,
)
from tests.unit.operator.support import NOW

CLASSIC = BrokerBounds.classic_defaults()
KIP848 = BrokerBounds.consumer_defaults()
NO_EXPLICIT = TimeoutsSpec()


def compute(
    explicit: TimeoutsSpec = NO_EXPLICIT,
    restarts: tuple[float, ...] = (),
    batch: float | None = None,
    bounds: BrokerBounds = CLASSIC,
    current: EffectiveTimeouts | None = None,
    protocol: str = "classic",
    auto_tuning: bool = True,
    now_offset_s: float = 0,
    max_auto_session_ms: int | None = None,
) -> EffectiveTimeouts:
    return compute_timeouts(
        protocol=protocol,  # type: ignore[arg-type]
        explicit=explicit,
        measurements=Measurements(restart_seconds=restarts, batch_seconds_max=batch),
        bounds=bounds,
        current=current,
        now=NOW + timedelta(seconds=now_offset_s),
        auto_tuning=auto_tuning,
        max_auto_session_ms=max_auto_session_ms,
    )


@pytest.mark.parametrize(
    ("restart_s", "margin", "needed"),
    [
        (0.0, 150, 2000),
        (10.0, 150, 17000),
        (40.0, 150, 62000),
        (10.0, 200, 22000),
        (1.1, 150, 3650),
    ],
)
def test_needed_session_timeout(restart_s: float, margin: int, needed: int) -> None:
    assert needed_session_timeout_ms(restart_s, margin) == needed


TABLE = [
    # what, kwargs, (session, heartbeat, max_poll), sources, restart_safe
    ("nothing measured", {}, (45000, 1000, 300000), ("default", "default", "default"), True),
    (
        "fast restarts keep the default",
        {"restarts": (3.0, 5.0)},
        (45000, 1000, 300000),
        ("default", "default", "default"),
        True,
    ),
    (
        "slow restart raises the session",
        {"restarts": (40.0,)},
        (75000, 1000, 300000),  # needs 62000: the next step of 45 s x 1.5, rounded to 15 s
        ("auto", "default", "default"),
        True,
    ),
    (
        "slow batch raises max poll",
        {"batch": 200.0},
        (45000, 1000, 450000),  # needs 405000: the next step of 300 s x 1.5
        ("default", "default", "auto"),
        True,
    ),
    (
        "auto-tuning off ignores measurements",
        {"restarts": (40.0,), "auto_tuning": False},
        (45000, 1000, 300000),
        ("default", "default", "default"),
        False,
    ),
    (
        "need beyond the broker max is capped and unsafe",
        {"restarts": (100.0,), "bounds": BrokerBounds(6000, 120000)},
        (120000, 1000, 300000),
        ("auto", "default", "default"),
        False,
    ),
    (
        "small broker max clamps the default",
        {"bounds": BrokerBounds(1000, 20000)},
        (20000, 1000, 300000),
        ("default", "default", "default"),
        True,
    ),
    (
        "explicit session",
        {"explicit": TimeoutsSpec(session_timeout_ms=9000)},
        (9000, 1000, 300000),
        ("explicit", "default", "default"),
        True,
    ),
    (
        "explicit short session gives heartbeat a third",
        {"explicit": TimeoutsSpec(session_timeout_ms=2400), "bounds": BrokerBounds(1000, 20000)},
        (2400, 800, 300000),
        ("explicit", "auto", "default"),
        True,
    ),
    (
        "explicit session too short for restarts is unsafe, not refused",
        {"explicit": TimeoutsSpec(session_timeout_ms=10000), "restarts": (20.0,)},
        (10000, 1000, 300000),
        ("explicit", "default", "default"),
        False,
    ),
    (
        "explicit heartbeat lifts the auto session",
        {"explicit": TimeoutsSpec(heartbeat_interval_ms=20000)},
        (60000, 20000, 300000),
        ("auto", "explicit", "default"),
        True,
    ),
    (
        "explicit max poll caps the auto session",
        {"explicit": TimeoutsSpec(max_poll_interval_ms=50000), "restarts": (60.0,)},
        (50000, 1000, 50000),
        ("auto", "default", "explicit"),
        False,
    ),
    (
        "KIP-848 heartbeat within broker bounds",
        {"protocol": "consumer", "bounds": KIP848},
        (45000, 5000, 300000),
        ("default", "auto", "default"),
        True,
    ),
]


@pytest.mark.parametrize(
    ("what", "kwargs", "values", "sources", "safe"), TABLE, ids=[t[0] for t in TABLE]
)
def test_table(what: str, kwargs: dict, values: tuple, sources: tuple, safe: bool) -> None:
    t = compute(**kwargs)
    assert (t.session_timeout_ms, t.heartbeat_interval_ms, t.max_poll_interval_ms) == values
    assert (
        tuple(
            t.sources[k] for k in ("sessionTimeoutMs", "heartbeatIntervalMs", "maxPollIntervalMs")
        )
        == sources
    )
    assert t.restart_safe is safe
    assert len(t.reasons) >= 3 and all(t.reasons)


REFUSED = [
    ("session below broker min", {"explicit": TimeoutsSpec(session_timeout_ms=5000)}, "S1"),
    (
        "session above broker max",
        {
            "explicit": TimeoutsSpec(session_timeout_ms=70000),
            "bounds": KIP848,
            "protocol": "consumer",
        },
        "S1",
    ),
    (
        "heartbeat over a third",
        {"explicit": TimeoutsSpec(session_timeout_ms=9000, heartbeat_interval_ms=3001)},
        "H1",
    ),
    (
        "heartbeat outside KIP-848 bounds",
        {
            "explicit": TimeoutsSpec(heartbeat_interval_ms=2000),
            "bounds": KIP848,
            "protocol": "consumer",
        },
        "H1",
    ),
    (
        "max poll below session",
        {"explicit": TimeoutsSpec(session_timeout_ms=60000, max_poll_interval_ms=50000)},
        "P1",
    ),
    (
        "explicit heartbeat and max poll leave no session",
        {"explicit": TimeoutsSpec(heartbeat_interval_ms=20000, max_poll_interval_ms=50000)},
        "H1/P1",
    ),
    ("empty broker bounds", {"bounds": BrokerBounds(10000, 5000)}, "S1"),
]


@pytest.mark.parametrize(("what", "kwargs", "rule"), REFUSED, ids=[r[0] for r in REFUSED])
def test_rule_breaking_values_are_refused(what: str, kwargs: dict, rule: str) -> None:
    with pytest.raises(TimeoutRuleError) as err:
        compute(**kwargs)
    assert err.value.rule == rule
    assert any(ch.isdigit() for ch in err.value.message)


def test_hysteresis_raises_at_once_and_lowers_only_after_the_hold() -> None:
    raised = compute(restarts=(60.0,))
    assert raised.session_timeout_ms == 120000  # needs 92000: steps 45, 75, 120 s
    # Need back to 45000 (< 60% of 120000): held, and the candidate time recorded.
    held = compute(restarts=(5.0,), current=raised)
    assert held.session_timeout_ms == 120000
    assert held.lower_candidate_since["sessionTimeoutMs"] == NOW
    # Still held 9 minutes later; the candidate time is kept, not reset.
    later = compute(restarts=(5.0,), current=held, now_offset_s=540)
    assert later.session_timeout_ms == 120000
    assert later.lower_candidate_since["sessionTimeoutMs"] == NOW
    # After 10 minutes below: lowered to the default floor.
    lowered = compute(restarts=(5.0,), current=later, now_offset_s=600)
    assert lowered.session_timeout_ms == 45000 and not lowered.lower_candidate_since


def test_hysteresis_holds_within_sixty_percent_and_resets_the_candidate() -> None:
    raised = compute(restarts=(60.0,))  # needs 92000: 120000
    near = compute(restarts=(40.0,), current=raised)  # step 75000 >= 60% of 120000
    assert near.session_timeout_ms == 120000 and not near.lower_candidate_since
    higher = compute(restarts=(80.0,), current=near)
    assert higher.session_timeout_ms == 120000, "the classic cap, not the 180000 ms step"
    assert not higher.restart_safe and higher.needed_session_timeout_ms == 122000
    uncapped = compute(restarts=(80.0,), current=near, max_auto_session_ms=300000)
    assert uncapped.session_timeout_ms == 180000 and uncapped.restart_safe


@pytest.mark.parametrize(("protocol", "cap", "restart_s", "session", "safe"), [
    ("classic", None, 60.0, 120000, True),
    ("classic", None, 168.0, 120000, False),  # a pathological restart is not a new timeout
    ("classic", 60000, 60.0, 60000, False),
    ("classic", 600000, 168.0, 270000, True),
    ("classic", 100000, 60.0, 100000, True),  # the step (120 s) capped; the need (92 s) fits
    ("consumer", None, 30.0, 75000, True),
])
def test_the_automatic_session_timeout_is_capped(protocol: str, cap: int | None,
                                                 restart_s: float, session: int,
                                                 safe: bool) -> None:
    bounds = (BrokerBounds.classic_defaults() if protocol == "classic"
              else BrokerBounds(45000, 600000, 5000, 15000))
    t = compute(protocol=protocol, restarts=(restart_s,), bounds=bounds,
                max_auto_session_ms=cap)
    assert (t.session_timeout_ms, t.restart_safe) == (session, safe)
    if not safe:
        assert any("not a timeout to grow" in r for r in t.reasons)


@pytest.mark.parametrize(("need", "floor", "value"), [
    (45000, 45000, 45000), (45001, 45000, 75000), (92000, 45000, 120000),
    (122000, 45000, 180000), (405000, 300000, 450000), (300000, 300000, 300000),
])
def test_automatic_values_rise_in_coarse_steps(need: int, floor: int, value: int) -> None:
    assert step_up(need, floor) == value


def test_status_round_trip() -> None:
    t = compute(restarts=(5.0,), current=compute(restarts=(60.0,)))
    again = EffectiveTimeouts.from_status(t.to_status())
    assert again == t
    assert EffectiveTimeouts.from_status(None) is None
    assert EffectiveTimeouts.from_status({"sessionTimeoutMs": 1}) is None


def test_changed_fields_and_client_views() -> None:
    a, b = compute(), compute(restarts=(40.0,))
    assert b.changed_fields(a) == ("sessionTimeoutMs",) and b.changed_fields(None) == ()
    assert a.client_properties("consumer") == {"max.poll.interval.ms": 300000}
    assert a.client_properties("classic")["session.timeout.ms"] == 45000
    assert a.group_configs("consumer") == {
        "consumer.session.timeout.ms": "45000",
        "consumer.heartbeat.interval.ms": "1000",
    }
    assert a.group_configs("classic") == {}


def test_bounds_from_broker_config() -> None:
    cfg = {"group.min.session.timeout.ms": 1000, "group.consumer.min.heartbeat.interval.ms": 500}
    assert BrokerBounds.from_broker_config("classic", cfg) == BrokerBounds(1000, 1800000)
    assert BrokerBounds.from_broker_config("consumer", cfg) == BrokerBounds(
        45000, 60000, 500, 15000
    )


# --- properties ---------------------------------------------------------------------------------

bounds_st = st.builds(
    lambda lo, span: BrokerBounds(lo, lo + span),
    st.integers(1000, 60000),
    st.integers(0, 1_800_000),
)
kip848_st = st.builds(
    lambda lo, span, hlo, hspan: BrokerBounds(lo, lo + span, hlo, hlo + hspan),
    st.integers(3000, 60000),
    st.integers(0, 600_000),
    st.integers(1, 1000),
    st.integers(0, 30000),
)
restarts_st = st.lists(st.floats(0, 1200, allow_nan=False), max_size=5).map(tuple)
batch_st = st.none() | st.floats(0, 20000, allow_nan=False)


def check_rules(
    t: EffectiveTimeouts,
    bounds: BrokerBounds,
    protocol: str,
    restarts: tuple[float, ...],
    batch: float | None,
) -> None:
    assert bounds.min_session_ms <= t.session_timeout_ms <= bounds.max_session_ms
    assert t.heartbeat_interval_ms >= 1 and t.heartbeat_interval_ms * 3 <= t.session_timeout_ms
    if protocol == "consumer":
        assert bounds.min_heartbeat_ms is not None and bounds.max_heartbeat_ms is not None
        assert bounds.min_heartbeat_ms <= t.heartbeat_interval_ms <= bounds.max_heartbeat_ms
    assert t.max_poll_interval_ms >= t.session_timeout_ms
    assert t.max_poll_interval_ms >= 300000
    if batch is not None:
        assert t.max_poll_interval_ms >= min(86400000, int(batch * 2000) + 5000)
    if restarts:
        need = needed_session_timeout_ms(max(restarts))
        assert t.restart_safe == (need <= t.session_timeout_ms)
        cap = 120000 if protocol == "classic" else bounds.max_session_ms
        if need <= min(bounds.max_session_ms, cap):
            assert t.restart_safe


@settings(max_examples=100, deadline=None)
@given(bounds=bounds_st, restarts=restarts_st, batch=batch_st)
def test_automatic_values_always_keep_the_rules_classic(
    bounds: BrokerBounds, restarts: tuple[float, ...], batch: float | None
) -> None:
    t = compute(restarts=restarts, batch=batch, bounds=bounds)
    check_rules(t, bounds, "classic", restarts, batch)


@settings(max_examples=100, deadline=None)
@given(bounds=kip848_st, restarts=restarts_st, batch=batch_st)
def test_automatic_values_keep_the_rules_or_refuse_kip848(
    bounds: BrokerBounds, restarts: tuple[float, ...], batch: float | None
) -> None:
    try:
        t = compute(restarts=restarts, batch=batch, bounds=bounds, protocol="consumer")
    except TimeoutRuleError as err:
        # Only when the broker's heartbeat minimum cannot fit a third of any session it allows.
        assert err.rule == "H1"
        assert bounds.min_heartbeat_ms is not None
        assert bounds.min_heartbeat_ms * 3 > bounds.max_session_ms or "minimum" in err.message
        return
    check_rules(t, bounds, "consumer", restarts, batch)


@settings(max_examples=100, deadline=None)
@given(
    bounds=bounds_st,
    first=restarts_st,
    second=restarts_st,
    gap_s=st.floats(0, 3600, allow_nan=False),
)
def test_hysteresis_never_goes_below_the_need_and_raises_at_once(
    bounds: BrokerBounds, first: tuple[float, ...], second: tuple[float, ...], gap_s: float
) -> None:
    before = compute(restarts=first, bounds=bounds)
    after = compute(restarts=second, bounds=bounds, current=before, now_offset_s=gap_s)
    check_rules(after, bounds, "classic", second, None)
    fresh = compute(restarts=second, bounds=bounds)
    # Never below what a fresh computation needs; never above the larger of the two.
    assert after.session_timeout_ms >= fresh.session_timeout_ms
    assert after.session_timeout_ms <= max(before.session_timeout_ms, fresh.session_timeout_ms)


@settings(max_examples=100, deadline=None)
@given(
    session=st.integers(6000, 1_800_000),
    heartbeat=st.integers(1, 600_000),
    max_poll=st.integers(1, 86_400_000),
)
def test_explicit_values_are_kept_or_refused(session: int, heartbeat: int, max_poll: int) -> None:
    explicit = TimeoutsSpec(session, heartbeat, max_poll)
    try:
        t = compute(explicit=explicit)
    except TimeoutRuleError:
        assert heartbeat * 3 > session or max_poll < session
        return
    assert (t.session_timeout_ms, t.heartbeat_interval_ms, t.max_poll_interval_ms) == (
        session,
        heartbeat,
        max_poll,
    )


@pytest.mark.parametrize(("restarts", "cold_start", "need"), [
    ((), None, None),
    ((), 10.0, 12000),
    ((10.0,), 3.0, 17000),
    ((4.0,), 30.0, 32000),
], ids=["nothing measured", "a start alone: a bound, no margin", "the restart's margin wins",
        "a start longer than the restarts"])
def test_restarts_need_at_least_the_slowest_start(restarts: tuple[float, ...],
                                                   cold_start: float | None,
                                                   need: int | None) -> None:
    m = Measurements(restart_seconds=restarts, cold_start_s=cold_start)
    assert restart_need_ms(m) == need


def test_an_explicit_timeout_shorter_than_a_member_start_is_not_restart_safe() -> None:
    effective = compute_timeouts(
        protocol="classic", explicit=TimeoutsSpec(session_timeout_ms=6000,
                                                  heartbeat_interval_ms=2000),
        measurements=Measurements(cold_start_s=10.0), bounds=CLASSIC, current=None, now=NOW)
    assert not effective.restart_safe and effective.needed_session_timeout_ms == 12000
    assert any("slowest member start 10.0 s" in r for r in effective.reasons)
