"""Whether a child still holds what the operator applied to it (pure).

The operator watches the children it server-side-applies (the ConfigMap, the headless Service,
the PodDisruptionBudget, the NetworkPolicy) and applies one again only when its content changed
or when the child no longer holds what was applied: someone changed a field the operator sets,
or deleted the child. `drift` says which, for each event of that watch.

A child holds what was applied the way server-side apply owns fields: every field the operator
set has the value it set. Fields it does not set do not count: the API server's defaults, its
own metadata, what others added (a label, an annotation). Go's JSON leaves empty values out
(`omitempty`), so an empty value applied (null, `""`, 0, false, `[]`, `{}`) is held by an absent
one. A list is held item by item, at its length: an item added or removed is a change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

GONE = "deleted, or its labels no longer select it"


def _empty(value: Any) -> bool:
    return value is None or (not value and isinstance(value, str | int | float | list | dict))


def unheld(applied: Any, live: Any, path: str = "") -> str | None:
    """The path of the first field of `applied` that `live` does not hold (`data.config.json`,
    `spec.ports[0].port`; "" for the whole), None when it holds every one."""
    if isinstance(applied, Mapping):
        if not isinstance(live, Mapping):
            return path
        for key, value in applied.items():
            where = f"{path}.{key}" if path else str(key)
            if live.get(key) is None:
                if _empty(value):
                    continue
                return where
            if (found := unheld(value, live[key], where)) is not None:
                return found
        return None
    if isinstance(applied, Sequence) and not isinstance(applied, str):
        if (not isinstance(live, Sequence) or isinstance(live, str)
                or len(live) != len(applied)):
            return path
        for i, (mine, theirs) in enumerate(zip(applied, live, strict=True)):
            if (found := unheld(mine, theirs, f"{path}[{i}]")) is not None:
                return found
        return None
    same = applied == live and isinstance(live, bool) == isinstance(applied, bool)
    return None if same else path


def drift(applied: Mapping[str, Any], live: Mapping[str, Any] | None) -> str | None:
    """Why the child no longer holds what the operator applied to it (`GONE` when `live` is
    None: the watch said DELETED), None when it holds it: the event was the operator's own
    write, or a change to fields it does not set."""
    if live is None:
        return GONE
    where = unheld(applied, live)
    return None if where is None else f"{where or 'its content'} changed"
