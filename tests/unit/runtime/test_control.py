"""Only the operator steers a member: its bearer token on every POST, checked by the member's own
HTTP server (in process, on a loopback port), read again when the token file changes."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from consumer_runtime import control
from consumer_runtime.http import serve
from consumer_runtime.steering import activation_refused
from tests.unit.runtime.support import telemetry

pytestmark = pytest.mark.unit

TOKEN = "s3cret-token-of-the-group"
ROTATED = "the-token-written-after-it"


class Standby:
    """What the member's `request` does with an activation, for a standby whose readiness the
    test sets (`consumer_runtime.steering.activation_refused`, the member's own rule)."""

    def __init__(self) -> None:
        self.standby: str | None = "warming"
        self.taken: list[str] = []

    def request(self, action: str) -> str | None:
        if action == "activate":
            refused = activation_refused(active=self.standby is None, stopping=False,
                                         standby=self.standby)
            if refused is not None:
                return refused
            self.standby = None
        self.taken.append(action)
        return None


class Member:
    """The member's HTTP server with a stand-in for the member behind it; made once for the
    module (a server's shutdown waits out its 0.5 s poll), reset for each test by `reset`."""

    def __init__(self) -> None:
        self.telemetry = telemetry()
        self.token = control.TokenFile(None)
        self.standby = Standby()
        self.baseline: dict[tuple[str, str], float] = {}
        self.server: ThreadingHTTPServer = serve(
            self.telemetry, "127.0.0.1", 0, lambda action: self.standby.request(action),
            lambda: self.token.current())
        self.port = self.server.server_address[1]

    def reset(self, token_file: Path | None) -> Member:
        self.token = control.TokenFile(str(token_file) if token_file else None)
        self.standby = Standby()
        self.baseline = self._counts()
        return self

    def post(self, path: str, header: str | None = None) -> tuple[int, dict[str, Any],
                                                                   dict[str, str]]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=b"",
                                         method="POST")
        if header is not None:
            request.add_header("Authorization", header)
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                return resp.status, json.loads(resp.read()), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            body = exc.read()
            is_json = exc.headers.get("Content-Type") == "application/json"
            return (exc.code, json.loads(body) if is_json else {"text": body.decode()},
                    dict(exc.headers))

    def get(self, path: str) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
            return int(r.status)

    def _counts(self) -> dict[tuple[str, str], float]:
        out = {}
        for family in self.telemetry.registry.collect():
            for s in family.samples:
                if s.name == "staticfleet_member_control_refused_total":
                    out[(s.labels["action"], s.labels["reason"])] = s.value
        return out

    def refused(self) -> dict[tuple[str, str], float]:
        """staticfleet_member_control_refused_total by (action, reason): what this test
        added, non-zero ones."""
        return {k: v - self.baseline.get(k, 0.0) for k, v in self._counts().items()
                if v - self.baseline.get(k, 0.0)}


@pytest.fixture(scope="module")
def served() -> Iterator[Member]:
    m = Member()
    yield m
    m.server.shutdown()
    m.server.server_close()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "member-token" / "token"
    path.parent.mkdir()
    path.write_text(TOKEN + "\n")  # a trailing newline, as `kubectl create secret` may leave
    return path


@pytest.fixture
def member(served: Member, token_file: Path) -> Member:
    return served.reset(token_file)


@pytest.mark.parametrize(("header", "status", "error", "reason"), [
    (None, 401, "unauthorized", "missing"),
    ("Basic dXNlcjpwYXNz", 401, "unauthorized", "missing"),
    ("Bearer", 401, "unauthorized", "missing"),
    ("Bearer not-the-token", 403, "forbidden", "wrong"),
    (f"Bearer {TOKEN}x", 403, "forbidden", "wrong"),
    (f"Bearer {TOKEN[:-1]}", 403, "forbidden", "wrong"),
    (f"Bearer {TOKEN}", 202, None, None),
    (f"bearer   {TOKEN}  ", 202, None, None),
])
def test_a_request_needs_the_groups_token(member: Member, header: str | None, status: int,
                                          error: str | None, reason: str | None) -> None:
    code, body, headers = member.post("/leave", header)
    assert code == status, body
    if error is None:
        assert body == {"accepted": "leave"} and member.standby.taken == ["leave"]
        assert member.refused() == {}
    else:
        assert body["refused"] == "leave" and body["error"] == error and body["reason"]
        assert headers["WWW-Authenticate"].startswith('Bearer realm="staticfleet-member"')
        assert member.standby.taken == [], "a refused request never reaches the member"
        assert member.refused() == {("leave", reason): 1.0}


