"""A KIP-848 static member's id, recorded for the next process of its pod, and that process's
release of it (consumer_runtime/predecessor.py): the record's file, the decision whom to
release, and the poll loop's release before its first subscribe (with the scripted consumer of
test_member.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from consumer_runtime.config import RuntimeConfig, parse_config
from consumer_runtime.predecessor import (
    MEMBER_ID_FILE,
    MemberIdFile,
    MemberIdRecord,
    predecessor,
)
from consumer_runtime.staticleave import LeaveResult
from consumer_runtime.termination import REPLACED_FILE, pod_dir, replaced_path
from member_contract import (
    LEAVE_GONE,
    LEAVE_LEFT,
    LEAVE_OUTCOMES,
    LEAVE_TAKEN,
    LEAVE_UNCONFIRMED,
    TERMINATION_MESSAGE_PATH_ENV,
)
from tests.unit.runtime.memberworld import (
    INSTANCE,
    P0,
    P1,
    World,
    assign,
    runtime_config,
    setup,
    stop,
)
from tests.unit.runtime.support import base

pytestmark = pytest.mark.unit

GROUP = "orders"
RECORD = MemberIdRecord(GROUP, INSTANCE, "dead-member", "earlier", 1_700_000_000.5)


# -- where the record lives ----------------------------------------------------------------------

def test_the_pod_directory_is_beside_the_termination_message_file(tmp_path: Path) -> None:
    env = {TERMINATION_MESSAGE_PATH_ENV: str(tmp_path / "termination-log")}
    assert pod_dir(env) == tmp_path
    assert replaced_path(env) == tmp_path / REPLACED_FILE
    assert pod_dir({}) is None, "a process run by hand: no kubelet file, nothing restarts it"


@pytest.mark.parametrize(("protocol", "instance", "env_set", "made"), [
    ("consumer", True, True, True),
    ("classic", True, True, False),
    ("consumer", False, True, False),
    ("consumer", True, False, False),
], ids=["kip848 static", "classic", "dynamic", "run by hand"])
def test_only_a_kip848_static_member_in_a_pod_keeps_a_record(
        tmp_path: Path, protocol: str, instance: bool, env_set: bool, made: bool) -> None:
    config = runtime_config(protocol) if instance else _dynamic(protocol)
    env = {TERMINATION_MESSAGE_PATH_ENV: str(tmp_path / "termination-log")} if env_set else {}
    ids = MemberIdFile.for_member(env, config)
    assert (ids is not None) == made
    if ids is not None:
        assert ids.path == tmp_path / MEMBER_ID_FILE
        assert (ids.group_id, ids.instance_id) == (GROUP, INSTANCE)


def _dynamic(protocol: str) -> RuntimeConfig:
    """`runtime_config` without an instance id."""
    raw = base()
    if protocol == "consumer":
        raw["consumer"] = {"group.protocol": "consumer", "max.poll.interval.ms": 300000}
    return parse_config(raw, {})


# -- the record and its file ---------------------------------------------------------------------

def test_a_record_reads_back_as_written_and_anything_else_is_none() -> None:
    assert MemberIdRecord.parse(RECORD.dumps()) == RECORD
    for text in ("", "not json", "[]", "{}", '{"group_id": "orders"}',
                 json.dumps({**json.loads(RECORD.dumps()), "member_id": 7}),
                 json.dumps({**json.loads(RECORD.dumps()), "recorded_at": "soon"}),
                 json.dumps({**json.loads(RECORD.dumps()), "recorded_at": True}),
                 json.dumps({**json.loads(RECORD.dumps()), "extra": 1})):
        assert MemberIdRecord.parse(text) is None, text


def ids_at(tmp_path: Path, process: str = "this") -> MemberIdFile:
    return MemberIdFile(tmp_path / MEMBER_ID_FILE, "consumer", GROUP, INSTANCE, process)


def test_every_write_replaces_the_record_whole(tmp_path: Path) -> None:
    ids = ids_at(tmp_path)
    assert ids.read() is None and ids.predecessor() is None, "a first start"
    ids.write("m-1", now=10.0)
    ids.write("m-2", now=20.0)
    assert ids.read() == MemberIdRecord(GROUP, INSTANCE, "m-2", "this", 20.0)
    assert ids.written == "m-2"
    assert sorted(p.name for p in tmp_path.iterdir()) == [MEMBER_ID_FILE], "no temporary left"
    assert ids.predecessor() is None, "its own record is no predecessor"
    assert ids_at(tmp_path, "next").predecessor() == "m-2"


def test_a_record_that_cannot_be_written_is_said_once_and_raises_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ids = MemberIdFile(tmp_path / "missing" / MEMBER_ID_FILE, "consumer", GROUP, INSTANCE)
    with caplog.at_level(logging.WARNING):
        ids.write("m-1")
        ids.write("m-1")
    assert ids.written == "" and ids.read() is None
    assert [r.getMessage() for r in caplog.records if "cannot record" in r.getMessage()] \
        and len(caplog.records) == 1


def test_a_half_written_temporary_is_never_read(tmp_path: Path) -> None:
    """A process killed during a write leaves its temporary file; the record is the last whole
    one."""
    ids = ids_at(tmp_path, "earlier")
    ids.write("m-1")
    (tmp_path / f".{MEMBER_ID_FILE}.part").write_text('{"group_id": "orde')
    assert ids_at(tmp_path).predecessor() == "m-1"


# -- whom to release (pure) ----------------------------------------------------------------------

@pytest.mark.parametrize(("record", "protocol", "group", "instance", "process", "released"), [
    (RECORD, "consumer", GROUP, INSTANCE, "now", "dead-member"),
    (None, "consumer", GROUP, INSTANCE, "now", None),
    (RECORD, "classic", GROUP, INSTANCE, "now", None),
    (RECORD, "consumer", GROUP, None, "now", None),
    (RECORD, "consumer", "payments", INSTANCE, "now", None),
    (RECORD, "consumer", GROUP, "orders-1", "now", None),
    (RECORD, "consumer", GROUP, INSTANCE, "earlier", None),
    (MemberIdRecord(GROUP, INSTANCE, "", "earlier"), "consumer", GROUP, INSTANCE, "now", None),
], ids=["an earlier process's", "no record", "classic", "dynamic", "another group",
        "another instance id", "this very process", "an empty id"])
def test_a_start_releases_only_an_earlier_process_s_id_of_the_same_static_member(
        record: MemberIdRecord | None, protocol: str, group: str, instance: str | None,
        process: str, released: str | None) -> None:
    assert predecessor(record, protocol=protocol, group_id=group, instance_id=instance,
                       process=process) == released


# -- the poll loop: release, then subscribe; record on every assignment --------------------------

class LoggedLeave:
    """`staticleave.StaticLeave` as the coordinator answers it: `outcome` for every leave,
    each logged in the world's events."""

    def __init__(self, world: World, outcome: str) -> None:
        self.world, self.outcome = world, outcome
        self.confirmed: list[str] = []

    def warm(self) -> None:
        pass

    def confirm(self, member_id: str, instance_id: str, deadline: float) -> LeaveResult:
        assert instance_id == INSTANCE
        self.confirmed.append(member_id)
        self.world.log("static leave", member_id)
        detail = "" if self.outcome == LEAVE_LEFT else "error 25: unknown"
        return LeaveResult(self.outcome, tries=1, seconds=0.004, detail=detail)

    def close(self) -> None:
        pass


