"""The simulator's HTTP server: one aiohttp server, in a thread of its own with its own event
loop, answering for every simulated member. A request routed by the operator
(`staticfleet.observe.memberhttp.route_through`) names its pod in `POD_IP_HEADER`; it is answered
as that pod's member process would answer it (consumer_runtime/http.py): `GET /status`,
`/healthz`, `/readyz`; `POST /activate`, `/leave`, `/rejoin` and `/drain?holdMs=&waitMs=`, each
POST checked against the group's token first with the runtime's own check
(`consumer_runtime.control.check`: 401 without a token, 403 with another, 403 to every POST
while the group's Secret is unknown). A pod the simulator does not know (not seen yet, or
stopped) answers 503. A drain that takes time waits on the event loop, not in a thread.

With `simulate` (a network, e.g. kwok's pod network) only the pods whose IP lies in it are
simulated; a request for any other pod is relayed to that pod's own address and port (a real
member process, say on the local node, in a bench that also runs real members), its answer
passed back as it came (a pod that does not answer: 502), and such pods stay out of the table.

Without the header: `GET /_sim/stats`, what the simulator knows and has answered (JSON), and
`POST /_sim/stand-ins` with `[[groupId, instanceId, memberId], ...]`: real consumers that stand
in Kafka for those simulated members (`members.Table.stand_ins`), replacing the ones before.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import parse_qs

from aiohttp import ClientError, ClientSession, ClientTimeout, web

from consumer_runtime import control
from member_contract import DRAIN, HEALTHZ, READYZ, REQUESTS, STATUS
from staticfleet.observe.memberhttp import MEMBER_PORT, POD_IP_HEADER
from staticfleet_dev.membersim.members import Member, Pace, Table
from staticfleet_dev.membersim.pods import pod_facts, process_gone, secret_token

STATS = "/_sim/stats"
STAND_INS = "/_sim/stand-ins"
DRAIN_WAIT_MS = 30_000
MAX_BODY = 64 * 1024
"""As consumer_runtime.http's (test_membersim holds them equal; that module is not imported:
it brings pandas and pyarrow with it)."""
RELAY_TIMEOUT_S = DRAIN_WAIT_MS / 1000 + 10.0
"""The longest a relayed request may take: a drain waits up to its `waitMs`."""
RELAYED_HEADERS = ("Authorization", "Content-Type")
TICK_S = 1.0
"""How often every member's due changes are carried out (each request carries out its own
member's at once)."""


