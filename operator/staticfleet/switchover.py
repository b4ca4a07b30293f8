"""The switch of a warm handoff (`actions.Switchover`), carried out as one protocol: the one
place where carrying out a plan waits on what the members answer.

The roller decided the switch (`rollout.warm`); `service.execute` wrote it ahead into the status
(a journal the next pass resumes from when this process dies midway). Then, for each switch:

1. **Drain** the old member (POST `/drain`). Wait: its answer, up to `Switchover.wait_s`; the
   member holds its static leave `Switchover.hold_ms` so the instance id waits for the standby.
   The answer is the old process's close, kept as the pod watch would have seen it
   (`Memory.note_drained`), for the roller's next pass.
2. **Activate** the standby, the moment the drain answered: mark it activated (the annotation
   survives a restart of this process), then POST `/activate`. No wait beyond the request.
3. **First-batch wait**: after an activation, wait up to `Switchover.first_batch_wait_s` for the
   replacement's first processed batch (`memberhttp.wait_first_batch`), so the old process's
   shutdown does not take CPU from that batch.
4. **Delete** the old pod, whether the drain answered or not: a SIGTERM drains it too, and the
   roller activates the standby once its close is seen. No wait.

Failpoints (`failpoints`) mark the moments between the steps, for the tests that kill the
operator there.
"""

from __future__ import annotations

import logging
import time

from member_contract import ACTIVATE
from staticfleet import apply, failpoints
from staticfleet.decisions.actions import Plan
from staticfleet.decisions.memberreport import LeaveReport
from staticfleet.decisions.members.observed import static_leave_event
from staticfleet.decisions.names import ACTIVATED_ANNOTATION
from staticfleet.decisions.snapshot import Snapshot
from staticfleet.memory import Memory
from staticfleet.observe import memberhttp

log = logging.getLogger("staticfleet")


def addresses(snap: Snapshot) -> dict[str, str]:
    """Each member pod's IP by pod name ("" while it has none)."""
    return {p["metadata"]["name"]: (p.get("status") or {}).get("podIP") or ""
            for p in snap.pods}


def tokens(snap: Snapshot, memory: Memory) -> tuple[str, ...]:
    """The tokens to try on the group's members: its current one, then the one before."""
    return (memory.tokens.member_tokens(snap.body["metadata"]["uid"], snap.member_token)
            if snap.member_token else ())


def switch_over(snap: Snapshot, plan: Plan, kube: apply.Kube, memory: Memory) -> None:
    """Carry out each of the plan's switchovers (the module's steps 1-4)."""
    if not plan.switchovers:
        return
    ips, held = addresses(snap), tokens(snap, memory)
    port = memberhttp.MEMBER_PORT
    prefix = f"{snap.namespace}/{snap.name}"
    for switch in plan.switchovers:
        old = switch.old
        began = time.monotonic()
        failpoints.hit(failpoints.BEFORE_DRAIN)
        drained = memberhttp.drain_member(ips.get(old.name, ""), port, held,
                                          switch.hold_ms, switch.wait_s)
        if isinstance(drained, memberhttp.Drained):
            answered = time.monotonic()
            failpoints.hit(failpoints.AFTER_DRAIN)
            memory.note_drained(old.uid, drained.drained_at, drained.last_batch_at)
            _post_leave_warning(snap, switch.ordinal, old.name, drained.static_leave, kube)
            kube.annotate_pod(snap.namespace, switch.standby, switch.standby_uid,
                              {ACTIVATED_ANNOTATION: "true"})
            refused = memberhttp.ask_member(ips.get(switch.standby, ""), port, ACTIVATE, held)
            failpoints.hit(failpoints.AFTER_ACTIVATION)
            log.info("%s: member %d drained in %.3f s, standby %s %s %.3f s after the drain "
                     "answered", prefix, switch.ordinal, answered - began, switch.standby,
                     "activated" if refused is None else f"refused the activation ({refused})",
                     time.monotonic() - answered)
            if refused is None and switch.first_batch_wait_s > 0:
                first = memberhttp.wait_first_batch(ips.get(switch.standby, ""), port,
                                                    switch.first_batch_wait_s)
                log.info("%s: deleting the old pod %s %s", prefix, old.name,
                         f"{first:.3f} s after the activation: the replacement processed its "
                         "first batch" if first is not None else
                         f"{switch.first_batch_wait_s:.1f} s after the activation: the "
                         "replacement has not processed a batch yet")
        else:
            log.warning("%s: member %d (pod %s) did not drain: %s; deleting it (it drains on "
                        "SIGTERM) and activating the standby once its process closed", prefix,
                        switch.ordinal, old.name, drained)
        memory.own.wrote_pod(kube.delete_pod(snap.namespace, old.name, old.uid))
        failpoints.hit(failpoints.AFTER_DELETE)


def _post_leave_warning(snap: Snapshot, ordinal: int, pod: str,
                        leave: LeaveReport | None, kube: apply.Kube) -> None:
    """A Warning when a drained member's static leave did not leave its instance id waiting
    for the replacement (`members.observed.static_leave_event`)."""
    warning = static_leave_event(ordinal, pod, leave)
    if warning is None:
        return
    reason, message = warning
    log.warning("%s/%s: %s", snap.namespace, snap.name, message)
    try:
        kube.post_event(snap.body, "Warning", reason, message)
    except apply.ApplyError as exc:
        log.warning("%s/%s: could not post the Event %s: %s", snap.namespace, snap.name,
                    reason, exc)
