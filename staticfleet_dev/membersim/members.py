"""The simulated member processes (pure): one `Member` per pod, moved along by time and by the
operator's requests, and the `/status` document and answers each gives, as
`consumer_runtime` gives them (docs/contracts.md, "Member HTTP endpoints").

A member's life is a phase and the moment its next change is due (`Member.due`); `Table.advance`
carries out every change that is due. Time is always an argument (`now`, unix seconds), so the
tests move a member through its life without a clock. What a process would do between changes
(batches every `Pace.batch_every_s`, its polls) is computed from the time at each read, never
ticked: a member costs nothing between requests.

Phases, and the runtime's `/status` `state` for each:

* `standby` (`standby`): a warm handoff's replacement; `standby` says `warming` until
  `Pace.warm_s` after its start, then `ready`; `POST /activate` then joins it.
* `joining` (`starting`; `running` during a requested rejoin): subscribed, not assigned yet.
* `serving` (`running`): holds its share of the partitions and finishes a batch every
  `Pace.batch_every_s`, from `Pace.first_batch_s` after its assignment.
* `draining` (`draining`): `POST /drain` taken; drained `Pace.drain_s` later.
* `drained` (`drained`): out of the group for its hold; when the hold ends it subscribes again
  (`drainResubscribes`) unless another process of its instance id is active (its replacement
  joined: the real process exits and stays out).
* `leaving` (`draining`, `leaving` true), then `left` (`left`), `Pace.leave_s` after
  `POST /leave`.

The partitions are shared among the ordinals of a group's members that did not leave: member i
of k gets every topic's partitions p with p % k == i (`Pace.partitions` per topic), reported
while it holds them (`HOLDING`).
A member's join as a new member (`joined-as-new`), a rejoin and a leave count a rebalance on
the group's other serving members, as their assign callbacks would.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from member_contract import ACTIVATE, LEAVE, LEAVE_LEFT, REJOIN
from member_contract.status import DrainAnswer, MemberStatus, StaticLeave, Throughput

HOLDING = ("serving", "draining", "leaving")
"""Phases in which a member holds its partitions."""
POLL_AGE_S = 0.005
"""How long ago a polling member last polled, as its /status says it."""
THROUGHPUT_MIN_S = 10.0
THROUGHPUT_WINDOW_S = 60.0

# The runtime's own answers, held to consumer_runtime.steering by test_membersim; not imported
# from there: the runtime's modules bring pandas and pyarrow (about 85 MB of the simulator's RSS).
IN_STANDBY = "in standby: not in the group (POST /activate first)"
DRAINED = "drained: out of the group until it is replaced or subscribes again"
DRAIN_HOLD_S = 5.0
DRAIN_HOLD_MAX_S = 300.0


def activation_refused(*, active: bool, standby: str | None) -> str | None:
    """Why a process does not take POST /activate now (None: it does), as
    consumer_runtime.steering.activation_refused says it for a process that is not stopping."""
    if active:
        return "not in standby: already active"
    if standby != "ready":
        return ("standby not ready yet: Spark is still starting or warming up (/status standby "
                f"is {standby!r}); activate it once it is 'ready'")
    return None


@dataclass(frozen=True)
class Pace:
    """How fast the simulated processes move (seconds) and what they process."""

    consumer_made_s: float = 0.3
    """Process start -> consumer made (and, for a member that is no standby, processing ready)."""
    join_s: float = 0.5
    """Subscribed (consumer made, activated, subscribed again) -> assigned."""
    first_batch_s: float = 0.3
    """Assigned -> first batch finished."""
    warm_s: float = 2.0
    """A standby's start -> standby ready."""
    batch_every_s: float = 1.0
    batch_seconds: float = 0.05
    records_per_batch: int = 100
    drain_s: float = 0.05
    leave_s: float = 0.2
    rejoin_s: float = 0.5
    partitions: int = 3
    """Partitions of each topic (the bench's topics must have as many)."""
    leave_ms: float = 8.5
    """A KIP-848 member's confirmed static leave, as its drain reports it."""


