"""The one place that chooses the three client timeouts (pure; time is an argument).

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

Hysteresis: an automatic value rises at once when the need exceeds it. It is lowered only when the
need has stayed below 60 % of the current value for 10 minutes (`lower_candidate_since` records
since when; the caller stores it in status and passes it back), so one fast restart after a slow one
does not make the timeouts flap, and each change (which restarts members) is worth it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from staticfleet.decisions.conditions import parse_rfc3339, rfc3339
from staticfleet.decisions.model import Protocol, TimeoutsSpec

Source = Literal["explicit", "auto", "default"]

SESSION = "sessionTimeoutMs"
HEARTBEAT = "heartbeatIntervalMs"
MAX_POLL = "maxPollIntervalMs"

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


@dataclass(frozen=True)
class BrokerBounds:
    """What the broker accepts, read from its configuration by the apply layer."""

    min_session_ms: int
    max_session_ms: int
    min_heartbeat_ms: int | None = None
    """Protocol consumer only (group.consumer.min.heartbeat.interval.ms)."""
    max_heartbeat_ms: int | None = None
    """Protocol consumer only (group.consumer.max.heartbeat.interval.ms)."""

    @classmethod
    def classic_defaults(cls) -> BrokerBounds:
        """Kafka's defaults for group.min/max.session.timeout.ms."""
        return cls(min_session_ms=6000, max_session_ms=1800000)

    @classmethod
    def from_broker_config(cls, protocol: Protocol, config: Mapping[str, int]) -> BrokerBounds:
        """Bounds for `protocol` from broker config values (as `observe.broker_bounds` returns);
        a missing key falls back to Kafka's default."""
        if protocol == "classic":
            d = cls.classic_defaults()
            return cls(
                min_session_ms=config.get("group.min.session.timeout.ms", d.min_session_ms),
                max_session_ms=config.get("group.max.session.timeout.ms", d.max_session_ms),
            )
        d = cls.consumer_defaults()
        return cls(
            min_session_ms=config.get("group.consumer.min.session.timeout.ms", d.min_session_ms),
            max_session_ms=config.get("group.consumer.max.session.timeout.ms", d.max_session_ms),
            min_heartbeat_ms=config.get(
                "group.consumer.min.heartbeat.interval.ms", d.min_heartbeat_ms
            ),
            max_heartbeat_ms=config.get(
                "group.consumer.max.heartbeat.interval.ms", d.max_heartbeat_ms
            ),
        )

    @classmethod
    def consumer_defaults(cls) -> BrokerBounds:
        """Kafka's defaults for the group.consumer.* session and heartbeat bounds (KIP-848)."""
        return cls(
            min_session_ms=45000,
            max_session_ms=60000,
            min_heartbeat_ms=5000,
            max_heartbeat_ms=15000,
        )


@dataclass(frozen=True)
class Measurements:
    """What was measured. Restarts: old process stopped -> new one back in the group, seconds."""

    restart_seconds: tuple[float, ...] = ()
    batch_seconds_max: float | None = None
    batch_seconds_p99: float | None = None
    cold_start_s: float | None = None
    """The slowest member start (its container's start to its first assignment) among members
    that never restarted in place: a restart takes at least this long, so it is a floor for the
    session timeout (without the margin: it is a bound, not a noisy sample). Not a restart
    sample: the timeout learns its margin only from restarts the roller made."""

    @property
    def slowest_restart_s(self) -> float | None:
        return max(self.restart_seconds) if self.restart_seconds else None

    @property
    def slowest_batch_s(self) -> float | None:
        known = [v for v in (self.batch_seconds_max, self.batch_seconds_p99) if v is not None]
        return max(known) if known else None


@dataclass(frozen=True)
class TimeoutPolicy:
    """The constants of the rules above, in one place (tests may use a faster policy)."""

    default_session_ms: int = 45000
    default_heartbeat_ms: int = 1000
    """Below Kafka's 3000: in a classic group the other members learn of a member's leave (a
    scale-down) at their next heartbeat, and the leaver's partitions wait that long."""
    default_max_poll_ms: int = 300000
    restart_slack_ms: int = 2000
    batch_margin_percent: int = 200
    batch_slack_ms: int = 5000
    lower_below_ratio: float = 0.6
    lower_hold_s: float = 600.0
    step_ratio: float = 1.5
    step_round_ms: int = 15000


DEFAULT_POLICY = TimeoutPolicy()


