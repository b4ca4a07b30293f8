"""The timeouts one pass puts in force (pure): `tune`, and for a KIP-848 group the session
timeout widened while a rollout needs it (`widening_hold` before the roller's step, `widen`
after it).

`timeouts` holds the rules: what the three client timeouts must be, from the members'
measurements and the broker's bounds. This module applies them to one pass: it computes the
timeouts from what the members measured (`measurements.measure`); unless this pass starts a
rollout the user asked for, a new value waits for the next one (`timeouts.rules.riding`), since a
timeout change is never a rollout of its own; restarts that were not taken as samples are noted
in the reasons. What changed is told in an Event and, for a KIP-848 group, set as broker-side
group configs. `bounds_condition` says whether the broker's bounds were read.

A KIP-848 group that widens (spec.rollout.widenSessionTimeout, `timeouts.widening`): the roller
holds a stop back until the widened value is in force (`widening_hold`, from the record the
previous pass left); after the roller's step, `widen` raises it for a rollout that is about to
stop members or has members away, and sets the tuned value back once none does
(`rollout_needs`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from staticfleet.decisions import builders
from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Event
from staticfleet.decisions.reasons import pod_revision
from staticfleet.decisions.rollout.state import PHASES_IN_PROGRESS, RolloutState
from staticfleet.decisions.snapshot import Problem, Snapshot
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts import hysteresis, inputs, rules, widening
from staticfleet.decisions.timeouts.effective import HEARTBEAT, MAX_POLL, SESSION, EffectiveTimeouts
from staticfleet.decisions.timeouts.measurements import timeout_notes

METRIC_NAMES = {SESSION: "session", HEARTBEAT: "heartbeat", MAX_POLL: "max_poll"}


@dataclass(frozen=True)
class Tuned:
    """The timeouts in force after this pass, and what changed of them."""

    effective: EffectiveTimeouts
    changed: tuple[str, ...]
    """The timeouts (`SESSION`, ...) that differ from those in force before."""
    group_configs: dict[str, str]
    """Broker-side group configs to set (all of them on the first pass or a change)."""
    events: tuple[Event, ...]
    deadline_s: float | None = None
    """When a value held above its need may be lowered (`hysteresis.lowering_due_s`)."""
    widen_cap_ms: int | None = None
    """A KIP-848 group that widens its session timeout for rollouts: the most it may widen to
    (None: the group does not widen)."""

    @property
    def widen_to(self) -> int | None:
        """What a rollout widens the session timeout to (None: it does not widen now)."""
        if self.widen_cap_ms is None:
            return None
        return widening.target_ms(self.effective.needed_session_timeout_ms,
                                  self.effective.session_timeout_ms, self.widen_cap_ms)


@dataclass(frozen=True)
class Widened:
    """A KIP-848 group's session timeout after this pass: the record (`status.timeouts.widening`),
    the group configs to set (the tuned ones, with the session timeout in force), its Event and
    when to look again."""

    record: widening.Widening | None
    group_configs: dict[str, str]
    events: tuple[Event, ...] = ()
    requeue_after_s: float | None = None


def tune(snap: Snapshot, spec: ConsumerGroupSpec,
         measured: inputs.Measurements) -> Tuned | Problem:
    """The timeouts in force after this pass; a Problem when the explicit ones break a rule."""
    previous = snap.previous
    before = EffectiveTimeouts.from_status(previous.get("timeouts"))
    bounds = inputs.BrokerBounds.from_broker_config(spec.membership.protocol,
                                                    snap.broker_config or {})
    cap = (widening.cap_ms(bounds, spec.membership.auto_tuning.max_session_timeout_ms)
           if widens(spec) else None)
    try:
        effective = rules.compute_timeouts(
            protocol=spec.membership.protocol, explicit=spec.membership.timeouts,
            measurements=measured, bounds=bounds, current=before, now=snap.now,
            margin_percent=spec.membership.auto_tuning.restart_margin_percent,
            auto_tuning=spec.membership.auto_tuning.enabled,
            max_auto_session_ms=spec.membership.auto_tuning.max_session_timeout_ms,
            widen_cap_ms=cap)
    except rules.TimeoutRuleError as exc:
        return Problem(c.INVALID_TIMEOUTS, str(exc))
    if before is not None and not rollout_requested(snap, spec, before):
        effective = rules.riding(effective, before, spec.membership.protocol)
    effective = replace(effective, reasons=effective.reasons + timeout_notes(previous))

    events: list[Event] = []
    changed = effective.changed_fields(before)
    if changed and before is not None:
        detail = ", ".join(f"{f} {before.value(f)} -> {effective.value(f)} ms" for f in changed)
        events.append(Event("Normal", c.TIMEOUTS_CHANGED,
                            f"{detail}: {'; '.join(effective.reasons)}"))
    configs = (effective.group_configs(spec.membership.protocol)
               if changed or before is None else {})
    return Tuned(effective, changed, configs, tuple(events),
                 hysteresis.lowering_due_s(effective, snap.now), cap)


def widens(spec: ConsumerGroupSpec) -> bool:
    """The group widens its session timeout for rollouts (KIP-848 only)."""
    return spec.membership.protocol == "consumer" and spec.rollout.widen_session_timeout


def widening_hold(snap: Snapshot, tuned: Tuned) -> tuple[widening.Hold, int] | None:
    """For the roller (`RolloutLimits.from_timeouts`): what the widening lets it do now, from
    the record the previous pass left, and its cap; None when the group does not widen."""
    if tuned.widen_cap_ms is None:
        return None
    record = widening.Widening.from_status((snap.previous.get("timeouts") or {}).get("widening"))
    return (widening.hold(record, tuned.widen_to, tuned.effective.heartbeat_interval_ms,
                          snap.now), tuned.widen_cap_ms)


def widen(snap: Snapshot, spec: ConsumerGroupSpec, tuned: Tuned,
          rollout: RolloutState) -> Widened:
    """A KIP-848 group's session timeout after the roller's step `rollout`: raised for a
    rollout that needs it, set back once none does (`widening.next_widening`), and the group
    configs to set: the tuned ones, with the session timeout in force, whenever either changes
    (or the broker, read on this process's first pass, holds another value)."""
    if spec.membership.protocol != "consumer":
        return Widened(None, tuned.group_configs)
    effective = tuned.effective
    record = widening.Widening.from_status((snap.previous.get("timeouts") or {}).get("widening"))
    needed_for, not_needed = rollout_needs(rollout, widens(spec))
    # Only a group whose configs this operator set before has a value to set right.
    observed = snap.group_session_ms if snap.previous.get("timeouts") else None
    change = widening.next_widening(
        record, tuned.widen_to, needed_for, not_needed, effective.session_timeout_ms,
        effective.heartbeat_interval_ms, observed, snap.now)
    configs = tuned.group_configs
    if configs or change.set_ms is not None:
        in_force = (change.record.session_timeout_ms
                    if change.record is not None and change.record.raised
                    else effective.session_timeout_ms)
        configs = {**effective.group_configs("consumer"),
                   "consumer.session.timeout.ms": str(in_force)}
    return Widened(change.record, configs, (change.event,) if change.event else (),
                   change.recheck_s)


def rollout_needs(rollout: RolloutState, enabled: bool) -> tuple[str | None, str]:
    """What needs the session timeout widened now (the rollout, while it is about to stop a
    member or has members in flight), or None and why nothing does."""
    if not enabled:
        return None, "spec.rollout.widenSessionTimeout is false"
    what = f"the rollout to revision {rollout.revision}"
    if rollout.in_flight:
        away = ", ".join(str(f.ordinal) for f in rollout.in_flight)
        return f"{what} (member(s) {away} in flight)", ""
    if rollout.phase in PHASES_IN_PROGRESS:
        return what, ""
    if rollout.phase != "Paused" and any(b.name == widening.PREDICATE
                                         for b in rollout.blocked_by):
        return what, ""
    if rollout.phase == "Idle":
        return None, "no rollout is under way"
    if rollout.phase == "Paused":
        return None, f"{what} is paused (spec.rollout.paused) with no member away"
    return None, f"{what} is {rollout.phase}"


def rollout_requested(snap: Snapshot, spec: ConsumerGroupSpec,
                      in_force: EffectiveTimeouts) -> bool:
    """Whether this pass starts a rollout the user asked for (so new timeouts may ride with
    it): explicit timeouts changed, or the spec (with the timeouts in force) makes a revision
    that live members do not run and that no rollout is under way to yet."""
    explicit = spec.membership.timeouts
    for name, value in ((SESSION, explicit.session_timeout_ms),
                        (HEARTBEAT, explicit.heartbeat_interval_ms),
                        (MAX_POLL, explicit.max_poll_interval_ms)):
        if value is not None and value != in_force.value(name):
            return True
    revision = builders.member_spec_view(spec, in_force).revision
    if RolloutState.from_status(snap.previous.get("rollout")).revision == revision:
        return False
    return any(pod_revision(p) != revision for p in snap.pods
               if not p["metadata"].get("deletionTimestamp"))


def bounds_condition(snap: Snapshot, spec: ConsumerGroupSpec) -> tuple[str, c.Cond]:
    if snap.bounds_denied is None:
        return c.BROKER_BOUNDS_KNOWN, ("True", c.READ_FROM_BROKER,
                                       "the group session and heartbeat bounds were read from "
                                       "the broker's configuration")
    bounds = inputs.BrokerBounds.from_broker_config(spec.membership.protocol, {})
    return c.BROKER_BOUNDS_KNOWN, (
        "False", c.DESCRIBE_CONFIGS_DENIED,
        f"{snap.bounds_denied}: the timeouts are chosen inside Kafka's default bounds (session "
        f"{bounds.min_session_ms}-{bounds.max_session_ms} ms), which this broker may not use. "
        "Allow the operator's principal DescribeConfigs on the Cluster resource, or set "
        "spec.membership.timeouts inside the broker's bounds")

