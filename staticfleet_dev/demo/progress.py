"""What the demo shows while it runs: its printed lines, each stamped with the seconds since the
demo started (on stdout; on stderr with `--json`, where stdout is the report), the seconds each
step took (the report's `seconds`), and the watch that samples the group once a second while
the demo waits, printing a progress line (`progress_line`, pure) every few seconds."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from member_contract import HTTP_PORT
from staticfleet_dev.demo.group import NAMESPACE
from staticfleet_dev.demo.kube import DemoFailed, kubectl
from staticfleet_dev.demo.samples import (
    Sample,
    member_samples,
    processed_total,
    processing,
    rollout_view,
)


def progress_line(elapsed: float, label: str, sample: Sample, members: int,
                  processed: int) -> str:
    """One line of the progress view, e.g.
    `[ 92.3s] rolling   restarted 1/3  member 2 away 3.1s / session 45.0s  ready 2/3
    processing 1/3  processed 12,345`."""
    ro = sample.rollout
    parts = [f"[{elapsed:6.1f}s] {label:<9}", f"restarted {ro.restarted}/{members}"]
    if ro.current is not None and ro.current_back_after is not None:
        parts.append(f"member {ro.current} back after {ro.current_back_after:.1f}s, "
                     "until its first batch")
    elif ro.current is not None and ro.current_stopped_at is not None:
        away = max(0.0, sample.t - ro.current_stopped_at)
        session = f" / session {ro.session_ms / 1000:.1f}s" if ro.session_ms else ""
        parts.append(f"member {ro.current} away {away:.1f}s{session}")
    elif ro.current is not None and ro.current_phase == "Preparing":
        parts.append(f"member {ro.current}: replacement warming up in standby")
    ready = sum(1 for m in sample.members if m.ready and not m.deleting)
    parts.append(f"ready {ready}/{members}")
    parts.append(f"processing {processing(sample)}/{members}")
    parts.append(f"processed {processed:,}")
    return "  ".join(parts)


class Console:
    """The demo's printed lines, and the seconds each step took."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.started = time.monotonic()
        self.seconds: dict[str, float] = {}

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def at(self, text: str) -> None:
        """`text`, stamped with the seconds since the demo started."""
        self.say(f"[{self.elapsed():6.1f}s] {text}")

    def done(self, key: str, what: str, since: float) -> None:
        """A step is done: say what and how long it took since `since` (monotonic), and keep
        that under `key` for the report."""
        took = time.monotonic() - since
        self.seconds[key] = took
        self.at(f"{what} in {took:.1f}s")


class Watcher:
    """Samples the group while the demo waits on it, and keeps every sample (the throughput
    PNG comes from them)."""

    def __init__(self, kubeconfig: Path, console: Console, members: int) -> None:
        self.kubeconfig = kubeconfig
        self.console = console
        self.members = members
        self.samples: list[Sample] = []

    def observe(self) -> tuple[Sample, dict[str, Any]]:
        """Pods and the ConsumerGroup in one kubectl call, and each member's /status."""
        from staticfleet.observe.memberhttp import read_member_status

        t = time.time()
        proc = kubectl(self.kubeconfig, "-n", NAMESPACE, "get", "pods,consumergroups", "-o",
                       "json", check=False, timeout=20)
        items: list[dict[str, Any]] = (json.loads(proc.stdout)["items"]
                                       if proc.returncode == 0 else [])
        pods = [i for i in items if i.get("kind") == "Pod"]
        cg: dict[str, Any] = next((i for i in items if i.get("kind") == "ConsumerGroup"), {})
        statuses = {
            p["metadata"]["uid"]: read_member_status(ip, HTTP_PORT, timeout=1.0)
            for p in pods if (ip := (p.get("status") or {}).get("podIP"))
        }
        sample = Sample(t=t, members=member_samples(pods, statuses), rollout=rollout_view(cg))
        self.samples.append(sample)
        return sample, cg

    def watch(self, label: str, *, until: Callable[[dict[str, Any], Sample], bool] | None = None,
              at_least: float = 0.0, timeout: float = 0.0, every: float = 1.0,
              ) -> dict[str, Any]:
        """Sample once a second and print a progress line every `every` seconds; return the
        ConsumerGroup once `at_least` seconds have passed and `until(cg, sample)` holds; fail
        after `timeout` (0: none)."""
        begin = time.monotonic()
        printed = float("-inf")
        while True:
            tick = time.monotonic()
            sample, cg = self.observe()
            shown = label
            if sample.rollout.phase in ("Pending", "Rolling", "Paused", "AtRisk", "Stopped"):
                shown = sample.rollout.phase.lower()
            if tick - printed >= every - 0.05:
                printed = tick
                self.console.say(progress_line(self.console.elapsed(), shown, sample,
                                               self.members, processed_total(self.samples)))
            waited = time.monotonic() - begin
            if waited >= at_least and cg and (until is None or until(cg, sample)):
                return cg
            if sample.rollout.phase == "Stopped":
                raise DemoFailed(f"the operator stopped the rollout: {cg['status']['rollout']}")
            if timeout and waited > timeout:
                raise DemoFailed(f"{label}: not done after {timeout:.0f}s; ConsumerGroup status:"
                                 f"\n{json.dumps(cg.get('status'), indent=1)[:3000]}")
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