@dataclass(frozen=True)
class PodFacts:
    """What a member pod says about its process (`pods.pod_facts`)."""

    uid: str
    name: str
    namespace: str
    group: str
    """The ConsumerGroup's name (the pod's group label)."""
    ordinal: int
    ip: str
    instance_id: str
    group_id: str
    topics: tuple[str, ...] = ()
    kip848: bool = False
    standby: bool = False
    """Started as a warm handoff's standby that was not activated yet."""
    joined_as_new: bool = False
    token_secret: str | None = None
    """The Secret (in the pod's namespace) whose `token` the process requires on a POST."""


@dataclass(eq=False)
class Member:
    """One simulated member process (see the module's docstring for its phases)."""

    facts: PodFacts
    started: float
    phase: str = "joining"
    due: float | None = None
    member_id: str = ""
    generation: int = 0
    counts_rebalance: bool = False
    """The next assignment is a rebalance of the group's (not the first, not a return)."""
    rejoin_pending: bool = False
    leaving: bool = False
    first_assignment_s: float | None = None
    first_batch_s: float | None = None
    standby_ready_s: float | None = None
    activated_s: float | None = None
    assigns: int = 0
    rebalances: int = 0
    takeovers: int = 0
    rejoins: int = 0
    drain_resubscribes: int = 0
    drained_at: float | None = None
    drain_hold_s: float | None = None
    static_leave: StaticLeave | None = None
    assigned_at: float | None = None
    """When the current stretch of holding partitions began."""
    serving_since: float | None = None
    """When the current stretch's first batch ended (None: no stretch under way)."""
    done_before: int = 0
    """Batches of the stretches before."""
    last_batch_before: float | None = None
    last_poll: float | None = None
    """When a member that stopped polling (drained, left) last polled."""

    def batches(self, now: float, every: float) -> tuple[int, float | None]:
        """Batches finished by `now` and when the last one ended."""
        if self.serving_since is None or now < self.serving_since:
            return self.done_before, self.last_batch_before
        n = math.floor((now - self.serving_since) / every)
        return self.done_before + n + 1, self.serving_since + n * every

    def stop_batches(self, now: float, every: float) -> None:
        """The stretch of batches ends at `now` (a drain, a leave, a rejoin)."""
        done, last = self.batches(now, every)
        if self.first_batch_s is None and self.serving_since is not None and done:
            self.first_batch_s = round(self.serving_since - self.started, 3)
        self.done_before, self.last_batch_before = done, last
        self.serving_since = None


