"""A KIP-848 static member's leave, confirmed by the group's coordinator.

A static member of a group.protocol consumer group leaves for a while with a heartbeat at member
epoch -2: the coordinator keeps its instance id's assignment for the session timeout, and a new
process with the same group.instance.id takes it over at once, with no new group epoch (Kafka
4.1, GroupMetadataManager: consumerGroupStaticMemberGroupLeave, then replaceMember). Only
after that leave does the coordinator let the new process in; while the old registration is
active it refuses it with UNRELEASED_INSTANCE_ID until the session expires, and the expiry
fences the old member with a new group epoch: a rebalance.

librdkafka's close() sends that leave once and does not know whether it landed: a refused
connection or a coordinator that is moving ends the request with a local error, written only to
its debug log, and close() returns no error (rdkafka_cgrp.c, the ConsumerGroupHeartbeat leave
handler; no retry, no new coordinator lookup). A drain as the coordinator's broker stops loses
the leave, and its replacement waits out the session (CI at c51aa49: 46.4 s, then two
rebalances).

So after close() the member sends the same leave itself, for the closed consumer's member id
(librdkafka makes it, KIP-1082, and it is in the coordinator's records), and asks again, a new
coordinator lookup each time, until the coordinator answers. Sending it twice is harmless: a
second leave of a member at epoch -2 writes the same record. The coordinator checks only that the
instance id is known and held by that member id (and the group's READ right), so the answer says
where the instance id stands (`outcome`). kafka-python carries the request (its client connects,
authenticates and negotiates versions); the message is Kafka's ConsumerGroupHeartbeat v1 and
the client's settings come from the consumer's librdkafka properties, both from the wire kit
(`kafkawire`), which the operator's reads use too. The same client (`GroupCoordinator`) asks
the coordinator who is in the group for `groupview.GroupView`: the member makes no librdkafka
admin request.

Nothing the leave meets escapes it: settings kafka-python cannot take are refused as the client
is made (StaticLeaveError), and any other failure, of the settings or of a try, is an
unconfirmed result that names it. Key material given as PEM text is read from memory, never
written to a file.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaClient
from kafka.protocol.find_coordinator import FindCoordinatorRequest

from kafkawire.messages import (
    COORDINATOR_MOVING,
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    NONE,
    UNKNOWN_MEMBER_ID,
    ConsumerGroupHeartbeat,
)
from kafkawire.settings import Unsupported, client_settings
from member_contract import (
    LEAVE_GONE,
    LEAVE_LEFT,
    LEAVE_TAKEN,
    LEAVE_UNCONFIRMED,
)
from member_contract.status import StaticLeave as StaticLeaveStatus

log = logging.getLogger(__name__)

LEAVE_STATIC_EPOCH = -2
"""The member epoch of a static member's temporary leave (KIP-848)."""

RETRY_S = (0.05, 0.1, 0.2, 0.5, 1.0)
"""Pauses between tries: a coordinator moves within a second or two after a broker stops, and
within the broker session timeout after one dies."""


def outcome(error_code: int, member_epoch: int) -> str | None:
    """Where the coordinator's answer to a static leave leaves the instance id; None: ask again
    (the coordinator is moving or loading)."""
    if error_code == NONE:
        return LEAVE_LEFT if member_epoch == LEAVE_STATIC_EPOCH else LEAVE_UNCONFIRMED
    if error_code == FENCED_INSTANCE_ID:
        return LEAVE_TAKEN
    if error_code in (UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND):
        return LEAVE_GONE
    if error_code in COORDINATOR_MOVING:
        return None
    return LEAVE_UNCONFIRMED


def retry_pause(tries: int) -> float:
    """Seconds to wait after the `tries`-th unanswered try."""
    return RETRY_S[min(tries, len(RETRY_S)) - 1]


