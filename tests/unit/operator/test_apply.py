"""The apply layer's choice of request per child: server-side apply (a patch) for what the
operator keeps in shape, a plain create for the members' token Secret, which it never changes
(so its RBAC holds no `patch` on Secrets); and when it sends one again: only for new content or
after the watch saw the child drift (`Kube.noticed`), never on a timer. A fake dynamic client
records the requests; the real API server answers them in tests/integration (test_chart_install,
test_member_network_policy, test_child_drift)."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.dynamic.exceptions import ConflictError

from staticfleet import apply
from staticfleet.decisions import builders
from staticfleet.decisions.drift import GONE
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from tests.unit.operator.support import body

pytestmark = pytest.mark.unit


class FakeResource:
    def __init__(self, calls: list[tuple[str, str]], conflict: bool, refuse: bool) -> None:
        self.calls, self.conflict, self.refuse = calls, conflict, refuse

    def server_side_apply(self, *, body: dict[str, Any], **_: Any) -> None:
        self.calls.append(("apply", body["kind"]))
        if self.refuse:
            raise ConflictError(ApiException(status=500, reason="InternalError"))

    def create(self, *, body: dict[str, Any], **_: Any) -> None:
        self.calls.append(("create", body["kind"]))
        if self.conflict:
            raise ConflictError(ApiException(status=409, reason="AlreadyExists"))


class FakeDynamic:
    def __init__(self, conflict: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.resources = self
        self.conflict = conflict
        self.refuse = False

    def get(self, *, api_version: str, kind: str) -> FakeResource:
        return FakeResource(self.calls, self.conflict, self.refuse)


def kube(dynamic: FakeDynamic) -> apply.Kube:
    k = apply.Kube(client.ApiClient())
    k._dynamic = dynamic  # type: ignore[assignment]
    return k


def children() -> list[dict[str, Any]]:
    spec = ConsumerGroupSpec.from_body(body())
    return [builders.build_member_token_secret(spec, "t0k3n"),
            builders.build_headless_service(spec),
            builders.build_member_network_policy(spec, [{"ipBlock": {"cidr": "10.0.0.0/8"}}])]


def test_the_token_secret_is_created_and_the_other_children_applied() -> None:
    dynamic = FakeDynamic()
    k = kube(dynamic)
    for child in children():
        assert k.apply(child)
    assert dynamic.calls == [("create", "Secret"), ("apply", "Service"),
                             ("apply", "NetworkPolicy")]


def test_a_token_secret_that_exists_is_left_as_it_is_and_said_so() -> None:
    """A Secret of that name exists (without its key: the gather found no token in it): the
    operator does not change it, and the pass says what to do."""
    k = kube(FakeDynamic(conflict=True))
    k.secrets[("shop", "orders-member-token")] = (0.0, {})
    with pytest.raises(apply.ApplyError) as refused:
        k.apply(children()[0])
    assert refused.value.status == 409
    assert "never changes it: delete it" in str(refused.value)
    assert ("shop", "orders-member-token") not in k.secrets, "read again next pass"


# --- applied again only for new content or drift ------------------------------------------


OWNER: dict[str, Any] = {
    "apiVersion": "staticfleet.io/v1alpha1", "kind": "ConsumerGroup",
    "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1"}}


def service(port: int = 8080) -> dict[str, Any]:
    out = apply.adopt(builders.build_headless_service(ConsumerGroupSpec.from_body(body())), OWNER)
    out["spec"]["ports"][0]["port"] = port
    return out


def served(child: dict[str, Any]) -> dict[str, Any]:
    """`child` as the watch shows it after the API server stored it."""
    out = copy.deepcopy(child)
    out["metadata"].update({"uid": "c-1", "resourceVersion": "7"})
    out["spec"].update({"clusterIPs": ["None"], "type": "ClusterIP"})
    return out


def test_unchanged_content_is_not_sent_again_however_long_it_rests(
        monkeypatch: pytest.MonkeyPatch) -> None:
    dynamic = FakeDynamic()
    k = kube(dynamic)
    assert k.apply(service())
    monkeypatch.setattr(time, "monotonic", lambda: 1e12)  # no timer sends it again
    assert not k.apply(service())
    assert k.noticed(served(service()), gone=False) is None, "the operator's own write"
    assert not k.apply(service())
    assert k.apply(service(9090)), "new content"
    assert dynamic.calls == [("apply", "Service")] * 2


def test_a_child_changed_by_someone_or_deleted_is_applied_again() -> None:
    dynamic = FakeDynamic()
    k = kube(dynamic)
    k.apply(service())
    changed = served(service())
    changed["spec"]["publishNotReadyAddresses"] = False
    assert k.noticed(changed, gone=False) == apply.Drifted(
        ("shop", "orders"), "Service orders-members", "spec.publishNotReadyAddresses changed")
    assert k.noticed(changed, gone=False) is None, "forgotten once; nothing to compare with"
    assert k.apply(service())
    assert k.noticed(served(service()), gone=True) == apply.Drifted(
        ("shop", "orders"), "Service orders-members", GONE)
    assert k.apply(service())
    assert dynamic.calls == [("apply", "Service")] * 3


def test_children_it_applied_nothing_to_are_not_its_business() -> None:
    """Another shard's group's child, or one of a group this operator has not reached yet."""
    k = kube(FakeDynamic())
    assert k.noticed(served(service()), gone=True) is None
    assert k.applied == {}


def test_what_the_watch_sees_before_the_answer_is_the_write_itself() -> None:
    """What was applied is remembered before the request goes: the watch's event of the write
    may come first, and must not count as drift."""
    seen: list[apply.Drifted | None] = []
    k = kube(FakeDynamic())

    class Watching(FakeResource):
        def server_side_apply(self, *, body: dict[str, Any], **_: Any) -> None:
            seen.append(k.noticed(served(body), gone=False))

    k._dynamic.get = lambda **_: Watching([], False, False)  # type: ignore[union-attr,method-assign]
    assert k.apply(service())
    assert seen == [None]
    assert not k.apply(service())


def test_a_refused_apply_is_sent_again_next_pass() -> None:
    dynamic = FakeDynamic()
    k = kube(dynamic)
    dynamic.refuse = True
    with pytest.raises(apply.ApplyError):
        k.apply(service())
    dynamic.refuse = False
    assert k.apply(service())


def test_a_deleted_group_is_forgotten_and_its_namesake_applied_anew() -> None:
    dynamic = FakeDynamic()
    k = kube(dynamic)
    k.apply(service())
    k.forget("another-uid")
    assert not k.apply(service())
    k.forget("u-1")
    assert k.apply(service())
    again = copy.deepcopy(OWNER)
    again["metadata"]["uid"] = "u-2"
    assert k.apply(apply.adopt(builders.build_headless_service(
        ConsumerGroupSpec.from_body(body())), again)), "a new group of the same name"


class FakeCore:
    """The Secrets of a fake API server, counting reads."""

    def __init__(self) -> None:
        self.token = "YQ=="  # "a"
        self.reads = 0

    def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        self.reads += 1
        return client.V1Secret(data={"token": self.token})


@pytest.mark.parametrize(("ttl", "reads"), [(60.0, 1), (5.0, 2)])
def test_a_secret_is_read_again_once_its_ttl_ran_out(
        monkeypatch: pytest.MonkeyPatch, ttl: float, reads: int) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    k = apply.Kube(client.ApiClient(), secret_ttl_s=ttl)
    core = FakeCore()
    k.core = core  # type: ignore[assignment]
    assert k.secret_value("ns", "creds", "token") == "a"
    core.token = "Yg=="  # "b": the Secret changed by hand
    now[0] += 10
    assert k.secret_value("ns", "creds", "token") == ("a" if reads == 1 else "b")
    assert core.reads == reads
    assert apply.Kube(client.ApiClient()).secret_ttl_s == apply.SECRET_TTL_S == 60.0
