"""Running the passes: one daemon's slot per ConsumerGroup, the worker threads the passes run
in, and when each group may run one (`Runner`). `handlers` is Kopf's face over it: it keeps the
indexes and the daemons, and asks the runner for each pass.

A pass is due when `handlers` wakes the group's slot (its spec, a member pod or a child
changed; its Kafka group's answer in its cluster's batched reads changed: `Runner.wake_owners`),
when the previous pass asked to look again, and otherwise after `RESYNC_S` (10 s) while the
group is busy, or `REST_RESYNC_S` (60 s) once a pass found it at rest (`decisions.pace`).

Cheap at scale, and fair: the passes run in a bounded thread pool (`WORKERS`), and one Kafka
cluster's groups take at most `PER_CLUSTER` of its workers, so a slow or dead cluster does not
delay the groups of the others (a cluster is known by its id once read, before by its normalized
address set, `decisions.clusters`: two spellings of one cluster share its workers).

Sharded, a slot waits for the hand-off from the shard that held its group before it runs passes
(`Runner.turn`, `decisions.shards.handoff`), reads its group back every `OWNERSHIP_CHECK_S` to
catch a move its watch never said (`Runner.check`), and on leaving clears `status.shard` and
forgets the group (`Runner.let_go`); a pass that waited for a worker while its group moved does
not run (`Runner.run`). A deleted group's last pass is awaited, for at most `RELEASE_WAIT_S`,
before what it left on the broker is set back (`Runner.release`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from staticfleet import apply, metrics, service
from staticfleet.decisions import pace, shards
from staticfleet.decisions.snapshot import Claimant
from staticfleet.memory import Memory

Key = tuple[str, str]
log = logging.getLogger("staticfleet")

RESYNC_S = float(os.environ.get("STATICFLEET_RESYNC_SECONDS", "10"))
REST_RESYNC_S = max(RESYNC_S, float(os.environ.get("STATICFLEET_REST_RESYNC_SECONDS", "60")))
HANDOFF_GRACE_S = float(os.environ.get("STATICFLEET_SHARD_HANDOFF_SECONDS",
                                       str(shards.HANDOFF_GRACE_S)))
OWNERSHIP_CHECK_S = float(os.environ.get("STATICFLEET_SHARD_CHECK_SECONDS",
                                         str(shards.OWNERSHIP_CHECK_S)))
RELEASE_WAIT_S = 30.0
"""How long a deletion waits for the group's last pass (its thread) before it sets back what
the group left on the broker."""
WORKERS = int(os.environ.get("STATICFLEET_WORKERS", "16"))
PER_CLUSTER = max(1, WORKERS // 2)


@dataclass(eq=False)
class Slot:
    """One daemon's hold on one ConsumerGroup: its wake-up, whether the group left this
    operator's watch, and how far the handover from another shard is."""

    uid: str
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    left: bool = False
    acting: bool = False
    """This daemon passed the handover and runs passes."""
    waiting_since: float | None = None
    in_pass: bool = False
    checked_at: float | None = None
    """When the group was last read back from the API server (`Runner.check`)."""
    resting: bool = False
    """The last pass found the group at rest (`decisions.pace`)."""


