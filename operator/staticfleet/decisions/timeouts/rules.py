"""The one place that chooses the three client timeouts (pure; time is an argument):
`compute_timeouts`, from the spec, the measurements and the broker's bounds, one rule after the
other (`_session`, `_heartbeat`, `_max_poll`); `riding` holds a new choice back until the next
rollout. What it chooses, with its status and client forms, is `effective`; what it chooses
from (the broker's bounds, the measurements, the policy's constants) is `inputs`.

Static membership (KIP-345) keeps a stopped member, and its partitions, for `session.timeout.ms`.
A restart therefore causes no rebalance exactly when the member is back before its session expires,
so the session timeout must exceed the slowest restart. `max.poll.interval.ms` must exceed the
slowest batch, or the member is thrown out while processing. `heartbeat.interval.ms` must leave room
for a couple of lost heartbeats inside a session.

Rules (each explicit value is checked against them; automatic values always satisfy them):

* S1 session within the broker bounds (classic: group.min/max.session.timeout.ms; protocol consumer:
  group.consumer.min/max.session.timeout.ms).
* S2 automatic session >= slowest measured restart x margin + 2 s (margin: autoTuning
  restartMarginPercent, default 150 %). The automatic value is capped by autoTuning
  maxSessionTimeoutMs (default 120 000 ms for classic groups, so a pathological restart cannot
  make a crash go unnoticed for half an hour; the broker's maximum for KIP-848 groups) and by the
  broker maximum. A restart that needs more than the cap is not a new timeout: `restart_safe` is
  False and the roller refuses to start.
* S3 KIP-848 groups that widen for rollouts (`widen_cap_ms`, spec.rollout.widenSessionTimeout:
  `widening`): the automatic session covers only what any restart takes, a member's cold start
  + 2 s (a crash or an eviction outside a rollout must still fit), not the rollouts' restarts
  with their margin: a rollout raises the group's session timeout to what they need while it
  runs. Restarts are safe when that need fits the widening's cap.
* H1 heartbeat x 3 <= session; for protocol consumer also within
  group.consumer.min/max.heartbeat.interval.ms.
* P1 max.poll.interval >= session.
* P2 automatic max.poll.interval >= slowest measured batch x 200 % + 5 s. The member keeps calling
  poll with its partitions paused while a batch runs, so no batch holds the poll loop; what must
  fit is on_revoke, which waits for the batch in flight to finish and commit.

Automatic values rise in coarse steps (x1.5, rounded up to 15 s: 45 s, 75 s, 120 s, 180 s, ...;
`step_up`), so each new slowest restart or batch does not make a new value.

Defaults when nothing is measured: session 45000 ms (Kafka's client default since 3.0, KIP-735,
chosen to ride out cloud network stalls; the automatic session never goes below it), heartbeat
3000 ms (Kafka's default; or session/3 if smaller), max.poll.interval 300000 ms (Kafka's default).

Hysteresis (`hysteresis`): an automatic value rises at once when the need exceeds it, and is
lowered only after the need stayed well below it for a while.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime

from staticfleet.decisions.spec.model import Protocol, TimeoutsSpec
from staticfleet.decisions.timeouts import hysteresis
from staticfleet.decisions.timeouts.effective import (
    HEARTBEAT,
    MAX_POLL,
    SESSION,
    EffectiveTimeouts,
    Source,
)
from staticfleet.decisions.timeouts.inputs import (
    DEFAULT_POLICY,
    BrokerBounds,
    Measurements,
    TimeoutPolicy,
)

# librdkafka's own limits on these properties.
CLIENT_MAX_SESSION_MS = 3600000
CLIENT_MAX_POLL_MS = 86400000
DEFAULT_CLASSIC_SESSION_CAP_MS = 120000


class TimeoutRuleError(ValueError):
    """Explicit timeouts (or broker bounds) that break a rule; `rule` is its id (S1, H1, P1...)."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule
        self.message = message


def step_up(need: int, floor: int, policy: TimeoutPolicy = DEFAULT_POLICY) -> int:
    """The smallest value of the ladder floor, floor x 1.5, ... (each rounded up to 15 s) that
    covers `need`: an automatic value rises in coarse steps with headroom, so a slightly slower
    restart or batch next time needs no new value."""
    value = floor
    while value < need:
        value = math.ceil(value * policy.step_ratio / policy.step_round_ms) * policy.step_round_ms
    return value



