"""JSON merge patches (RFC 7386) that turn one status into another.

Kopf applies status changes as merge patches, in which a key that is merely left out is kept.
The status is rebuilt from observation on every pass, so keys that disappeared must be sent
as null explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def merge_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that makes `old` equal to `new` (lists are replaced whole)."""
    old = old or {}
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                patch[key] = sub
        elif value != before or key not in old:
            patch[key] = _strip_nulls(value)
    return patch


def _strip_nulls(value: Any) -> Any:
    """Nulls inside a newly added object would mean "delete"; leave them out instead."""
    if isinstance(value, Mapping):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    return value
