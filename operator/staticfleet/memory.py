"""What the operator remembers between passes, part by part.

Kubernetes and Kafka are the truth; a pass reads them again (`service.gather`). This process
keeps only what they do not tell it yet, or not cheaply, and each part says how long:

* `OwnWrites`: the status it last wrote and the pods it last created or deleted, until the watch
  has shown them (a pass never creates or deletes a pod twice, however far the watch lags: the
  expectations of controller-runtime's ReplicaSet controller). Bound: a pod until the watch
  shows the write, at most `WRITTEN_POD_TTL_S`; a status until its ConsumerGroup is deleted.
* `MemberExits`: when a stopped member's process closed and ended its last batch (its drain's
  answer, or its exit as the pod watch saw it; the pod may be gone by the next pass). Bound: the
  `CLOSED_KEPT` latest pods.
* `Tokens`: each group's member tokens, the current one and the one before.
* `Refusals`: the pods the API server refused to create, until a pod of that name exists.
* `Answers`: when each member's process last answered. Bound: the `CLOSED_KEPT` latest pods.
* `Caches`: the brokers' timeout bounds (per cluster, `BOUNDS_TTL_S`) and the lag reads
  (`observe.lagreads.LagReads`, its own intervals).
* `SessionReads`: the KIP-848 groups whose session timeout this process read from the broker
  once (its first pass of the group), until the ConsumerGroup is deleted.

The parts kept by ConsumerGroup forget it when it is deleted (`Memory.forget`, each part's
`forget`); the parts kept by pod forget by their bound. Each part holds its own lock: passes of
different groups run in threads at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from staticfleet.decisions.members.observed import member_closed_at, member_last_batch_at
from staticfleet.observe import kafkaadmin, kafkareads, lagreads

CLOSED_KEPT = 10000
"""How many pods' moments `MemberExits` and `Answers` keep (the latest)."""
WRITTEN_POD_TTL_S = 300.0
"""How long at most a pod this process created or deleted is taken as the API server answered
while the watch has not shown that change (it is forgotten as soon as the watch shows it). A
watch that lags does not make a pass create a member twice: at 1,000 groups' cold start the pod
watch lagged about 40 s, past the 30 s this bound was, and 136 groups had members created a
second time (refused, 409). The bound only covers a write the watch never shows, such as a pod
created and deleted by someone else before the watch listed it."""
BOUNDS_TTL_S = 300.0
"""How long a cluster's group-coordinator bounds are kept before they are read again."""


def _keep_latest(moments: dict[str, datetime]) -> None:
    """Forget all but the CLOSED_KEPT latest of `moments` (by pod uid); sorts only when over
    (the pod watch calls this on every pod event)."""
    if len(moments) <= CLOSED_KEPT:
        return
    for uid in sorted(moments, key=moments.__getitem__)[:len(moments) - CLOSED_KEPT]:
        del moments[uid]


