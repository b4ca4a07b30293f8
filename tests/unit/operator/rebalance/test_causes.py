"""The rebalance's cause (`decisions.rebalance.causes`) as a table: each kind of evidence alone
gives its cause, the rows' order decides between two, old evidence explains nothing, a foreign
member's sign explains one rebalance, and no evidence is no cause."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from staticfleet.decisions.rebalance import causes as ca
from staticfleet.decisions.rebalance.causes import Crash, Evidence, Sign
from tests.unit.operator.support import NOW

pytestmark = pytest.mark.unit

WINDOW_S = 100.0


FOREIGN = Sign(ca.FOREIGN_JOINED, NOW - timedelta(seconds=5),
               "member rdkafka-1 joined the group (instance id none, client id rdkafka)")
FOREIGN_LEFT = Sign(ca.FOREIGN_LEFT, NOW - timedelta(seconds=5),
                    "member rdkafka-1 (none of ours) left the group")
MOVED = Sign(ca.COORDINATOR_MOVED, NOW - timedelta(seconds=20),
             "the group's coordinator moved from broker 1 to broker 2")
GAP = Sign(ca.BROKERS_UNANSWERED, NOW - timedelta(seconds=20),
           "the group's describe failed (CoordinatorMoving)")
LEFT = Sign(ca.MEMBER_LEFT, NOW - timedelta(seconds=30),
            "member 1 (instance id orders-1) left the group")
CRASH = Crash(1, "orders-1", NOW - timedelta(seconds=50), "killed by SIGKILL")
ENDED = Crash(2, "orders-2", None, "Failed (Evicted)")
SCALE = "the operator's planned rebalance ScaleUp (members [3])"
REJOIN = "the operator's planned rebalance UnassignedPartitions (members [0])"
ROLLOUT = "the rollout to revision abc (Rolling) restarts members [2]"

EVIDENCE: dict[str, dict[str, Any]] = {
    "foreign joined": {"signs": (FOREIGN,)},
    "foreign left": {"signs": (FOREIGN_LEFT,)},
    "scale": {"planned_scale": SCALE},
    "coordinator moved": {"signs": (MOVED,)},
    "brokers unanswered": {"signs": (GAP,)},
    "crash": {"crashes": (CRASH,)},
    "pod ended": {"crashes": (ENDED,)},
    "rollout": {"rollout": ROLLOUT},
    "rejoin": {"planned_rejoin": REJOIN},
    "member left": {"signs": (LEFT,)},
}


def evidence(*kinds: str, now_offset_s: float = 0.0) -> Evidence:
    fields: dict[str, Any] = {}
    for kind in kinds:
        for key, value in EVIDENCE[kind].items():
            fields[key] = (*fields.get(key, ()), *value) if isinstance(value, tuple) else value
    return Evidence(now=NOW + timedelta(seconds=now_offset_s), window_s=WINDOW_S, **fields)


def cause(ev: Evidence) -> str | None:
    found = ca.attribute(ev)
    return found[0].cause if found else None


@pytest.mark.parametrize(("kinds", "expected"), [
    ((), None),
    (("foreign joined",), ca.FOREIGN_MEMBER),
    (("foreign left",), ca.FOREIGN_MEMBER),
    (("scale",), ca.SCALE),
    (("coordinator moved",), ca.COORDINATOR_MOVE),
    (("brokers unanswered",), ca.BROKER_RESTART),
    (("crash",), ca.MEMBER_CRASH),
    (("pod ended",), ca.MEMBER_CRASH),
    (("rollout",), ca.ROLLOUT),
    (("rejoin",), ca.ROLLOUT),
    (("member left",), ca.MEMBER_TIMEOUT),
    # The rows' order decides between two kinds of evidence.
    (("scale", "foreign joined"), ca.FOREIGN_MEMBER),
    (("coordinator moved", "scale"), ca.SCALE),
    (("brokers unanswered", "coordinator moved"), ca.COORDINATOR_MOVE),
    (("crash", "brokers unanswered"), ca.BROKER_RESTART),
    (("rollout", "crash"), ca.MEMBER_CRASH),
    (("member left", "rollout"), ca.ROLLOUT),
    (("member left", "crash"), ca.MEMBER_CRASH),
], ids=lambda v: "+".join(v) if isinstance(v, tuple) else str(v))
def test_the_first_row_with_evidence_gives_the_cause(kinds: tuple[str, ...],
                                                     expected: str | None) -> None:
    assert cause(evidence(*kinds)) == expected


@pytest.mark.parametrize("kinds", [
    ("foreign joined",), ("coordinator moved",), ("brokers unanswered",), ("crash",),
    ("member left",)], ids=lambda v: v[0])
def test_evidence_older_than_the_window_explains_nothing(kinds: tuple[str, ...]) -> None:
    # The oldest of these is 50 s old.
    assert cause(evidence(*kinds, now_offset_s=WINDOW_S - 50)) is not None, "still within it"
    assert cause(evidence(*kinds, now_offset_s=WINDOW_S - 4)) is None


def test_a_pod_that_ended_explains_for_as_long_as_it_is_there() -> None:
    assert cause(evidence("pod ended", now_offset_s=10 * WINDOW_S)) == ca.MEMBER_CRASH


def test_each_rule_quotes_its_evidence() -> None:
    for kinds, quoted in [(("foreign joined",), FOREIGN.says), (("scale",), SCALE),
                          (("coordinator moved",), MOVED.says), (("brokers unanswered",), GAP.says),
                          (("crash",), "member 1 (pod orders-1) exited at "
                                       "2026-01-01T11:59:10Z: killed by SIGKILL"),
                          (("pod ended",), "member 2 (pod orders-2) ended: Failed (Evicted)"),
                          (("rollout",), ROLLOUT), (("member left",), LEFT.says)]:
        found = ca.attribute(evidence(*kinds))
        assert found is not None and quoted in found[1].evidence, (kinds, found)


def test_a_foreign_members_sign_is_consumed_the_others_are_not() -> None:
    found = ca.attribute(evidence("foreign joined", "coordinator moved"))
    assert found is not None and found[1].consumes == FOREIGN
    moved = ca.attribute(evidence("coordinator moved"))
    assert moved is not None and moved[1].consumes is None


def test_the_oldest_foreign_sign_explains_first() -> None:
    older = replace(FOREIGN, at=NOW - timedelta(seconds=30), says="member rdkafka-0 joined")
    ev = replace(evidence("foreign joined"), signs=(FOREIGN, older))
    found = ca.attribute(ev)
    assert found is not None and found[1].consumes == older


def test_a_foreign_sign_another_rebalance_of_the_pass_quoted_is_quoted_last() -> None:
    older = replace(FOREIGN, at=NOW - timedelta(seconds=30), says="member rdkafka-0 joined")
    ev = replace(evidence("foreign joined"), signs=(FOREIGN, older), shared=frozenset({older}))
    found = ca.attribute(ev)
    assert found is not None and found[1].consumes == FOREIGN
    found = ca.attribute(replace(ev, shared=frozenset({older, FOREIGN})))
    assert found is not None and found[1].consumes == older


def test_an_unknown_rebalance_names_every_rule_it_checked() -> None:
    said = ca.unexplained(31.4)
    assert said.startswith("no rule found evidence within 31 s")
    assert said.endswith(", ".join(rule.cause for rule in ca.RULES))


def test_every_cause_has_a_row_and_unknown_comes_last() -> None:
    assert ca.CAUSES == (ca.FOREIGN_MEMBER, ca.SCALE, ca.COORDINATOR_MOVE, ca.BROKER_RESTART,
                         ca.MEMBER_CRASH, ca.ROLLOUT, ca.MEMBER_TIMEOUT, ca.UNKNOWN)
    assert all(rule.reads for rule in ca.RULES)


def test_the_contract_lists_every_cause_in_the_rules_order_and_every_sign() -> None:
    text = (Path(__file__).resolve().parents[4] / "docs" / "contracts.md").read_text()
    section = text.split("## Why the group rebalanced")[1].split("\n## ")[0]
    assert re.findall(r"^\| `([a-z_]+)` \|", section, re.MULTILINE) == list(ca.CAUSES)
    assert [kind for kind in ca.SIGN_KINDS if f"`{kind}`" not in section] == []


# --- issue 46, item 10: the nearer evidence and the crash that explains --------------------

ROLLED = replace(GAP, at=NOW - timedelta(seconds=40))
MOVED_EARLIER = replace(MOVED, at=NOW - timedelta(seconds=40))


def crash_at(ordinal: int, s: float) -> Crash:
    return Crash(ordinal, f"orders-{ordinal}", NOW + timedelta(seconds=s), "killed by SIGKILL")


@pytest.mark.parametrize(("signs", "crash_s", "expected"), [
    # A crash 25 s after the broker roll's (or the move's) last sign: the crash's.
    ((ROLLED,), -15, ca.MEMBER_CRASH),
    ((MOVED_EARLIER,), -15, ca.MEMBER_CRASH),
    ((ROLLED, MOVED_EARLIER), -15, ca.MEMBER_CRASH),
    # A crash before the broker's trouble (or while it lasted): the broker's, as before.
    ((ROLLED,), -60, ca.BROKER_RESTART),
    ((MOVED_EARLIER,), -60, ca.COORDINATOR_MOVE),
], ids=["after a broker roll", "after a coordinator move", "after both", "before a roll",
        "before a move"])
def test_the_nearer_of_a_brokers_trouble_and_a_members_crash_gives_the_cause(
        signs: tuple[Sign, ...], crash_s: float, expected: str) -> None:
    ev = Evidence(now=NOW + timedelta(seconds=10), window_s=WINDOW_S, signs=signs,
                  crashes=(crash_at(1, crash_s),))
    assert cause(ev) == expected


def test_a_crash_entry_quotes_the_member_that_timed_out_not_the_first_crash() -> None:
    """Member 0 crashed and came back in time (no rebalance of its); member 1 crashed and its
    session ran out (it left the group): the rebalance is member 1's crash."""
    left = Sign(ca.MEMBER_LEFT, NOW - timedelta(seconds=2),
                "member 1 (instance id orders-1) left the group (it was member m-1)", 1)
    ev = Evidence(now=NOW + timedelta(seconds=10), window_s=WINDOW_S, signs=(left,),
                  crashes=(crash_at(0, -20), crash_at(1, -40)), counted=NOW)
    found = ca.attribute(ev)
    assert found is not None and found[0].cause == ca.MEMBER_CRASH
    assert found[1].evidence.startswith("member 1 (pod orders-1) exited at"), found
    assert "(and 1 more member(s))" in found[1].evidence
    # Without the sign: the latest crash before the rebalance, not the lowest ordinal.
    ev = replace(ev, signs=(), crashes=(crash_at(0, -40), crash_at(1, -20)))
    found = ca.attribute(ev)
    assert found is not None and found[1].evidence.startswith("member 1 (pod orders-1)"), found


def test_a_crash_after_the_rebalance_explains_none_of_it() -> None:
    """Seen in the ledger's integration test: member 0 frozen past its session (evicted, a
    rebalance, counted), then killed 7 s later. Its crash is the cause of its restart's join,
    not of the eviction counted before it."""
    left = Sign(ca.MEMBER_LEFT, NOW, "member 0 (instance id orders-0) left the group", 0)
    ev = Evidence(now=NOW + timedelta(seconds=12), window_s=WINDOW_S, signs=(left,),
                  crashes=(crash_at(0, 7),), counted=NOW)
    assert cause(ev) == ca.MEMBER_TIMEOUT
    assert cause(replace(ev, counted=NOW + timedelta(seconds=8))) == ca.MEMBER_CRASH
    # A crash that came after the broker's sign but after the rebalance too: the broker's.
    assert cause(replace(ev, signs=(ROLLED,))) == ca.BROKER_RESTART