def riding(recommended: EffectiveTimeouts, in_force: EffectiveTimeouts,
           protocol: Protocol) -> EffectiveTimeouts:
    """The timeouts while `recommended` waits for the next rollout: a timeout change is never a
    rollout of its own (each one restarted every member, and fresh processes reporting no slow
    batch made it fall back and rise again). Values in the members' config stay as they are; a
    KIP-848 group's session and heartbeat are broker-side group configs and follow at once."""
    broker_side = (SESSION, HEARTBEAT) if protocol == "consumer" else ()
    values = {n: recommended.value(n) if n in broker_side else in_force.value(n)
              for n in (SESSION, HEARTBEAT, MAX_POLL)}
    pending = {n: recommended.value(n) for n in values if recommended.value(n) != values[n]}
    notes = tuple(f"{n}: {recommended.value(n)} ms pending, it rides with the next rollout "
                  f"(a spec change or spec.rollout.restartNonce); {values[n]} ms until then"
                  for n in pending)
    return replace(
        recommended, session_timeout_ms=values[SESSION], heartbeat_interval_ms=values[HEARTBEAT],
        max_poll_interval_ms=values[MAX_POLL],
        sources={n: (recommended.sources.get(n, "default") if n in broker_side or n not in pending
                     else in_force.sources.get(n, "default")) for n in values},
        reasons=recommended.reasons + notes,
        pending=pending)


def needed_session_timeout_ms(
    restart_s: float, margin_percent: int = 150, slack_ms: int = DEFAULT_POLICY.restart_slack_ms
) -> int:
    """Session timeout a restart of `restart_s` seconds needs: restart x margin% + slack."""
    return math.ceil(restart_s * margin_percent * 10) + slack_ms


def restart_need_ms(measurements: Measurements, margin_percent: int = 150,
                    policy: TimeoutPolicy = DEFAULT_POLICY) -> int | None:
    """The session timeout restarts need: the slowest measured restart x margin + slack, and
    never less than the slowest cold start + slack (a restart is at least a start)."""
    needs = []
    if measurements.slowest_restart_s is not None:
        needs.append(needed_session_timeout_ms(
            measurements.slowest_restart_s, margin_percent, policy.restart_slack_ms))
    if measurements.cold_start_s is not None:
        needs.append(math.ceil(measurements.cold_start_s * 1000) + policy.restart_slack_ms)
    return max(needs) if needs else None


def cold_need_ms(measurements: Measurements,
                 policy: TimeoutPolicy = DEFAULT_POLICY) -> int | None:
    """The session timeout any restart needs, planned or not: the slowest member start + slack
    (S3: what the automatic session covers when rollouts widen it for their own restarts)."""
    if measurements.cold_start_s is None:
        return None
    return math.ceil(measurements.cold_start_s * 1000) + policy.restart_slack_ms


def needed_max_poll_interval_ms(batch_s: float, policy: TimeoutPolicy = DEFAULT_POLICY) -> int:
    """max.poll.interval.ms a batch of `batch_s` seconds needs: batch x 200% + 5 s."""
    return math.ceil(batch_s * policy.batch_margin_percent * 10) + policy.batch_slack_ms


