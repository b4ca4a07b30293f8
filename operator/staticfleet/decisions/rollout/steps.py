"""The roller's steps: what `roller.next_step` may decide, one frozen dataclass per kind
(`Step` is their union), the reasons a `Wait` or a `MemberFailed` names, and `Decided`: the
step with what the roller derived on the way to it.

Each step type is consumed by one row in each of two tables, both `functools.singledispatch`
functions: `record.state_after` (the rollout state after it) and `effects.effects` (the
pods and Events it means). A new step type is a class here plus one row in each.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from staticfleet.decisions.conditions import (
    WAIT_AVAILABILITY,
    WAIT_BLOCKED,
    WAIT_GROUP,
    WAIT_PAUSED,
)
from staticfleet.decisions.rollout.state import Blocker, InFlight

WAIT_REASONS = {"NotPaused": WAIT_PAUSED, "GroupStable": WAIT_GROUP,
                "EnoughAvailable": WAIT_AVAILABILITY}
"""The Wait reason of a rollout held back by a predicate (others: WAIT_BLOCKED)."""


@dataclass(frozen=True)
class Wait:
    """Nothing to do now. `recheck_after_s`: when to look again (None: on the next event/timer).
    `blocked_by`: the predicates holding the next member back, when that is why."""

    reason: str
    message: str
    recheck_after_s: float | None = None
    blocked_by: tuple[Blocker, ...] = ()


@dataclass(frozen=True)
class RestartMembers:
    """Delete these members' pods (the reconcile recreates them with the update revision)."""

    ordinals: tuple[int, ...]


@dataclass(frozen=True)
class PrepareReplacements:
    """Warm handoff: start these members' replacements in standby beside them (nothing stops)."""

    ordinals: tuple[int, ...]


@dataclass(frozen=True)
class HandOver:
    """The replacement is standby-ready and the predicates hold: switch over (drain the old
    member, activate the replacement, delete the old pod: `actions.Switchover`), or stop the old
    member and activate the replacement once the old process has closed (`delete_uid`: the old
    pod, None when it is gone already)."""

    ordinal: int
    delete_uid: str | None
    standby_ready_at: datetime | None
    resumed: bool = False
    """A switchover the status recorded and an earlier pass did not finish (`warm`)."""


@dataclass(frozen=True)
class HandoffFailed:
    """A replacement failed before it was standby-ready (or could not be made, with fallback
    Stop): delete the replacements still preparing (`ordinals`), keep the old members, stop."""

    ordinal: int
    ordinals: tuple[int, ...]
    message: str


@dataclass(frozen=True)
class RecreateInstead:
    """A standby could not be created or started (quota, admission, timeout) and `fallback` is
    Recreate: restart the old member the cold way (`delete_uid`), its replacement is created
    once it is gone."""

    ordinal: int
    delete_uid: str | None
    message: str


@dataclass(frozen=True)
class FallBackCold:
    """The old process closed but its standby replacement did not take the activation in
    time: delete the replacement; a cold one is started in its place."""

    ordinal: int
    message: str


@dataclass(frozen=True)
class MemberRejoined:
    """The member's replacement is back in the group with its partitions: its absence ended
    (`absence_s`, close to rejoin, `at`). It is not done before it has processed."""

    ordinal: int
    absence_s: float
    at: datetime | None = None


@dataclass(frozen=True)
class MarkMemberDone:
    """The member is back and processing; `absence_s` (stop to rejoin) is a restart
    measurement."""

    ordinal: int
    absence_s: float
    processing_gap_s: float | None = None


@dataclass(frozen=True)
class MemberFailed:
    """A restarted member fails on the new revision (`reason`: MEMBER_FAILING or NO_PROGRESS,
    both in `conditions`) and `message` says how, quoting its own error. `rollback`: hand it
    back to the revision the other members run (onFailure Rollback); else the rollout halts."""

    ordinal: int
    reason: str
    message: str
    rollback: bool = False


@dataclass(frozen=True)
class StopAtRisk:
    """A restart runs late (expired=False: past at_risk_fraction of the session timeout) or too
    late (expired=True: past the session timeout, the broker rebalanced). Touch no further
    member."""

    ordinal: int
    absence_s: float
    needed_session_ms: int
    message: str
    expired: bool = False


@dataclass(frozen=True)
class Complete:
    """Every member runs the update revision and is back."""


@dataclass(frozen=True)
class RefuseToStart:
    """Restarts are predicted to outlast the session timeout: do not start."""

    needed_session_ms: int
    message: str


Step = (Wait | RestartMembers | PrepareReplacements | HandOver | HandoffFailed | RecreateInstead
        | FallBackCold | MemberRejoined | MarkMemberDone | MemberFailed | StopAtRisk | Complete
        | RefuseToStart)


@dataclass(frozen=True)
class Decided:
    """What `roller.next_step` decided, with what it derived on the way that the state after
    the step records (`record.record_step`), so nothing is derived twice."""

    step: Step
    in_flight: tuple[InFlight, ...]
    """The members in flight of the rollout the step belongs to, oldest first, with what this
    pass saw of them (`roller.members_in_flight`)."""
    order: tuple[int, ...]
    """The members that still need a restart, in the order they will be restarted
    (`roller.plan_rollout`)."""


def blocked_wait(blocked: tuple[Blocker, ...], recheck: float = 2.0) -> Wait:
    """Wait, held back by the predicates `blocked` (all reported; the first names the reason)."""
    first = blocked[0]
    return Wait(WAIT_REASONS.get(first.name, WAIT_BLOCKED),
                "; ".join(f"{b.name}: {b.message}" for b in blocked), recheck, blocked)
