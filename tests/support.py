"""Helpers the tiers share (not fixtures: those are in tests/conftest.py)."""

from __future__ import annotations

import uuid

MEMBER_INGRESS_FROM = [
    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "staticfleet-system"}},
     "podSelector": {"matchLabels": {"app.kubernetes.io/name": "staticfleet",
                                     "app.kubernetes.io/instance": "staticfleet"}}}]
"""The sources the session's operator admits to member ports, as the chart's default release
`staticfleet` in `staticfleet-system` would give them (nothing enforces them here: no CNI)."""


def unique(prefix: str) -> str:
    """A name no other test uses: topics, groups and namespaces are random per test."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