def compute_timeouts(
    *,
    protocol: Protocol,
    explicit: TimeoutsSpec,
    measurements: Measurements,
    bounds: BrokerBounds,
    current: EffectiveTimeouts | None,
    now: datetime,
    margin_percent: int = 150,
    auto_tuning: bool = True,
    policy: TimeoutPolicy = DEFAULT_POLICY,
    max_auto_session_ms: int | None = None,
    widen_cap_ms: int | None = None,
) -> EffectiveTimeouts:
    """Choose the effective timeouts. Raises `TimeoutRuleError` for explicit values (or broker
    bounds) that break a rule; automatic values always satisfy every rule.

    `max_auto_session_ms`: the cap of the automatic session timeout (None: the classic default
    cap for classic, none beyond the broker's for consumer).

    `current` is the previous result (from `EffectiveTimeouts.from_status`), for hysteresis.

    `widen_cap_ms`: the highest value a rollout may widen the session timeout to (S3; None: the
    group does not widen).

    The rules run in order, each over the one before: the session timeout (S1, S2), then the
    heartbeat inside it (H1), then max.poll.interval above it (P1, P2).
    """
    if bounds.min_session_ms > bounds.max_session_ms:
        raise TimeoutRuleError(
            "S1",
            f"broker session bounds are empty: min {bounds.min_session_ms} ms > "
            f"max {bounds.max_session_ms} ms",
        )
    ask = _Ask(
        protocol=protocol, explicit=explicit, measurements=measurements, bounds=bounds,
        current=current, now=now, margin_percent=margin_percent, auto_tuning=auto_tuning,
        policy=policy, max_auto_session_ms=max_auto_session_ms,
        max_session=min(bounds.max_session_ms, CLIENT_MAX_SESSION_MS),
        restart_need=restart_need_ms(measurements, margin_percent, policy),
        cold_need=cold_need_ms(measurements, policy), widen_cap=widen_cap_ms,
        batch_need=(needed_max_poll_interval_ms(measurements.slowest_batch_s, policy)
                    if measurements.slowest_batch_s is not None else None),
    )
    session = _session(ask)
    chosen = {SESSION: session, HEARTBEAT: _heartbeat(ask, session.value),
              MAX_POLL: _max_poll(ask, session.value)}
    return EffectiveTimeouts(
        session_timeout_ms=session.value,
        heartbeat_interval_ms=chosen[HEARTBEAT].value,
        max_poll_interval_ms=chosen[MAX_POLL].value,
        sources={name: c.source for name, c in chosen.items()},
        reasons=tuple(reason for c in chosen.values() for reason in c.reasons),
        restart_safe=ask.restart_need is None or ask.restart_need <= ask.room(session.value),
        needed_session_timeout_ms=ask.restart_need,
        lower_candidate_since={name: c.lower_since for name, c in chosen.items()
                               if c.lower_since is not None},
    )


@dataclass(frozen=True)
class _Ask:
    """What the rules read: `compute_timeouts`' arguments, the highest session timeout the
    broker and the client take, and what the measured restarts and batches need."""

    protocol: Protocol
    explicit: TimeoutsSpec
    measurements: Measurements
    bounds: BrokerBounds
    current: EffectiveTimeouts | None
    now: datetime
    margin_percent: int
    auto_tuning: bool
    policy: TimeoutPolicy
    max_auto_session_ms: int | None
    max_session: int
    restart_need: int | None
    batch_need: int | None
    cold_need: int | None = None
    widen_cap: int | None = None
    """S3: the cap of a rollout's widened session timeout (None: the group does not widen)."""

    def room(self, session: int) -> int:
        """The longest restart a rollout may take without a rebalance: the session timeout, or
        what a rollout may widen it to."""
        return session if self.widen_cap is None else max(session, self.widen_cap)


@dataclass(frozen=True)
class _Chosen:
    """One timeout as a rule chose it: its value, where it came from and why, and since when a
    lower value has been called for (the hysteresis's candidate)."""

    value: int
    source: Source
    reasons: tuple[str, ...]
    lower_since: datetime | None = None