class Simulator:
    """The state table (`members.Table`) behind one HTTP server. The watch feeds it pods and
    Secrets from its own thread (`pods_listed`, `pod_changed`, ...); every access to the table
    is under `lock`."""

    def __init__(self, pace: Pace | None = None, clock: Callable[[], float] = time.time,
                 simulate: ipaddress.IPv4Network | None = None) -> None:
        self.table = Table(pace or Pace())
        self.clock = clock
        self.simulate = simulate
        self._session: ClientSession | None = None
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._ticker: asyncio.Task[None] | None = None

    # -- fed by the watch ------------------------------------------------------------------------

    def pods_listed(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A new listing of every member pod: the table holds exactly its running ones."""
        running = set()
        for pod in pods:
            self.pod_changed("ADDED", pod)
            facts = pod_facts(pod)
            if facts is not None and self.simulates(facts.ip):
                running.add(facts.uid)
        with self.lock:
            self.table.keep_only(running)

    def pod_changed(self, kind: str, pod: Mapping[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        facts = None if kind == "DELETED" else pod_facts(pod)
        if facts is not None and not self.simulates(facts.ip):
            facts = None  # a real member's: relayed, never in the table
        with self.lock:
            if facts is not None:
                self.table.upsert(facts, self.clock())
            elif kind == "DELETED" or process_gone(pod):
                self.table.remove(uid)

    def simulates(self, ip: str) -> bool:
        """Whether the pod at `ip` is simulated here (else its requests are relayed to it)."""
        if self.simulate is None:
            return True
        try:
            return ipaddress.ip_address(ip) in self.simulate
        except ValueError:
            return False

    def secrets_listed(self, secrets: Iterable[Mapping[str, Any]]) -> None:
        tokens = {}
        for secret in secrets:
            meta = secret.get("metadata") or {}
            token = secret_token(secret)
            if token is not None:
                tokens[(str(meta.get("namespace")), str(meta.get("name")))] = token
        with self.lock:
            self.table.tokens = tokens

    def secret_changed(self, kind: str, secret: Mapping[str, Any]) -> None:
        meta = secret.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        token = None if kind == "DELETED" else secret_token(secret)
        with self.lock:
            if token is None:
                self.table.tokens.pop(key, None)
            else:
                self.table.tokens[key] = token

    # -- serving ---------------------------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve on `host`:`port` (0: a free port) from a thread of its own; the bound port."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="membersim", daemon=True)
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._open(host, port), loop).result(30)
        return self.port

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        loop.close()
        self._loop = None

    async def _open(self, host: str, port: int) -> int:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port, backlog=1024).start()
        self._ticker = asyncio.ensure_future(self._tick())
        self._session = ClientSession(timeout=ClientTimeout(total=RELAY_TIMEOUT_S))
        return int(self._runner.addresses[0][1])

    async def _close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            with self.lock:
                self.table.advance(self.clock())

    # -- answering -------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        ip = request.headers.get(POD_IP_HEADER)
        if ip is None:
            return await self._admin(request)
        if not self.simulates(ip):
            return await self._relay(ip, request)
        with self.lock:
            member = self.table.find(ip)
        if member is None:
            self.counts["unknown pod"] += 1
            return _json(503, {"error": f"no simulated member at {ip}"})
        if request.method == "GET":
            return self._get(member, request.path)
        if request.method != "POST":
            return web.Response(status=405, text="GET or POST\n")
        if (request.content_length or 0) > MAX_BODY:
            return web.Response(status=413, text="bad Content-Length\n")
        await request.read()
        action = request.path.strip("/")
        with self.lock:
            token = self.table.token(member)
        refusal = control.check(request.headers.get("Authorization"), token)
        if refusal is not None:
            self.counts[f"refused {refusal.status}"] += 1
            challenge = ('Bearer realm="staticfleet-member"' if refusal.status == 401
                         else 'Bearer realm="staticfleet-member", error="invalid_token"')
            return _json(refusal.status, {"refused": action, "error": refusal.error,
                                          "reason": refusal.message},
                         {"WWW-Authenticate": challenge})
        if action not in REQUESTS:
            return web.Response(status=404, text="not found\n")
        self.counts[action] += 1
        if action == DRAIN:
            return await self._drain(member, request.query_string)
        with self.lock:
            refused = self.table.request(member, action, self.clock())
        if refused is None:
            return _json(202, {"accepted": action})
        return _json(409, {"refused": action, "reason": refused})

    async def _relay(self, ip: str, request: web.Request) -> web.StreamResponse:
        """The request as the member at `ip` answers it (502: it did not answer)."""
        assert self._session is not None
        self.counts["relayed"] += 1
        headers = {h: request.headers[h] for h in RELAYED_HEADERS if h in request.headers}
        body = await request.read() if request.method == "POST" else None
        try:
            async with self._session.request(
                    request.method, f"http://{ip}:{MEMBER_PORT}{request.path_qs}",
                    headers=headers, data=body) as answer:
                data = await answer.read()
                passed = {h: answer.headers[h] for h in ("Content-Type", "WWW-Authenticate")
                          if h in answer.headers}
                return web.Response(status=answer.status, body=data, headers=passed)
        except (ClientError, TimeoutError) as exc:
            self.counts["relay failed"] += 1
            return web.Response(status=502, text=f"member at {ip} did not answer: {exc}\n")

    def _get(self, member: Member, path: str) -> web.StreamResponse:
        if path == STATUS:
            self.counts["status"] += 1
            with self.lock:
                status = self.table.status(member, self.clock())
            return _json(200, status)
        if path == HEALTHZ:
            return web.Response(text="ok\n")
        if path == READYZ:
            ready = member.phase == "serving" and not member.leaving
            return web.Response(status=200 if ready else 503,
                                text="ready\n" if ready else "not ready\n")
        return web.Response(status=404, text="not found\n")

    async def _drain(self, member: Member, query_string: str) -> web.StreamResponse:
        query = parse_qs(query_string)
        try:
            hold = query.get("holdMs")
            hold_s = None if not hold else int(hold[0]) / 1000.0
            wait_s = int((query.get("waitMs") or [str(DRAIN_WAIT_MS)])[0]) / 1000.0
        except ValueError:
            return web.Response(status=400, text="holdMs and waitMs are whole milliseconds\n")
        now = self.clock()
        with self.lock:
            refused, ready_at = self.table.drain(member, hold_s, now)
        if refused is not None:
            return _json(409, {"refused": DRAIN, "reason": refused})
        if ready_at > now:
            await asyncio.sleep(min(ready_at - now, max(0.0, wait_s)))
        with self.lock:
            code, body = self.table.drain_answer(member, self.clock())
        return _json(code, body)

    async def _admin(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET" and request.path == STATS:
            return _json(200, self.stats())
        if request.method == "POST" and request.path == STAND_INS:
            try:
                rows = await request.json()
                if not isinstance(rows, list) or not all(
                        isinstance(r, list) and len(r) == 3 for r in rows):
                    raise ValueError(rows)
                stand_ins = {(str(g), str(i)): str(m) for g, i, m in rows}
            except ValueError:
                return web.Response(status=400, text="[[groupId, instanceId, memberId], ...]\n")
            with self.lock:
                self.table.stand_ins = stand_ins
            return _json(200, {"standIns": len(stand_ins)})
        return web.Response(status=400, text=f"a member request names its pod in "
                                             f"{POD_IP_HEADER}; else only GET {STATS} or "
                                             f"POST {STAND_INS}\n")

    def stats(self) -> dict[str, Any]:
        """What the simulator knows (members by phase, groups, tokens) and has answered."""
        with self.lock:
            phases = Counter(m.phase for m in self.table.members.values())
            return {"members": len(self.table.members), "phases": dict(phases),
                    "groups": len(self.table.groups), "tokens": len(self.table.tokens),
                    "requests": dict(self.counts)}


def _json(status: int, body: Any, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=json.dumps(body).encode(),
                        content_type="application/json", headers=headers)
