"""What the member processes of a namespace did while something happened around them: a
background watch of every member pod's /status (`MemberWatch`), for the tests and benchmarks
that restart brokers under running groups.

It answers, afterwards:
- which member processes restarted (`restarted`): a pod's container restartCount rose, or its
  /status showed a second `processStart` (a rollout's replacement pods are new pods, not
  restarts);
- which partitions changed owner (`owner_changes`): the instance id whose /status listed it in
  its assignment, in order (a warm handoff keeps the instance id, so it is no change);
- how long after a moment every member that was fetching then fetched records again
  (`fetch_stall`), from each member's `lastFetchAt`, read every `interval` seconds (so up to
  about one interval late);
- how many rebalances each member pod's processes counted while watched (`rebalances`).
"""

from __future__ import annotations

import bisect
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from staticfleet.decisions.builders import HTTP_PORT
from staticfleet.decisions.names import GROUP_LABEL
from staticfleet.observe import memberhttp
from staticfleet_dev.testkit.kube import get_json
from staticfleet_dev.testkit.poll import Poller

FETCHING_WITHIN_S = 10.0
"""A member counts as fetching at a moment when it fetched records in the 10 s before."""


@dataclass
class MemberPod:
    """One member pod as seen over the watch."""

    group: str
    pod: str
    restarts: tuple[int, int] = (-1, -1)
    """The pod's container restartCount when first and last seen."""
    starts: set[float] = field(default_factory=set)
    """Every `processStart` its /status showed."""
    rebalances: tuple[int, int] = (-1, -1)
    """Its /status rebalance counter when first and last seen (a pod made while watched
    counts from 0)."""
    since_start: bool = False
    """Made while watched: everything its process counted, it counted while watched."""

    @property
    def restarted(self) -> bool:
        return self.restarts[1] > self.restarts[0] or len(self.starts) > 1


