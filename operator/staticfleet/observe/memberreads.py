"""The members' `/status` reads of every group, on one set of worker threads shared fairly.

Every pass reads the `/status` of each running member of its group (`service.gather`). The
members' images are their teams', so a read can take its whole deadline
(`memberhttp.STATUS_DEADLINE_S`): a bug in one image, repeated across a group of many members,
must not take the workers every other group's passes read through. So:

- each group's reads wait in a queue of their own, and a free worker takes the next read from
  the next group in turn (round robin), never more than `per_group` of one group's at once;
- a pass waits for its reads at most `budget_s`; a read still queued then is not made (its
  member counts as not read this pass, `NOT_READ`), one under way ends by its own deadline.

One group's slow members then cost that group its own reads, and every other group at most
one read's deadline of waiting for a worker.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from staticfleet.decisions.members.slow import NOT_READ
from staticfleet.observe.memberhttp import STATUS_DEADLINE_S, StatusRead

WORKERS = 8
PER_GROUP = 2
"""At most this many of one group's reads at once: a quarter of the workers."""
BUDGET_S = 2 * STATUS_DEADLINE_S + 1.0
"""How long a pass waits for its members' reads: its own reads' deadline, with room for one
other group's read on every worker before them."""

Read = Callable[[str], StatusRead]


@dataclass(eq=False)
class _Job:
    uid: str
    ip: str
    done: threading.Event = field(default_factory=threading.Event)
    result: StatusRead | None = None
    read_at: datetime | None = None


class MemberReads:
    """The shared workers (started on first use, `close`d at cleanup)."""

    def __init__(self, read: Read, workers: int = WORKERS, per_group: int = PER_GROUP) -> None:
        self._read = read
        self._workers = workers
        self._per_group = per_group
        self._cv = threading.Condition()
        self._queues: dict[str, deque[_Job]] = {}
        self._busy: dict[str, int] = {}
        self._turn: deque[str] = deque()
        """Groups with queued reads, in the order they get the next free worker."""
        self._threads: list[threading.Thread] = []
        self._closed = False

    def read(self, group: str, targets: Mapping[str, str],
             budget_s: float = BUDGET_S) -> dict[str, tuple[StatusRead, datetime]]:
        """Each target's read (pod uid -> IP), by pod uid, with when it was answered; a
        target not read within `budget_s` is `NOT_READ`, or slow when its read was under way."""
        jobs = [_Job(uid, ip) for uid, ip in targets.items()]
        if not jobs:
            return {}
        with self._cv:
            if self._closed:
                return {}
            self._start()
            self._queues.setdefault(group, deque()).extend(jobs)
            if group not in self._turn:
                self._turn.append(group)
            self._cv.notify_all()
        deadline = time.monotonic() + budget_s
        for job in jobs:
            if not job.done.wait(max(0.0, deadline - time.monotonic())):
                break
        out: dict[str, tuple[StatusRead, datetime]] = {}
        with self._cv:
            queue = self._queues.get(group)
            for job in jobs:
                if job.done.is_set() and job.result is not None and job.read_at is not None:
                    out[job.uid] = (job.result, job.read_at)
                    continue
                if queue is not None and job in queue:
                    queue.remove(job)
                    out[job.uid] = (StatusRead(None, NOT_READ), datetime.now(UTC))
                else:
                    out[job.uid] = (StatusRead(None, f"no answer within {budget_s:g} s"),
                                    datetime.now(UTC))
            self._tidy(group)
        return out

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._queues.clear()
            self._turn.clear()
            self._cv.notify_all()

    def _start(self) -> None:
        while len(self._threads) < self._workers:
            thread = threading.Thread(target=self._work, daemon=True,
                                      name=f"member-status-{len(self._threads)}")
            self._threads.append(thread)
            thread.start()

    def _next(self) -> tuple[str, _Job] | None:
        """The next read, from the first group in turn that has one queued and room (held
        under the lock); that group goes to the end of the turn."""
        for _ in range(len(self._turn)):
            group = self._turn[0]
            self._turn.rotate(-1)
            queue = self._queues.get(group)
            if queue and self._busy.get(group, 0) < self._per_group:
                self._busy[group] = self._busy.get(group, 0) + 1
                return group, queue.popleft()
        return None

    def _tidy(self, group: str) -> None:
        if not self._queues.get(group) and not self._busy.get(group):
            self._queues.pop(group, None)
            self._busy.pop(group, None)
            if group in self._turn:
                self._turn.remove(group)

    def _work(self) -> None:
        while True:
            with self._cv:
                picked = self._next()
                while picked is None:
                    if self._closed:
                        return
                    self._cv.wait()
                    picked = self._next()
            group, job = picked
            try:
                job.result = self._read(job.ip)
            except Exception as exc:  # a read never takes a worker down
                job.result = StatusRead(None, f"the read failed: {exc}")
            job.read_at = datetime.now(UTC)
            job.done.set()
            with self._cv:
                self._busy[group] -= 1
                self._tidy(group)
                self._cv.notify_all()