def test_reading_stays_open_and_every_post_path_is_guarded(member: Member) -> None:
    for path in ("/healthz", "/readyz", "/status", "/metrics"):
        try:
            member.get(path)
        except urllib.error.HTTPError as exc:
            assert exc.code == 503, path  # not ready: but answered, no credential asked
    assert member.post("/rejoin")[0] == 401
    assert member.post("/nothing-here")[0] == 401, "no path is told apart without a token"
    assert member.post("/nothing-here", f"Bearer {TOKEN}")[0] == 404
    assert member.refused() == {("rejoin", "missing"): 1.0, ("other", "missing"): 1.0}
    text = generate_latest(telemetry().registry).decode()
    assert ('staticfleet_member_control_refused_total{action="activate",group="g",'
            'member="g-0",namespace="ns",reason="wrong"} 0.0') in text, "series exist at 0"


def test_a_rotated_token_is_taken_without_a_restart(member: Member, token_file: Path) -> None:
    assert member.post("/leave", f"Bearer {TOKEN}")[0] == 202
    # As a kubelet updates a mounted Secret: the file is replaced (a new inode).
    fresh = token_file.with_name(".token.new")
    fresh.write_text(ROTATED)
    fresh.replace(token_file)
    assert member.post("/rejoin", f"Bearer {TOKEN}")[0] == 403
    assert member.post("/rejoin", f"Bearer {ROTATED}")[0] == 202
    assert member.standby.taken == ["leave", "rejoin"]
    assert member.refused() == {("rejoin", "wrong"): 1.0}


def test_a_standby_takes_the_activation_only_once_ready_and_only_with_the_token(
        member: Member) -> None:
    code, body, _ = member.post("/activate", f"Bearer {TOKEN}")
    assert code == 409 and "standby not ready" in body["reason"], body
    member.standby.standby = "ready"
    assert member.post("/activate", "Bearer wrong")[0] == 403
    assert member.post("/activate")[0] == 401
    assert member.post("/activate", f"Bearer {TOKEN}")[:2] == (202, {"accepted": "activate"})
    code, body, _ = member.post("/activate", f"Bearer {TOKEN}")
    assert code == 409 and body["reason"] == "not in standby: already active"
    assert member.refused() == {("activate", "wrong"): 1.0, ("activate", "missing"): 1.0}


@pytest.mark.parametrize("how", ["no token file configured", "the file is missing",
                                 "the file is empty"])
def test_a_member_without_a_token_refuses_every_request(how: str, served: Member,
                                                        tmp_path: Path) -> None:
    path: Path | None = tmp_path / "token"
    if how == "no token file configured":
        path = None
    elif how == "the file is empty":
        (tmp_path / "token").write_text("\n")
    m = served.reset(path)
    assert m.post("/leave")[0] == 401
    code, body, _ = m.post("/leave", "Bearer anything")
    assert code == 403 and "no token" in body["reason"], body
    assert m.standby.taken == []
    assert m.refused() == {("leave", "missing"): 1.0, ("leave", "unconfigured"): 1.0}


def test_a_body_too_long_is_refused_unread(member: Member) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{member.port}/leave",
                                     data=b"x" * (70 * 1024), method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 413 and member.standby.taken == []


