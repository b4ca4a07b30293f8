"""The runtime refuses bad configuration at start: one line on stderr naming the key, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.integration.runtime_spark_helpers import REPO, runtime_config

pytestmark = pytest.mark.integration


TOKEN_FILE = Path(tempfile.mkdtemp(prefix="member-token-")) / "token"
TOKEN_FILE.write_text("t0ken")


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("STATICFLEET_")}
    # Any free port on loopback: the default 0.0.0.0:8080 may be taken by another process, and
    # the librdkafka case only gets its answer after the HTTP server is up. The token file is
    # what a member pod has mounted (without one, a member warns of it first).
    full.update({"STATICFLEET_HTTP_HOST": "127.0.0.1", "STATICFLEET_HTTP_PORT": "0",
                 "STATICFLEET_MEMBER_TOKEN_FILE": str(TOKEN_FILE)})
    full.update(env, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "consumer_runtime"], env=full, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def good() -> dict[str, Any]:
    return runtime_config("127.0.0.1:1", "g", "t", sink={"type": "null"})


def with_change(path: str, value: Any) -> str:
    cfg = good()
    node = cfg
    *parents, last = path.split("/")
    for p in parents:
        node = node[p]
    node[last] = value
    return json.dumps(cfg)


CASES = [
    ("no configuration", {},
     "STATICFLEET_CONFIG: not set; set it to the config JSON, or set STATICFLEET_CONFIG_FILE "
     "to a file holding it"),
    ("broken JSON", {"STATICFLEET_CONFIG": "{'groupId': 1}"},
     "STATICFLEET_CONFIG: not valid JSON (Expecting property name enclosed in double quotes at "
     "line 1 column 2); fix the JSON"),
    ("missing file", {"STATICFLEET_CONFIG_FILE": "/nonexistent/config.json"},
     "STATICFLEET_CONFIG_FILE (/nonexistent/config.json): cannot be read (No such file or "
     "directory); point it to a readable config.json"),
    ("zero batch", {"STATICFLEET_CONFIG": with_change("processing/batch/maxRecords", 0)},
     "processing.batch.maxRecords: must be an integer >= 1, got 0; fix the value"),
    ("owned property", {"STATICFLEET_CONFIG": with_change("consumer/enable.auto.commit", True)},
     "consumer.enable.auto.commit: set by the runtime itself; remove it"),
    ("unknown module", {"STATICFLEET_CONFIG": with_change("processing/transform", "nosuch:f")},
     "processing.transform: cannot import module 'nosuch' (No module named 'nosuch'); install "
     "it in the image or fix the name"),
    ("unknown function",
     {"STATICFLEET_CONFIG": with_change("processing/transform", "consumer_runtime.transforms:x")},
     "processing.transform: module 'consumer_runtime.transforms' has no function 'x'; fix the "
     "name"),
    ("librdkafka refuses",
     {"STATICFLEET_CONFIG": with_change("consumer/fetch.wait.max.ms", "soon")},
     "consumer: librdkafka refused the settings (Invalid value for configuration "
     "property \"fetch.wait.max.ms\"); fix the consumer properties"),
    ("KIP-848 with a session timeout",
     {"STATICFLEET_CONFIG": with_change("consumer/group.protocol", "consumer")},
     "consumer.session.timeout.ms: not a client property with group.protocol consumer: the "
     "broker owns the session timeout (group config consumer.session.timeout.ms, which the "
     "operator sets); remove it"),
    ("bad port", {"STATICFLEET_CONFIG": json.dumps(good()), "STATICFLEET_HTTP_PORT": "x"},
     "STATICFLEET_HTTP_PORT: must be a port number 0-65535, got 'x'; fix the environment"),
]


@pytest.mark.parametrize(("env", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_configuration_is_refused_with_one_clear_line(env: dict[str, str],
                                                          message: str) -> None:
    result = run(env)
    assert result.returncode == 2, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert lines == [f"consumer_runtime: configuration refused: {message}"]


def test_config_file_is_accepted_instead_of_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(with_change("processing/batch/maxWaitMs", -1))
    result = run({"STATICFLEET_CONFIG_FILE": str(path)})
    assert result.returncode == 2
    assert "processing.batch.maxWaitMs: must be an integer >= 0, got -1" in result.stderr
