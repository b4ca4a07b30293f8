"""The operator's side of member control: `observe.ask_member` sends the group's token, and the
one before it to a member whose mounted Secret is not updated yet; `Deps.member_tokens` keeps
those two. The member is the runtime's own HTTP server, in process on a loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest

from consumer_runtime.http import serve
from consumer_runtime.metrics import Telemetry
from staticfleet import apply, observe, service
from staticfleet.observe import Refused

pytestmark = pytest.mark.unit


class LiveMember:
    """A member HTTP server whose token the test sets (`holds`) and whose requests it lists."""

    def __init__(self) -> None:
        self.holds: str | None = "new"
        self.taken: list[str] = []
        self.telemetry = Telemetry(namespace="ns", group="g", member="g-0", instance_id="g-0",
                                   session_timeout_s=30.0, max_poll_interval_s=60.0,
                                   process_start=0.0, started_at=0.0)
        self.server = serve(self.telemetry, "127.0.0.1", 0, self.request, lambda: self.holds)
        self.port = self.server.server_address[1]

    def request(self, action: str) -> str | None:
        if action == "rejoin":
            return "not in the group"
        self.taken.append(action)
        return None


@pytest.fixture(scope="module")
def live() -> Iterator[LiveMember]:
    member = LiveMember()
    yield member
    member.server.shutdown()
    member.server.server_close()


@pytest.mark.parametrize(("holds", "tokens", "answer"), [
    ("new", ("new",), None),
    ("new", ("new", "old"), None),
    # Rotated: the member's file still has the token before (a kubelet's delay).
    ("old", ("new", "old"), None),
    ("other", ("new", "old"), Refused(403, "")),
    ("new", (), Refused(401, "")),
    (None, ("new",), Refused(403, "")),
])
def test_the_operator_sends_its_token_and_falls_back_to_the_one_before(
        live: LiveMember, holds: str | None, tokens: tuple[str, ...],
        answer: Refused | None) -> None:
    live.holds, live.taken = holds, []
    got = observe.ask_member("127.0.0.1", live.port, "leave", tokens)
    if answer is None:
        assert got is None and live.taken == ["leave"]
    else:
        assert got is not None and got.status == answer.status and live.taken == []
        assert str(got).startswith(f"HTTP {answer.status}: ") and "refused" in str(got)


def test_a_refusal_that_is_not_about_the_token_is_not_tried_again(live: LiveMember) -> None:
    live.holds, live.taken = "new", []
    got = observe.ask_member("127.0.0.1", live.port, "rejoin", ("new", "old"))
    assert got is not None and got.status == 409 and "not in the group" in got.reason


def test_no_answer_and_no_address(live: LiveMember) -> None:
    assert observe.ask_member("", live.port, "leave", ("new",)) == Refused(
        0, "the pod has no IP yet")
    gone = observe.ask_member("127.0.0.1", 1, "leave", ("new",), timeout=1.0)
    assert gone is not None and gone.status == 0


def test_the_operator_keeps_the_current_token_and_the_one_before() -> None:
    deps = service.Deps(kube=cast(apply.Kube, None))
    try:
        assert deps.member_tokens("uid-a", "t1") == ("t1",)
        assert deps.member_tokens("uid-a", "t1") == ("t1",)
        assert deps.member_tokens("uid-a", "t2") == ("t2", "t1")
        assert deps.member_tokens("uid-a", "t3") == ("t3", "t2"), "at most two"
        assert deps.member_tokens("uid-b", "b1") == ("b1",), "per ConsumerGroup"
        deps.tokens.pop("uid-a")  # what Deps.forget does for a deleted group
        assert deps.member_tokens("uid-a", "t3") == ("t3",)
    finally:
        deps.http_pool.shutdown()

