"""A member pays only for what it uses: kafka-python (the static leave's client and the group
view) is loaded when a leave or a drain first asks the coordinator, never at start."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def loaded_after(statement: str) -> set[str]:
    """The top-level modules a fresh interpreter holds after running `statement`."""
    probe = (f"{statement}\nimport json, sys\n"
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_a_member_starts_without_kafka_python() -> None:
    assert "kafka" not in loaded_after("import consumer_runtime.main")


def test_the_group_view_brings_it_in() -> None:
    """The probe above can see kafka-python when it is there."""
    assert "kafka" in loaded_after("import consumer_runtime.groupview")
