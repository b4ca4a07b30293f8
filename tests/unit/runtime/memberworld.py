"""The poll loop's test harness (tests/unit/runtime/test_member.py, test_predecessor.py): a
scripted consumer and broker view, a clock that moves only when the loop waits, and the steps
of a script. See test_member.py's docstring."""

from __future__ import annotations

import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from consumer_runtime.config import RuntimeConfig, parse_config
from consumer_runtime.member import Member
from consumer_runtime.membership import GROUP_METADATA_MAGIC
from consumer_runtime.metrics import Telemetry
from consumer_runtime.processing import Outcome
from consumer_runtime.records import Batch
from consumer_runtime.staticleave import LeaveResult
from member_contract import LEAVE_LEFT
from tests.unit.runtime.fakes import Rec
from tests.unit.runtime.support import base

TOPIC = "orders"
INSTANCE = "orders-0"
P0, P1 = (TOPIC, 0), (TOPIC, 1)
START = 1000.0
"""The clock's reading when the process started (`Telemetry.started_at`)."""
PROCESS_START = 1_700_000_000.0
"""The process's start in unix seconds: /status times are this plus the clock's advance."""
MAX_CALLS = 50_000
MAX_SECONDS = 3600.0
"""A script that never ends the run fails instead of hanging the test."""


def wall(t: float) -> float:
    return round(PROCESS_START + t - START, 3)


class Clock:
    """Monotonic seconds for the loop; `advance` is also the loop's `rest`. `at(t, fn)` runs fn
    once the clock passed t (an HTTP request that comes while the loop rests)."""

    def __init__(self) -> None:
        self.now = START
        self.timers: list[tuple[float, Callable[[], object]]] = []

    def __call__(self) -> float:
        return self.now

    def at(self, due: float, fn: Callable[[], object]) -> None:
        self.timers.append((due, fn))

    def advance(self, seconds: float) -> bool:
        self.now += max(0.0, seconds)
        if self.now - START > MAX_SECONDS:
            raise AssertionError(f"the loop ran {MAX_SECONDS:.0f} s of its clock without ending")
        for timer in [t for t in self.timers if t[0] <= self.now]:
            self.timers.remove(timer)
            timer[1]()
        return False


@dataclass(frozen=True)
class Msg(Rec):
    """A record as consume() returns it."""

    def error(self) -> None:
        return None


def msgs(tp: tuple[str, int], offsets: range) -> list[Msg]:
    return [Msg(tp[0], tp[1], o) for o in offsets]


Step = Callable[["World", "ScriptedConsumer"], "list[Msg] | None"]
"""One consume() call's part of the script: the records it returns ([] for none), or None to be
played again at the next call (a step that waits for the member)."""


class World:
    """The broker and the operator as the member meets them: the script, the consumers the
    member made, the broker's view of the group (`groupview.GroupView`'s interface, answering
    as scripted), and a log of what the member did to them (clock time, what, detail)."""

    def __init__(self, clock: Clock, steps: Iterable[Step],
                 taken: Iterable[bool | None] = (), held: Iterable[set[Any] | None] = ()) -> None:
        self.clock = clock
        self.steps: deque[Step] = deque(steps)
        self.consumers: list[ScriptedConsumer] = []
        self.taken_answers: deque[bool | None] = deque(taken)
        self.held_answers: deque[set[Any] | None] = deque(held)
        self.asked: list[tuple[float, str]] = []
        """(clock time, question) of each look at the group."""
        self.events: list[tuple[float, str, Any]] = []
        self.calls = 0
        self.member: Member | None = None

    def log(self, what: str, detail: Any = None) -> None:
        self.events.append((self.clock(), what, detail))

    def new_consumer(self) -> ScriptedConsumer:
        consumer = ScriptedConsumer(self, f"member-{len(self.consumers) + 1}")
        self.consumers.append(consumer)
        return consumer

    def play(self, consumer: ScriptedConsumer) -> list[Msg]:
        self.calls += 1
        if self.calls > MAX_CALLS:
            raise AssertionError(f"{MAX_CALLS} polls without the run ending; script left: "
                                 f"{len(self.steps)} steps")
        if not self.steps:
            return []
        got = self.steps[0](self, consumer)
        if got is None:
            return []
        self.steps.popleft()
        return got

    def whats(self) -> list[str]:
        return [what for _, what, _ in self.events]

    def first(self, what: str) -> float:
        return next(t for t, w, _ in self.events if w == what)

    # -- the broker's view of the group -------------------------------------------------------

    def taken_by_another(self, instance_id: str | None, member_id: str,
                         timeout: float) -> bool | None:
        assert (instance_id, member_id) == (INSTANCE, "member-1"), "asked about the drained one"
        self.asked.append((self.clock(), "taken"))
        if not self.taken_answers:
            raise AssertionError("the member asked whether it was replaced more often than "
                                 "scripted")
        return self.taken_answers.popleft()

    def held(self, instance_id: str | None, member_id: str, timeout: float) -> set[Any] | None:
        assert (instance_id, member_id) == (INSTANCE, "member-1"), "asked about the leaving one"
        self.asked.append((self.clock(), "held"))
        if not self.held_answers:
            raise AssertionError("the member asked what it holds more often than scripted")
        return self.held_answers.popleft()


