"""What the timeout rules (`rules`) choose from: the broker's bounds (`BrokerBounds`), what was
measured of the members (`Measurements`, made from the status by `measurements`) and the rules'
constants (`TimeoutPolicy`). Plain values, no rule in them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from staticfleet.decisions.spec.model import Protocol


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
        """Bounds for `protocol` from broker config values (as `observe.kafkareads.broker_bounds`
        returns); a missing key falls back to Kafka's default."""
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
    """The constants of the rules (`rules`), in one place (tests may use a faster policy)."""

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
