"""The member's `/status` held to its one type (`member_contract.status.MemberStatus`) on all
three sides: the runtime that fills it, the simulator that fills it again, and the operator that
reads it (`staticfleet.observe.memberhttp.parse_status` into `MemberReport`).

mypy holds the runtime's and the simulator's literals to the type (a key forgotten, misspelt or
of the wrong type fails there) and the parser to its keys (a key renamed or removed in the
contract fails in `parse_status`). What mypy cannot see is held here:

* `test_the_report_has_one_attribute_for_each_key_of_the_contract`: a key added to the
  contract (or one of its parts) fails until `MemberReport` has its attribute, and
  `test_the_runtimes_status_is_read_whole` until `parse_status` fills it from the key;
* `test_the_runtimes_status_is_read_whole`, `test_the_simulators_status_is_read_whole`: the
  real `Telemetry.status()` and the simulator's, through JSON, parse with no key missing and
  every attribute equal to what its key said (the runtime's brought, for every key, to a value
  other than what the key's absence reads as, so no attribute can pass on a default);
* `test_an_older_member_and_a_broken_one`: the reader's rule for a key an older member
  lacks, and a body of the wrong shape as no answer;
* `test_the_docs_sketch_every_key_of_the_contract`: docs/contracts.md's sketch of both
  documents, key for key.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest

from consumer_runtime.metrics import UNRELEASED_WAIT, Telemetry
from member_contract.status import DrainAnswer, MemberStatus
from staticfleet.decisions.memberreport import MemberReport, StartupReport
from staticfleet.observe.memberhttp import parse_status
from staticfleet_dev.membersim.members import Pace, PodFacts, Table
from tests.unit.operator.support import attribute

pytestmark = pytest.mark.unit

START = 1_800_000_000.0
REPO = Path(__file__).resolve().parents[2]


def _part(hint: Any) -> Any:
    """The TypedDict or dataclass a hint names, alone or beside None; None for a scalar."""
    return next((h for h in (hint, *typing.get_args(hint))
                 if typing.is_typeddict(h) or dataclasses.is_dataclass(h)), None)


def _pairs(document: Any, report: Any, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, the report's attribute, that attribute in the report's class or "") for
    every key of `document` (a TypedDict) and its parts."""
    attributes = typing.get_type_hints(report)
    out = []
    for key, hint in typing.get_type_hints(document).items():
        name = attribute(key)
        out.append((prefix + key, name, name if name in attributes else ""))
        part = _part(hint)
        if part is not None and name in attributes:
            out += _pairs(part, _part(attributes[name]), f"{prefix}{key}.")
    return out


def test_the_report_has_one_attribute_for_each_key_of_the_contract() -> None:
    pairs = _pairs(MemberStatus, MemberReport)
    assert [key for key, _, found in pairs if not found] == [], (
        "keys of member_contract.status.MemberStatus without their attribute in "
        "staticfleet.decisions.memberreport (and its read in memberhttp.parse_status)")
    top = {name for key, name, _ in pairs if "." not in key}
    assert {f.name for f in dataclasses.fields(MemberReport)} - top == {"missing"}, (
        "an attribute of the report that no key of the contract fills")


def _read_whole(doc: Any) -> MemberReport:
    """`doc` through JSON and the operator's parser: no key missing, and every attribute what
    its key said."""
    sent = json.loads(json.dumps(doc))
    got = parse_status(sent)
    assert got is not None, "the operator takes it as no answer"
    assert got.missing == frozenset()
    _same(got, sent)
    return got


def _same(report: Any, said: dict[str, Any], prefix: str = "") -> None:
    for key, value in said.items():
        read = getattr(report, attribute(key))
        if isinstance(value, dict):
            _same(read, value, f"{prefix}{key}.")
        elif isinstance(value, list):
            assert [list(entry) for entry in read] == value, prefix + key
        else:
            assert read == value, prefix + key


