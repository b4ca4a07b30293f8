"""Snapshots the way the service gathers one, and fleets made by the decisions themselves,
for the tables of `plan.decide` (test_decide, test_settings)."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import Any

from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Plan
from staticfleet.decisions.names import ORDINAL_LABEL, instance_id
from staticfleet.decisions.plan import decide, without_nulls
from staticfleet.decisions.settings import OperatorSettings
from staticfleet.decisions.snapshot import GroupMemberView, GroupView, Snapshot
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from tests.unit.operator.support import NOW, reports, with_path
from tests.unit.operator.support import body as any_body


def body(**spec: Any) -> dict[str, Any]:
    """A ConsumerGroup rolled with `Recreate` unless the case says otherwise (warm handoffs
    have their own cases, from `WARM`)."""
    rollout = {"strategy": "Recreate", **(spec.pop("rollout", None) or {})}
    return any_body(rollout=rollout, **spec)


PARTITIONS = {"orders": 6}
NO_SETTINGS = OperatorSettings()


def snapshot(cg: dict[str, Any], pods: list[dict[str, Any]] | None = None, *,
             state: str = "Stable", previous: dict[str, Any] | None = None,
             partitions: dict[str, int] | None = None, statuses: dict[str, Any] | None = None,
             in_group: tuple[int, ...] | None = None, now_offset_s: float = 0,
             broker_config: dict[str, int] | None = None,
             lag: dict[tuple[str, int], int] | None = None,
             settings: OperatorSettings = NO_SETTINGS) -> Snapshot:
    """A gathered snapshot; `in_group`: ordinals the broker lists (default: every live pod);
    `lag`: the broker's lag per partition (default: read, and no record waits anywhere);
    `settings`: the operator's (default: none set)."""
    pods = pods or []
    cg = copy.deepcopy(cg)
    if previous is not None:
        cg["status"] = previous
    spec = ConsumerGroupSpec.from_body(cg, allow_testing=settings.allow_testing_annotations)
    parts = partitions or PARTITIONS
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    listed = sorted({int(p["metadata"]["labels"][ORDINAL_LABEL]) for p in live})
    if in_group is not None:
        listed = [o for o in listed if o in in_group]
    topic, count = next(iter(parts.items()))
    members = tuple(
        GroupMemberView(member_id=f"m-{o}", instance_id=instance_id(spec, o),
                        client_id="c", host="h",
                        partitions=tuple((topic, p) for p in range(count) if p % len(listed) == i))
        for i, o in enumerate(sorted(listed)))
    if statuses is None:
        statuses = {p["metadata"]["uid"]: {"memberId": f"m-{ordinal_of(p)}", "rebalances": 0}
                    for p in live if ordinal_of(p) in listed}
    return Snapshot(body=cg, now=NOW + timedelta(seconds=now_offset_s), spec=spec,
                    pods=tuple(pods), statuses=reports(statuses),
                    group=GroupView(state, spec.membership.protocol, members),
                    partitions=parts, broker_config=broker_config or {},
                    lag={} if lag is None else lag, lag_age_s=0.0, settings=settings)


def ordinal_of(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["labels"][ORDINAL_LABEL])