def _session(ask: _Ask) -> _Chosen:
    """S1, S2: the explicit session timeout inside the broker bounds, or the automatic one
    (the default, raised in steps to what the slowest restart needs, up to the cap)."""
    explicit, bounds, policy = ask.explicit, ask.bounds, ask.policy
    max_session, restart_need = ask.max_session, ask.restart_need
    if explicit.session_timeout_ms is not None:
        session = explicit.session_timeout_ms
        if not bounds.min_session_ms <= session <= max_session:
            raise TimeoutRuleError(
                "S1",
                f"sessionTimeoutMs {session} is outside the broker bounds "
                f"[{bounds.min_session_ms}, {max_session}] ms",
            )
        reasons = [f"{SESSION}={session} (explicit): set in spec.membership.timeouts"]
        if ask.widen_cap is not None:
            reasons.append(_widened_note(ask, session))
        elif restart_need is not None and restart_need > session:
            reasons.append(
                f"{SESSION}: restarts need {restart_need} ms (slowest restart "
                f"{_seconds(ask.measurements.slowest_restart_s)}, slowest member start "
                f"{_seconds(ask.measurements.cold_start_s)}); the explicit {session} ms is too "
                "short for safe restarts"
            )
        return _Chosen(session, "explicit", tuple(reasons))
    hb_explicit = explicit.heartbeat_interval_ms
    mp_explicit = explicit.max_poll_interval_ms
    default = _clamp(policy.default_session_ms, bounds.min_session_ms, max_session)
    lower = default if hb_explicit is None else max(default, 3 * hb_explicit)
    upper = max_session if mp_explicit is None else min(max_session, mp_explicit)
    if lower > upper:
        raise TimeoutRuleError(
            "H1/P1",
            f"no session timeout fits: it must be at least {lower} ms (3 x heartbeat "
            f"{hb_explicit} ms, broker minimum {bounds.min_session_ms} ms) and at most "
            f"{upper} ms (broker maximum {max_session} ms, maxPollIntervalMs {mp_explicit})",
        )
    cap = ask.max_auto_session_ms
    if cap is None and ask.protocol == "classic":
        cap = DEFAULT_CLASSIC_SESSION_CAP_MS
    if cap is not None:
        upper = max(lower, min(upper, cap))
    target = lower
    need = ask.cold_need if ask.widen_cap is not None else restart_need
    if ask.auto_tuning and need is not None and need > lower:
        target = min(step_up(need, lower, policy), upper)
    session, since, note = hysteresis.settle(SESSION, target, ask.current, ask.now, policy)
    session = _clamp(session, lower, upper)
    source: Source = "default" if session == lower and lower == default else "auto"
    measured = (ask.measurements if ask.widen_cap is None
                else replace(ask.measurements, restart_seconds=()))
    reasons = [_session_reason(session, source, measured, need, ask.margin_percent, policy,
                               ask.auto_tuning) + note]
    if ask.widen_cap is not None:
        reasons.append(_widened_note(ask, session))
    elif restart_need is not None and restart_need > upper:
        reasons.append(
            f"{SESSION}: the slowest restart needs {restart_need} ms but at most {upper} ms is "
            "allowed (spec.membership.autoTuning.maxSessionTimeoutMs, the broker group max "
            "session timeout or maxPollIntervalMs): restarts cannot be made safe; a restart "
            "that slow is a problem to look at, not a timeout to grow"
        )
    return _Chosen(session, source, tuple(reasons), since)


def _widened_note(ask: _Ask, session: int) -> str:
    """S3: what the rollouts widen the session timeout to."""
    need, cap = ask.restart_need, ask.widen_cap
    assert cap is not None
    if need is None or need <= session:
        return (f"{SESSION}: rollouts widen it when their measured restarts need more "
                "(spec.rollout.widenSessionTimeout); they need no more now")
    if need <= cap:
        return (f"{SESSION}: each rollout widens it to {need} ms while it runs (what its "
                "restarts need, spec.rollout.widenSessionTimeout); dead members are detected at "
                f"{session} ms the rest of the time")
    return (f"{SESSION}: the slowest restart needs {need} ms, more than a rollout may widen it "
            f"to ({cap} ms: the broker's group.consumer.max.session.timeout.ms or "
            "autoTuning.maxSessionTimeoutMs): restarts cannot be made safe; a restart that "
            "slow is a problem to look at, not a timeout to grow")


