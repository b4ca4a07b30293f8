"""A KIP-848 group's session timeout widened for a rollout (`timeouts.widening`, `tuning.widen`)
as tables: the value a rollout widens to, the hold before a stop, the record after a pass (each
of its numbered steps), the rules that no longer chase the rollouts' restarts, and `decide` over
a rollout from its first pass to the restore, an operator restarted with a widened group and no
rollout, and the groups that never widen."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Plan
from staticfleet.decisions.plan import decide, without_nulls
from staticfleet.decisions.spec.fields import SpecError
from staticfleet.decisions.spec.model import ConsumerGroupSpec, TimeoutsSpec
from staticfleet.decisions.timeouts import widening as w
from staticfleet.decisions.timeouts.inputs import BrokerBounds, Measurements
from staticfleet.decisions.timeouts.rules import compute_timeouts
from tests.unit.operator.snapshots import CG, ordinal_of, settled, snapshot
from tests.unit.operator.support import NOW, with_path

pytestmark = pytest.mark.unit

SESSION = "consumer.session.timeout.ms"


def at(seconds: float) -> Any:
    return NOW + timedelta(seconds=seconds)


def record(state: w.State, value: int = 62000, **kw: Any) -> w.Widening:
    return w.Widening(state, value, 45000, at(-10), **kw)


# --- the value a rollout widens to ------------------------------------------------------------

TARGETS = [
    # (needed, tuned, cap, widened to)
    (None, 45000, 60000, None),       # nothing measured
    (40000, 45000, 60000, None),      # the tuned value covers the restarts
    (45000, 45000, 60000, None),
    (52000, 45000, 60000, 52000),     # what the restarts need
    (92000, 45000, 60000, 60000),     # at most the cap (the roller refuses the rollout)
    (92000, 45000, 45000, None),      # a cap at the tuned value widens nothing
]


@pytest.mark.parametrize(("needed", "tuned", "cap", "expected"), TARGETS)
def test_the_widened_value(needed: int | None, tuned: int, cap: int,
                           expected: int | None) -> None:
    assert w.target_ms(needed, tuned, cap) == expected


def test_the_cap_is_the_brokers_maximum_and_the_users_cap() -> None:
    bounds = BrokerBounds(min_session_ms=1000, max_session_ms=60000)
    assert w.cap_ms(bounds, None) == 60000
    assert w.cap_ms(bounds, 30000) == 30000
    assert w.cap_ms(bounds, 90000) == 60000


# --- the hold before a stop -------------------------------------------------------------------

WIDENED = record("Widened", widened_at=at(-1), stops_from=at(0.5))
HOLDS = [
    # (record, target, now offset, session held to, wait says)
    (None, None, 0, None, None),
    (None, 62000, 0, None, "raised to 62000 ms first"),
    (record("Restored", restored_at=at(-5)), 62000, 0, None, "raised to 62000 ms first"),
    (record("Raising"), 62000, 0, None, "once the next pass finds it in force"),
    (WIDENED, 62000, 0, 62000, "waiting one heartbeat interval (1000 ms)"),
    (WIDENED, 62000, 0.5, 62000, None),
    (WIDENED, 62000, 3, 62000, None),
    # The need rose during the widening: the value is chosen once per widening.
    (WIDENED, 75000, 3, 62000, None),
    # The tuned value covers the restarts now: nothing to wait for; a member away is still
    # held to the widened value.
    (WIDENED, None, 0, 62000, None),
]


@pytest.mark.parametrize(("rec", "target", "offset", "session", "said"), HOLDS)
def test_the_hold(rec: w.Widening | None, target: int | None, offset: float,
                  session: int | None, said: str | None) -> None:
    hold = w.hold(rec, target, 1000, at(offset))
    assert hold.session_ms == session
    if said is None:
        assert hold.wait is None
    else:
        assert hold.wait is not None and said in hold.wait, hold.wait


# --- the record after a pass ------------------------------------------------------------------

ROLLOUT = "the rollout to revision r2"
NEXT = [
    # (case, record, target, needed for, observed, state after, set, Event)
    ("1 nothing needs it, nothing widened", None, 62000, None, None, None, None, None),
    ("1 nothing needs it: set back", record("Widened"), 62000, None, None, "Restored", 45000,
     c.SESSION_RESTORED),
    ("1 raised, then not needed: set back", record("Raising"), 62000, None, None, "Restored",
     45000, c.SESSION_RESTORED),
    ("1 the tuned value covers it now", record("Widened"), None, ROLLOUT, None, "Restored",
     45000, c.SESSION_RESTORED),
    ("1 the broker holds a value no record explains", None, 62000, None, 62000, "Restored",
     45000, c.SESSION_RESTORED),
    ("1 the broker holds the tuned value", record("Restored"), 62000, None, 45000, "Restored",
     None, None),
    ("2 raise before the first stop", None, 62000, ROLLOUT, None, "Raising", 62000,
     c.SESSION_WIDENED),
    ("2 raise again for the next rollout", record("Restored"), 62000, ROLLOUT, None, "Raising",
     62000, c.SESSION_WIDENED),
    ("3 the broker lost it: raise again", record("Widened"), 62000, ROLLOUT, 45000, "Raising",
     62000, c.SESSION_WIDENED),
    ("4 in force from now", record("Raising"), 62000, ROLLOUT, None, "Widened", None, None),
    ("4 in force, the broker agrees", record("Raising"), 62000, ROLLOUT, 62000, "Widened",
     None, None),
    ("5 in force", record("Widened", widened_at=at(-3), stops_from=at(-1)), 62000, ROLLOUT,
     None, "Widened", None, None),
]


@pytest.mark.parametrize(("case", "rec", "target", "needed_for", "observed", "state", "set_ms",
                          "event"), NEXT, ids=[n[0] for n in NEXT])
def test_the_record_after_a_pass(case: str, rec: w.Widening | None, target: int | None,
                                 needed_for: str | None, observed: int | None,
                                 state: str | None, set_ms: int | None,
                                 event: str | None) -> None:
    change = w.next_widening(rec, target, needed_for, "the rollout to revision r2 is Complete",
                             45000, 1000, observed, NOW)
    assert (change.record.state if change.record else None) == state
    assert change.set_ms == set_ms
    assert (change.event.reason if change.event else None) == event
    if state == "Widened" and rec is not None and rec.state == "Raising":
        assert change.record is not None and change.record.widened_at == NOW
        assert change.record.stops_from == at(1.5)  # one heartbeat + 500 ms
        assert change.recheck_s == 1.5
    if event == c.SESSION_RESTORED and rec is not None:
        assert change.record is not None and change.record.restored_at == NOW
        assert change.event is not None and "62000" in change.event.message


def test_the_record_reads_back_from_the_status() -> None:
    full = record("Restored", widened_at=at(-9), stops_from=at(-8), restored_at=at(-1),
                  reason="why")
    status = full.to_status()
    assert status["state"] == "Restored" and status["sessionTimeoutMs"] == 62000
    assert status["tunedSessionTimeoutMs"] == 45000 and status["widenedAt"].endswith(".000Z")
    assert w.Widening.from_status(status) == full
    assert w.Widening.from_status(None) is None
    assert w.Widening.from_status({"state": "Sideways"}) is None


@pytest.mark.parametrize(("rec", "observed", "set_back"), [
    (None, None, None),                          # never widened: nothing left behind
    (record("Raising"), None, 45000),            # raised (or about to be): the tuned value
    (record("Widened"), None, 45000),
    (record("Restored"), 45000, None),           # restored: nothing left
    (record("Restored"), 62000, 45000),          # a restore recorded, not made
    (record("Restored"), None, None),            # the broker's value unread
], ids=["none", "raising", "widened", "restored", "restore-recorded", "unread"])
def test_what_a_deleted_group_leaves_behind(rec: w.Widening | None, observed: int | None,
                                            set_back: int | None) -> None:
    """Issue 46, item 7: a ConsumerGroup deleted mid-rollout sets its group's session
    timeout back to the tuned value (`handlers.forget`, `service.release`)."""
    assert w.left_behind(rec, observed) == set_back


# --- the rules: rollouts' restarts are the widening's, not the tuned value's ------------------

SLOW = Measurements(restart_seconds=(40.0,), cold_start_s=8.0)
BOUNDS = BrokerBounds(min_session_ms=1000, max_session_ms=120000, min_heartbeat_ms=500,
                      max_heartbeat_ms=15000)


AUTO = TimeoutsSpec()


def timeouts(explicit: TimeoutsSpec = AUTO, cap: int | None = 120000,
             measured: Measurements = SLOW) -> Any:
    return compute_timeouts(protocol="consumer", explicit=explicit, measurements=measured,
                            bounds=BOUNDS, current=None, now=NOW, widen_cap_ms=cap)


def test_a_widening_group_keeps_its_tuned_session_below_the_rollouts_need() -> None:
    widened = timeouts()
    assert widened.session_timeout_ms == 45000  # the default: a cold start of 8 s fits
    assert widened.needed_session_timeout_ms == 62000 and widened.restart_safe
    assert any("each rollout widens it to 62000 ms" in r for r in widened.reasons)
    unwidened = timeouts(cap=None)
    assert unwidened.session_timeout_ms == 75000  # the step (x1.5, to 15 s) above 62 s


def test_a_member_start_the_tuned_value_does_not_cover_still_raises_it() -> None:
    """A crash or an eviction outside a rollout must still fit: the tuned value covers a start."""
    slow_start = timeouts(measured=Measurements(restart_seconds=(40.0,), cold_start_s=50.0))
    assert slow_start.session_timeout_ms == 75000  # 52 s needed, the next step
    assert slow_start.needed_session_timeout_ms == 62000


def test_restarts_are_safe_when_they_fit_the_widenings_cap() -> None:
    capped = timeouts(cap=50000)
    assert not capped.restart_safe
    assert any("more than a rollout may widen it to (50000 ms" in r for r in capped.reasons)
    explicit = timeouts(TimeoutsSpec(session_timeout_ms=8000))
    assert explicit.session_timeout_ms == 8000 and explicit.restart_safe
    assert any("each rollout widens it to 62000 ms while it runs" in r for r in explicit.reasons)
    assert not timeouts(TimeoutsSpec(session_timeout_ms=8000), cap=None).restart_safe


# --- the spec ---------------------------------------------------------------------------------

KIP848 = with_path(CG, "spec.membership", {"protocol": "consumer"})
"""Three KIP-848 members rolled with Recreate."""


def test_on_by_default_for_kip848_off_for_classic_refused_when_asked_for_classic() -> None:
    assert ConsumerGroupSpec.from_body(KIP848).rollout.widen_session_timeout
    assert not ConsumerGroupSpec.from_body(CG).rollout.widen_session_timeout
    off = with_path(KIP848, "spec.rollout.widenSessionTimeout", False)
    assert not ConsumerGroupSpec.from_body(off).rollout.widen_session_timeout
    with pytest.raises(SpecError, match=r"protocol consumer \(KIP-848\) only"):
        ConsumerGroupSpec.from_body(with_path(CG, "spec.rollout.widenSessionTimeout", True))


# --- decide: a rollout from its first pass to the restore --------------------------------------

BROKER = {"group.consumer.max.session.timeout.ms": 120000}
MEASURED = {"restartSecondsRecent": [40.0], "restartSecondsMax": 40.0}
"""A restart of 40 s: a rollout needs 40 x 150 % + 2 s = 62000 ms, the tuned value is 45000."""


class Rollout:
    """A settled KIP-848 fleet rolled to a new image, one pass at a time."""

    def __init__(self, cg: dict[str, Any] = KIP848) -> None:
        self.pods, self.status = settled(cg)
        self.status["measurements"] = MEASURED
        self.new = with_path(cg, "spec.template.image", "staticfleet/member:0.2.0")
        self.t = 0.0

    def step(self, dt: float, cg: dict[str, Any] | None = None, **kw: Any) -> Plan:
        self.t += dt
        plan = decide(replace(snapshot(cg or self.new, self.pods, previous=self.status,
                                       broker_config=BROKER, now_offset_s=self.t), **kw))
        self.status = without_nulls(dict(plan.status))
        return plan


def blockers(plan: Plan) -> list[str]:
    return [b["name"] for b in plan.status["rollout"].get("blockedBy") or ()]


def widened(plan: Plan) -> dict[str, Any]:
    return dict(plan.status["timeouts"]["widening"])


def test_a_rollout_raises_waits_a_heartbeat_stops_and_restores() -> None:
    roll = Rollout()
    # 1: The first pass raises the group's session timeout and stops nobody.
    first = roll.step(0)
    assert first.delete == () and w.PREDICATE in blockers(first), first.status["rollout"]
    assert first.group_configs[SESSION] == "62000"
    assert first.group_configs["consumer.heartbeat.interval.ms"] == "5000"
    assert widened(first)["state"] == "Raising"
    assert first.status["timeouts"]["sessionTimeoutMs"] == 45000, "the tuned value is kept"
    assert [e.reason for e in first.events if e.reason == c.SESSION_WIDENED] == [
        c.SESSION_WIDENED]
    assert first.requeue_after_s is not None and first.requeue_after_s <= w.CONFIRM_S
    # 2: The next pass finds it in force; the first stop waits one heartbeat interval.
    second = roll.step(0.5)
    assert second.delete == () and w.PREDICATE in blockers(second)
    assert second.group_configs == {} and widened(second)["state"] == "Widened"
    assert widened(second)["stopsFrom"] == "2026-01-01T12:00:06.000Z"  # + 5000 + 500 ms
    assert second.requeue_after_s is not None and second.requeue_after_s <= 5.5
    # 3: Then the first member stops, held to the widened value.
    third = roll.step(5.5)
    assert [d.ordinal for d in third.delete] == [2]
    assert w.PREDICATE not in blockers(third) and third.group_configs == {}
    # 4: The rollout ends: the tuned value is set back.
    roll.status["rollout"] = {**roll.status["rollout"], "phase": "Complete", "inFlight": [],
                              "pending": [], "blockedBy": []}
    roll.pods, _ = settled(roll.new)
    done = roll.step(30)
    assert done.group_configs[SESSION] == "45000"
    assert widened(done)["state"] == "Restored" and widened(done)["restoredAt"]
    restored = next(e for e in done.events if e.reason == c.SESSION_RESTORED)
    assert "62000" in restored.message and "45000" in restored.message
    # 5: And stays so, nothing set again.
    assert roll.step(10).group_configs == {}


def test_a_member_away_keeps_it_widened_whatever_the_phase() -> None:
    roll = Rollout()
    for dt in (0, 0.5, 5.5):
        plan = roll.step(dt)
    assert [d.ordinal for d in plan.delete] == [2]
    roll.status["rollout"]["phase"] = "AtRisk"
    roll.pods = [p for p in roll.pods if ordinal_of(p) != 2]
    held = roll.step(10)
    assert held.group_configs == {} and widened(held)["state"] == "Widened"


def test_a_paused_rollout_with_nobody_away_restores_and_widens_again_when_resumed() -> None:
    roll = Rollout()
    roll.step(0)
    paused = with_path(roll.new, "spec.rollout.paused", True)
    plan = roll.step(0.5, cg=paused)
    assert plan.status["rollout"]["phase"] == "Paused"
    assert plan.group_configs[SESSION] == "45000" and widened(plan)["state"] == "Restored"
    again = roll.step(60)
    assert again.group_configs[SESSION] == "62000" and widened(again)["state"] == "Raising"


def test_turned_off_mid_rollout_it_is_set_back_and_nothing_waits_for_it() -> None:
    roll = Rollout()
    roll.step(0)
    roll.step(0.5)
    off = with_path(roll.new, "spec.rollout.widenSessionTimeout", False)
    plan = roll.step(0.1, cg=off)
    # Without widening the tuned value follows the restarts again (at once: a KIP-848 group's
    # session is a group config): that is the value set.
    assert plan.status["timeouts"]["sessionTimeoutMs"] == 75000
    assert plan.group_configs[SESSION] == "75000" and widened(plan)["state"] == "Restored"
    assert "widenSessionTimeout is false" in widened(plan)["reason"]
    assert w.PREDICATE not in blockers(plan)


def test_an_operator_restarted_after_the_rollout_restores_from_the_status() -> None:
    """The record is in the status: a new operator process knows the group is widened."""
    pods, status = settled(KIP848)
    status["timeouts"]["widening"] = record("Widened", widened_at=at(-60),
                                            stops_from=at(-59)).to_status()
    plan = decide(snapshot(KIP848, pods, previous=status, broker_config=BROKER))
    assert plan.group_configs[SESSION] == "45000"
    assert widened(plan)["state"] == "Restored"
    assert "no rollout is under way" in widened(plan)["reason"]


def test_a_widened_value_on_the_broker_that_no_record_explains_is_set_back() -> None:
    """An operator that died between raising it and writing the status: its successor reads
    the broker's value on its first pass."""
    pods, status = settled(KIP848)
    snap = replace(snapshot(KIP848, pods, previous=status, broker_config=BROKER),
                   group_session_ms=62000)
    plan = decide(snap)
    assert plan.group_configs[SESSION] == "45000"
    assert [e.reason for e in plan.events] == [c.SESSION_RESTORED]
    assert "the broker held 62000 ms" in plan.events[0].message
    same = replace(snapshot(KIP848, pods, previous=status, broker_config=BROKER),
                   group_session_ms=45000)
    assert decide(same).group_configs == {}


