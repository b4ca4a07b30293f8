"""What a pass takes from its cluster's reads (`clusterreads`): the readers of all clusters
(`ClusterReads`, one per connection configuration) and a group's answers as fresh as the pass
needs them (`ClusterReads.group`).

A group's pass registers the group and takes its answers from the cluster's last read, when
that read is fresh enough: its describe no older than `describe_age_s` (the read interval at
rest; `FRESH_S` while its members are in flight), its committed and end offsets no older than
`lagreads.max_age_s` (through `GroupOffsets`, which `lagreads.LagReads` asks). A group that
is not in the last read (just registered), whose answer is older, or whose last read failed
(its coordinator moved) is read alone, now: the cluster's other groups wait for their turn.

A cluster whose settings kafka-python cannot take, whose brokers lack an API version, or that
did not answer, has no reader for `REFUSED_HOLD_S`: its groups are read one by one
(`kafkareads`), as before, meanwhile.

Told what changed (`on_change`, set by the handlers), the reads keep going by themselves: each
reader has a thread that reads its cluster every interval, whether or not a pass asks, and
tells `on_change` the owners (ConsumerGroup uids) of the groups whose answer changed
(`clusterheld.signature`), so that a group at rest, whose passes come once a rest interval
(`decisions.pace`), is woken within a read interval of a change on the broker's side. A group
is forgotten only once no pass registered it for `forget_after_s` (twice the rest interval).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

from staticfleet.observe.clusteranswers import TP
from staticfleet.observe.clusterreads import (
    FORGET_AFTER_S,
    INTERVAL_S,
    ClusterReader,
    GroupRead,
    Registration,
    key,
)

log = logging.getLogger("staticfleet")

FRESH_S = 2.0
"""How old a group's describe may be while its members are in flight (lagreads.ROLLOUT_AGE_S)."""
REFUSED_HOLD_S = 60.0
"""A cluster that could not have a reader is tried again after this long."""
IDLE_CLOSE_S = 900.0
"""A reader no pass asked for this long is closed (its groups are gone)."""


SETTLED_STATES = frozenset({"Stable", "Empty", "Dead"})
"""A group in another state is changing: its describe is read again as if members were in
flight (`FRESH_S`)."""


def describe_age_s(in_flight: bool, interval_s: float = INTERVAL_S) -> float:
    """How old a group's describe may be: the read interval, `FRESH_S` while members are in
    flight (a rollout, a pod that is not ready yet, one that is going)."""
    return min(FRESH_S, interval_s) if in_flight else interval_s


def serves(held: GroupRead, now: float, describe_age_s: float) -> bool:
    """Whether a group's describe serves this pass: read at `now` (by this pass's read), or
    an answer younger than `describe_age_s`, of a group not changing."""
    described = held.described
    if described is None:
        return False
    if described.at >= now:
        return True
    view = described.outcome.view
    if view is None:
        return False  # no answer last time (its coordinator moved): asked again now
    age = describe_age_s if view.state in SETTLED_STATES else min(FRESH_S, describe_age_s)
    return now - described.at < age


