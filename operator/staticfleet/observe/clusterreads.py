"""Every group's Kafka reads of one cluster, made together (issue 37): per interval, a few
requests per coordinator for all the groups the operator registered, instead of a few requests
per group per pass.

One read (`ClusterReader.read`), in steps:

1. Metadata: one request for the union of the groups' topics (all topics when a group
   subscribes by pattern): partition counts, leaders, missing topics, and the brokers.
2. Coordinators: one FindCoordinator (v4, KIP-699: many keys) for the groups whose coordinator
   is not known, or moved (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, or no answer from it).
3. One exchange: per coordinator, one DescribeGroups for its classic groups and one
   ConsumerGroupDescribe for its KIP-848 groups; one OffsetFetch (v8, KIP-709: many groups)
   for its groups whose committed offsets are due (they would be older than
   `Registration.offsets_age_s` by the next read: once a minute at rest; each read while a
   rollout or an autoscaler needs them fresher, `lagreads.max_age_s`); per partition leader,
   one ListOffsets for the due end offsets.
4. A second round (and a third) for the groups whose coordinator moved (found again first)
   and those the first API did not know (a classic group asked as a consumer group, or the
   other way round: the other API); a group neither knows is Dead.

Requests are chunked by `BATCH` groups. A failed read gives no sample: a group that did not
answer has an `Outcome` that says why (`moving`: its coordinator moves), its committed offsets
and the end offsets keep their last figures with the time they were read.

What changed: a whole read tells `on_change` (once its lock is released) the groups whose
answer differs from the previous whole read's (`clusterheld.signature`). A pass's own read of
its group (`only`) tells nothing and leaves that to the next whole read.

In process: kafka-python's client (`wire`) is pure Python, so a request that loses its
coordinator fails its future; nothing aborts the process, as librdkafka's admin requests can
(`coordinated`). The reads of one cluster hold its reader's lock; other clusters' go on.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kafka import KafkaClient

from kafkawire import messages
from staticfleet.decisions.spec.kafka import topic_matcher
from staticfleet.observe import clusteranswers as answers
from staticfleet.observe import wire
from staticfleet.observe.clientsettings import Unsupported, client_settings
from staticfleet.observe.clusteranswers import TP, Outcome, TopicsAnswer
from staticfleet.observe.clusterheld import (
    INTERVAL_S,
    Committed,
    Described,
    GroupRead,
    Registration,
    Signature,
    signature,
)
from staticfleet.observe.kafkareads import TopicsSeen

log = logging.getLogger("staticfleet")

READ_TIMEOUT_S = 5.0
"""How long one read waits for its answers, all rounds together."""
BATCH = 500
"""Groups (or keys) in one request; more go in several."""
ROUNDS = 3
FORGET_AFTER_S = 120.0
"""A group no pass registered for this long is no longer read (its ConsumerGroup is gone); at
least twice the longest wait between a group's passes (`ClusterReader.forget_after_s`)."""
VANISHED_S = 30.0
"""A group described before that neither API knows now is no answer this long before it is
Dead: a coordinator that has just taken a group over says it does not know it until it loaded
it (Kafka 4.1: Dead, GROUP_ID_NOT_FOUND; a killed coordinator's groups were loaded 5 s on)."""


@dataclass
class _Topics:
    at: float
    seen: TopicsAnswer
    everything: bool
    """The answer covers every topic (a pattern asked for)."""


@dataclass
class _Round:
    """What a round still has to ask: describes by group (the APIs left to ask, first first)
    and committed offsets, with the retries left of each for a moved coordinator."""

    describe: dict[str, list[str]] = field(default_factory=dict)
    offsets: set[str] = field(default_factory=set)
    retries: dict[str, int] = field(default_factory=dict)
    fetched: dict[str, dict[TP, int]] = field(default_factory=dict)
    """Committed offsets read, kept once the group's describe answered in this read."""


