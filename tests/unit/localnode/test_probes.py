"""Pure probe handling of the local node: parsing a probe, thresholds of its tracker."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet_dev.localnode.probes import ProbeSpec, ProbeTracker, parse_probe

pytestmark = pytest.mark.unit

CONTAINER = {"ports": [{"name": "http", "containerPort": 8080}]}


@pytest.mark.parametrize(("probe", "expected"), [
    (None, None),
    ({"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 1},
     ProbeSpec(kind="http", port=8080, path="/readyz", period=1.0)),
    ({"httpGet": {"port": 9000, "scheme": "https", "httpHeaders": [{"name": "X", "value": "y"}]},
      "failureThreshold": 1, "successThreshold": 2, "timeoutSeconds": 3, "initialDelaySeconds": 4},
     ProbeSpec(kind="http", port=9000, scheme="HTTPS", headers=(("X", "y"),), failure_threshold=1,
               success_threshold=2, timeout=3.0, initial_delay=4.0)),
    ({"tcpSocket": {"port": "8080"}}, ProbeSpec(kind="tcp", port=8080)),
    ({"httpGet": {"port": "nope"}}, ProbeSpec(kind="http", port=None)),
    ({"exec": {"command": ["true"]}, "terminationGracePeriodSeconds": 7},
     ProbeSpec(kind="exec", command=("true",), termination_grace=7.0)),
    ({"grpc": {"port": 1}}, ProbeSpec(kind="unsupported")),
])
def test_parse_probe(probe: dict[str, Any] | None, expected: ProbeSpec | None) -> None:
    assert parse_probe(probe, CONTAINER) == expected


@pytest.mark.parametrize(("initial", "success", "failure", "results", "verdicts"), [
    (False, 1, 3, [True], [True]),
    (False, 2, 3, [True, True], [False, True]),
    (False, 2, 3, [True, False, True, True], [False, False, False, True]),
    (True, 1, 3, [False, False, False], [True, True, False]),
    (True, 1, 3, [False, False, True, False], [True, True, True, True]),
    (True, 1, 1, [False, True], [False, True]),
])
def test_probe_tracker(initial: bool, success: int, failure: int, results: list[bool],
                       verdicts: list[bool]) -> None:
    tracker = ProbeTracker(spec=ProbeSpec(kind="http", success_threshold=success,
                                          failure_threshold=failure), result=initial)
    seen = []
    for ok in results:
        tracker.observe(ok)
        seen.append(tracker.result)
    assert seen == verdicts