@dataclass(frozen=True)
class LeaveResult:
    """What confirming a static leave came to: `outcome` (one of `LEAVE_OUTCOMES`), the
    tries, the seconds it took and the last try's error (empty when it had none)."""

    outcome: str
    tries: int
    seconds: float
    detail: str = ""

    def as_status(self) -> StaticLeaveStatus:
        """`staticLeave` in /status and in the drain's answer."""
        return {"outcome": self.outcome, "tries": self.tries,
                "ms": round(self.seconds * 1000.0, 1), "detail": self.detail or None}


StaticLeaveError = Unsupported
"""Connection settings the leave's client cannot take (the wire kit's `Unsupported`, a
ValueError): `<key>: <what>; <what to do>`."""


def static_leave_request(group_id: str, member_id: str, instance_id: str) -> Any:
    """The heartbeat of a static member's temporary leave (`messages.ConsumerGroupHeartbeat`
    v1); the fields a leave does not change are null (-1 for the rebalance timeout), as
    librdkafka sends them."""
    return ConsumerGroupHeartbeat(
        group_id, member_id, LEAVE_STATIC_EPOCH, instance_id, None, -1, None, None, None, None,
        {})


RECONNECT = {"reconnect_backoff_ms": 50, "reconnect_backoff_max_ms": 1000}
"""How soon the client connects again: a leave has a second or two to land."""


def client_config(props: Mapping[str, str], client_id: str) -> dict[str, Any]:
    """kafka-python's client settings for the consumer's connection properties (librdkafka
    names: bootstrap.servers, security.protocol, sasl.*, ssl.*), by the wire kit
    (`kafkawire.settings`); StaticLeaveError for what it cannot take."""
    return {**client_settings(props, client_id), **RECONNECT}


# -- a client of the group's coordinator ---------------------------------------------------------

class GroupCoordinator:
    """A kafka-python client for requests to one group's coordinator, which `groupview.GroupView`
    shares with the leave: `find` asks a broker where the coordinator is (kept until `moved`),
    `send` sends one request to a broker within a deadline, `reset` drops the connections after
    a failure so that the next request starts afresh.

    The constructor raises StaticLeaveError for settings the client cannot take (a SASL
    mechanism it lacks); any other failure of the settings (a key that does not load, a file
    that is missing) is kept in `unusable` and raised by `find`, so that no caller meets it
    where it does not expect an error."""

    def __init__(self, props: Mapping[str, str], group_id: str, client_id: str,
                 make_client: Callable[..., Any] = KafkaClient) -> None:
        self.group_id = group_id
        self.make_client = make_client
        self.client: Any = None
        self.coordinator: int | None = None
        self.config: dict[str, Any] = {}
        self.unusable = ""
        """Why the client's settings failed to load ("<error type>: <message>"); empty when
        they loaded."""
        try:
            self.config = client_config(props, client_id)
        except StaticLeaveError:
            raise
        except Exception as exc:
            self.unusable = f"{type(exc).__name__}: {exc}"

    def find(self, deadline: float) -> int:
        """The coordinator's node id: the one found last, else a FindCoordinator to the least
        loaded broker."""
        if self.unusable:
            raise StaticLeaveError(f"the client's settings: {self.unusable}")
        if self.client is None:
            # kafka-python's client connects and asks a broker's API versions as it is made
            # (api_version_auto_timeout_ms): no longer than the deadline allows.
            wait_ms = min(self.config.get("api_version_auto_timeout_ms", 5000),
                          _ms_left(deadline))
            self.client = self.make_client(**{**self.config,
                                              "api_version_auto_timeout_ms": wait_ms})
        if self.coordinator is None:
            node = self.client.least_loaded_node()
            if node is None:
                raise OSError("no broker reachable")
            answer = self.send(node, FindCoordinatorRequest[1](self.group_id, 0), deadline)
            if answer.error_code != NONE:
                raise OSError(f"FindCoordinator: error {answer.error_code}")
            self.coordinator = int(answer.coordinator_id)
        return self.coordinator

    def api_versions(self) -> Mapping[int, tuple[int, int]]:
        """The versions of each API the bootstrap broker takes (empty before `find`)."""
        versions = self.client.get_api_versions() if self.client is not None else None
        return versions or {}

    def send(self, node: int, request: Any, deadline: float) -> Any:
        """Send `request` to broker `node` and return its answer; OSError when none came by
        the deadline."""
        timeout_ms = _ms_left(deadline)
        if not self.client.await_ready(node, timeout_ms=timeout_ms):
            raise OSError(f"broker {node} not ready within {timeout_ms} ms")
        future = self.client.send(node, request)
        self.client.poll(timeout_ms=timeout_ms, future=future)
        if not future.is_done:
            raise OSError(f"no answer from broker {node} within {timeout_ms} ms")
        if future.failed():
            raise future.exception
        return future.value

    def moved(self) -> None:
        """The coordinator moved (or is loading): look it up again before the next request."""
        self.coordinator = None

    def reset(self) -> None:
        """Drop the client and the coordinator; never raises (a broken client: nothing kept)."""
        self.coordinator = None
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def close(self) -> None:
        self.reset()


