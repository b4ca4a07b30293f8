"""Which ConsumerGroups one operator owns when the operators are sharded, and when it may start
acting on a group that another shard reconciled last (pure).

A ConsumerGroup's shard is its label `staticfleet.io/shard`. Each operator is one shard; its
watch of ConsumerGroups carries the shard's label selector, so the API server sends it only its
own groups (kopf's `settings.watching.label_selectors`). The selectors of one installation are
disjoint and cover every group:

* a named shard `b` (`--shard b`) owns the groups labelled `b`: `staticfleet.io/shard=b`;
* the default shard (`--shard default --other-shards b,c`) owns every other group, the
  unlabelled ones included: `staticfleet.io/shard notin (b,c)`. A group labelled with a name no
  shard runs under falls to the default shard, so no group is left without an operator;
* without `--shard` the operator is not sharded and owns every group (no selector).

A group whose label changes leaves one shard's watch (the API server sends that watch a
DELETED event, though nothing was deleted) and enters another's. The shard that reconciles a
group says so in `status.shard`; the new shard acts only once the old one let go (it clears
`status.shard` when its last pass over the group has ended), or after `HANDOFF_GRACE_S` if
the old one never answers (it was stopped, or crashed): `handoff`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SHARD_LABEL = "staticfleet.io/shard"
DEFAULT_SHARD = "default"
"""The name the chart gives its default shard (the one that owns the unlabelled groups)."""
HANDOFF_GRACE_S = 60.0
"""How long a shard waits for the previous one to let a group go before it acts anyway: longer
than a pass can take (its Kafka and member requests time out within 30 s) plus the previous
shard's watch catching up."""
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME = 40
"""A shard name is a DNS label short enough that `<release>-<chart>-<shard>` stays one."""


class ShardError(ValueError):
    """Shard settings the operator cannot start with; the message names the setting."""


def check_name(name: str, what: str) -> str:
    """`name` if it can be a shard's name (a label value and a DNS label), else ShardError."""
    if not _NAME.match(name) or len(name) > MAX_NAME:
        raise ShardError(f"{what}: {name!r} is not a shard name (lowercase letters, digits and "
                         f"'-', starting and ending with a letter or digit, at most {MAX_NAME})")
    return name


@dataclass(frozen=True)
class Shard:
    """One operator's share of the ConsumerGroups."""

    name: str
    others: tuple[str, ...] = ()
    """Set only on the default shard: the named shards, whose groups it leaves to them."""

    @classmethod
    def parse(cls, name: str, others: Sequence[str] = ()) -> Shard:
        check_name(name, "--shard")
        named = tuple(sorted({check_name(o, "--other-shards") for o in others}))
        if name in named:
            raise ShardError(f"--other-shards names this shard itself ({name!r})")
        return cls(name=name, others=named)

    @property
    def is_default(self) -> bool:
        return bool(self.others)

    def selector(self) -> str:
        """The label selector of this shard's watch, in the API server's syntax."""
        if self.is_default:
            return f"{SHARD_LABEL} notin ({','.join(self.others)})"
        return f"{SHARD_LABEL}={self.name}"

    def owns(self, labels: Mapping[str, str] | None) -> bool:
        """Whether a ConsumerGroup with these labels is this shard's (what `selector` selects,
        for the places that hold a body instead of a watch)."""
        value = (labels or {}).get(SHARD_LABEL)
        if self.is_default:
            return value not in self.others
        return value == self.name


def selector(shard: Shard | None) -> str | None:
    """The watch's label selector; None: not sharded, every group."""
    return shard.selector() if shard is not None else None


# --- handing a group over -------------------------------------------------------------------

OWNERSHIP_CHECK_S = 300.0
"""How often a shard reads back each group it runs passes for (`still_owned`): kopf learns that
a group left the shard's selector only from the watch's DELETED event, and a watch that had to
list again (its resource version expired, HTTP 410) sends none for a group that left meanwhile."""


def still_owned(shard: Shard | None, body: Mapping[str, object] | None) -> str | None:
    """Why `shard` no longer owns the group `body` as the API server has it now (None: it
    does): the group is gone, its labels select another shard, or another shard has taken
    it over (its name in `status.shard`)."""
    if body is None:
        return "it no longer exists"
    if shard is None:
        return None
    meta = body.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not shard.owns(labels if isinstance(labels, Mapping) else None):
        value = labels.get(SHARD_LABEL) if isinstance(labels, Mapping) else None
        return f"its label {SHARD_LABEL}={value or '(none)'} selects another shard"
    status = body.get("status")
    recorded = status.get("shard") if isinstance(status, Mapping) else None
    if recorded and recorded != shard.name:
        return f"shard {recorded!r} has taken it over"
    return None



@dataclass(frozen=True)
class Handoff:
    """Whether a shard may act on a group now; if not, how long until it asks again."""

    act: bool
    wait_s: float = 0.0
    message: str = ""
    """Why it waits, or why it acts although the previous shard never let go."""


def handoff(me: str | None, recorded: str | None, waiting_since: float | None,
            now: float, grace_s: float = HANDOFF_GRACE_S) -> Handoff:
    """May the shard `me` (None: not sharded) act on a group whose `status.shard` is
    `recorded`, having waited since `waiting_since` (None: not yet), at `now` (seconds, any
    clock that `waiting_since` shares)?

    1. Nobody holds it (`recorded` empty), or `me` does: act.
    2. Another shard holds it and this one has not waited yet: wait, the whole grace.
    3. Another shard still holds it after the grace: act; that shard is gone or stuck.
    4. Otherwise wait out the rest of the grace (the holder's release wakes it sooner).
    """
    if not recorded or recorded == me:
        return Handoff(act=True)
    if waiting_since is None:
        return Handoff(act=False, wait_s=grace_s, message=(
            f"shard {recorded!r} reconciled this group last; waiting until it lets the group "
            f"go (at most {grace_s:.0f} s)"))
    waited = now - waiting_since
    if waited >= grace_s:
        return Handoff(act=True, message=(
            f"shard {recorded!r} did not let the group go within {grace_s:.0f} s (it is "
            "stopped, or its pass hangs); this operator takes the group over"))
    return Handoff(act=False, wait_s=grace_s - waited, message=(
        f"shard {recorded!r} reconciled this group last; waiting until it lets the group go "
        f"({grace_s - waited:.0f} s left)"))