def step_up(need: int, floor: int, policy: TimeoutPolicy = DEFAULT_POLICY) -> int:
    """The smallest value of the ladder floor, floor x 1.5, ... (each rounded up to 15 s) that
    covers `need`: an automatic value rises in coarse steps with headroom, so a slightly slower
    restart or batch next time needs no new value."""
    value = floor
    while value < need:
        value = math.ceil(value * policy.step_ratio / policy.step_round_ms) * policy.step_round_ms
    return value




@dataclass(frozen=True)
class EffectiveTimeouts:
    """The timeouts the members run with, where each came from and why."""

    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    sources: Mapping[str, Source]
    reasons: tuple[str, ...] = ()
    restart_safe: bool = True
    needed_session_timeout_ms: int | None = None
    lower_candidate_since: Mapping[str, datetime] = field(default_factory=dict)
    pending: Mapping[str, int] = field(default_factory=dict)
    """Values the measurements call for that wait for the next rollout (`riding`)."""

    def value(self, name: str) -> int:
        return {
            SESSION: self.session_timeout_ms,
            HEARTBEAT: self.heartbeat_interval_ms,
            MAX_POLL: self.max_poll_interval_ms,
        }[name]

    def changed_fields(self, previous: EffectiveTimeouts | None) -> tuple[str, ...]:
        """Names (SESSION, HEARTBEAT, MAX_POLL) whose value differs from `previous`."""
        if previous is None:
            return ()
        return tuple(
            n for n in (SESSION, HEARTBEAT, MAX_POLL) if self.value(n) != previous.value(n)
        )

    def client_properties(self, protocol: Protocol) -> dict[str, int]:
        """librdkafka properties for config.json. With protocol consumer the broker owns the
        session timeout and heartbeat interval (see `group_configs`), so only max.poll is sent."""
        props = {"max.poll.interval.ms": self.max_poll_interval_ms}
        if protocol == "classic":
            props["session.timeout.ms"] = self.session_timeout_ms
            props["heartbeat.interval.ms"] = self.heartbeat_interval_ms
        return props

    def group_configs(self, protocol: Protocol) -> dict[str, str]:
        """Per-group broker configs (IncrementalAlterConfigs on the GROUP resource) for protocol
        consumer; empty for classic."""
        if protocol != "consumer":
            return {}
        return {
            "consumer.session.timeout.ms": str(self.session_timeout_ms),
            "consumer.heartbeat.interval.ms": str(self.heartbeat_interval_ms),
        }

    def to_status(self) -> dict[str, Any]:
        """The `status.timeouts` object."""
        status: dict[str, Any] = {
            SESSION: self.session_timeout_ms,
            HEARTBEAT: self.heartbeat_interval_ms,
            MAX_POLL: self.max_poll_interval_ms,
            "source": dict(self.sources),
            "reasons": list(self.reasons),
            "restartSafe": self.restart_safe,
        }
        if self.needed_session_timeout_ms is not None:
            status["neededSessionTimeoutMs"] = self.needed_session_timeout_ms
        if self.pending:
            status["pending"] = dict(self.pending)
        if self.lower_candidate_since:
            status["lowerCandidateSince"] = {
                k: rfc3339(v) for k, v in sorted(self.lower_candidate_since.items())
            }
        return status

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> EffectiveTimeouts | None:
        """Read back `status.timeouts` (the hysteresis state); None when absent or incomplete."""
        if not status or not all(
            isinstance(status.get(k), int) for k in (SESSION, HEARTBEAT, MAX_POLL)
        ):
            return None
        raw_sources = status.get("source") or {}
        sources: dict[str, Source] = {
            k: raw_sources.get(k, "default")
            for k in (SESSION, HEARTBEAT, MAX_POLL)
            if raw_sources.get(k, "default") in ("explicit", "auto", "default")
        }
        return cls(
            session_timeout_ms=status[SESSION],
            heartbeat_interval_ms=status[HEARTBEAT],
            max_poll_interval_ms=status[MAX_POLL],
            sources=sources,
            reasons=tuple(status.get("reasons") or ()),
            restart_safe=bool(status.get("restartSafe", True)),
            needed_session_timeout_ms=status.get("neededSessionTimeoutMs"),
            lower_candidate_since={
                k: parse_rfc3339(v) for k, v in (status.get("lowerCandidateSince") or {}).items()
            },
            pending=dict(status.get("pending") or {}),
        )


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


def restart_fits(
    measured_restart_s: float,
    session_timeout_ms: int,
    margin_percent: int = 150,
    slack_ms: int = DEFAULT_POLICY.restart_slack_ms,
) -> bool:
    """Whether a restart of `measured_restart_s` fits the session timeout with its margin."""
    return (
        needed_session_timeout_ms(measured_restart_s, margin_percent, slack_ms)
        <= session_timeout_ms
    )


