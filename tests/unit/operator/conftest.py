"""Every test in tests/unit/operator is a pure unit test: mark it so."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/unit/operator" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.unit)
