"""The roller's inputs and memory, typed: what one pass observed of the group
(`GroupObservation`, of `members.observed.ObservedMember`s), what bounds the roller
(`RolloutLimits`), and `status.rollout` (`RolloutState`, with its members in flight and their
`Handoff` figures).

`roller` (and `warm`) decide from these, `record` writes the state after a step;
`gates` holds the safety checks over them. Nothing here decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from staticfleet.decisions.conditions import parse_optional, rfc3339, rfc3339_ms
from staticfleet.decisions.members.observed import ObservedMember
from staticfleet.decisions.spec.model import RolloutSpec
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from staticfleet.decisions.timeouts.widening import Hold

Phase = Literal["Idle", "Pending", "Rolling", "Paused", "AtRisk", "Stopped", "Halted",
                "RolledBack", "Complete"]

PHASES_IN_PROGRESS = ("Rolling", "AtRisk")
"""The phases of a rollout under way: it has members to restart and restarts them."""

STABLE_STATES = frozenset({"Stable"})
STARTABLE_STATES = frozenset({"Stable", "Empty"})
AT_RISK_FRACTION = 0.8
MAX_RECHECK_S = 5.0
WARM_HANDOFF = "WarmHandoff"
ACTIVATION_GIVE_UP_S = 5.0
"""How long after the activation was sent a standby replacement may go without taking it (not
answering, or still in standby) before a cold start replaces it."""
SILENT_BEFORE_CLOSE_S = 5.0
"""An old member process silent this long before its close, counted from the later of its last
answer (a /status read or its drain's answer, each at its own time) and the start of its stop,
is taken as frozen: its absence counts from its last answer, since a frozen process sends no
heartbeat either. Time before the stop between two passes' reads is no silence, nor is a drain
that answers when it closed."""


@dataclass(frozen=True)
class Blocker:
    """A safety check that holds the rollout back (`gates`): its name and why, now."""

    name: str
    message: str

    def to_status(self) -> dict[str, str]:
        return {"name": self.name, "message": self.message}


@dataclass(frozen=True)
class GroupObservation:
    """The whole group this pass."""

    members: tuple[ObservedMember, ...]
    group_state: str
    rebalances: int = 0
    """The operator's running count of rebalances of this group (status.rebalances)."""
    closed_by_pod: Mapping[str, datetime] = field(default_factory=dict)
    """When each stopped member pod's process closed, by pod uid (as far as seen)."""
    last_batches: Mapping[str, datetime] = field(default_factory=dict)
    """When each member pod's process last finished a batch, by pod uid (as last read)."""
    replacement_names: Mapping[int, str] = field(default_factory=dict)
    """The name a warm replacement of each ordinal gets for the update revision."""
    lag: Mapping[tuple[str, int], int] | None = None
    """Each committed partition's lag as the broker sees it (None: not read this pass)."""
    lag_age_s: float | None = None
    """How old the oldest figure in `lag` is (seconds; None: unknown, as old as can be)."""
    last_seen: Mapping[str, datetime] = field(default_factory=dict)
    """When each member pod's process (by uid) last answered /status, as far as this operator
    process saw (a pass that read it)."""
    refused: Mapping[str, str] = field(default_factory=dict)
    """Replacement pods (by name) the API server refused to create, with its answer (a
    ResourceQuota, Pod Security admission, a webhook)."""
    activating: frozenset[int] = frozenset()
    """The ordinals whose standby replacement is sent POST /activate in this pass."""
    replicas: int | None = None
    """The desired member count (None: not known); an ordinal below it without a pod is
    unavailable."""
    rollback_revision: str | None = None
    """The last revision every member processed on (a completed rollout's), which a failed
    member can be handed back to; None when none is known."""
    rollback_names: Mapping[int, str] = field(default_factory=dict)
    """The name a standby of `rollback_revision` gets, per ordinal."""

    def lag_read_at(self, now: datetime) -> datetime | None:
        """When the oldest figure in `lag` was read (None: no lag, or its age is unknown)."""
        if self.lag is None or self.lag_age_s is None:
            return None
        return now - timedelta(seconds=self.lag_age_s)

    def member(self, ordinal: int) -> ObservedMember | None:
        return next((m for m in self.members if m.ordinal == ordinal), None)


HandoffPhase = Literal["Preparing", "Stopping", "Activating", "Rejoining", "Serving"]


@dataclass(frozen=True)
class InFlight:
    """A member being restarted: its old pod deleted at `stopped_at`, its process closed at
    `closed_at` (once seen), back in the group at `rejoined_at`. A warm handoff starts earlier:
    its replacement `replacement` is created at `prepared_at` and the old pod is deleted once
    the replacement is standby-ready (`stopped_at` is None until then)."""

    ordinal: int
    stopped_at: datetime | None
    rejoined_at: datetime | None = None
    pod_uid: str | None = None
    """The uid of the old pod (deleted, or to be deleted by a warm handoff)."""
    closed_at: datetime | None = None
    mode: Literal["warm", "cold"] = "cold"
    replacement: str | None = None
    prepared_at: datetime | None = None
    standby_ready_at: datetime | None = None
    old_last_batch_at: datetime | None = None
    activated_at: datetime | None = None
    """When POST /activate was first sent to the standby replacement."""
    old_last_seen_at: datetime | None = None
    """The old process's last answer to /status, as seen by a pass."""
    revision: str | None = None
    """The revision the replacement runs when it is not the update revision (a rollback)."""

    @property
    def away_since(self) -> datetime | None:
        """When the member stopped heartbeating, as far as seen: its process's close (the old
        pod's drain is not absence), or the deletion while the close is not known; None before
        the stop. A process that went silent (no /status answer) more than
        `SILENT_BEFORE_CLOSE_S` before its close, after its stop began, was frozen, and a
        frozen process heartbeats no more than it answers: its absence counts from its last
        answer."""
        if self.stopped_at is None:
            return None
        seen, closed = self.old_last_seen_at, self.closed_at
        if closed is not None and seen is not None and (
                (closed - max(seen, self.stopped_at)).total_seconds() > SILENT_BEFORE_CLOSE_S):
            return seen
        return closed or self.stopped_at

    def absence_s(self, now: datetime) -> float:
        """Close to rejoin (or to now, while it is still away); 0 before the stop."""
        since = self.away_since
        if since is None:
            return 0.0
        return max(0.0, ((self.rejoined_at or now) - since).total_seconds())

    @property
    def phase(self) -> HandoffPhase:
        if self.stopped_at is None:
            return "Preparing"
        if self.rejoined_at is not None:
            return "Serving"
        if self.closed_at is None:
            return "Stopping"
        return "Activating" if self.mode == "warm" else "Rejoining"

    @property
    def order(self) -> tuple[datetime, int]:
        return (self.stopped_at or self.prepared_at or datetime.min.replace(tzinfo=UTC),
                self.ordinal)


@dataclass(frozen=True)
class Handoff:
    """What one member's restart in this rollout cost."""

    ordinal: int
    mode: str
    absence_ms: int
    processing_gap_ms: int | None = None
    standby_ready_ms: int | None = None
    absent_from: datetime | None = None
    """When the absence began: the old process's close (its drain's answer or its clean exit's
    report, else the kubelet's exit to the second), or its last /status answer when it was
    frozen."""
    gap_from: datetime | None = None
    """When the processing gap began: the old process's last batch end."""

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ordinal": self.ordinal, "mode": self.mode,
                               "absenceMs": self.absence_ms}
        if self.processing_gap_ms is not None:
            out["processingGapMs"] = self.processing_gap_ms
        if self.standby_ready_ms is not None:
            out["standbyReadyMs"] = self.standby_ready_ms
        if self.absent_from is not None:
            out["absentFrom"] = rfc3339_ms(self.absent_from)
        if self.gap_from is not None and self.processing_gap_ms is not None:
            out["processingGapFrom"] = rfc3339_ms(self.gap_from)
        return out

    @classmethod
    def from_status(cls, raw: Mapping[str, Any]) -> Handoff:
        return cls(int(raw["ordinal"]), str(raw.get("mode") or "cold"),
                   int(raw.get("absenceMs") or 0), raw.get("processingGapMs"),
                   raw.get("standbyReadyMs"), parse_optional(raw.get("absentFrom")),
                   parse_optional(raw.get("processingGapFrom")))