def test_refused_callers_are_logged_with_their_address_at_a_rate_limit(
        token_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    member = Member().reset(token_file)  # its own server: the rate limit is the server's
    try:
        with caplog.at_level(logging.WARNING, logger="consumer_runtime.http"):
            for _ in range(5):
                member.post("/leave", "Bearer wrong")
    finally:
        member.server.shutdown()
        member.server.server_close()
    lines = [r.getMessage() for r in caplog.records if "refused POST" in r.getMessage()]
    assert lines == ["http: refused POST /leave from 127.0.0.1: 403 wrong: the bearer token "
                     "is not this member's group token"], "one line for five refusals"
    assert member.refused() == {("leave", "wrong"): 5.0}


@pytest.mark.parametrize(("steps", "lines"), [
    # The first refusal is logged at once; later ones within 10 s are summed up in the next line.
    ([(0.0, "10.0.0.1")], ["from 10.0.0.1: 401 missing"]),
    ([(0.0, "10.0.0.1"), (1.0, "10.0.0.2"), (2.0, "10.0.0.2"), (12.0, "10.0.0.3")],
     ["from 10.0.0.1: 401 missing",
      "from 10.0.0.3: 401 missing: this request changes the member: it needs the operator's "
      "token (Authorization: Bearer <token>) (3 refused since the last such line, from "
      "10.0.0.2 x2, 10.0.0.3 x1)"]),
    # At most five addresses are named; the rest are counted.
    ([(0.0, "a"), *[(1.0, f"10.0.1.{i}") for i in range(7)], (11.0, "b")],
     ["from a: 401", "(8 refused since the last such line, from 10.0.1.0 x1, 10.0.1.1 x1, "
      "10.0.1.2 x1, 10.0.1.3 x1, 10.0.1.4 x1 and 3 from other addresses)"]),
])
def test_refusal_log_lines(steps: list[tuple[float, str]], lines: list[str]) -> None:
    log = control.RefusalLog(every_s=10.0)
    out = [line for now, remote in steps
           if (line := log.refused(now, remote, "leave", control.MISSING)) is not None]
    assert len(out) == len(lines)
    for line, expected in zip(out, lines, strict=True):
        assert expected in line, line


@pytest.mark.parametrize(("header", "expected", "refusal"), [
    (None, TOKEN, control.MISSING),
    ("", TOKEN, control.MISSING),
    ("Token abc", TOKEN, control.MISSING),
    ("Bearer x", None, control.UNCONFIGURED),
    ("Bearer x", "", control.UNCONFIGURED),
    ("Bearer x", TOKEN, control.WRONG),
    (f"Bearer {TOKEN}", TOKEN, None),
    (f"BEARER {TOKEN}", TOKEN, None),
    ("Bearer ünïcode", "ünïcode", None),
])
def test_check(header: str | None, expected: str | None,
               refusal: control.Refusal | None) -> None:
    assert control.check(header, expected) == refusal


class Drains:
    """Stands in for `Member.drain`: records what it was asked, answers as told."""

    def __init__(self, refused: str | None = None, drained: bool = True) -> None:
        self.refused, self.drained = refused, drained
        self.asked: list[tuple[float | None, float]] = []

    def __call__(self, hold_s: float | None, wait_s: float) -> tuple[str | None, bool]:
        self.asked.append((hold_s, wait_s))
        return self.refused, self.drained


@pytest.mark.parametrize(("path", "drains", "status", "asked"), [
    ("/drain?holdMs=2500&waitMs=100", Drains(), 200, [(2.5, 0.1)]),
    ("/drain", Drains(), 200, [(None, 30.0)]),
    ("/drain?waitMs=100", Drains(drained=False), 202, [(None, 0.1)]),
    ("/drain", Drains(refused="stopping"), 409, [(None, 30.0)]),
    ("/drain?holdMs=soon", Drains(), 400, []),
])
def test_drain_answers_when_drained_with_the_members_own_times(
        token_file: Path, path: str, drains: Drains, status: int,
        asked: list[tuple[float | None, float]]) -> None:
    tel = telemetry()
    tel.drained(1_700_000_000.25, 2.5)
    server = serve(tel, "127.0.0.1", 0, lambda action: "no", control.TokenFile(
        str(token_file)).current, drains)
    port = server.server_address[1]
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=b"",
                                         method="POST")
        request.add_header("Authorization", f"Bearer {TOKEN}")
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                code, body = resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raw = exc.read().decode()
            code, body = exc.code, (json.loads(raw) if raw.startswith("{") else {"text": raw})
        unauthorized = urllib.request.Request(f"http://127.0.0.1:{port}/drain", data=b"",
                                              method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(unauthorized, timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert code == status, body
    assert drains.asked == asked, "a drain without the token, or with a bad query, was taken"
    assert refused.value.code == 401
    if status in (200, 202):
        assert body["drained"] is (status == 200) and body["drainedAt"] == 1_700_000_000.25
    if status == 409:
        assert body == {"refused": "drain", "reason": "stopping"}