def needed_max_poll_interval_ms(batch_s: float, policy: TimeoutPolicy = DEFAULT_POLICY) -> int:
    """max.poll.interval.ms a batch of `batch_s` seconds needs: batch x 200% + 5 s."""
    return math.ceil(batch_s * policy.batch_margin_percent * 10) + policy.batch_slack_ms


# Long: rules S1-P2 in order over one set of bounds; each section reads the one before it.
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
) -> EffectiveTimeouts:
    """Choose the effective timeouts. Raises `TimeoutRuleError` for explicit values (or broker
    bounds) that break a rule; automatic values always satisfy every rule.

    `max_auto_session_ms`: the cap of the automatic session timeout (None: the classic default
    cap for classic, none beyond the broker's for consumer).

    `current` is the previous result (from `EffectiveTimeouts.from_status`), for hysteresis.
    """
    if bounds.min_session_ms > bounds.max_session_ms:
        raise TimeoutRuleError(
            "S1",
            f"broker session bounds are empty: min {bounds.min_session_ms} ms > "
            f"max {bounds.max_session_ms} ms",
        )
    max_session = min(bounds.max_session_ms, CLIENT_MAX_SESSION_MS)
    reasons: list[str] = []
    sources: dict[str, Source] = {}
    candidates: dict[str, datetime] = {}

    restart_need = restart_need_ms(measurements, margin_percent, policy)
    batch_need = (
        needed_max_poll_interval_ms(measurements.slowest_batch_s, policy)
        if measurements.slowest_batch_s is not None
        else None
    )
    hb_explicit = explicit.heartbeat_interval_ms
    mp_explicit = explicit.max_poll_interval_ms

    # --- session ---
    if explicit.session_timeout_ms is not None:
        session = explicit.session_timeout_ms
        if not bounds.min_session_ms <= session <= max_session:
            raise TimeoutRuleError(
                "S1",
                f"sessionTimeoutMs {session} is outside the broker bounds "
                f"[{bounds.min_session_ms}, {max_session}] ms",
            )
        sources[SESSION] = "explicit"
        reasons.append(f"{SESSION}={session} (explicit): set in spec.membership.timeouts")
    else:
        lower = _clamp(policy.default_session_ms, bounds.min_session_ms, max_session)
        if hb_explicit is not None:
            lower = max(lower, 3 * hb_explicit)
        upper = max_session if mp_explicit is None else min(max_session, mp_explicit)
        if lower > upper:
            raise TimeoutRuleError(
                "H1/P1",
                f"no session timeout fits: it must be at least {lower} ms (3 x heartbeat "
                f"{hb_explicit} ms, broker minimum {bounds.min_session_ms} ms) and at most "
                f"{upper} ms (broker maximum {max_session} ms, maxPollIntervalMs {mp_explicit})",
            )
        cap = max_auto_session_ms
        if cap is None and protocol == "classic":
            cap = DEFAULT_CLASSIC_SESSION_CAP_MS
        if cap is not None:
            upper = max(lower, min(upper, cap))
        target = lower
        if auto_tuning and restart_need is not None and restart_need > lower:
            target = min(step_up(restart_need, lower, policy), upper)
        session, since, note = _hysteresis(SESSION, target, current, now, policy)
        session = _clamp(session, lower, upper)
        if since is not None:
            candidates[SESSION] = since
        sources[SESSION] = (
            "default"
            if session == lower
            and lower == _clamp(policy.default_session_ms, bounds.min_session_ms, max_session)
            else "auto"
        )
        reasons.append(
            _session_reason(
                session,
                sources[SESSION],
                measurements,
                restart_need,
                margin_percent,
                policy,
                auto_tuning,
            )
            + note
        )
        if restart_need is not None and restart_need > upper:
            reasons.append(
                f"{SESSION}: the slowest restart needs {restart_need} ms but at most {upper} ms is "
                "allowed (spec.membership.autoTuning.maxSessionTimeoutMs, the broker group max "
                "session timeout or maxPollIntervalMs): restarts cannot be made safe; a restart "
                "that slow is a problem to look at, not a timeout to grow"
            )
    restart_safe = restart_need is None or restart_need <= session
    if explicit.session_timeout_ms is not None and not restart_safe:
        reasons.append(
            f"{SESSION}: restarts need {restart_need} ms (slowest restart "
            f"{_seconds(measurements.slowest_restart_s)}, slowest member start "
            f"{_seconds(measurements.cold_start_s)}); the explicit {session} ms is too short "
            "for safe restarts"
        )

    # --- heartbeat ---
    hb_min, hb_max = bounds.min_heartbeat_ms, bounds.max_heartbeat_ms
    if protocol == "classic":
        hb_min = hb_max = None
    if hb_explicit is not None:
        heartbeat = hb_explicit
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
        sources[HEARTBEAT] = "explicit"
        reasons.append(f"{HEARTBEAT}={heartbeat} (explicit): set in spec.membership.timeouts")
    else:
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
        sources[HEARTBEAT] = "default" if heartbeat == policy.default_heartbeat_ms else "auto"
        reasons.append(
            f"{HEARTBEAT}={heartbeat} ({sources[HEARTBEAT]}): "
            f"{policy.default_heartbeat_ms} ms (members hear of a rebalance at their next "
            "heartbeat), at most a third of the session timeout"
            + ("" if hb_min is None else f", inside the broker bounds [{hb_min}, {hb_max}] ms")
        )

    # --- max.poll.interval ---
    if mp_explicit is not None:
        max_poll = mp_explicit
        if max_poll < session:
            raise TimeoutRuleError(
                "P1", f"maxPollIntervalMs {max_poll} is below the session timeout {session} ms"
            )
        sources[MAX_POLL] = "explicit"
        reasons.append(f"{MAX_POLL}={max_poll} (explicit): set in spec.membership.timeouts")
        if batch_need is not None and batch_need > max_poll:
            reasons.append(
                f"{MAX_POLL}: the slowest batch ({measurements.slowest_batch_s:.1f} s) would "
                f"need {batch_need} ms; members may be thrown out while processing"
            )
    else:
        lower = max(policy.default_max_poll_ms, session)
        target = lower
        if auto_tuning and batch_need is not None and batch_need > lower:
            target = min(step_up(batch_need, lower, policy), CLIENT_MAX_POLL_MS)
        max_poll, since, note = _hysteresis(MAX_POLL, target, current, now, policy)
        max_poll = _clamp(max_poll, lower, CLIENT_MAX_POLL_MS)
        if since is not None:
            candidates[MAX_POLL] = since
        sources[MAX_POLL] = "default" if max_poll == policy.default_max_poll_ms else "auto"
        if batch_need is not None and auto_tuning:
            why = (
                f"the slowest batch {measurements.slowest_batch_s:.1f} s x "
                f"{policy.batch_margin_percent}% + {policy.batch_slack_ms} ms needs {batch_need} ms"
            )
        else:
            why = "no batch measured" if batch_need is None else "auto-tuning disabled"
        reasons.append(
            f"{MAX_POLL}={max_poll} ({sources[MAX_POLL]}): what must fit is the wait in "
            "on_revoke, where a member finishes its batch in flight before it gives up its "
            "partitions (the poll loop itself keeps polling, partitions paused, while a batch "
            f"runs); {why}; at least {policy.default_max_poll_ms} ms and the session timeout, "
            "raised in steps of x1.5" + note
        )

    return EffectiveTimeouts(
        session_timeout_ms=session,
        heartbeat_interval_ms=heartbeat,
        max_poll_interval_ms=max_poll,
        sources=sources,
        reasons=tuple(reasons),
        restart_safe=restart_safe,
        needed_session_timeout_ms=restart_need,
        lower_candidate_since=candidates,
    )


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


def _hysteresis(
    name: str,
    target: int,
    current: EffectiveTimeouts | None,
    now: datetime,
    policy: TimeoutPolicy,
) -> tuple[int, datetime | None, str]:
    """(value, lower-candidate-since, note) for an automatic value moving toward `target`.

    Raise at once; hold a value while the target is within 60 % of it; lower only after the target
    has stayed below 60 % for `lower_hold_s`.
    """
    if current is None or current.sources.get(name) == "explicit":
        return target, None, ""
    held = current.value(name)
    if target >= held:
        return target, None, ""
    if target >= held * policy.lower_below_ratio:
        return (
            held,
            None,
            f"; kept {held} ms (the need {target} ms is not below {policy.lower_below_ratio:.0%})",
        )
    since = current.lower_candidate_since.get(name, now)
    waited = (now - since).total_seconds()
    if waited >= policy.lower_hold_s:
        return (
            target,
            None,
            f"; lowered from {held} ms after {waited:.0f} s below {policy.lower_below_ratio:.0%}",
        )
    return (
        held,
        since,
        f"; kept {held} ms: the need {target} ms is below {policy.lower_below_ratio:.0%} since "
        f"{rfc3339(since)}, lowered after {policy.lower_hold_s:.0f} s",
    )


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