@dataclass
class OwnWrites:
    """What this process wrote and the watch may not show yet: the status, by ConsumerGroup
    uid, and member pods as it last created or deleted them, by pod uid (until the watch shows
    the write, `seen_by_watch`; at most `WRITTEN_POD_TTL_S`)."""

    status: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    pods: dict[str, tuple[float, Mapping[str, Any]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wrote_status(self, owner: str, status: Mapping[str, Any]) -> None:
        with self.lock:
            self.status[owner] = status

    def last_status(self, owner: str) -> Mapping[str, Any] | None:
        with self.lock:
            return self.status.get(owner)

    def wrote_pod(self, pod: Mapping[str, Any] | None) -> None:
        """A pod as the API server answered its creation or deletion (None: nothing done)."""
        if pod is not None:
            with self.lock:
                self.pods[pod["metadata"]["uid"]] = (time.monotonic(), pod)

    def overlay(self, watched: Sequence[Mapping[str, Any]],
                owner: str) -> list[Mapping[str, Any]]:
        """The member pods of ConsumerGroup `owner` from the watch, with this process's own
        creations and deletions of the last `WRITTEN_POD_TTL_S` that the watch has not
        delivered yet (`overlay_own_writes`)."""
        now = time.monotonic()
        by_uid = {p["metadata"]["uid"]: p for p in watched}
        with self.lock:
            for uid in [u for u, (t, p) in self.pods.items()
                        if now - t > WRITTEN_POD_TTL_S or seen_by_watch(p, by_uid.get(u))]:
                del self.pods[uid]
            mine = [p for _, p in self.pods.values()
                    if any(r.get("uid") == owner
                           for r in p["metadata"].get("ownerReferences") or ())]
        return overlay_own_writes(watched, mine)

    def forget(self, owner: str) -> None:
        with self.lock:
            self.status.pop(owner, None)


def seen_by_watch(written: Mapping[str, Any], watched: Mapping[str, Any] | None) -> bool:
    """The watch shows this process's write of a pod: a creation once it lists the pod, a
    deletion once it lists the pod as being deleted (a deleted pod it no longer lists at all is
    not overlaid either, `overlay_own_writes`; it is dropped by the bound)."""
    if watched is None:
        return False
    return (not written["metadata"].get("deletionTimestamp")
            or bool(watched["metadata"].get("deletionTimestamp")))


def overlay_own_writes(watched: Sequence[Mapping[str, Any]],
                       written: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """`watched` pods, where a pod this process deleted still shows as live taken as deleted,
    plus pods it created that the watch does not list yet (unless one of that name is listed)."""
    mine = {p["metadata"]["uid"]: p for p in written}
    out = []
    for pod in watched:
        own = mine.pop(pod["metadata"]["uid"], None)
        if (own is not None and own["metadata"].get("deletionTimestamp")
                and not pod["metadata"].get("deletionTimestamp")):
            pod = own  # deleted by this process; the watch has not shown it yet
        out.append(pod)
    names = {p["metadata"]["name"] for p in out}
    out += [p for p in mine.values()
            if p["metadata"]["name"] not in names and not p["metadata"].get("deletionTimestamp")]
    return out


@dataclass
class MemberExits:
    """When the process of a member pod being deleted closed (`closed`), and when it last
    finished a batch (`final_batches`), by pod uid: its drain's answer or its exit as the pod
    watch saw it (the pod itself may be gone by the next pass). The `CLOSED_KEPT` latest."""

    closed: dict[str, datetime] = field(default_factory=dict)
    final_batches: dict[str, datetime] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note_closed(self, pod: Mapping[str, Any]) -> None:
        """A pod being deleted whose member process exited: when it closed and ended its last
        batch (`member_closed_at`, `member_last_batch_at`)."""
        closed = member_closed_at(pod)
        if closed is None:
            return
        uid = pod["metadata"]["uid"]
        last = member_last_batch_at(pod)
        with self.lock:
            known = self.closed.get(uid)
            if known is None or closed < known:  # a drain's answer may have seen it first
                self.closed[uid] = closed
                _keep_latest(self.closed)
            if last is not None and uid not in self.final_batches:
                self.final_batches[uid] = last
                _keep_latest(self.final_batches)

    def note_drained(self, uid: str, at: datetime, last_batch_at: datetime | None) -> None:
        """The process of member pod `uid` answered a drain: it closed `at`, after its last
        batch ended `last_batch_at` (both from its own clock)."""
        with self.lock:
            self.closed[uid] = at
            _keep_latest(self.closed)
            if last_batch_at is not None:
                self.final_batches[uid] = last_batch_at
                _keep_latest(self.final_batches)

    def seen(self) -> tuple[dict[str, datetime], dict[str, datetime]]:
        """Copies of what is known: (closed, final batches)."""
        with self.lock:
            return dict(self.closed), dict(self.final_batches)


@dataclass
class Tokens:
    """Each group's member tokens by ConsumerGroup uid, newest first: the one its Secret holds
    now and the one before, which members still hold until their mounted Secret is updated."""

    by_owner: dict[str, tuple[str, ...]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def member_tokens(self, owner: str, current: str) -> tuple[str, ...]:
        """The tokens to try on the group's members: `current`, then the one before it."""
        with self.lock:
            known = self.by_owner.get(owner, ())
            if not known or known[0] != current:
                known = (current, *known[:1])
                self.by_owner[owner] = known
            return known

    def forget(self, owner: str) -> None:
        with self.lock:
            self.by_owner.pop(owner, None)


@dataclass
class Refusals:
    """Pods the API server refused to create, by ConsumerGroup uid, then pod name: its answer
    and whether the pod was a standby. One is forgotten once a pod of that name exists."""

    by_owner: dict[str, dict[str, tuple[str, bool]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, owner: str, pod_name: str, message: str, standby: bool = True) -> None:
        with self.lock:
            self.by_owner.setdefault(owner, {})[pod_name] = (message[:600], standby)

    def unanswered(self, owner: str, pods: Sequence[Mapping[str, Any]],
                   standby: bool = True) -> dict[str, str]:
        """The refusals still unanswered of standby pods (or, `standby` False, of the
        others): a pod of that name exists now (the quota was raised) forgets its refusal."""
        names = {p["metadata"]["name"] for p in pods}
        with self.lock:
            mine = self.by_owner.get(owner, {})
            for name in [n for n in mine if n in names]:
                del mine[name]
            return {name: said for name, (said, kind) in mine.items() if kind == standby}

    def forget(self, owner: str) -> None:
        with self.lock:
            self.by_owner.pop(owner, None)


@dataclass
class Notices:
    """Events said once per change, not every pass: by ConsumerGroup uid and Event reason, what
    was said last (a key the caller chooses, such as the members named) and when."""

    REPEAT_S = 600.0
    """The same thing is said again after this long (an Event's `lastTimestamp` ages)."""

    said: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def due(self, owner: str, reason: str, key: str) -> bool:
        """Whether `key` is new for `owner`'s `reason` (or old enough to repeat): then it is
        noted as said."""
        now = time.monotonic()
        with self.lock:
            last = self.said.get((owner, reason))
            if last is not None and last[0] == key and now - last[1] < self.REPEAT_S:
                return False
            self.said[(owner, reason)] = (key, now)
            return True

    def forget(self, owner: str) -> None:
        with self.lock:
            for key in [k for k in self.said if k[0] == owner]:
                del self.said[key]


@dataclass
class Answers:
    """When each member pod's process last answered (`/status`, a drain), by pod uid; the
    `CLOSED_KEPT` latest."""

    at: dict[str, datetime] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, uid: str, at: datetime) -> None:
        """An answer of `uid`'s process at `at` (stamped with its own read time)."""
        with self.lock:
            self.at[uid] = max(at, self.at.get(uid, at))

    def note_pass(self, uids: Sequence[str], now: datetime,
                  wanted: set[str]) -> dict[str, datetime]:
        """Record this pass's answers `uids` at `now` (no earlier than a read's own time);
        return the last answer of each of `wanted` (the pods, and the processes whose close is
        known: a pod may be gone, its last answer still dates its silence)."""
        with self.lock:
            for uid in uids:
                self.at[uid] = max(now, self.at.get(uid, now))
            _keep_latest(self.at)
            return {uid: at for uid, at in self.at.items() if uid in wanted}


@dataclass
class SessionReads:
    """The KIP-848 groups (by ConsumerGroup uid) whose session timeout this process has read
    from the broker and acted on: a group's first pass reads it, and each pass after until one
    carried out what it decided (or the principal may not read it), so a widened value an
    operator that stopped left behind is seen once, not read on every pass
    (`decisions.timeouts.widening`)."""

    done: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wanted(self, owner: str) -> bool:
        with self.lock:
            return owner not in self.done

    def note(self, owner: str) -> None:
        with self.lock:
            self.done.add(owner)

    def forget(self, owner: str) -> None:
        with self.lock:
            self.done.discard(owner)


@dataclass
class Caches:
    """Reads kept because they are dear: the group-coordinator bounds per cluster (for
    `BOUNDS_TTL_S`), and the lag reads (`lagreads.LagReads`, per group and per cluster)."""

    bounds: dict[str, tuple[float, tuple[dict[str, int], str | None]]] = field(
        default_factory=dict)
    lag_reads: lagreads.LagReads = field(default_factory=lagreads.LagReads)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def broker_bounds(self, admin: kafkaadmin.Admin) -> tuple[dict[str, int], str | None]:
        """The cluster's group-coordinator bounds (read again after `BOUNDS_TTL_S`), or none
        and why they cannot be read."""
        with self.lock:
            cached = self.bounds.get(admin.key)
        if cached is None or time.monotonic() - cached[0] > BOUNDS_TTL_S:
            try:
                read: tuple[dict[str, int], str | None] = (kafkareads.broker_bounds(admin), None)
            except kafkareads.BoundsDenied as exc:
                read = ({}, str(exc))
            cached = (time.monotonic(), read)
            with self.lock:
                self.bounds[admin.key] = cached
        return cached[1]

    def forget(self, owner: str) -> None:
        self.lag_reads.forget(owner)


@dataclass
class Memory:
    """Everything the operator remembers, by part (see the module)."""

    own: OwnWrites = field(default_factory=OwnWrites)
    exits: MemberExits = field(default_factory=MemberExits)
    tokens: Tokens = field(default_factory=Tokens)
    refusals: Refusals = field(default_factory=Refusals)
    answers: Answers = field(default_factory=Answers)
    caches: Caches = field(default_factory=Caches)
    session_reads: SessionReads = field(default_factory=SessionReads)
    notices: Notices = field(default_factory=Notices)

    def note_drained(self, uid: str, at: datetime, last_batch_at: datetime | None = None) -> None:
        """The process of member pod `uid` answered a drain: its consumer closed `at`, after
        its last batch ended `last_batch_at` (both from its own clock). The answer is an
        answer: a process that drains for long is not silent (`InFlight.away_since`)."""
        self.exits.note_drained(uid, at, last_batch_at)
        self.answers.note(uid, at)

    def note_answers(self, uids: Sequence[str], pods: Sequence[Mapping[str, Any]],
                     now: datetime) -> dict[str, datetime]:
        """Record this pass's answers (each at its own read time, else `now`); return the last
        answer of each of `pods` and of each process whose close is known."""
        with self.exits.lock:
            closed = set(self.exits.closed)
        return self.answers.note_pass(uids, now, {p["metadata"]["uid"] for p in pods} | closed)

    def forget(self, owner: str) -> None:
        """ConsumerGroup `owner` (its uid) is deleted: each part kept by group forgets it."""
        self.own.forget(owner)
        self.refusals.forget(owner)
        self.tokens.forget(owner)
        self.caches.forget(owner)
        self.session_reads.forget(owner)
        self.notices.forget(owner)