@dataclass
class ClusterReads:
    """A reader per connection configuration, made on first use."""

    interval_s: float = INTERVAL_S
    rest_s: float = FORGET_AFTER_S / 2
    """The longest a group's passes wait for each other (`passes.REST_RESYNC_S`): a group
    no pass registered for twice that (at least `FORGET_AFTER_S`) is no longer read."""
    on_change: Callable[[frozenset[str]], None] | None = None
    """Told the owners (ConsumerGroup uids) of the groups whose answer changed in a whole read;
    set, every reader reads its cluster every interval by itself (a thread of its own). Called
    from that thread: it must be thread-safe."""
    readers: dict[str, ClusterReader] = field(default_factory=dict)
    refused: dict[str, tuple[float, str]] = field(default_factory=dict)
    """Configurations that could not have a reader: when, and why."""
    used: dict[str, float] = field(default_factory=dict)
    owners: dict[str, tuple[str, str]] = field(default_factory=dict)
    """ConsumerGroup uid -> (configuration key, group id): what `forget` drops."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    making: dict[str, threading.Lock] = field(default_factory=dict)

    def reader(self, conf: Mapping[str, str], now: float) -> ClusterReader | None:
        """The reader of the cluster `conf` connects to (None: its groups are read one by one
        for now; see the module's docstring)."""
        name = key(conf)
        self._close_idle(now)
        with self.lock:
            self.used[name] = now
            found = self.readers.get(name)
            if found is not None and found.broken:
                del self.readers[name]  # its client failed: a new one
                self.refused[name] = (now - REFUSED_HOLD_S, found.broken)
            refused = self.refused.get(name)
            making = self.making.setdefault(name, threading.Lock())
        if found is not None and found.broken:
            found.close()
        elif found is not None:
            return found
        if refused is not None and now - refused[0] < REFUSED_HOLD_S:
            return None
        with making:  # one connection attempt per cluster at a time
            with self.lock:
                found = self.readers.get(name)
            if found is not None:
                return found
            try:
                made = ClusterReader(conf, interval_s=self.interval_s,
                                     forget_after_s=max(FORGET_AFTER_S, 2 * self.rest_s))
            except Exception as exc:  # Unsupported, or kafka-python's: per group meanwhile
                log.warning("cluster reads: the cluster at %s is read group by group for "
                            "%.0f s: %s", conf.get("bootstrap.servers", "?"), REFUSED_HOLD_S,
                            exc)
                with self.lock:
                    self.refused[name] = (now, str(exc))
                return None
            if self.on_change is not None:
                made.on_change = partial(self._changed, made.key)
            with self.lock:
                self.readers[name] = made
                self.refused.pop(name, None)
            log.info("cluster reads: the groups of the cluster at %s are read together",
                     conf.get("bootstrap.servers", "?"))
            if self.on_change is not None:
                threading.Thread(target=keep_reading, args=(made,), daemon=True,
                                 name="cluster-reads").start()
            return made

    def group(self, reader: ClusterReader, registration: Registration, now: float,
              describe_age_s: float, owner: str | None = None) -> GroupRead:
        """The group's answers, read now when the cluster's read is due (every group) or the
        group's own are not fresh enough (this group alone)."""
        if owner is not None:
            with self.lock:
                self.owners[owner] = (reader.key, registration.group_id)
        reader.register(registration, now)
        reader.refresh(now)
        held = reader.group(registration.group_id)
        if not serves(held, now, describe_age_s):
            reader.read(now, only=[registration.group_id])
            held = reader.group(registration.group_id)
        return held

    def _changed(self, cluster: str, groups: frozenset[str]) -> None:
        """Tell `on_change` the owners of `groups` of the cluster `cluster` (its reader's
        key). Never raises: a read goes on whatever its listener does."""
        with self.lock:
            owners = frozenset(uid for uid, (k, group_id) in self.owners.items()
                               if k == cluster and group_id in groups)
        if not owners or self.on_change is None:
            return
        try:
            self.on_change(owners)
        except Exception as exc:  # the passes come at their pace all the same
            log.warning("cluster reads: telling %d changed groups failed: %r", len(owners), exc)

    def forget(self, owner: str) -> None:
        """The ConsumerGroup `owner` (its uid) is deleted: its group is no longer read."""
        with self.lock:
            found = self.owners.pop(owner, None)
            reader = self.readers.get(found[0]) if found is not None else None
        if reader is not None and found is not None:
            reader.forget(found[1])

    def _close_idle(self, now: float) -> None:
        with self.lock:
            idle = [k for k, at in self.used.items() if now - at > IDLE_CLOSE_S]
            closing = [self.readers.pop(k) for k in idle if k in self.readers]
            for k in idle:
                self.used.pop(k, None)
        for reader in closing:
            reader.close()

    def close(self) -> None:
        with self.lock:
            closing = list(self.readers.values())
            self.readers.clear()
        for reader in closing:
            reader.close()


def keep_reading(reader: ClusterReader) -> None:
    """Read `reader`'s cluster whenever its read is due, whether or not a pass asks, until the
    reader is closed or its client broke (the next pass makes a new reader)."""
    while not reader.broken:
        wait = reader.next_read_in(time.monotonic())
        if reader.closed.wait(reader.interval_s if wait is None else wait + 0.01):
            return
        if wait is not None:
            reader.refresh(time.monotonic())


@dataclass
class GroupOffsets:
    """A group's committed offsets and its partitions' end offsets from its cluster's reads,
    for `lagreads.LagReads` (its `OffsetSource`): what the reads hold, or a read of this group
    now when that is older than the age asked for (once a pass: `now`)."""

    reader: ClusterReader
    group_id: str
    asked: float | None = None
    """When this group's offsets were last read alone (one read per pass at most)."""

    @property
    def interval_s(self) -> float:
        return self.reader.interval_s

    def _read(self, now: float) -> None:
        if self.asked != now:
            self.asked = now
            self.reader.read(now, only=[self.group_id], offsets=[self.group_id])

    def committed(self, now: float, max_age: float) -> tuple[dict[TP, int], float] | None:
        """The group's committed offsets and when they were read (None: never)."""
        held = self.reader.group(self.group_id).committed
        if held is None or (held.at < now and now - held.at >= max_age):
            self._read(now)
            held = self.reader.group(self.group_id).committed
        return None if held is None else (dict(held.offsets), held.at)

    def ends(self, tps: Iterable[TP], now: float,
             max_age: float) -> dict[TP, tuple[float, int]]:
        """The end offset of each of `tps` that has one, with when it was read."""
        wanted = list(tps)
        held: Mapping[TP, tuple[float, int]] = self.reader.group(self.group_id).ends
        if any(tp not in held or (held[tp][0] < now and now - held[tp][0] >= max_age)
               for tp in wanted):
            self._read(now)
            held = self.reader.group(self.group_id).ends
        return {tp: held[tp] for tp in wanted if tp in held}
