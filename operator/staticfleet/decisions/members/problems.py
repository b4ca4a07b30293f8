"""What keeps a group from running, as the Degraded condition's problems (pure).

A ConsumerGroup whose Kafka group id another ConsumerGroup keeps runs no members
(`group_id_holder`, `group_id_refusal`): two objects on one group fence each other's members. A
member pod stuck terminating, or a member that exits (with the ConsumerGroup field its refusal
names, `spec_field`), is a problem the status shows (`member_problems`); the first one is also
an Event, posted once (`problem_events`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from staticfleet.decisions import clusters
from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Event, PodDelete
from staticfleet.decisions.members.observed import MemberTable, member_failure, refusal_line
from staticfleet.decisions.names import ordinal_of
from staticfleet.decisions.snapshot import Claimant, Problem, Snapshot
from staticfleet.decisions.spec.model import ConsumerGroupSpec

STUCK_AFTER_S = 60.0
"""A member pod still there this long after its grace period ended is stuck (its node is gone,
or a finalizer holds it)."""
WHY_GROUP_ID_IN_USE = "its Kafka group id is in use"


def group_id_holder(snap: Snapshot) -> Claimant | None:
    """The ConsumerGroup that keeps this one's Kafka group id, when it is another (the oldest
    claimant keeps it, within one second the one already on it; two objects on one group fence
    each other's members forever)."""
    if len(snap.claimants) < 2:
        return None
    holder = min(snap.claimants,
                 key=lambda k: (k.created, not k.holding, k.namespace, k.name))
    return None if holder.uid == snap.body["metadata"]["uid"] else holder


def group_id_refusal(snap: Snapshot, spec: ConsumerGroupSpec,
                     holder: Claimant) -> tuple[Problem, tuple[PodDelete, ...]]:
    """Why this ConsumerGroup runs no members while `holder` keeps its group id, and its
    member pods to delete."""
    message = (
        f"spec.kafka.groupId: the Kafka group {spec.kafka.group_id!r} on "
        f"{clusters.label(spec.kafka.bootstrap_servers)} is already used by ConsumerGroup "
        f"{holder.namespace}/{holder.name} (created {holder.created}); two objects on one group "
        "fence each other's members. This one runs no members: create it again with a "
        "spec.kafka.groupId of its own (groupId defaults to metadata.name, which is unique only "
        "in a namespace, and cannot be changed on an existing ConsumerGroup)")
    deletes = tuple(
        PodDelete(ordinal_of(p) or 0, p["metadata"]["name"], p["metadata"]["uid"],
                  f"{WHY_GROUP_ID_IN_USE} by {holder.namespace}/{holder.name}")
        for p in snap.pods if not p["metadata"].get("deletionTimestamp"))
    return Problem(c.GROUP_ID_IN_USE, message), deletes


def member_problems(snap: Snapshot, spec: ConsumerGroupSpec,
                    table: MemberTable) -> list[tuple[str, str]]:
    """What the members' pods show wrong: pods stuck terminating, then members that exit
    (Degraded shows the first)."""
    return _stuck(snap, table) + _refused(snap) + _failing(spec, table)


def problem_events(previous: Mapping[str, Any],
                   problems: Sequence[tuple[str, str]]) -> list[Event]:
    """Degraded shows the first problem; its Event is posted once, when it first shows."""
    return [Event("Warning", reason, message) for reason, message in problems[:1]
            if not _already_said(previous, reason, message)]


def _stuck(snap: Snapshot, table: MemberTable) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for ordinal, pod in sorted(table.stopping.items()):
        ends = pod["metadata"]["deletionTimestamp"]
        late = (snap.now - c.parse_rfc3339(ends)).total_seconds()
        if late > STUCK_AFTER_S:
            name = pod["metadata"]["name"]
            out.append((c.MEMBER_STUCK_TERMINATING, (
                f"pod {name} (member {ordinal}) is still terminating; its grace period ended at "
                f"{ends}: its node may be gone, or a finalizer holds it. Member "
                f"{ordinal} is not started again while that pod may still run (two processes "
                "with one group.instance.id fence each other). Check the node and the pod's "
                f"finalizers; if the node is really gone, `kubectl delete pod {name} --force "
                "--grace-period=0`")))
    return _one(out)


def _refused(snap: Snapshot) -> list[tuple[str, str]]:
    """Member pods (not standbys: the roller answers those) the API server refused to create:
    the pass went on without them, and asks for them again each pass."""
    return _one([(c.MEMBER_POD_REFUSED, (
        f"the API server refused to create member pod {name}: {said}. The rest of the plan "
        "went on, and the pod is asked for again on every pass: raise the namespace's quota, "
        "or fix what refuses it (Pod Security admission, a webhook)"))
        for name, said in sorted(snap.refused_members.items())])


def _failing(spec: ConsumerGroupSpec, table: MemberTable) -> list[tuple[str, str]]:
    out = []
    for ordinal, pod in sorted(table.live.items()):
        failure = member_failure(pod)
        if failure is None or ordinal >= spec.replicas:
            continue
        who = f"member {ordinal} (pod {pod['metadata']['name']})"
        if failure.signal is not None:
            out.append((c.MEMBER_FAILING, (
                f"{who} was {failure.killed()} (see the pod's log and Events)")))
            continue
        line = refusal_line(failure.message) or f"exit code {failure.exit_code}"
        where = spec_field(line)
        out.append((c.MEMBER_FAILING, (
            f"{who} exited with code {failure.exit_code}: {line}"
            + (f" (fix {where})" if where else " (see the pod's log)"))))
    return _one(out)


def _one(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Problems of one reason as one (reason, message)."""
    if len(problems) < 2:
        return problems
    return [(problems[0][0], "; ".join(m for _, m in problems))]


# Where a member's own refusal points in the ConsumerGroup (its config keys, docs/contracts.md).
_RUNTIME_FIELDS = (
    ("processing.", "spec.processing."),
    ("consumer", "spec.kafka.clientProperties"),
    ("topicPattern", "spec.kafka.topicPattern"),
    ("topics", "spec.kafka.topics"),
    ("bootstrap", "spec.kafka.bootstrapServers"),
)


def spec_field(line: str) -> str | None:
    """The ConsumerGroup field a member's refusal names, if it names one (a member that stops
    on an error, `consumer_runtime: member stops: ...`, names none)."""
    if "refused: " not in line:
        return None
    said = line.split("refused: ", 1)[1]
    for prefix, field_ in _RUNTIME_FIELDS:
        if said.startswith(prefix):
            if field_.endswith("."):
                return field_ + said[len(prefix):].split(":", 1)[0].split(" ", 1)[0]
            return field_
    return None


def _already_said(previous: Mapping[str, Any], reason: str, message: str) -> bool:
    cond = c.get_condition(previous.get("conditions") or [], c.DEGRADED)
    return bool(cond and cond.get("status") == "True" and cond.get("reason") == reason
                and cond.get("message") == message)