def releases(member: Any, outcome: str) -> float | None:
    return member.telemetry.registry.get_sample_value(
        "staticfleet_member_predecessor_releases_total",
        {"namespace": "ns", "group": GROUP, "member": INSTANCE, "outcome": outcome})


@pytest.mark.parametrize("outcome", LEAVE_OUTCOMES)
def test_a_start_releases_the_predecessor_before_it_subscribes_whatever_the_answer(
        tmp_path: Path, outcome: str, caplog: pytest.LogCaptureFixture) -> None:
    """The leave goes out before the first subscribe; the join follows whatever the
    coordinator answers (a stale or forged id: unknown or fenced, and nothing changes); the
    first assignment records this process's member id over the predecessor's."""
    ids_at(tmp_path, "earlier").write("dead-member")
    member, world, _ = setup([assign(P0, P1), stop()], protocol="consumer")
    member.member_ids = ids_at(tmp_path, "this")
    member.leave_client = LoggedLeave(world, outcome)  # type: ignore[assignment]
    with caplog.at_level(logging.INFO, logger="consumer_runtime"):
        assert member.run() == 0
    whats = world.whats()
    assert whats[:2] == ["static leave", "subscribe"], whats
    assert world.events[0][2] == "dead-member"
    recorded = ids_at(tmp_path).read()
    assert recorded is not None and (recorded.member_id, recorded.process) == ("member-1", "this")
    assert releases(member, outcome) == 1
    assert sum(releases(member, o) or 0 for o in LEAVE_OUTCOMES) == 1
    said = [r for r in caplog.records if "earlier process of this pod" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    line = said[0].getMessage()
    expected = {LEAVE_LEFT: "released; joining in its place",
                LEAVE_GONE: "the group does not know it; nothing released",
                LEAVE_TAKEN: "another member holds instance id orders-0; nothing released",
                LEAVE_UNCONFIRMED: "joining as usual, refused until its session times out"}
    assert expected[outcome] in line, line
    assert (said[0].levelno == logging.WARNING) == (outcome == LEAVE_UNCONFIRMED)


@pytest.mark.parametrize("recorded_by", ["nobody", "this process"])
def test_a_start_without_a_predecessor_sends_no_leave(tmp_path: Path, recorded_by: str) -> None:
    if recorded_by == "this process":
        ids_at(tmp_path, "this").write("member-0")
    member, world, _ = setup([assign(P0), stop()], protocol="consumer")
    member.member_ids = ids_at(tmp_path, "this")
    member.leave_client = LoggedLeave(world, LEAVE_LEFT)  # type: ignore[assignment]
    assert member.run() == 0
    assert world.whats()[0] == "subscribe"
    leave = member.leave_client
    assert isinstance(leave, LoggedLeave) and leave.confirmed == ["member-1"], "its close's only"
    assert all(releases(member, o) == 0 for o in LEAVE_OUTCOMES)
    recorded = ids_at(tmp_path).read()
    assert recorded is not None and recorded.member_id == "member-1"
