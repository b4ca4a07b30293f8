"""Members whose `/status` is slow: their process took the operator's connection and did not
give a whole answer within the read's deadline, or gave one over the size the operator reads
(`observe.memberhttp`). The process is there; only its answer is missing, so this is said (a
Warning Event naming the members, `staticfleet_slow_members`), never acted on: a slow answer
alone does not replace or restart a member (`rollout.warm`)."""

from __future__ import annotations

from staticfleet.decisions.actions import Event
from staticfleet.decisions.conditions import MEMBER_STATUS_SLOW
from staticfleet.decisions.snapshot import Snapshot

NOT_READ = "not read this pass: the operator's member reads were all busy"
"""Why a member's `/status` was not read (`observe.memberreads`): its process may be fine."""

NAMED = 3
"""At most this many members named in the Event; the rest are counted."""


def slow_members(snap: Snapshot) -> dict[str, str]:
    """The group's slow members by pod name, with what each did; a member the operator had no
    worker to read this pass (`NOT_READ`) is not one."""
    names = {p["metadata"]["uid"]: p["metadata"]["name"] for p in snap.pods}
    return {names[uid]: why for uid, why in sorted(snap.slow_members.items())
            if why != NOT_READ and uid in names}


def slow_member_events(snap: Snapshot) -> tuple[Event, ...]:
    """A Warning naming the slow members (at most `NAMED`, each reason cut short); the service
    posts it when the set of slow members changes, not every pass."""
    slow = slow_members(snap)
    if not slow:
        return ()
    named = "; ".join(f"{pod}: {why[:120]}" for pod, why in sorted(slow.items())[:NAMED])
    more = f" and {len(slow) - NAMED} more" if len(slow) > NAMED else ""
    return (Event("Warning", MEMBER_STATUS_SLOW, (
        f"{len(slow)} member(s) did not answer /status in time ({named}{more}): the operator "
        "reads each member's /status within a deadline and a size cap; these members' "
        "processes take the connection but do not answer, so their state is unknown to it "
        "(not acted on: a slow answer alone never replaces a member). Look at the member "
        "image's HTTP handler and its log"),),)
