"""One admin child process per cluster (`kafkaadmin.AdminPool`): a request stuck in one
cluster's child restarts that child only; another cluster's request in flight still gets its own
answer from its own, untouched child. No broker: each "cluster" is a socket that accepts
connections and never answers, so librdkafka waits (a stuck request), until its own timeout."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from staticfleet.observe import kafkaadmin
from staticfleet.observe.coordinated import RequestFailed

pytestmark = pytest.mark.unit


@pytest.fixture
def silent_cluster() -> Iterator[str]:
    """A bootstrap address whose TCP connections succeed and are never answered."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


silent_other = silent_cluster


def test_a_stuck_request_restarts_its_own_clusters_child_only(
        silent_cluster: str, silent_other: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # librdkafka would wait 30 s, the caller 1 s: the request is stuck, as the caller sees it.
    monkeypatch.setattr(kafkaadmin, "GROUP_TIMEOUT_S", 30.0)
    monkeypatch.setattr(kafkaadmin, "CHILD_START_S", -29.0)
    pool = kafkaadmin.AdminPool()
    try:
        stuck = pool.get({"bootstrap.servers": silent_cluster, "log_level": "0"})
        other = pool.get({"bootstrap.servers": silent_other, "log_level": "0"})
        # The other cluster's request, in flight in its own child for the whole test.
        pending = pool.coordinated(other, "describe_group", ("g",), 6.0)
        others_child = pool.child(other.key)
        pid = others_child.process.pid
        assert pool.child(stuck.key) is not others_child, "one child per cluster"

        with pytest.raises(kafkaadmin.CoordinatorMoving):
            kafkaadmin.group_request(stuck, "describing g", "describe_group", ("g",),
                                     optional=True)
        stucks_child = pool.child(stuck.key)
        assert stucks_child.started == 1 and stucks_child.process is None, "ended, not reused"

        # The other cluster's request gets librdkafka's own answer (its timeout), not a
        # ChildDied: its child was not touched.
        with pytest.raises(RequestFailed):
            pending.result(timeout=30)
        assert others_child.started == 1 and others_child.process.pid == pid
        assert others_child.process.is_alive()
        # The stuck cluster's next request starts a new child of its own.
        again = pool.coordinated(stuck, "describe_group", ("g",), 0.5)
        with pytest.raises(RequestFailed):
            again.result(timeout=30)
        assert stucks_child.started == 2 and others_child.started == 1
    finally:
        pool.close()
    assert not pool.children