@dataclass(frozen=True)
class RolloutState:
    """`status.rollout`, typed."""

    revision: str | None = None
    phase: Phase = "Idle"
    reason: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    members_restarted: tuple[int, ...] = ()
    pending: tuple[int, ...] = ()
    in_flight: tuple[InFlight, ...] = ()
    longest_absence_ms: int = 0
    rebalances_at_start: int | None = None
    rebalances_during: int | None = None
    """Fixed when the rollout finished: rebalances after it (a planned rejoin that assigns a
    topic the rollout added, say) are not the rollout's."""
    strategy: str | None = None
    handoffs: tuple[Handoff, ...] = ()
    longest_gap_ms: int | None = None
    blocked_by: tuple[Blocker, ...] = ()
    """Every safety check that holds the next member back this pass (`gates`)."""
    rolled_back_to: str | None = None
    """The revision a failed member was handed back to (`onFailure: Rollback`)."""
    rollback_pending: tuple[int, ...] = ()
    """A rollback's members still to hand back, in order (newest restart first), after the
    one in flight."""
    members_rolled_back: tuple[int, ...] = ()
    """The members a rollback handed back so far, in order."""
    failure: str | None = None
    """Why this rollout failed (the member's own error), once it did."""

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> RolloutState:
        if not status:
            return cls()
        return cls(
            revision=status.get("revision"),
            phase=status.get("phase") or "Idle",
            reason=status.get("reason") or "",
            started_at=parse_optional(status.get("startedAt")),
            finished_at=parse_optional(status.get("finishedAt")),
            members_restarted=tuple(status.get("membersRestarted") or ()),
            pending=tuple(status.get("pending") or ()),
            in_flight=tuple(
                InFlight(int(f["ordinal"]), parse_optional(f.get("stoppedAt")),
                         parse_optional(f.get("rejoinedAt")), f.get("podUid"),
                         parse_optional(f.get("closedAt")), f.get("mode") or "cold",
                         f.get("replacementPod"), parse_optional(f.get("preparedAt")),
                         parse_optional(f.get("standbyReadyAt")),
                         parse_optional(f.get("oldLastBatchAt")),
                         parse_optional(f.get("activatedAt")),
                         parse_optional(f.get("oldLastSeenAt")),
                         f.get("revision"))
                for f in status.get("inFlight") or ()
            ),
            strategy=status.get("strategy"),
            handoffs=tuple(Handoff.from_status(h) for h in status.get("handoffs") or ()),
            longest_gap_ms=status.get("longestProcessingGapMs"),
            longest_absence_ms=int(status.get("longestAbsenceMs") or 0),
            rebalances_at_start=status.get("rebalancesAtStart"),
            rebalances_during=(status.get("rebalancesDuringRollout")
                               if status.get("finishedAt") else None),
            blocked_by=tuple(Blocker(str(b.get("name")), str(b.get("message") or ""))
                             for b in status.get("blockedBy") or ()),
            rolled_back_to=status.get("rolledBackTo"),
            failure=status.get("failure"),
            rollback_pending=tuple(status.get("rollbackPending") or ()),
            members_rolled_back=tuple(status.get("membersRolledBack") or ()),
        )

    def to_status(self, rebalances_now: int) -> dict[str, Any]:
        """`status.rollout`; `rebalances_now` gives rebalancesDuringRollout."""
        first = min(self.in_flight, key=lambda f: f.order, default=None)
        status: dict[str, Any] = {
            "revision": self.revision,
            "phase": self.phase,
            "reason": self.reason,
            "membersRestarted": list(self.members_restarted),
            "pending": list(self.pending),
            "current": first.ordinal if first else None,
            "currentStoppedAt": (rfc3339(first.stopped_at) if first and first.stopped_at
                                 else None),
            "inFlight": [_in_flight_status(f) for f in self.in_flight],
            "longestAbsenceMs": self.longest_absence_ms,
            "longestProcessingGapMs": self.longest_gap_ms,
            "strategy": self.strategy,
            "handoffs": [h.to_status() for h in self.handoffs],
            "blockedBy": [b.to_status() for b in self.blocked_by],
            "rolledBackTo": self.rolled_back_to,
            "rollbackPending": list(self.rollback_pending),
            "membersRolledBack": list(self.members_rolled_back),
            "failure": self.failure,
        }
        if self.started_at is not None:
            status["startedAt"] = rfc3339(self.started_at)
        if self.finished_at is not None:
            status["finishedAt"] = rfc3339(self.finished_at)
        if self.rebalances_at_start is not None:
            status["rebalancesAtStart"] = self.rebalances_at_start
            status["rebalancesDuringRollout"] = (
                self.rebalances_during if self.rebalances_during is not None
                else max(0, rebalances_now - self.rebalances_at_start))
        return status


