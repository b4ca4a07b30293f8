"""A KIP-848 static member's id, left for the next process of its pod, and that process's
release of it: a crashed member back in seconds instead of after its session timeout.

A static member of a group.protocol consumer group killed without a leave (kill -9, an OOM
kill) stays registered under its group.instance.id until its session (group config
consumer.session.timeout.ms, 45 s by default) expires; its container restarts in place within a
second or two, and the coordinator refuses the new process (UNRELEASED_INSTANCE_ID) until then
(consumer_runtime/membership.py). Yet the coordinator takes a static member's temporary leave
(member epoch -2) for an instance id from any client with READ on the group, provided the member
id is the one it holds (Kafka's GroupMetadataManager: the member id must match, else
FENCED_INSTANCE_ID; an unknown instance id is UNKNOWN_MEMBER_ID), and a consumer-protocol client
makes its member id itself (KIP-1082): the process that died knew it.

So a member records its current member id (`MemberIdRecord`) in `termination.pod_dir` (the
pod's emptyDir /tmp; on the local node a directory of the pod's own) on every assignment,
whole or not at all. At its start, a process that finds one recorded by another process for its
group and instance id (`predecessor`) sends the static leave for it, with the client and the
confirmation a drain uses (consumer_runtime/staticleave.py), before it subscribes
(`Leaving._release_predecessor`). Once released, the new process takes over the instance id and
its assignment at its first heartbeat, with no new group epoch. A stale or forged id changes
nothing: the coordinator answers that the member is unknown or fenced, and the process joins as
it always did (waiting out UNRELEASED_INSTANCE_ID where the id is still held).

Everything here but `MemberIdFile`'s read and write is pure.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from consumer_runtime.config import RuntimeConfig
from consumer_runtime.termination import pod_dir, write_whole

log = logging.getLogger(__name__)

MEMBER_ID_FILE = "staticfleet-member-id.json"
RELEASE_S = 10.0
"""How long a starting process asks the coordinator to release its predecessor's member id: a
coordinator that moves answers within the broker session timeout (9 s by default); past that,
the process joins and waits as it did without the release."""


@dataclass(frozen=True)
class MemberIdRecord:
    """The member id a process of this pod held in the group, as it last recorded it."""

    group_id: str
    instance_id: str
    member_id: str
    process: str
    """The process that recorded it (a random token of that process)."""
    recorded_at: float = 0.0
    """Unix seconds."""

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def parse(cls, text: str) -> MemberIdRecord | None:
        """A record written by `dumps`; None for anything else."""
        try:
            record = cls(**json.loads(text))
        except (ValueError, TypeError):
            return None
        texts = (record.group_id, record.instance_id, record.member_id, record.process)
        if not all(isinstance(t, str) for t in texts) or not isinstance(
                record.recorded_at, (int, float)) or isinstance(record.recorded_at, bool):
            return None
        return record


def predecessor(record: MemberIdRecord | None, *, protocol: str, group_id: str,
                instance_id: str | None, process: str) -> str | None:
    """The member id a starting process releases before it subscribes: the one `record` holds
    when a KIP-848 static member of this group and instance id recorded it in another process;
    None otherwise (no record, classic, dynamic, another group or instance id, this very
    process, an empty id)."""
    if record is None or protocol != "consumer" or not instance_id:
        return None
    if (record.group_id, record.instance_id) != (group_id, instance_id):
        return None
    if record.process == process or not record.member_id:
        return None
    return record.member_id


@dataclass
class MemberIdFile:
    """This process's record of its member id, at `path`. `write` never raises: a record that
    cannot be written costs only the fast return after a crash (said once)."""

    path: Path
    protocol: str
    group_id: str
    instance_id: str | None
    process: str = field(default_factory=lambda: secrets.token_hex(8))
    written: str = ""
    """The member id last written by this process."""
    warned: bool = False

    @classmethod
    def for_member(cls, env: Mapping[str, str], config: RuntimeConfig) -> MemberIdFile | None:
        """The record of a KIP-848 static member in its pod (`termination.pod_dir`); None for
        classic, dynamic members and a process run by hand (nothing restarts it)."""
        directory = pod_dir(env)
        if directory is None or config.protocol != "consumer" or not config.group_instance_id:
            return None
        return cls(directory / MEMBER_ID_FILE, config.protocol, config.group_id,
                   config.group_instance_id)

    def read(self) -> MemberIdRecord | None:
        try:
            return MemberIdRecord.parse(self.path.read_text())
        except OSError:
            return None

    def predecessor(self) -> str | None:
        """The member id of an earlier process of this pod to release (`predecessor`)."""
        return predecessor(self.read(), protocol=self.protocol, group_id=self.group_id,
                           instance_id=self.instance_id, process=self.process)

    def write(self, member_id: str, now: float | None = None) -> None:
        """Record `member_id` as this process's, whole or not at all."""
        if not member_id or not self.instance_id:
            return
        record = MemberIdRecord(self.group_id, self.instance_id, member_id, self.process,
                                round(time.time() if now is None else now, 3))
        try:
            write_whole(self.path, record.dumps())
        except OSError as exc:
            if not self.warned:
                log.warning("cannot record the member id in %s (a restart after a crash then "
                            "waits for the broker's session timeout): %s", self.path,
                            exc.strerror)
                self.warned = True
            return
        self.written = member_id
