"""A steady stream into a topic and a full read of the sink topic: "no record lost" is
checked by unique ids, so duplicates (at-least-once) are allowed but gaps are not."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer, TopicPartition


@dataclass
class SteadyProducer:
    """Produces `rate` records per second with unique values until stopped."""

    bootstrap: str
    topic: str
    rate: float = 100.0
    keys: int = 32
    produced: list[bytes] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> SteadyProducer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                             "linger.ms": 5})
        run = uuid.uuid4().hex[:6]
        n = 0
        started = time.monotonic()

        def acked(err: object, msg: object) -> None:
            if err is not None:
                self.failed.append(str(err))

        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while n < due:
                value = f"{run}-{n:08d}".encode()
                producer.produce(self.topic, value=value, key=f"k{n % self.keys}".encode(),
                                 on_delivery=acked)
                self.produced.append(value)
                n += 1
            producer.poll(0)
            time.sleep(0.01)
        left = producer.flush(30)
        if left:
            self.failed.append(f"{left} records not delivered")

    def stop(self) -> int:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        return len(self.produced)


def read_all(bootstrap: str, topic: str, timeout: float = 30.0) -> list[bytes]:
    """Every value currently in `topic` (all partitions, from the beginning)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = [TopicPartition(topic, p) for p in md.partitions]
        ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in parts}
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        values: list[bytes] = []
        seen = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + timeout
        while any(seen[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is None:
                    values.append(msg.value())
                    seen[msg.partition()] = msg.offset() + 1
        return values
    finally:
        consumer.close()


def committed_lag(bootstrap: str, group: str, topic: str) -> int:
    """Records of `topic` not yet committed by `group`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = [TopicPartition(topic, p) for p in md.partitions]
        committed = consumer.committed(parts, timeout=10)
        lag = 0
        for tp in committed:
            end = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition),
                                                 timeout=10)[1]
            lag += end - max(tp.offset, 0)
        return lag
    finally:
        consumer.close()