def running(plan: Plan, *, ready: bool = True, tag: str = "a") -> list[dict[str, Any]]:
    """The pods a plan creates, as the cluster would run them."""
    out = []
    for create in plan.create:
        pod = copy.deepcopy(dict(create.pod))
        pod["metadata"]["uid"] = f"uid-{create.ordinal}-{tag}"
        pod["metadata"]["creationTimestamp"] = "2026-01-01T11:00:00Z"
        pod["status"] = {"phase": "Running", "podIP": f"127.0.1.{create.ordinal + 2}",
                         "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
        out.append(pod)
    return out


def settled(cg: dict[str, Any], rounds: int = 3) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A fleet that runs `cg` and the status the passes left: create, then passes until
    nothing changes."""
    first = decide(snapshot(cg))
    pods = running(first)
    status = without_nulls(dict(first.status))
    for _ in range(rounds):
        status = without_nulls(dict(decide(snapshot(cg, pods, previous=status)).status))
    return pods, status


def builders_time(offset_s: float) -> str:
    return c.rfc3339(NOW + timedelta(seconds=offset_s))


CG = body()
"""A group of three members, rolled with Recreate."""
WARM = any_body()
"""The same rolled with warm handoffs (the default), and the change that rolls it."""
WARM_NEW = with_path(WARM, "spec.template.image", "staticfleet/member:0.2.0")
STARTED = (NOW - timedelta(seconds=600)).timestamp()
"""When the members' processes of `member_status` started."""


def member_status(o: int, *, standby: str | None = None, member_id: str | None = None,
                  first_batch_at: float | None = None, last_batch_at: float | None = None,
                  standby_ready_at: float | None = None,
                  first_assignment_at: float | None = None) -> dict[str, Any]:
    """A member's /status (process started 600 s before NOW)."""
    def since(at: float | None) -> float | None:
        return None if at is None else at - STARTED
    return {"memberId": f"m-{o}" if member_id is None else member_id, "rebalances": 0,
            "standby": standby, "processStart": STARTED, "lastBatchAt": last_batch_at,
            "startupSeconds": {"firstAssignment": since(first_assignment_at),
                               "firstBatch": since(first_batch_at),
                               "standbyReady": since(standby_ready_at)}}


class WarmRoll:
    """Member 2 of a settled 3-member fleet handed off to a new image, one pass at a time."""

    def __init__(self) -> None:
        self.pods, self.status = settled(WARM)
        self.old2 = next(p for p in self.pods if ordinal_of(p) == 2)
        self.closed_by_pod: dict[str, Any] = {}
        self.standby: dict[str, Any] | None = None
        self.t = 0.0

    def statuses(self, **replacement: Any) -> dict[str, Any]:
        out = {p["metadata"]["uid"]: member_status(
            ordinal_of(p), last_batch_at=(NOW + timedelta(seconds=self.t - 0.5)).timestamp())
            for p in self.pods if not p["metadata"].get("deletionTimestamp")}
        if self.standby is not None:
            out[self.standby["metadata"]["uid"]] = member_status(2, **{
                "standby": "warming", "member_id": "", **replacement})
        return out

    def step(self, dt: float, lag: dict[tuple[str, int], int] | None = None,
             **replacement: Any) -> Plan:
        self.t += dt
        pods = self.pods + ([self.standby] if self.standby is not None else [])
        plan = decide(replace(snapshot(
            WARM_NEW, pods, previous=self.status, in_group=(0, 1, 2), now_offset_s=self.t,
            statuses=self.statuses(**replacement), lag=lag), closed_by_pod=self.closed_by_pod))
        self.status = without_nulls(dict(plan.status))
        return plan

    def at(self, seconds: float) -> float:
        return (NOW + timedelta(seconds=seconds)).timestamp()

    def to_the_old_members_exit(self) -> None:
        """The replacement starts in standby and gets ready; the old member's process exits."""
        self.standby = running(self.step(1), ready=False, tag="b")[0]
        self.step(5, standby="ready", standby_ready_at=self.at(5))
        self.pods = [p for p in self.pods if p is not self.old2]
        self.closed_by_pod[self.old2["metadata"]["uid"]] = NOW + timedelta(seconds=self.t)

    def flight(self) -> dict[str, Any]:
        return self.status["rollout"]["inFlight"][0]


def stalled_fleet(idle_s: float, end: int = 50, **spec: Any) -> tuple[Any, dict[str, Any]]:
    """A settled 3-member fleet (6 partitions, two each) in which member 1 last fetched
    `idle_s` ago and committed offset 40 on its partitions, whose end offsets are `end`; the
    others fetch all the time and are caught up."""
    cg = body(**spec)
    pods, status = settled(cg)
    snap = snapshot(cg, pods, previous=status)
    assert snap.group is not None
    owned = {m.instance_id: m.partitions for m in snap.group.members}
    statuses = {}
    ends = {}
    for pod in pods:
        o = ordinal_of(pod)
        parts = owned[f"orders-{o}"]
        idle = idle_s if o == 1 else 0.5
        statuses[pod["metadata"]["uid"]] = {
            **member_status(o), "processingReady": True, "batchSecondsMax": 2.0,
            "lastFetchAt": (NOW - timedelta(seconds=idle)).timestamp(),
            "committed": [[t, p, 40 if o == 1 else end] for t, p in parts]}
        ends.update({tp: (3.0, end) for tp in parts})
    return replace(snap, statuses=reports(statuses), end_offsets=ends), status
