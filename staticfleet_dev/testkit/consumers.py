"""Group members without the runtime, each a confluent-kafka consumer polled in a thread of its
own: a static member (`PolledMember`) for the tests that need one in a group, and a consumer of
a ConsumerGroup's group.id that is none of its members (`ForeignConsumer`)."""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import Consumer


class PolledMember:
    """A static member (`instance`, default `<group>-0`) of `group` on `topic`, polled in a
    thread so that it stays in the group while the test asks. Its member id is read in that
    thread too (`member_id`): librdkafka's memberid() called from another thread while one
    polls hung a test, then aborted it. `protocol` "consumer" joins by KIP-848, where the
    session timeout is the group's; a classic member's is `session_ms`."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str = "classic",
                 instance: str | None = None, session_ms: int = 20000) -> None:
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group,
                                "group.instance.id": instance or f"{group}-0", "log_level": 3}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf["session.timeout.ms"] = session_ms
        self.group, self.instance = group, str(conf["group.instance.id"])
        self.consumer = Consumer(conf)
        self.consumer.subscribe([topic])
        self.member_id = ""
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.consumer.poll(0.2)
            self.member_id = self.consumer.memberid() or ""

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.consumer.close()


class ForeignConsumer:
    """A plain consumer of `group` (no group.instance.id: a dynamic member, librdkafka's own
    client id), polled in a thread so that it stays in the group until `close`; what the
    rebalance ledger names `foreign_member`. `protocol` "consumer" joins by KIP-848."""

    def __init__(self, bootstrap: str, group: str, topic: str,
                 protocol: str = "classic") -> None:
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group,
                                "log_level": 3}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf["session.timeout.ms"] = 10000
        self.consumer = Consumer(conf)
        self.consumer.subscribe([topic])
        self.assigned: list[Any] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.consumer.poll(0.2)
            self.assigned = list(self.consumer.assignment())

    def close(self) -> None:
        """Leave the group (LeaveGroup) and stop; a second call does nothing."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.thread.join(10)
        self.consumer.close()
