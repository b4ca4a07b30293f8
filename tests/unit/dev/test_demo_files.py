"""The demo finds the files it applies in the source tree it runs from."""

from __future__ import annotations

import pytest

from staticfleet_dev import demo

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", ["crds", "examples/consumergroup.yaml"])
def test_the_demo_finds_its_files_in_the_checkout(name: str) -> None:
    assert demo._repo_file(*name.split("/")).exists()


def test_a_missing_file_names_the_path_and_what_to_do() -> None:
    with pytest.raises(demo.DemoFailed, match=r"nosuch not found: the demo runs from a source"):
        demo._repo_file("nosuch")
