"""Merge patches that make the stored status equal to the rebuilt one."""

from __future__ import annotations

from typing import Any

import pytest

from staticfleet.statuspatch import merge_patch

CASES = [
    ("unchanged", {"a": 1}, {"a": 1}, {}),
    ("new key", {}, {"a": 1}, {"a": 1}),
    ("removed key is nulled", {"a": 1, "b": 2}, {"a": 1}, {"b": None}),
    ("nested change only", {"r": {"phase": "Idle", "n": 1}}, {"r": {"phase": "Rolling", "n": 1}},
     {"r": {"phase": "Rolling"}}),
    ("nested removal", {"r": {"current": 2, "phase": "Rolling"}}, {"r": {"phase": "Complete"}},
     {"r": {"current": None, "phase": "Complete"}}),
    ("lists are replaced whole", {"l": [1, 2]}, {"l": [2]}, {"l": [2]}),
    ("nulls inside a new object are left out", {}, {"r": {"a": None, "b": 1}}, {"r": {"b": 1}}),
    ("a value that becomes an object", {"r": 1}, {"r": {"a": 1}}, {"r": {"a": 1}}),
]


@pytest.mark.parametrize(("old", "new", "patch"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_merge_patch(old: dict[str, Any], new: dict[str, Any], patch: dict[str, Any]) -> None:
    assert merge_patch(old, new) == patch


def apply(doc: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 applied, to check the round trip."""
    out = dict(doc)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = apply(out[k], v)
        else:
            out[k] = v
    return out


@pytest.mark.parametrize(("old", "new"), [c[1:3] for c in CASES], ids=[c[0] for c in CASES])
def test_applying_the_patch_gives_the_new_status(old: dict[str, Any],
                                                 new: dict[str, Any]) -> None:
    expected = {k: v for k, v in new.items()}
    if "r" in expected and isinstance(expected["r"], dict):
        expected["r"] = {k: v for k, v in expected["r"].items() if v is not None}
    assert apply(old, merge_patch(old, new)) == expected