def test_restarts_beyond_the_cap_refuse_the_rollout_and_widen_nothing() -> None:
    roll = Rollout()
    roll.status["measurements"] = {"restartSecondsRecent": [100.0]}  # needs 152 s
    plan = roll.step(0)
    assert plan.delete == () and plan.group_configs == {}
    assert "widening" not in plan.status["timeouts"]
    assert blockers(plan) == ["RestartFitsSessionTimeout"]
    assert "a rollout may widen it to at most 120000 ms" in plan.status["rollout"]["reason"]


def test_a_warm_rollout_widens_while_its_standby_warms_up() -> None:
    warm = with_path(KIP848, "spec.rollout.strategy", "WarmHandoff")
    roll = Rollout(warm)
    plan = roll.step(0)
    assert [p.ordinal for p in plan.create] == [2], "the standby starts at once"
    assert plan.group_configs[SESSION] == "62000" and widened(plan)["state"] == "Raising"


def test_groups_that_do_not_widen() -> None:
    classic = Rollout(CG)
    plan = classic.step(0)
    assert "widening" not in plan.status["timeouts"] and plan.group_configs == {}
    assert w.PREDICATE not in blockers(plan)
    off = Rollout(with_path(KIP848, "spec.rollout.widenSessionTimeout", False))
    plan = off.step(0)
    assert "widening" not in plan.status["timeouts"]
    assert w.PREDICATE not in blockers(plan)
    assert plan.group_configs[SESSION] == "75000", "the tuned value covers the restarts"