def _leaves(doc: Any, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            out |= _leaves(value, f"{prefix}{key}.")
        out[prefix + key] = value
    return out


def runtime_statuses() -> list[MemberStatus]:
    """The runtime's /status of one process at two moments: serving (a standby that was
    activated, waited for its instance id, rebalanced, has a batch in flight, a throughput,
    a confirmed static leave and a wait), then drained after a resubscribe; and a standby's.
    Between them every key holds something other than what its absence reads as."""
    tel = Telemetry(namespace="shop", group="orders", member="orders-0", instance_id="orders-0",
                    session_timeout_s=30.0, max_poll_interval_s=60.0, process_start=START,
                    started_at=0.0, max_records=10, standby=True)
    tel.spark_started(True, 0.2)
    tel.became_standby_ready(0.3)
    tel.activated(0.4)
    tel.consumer_made(0.5)
    tel.wait_began(UNRELEASED_WAIT, "the broker still holds orders-0", 0.6)
    tel.wait_over(1.0)
    tel.assigned([("orders", 0)], 1.0, "m-1", generation=7)
    tel.polled(2.0, records=10)
    tel.batch_done(10, 0.2, 2.5)
    tel.assigned([("orders", 0), ("orders", 1)], 3.0, "m-1", generation=8)
    tel.revoked([("orders", 1)], lost=False)
    tel.revoked([("orders", 1)], lost=True)
    tel.assigned([("orders", 1)], 3.5, "m-1", generation=9)
    tel.stats(json.dumps({"topics": {"orders": {"partitions": {"0": {"consumer_lag": 3}}}}}))
    tel.committed(0.01, {("orders", 0): 42})
    tel.dead_letters(2)
    tel.rejoined()
    tel.batch_started(12.0, 10)
    tel.paused_for_work(True)
    tel.static_leave_confirmed({"outcome": "unconfirmed", "tries": 3, "ms": 20000.0,
                                "detail": "error 15: loading"})
    tel.wait_began("SomeWait", "not in the group yet", 12.5)
    tel.leave_accepted()
    serving = tel.status(13.0)
    tel.batch_ended()
    tel.drained(START + 14.0, 2.5)
    tel.undrained()
    tel.drained(START + 15.0, 2.5)
    drained = tel.status(16.0)
    standby = Telemetry(namespace="shop", group="orders", member="orders-1",
                        instance_id="orders-1", session_timeout_s=30.0,
                        max_poll_interval_s=60.0, process_start=START, started_at=0.0,
                        standby=True)
    standby.spark_started(True, 0.2)
    standby.became_standby_ready(0.3)
    return [serving, drained, standby.status(1.0)]


def _without(doc: dict[str, Any], path: str) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    *parts, last = path.split(".")
    node = out
    for part in parts:
        node = node[part]
    del node[last]
    return out


def _at(report: Any, path: str) -> Any:
    for part in path.split("."):
        report = getattr(report, attribute(part))
    return report


def test_the_runtimes_status_is_read_whole() -> None:
    docs = [json.loads(json.dumps(doc)) for doc in runtime_statuses()]
    told = set()
    for doc in docs:
        whole = parse_status(doc)
        for path, value in _leaves(doc).items():
            if value is not None and _at(whole, path) != _at(parse_status(_without(doc, path)),
                                                            path):
                told.add(path)
    assert sorted(set().union(*map(_leaves, docs)) - told) == [], (
        "keys the test never brings to a value other than what their absence reads as: a "
        "default could pass for them")
    reports = [_read_whole(doc) for doc in docs]
    assert reports[0].batch_in_flight is not None and reports[0].throughput is not None
    assert reports[1].state == "drained" and reports[2].standby == "ready"


def simulator_statuses() -> list[MemberStatus]:
    """The simulator's /status of a KIP-848 member serving (with a throughput), drained (with
    its static leave) and a standby warming."""
    table = Table(Pace(consumer_made_s=0.0, join_s=0.0, first_batch_s=0.0))
    facts = PodFacts(uid="uid-0", name="orders-0", namespace="shop", group="orders",
                     ordinal=0, ip="10.1.0.10", instance_id="orders-0", group_id="orders",
                     topics=("orders",), kip848=True)
    member = table.upsert(facts, START)
    standby = table.upsert(dataclasses.replace(facts, uid="uid-0s", ip="10.1.0.100",
                                               standby=True), START)
    serving = table.status(member, START + 20.0)
    table.drain(member, 1.0, START + 20.0)
    return [serving, table.status(member, START + 21.0), table.status(standby, START + 0.5)]


def test_the_simulators_status_is_read_whole() -> None:
    reports = [_read_whole(doc) for doc in simulator_statuses()]
    assert reports[0].throughput is not None and reports[0].assignment
    assert reports[1].static_leave is not None and reports[2].standby == "warming"


def test_the_simulators_drain_answer_has_the_contracts_keys() -> None:
    """The runtime's is typed where it is built (consumer_runtime/http.py);
    tests/unit/dev/test_membersim_http.py holds the two answers to each other over HTTP."""
    table = Table(Pace(consumer_made_s=0.0, join_s=0.0, first_batch_s=0.0))
    member = table.upsert(PodFacts(uid="u", name="g-0", namespace="ns", group="g", ordinal=0,
                                   ip="10.0.0.1", instance_id="g-0", group_id="g"), START)
    table.drain(member, 1.0, START + 1.0)
    _, answer = table.drain_answer(member, START + 2.0)
    assert set(answer) == set(typing.get_type_hints(DrainAnswer))


def test_an_older_member_and_a_broken_one() -> None:
    """A key an older member does not send reads as `memberreport`'s rule says (a count 0, a
    flag False, a text "", a list empty, a figure or a part None, `startupSeconds` all None)
    and is named in `missing`; a key the contract does not know is ignored; a body that is not
    an object, or a value of another type than the contract's, is no answer."""
    old = parse_status({"memberId": "m-1", "rebalances": 2, "startupSeconds": {},
                        "aKeyOfANewerMember": [1, 2]})
    assert old is not None
    assert (old.member_id, old.rebalances, old.takeovers, old.leaving, old.state) == (
        "m-1", 2, 0, False, "")
    assert (old.assignment, old.process_start, old.throughput, old.generation) == (
        (), None, None, None)
    assert old.startup_seconds == StartupReport()
    assert "takeovers" in old.missing and "startupSeconds.firstBatch" in old.missing
    assert "memberId" not in old.missing and "startupSeconds" not in old.missing
    assert parse_status({}) == MemberReport(missing=frozenset(typing.get_type_hints(
        MemberStatus))), "an empty object: every key missing, every attribute its default"
    for broken in ([], "ok", None, {"rebalances": "2"}, {"rebalances": True},
                   {"rebalances": 1.5}, {"assignment": [["t"]]}, {"memberId": None},
                   {"startupSeconds": None}, {"startupSeconds": {"firstBatch": "1"}},
                   {"throughput": {"busyRatio": "high"}}, {"lag": None}):
        assert parse_status(broken) is None, broken
    assert parse_status({"processStart": 5, "batchSecondsMax": 2}) is not None, (
        "a whole number is a float's value (JSON writes 2.0 as 2 in some encoders)")


def _all_keys(document: Any) -> set[str]:
    """Every key name of a TypedDict and its parts (undotted: the docs' sketch nests them)."""
    out = set()
    for key, hint in typing.get_type_hints(document).items():
        out.add(key)
        part = _part(hint)
        if part is not None:
            out |= _all_keys(part)
    return out


def test_the_docs_sketch_every_key_of_the_contract() -> None:
    """docs/contracts.md writes both documents out; a key added to the contract and not to the
    page fails here, as does a key the page keeps after the contract dropped it."""
    text = (REPO / "docs" / "contracts.md").read_text()
    status = text.split("- `/status`: JSON the operator reads", 1)[1].split("}}`.", 1)[0]
    assert set(re.findall(r'"(\w+)"\s*:', status)) == _all_keys(MemberStatus)
    drain = text.split("Answers when drained: 200 `", 1)[1].split("`", 1)[0]
    assert set(re.findall(r'"(\w+)"\s*:', drain)) == set(typing.get_type_hints(DrainAnswer))
