"""Shared builders of test inputs for the decisions tests."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from staticfleet.decisions.memberreport import MemberReport
from staticfleet.decisions.rollout.record import record_step
from staticfleet.decisions.rollout.roller import members_in_flight, plan_rollout
from staticfleet.decisions.rollout.state import GroupObservation, RolloutState
from staticfleet.decisions.rollout.steps import Decided, Step
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from staticfleet.observe.memberhttp import parse_status

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def body(**spec: Any) -> dict[str, Any]:
    """A minimal valid ConsumerGroup body; keyword arguments replace top-level spec fields."""
    base: dict[str, Any] = {
        "apiVersion": "staticfleet.io/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": "orders", "namespace": "shop", "generation": 4},
        "spec": {
            "replicas": 3,
            "kafka": {"bootstrapServers": "kafka:9092", "topics": ["orders"]},
            "template": {"image": "staticfleet/member:0.1.0"},
        },
    }
    out = copy.deepcopy(base)
    out["spec"].update(copy.deepcopy(spec))
    return out


def with_path(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `obj` with the dotted `path` set to `value`."""
    out = copy.deepcopy(obj)
    node = out
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return out


def record_given(state: RolloutState, step: Step, observed: GroupObservation,
                 update_revision: str, now: datetime) -> RolloutState:
    """`rollout.record.record_step` of a step the test gives itself, with what
    `rollout.roller.next_step` derives beside a step: the members in flight (of a new rollout,
    for a new revision) and the order."""
    rollout = state if state.revision == update_revision else RolloutState()
    return record_step(state, Decided(step, members_in_flight(rollout, observed,
                                                               update_revision, now),
                                      plan_rollout(observed.members).ordinals),
                       observed, update_revision, now)


TIMEOUTS = EffectiveTimeouts(
    session_timeout_ms=45000,
    heartbeat_interval_ms=3000,
    max_poll_interval_ms=300000,
    sources={
        "sessionTimeoutMs": "default",
        "heartbeatIntervalMs": "default",
        "maxPollIntervalMs": "default",
    },
)


def report(status: Mapping[str, Any] | MemberReport) -> MemberReport:
    """A member's `/status` as the operator reads it (`memberhttp.parse_status`), from the
    keys a test gives (the others read as an older member's absent keys do); a report stays
    itself."""
    if isinstance(status, MemberReport):
        return status
    got = parse_status(dict(status))
    assert got is not None, f"not a /status the operator takes: {status!r}"
    return got


def reports(statuses: Mapping[str, Mapping[str, Any] | MemberReport]) -> dict[str, MemberReport]:
    """Each pod's `/status` (by uid) as the operator reads it (`report`)."""
    return {uid: report(status) for uid, status in statuses.items()}


def attribute(key: str) -> str:
    """The report's attribute for a `/status` key (`staticfleet.decisions.memberreport`: its
    name in snake case)."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


def with_keys(status: MemberReport, **keys: Any) -> MemberReport:
    """`status` as if the member had also said `keys` (contract keys, as in its `/status`)."""
    said = report(keys)
    return dataclasses.replace(status, **{attribute(k): getattr(said, attribute(k))
                                          for k in keys})


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