def _heartbeat(ask: _Ask, session: int) -> _Chosen:
    """H1: the heartbeat at most a third of the session timeout (and, for protocol consumer,
    inside the broker's bounds): the explicit one checked, or the default."""
    policy = ask.policy
    hb_min, hb_max = ask.bounds.min_heartbeat_ms, ask.bounds.max_heartbeat_ms
    if ask.protocol == "classic":
        hb_min = hb_max = None
    if ask.explicit.heartbeat_interval_ms is not None:
        heartbeat = ask.explicit.heartbeat_interval_ms
        if heartbeat * 3 > session:
            raise TimeoutRuleError(
                "H1",
                f"heartbeatIntervalMs {heartbeat} x 3 = {heartbeat * 3} exceeds the session "
                f"timeout {session} ms",
            )
        if (hb_min is not None and heartbeat < hb_min) or (
            hb_max is not None and heartbeat > hb_max
        ):
            raise TimeoutRuleError(
                "H1",
                f"heartbeatIntervalMs {heartbeat} is outside the broker bounds "
                f"[{hb_min}, {hb_max}] ms",
            )
        return _Chosen(heartbeat, "explicit", (
            f"{HEARTBEAT}={heartbeat} (explicit): set in spec.membership.timeouts",))
    heartbeat = min(policy.default_heartbeat_ms, session // 3)
    if hb_max is not None:
        heartbeat = min(heartbeat, hb_max)
    if hb_min is not None:
        heartbeat = max(heartbeat, hb_min)
    if heartbeat * 3 > session or heartbeat < 1:
        raise TimeoutRuleError(
            "H1",
            f"the broker's minimum heartbeat interval {hb_min} ms x 3 exceeds the session "
            f"timeout {session} ms",
        )
    source: Source = "default" if heartbeat == policy.default_heartbeat_ms else "auto"
    return _Chosen(heartbeat, source, (
        f"{HEARTBEAT}={heartbeat} ({source}): "
        f"{policy.default_heartbeat_ms} ms (members hear of a rebalance at their next "
        "heartbeat), at most a third of the session timeout"
        + ("" if hb_min is None else f", inside the broker bounds [{hb_min}, {hb_max}] ms"),))


def _max_poll(ask: _Ask, session: int) -> _Chosen:
    """P1, P2: max.poll.interval at least the session timeout: the explicit one checked (and
    warned about when the slowest batch needs more), or the automatic one (the default,
    raised in steps to what the slowest batch needs)."""
    policy, batch_need, slowest = ask.policy, ask.batch_need, ask.measurements.slowest_batch_s
    if ask.explicit.max_poll_interval_ms is not None:
        max_poll = ask.explicit.max_poll_interval_ms
        if max_poll < session:
            raise TimeoutRuleError(
                "P1", f"maxPollIntervalMs {max_poll} is below the session timeout {session} ms"
            )
        reasons = [f"{MAX_POLL}={max_poll} (explicit): set in spec.membership.timeouts"]
        if batch_need is not None and batch_need > max_poll:
            reasons.append(
                f"{MAX_POLL}: the slowest batch ({slowest:.1f} s) would "
                f"need {batch_need} ms; members may be thrown out while processing"
            )
        return _Chosen(max_poll, "explicit", tuple(reasons))
    lower = max(policy.default_max_poll_ms, session)
    target = lower
    if ask.auto_tuning and batch_need is not None and batch_need > lower:
        target = min(step_up(batch_need, lower, policy), CLIENT_MAX_POLL_MS)
    max_poll, since, note = hysteresis.settle(MAX_POLL, target, ask.current, ask.now, policy)
    max_poll = _clamp(max_poll, lower, CLIENT_MAX_POLL_MS)
    source: Source = "default" if max_poll == policy.default_max_poll_ms else "auto"
    if batch_need is not None and ask.auto_tuning:
        why = (
            f"the slowest batch {slowest:.1f} s x "
            f"{policy.batch_margin_percent}% + {policy.batch_slack_ms} ms needs {batch_need} ms"
        )
    else:
        why = "no batch measured" if batch_need is None else "auto-tuning disabled"
    return _Chosen(max_poll, source, (
        f"{MAX_POLL}={max_poll} ({source}): what must fit is the wait in "
        "on_revoke, where a member finishes its batch in flight before it gives up its "
        "partitions (the poll loop itself keeps polling, partitions paused, while a batch "
        f"runs); {why}; at least {policy.default_max_poll_ms} ms and the session timeout, "
        "raised in steps of x1.5" + note,), since)


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


def _seconds(value: float | None) -> str:
    return "none measured" if value is None else f"{value:.1f} s"


def _session_reason(
    session: int,
    source: Source,
    measurements: Measurements,
    restart_need: int | None,
    margin_percent: int,
    policy: TimeoutPolicy,
    auto_tuning: bool,
) -> str:
    head = f"{SESSION}={session} ({source}): "
    if restart_need is None:
        return head + (
            f"no restart measured yet; Kafka's default {policy.default_session_ms} ms (KIP-735) "
            "inside the broker bounds"
        )
    parts = []
    if measurements.slowest_restart_s is not None:
        parts.append(f"the slowest restart {measurements.slowest_restart_s:.1f} s x "
                     f"{margin_percent}% + {policy.restart_slack_ms} ms")
    if measurements.cold_start_s is not None:
        parts.append(f"the slowest member start {measurements.cold_start_s:.1f} s (container "
                     f"start to first assignment; a restart is at least that) + "
                     f"{policy.restart_slack_ms} ms")
    need = f"{' and '.join(parts)} need(s) {restart_need} ms"
    if not auto_tuning:
        return head + f"auto-tuning disabled; {need}"
    return head + f"{need}; never below {policy.default_session_ms} ms"
