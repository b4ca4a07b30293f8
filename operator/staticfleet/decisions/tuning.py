"""The timeouts one pass puts in force (pure): `tune`.

`timeouts` holds the rules: what the three client timeouts must be, from the members'
measurements and the broker's bounds. This module applies them to one pass: it computes the
timeouts from what the members measured (`measurements.measure`); unless this pass starts a
rollout the user asked for, a new value waits for the next one (`timeouts.rules.riding`), since a
timeout change is never a rollout of its own; restarts that were not taken as samples are noted
in the reasons. What changed is told in an Event and, for a KIP-848 group, set as broker-side
group configs. `bounds_condition` says whether the broker's bounds were read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from staticfleet.decisions import builders
from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Event
from staticfleet.decisions.reasons import pod_revision
from staticfleet.decisions.rollout.state import RolloutState
from staticfleet.decisions.snapshot import Problem, Snapshot
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts import inputs, rules
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
    """When a value held above its need may be lowered (`rules.lowering_due_s`)."""


def tune(snap: Snapshot, spec: ConsumerGroupSpec,
         measured: inputs.Measurements) -> Tuned | Problem:
    """The timeouts in force after this pass; a Problem when the explicit ones break a rule."""
    previous = snap.previous
    before = EffectiveTimeouts.from_status(previous.get("timeouts"))
    try:
        effective = rules.compute_timeouts(
            protocol=spec.membership.protocol, explicit=spec.membership.timeouts,
            measurements=measured,
            bounds=inputs.BrokerBounds.from_broker_config(
                spec.membership.protocol, snap.broker_config or {}),
            current=before, now=snap.now,
            margin_percent=spec.membership.auto_tuning.restart_margin_percent,
            auto_tuning=spec.membership.auto_tuning.enabled,
            max_auto_session_ms=spec.membership.auto_tuning.max_session_timeout_ms)
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
                 rules.lowering_due_s(effective, snap.now))


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

