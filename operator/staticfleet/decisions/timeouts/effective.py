"""The three client timeouts the members run with (`EffectiveTimeouts`): their values, where
each came from (explicit, auto, default) and why, and their forms outside the operator: the
`status.timeouts` object (read back for hysteresis), the members' librdkafka properties and, for
KIP-848 groups, the broker's per-group configs.

`timeouts` holds the rules that choose them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from staticfleet.decisions.conditions import parse_rfc3339, rfc3339
from staticfleet.decisions.spec.model import Protocol

Source = Literal["explicit", "auto", "default"]

SESSION = "sessionTimeoutMs"
HEARTBEAT = "heartbeatIntervalMs"
MAX_POLL = "maxPollIntervalMs"


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