@dataclass
class Runner:
    """Runs passes in worker threads; wakes the daemons of groups whose pass is due."""

    clients: service.Clients
    memory: Memory = field(default_factory=Memory)
    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(WORKERS, thread_name_prefix="reconcile"))
    slots: dict[Key, Slot] = field(default_factory=dict)
    seen: dict[Key, tuple[Any, ...]] = field(default_factory=dict)
    clusters: dict[str, asyncio.Semaphore] = field(default_factory=dict)
    loop: asyncio.AbstractEventLoop | None = None
    """The daemons' event loop (known once one started), where `wake_owners` wakes them."""
    passing: dict[str, Future[Any]] = field(default_factory=dict)
    """The pass under way of each group (by uid), until its thread is done."""

    @property
    def shard(self) -> str | None:
        shard = self.clients.settings.shard
        return shard.name if shard is not None else None

    def enter(self, key: Key, uid: str) -> Slot:
        """The slot of a daemon starting for the group `key` (a daemon of an earlier visit of
        the group may still be finishing its pass: it keeps its own slot)."""
        self.loop = asyncio.get_running_loop()
        slot = self.slots[key] = Slot(uid)
        return slot

    def leave(self, key: Key, slot: Slot) -> None:
        if self.slots.get(key) is slot:
            del self.slots[key]
            self.seen.pop(key, None)

    def wake(self, key: Key) -> None:
        slot = self.slots.get(key)
        if slot is not None:
            slot.wake.set()

    def wake_owners(self, uids: frozenset[str]) -> None:
        """Wake the daemons of the ConsumerGroups `uids` (their Kafka group changed). From any
        thread: the cluster reads' own call it."""
        loop = self.loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the operator stops
            loop.call_soon_threadsafe(self._wake_owners, uids)

    def _wake_owners(self, uids: frozenset[str]) -> None:
        for slot in self.slots.values():
            if slot.uid in uids:
                slot.wake.set()

    def gone(self, key: Key, uid: str) -> None:
        """The group left this operator's watch (relabelled to another shard, or deleted): its
        daemon ends after the pass under way."""
        slot = self.slots.get(key)
        if slot is not None and slot.uid == uid:
            slot.left = True
            slot.wake.set()

    def turn(self, slot: Slot, body: Mapping[str, Any], now: float) -> shards.Handoff:
        """Whether the daemon may run passes yet (`decisions.shards.handoff`), once it may,
        for good."""
        if slot.acting:
            return shards.Handoff(act=True)
        recorded = (body.get("status") or {}).get("shard")
        decision = shards.handoff(self.shard, recorded, slot.waiting_since, now,
                                  HANDOFF_GRACE_S)
        if decision.act:
            slot.acting, slot.waiting_since = True, None
        elif slot.waiting_since is None:
            slot.waiting_since = now
        return decision

    async def check(self, slot: Slot, body: Mapping[str, Any], now: float) -> None:
        """Sharded, every `OWNERSHIP_CHECK_S`: read the group back and mark the slot left when
        this shard no longer owns it (`decisions.shards.still_owned`). The watch's DELETED
        event says so at once; this catches the one a relisted watch never sends."""
        if self.clients.settings.shard is None:
            return
        if slot.checked_at is None:
            slot.checked_at = now
        if now - slot.checked_at < OWNERSHIP_CHECK_S:
            return
        slot.checked_at = now
        loop = asyncio.get_running_loop()
        try:
            fresh = await loop.run_in_executor(self.pool, self.clients.kube.read_group, body)
        except (apply.ApplyError, RuntimeError):
            return  # the next check asks again
        why = shards.still_owned(self.clients.settings.shard, fresh)
        if why is not None:
            meta = body["metadata"]
            log.warning("%s/%s: no longer this shard's (%s) though its watch did not say so: "
                        "its passes stop", meta["namespace"], meta["name"], why)
            slot.left = True

    async def let_go(self, body: Mapping[str, Any], slot: Slot) -> None:
        """The daemon ended: clear `status.shard` if its last pass is over (a pass whose
        thread still runs has not let go), and forget the group if it left the watch; neither
        when the group came back meanwhile and a newer daemon holds it."""
        meta = body["metadata"]
        newer = self.slots.get((meta["namespace"], meta["name"]))
        if newer is not None and newer.uid == slot.uid:
            return
        loop = asyncio.get_running_loop()
        try:
            if self.shard is not None and slot.acting and not slot.in_pass:
                await loop.run_in_executor(
                    self.pool, self.clients.kube.release_shard, body, self.shard)
        except (apply.ApplyError, RuntimeError) as exc:  # RuntimeError: the pool is closed
            log.warning("%s/%s: could not clear status.shard: %s", meta["namespace"],
                        meta["name"], exc)
        if slot.left:
            log.info("%s/%s left the ConsumerGroups this operator watches (its labels changed, "
                     "or it is deleted): forgotten; its member pods are left as they are",
                     meta["namespace"], meta["name"])
            self.forget(meta["namespace"], meta["name"], slot.uid)

    def forget(self, namespace: str, name: str, uid: str) -> None:
        metrics.forget(namespace, name)
        self.memory.forget(uid)
        self.clients.forget(uid)

    async def run(self, body: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
                  claimants: tuple[Claimant, ...] = (), slot: Slot | None = None) -> pace.Pace:
        """One pass; returns when the next one is due (`decisions.pace.next_pass`). A pass
        whose group left this operator's watch while it waited for one of its cluster's
        workers (`slot.left`: moved to another shard, which acts once the hand-off grace is
        over) does not run: it would steer a group another shard now steers."""
        cluster = self.clients.admins.identity(
            str(((body.get("spec") or {}).get("kafka") or {}).get("bootstrapServers") or ""))
        slots = self.clusters.setdefault(cluster, asyncio.Semaphore(PER_CLUSTER))
        with metrics.RECONCILE_QUEUE.track_inprogress():  # the passes waiting for a slot
            await slots.acquire()
        if slot is not None and slot.left:
            slots.release()
            return pace.Pace(0.0, "the group left this operator's watch")
        try:
            uid = str((body.get("metadata") or {}).get("uid"))
            future = self.pool.submit(service.reconcile, body, pods, self.clients, self.memory,
                                      datetime.now(UTC), claimants)
            self.passing[uid] = future  # its thread runs on when the daemon is cancelled
            future.add_done_callback(lambda done: self._passed(uid, done))
            plan = await asyncio.wrap_future(future)
        finally:
            slots.release()
        return pace.next_pass(plan, RESYNC_S, REST_RESYNC_S)

    def _passed(self, uid: str, done: Future[Any]) -> None:
        if self.passing.get(uid) is done:
            del self.passing[uid]

    async def release(self, body: Mapping[str, Any]) -> str | None:
        """The group is being deleted: once its last pass is over (a cancelled daemon's thread
        may still run one, for at most `RELEASE_WAIT_S`), set back what it left on the broker
        (`service.release`)."""
        loop = asyncio.get_running_loop()
        last = self.passing.get(body["metadata"]["uid"])
        if last is not None:
            with contextlib.suppress(Exception):  # its timeout, or the pass's own failure
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(last)),
                                       RELEASE_WAIT_S)
        return await loop.run_in_executor(self.pool, service.release, body, self.clients,
                                          self.memory)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.clients.close()
