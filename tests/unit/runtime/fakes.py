"""Plain stand-ins for confluent_kafka.Message, for the pure parts of the runtime, and for
kafka-python's client answering from a script."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Rec:
    t: str
    p: int
    o: int
    k: bytes | None = b"k"
    v: bytes | None = b"v"
    ts: int = 1_700_000_000_000
    h: list[tuple[str, bytes | None]] | None = field(default=None)

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def topic(self) -> str:
        return self.t

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def timestamp(self) -> tuple[int, int]:
        return (1, self.ts) if self.ts >= 0 else (0, -1)

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self.h


def recs(topic: str, partition: int, offsets: range, value: bytes = b"v") -> list[Rec]:
    return [Rec(topic, partition, o, v=value) for o in offsets]


# -- kafka-python's client, scripted (the static leave and the group view) --------------------

NEVER_ANSWERED = object()
"""A script step: the request's future is never done."""


class ScriptExhausted(BaseException):
    """More requests than the script has answers for: not an Exception, so that the code under
    test's own `except Exception` cannot take it for a failed try and ask again forever."""


@dataclass
class Future:
    """What kafka-python's KafkaClient.send returns, already settled (or never)."""

    value: Any = None
    exception: BaseException | None = None
    is_done: bool = True

    def failed(self) -> bool:
        return self.exception is not None


def scripted_send(script: list[Any], request: Any) -> Future:
    """The next answer of `script` to `request`, as KafkaClient.send gives it: a value, an
    exception, or NEVER_ANSWERED."""
    if not script:
        raise ScriptExhausted(f"no answer scripted for {type(request).__name__}")
    step = script.pop(0)
    if step is NEVER_ANSWERED:
        return Future(is_done=False)
    if isinstance(step, BaseException):
        return Future(exception=step)
    return Future(value=step)
