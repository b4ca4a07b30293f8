"""The LICENSE file is the license pyproject.toml names: the Apache License 2.0, its text as
the Apache Software Foundation publishes it (copied from a package that ships it, not retyped)."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
"""sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt."""


def test_the_license_file_is_the_apache_license_pyproject_names() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256