@dataclass
class Table:
    """Every simulated member by pod uid, found by pod IP; each group's member tokens."""

    pace: Pace = field(default_factory=Pace)
    members: dict[str, Member] = field(default_factory=dict)
    by_ip: dict[str, str] = field(default_factory=dict)
    groups: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    tokens: dict[tuple[str, str], str] = field(default_factory=dict)
    """(namespace, Secret name) -> the token in it."""
    stand_ins: dict[tuple[str, str], str] = field(default_factory=dict)
    """(group id, instance id) -> the member id of a real consumer that stands in Kafka for the
    simulated member of that instance id (a bench's, so the broker's describe shows the member):
    a member holding its partitions reports that id as its own, as the process that is that
    member would."""

    # -- the pods, as the watch sees them ---------------------------------------------------------

    def upsert(self, facts: PodFacts, now: float) -> Member:
        """A running pod: its process starts at `now` when it is new; a known one keeps its
        state (its IP is taken from `facts`)."""
        member = self.members.get(facts.uid)
        if member is not None:
            if member.facts.ip != facts.ip:
                self.by_ip.pop(member.facts.ip, None)
                member.facts = replace(member.facts, ip=facts.ip)
            self.by_ip[facts.ip] = facts.uid
            return member
        member = Member(facts, started=now)
        if facts.standby:
            member.phase = "standby"
        else:
            member.due = now + self.pace.consumer_made_s + self.pace.join_s
        self.members[facts.uid] = member
        self.by_ip[facts.ip] = facts.uid
        self.groups.setdefault(_group_key(facts), set()).add(facts.uid)
        return member

    def remove(self, uid: str) -> None:
        """The pod is gone or stopping: its process is no more."""
        member = self.members.pop(uid, None)
        if member is None:
            return
        if self.by_ip.get(member.facts.ip) == uid:
            del self.by_ip[member.facts.ip]
        group = self.groups.get(_group_key(member.facts))
        if group is not None:
            group.discard(uid)
            if not group:
                del self.groups[_group_key(member.facts)]

    def keep_only(self, uids: set[str]) -> None:
        """After a new listing of the pods: forget the members whose pods it did not show."""
        for uid in [u for u in self.members if u not in uids]:
            self.remove(uid)

    def find(self, ip: str) -> Member | None:
        uid = self.by_ip.get(ip)
        return None if uid is None else self.members.get(uid)

    def token(self, member: Member) -> str | None:
        secret = member.facts.token_secret
        return None if secret is None else self.tokens.get((member.facts.namespace, secret))

    # -- time ------------------------------------------------------------------------------------

    def advance(self, now: float) -> None:
        """Carry out every change that is due by `now`, each at its own time."""
        for key in list(self.groups):
            self._advance_group(key, now)

    def advance_one(self, member: Member, now: float) -> None:
        """Carry out the changes due by `now` in `member`'s group (a change of one member may
        change the others': a join, a leave), in the order they fall due."""
        self._advance_group(_group_key(member.facts), now)
        if member.facts.uid not in self.members:  # a pod gone: its process moves on alone
            self._due_in_order([member], now)

    def _advance_group(self, key: tuple[str, str], now: float) -> None:
        self._due_in_order([self.members[u] for u in self.groups.get(key, ())], now)

    def _due_in_order(self, members: list[Member], now: float) -> None:
        while True:
            due = [m for m in members if m.due is not None and m.due <= now]
            if not due:
                return
            first = min(due, key=lambda m: m.due or 0.0)
            at, first.due = first.due or 0.0, None
            self._change(first, at)

    def _change(self, m: Member, at: float) -> None:
        pace = self.pace
        if m.phase == "joining":
            m.phase, m.generation = "serving", m.generation + 1
            m.member_id = f"{m.facts.instance_id}-sim{m.generation}-{m.facts.uid[:8]}"
            m.assigns += 1
            if m.first_assignment_s is None:
                m.first_assignment_s = round(at - m.started, 3)
                moved = m.facts.joined_as_new
            else:
                m.rebalances += int(m.counts_rebalance)
                moved = m.counts_rebalance
            if m.rejoin_pending:
                m.rejoins, m.rejoin_pending = m.rejoins + 1, False
            m.assigned_at, m.serving_since = at, at + pace.first_batch_s
            if moved:
                self._rebalance_others(m, takeover=False)
        elif m.phase == "draining":
            m.phase, m.member_id, m.drained_at, m.last_poll = "drained", "", round(at, 3), at
            m.static_leave = ({"outcome": LEAVE_LEFT, "tries": 1, "ms": pace.leave_ms,
                               "detail": None} if m.facts.kip848 else None)
            m.due = at + (m.drain_hold_s or 0.0)
        elif m.phase == "drained":
            if self._replaced(m):
                return  # the real process exits; a restart of its container stays out
            m.phase, m.drained_at, m.drain_hold_s = "joining", None, None
            m.drain_resubscribes += 1
            m.counts_rebalance = False  # the same static member returning
            m.due = at + pace.join_s
        elif m.phase == "leaving":
            m.phase, m.member_id, m.last_poll = "left", "", at
            self._rebalance_others(m, takeover=True)

    def _rebalance_others(self, m: Member, *, takeover: bool) -> None:
        """The group's other serving members take a new assignment: they take over `m`'s
        partitions when it left, give some up when it joined."""
        for other in self._group(m):
            if other is not m and other.phase == "serving":
                other.assigns += 1
                other.rebalances += 1
                other.takeovers += int(takeover)

    def _replaced(self, m: Member) -> bool:
        """Another process of `m`'s instance id is in the group or joining it."""
        return any(o is not m and o.facts.instance_id == m.facts.instance_id
                   and o.phase in ("joining", "serving") for o in self._group(m))

    def _group(self, m: Member) -> Iterator[Member]:
        for uid in self.groups.get(_group_key(m.facts), ()):
            other = self.members.get(uid)
            if other is not None:
                yield other

    # -- the operator's requests -----------------------------------------------------------------

    def standby_state(self, m: Member, now: float) -> str | None:
        if m.phase != "standby":
            return None
        if now >= m.started + self.pace.warm_s:
            m.standby_ready_s = m.standby_ready_s or round(self.pace.warm_s, 3)
            return "ready"
        return "warming"

    def request(self, m: Member, action: str, now: float) -> str | None:
        """POST /activate, /leave or /rejoin (the token checked): None when taken, else why
        not (409), as consumer_runtime.steering.Requests.take says it."""
        self.advance_one(m, now)
        if action == ACTIVATE:
            refused = activation_refused(active=m.phase != "standby",
                                         standby=self.standby_state(m, now))
            if refused is None:
                m.activated_s = round(now - m.started, 3)
                m.phase, m.due, m.counts_rebalance = "joining", now + self.pace.join_s, False
            return refused
        if m.phase == "standby":
            return IN_STANDBY
        if m.phase == "drained":
            return DRAINED
        if action == LEAVE:
            if m.leaving:
                return "left the group" if m.phase == "left" else "already leaving the group"
            m.stop_batches(now, self.pace.batch_every_s)
            m.leaving, m.rejoin_pending = True, False
            m.phase, m.due = "leaving", now + self.pace.leave_s
            return None
        if action != REJOIN:
            return f"unknown request {action!r}"
        if m.leaving:
            return "leaving the group"
        if m.rejoin_pending:
            return "a rejoin is already under way"
        if m.phase != "serving":
            return "not in the group"
        m.stop_batches(now, self.pace.batch_every_s)
        m.rejoin_pending, m.counts_rebalance = True, True
        m.phase, m.due = "joining", now + self.pace.rejoin_s
        return None

    def drain(self, m: Member, hold_s: float | None, now: float) -> tuple[str | None, float]:
        """POST /drain (the token checked): (why not, None when taken; when it is drained,
        `now` or later). A drained member takes it again at once and holds for `hold_s` from
        now (at least); `hold_s` None: 5 s, as the runtime's default."""
        self.advance_one(m, now)
        if m.phase == "standby":
            return IN_STANDBY, now
        if m.leaving:
            return "leaving the group", now
        hold = min(max(0.0, DRAIN_HOLD_S if hold_s is None else hold_s), DRAIN_HOLD_MAX_S)
        if m.phase == "drained":
            if m.due is not None:  # not replaced: it waits for its hold, renewed from now
                m.due = max(m.due, now + hold)
            return None, now
        m.drain_hold_s = hold
        if m.phase != "draining":
            m.stop_batches(now, self.pace.batch_every_s)
            m.rejoin_pending = False
            m.phase, m.due = "draining", now + self.pace.drain_s
        assert m.due is not None
        return None, m.due

    def drain_answer(self, m: Member, now: float) -> tuple[int, DrainAnswer]:
        """The answer to a drain taken: 200 once drained, else 202 (still draining)."""
        self.advance_one(m, now)
        drained = m.phase == "drained"
        _, last = m.batches(now, self.pace.batch_every_s)
        return (200 if drained else 202), {
            "accepted": "drain", "drained": drained, "drainedAt": m.drained_at,
            "lastBatchAt": None if last is None else round(last, 3),
            "instanceId": m.facts.instance_id,
            "staticLeave": m.static_leave if drained else None}

    # -- what it says ----------------------------------------------------------------------------

    def assignment(self, m: Member) -> list[tuple[str, int]]:
        """`m`'s share of its group's partitions while it holds them, by ordinal among the
        group's members that did not leave (a static member's share waits for it while it is
        away: drained, restarting)."""
        if m.phase not in HOLDING:
            return []
        ordinals = sorted({o.facts.ordinal for o in self._group(m) if o.phase != "left"})
        k, i = len(ordinals), ordinals.index(m.facts.ordinal)
        return [(t, p) for t in sorted(m.facts.topics)
                for p in range(self.pace.partitions) if p % k == i]

    def status(self, m: Member, now: float) -> MemberStatus:
        """`m`'s /status at `now`: every key of `MemberStatus`, as
        consumer_runtime.metrics.Telemetry.status fills it (mypy holds this literal to the
        type)."""
        self.advance_one(m, now)
        pace, start = self.pace, m.started
        batches, last = m.batches(now, pace.batch_every_s)
        first_batch = m.first_batch_s
        if first_batch is None and m.serving_since is not None and now >= m.serving_since:
            first_batch = round(m.serving_since - start, 3)
        assignment = self.assignment(m)
        records = batches * pace.records_per_batch
        per_partition = records // max(1, len(assignment))
        made = now >= start + pace.consumer_made_s
        standby = self.standby_state(m, now)
        polling = made and m.phase not in ("standby", "drained", "left")
        return {
            "instanceId": m.facts.instance_id,
            "memberId": m.member_id and self.stand_ins.get(
                (m.facts.group_id, m.facts.instance_id), m.member_id),
            "groupId": m.facts.group_id,
            "assignment": assignment,
            "lag": [(t, p, 0) for t, p in assignment],
            "committed": [(t, p, per_partition) for t, p in assignment],
            "lastFetchAt": None if last is None else round(last - pace.batch_seconds, 3),
            "lastPollAt": round(now - POLL_AGE_S, 3) if polling else _r(m.last_poll),
            "batchInFlight": None,
            "pausedWithWork": False,
            "rebalances": m.rebalances,
            "takeovers": m.takeovers,
            "assigns": m.assigns,
            "revokes": 0,
            "lost": 0,
            "generation": None,  # no broker generation behind a simulated member
            "startupSeconds": {"firstAssignment": m.first_assignment_s,
                               "firstBatch": first_batch,
                               "consumerMade": round(pace.consumer_made_s, 3) if made else None,
                               "standbyReady": m.standby_ready_s,
                               "activated": m.activated_s, "instanceReleaseWait": None},
            "lastBatchAt": _r(last),
            "standby": standby,
            "processStart": round(start, 3),
            "batchSecondsMax": pace.batch_seconds if batches else 0.0,
            "batchSecondsP99": pace.batch_seconds if batches else None,
            "recordsProcessed": records,
            "throughput": self._throughput(m, now),
            "batchesProcessed": batches,
            "deadLettered": 0,
            "lastPollAgeSeconds": POLL_AGE_S,
            "state": _STATE[m.phase] if not (m.phase == "joining" and m.rejoin_pending)
            else "running",
            "processingReady": (standby == "ready" or m.activated_s is not None
                                if m.facts.standby else made),
            "waiting": None,
            "leaving": m.leaving,
            "rejoins": m.rejoins,
            "drainedAt": m.drained_at,
            "drainHoldSeconds": m.drain_hold_s if m.phase == "drained" else None,
            "drainResubscribes": m.drain_resubscribes,
            "staticLeave": m.static_leave,
        }

    def _throughput(self, m: Member, now: float) -> Throughput | None:
        """As the runtime's: None until it held partitions for 10 s, and while it holds none."""
        if m.phase not in HOLDING or m.assigned_at is None:
            return None
        span = min(THROUGHPUT_WINDOW_S, now - m.assigned_at)
        if span < THROUGHPUT_MIN_S:
            return None
        pace = self.pace
        return {"recordsPerSecond": round(pace.records_per_batch / pace.batch_every_s, 3),
                "busyRatio": round(min(1.0, pace.batch_seconds / pace.batch_every_s), 4),
                "windowSeconds": round(span, 1), "capacityRecordsPerSecond": None}


_STATE = {"standby": "standby", "joining": "starting", "serving": "running",
          "draining": "draining", "drained": "drained", "leaving": "draining", "left": "left"}
"""/status `state` of each phase."""


def _group_key(facts: PodFacts) -> tuple[str, str]:
    return facts.namespace, facts.group


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
