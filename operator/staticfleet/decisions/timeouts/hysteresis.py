"""How an automatic timeout moves toward its need (pure; time is an argument).

An automatic value rises at once when the need exceeds it. It is lowered only when the need has
stayed below 60 % of the current value for 10 minutes (`lower_candidate_since` records since
when; the caller stores it in status and passes it back), so one fast restart after a slow one
does not make the timeouts flap, and each change (which restarts members) is worth it.
"""

from __future__ import annotations

from datetime import datetime

from staticfleet.decisions.conditions import rfc3339
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from staticfleet.decisions.timeouts.inputs import DEFAULT_POLICY, TimeoutPolicy


def settle(
    name: str,
    target: int,
    current: EffectiveTimeouts | None,
    now: datetime,
    policy: TimeoutPolicy,
) -> tuple[int, datetime | None, str]:
    """(value, lower-candidate-since, note) for an automatic value moving toward `target`.

    Raise at once; hold a value while the target is within 60 % of it; lower only after the target
    has stayed below 60 % for `lower_hold_s`.
    """
    if current is None or current.sources.get(name) == "explicit":
        return target, None, ""
    held = current.value(name)
    if target >= held:
        return target, None, ""
    if target >= held * policy.lower_below_ratio:
        return (
            held,
            None,
            f"; kept {held} ms (the need {target} ms is not below {policy.lower_below_ratio:.0%})",
        )
    since = current.lower_candidate_since.get(name, now)
    waited = (now - since).total_seconds()
    if waited >= policy.lower_hold_s:
        return (
            target,
            None,
            f"; lowered from {held} ms after {waited:.0f} s below {policy.lower_below_ratio:.0%}",
        )
    return (
        held,
        since,
        f"; kept {held} ms: the need {target} ms is below {policy.lower_below_ratio:.0%} since "
        f"{rfc3339(since)}, lowered after {policy.lower_hold_s:.0f} s",
    )


def lowering_due_s(effective: EffectiveTimeouts, now: datetime,
                   policy: TimeoutPolicy = DEFAULT_POLICY) -> float | None:
    """How long until the first automatic value held above its need may be lowered
    (`settle`; None: none waits): a pass must look again then, however long the group
    rests."""
    return min(((since - now).total_seconds() + policy.lower_hold_s
                for since in effective.lower_candidate_since.values()), default=None)
