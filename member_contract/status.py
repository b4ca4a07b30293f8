"""The two documents a member answers the operator with, as types: its `/status`
(`MemberStatus`, with its parts) and its answer to `POST /drain` (`DrainAnswer`).
docs/contracts.md ("Member HTTP endpoints") says what each key means; this module only says
which keys there are and what each holds.

Both images import these types, and mypy holds every side to them: the runtime's
`consumer_runtime.metrics.Telemetry.status` and the member simulator's
`staticfleet_dev.membersim.members.Table.status` are literals of `MemberStatus`, so a key one
of them forgets, misspells or fills with the wrong type fails mypy there; the operator reads
an answer through them (`staticfleet.observe.memberhttp.parse_status`), so a key renamed or
removed here fails mypy where the operator reads it. A key added here and not read by the
operator fails `tests/unit/test_member_status.py`, which holds the operator's report to these
keys one for one.

Every key is required (`total`): the member sends them all. What an older member that lacks a
key reads as is the operator's rule, not the contract's (`parse_status`).

Unix seconds are floats to the millisecond from the member's own clock; seconds are floats. A
`[topic, partition]` pair is a tuple here (a JSON array on the wire).
"""

from __future__ import annotations

from typing import TypedDict


class StartupSeconds(TypedDict):
    """Seconds from the process's start to each step of its start (null: not yet, or never)."""

    firstAssignment: float | None
    firstBatch: float | None
    consumerMade: float | None
    standbyReady: float | None
    activated: float | None
    instanceReleaseWait: float | None


class BatchInFlight(TypedDict):
    """The batch the worker is processing now."""

    startedAt: float | None
    """Unix seconds: when it was handed to the worker."""
    records: int


class Waiting(TypedDict):
    """Why the member is not in the group yet although it keeps trying."""

    reason: str
    message: str
    sinceSeconds: float
    attempts: int


class StaticLeave(TypedDict):
    """A KIP-848 member's static leave as it confirmed it after closing its consumer."""

    outcome: str
    """One of `member_contract.LEAVE_OUTCOMES`."""
    tries: int
    ms: float
    detail: str | None


class Throughput(TypedDict):
    """Records per second and the batch worker's busy share over the last window."""

    recordsPerSecond: float
    busyRatio: float
    windowSeconds: float
    capacityRecordsPerSecond: float | None


class MemberStatus(TypedDict):
    """`GET /status`."""

    instanceId: str | None
    """The group instance id (null under dynamic membership)."""
    memberId: str
    """The member id the broker gave it ("" while it has none)."""
    groupId: str
    assignment: list[tuple[str, int]]
    lag: list[tuple[str, int, int]]
    committed: list[tuple[str, int, int]]
    lastFetchAt: float | None
    lastPollAt: float | None
    batchInFlight: BatchInFlight | None
    pausedWithWork: bool
    rebalances: int
    takeovers: int
    assigns: int
    revokes: int
    lost: int
    generation: int | None
    startupSeconds: StartupSeconds
    lastBatchAt: float | None
    standby: str | None
    """null, "warming" or "ready"."""
    processStart: float
    batchSecondsMax: float
    batchSecondsP99: float | None
    recordsProcessed: int
    throughput: Throughput | None
    batchesProcessed: int
    deadLettered: int
    lastPollAgeSeconds: float
    state: str
    """standby, starting, running, draining, drained or left."""
    processingReady: bool
    waiting: Waiting | None
    leaving: bool
    rejoins: int
    drainedAt: float | None
    drainHoldSeconds: float | None
    drainResubscribes: int
    staticLeave: StaticLeave | None


class DrainAnswer(TypedDict):
    """`POST /drain`'s answer once taken: 200 when `drained`, else 202 (still draining)."""

    accepted: str
    """Always "drain" (`member_contract.DRAIN`)."""
    drained: bool
    drainedAt: float | None
    lastBatchAt: float | None
    instanceId: str | None
    staticLeave: StaticLeave | None
    """Null while still draining, and for the classic protocol."""
