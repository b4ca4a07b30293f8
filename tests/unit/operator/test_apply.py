"""The apply layer's choice of request per child: server-side apply (a patch) for what the
operator keeps in shape, a plain create for the members' token Secret, which it never changes
(so its RBAC holds no `patch` on Secrets). A fake dynamic client records the requests; the real
API server answers them in tests/integration (test_chart_install, test_member_network_policy)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.dynamic.exceptions import ConflictError

from staticfleet import apply
from staticfleet.decisions import builders
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from tests.unit.operator.support import body

pytestmark = pytest.mark.unit


class FakeResource:
    def __init__(self, calls: list[tuple[str, str]], conflict: bool) -> None:
        self.calls, self.conflict = calls, conflict

    def server_side_apply(self, *, body: dict[str, Any], **_: Any) -> None:
        self.calls.append(("apply", body["kind"]))

    def create(self, *, body: dict[str, Any], **_: Any) -> None:
        self.calls.append(("create", body["kind"]))
        if self.conflict:
            raise ConflictError(ApiException(status=409, reason="AlreadyExists"))


class FakeDynamic:
    def __init__(self, conflict: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.resources = self
        self.conflict = conflict

    def get(self, *, api_version: str, kind: str) -> FakeResource:
        return FakeResource(self.calls, self.conflict)


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