@dataclass(frozen=True)
class RolloutLimits:
    """What bounds the roller. `session_timeout_ms` is the session timeout the members being
    restarted joined with (the broker holds their place that long): pass the smaller of the
    running and the new effective value when they differ."""

    session_timeout_ms: int
    restart_safe: bool = True
    needed_session_ms: int | None = None
    running_session_ms: int | None = None
    """The shortest session timeout a member runs with, when below the effective one."""
    slowest_restart: str | None = None
    """Which measured restart needs the timeout (for the refusal's message)."""
    capped: bool = False
    """The needed timeout is above what the effective one may be (not only the running one)."""
    effective_session_ms: int | None = None
    max_unavailable: int = 1
    paused: bool = False
    at_risk_fraction: float = AT_RISK_FRACTION
    strategy: str = "Recreate"
    max_surge: int = 1
    standby_timeout_s: float = 600.0
    progress_deadline_s: float = 600.0
    on_failure: str = "Rollback"
    fallback: str = "Recreate"
    termination_grace_s: float = 30.0
    widening_wait: str | None = None
    """Why a stop must wait for the group's session timeout to be widened for the rollout (a
    KIP-848 group, `timeouts.widening`); None: it need not."""
    widen_cap_ms: int | None = None
    """The most a rollout may widen the session timeout to (None: the group does not widen)."""

    @classmethod
    def from_timeouts(
        cls,
        timeouts: EffectiveTimeouts,
        rollout: RolloutSpec,
        running_session_timeout_ms: int | None = None,
        slowest_restart: str | None = None,
        termination_grace_s: float = 30.0,
        widening: tuple[Hold, int] | None = None,
    ) -> RolloutLimits:
        """`widening`: a KIP-848 group that widens its session timeout for rollouts, what the
        widening lets the roller do now and its cap; then a stop is held to the widened value
        once it is in force, and restarts are safe when they fit the cap."""
        session = timeouts.session_timeout_ms
        if running_session_timeout_ms is not None:
            session = min(session, running_session_timeout_ms)
        needed = timeouts.needed_session_timeout_ms
        hold, cap = widening if widening is not None else (None, None)
        if hold is not None and hold.session_ms is not None:
            session = max(session, hold.session_ms)
        room = session if cap is None else max(session, cap)
        return cls(
            session_timeout_ms=session,
            # The broker holds a restarting member to the timeout it joined with: a restart
            # must fit that one, not only the new effective value.
            restart_safe=timeouts.restart_safe and (needed is None or needed <= room),
            widening_wait=hold.wait if hold is not None else None,
            widen_cap_ms=cap,
            running_session_ms=running_session_timeout_ms,
            slowest_restart=slowest_restart,
            capped=not timeouts.restart_safe,
            effective_session_ms=timeouts.session_timeout_ms,
            needed_session_ms=needed,
            max_unavailable=rollout.max_unavailable,
            paused=rollout.paused,
            strategy=rollout.strategy,
            max_surge=rollout.max_surge,
            standby_timeout_s=float(rollout.standby_timeout_s),
            progress_deadline_s=float(rollout.progress_deadline_s),
            on_failure=rollout.on_failure,
            fallback=rollout.fallback,
            termination_grace_s=float(termination_grace_s),
        )


def _in_flight_status(f: InFlight) -> dict[str, Any]:
    out: dict[str, Any] = {"ordinal": f.ordinal, "phase": f.phase, "mode": f.mode}
    if f.stopped_at is not None:
        out["stoppedAt"] = rfc3339(f.stopped_at)
    for key, value in (("preparedAt", f.prepared_at), ("standbyReadyAt", f.standby_ready_at),
                       ("oldLastBatchAt", f.old_last_batch_at), ("activatedAt", f.activated_at),
                       ("oldLastSeenAt", f.old_last_seen_at)):
        if value is not None:
            out[key] = rfc3339_ms(value)
    if f.replacement is not None:
        out["replacementPod"] = f.replacement
    if f.revision is not None:
        out["revision"] = f.revision
    if f.pod_uid is not None:
        out["podUid"] = f.pod_uid
    if f.closed_at is not None:
        out["closedAt"] = rfc3339_ms(f.closed_at)
    if f.rejoined_at is not None:
        out["rejoinedAt"] = rfc3339_ms(f.rejoined_at)
    return out
