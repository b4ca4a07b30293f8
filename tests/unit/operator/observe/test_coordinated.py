"""The child process that makes coordinator-bound admin requests: when it dies (librdkafka
aborts it), the requests in flight fail as `ChildDied` and the next request starts a new one.
No broker: the requests go to a closed port, and librdkafka's own error comes back."""

from __future__ import annotations

import pytest

from staticfleet.observe.coordinated import ChildDied, CoordinatedAdmin, RequestFailed
from staticfleet_dev.procs import free_port

pytestmark = pytest.mark.unit


def test_a_dead_child_fails_its_requests_and_the_next_request_starts_a_new_one() -> None:
    child = CoordinatedAdmin()
    conf = {"bootstrap.servers": f"127.0.0.1:{free_port()}", "log_level": 0}
    try:
        first = child.submit("k", conf, "describe_group", ("g",), 1.0)
        with pytest.raises(RequestFailed) as failed:
            first.result(timeout=30)
        assert failed.value.code != 0 and failed.value.text, "librdkafka's error, passed on"
        pending = child.submit("k", conf, "describe_group", ("g",), 20.0)
        child.process.kill()  # what an abort does
        with pytest.raises(ChildDied):
            pending.result(timeout=30)
        again = child.submit("k", conf, "describe_group", ("g",), 1.0)
        with pytest.raises(RequestFailed):
            again.result(timeout=30)
        assert child.started == 2
    finally:
        child.close()
    assert child.process is None


def test_a_client_forgotten_under_its_own_request_still_answers_it() -> None:
    """`forget` while a request of that client waits (what a retry after a coordinator error
    does): the answer still comes back as librdkafka's error, and the child lives on."""
    child = CoordinatedAdmin()
    conf = {"bootstrap.servers": f"127.0.0.1:{free_port()}", "log_level": 0}
    try:
        pending = child.submit("k", conf, "committed", ("g", [("t", 0)]), 2.0)
        child.forget("k")
        with pytest.raises(RequestFailed):
            pending.result(timeout=30)
        after = child.submit("k", conf, "describe_group", ("g",), 1.0)
        with pytest.raises(RequestFailed):
            after.result(timeout=30)
        assert child.started == 1 and child.process.is_alive()
    finally:
        child.close()