class ClusterReader:
    """The reads of one cluster (one connection configuration): what the operator registered,
    what the reads found, and the kafka-python client they are made with. Making one connects;
    it raises `Unsupported` when the settings or the brokers' API versions do not allow these
    reads (the operator then reads per group), or kafka-python's error when no broker answers."""

    def __init__(self, conf: Mapping[str, str], *, interval_s: float = INTERVAL_S,
                 timeout_s: float = READ_TIMEOUT_S, make_client: Callable[..., Any] = KafkaClient,
                 settings: Mapping[str, Any] | None = None,
                 forget_after_s: float = FORGET_AFTER_S) -> None:
        self.wire = wire.Wire({**client_settings(conf), **(settings or {})}, make_client)
        missing = self.wire.missing()
        if missing:
            self.wire.close()
            raise Unsupported(f"the brokers do not take {', '.join(missing)}")
        self.key = key(conf)
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.forget_after_s = forget_after_s
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.broken = ""
        """Why the client failed in a way no read recovers from (a new reader is made)."""
        self.registered: dict[str, tuple[Registration, float]] = {}
        self.coordinators: dict[str, int] = {}
        self.kinds: dict[str, str] = {}
        """The type of each group as the API that described it says (classic or consumer):
        the API asked first next time."""
        self.vanished: dict[str, float] = {}
        """Groups described before that neither API knew since when (`VANISHED_S`)."""
        self.joined: set[str] = set()
        """Groups last described with members: one that reads `unjoined` now may not be loaded
        by a new coordinator yet (no answer for `VANISHED_S`)."""
        self.described: dict[str, Described] = {}
        self.committed: dict[str, Committed] = {}
        self.ends: dict[TP, tuple[float, int]] = {}
        self.topics: _Topics | None = None
        self.last_read: float | None = None
        self.last_requests: Counter[str] = Counter()
        """The requests of the last read, by API (the brokers' names)."""
        self.signatures: dict[str, Signature] = {}
        """Each group's answer in the last whole read (`signature`)."""
        self.changed: set[str] = set()
        """Groups whose answer the read under way found changed, to tell `on_change`."""
        self.on_change: Callable[[frozenset[str]], None] | None = None
        """Told, after a whole read, the groups whose answer changed (`signature`)."""

    # --- what the operator registers ----------------------------------------------------

    def register(self, registration: Registration, now: float) -> None:
        with self.lock:
            self.registered[registration.group_id] = (registration, now)

    def forget(self, group_id: str) -> None:
        with self.lock:
            self._drop(group_id)

    def _drop(self, group_id: str) -> None:
        self.registered.pop(group_id, None)
        self.coordinators.pop(group_id, None)
        self.kinds.pop(group_id, None)
        self.vanished.pop(group_id, None)
        self.joined.discard(group_id)
        self.described.pop(group_id, None)
        self.committed.pop(group_id, None)
        self.signatures.pop(group_id, None)

    # --- what the reads hold --------------------------------------------------------------

    def due(self, now: float) -> bool:
        """Whether the cluster's read is due (none yet, or the last one an interval ago)."""
        return self.last_read is None or now - self.last_read >= self.interval_s

    def next_read_in(self, now: float) -> float | None:
        """Seconds until the cluster's read is due (`due`); None while no group is registered."""
        with self.lock:
            if not self.registered:
                return None
            return 0.0 if self.last_read is None else max(0.0, self.last_read + self.interval_s
                                                           - now)

    def group(self, group_id: str) -> GroupRead:
        """What the reads hold of a registered group now (nothing is asked)."""
        with self.lock:
            return self._group(group_id)

    def _group(self, group_id: str) -> GroupRead:
        registration = self.registered[group_id][0]
        topics = self.topics
        wanted = self._partitions(registration)
        seen = missing = None
        if topics is not None:
            names = self._names(registration)
            missing = frozenset(n for n in names if n in topics.seen.missing)
            seen = TopicsSeen({n: topics.seen.counts[n] for n in names
                               if n in topics.seen.counts}, topics.seen.leaderless(names))
        return GroupRead(self.described.get(group_id), self.committed.get(group_id),
                         {tp: self.ends[tp] for tp in wanted if tp in self.ends},
                         seen, missing or frozenset(), self.coordinators.get(group_id))

    # --- the reads ------------------------------------------------------------------------

    def read(self, now: float, only: Collection[str] | None = None,
             offsets: Collection[str] = ()) -> Counter[str]:
        """One read of the registered groups (`only`: of those alone, a fresh read for one
        group), their offsets when due and those of `offsets` now; returns its requests.
        Never raises: what kafka-python raises marks the reader `broken`."""
        return self._counted(now, only, set(offsets), when_due=False)

    def refresh(self, now: float) -> Counter[str]:
        """The cluster's read when it is due (`due`), once however many passes ask at once."""
        return self._counted(now, None, set(), when_due=True)

    def _counted(self, now: float, only: Collection[str] | None, offsets: set[str],
                 when_due: bool) -> Counter[str]:
        """The read, and then, outside the lock, `on_change` told what it found changed."""
        with self.lock:
            if when_due and not self.due(now):
                return Counter()
            before = Counter(self.wire.sent)
            try:
                self._read(now, only, offsets)
            except Exception as exc:  # kafka-python's own failures: a new client next time
                log.warning("cluster reads: a read failed; a new client will read next: %r",
                            exc)
                self.broken = repr(exc)
            self.last_requests = self.wire.sent - before
            counted, changed, self.changed = self.last_requests, frozenset(self.changed), set()
        if changed and self.on_change is not None:
            self.on_change(changed)  # it never raises (`clusterpool.ClusterReads`)
        return counted

    def _read(self, now: float, only: Collection[str] | None, offsets: set[str]) -> None:
        deadline = time.monotonic() + self.timeout_s
        # 1: the groups of this read (a whole read forgets the groups no pass registered).
        if only is None:
            for gone in [g for g, (_, at) in self.registered.items()
                         if now - at > self.forget_after_s]:
                self._drop(gone)
            self.last_read = now
        regs = {g: r for g, (r, _) in self.registered.items() if only is None or g in only}
        # 2: the topics, in one Metadata request.
        self._metadata(regs.values(), now, deadline, whole=only is None)
        # 3: describes, committed offsets (when due) and end offsets (when due), in rounds.
        todo = _Round(
            describe={g: _apis(self.kinds.get(g, r.protocol)) for g, r in regs.items()},
            offsets={g for g, r in regs.items() if self._partitions(r) and (
                g in offsets or self._due(self.committed.get(g), r, now))},
            retries=dict.fromkeys(regs, 1))
        ends = self._due_ends(regs.values(), now, offsets)
        for _ in range(ROUNDS):
            if not (todo.describe or todo.offsets or ends):
                break
            self._find(set(todo.describe) | todo.offsets, now, deadline, todo)
            self._ask(regs, todo, ends, now, deadline)
            ends = set()
        for group_id in todo.describe:
            self.described[group_id] = Described(now, answers.no_answer(
                "no answer within the read's rounds"))
        for group_id, committed in todo.fetched.items():
            described = self.described.get(group_id)
            if described is not None and described.outcome.view is not None:
                self.committed[group_id] = Committed(now, committed)
        # 4: what changed since the last whole read (`signature`), to tell.
        if only is None:
            self._compare(regs)

    def _compare(self, groups: Iterable[str]) -> None:
        for group_id in groups:
            now_seen = signature(self._group(group_id), self.coordinators.get(group_id))
            before = self.signatures.get(group_id)
            self.signatures[group_id] = now_seen
            if before is not None and before != now_seen:
                self.changed.add(group_id)

    def _due(self, committed: Committed | None, registration: Registration,
             now: float) -> bool:
        return committed is None or self._old(now - committed.at, registration)

    def _old(self, age: float, registration: Registration) -> bool:
        """A figure of this age is too old by the next read (an interval on)."""
        return age + self.interval_s >= registration.offsets_age_s

    def _names(self, registration: Registration) -> list[str]:
        if registration.pattern is None:
            return list(registration.topics)
        if self.topics is None:
            return []
        matches = topic_matcher(registration.pattern)
        return sorted(n for n in self.topics.seen.counts
                      if not n.startswith("__") and matches(n))

    def _partitions(self, registration: Registration) -> list[TP]:
        counts = self.topics.seen.counts if self.topics is not None else {}
        return [(t, p) for t in self._names(registration) for p in range(counts.get(t, 0))]

    def _metadata(self, regs: Iterable[Registration], now: float, deadline: float,
                  whole: bool) -> None:
        regs = list(regs)
        everything = any(r.pattern is not None for r, _ in self.registered.values())
        names = sorted({t for r, _ in self.registered.values() for t in r.topics})
        cached = self.topics
        if not whole and cached is not None and now - cached.at < self.interval_s and (
                cached.everything or all(r.pattern is None and all(
                    t in cached.seen.counts or t in cached.seen.missing for t in r.topics)
                    for r in regs)):
            return  # a fresh read of one group: the cluster's topics are fresh enough
        request = wire.Metadata(None if everything else names, False, False, False)
        for _ in range(2):  # a broker that does not answer: once more, of another
            node = self.wire.any_broker()
            if node is None:
                return
            [answer] = self.wire.exchange([(node, request)], deadline)
            if not isinstance(answer, Exception):
                self.wire.learn(answer)
                self.topics = _Topics(now, answers.topics(answer), everything)
                return
            log.info("cluster reads: metadata from broker %s: %s", node, answer)

    def _find(self, groups: set[str], now: float, deadline: float, todo: _Round) -> None:
        """Look up the coordinators of `groups` that have none known (FindCoordinator v4)."""
        unknown = sorted(g for g in groups if g not in self.coordinators)
        if not unknown:
            return
        node = self.wire.any_broker()
        chunks = [unknown[i:i + BATCH] for i in range(0, len(unknown), BATCH)]
        found = ([Exception("no broker to ask")] * len(chunks) if node is None else
                 self.wire.exchange([(node, messages.FindCoordinator(0, c, {})) for c in chunks],
                                    deadline))
        for chunk, answer in zip(chunks, found, strict=True):
            told: dict[str, tuple[int | None, Outcome]]
            if isinstance(answer, Exception):
                told = {g: (None, answers.no_answer(f"finding its coordinator: {answer}"))
                        for g in chunk}
            else:
                told = answers.coordinators(answer)
            for group_id in chunk:
                coordinator, outcome = told.get(group_id, (None, answers.no_answer(
                    "finding its coordinator: the answer did not tell")))
                if coordinator is not None:
                    self.coordinators[group_id] = coordinator
                else:
                    self._settle_describe(group_id, outcome, now, todo)
                    self._settle_offsets(group_id, outcome, {}, now, todo)

    def _ask(self, regs: Mapping[str, Registration], todo: _Round, ends: set[TP], now: float,
             deadline: float) -> None:
        """One exchange: the describes and offset fetches to each coordinator, the end
        offsets to each leader."""
        asks: list[tuple[int, Any, Callable[[Any], None]]] = []
        by_api: dict[tuple[int, str], list[str]] = defaultdict(list)
        for group_id, apis in sorted(todo.describe.items()):
            if group_id in self.coordinators:
                by_api[(self.coordinators[group_id], apis[0])].append(group_id)
        for (node, api), groups in by_api.items():
            for chunk in _chunks(groups):
                request = (messages.ConsumerGroupDescribe(chunk, False, {}) if api == "consumer"
                           else messages.DescribeGroups(chunk, False, {}))
                asks.append((node, request, partial(self._described, chunk=chunk, node=node,
                                                    now=now, todo=todo)))
        by_node: dict[int, list[str]] = defaultdict(list)
        for group_id in sorted(todo.offsets):
            if group_id in self.coordinators:
                by_node[self.coordinators[group_id]].append(group_id)
        for node, groups in by_node.items():
            for chunk in _chunks(groups):
                request = wire.offset_fetch({g: self._partitions(regs[g]) for g in chunk})
                asks.append((node, request, partial(self._fetched, chunk=chunk, node=node,
                                                    now=now, todo=todo)))
        leaders: dict[int, list[TP]] = defaultdict(list)
        seen = self.topics.seen if self.topics is not None else None
        for tp in sorted(ends):
            leader = seen.leaders.get(tp, -1) if seen is not None else -1
            if leader >= 0:
                leaders[leader].append(tp)
        for node, tps in leaders.items():
            request = wire.list_offsets(tps)
            asks.append((node, request, partial(self._ended, now=now)))
        if not asks:
            return
        results = self.wire.exchange([(node, request) for node, request, _ in asks], deadline)
        for (_, _, settle), answer in zip(asks, results, strict=True):
            settle(answer)

    def _unreachable(self, node: int) -> None:
        """Broker `node` did not answer: its groups' coordinators are looked up again."""
        for group_id in [g for g, n in self.coordinators.items() if n == node]:
            del self.coordinators[group_id]

    def _described(self, answer: Any, chunk: list[str], node: int, now: float,
                   todo: _Round) -> None:
        if isinstance(answer, Exception):
            self._unreachable(node)
            told: dict[str, Outcome] = {}
            why = f"broker {node}: {answer}"
        else:
            told, why = answers.described(answer), "the answer did not tell of it"
        for group_id in chunk:
            self._settle_describe(group_id, told.get(group_id, answers.no_answer(why)), now,
                                  todo)

    def _settle_describe(self, group_id: str, outcome: Outcome, now: float,
                         todo: _Round) -> None:
        apis = todo.describe.get(group_id)
        if apis is None:
            return
        if outcome.elsewhere:
            apis.pop(0)
            if apis:
                return  # the other API, next round
            outcome = self._unknown(group_id, now)
        elif (outcome.unjoined and group_id in self.joined
              and now - self.vanished.setdefault(group_id, now) < VANISHED_S):
            outcome = answers.no_answer("its coordinator describes the group without the "
                                        "members it had: it may be loading them", loading=True)
        elif outcome.view is not None:
            (self.joined.add if outcome.view.members else self.joined.discard)(group_id)
            self.kinds[group_id] = outcome.view.protocol
            self.vanished.pop(group_id, None)
        elif outcome.moved:
            self.coordinators.pop(group_id, None)
            if self._retry(group_id, todo):
                return
        self.described[group_id] = Described(now, outcome)
        del todo.describe[group_id]

    def _unknown(self, group_id: str, now: float) -> Outcome:
        """The outcome of a group neither API knows: Dead (the broker has no such group yet),
        or, for one described before, no answer until `VANISHED_S` passed (its coordinator may
        still be loading it)."""
        if group_id in self.kinds and now - self.vanished.setdefault(group_id, now) < VANISHED_S:
            return answers.no_answer("neither API knows the group it described before: its "
                                     "coordinator may be loading it", loading=True)
        self.kinds.pop(group_id, None)
        self.vanished.pop(group_id, None)
        return Outcome(answers.dead(self.registered[group_id][0].protocol))

    def _retry(self, group_id: str, todo: _Round) -> bool:
        """Whether a group whose coordinator moved is asked again in the next round."""
        left = todo.retries.get(group_id, 0)
        todo.retries[group_id] = left - 1
        return left > 0

    def _fetched(self, answer: Any, chunk: list[str], node: int, now: float,
                 todo: _Round) -> None:
        if isinstance(answer, Exception):
            self._unreachable(node)
            told: dict[str, tuple[Outcome, dict[TP, int]]] = {}
            why = f"broker {node}: {answer}"
        else:
            told, why = answers.committed(answer), "the answer did not tell of it"
        for group_id in chunk:
            outcome, offsets = told.get(group_id, (answers.no_answer(why), {}))
            self._settle_offsets(group_id, outcome, offsets, now, todo)

    def _settle_offsets(self, group_id: str, outcome: Outcome, offsets: dict[TP, int],
                        now: float, todo: _Round) -> None:
        if group_id not in todo.offsets:
            return
        if outcome.code == messages.NONE:
            todo.fetched[group_id] = offsets  # a coordinator loading the group answers -1
        elif outcome.moved:
            self.coordinators.pop(group_id, None)
            if group_id in todo.describe or self._retry(group_id, todo):
                return  # asked again with its describe, or alone
        todo.offsets.discard(group_id)

    def _due_ends(self, regs: Iterable[Registration], now: float,
                  offsets: set[str]) -> set[TP]:
        due: set[TP] = set()
        for registration in regs:
            forced = registration.group_id in offsets
            for tp in self._partitions(registration):
                read = self.ends.get(tp)
                if forced or read is None or self._old(now - read[0], registration):
                    due.add(tp)
        return due

    def _ended(self, answer: Any, now: float) -> None:
        if isinstance(answer, Exception):
            return  # no figures: the partitions' leader did not answer
        for tp, offset in answers.end_offsets(answer).items():
            self.ends[tp] = (now, offset)

    def close(self) -> None:
        self.closed.set()
        with self.lock:
            self.wire.close()


def _apis(protocol: str) -> list[str]:
    """The describe APIs to ask, the group's own protocol's first."""
    return ["consumer", "classic"] if protocol == "consumer" else ["classic", "consumer"]


def _chunks(groups: list[str]) -> list[list[str]]:
    return [groups[i:i + BATCH] for i in range(0, len(groups), BATCH)]


def key(conf: Mapping[str, str]) -> str:
    """A cluster's key: its connection configuration (as `kafkaadmin.AdminPool` keys it)."""
    return json.dumps(dict(conf), sort_keys=True)