def _ms_left(deadline: float) -> int:
    """Milliseconds until `deadline` (time.monotonic()), at least 1."""
    return max(1, int((deadline - time.monotonic()) * 1000))


# -- the leave -------------------------------------------------------------------------------------

class StaticLeave(GroupCoordinator):
    """One client for confirming a static member's leaves: `warm` connects and finds the
    coordinator ahead of the close (so the confirmation after it is one round trip), `confirm`
    sends the leave until the coordinator answers. Neither raises: whatever fails, `confirm`
    says so as an unconfirmed result with the error as its detail; the constructor raises only
    StaticLeaveError (see `GroupCoordinator`)."""

    def warm(self, timeout_s: float = 5.0) -> None:
        """Connect and find the coordinator now; errors are left for `confirm` to meet."""
        try:
            self.find(time.monotonic() + timeout_s)
        except Exception as exc:  # whatever it is, `confirm` meets it again and says it
            log.debug("static leave: warming up: %s", exc)

    def confirm(self, member_id: str, instance_id: str, deadline: float,
                sleep: Callable[[float], None] = time.sleep) -> LeaveResult:
        """Send the static leave of `member_id` until the coordinator says where `instance_id`
        stands, or `deadline` (time.monotonic()) passes. Never raises: a failure of any kind
        is an unconfirmed result that names it; settings that failed to load are one at once
        (no try can succeed)."""
        began = time.monotonic()
        if self.unusable:
            return LeaveResult(LEAVE_UNCONFIRMED, 0, 0.0,
                               f"the client's settings: {self.unusable}")
        try:
            return self._confirm(member_id, instance_id, deadline, sleep, began)
        except Exception as exc:  # a close must not fail on its leave
            self.reset()
            return LeaveResult(LEAVE_UNCONFIRMED, 0, time.monotonic() - began,
                               f"{type(exc).__name__}: {exc}")

    def _confirm(self, member_id: str, instance_id: str, deadline: float,
                 sleep: Callable[[float], None], began: float) -> LeaveResult:
        tries, detail = 0, ""
        while True:
            tries += 1
            try:
                node = self.find(deadline)
                answer = self.send(node, static_leave_request(self.group_id, member_id,
                                                              instance_id), deadline)
                found = outcome(answer.error_code, answer.member_epoch)
                detail = "" if answer.error_code == NONE else (
                    f"error {answer.error_code}: {answer.error_message or ''}".strip())
                if found is None:
                    self.moved()
            except Exception as exc:  # kafka-python's too: a close must not fail on its leave
                found, detail = None, f"{type(exc).__name__}: {exc}"
                self.reset()
            now = time.monotonic()
            if found is not None:
                return LeaveResult(found, tries, now - began, detail)
            if now + retry_pause(tries) >= deadline:
                return LeaveResult(LEAVE_UNCONFIRMED, tries, now - began, detail)
            sleep(retry_pause(tries))
