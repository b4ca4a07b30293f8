"""The termination message as a kubelet keeps it, and the local node's stand-in for the file it
mounts at `terminationMessagePath`."""

from __future__ import annotations

import pytest

from member_contract import TERMINATION_MESSAGE_PATH_ENV
from staticfleet_dev.localnode.podstatus import TERMINATION_MESSAGE_FILE_BYTES, termination_message
from staticfleet_dev.podenv import with_termination_log

pytestmark = pytest.mark.unit

LOG = "--- marker: localnode: starting container member ---\nstarting\nat Frame.run(X.java:1)\n"


@pytest.mark.parametrize(("written", "policy", "code", "expected"), [
    ("ValueError: bad", None, 1, "ValueError: bad"),  # policy File (the default)
    ("ValueError: bad", "FallbackToLogsOnError", 1, "ValueError: bad"),  # the file wins
    ("done", "File", 0, "done"),  # read whatever the exit
    ("", "File", 1, None),
    ("  \n", "FallbackToLogsOnError", 1, "starting\nat Frame.run(X.java:1)"),  # the log's end
    ("", "FallbackToLogsOnError", 0, None),  # the log only for a failed container
])
def test_the_written_message_first_the_logs_end_only_in_its_place(
        written: str, policy: str | None, code: int, expected: str | None) -> None:
    assert termination_message(written, policy, code, LOG) == expected


def test_a_written_message_is_cut_where_a_kubelet_stops_reading() -> None:
    out = termination_message("é" * 5000, "File", 1, "")
    assert out is not None and len(out.encode()) <= TERMINATION_MESSAGE_FILE_BYTES


def test_the_node_names_its_file_in_the_environment_over_the_pods_own() -> None:
    env = with_termination_log({"A": "1", TERMINATION_MESSAGE_PATH_ENV: "/elsewhere"}, "/w/tl")
    assert env == {"A": "1", TERMINATION_MESSAGE_PATH_ENV: "/w/tl"}