class ScriptedConsumer:
    """Stands in for `confluent_kafka.Consumer`: the calls the member makes, each logged. As
    librdkafka does, it calls the revoke callback inside the first consume() after an
    unsubscribe or a change of subscription."""

    def __init__(self, world: World, member_id: str) -> None:
        self.world = world
        self.member_id = member_id
        self.subscription: list[str] = []
        self.callbacks: dict[str, Callable[..., None]] = {}
        self.assigned: set[tuple[str, int]] = set()
        self.generation = 0
        """The group generation each assign takes (librdkafka's, as the metadata carries it)."""
        self.revoke_due = False
        self.closed = False
        self.timeouts: list[tuple[int, float]] = []
        """(the world's poll count, the timeout) of each consume() call."""

    def subscribe(self, topics: list[str], on_assign: Callable[..., None],
                  on_revoke: Callable[..., None], on_lost: Callable[..., None]) -> None:
        self.revoke_due = bool(self.subscription) and topics != self.subscription
        self.subscription = list(topics)
        self.callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        self.world.log("subscribe", (self.member_id, tuple(topics)))

    def unsubscribe(self) -> None:
        self.subscription, self.revoke_due = [], True
        self.world.log("unsubscribe", self.member_id)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Msg]:
        assert not self.closed, "consume() after close()"
        if self.revoke_due and self.assigned:
            gone, self.assigned, self.revoke_due = sorted(self.assigned), set(), False
            self.world.log("revoked", gone)
            self.callbacks["revoke"](self, [TopicPartition(t, p) for t, p in gone])
        self.timeouts.append((self.world.calls + 1, timeout))
        got = self.world.play(self)
        if not got:
            self.world.clock.advance(timeout)
        return got

    def assign(self, *tps: tuple[str, int]) -> None:
        self.assigned |= set(tps)
        self.generation += 1
        self.world.log("assigned", (self.member_id, sorted(tps)))
        self.callbacks["assign"](self, [TopicPartition(t, p) for t, p in tps])

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.world.log("pause", sorted((p.topic, p.partition) for p in partitions))

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.world.log("resume", sorted((p.topic, p.partition) for p in partitions))

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> None:
        assert asynchronous is False, "the member commits synchronously"
        self.world.log("commit", {(p.topic, p.partition): p.offset for p in offsets})

    def memberid(self) -> str:
        return self.member_id

    def consumer_group_metadata(self) -> bytes:
        """librdkafka's serialized metadata: the magic, the generation (native int32), ids."""
        return (GROUP_METADATA_MAGIC + struct.pack("=i", self.generation)
                + b"group\0" + self.member_id.encode() + b"\0\0")

    def get_watermark_offsets(self, partition: TopicPartition, cached: bool = False
                              ) -> tuple[int, int]:
        """Every assigned partition has answered a fetch: (-1001, -1001) for no other."""
        assert cached, "the member asks librdkafka's cache only, never the broker"
        known = (partition.topic, partition.partition) in self.assigned
        return (0, 0) if known else (-1001, -1001)

    def close(self) -> None:
        self.closed = True
        self.world.log("close", self.member_id)