class MemberWatch(Poller):
    """Every `interval` seconds each member pod's /status, every `pods_every`-th round the
    namespace's pods (their IPs and restart counts)."""

    interval = 0.25
    pods_every = 4
    transient = (Exception,)

    def __init__(self, kubeconfig: Path, namespace: str, interval: float = 0.25) -> None:
        self.kubeconfig, self.namespace, self.interval = kubeconfig, namespace, interval
        self.targets: dict[str, str] = {}
        """Pod uid -> its IP."""
        self.pods: dict[str, MemberPod] = {}
        self.fetches: dict[tuple[str, str], list[float]] = {}
        """(group, instance id) -> every `lastFetchAt` seen, in order."""
        self.owners: dict[tuple[str, str, int], list[str]] = {}
        """(group, topic, partition) -> the instance ids that held it, in order."""
        self.latest: dict[str, dict[str, Any]] = {}
        self._rounds = 0
        self._began = False
        self._pool = ThreadPoolExecutor(8)

    def started(self) -> None:
        """The pods and every member's /status once before the watch returns: a member's
        fetches up to that moment are known (`fetch_stall` of a moment right after)."""
        self.begin(get_json(self.kubeconfig, "-n", self.namespace, "pods")["items"])
        self._read_statuses()

    def begin(self, items: list[dict[str, Any]]) -> None:
        """Take the namespace's pods at the watch's start: a pod seen after is made while
        watched."""
        self.note_pods(items)
        self._began = True

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._pool.shutdown(wait=False)

    def poll(self) -> None:
        self._rounds += 1
        if self._rounds % self.pods_every == 0:
            self.note_pods(get_json(self.kubeconfig, "-n", self.namespace, "pods")["items"])
        self._read_statuses()

    def _read_statuses(self) -> None:
        uids = list(self.targets)
        for uid, st in zip(uids, self._pool.map(self._status, uids), strict=True):
            if st is not None:
                self.note_status(uid, st)

    def _status(self, uid: str) -> dict[str, Any] | None:
        return memberhttp.read_member_status(self.targets[uid], HTTP_PORT, timeout=1.0)

    def note_pods(self, items: list[dict[str, Any]]) -> None:
        """Take the namespace's pods (a list's items): the member pods' IPs and restarts."""
        targets = {}
        for pod in items:
            meta, status = pod["metadata"], pod.get("status") or {}
            group = (meta.get("labels") or {}).get(GROUP_LABEL)
            if not group or not status.get("podIP"):
                continue
            targets[meta["uid"]] = status["podIP"]
            seen = self.pods.setdefault(meta["uid"], MemberPod(group, meta["name"],
                                                               since_start=self._began))
            count = sum(int(cs.get("restartCount") or 0)
                        for cs in status.get("containerStatuses") or ())
            seen.restarts = (count if seen.restarts[0] < 0 else seen.restarts[0], count)
        self.targets = targets

    def note_status(self, uid: str, st: dict[str, Any]) -> None:
        """Take one /status answer of the pod `uid` (seen in `note_pods`)."""
        pod = self.pods[uid]
        self.latest[uid] = st
        if st.get("processStart"):
            pod.starts.add(float(st["processStart"]))
        counted = int(st.get("rebalances") or 0)
        first = pod.rebalances[0] if pod.rebalances[0] >= 0 else (
            0 if pod.since_start else counted)
        pod.rebalances = (first, max(pod.rebalances[1], counted))
        if st.get("standby") is not None:
            return  # a warm replacement not yet in the group
        instance = str(st.get("instanceId") or pod.pod)
        if fetched := st.get("lastFetchAt"):
            seen = self.fetches.setdefault((pod.group, instance), [])
            if float(fetched) not in seen:
                bisect.insort(seen, float(fetched))
        for topic, part in st.get("assignment") or ():
            history = self.owners.setdefault((pod.group, topic, int(part)), [])
            if not history or history[-1] != instance:
                history.append(instance)

    def restarted(self, group: str | None = None) -> list[str]:
        """The pods (of `group`, or all) whose member process restarted while watched."""
        return sorted(p.pod for p in list(self.pods.values())
                      if p.restarted and group in (None, p.group))

    def owner_changes(self, group: str) -> dict[str, list[str]]:
        """The group's partitions (`topic-partition`) whose owner changed: their owners."""
        return {f"{t}-{p}": list(h) for (g, t, p), h in list(self.owners.items())
                if g == group and len(h) > 1}

    def rebalances(self, group: str) -> dict[str, int]:
        """The rebalances each member pod of the group counted while watched, by pod name."""
        return {p.pod: max(0, p.rebalances[1] - p.rebalances[0])
                for p in list(self.pods.values()) if p.group == group}

    def standby_ready(self, group: str) -> bool:
        """A warm replacement of the group says it is ready to take over."""
        return any(self.pods[uid].group == group and st.get("standby") == "ready"
                   for uid, st in list(self.latest.items()) if uid in self.targets)

    def fetch_stalls(self, group: str, t0: float, until: float) -> dict[str, float | None]:
        """For each member (instance id) of the group that was fetching at `t0` (unix seconds),
        the seconds until it fetched records again; None if it had not by `until`."""
        stalls: dict[str, float | None] = {}
        for (g, instance), seen in list(self.fetches.items()):
            if g != group or not any(t0 - FETCHING_WITHIN_S <= v <= t0 for v in seen):
                continue
            after = next((v for v in seen if v > t0), None)
            stalls[instance] = None if after is None or after > until else after - t0
        return stalls

    def fetch_stall(self, group: str, t0: float, until: float) -> tuple[float, int]:
        """The longest of `fetch_stalls`, a member that had not fetched again by `until`
        counted as `until - t0`, and how many had not."""
        stalls = self.fetch_stalls(group, t0, until).values()
        return (max((until - t0 if s is None else s for s in stalls), default=0.0),
                sum(s is None for s in stalls))
