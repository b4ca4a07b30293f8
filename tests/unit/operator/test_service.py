"""The pure parts of the service's gather step."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet.memory import overlay_own_writes

pytestmark = pytest.mark.unit


def pod(name: str, uid: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T12:00:30Z"
    return {"metadata": meta}


@pytest.mark.parametrize(("watched", "written", "expected"), [
    ([pod("a-0", "u0")], [], [("a-0", "u0", False)]),
    # created by this pass, not in the watch yet: counted, so the next pass does not create it
    ([pod("a-0", "u0")], [pod("a-1", "u1")], [("a-0", "u0", False), ("a-1", "u1", False)]),
    # deleted by this process, the watch still shows it live: it is being deleted
    ([pod("a-1", "u1")], [pod("a-1", "u1", deleting=True)], [("a-1", "u1", True)]),
    # the watch caught up (or is ahead): the watch wins
    ([pod("a-1", "u1", deleting=True)], [pod("a-1", "u1")], [("a-1", "u1", True)]),
    # deleted and already gone from the watch: not brought back
    ([], [pod("a-1", "u1", deleting=True)], []),
    # a created pod whose name the watch lists with another uid (an older pod): the watch wins
    ([pod("a-1", "old")], [pod("a-1", "new")], [("a-1", "old", False)]),
])
def test_own_writes_fill_in_what_the_watch_has_not_shown(
        watched: list[dict[str, Any]], written: list[dict[str, Any]],
        expected: list[tuple[str, str, bool]]) -> None:
    out = overlay_own_writes(watched, written)
    assert [(p["metadata"]["name"], p["metadata"]["uid"],
             bool(p["metadata"].get("deletionTimestamp"))) for p in out] == expected


def test_a_scale_write_that_did_not_take_is_not_recorded_as_a_change() -> None:
    from datetime import UTC, datetime

    from staticfleet.decisions.actions import Event, Plan
    from staticfleet.decisions.snapshot import Snapshot
    from staticfleet.service import _unscaled

    before = {"changes": ["2026-11-25T02:00:00Z"], "budgetLeft": 3}
    snap = Snapshot(body={"metadata": {"name": "g", "namespace": "n"},
                          "status": {"autoscaling": before}}, now=datetime.now(UTC))
    plan = Plan(status={"replicas": 1, "autoscaling": {"changes": ["x", "y"], "budgetLeft": 2}},
                events=(Event("Normal", "ScalingUp", "scaling 1 -> 4: ..."),
                        Event("Normal", "PlannedRebalance", "...")), scale_to=4)
    out = _unscaled(snap, plan)
    assert out.scale_to is None
    assert out.status == {"replicas": 1, "autoscaling": before}
    assert [e.reason for e in out.events] == ["PlannedRebalance"]


class RefusingKube:
    """The API calls of an execute, recorded; pod creations refused with a quota's answer."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def create_pod(self, pod: dict[str, Any]) -> None:
        from staticfleet import apply

        self.calls.append(("create", pod["metadata"]["name"]))
        raise apply.ApplyError('creating pod: 403 exceeded quota: "pods", requested: pods=1',
                               403)

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append(("delete", name))

    def patch_status(self, owner: dict[str, Any], patch: dict[str, Any]) -> None:
        self.calls.append(("status", ""))

    def post_event(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.calls.append(("event", reason))


@pytest.mark.parametrize("standby", [False, True])
def test_a_refused_create_is_remembered_and_the_rest_of_the_plan_runs(standby: bool) -> None:
    """Issue 34, item 7: a refused Recreate replacement or scale-up raised out of execute and
    skipped the rest of the plan (here: a deletion), on every pass; only a standby's refusal
    was remembered."""
    import time
    from datetime import UTC, datetime
    from typing import cast

    from staticfleet import apply, service
    from staticfleet.decisions.actions import Plan, PodCreate, PodDelete
    from staticfleet.decisions.snapshot import Snapshot
    from staticfleet.memory import Memory

    kube, memory = RefusingKube(), Memory()
    body = {"apiVersion": "staticfleet.io/v1alpha1", "kind": "ConsumerGroup",
            "metadata": {"name": "g", "namespace": "ns", "uid": "cg"}}
    snap = Snapshot(body=body, now=datetime.now(UTC))
    new = {"metadata": {"name": "g-3"}, "spec": {}}
    plan = Plan(status={"replicas": 4}, create=(PodCreate(3, new, "new member", standby),),
                delete=(PodDelete(5, "g-5", "u5", "scale-down"),))
    done = service.execute(snap, plan, None, service.Clients(kube=cast(apply.Kube, kube)),
                           memory, time.monotonic())
    # The status goes first: it is the journal of the deletion (service._journal).
    assert kube.calls[:3] == [("status", ""), ("create", "g-3"), ("delete", "g-5")]
    assert not any(x.get("type") == "Degraded" for x in done.status.get("conditions") or [])
    remembered = memory.refusals.unanswered("cg", [], standby=standby)
    assert "exceeded quota" in remembered["g-3"]
    assert memory.refusals.unanswered("cg", [], standby=not standby) == {}
    assert memory.refusals.unanswered("cg", [new], standby=standby) == {}, (
        "a pod of that name forgets it")


def test_a_pod_written_is_overlaid_until_the_watch_shows_it_however_late(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A lagging pod watch (40 s at 1,000 groups' cold start) does not make a pass create a
    member twice: the creation is overlaid until the watch lists the pod, then forgotten; a
    deletion until the watch shows it being deleted."""
    from staticfleet import memory as memory_module

    clock = [1000.0]
    monkeypatch.setattr(memory_module.time, "monotonic", lambda: clock[0])
    own = memory_module.OwnWrites()
    created, deleted = owned(pod("a-1", "u1"), "g"), owned(pod("a-2", "u2", deleting=True), "g")
    own.wrote_pod(created)
    own.wrote_pod(deleted)
    live_a2 = owned(pod("a-2", "u2"), "g")
    clock[0] += 60.0  # past the old 30 s bound, the watch still behind
    assert names(own.overlay([live_a2], "g")) == [("a-2", True), ("a-1", False)]
    assert set(own.pods) == {"u1", "u2"}
    # the watch shows both writes: nothing is kept any more
    assert names(own.overlay([created, deleted], "g")) == [("a-1", False), ("a-2", True)]
    assert own.pods == {}
    # a write the watch never shows is dropped by the bound
    own.wrote_pod(owned(pod("a-3", "u3"), "g"))
    clock[0] += memory_module.WRITTEN_POD_TTL_S + 1
    assert names(own.overlay([], "g")) == []


def owned(p: dict[str, Any], owner: str) -> dict[str, Any]:
    p["metadata"]["ownerReferences"] = [{"uid": owner}]
    return p


def names(pods: list[Any]) -> list[tuple[str, bool]]:
    return [(p["metadata"]["name"], bool(p["metadata"].get("deletionTimestamp"))) for p in pods]


def test_a_kip848_groups_session_is_read_from_the_broker_until_a_pass_acted_on_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`gather` reads a KIP-848 group's session timeout on this process's first pass of the
    group (`memory.SessionReads`), again while no pass carried out what it decided, never for
    a classic group, and gives up when the principal may not read it."""
    from staticfleet import service
    from staticfleet.decisions.spec.model import ConsumerGroupSpec
    from staticfleet.memory import Memory
    from staticfleet.observe import kafkaadmin, kafkareads
    from tests.unit.operator.support import body

    answers: list[Any] = []
    asked: list[str] = []

    def read(_admin: Any, group_id: str) -> int:
        asked.append(group_id)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return int(answer)

    monkeypatch.setattr(kafkareads, "group_session_timeout", read)
    memory, admin = Memory(), object()
    classic = ConsumerGroupSpec.from_body(body())
    kip848 = ConsumerGroupSpec.from_body(body(membership={"protocol": "consumer"}))
    assert service._group_session(admin, classic, "u1", memory) is None and asked == []

    answers[:] = [kafkaadmin.KafkaUnavailable("no answer"), 62000, 62000]
    assert service._group_session(admin, kip848, "u2", memory) is None
    assert service._group_session(admin, kip848, "u2", memory) == 62000
    assert service._group_session(admin, kip848, "u2", memory) == 62000
    memory.session_reads.note("u2")  # what `execute` does once a pass carried its plan out
    assert service._group_session(admin, kip848, "u2", memory) is None
    assert asked == ["orders"] * 3

    answers[:] = [kafkareads.GroupConfigsDenied("GROUP_AUTHORIZATION_FAILED")]
    assert service._group_session(admin, kip848, "u3", memory) is None
    assert not memory.session_reads.wanted("u3"), "a denied read is not asked again"
    memory.forget("u2")
    assert memory.session_reads.wanted("u2")


class RecordingKube:
    """The API calls of an execute, in order, each answered."""

    def __init__(self, calls: list[tuple[str, str]]) -> None:
        self.calls = calls

    def apply(self, obj: dict[str, Any]) -> None:
        self.calls.append(("apply", obj["kind"]))

    def annotate_pod(self, namespace: str, name: str, uid: str, marks: Any) -> None:
        self.calls.append(("annotate", name))

    def patch_status(self, owner: dict[str, Any], patch: dict[str, Any]) -> None:
        self.calls.append(("status", ",".join(sorted(patch))))

    def post_event(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.calls.append(("event", reason))

    def forget_secret(self, namespace: str, name: str) -> None:
        pass


@pytest.mark.parametrize("refused", [False, True], ids=["taken", "broker refuses"])
def test_the_record_is_written_before_the_group_configs_and_the_member_calls(
        monkeypatch: pytest.MonkeyPatch, refused: bool) -> None:
    """Issue 46, item 5: the widening's record and a scale-down's planned leave are in the
    status before the broker is told and the member is called, as a switchover's journal is
    (an operator killed between the two leaves a record its successor finishes from; the
    failpoints `before-group-configs` and `before-member-calls` sit in between). A config
    write the broker refuses keeps the record, and the next pass reads the broker's value
    again (`memory.SessionReads`) to set it right."""
    import time
    from datetime import UTC, datetime
    from typing import cast

    from staticfleet import apply, failpoints, service
    from staticfleet.decisions.actions import MemberCall, Plan
    from staticfleet.decisions.snapshot import Snapshot
    from staticfleet.decisions.spec.model import ConsumerGroupSpec
    from staticfleet.memory import Memory
    from staticfleet.observe import kafkaadmin, kafkareads, memberhttp
    from tests.unit.operator.support import body

    calls: list[tuple[str, str]] = []

    def set_configs(_admin: Any, group_id: str, configs: Any) -> None:
        calls.append(("configs", group_id))
        if refused:
            raise kafkaadmin.KafkaUnavailable("no answer")

    def ask(ip: str, port: int, action: str, tokens: Any) -> None:
        calls.append((action, ip))

    monkeypatch.setattr(kafkareads, "set_group_configs", set_configs)
    monkeypatch.setattr(memberhttp, "ask_member", ask)
    monkeypatch.setattr(failpoints, "hit", lambda name: calls.append(("failpoint", name)))
    cg = body(membership={"protocol": "consumer"})
    cg["metadata"]["uid"] = "cg"
    pod = {"metadata": {"name": "orders-1", "uid": "p1", "labels": {}},
           "status": {"podIP": "10.0.0.1"}}
    snap = Snapshot(body=cg, now=datetime.now(UTC), spec=ConsumerGroupSpec.from_body(cg),
                    pods=(pod,))
    widened = {"state": "Raising", "sessionTimeoutMs": 60000}
    plan = Plan(status={"timeouts": {"widening": widened}, "plannedRebalance": {
                    "reason": "ScaleDown", "members": [1]}},
                group_configs={"consumer.session.timeout.ms": "60000"},
                calls=(MemberCall(1, "orders-1", "leave", "scale down"),))
    memory = Memory()
    memory.session_reads.note("cg")
    admin = cast(kafkaadmin.Admin, type("A", (), {"conf": {"bootstrap.servers": "k:9092"}})())
    done = service.execute(snap, plan, admin, service.Clients(kube=cast(apply.Kube,
                           RecordingKube(calls))), memory, time.monotonic())
    acts = [x for x in calls if x[0] != "event"]
    assert acts[:3] == [("status", "plannedRebalance,timeouts"),
                        ("failpoint", failpoints.BEFORE_GROUP_CONFIGS), ("configs", "orders")]
    if refused:
        assert acts[3][0] == "status" and "conditions" in acts[3][1], acts
        assert done.status["timeouts"]["widening"] == widened, "the record is kept"
        assert memory.session_reads.wanted("cg"), "the next pass reads the broker's value"
        assert ("leave", "10.0.0.1") not in calls
    else:
        assert acts[3:] == [("failpoint", failpoints.BEFORE_MEMBER_CALLS),
                            ("leave", "10.0.0.1")], "one status write, before both acts"