# -- steps ---------------------------------------------------------------------------------------

def assign(*tps: tuple[str, int]) -> Step:
    def step(world: World, consumer: ScriptedConsumer) -> list[Msg]:
        consumer.assign(*tps)
        return []
    return step


def fetch(records: list[Msg], took: float = 0.0) -> Step:
    """A poll that returns `records` after `took` seconds."""
    def step(world: World, consumer: ScriptedConsumer) -> list[Msg]:
        world.clock.advance(took)
        world.log("fetched", len(records))
        return records
    return step


def until(check: Callable[[Member], bool]) -> Step:
    """Polls return nothing until `check(member)` holds."""
    def step(world: World, consumer: ScriptedConsumer) -> list[Msg] | None:
        assert world.member is not None
        return [] if check(world.member) else None
    return step


def do(action: Callable[[Member], object]) -> Step:
    """The operator (or the test) acts, from outside the loop, during this poll."""
    def step(world: World, consumer: ScriptedConsumer) -> list[Msg]:
        assert world.member is not None
        action(world.member)
        return []
    return step


def stop() -> Step:
    return do(lambda m: m.request_stop())


class Handler:
    """The batch worker's `handle`: every batch processed at once, or held until `release()`."""

    def __init__(self, gated: bool = False) -> None:
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.batches: list[int] = []
        self.objects: list[tuple[int, Batch]] = []

    def __call__(self, batch_id: int, records: Batch) -> Outcome:
        assert self.gate.wait(10), "a gated batch was never released"
        self.batches.append(len(records))
        self.objects.append((batch_id, records))
        return Outcome(records=len(records), dead_lettered=0, attempts=1, seconds=0.01)

    def release(self) -> None:
        self.gate.set()


class FakeLeave:
    """Stands in for `staticleave.StaticLeave`: a KIP-848 static leave the coordinator
    confirms at the first try."""

    def __init__(self) -> None:
        self.confirmed: list[str] = []

    def warm(self) -> None:
        pass

    def confirm(self, member_id: str, instance_id: str, deadline: float) -> LeaveResult:
        self.confirmed.append(member_id)
        return LeaveResult(LEAVE_LEFT, tries=1, seconds=0.008)

    def close(self) -> None:
        pass


class Scripted(Member):
    """The member with the world's consumer and group view."""

    def __init__(self, world: World, config: RuntimeConfig, telemetry: Telemetry,
                 handle: Handler,
                 prepare: Callable[[int, Batch], object] | None = None) -> None:
        self.world = world
        world.member = self
        super().__init__(config, telemetry, handle, clock=world.clock, rest=world.clock.advance,
                         prepare=prepare)

    def _new_consumer(self) -> Any:
        return self.world.new_consumer()

    def _group_view(self) -> Any:
        return self.world


def runtime_config(protocol: str = "classic", max_records: int = 5) -> RuntimeConfig:
    raw = base()
    raw["processing"]["batch"]["maxRecords"] = max_records
    if protocol == "consumer":
        raw["consumer"] = {"group.protocol": "consumer", "max.poll.interval.ms": 300000}
    return parse_config(raw, {"STATICFLEET_GROUP_INSTANCE_ID": INSTANCE})


def setup(steps: Iterable[Step], *, taken: Iterable[bool | None] = (),
          held: Iterable[set[Any] | None] = (), protocol: str = "classic",
          gated: bool = False,
          prepare: Callable[[int, Batch], object] | None = None
          ) -> tuple[Scripted, World, Handler]:
    clock = Clock()
    world = World(clock, steps, taken, held)
    config = runtime_config(protocol)
    telemetry = Telemetry(namespace="ns", group="orders", member=INSTANCE, instance_id=INSTANCE,
                          session_timeout_s=None if protocol == "consumer" else 30.0,
                          max_poll_interval_s=300.0, process_start=PROCESS_START,
                          started_at=START, max_records=5)
    handler = Handler(gated)
    member = Scripted(world, config, telemetry, handler, prepare)
    if protocol == "consumer":
        member.leave_client = FakeLeave()  # type: ignore[assignment]
    return member, world, handler


def status(member: Member) -> dict[str, Any]:
    return member.telemetry.status(member.clock())
