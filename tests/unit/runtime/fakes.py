"""Plain stand-ins for confluent_kafka.Message, for the pure parts of the runtime."""

from __future__ import annotations

from dataclasses import dataclass, field


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
