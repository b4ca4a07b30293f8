"""A member's `/status` as the decisions read it: `MemberReport`, one frozen value per answer,
made once by `staticfleet.observe.memberhttp.parse_status` from the document the contract
types (`member_contract.status.MemberStatus`), and read by attribute: a key renamed on the
member's side fails mypy in the parser, never reads as None in a decision.

Each attribute is its key's name in snake case (`lastBatchAt` -> `last_batch_at`, the parts'
keys likewise), so `tests/unit/test_member_status.py` can hold the report to the contract one
key for one attribute.

A member image older than the operator may lack a key; the parser reads a missing key as
what the decisions have always taken its absence to mean, by the value's kind:

* a figure (unix seconds, seconds, a ratio, a generation) or a part that may be null: None,
  "not said" (`processStart`, `batchSecondsMax` and `lastPollAgeSeconds` too, which a member
  always sends: an absent moment is not 1970);
* a count: 0; a flag: False; a text: "" (`instanceId`, `standby`: None, as the member says
  them); a list: empty;
* `startupSeconds`: a part with every figure None.

`missing` names every key the answer lacked (dotted for a part's key: "startupSeconds.
firstBatch"), so a test can tell a default from a figure the member gave.
"""

from __future__ import annotations

from dataclasses import dataclass

TP = tuple[str, int]


@dataclass(frozen=True)
class StartupReport:
    """Seconds from the process's start to each step of its start (None: not yet)."""

    first_assignment: float | None = None
    first_batch: float | None = None
    consumer_made: float | None = None
    standby_ready: float | None = None
    activated: float | None = None
    instance_release_wait: float | None = None


@dataclass(frozen=True)
class BatchReport:
    """The batch the worker is processing now (`batchInFlight`)."""

    started_at: float | None = None
    records: int = 0


@dataclass(frozen=True)
class WaitReport:
    """Why the member is not in the group yet although it keeps trying (`waiting`)."""

    reason: str = ""
    message: str = ""
    since_seconds: float | None = None
    attempts: int = 0


@dataclass(frozen=True)
class LeaveReport:
    """A KIP-848 member's static leave as it confirmed it (`staticLeave`, in `/status` and in
    the drain's answer)."""

    outcome: str = ""
    tries: int = 0
    ms: float | None = None
    detail: str | None = None


@dataclass(frozen=True)
class ThroughputReport:
    """Records per second and the worker's busy share over the last window (`throughput`)."""

    records_per_second: float | None = None
    busy_ratio: float | None = None
    window_seconds: float | None = None
    capacity_records_per_second: float | None = None


@dataclass(frozen=True)
class MemberReport:
    """One answer of a member's `/status` (docs/contracts.md, "Member HTTP endpoints")."""

    instance_id: str | None = None
    member_id: str = ""
    group_id: str = ""
    assignment: tuple[TP, ...] = ()
    lag: tuple[tuple[str, int, int], ...] = ()
    committed: tuple[tuple[str, int, int], ...] = ()
    last_fetch_at: float | None = None
    last_poll_at: float | None = None
    batch_in_flight: BatchReport | None = None
    paused_with_work: bool = False
    rebalances: int = 0
    takeovers: int = 0
    assigns: int = 0
    revokes: int = 0
    lost: int = 0
    generation: int | None = None
    startup_seconds: StartupReport = StartupReport()
    last_batch_at: float | None = None
    standby: str | None = None
    process_start: float | None = None
    batch_seconds_max: float | None = None
    batch_seconds_p99: float | None = None
    records_processed: int = 0
    throughput: ThroughputReport | None = None
    batches_processed: int = 0
    dead_lettered: int = 0
    last_poll_age_seconds: float | None = None
    state: str = ""
    processing_ready: bool = False
    waiting: WaitReport | None = None
    leaving: bool = False
    rejoins: int = 0
    drained_at: float | None = None
    drain_hold_seconds: float | None = None
    drain_resubscribes: int = 0
    static_leave: LeaveReport | None = None
    missing: frozenset[str] = frozenset()
    """The keys the answer lacked (read by the rule above), dotted for a part's keys."""
