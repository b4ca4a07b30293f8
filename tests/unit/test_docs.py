"""The README and the documentation site: a short README without run logs, every page of docs/
in the site's navigation, the generated API reference current, and the README's test command
the one CI runs. (`make docs` builds the site with --strict: links and anchors are its part.)"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
import yaml

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"

REVISION = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
"""A commit id as people quote one: 7 to 40 hex digits, letters and digits both."""
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")


def test_the_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 150


def test_the_readme_has_no_run_log() -> None:
    text = README.read_text()
    assert REVISION.findall(text) == [], "a commit id in the README"
    assert DATE.findall(text) == [], "a dated row in the README"


def test_the_benchmarks_page_tags_no_figure_with_a_revision() -> None:
    assert REVISION.findall((DOCS / "benchmarks.md").read_text()) == []


def _nav_pages(nav: list[object]) -> set[str]:
    pages: set[str] = set()
    for entry in nav:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            pages |= _nav_pages(value) if isinstance(value, list) else {str(value)}
    return pages


def test_every_doc_page_is_in_the_sites_navigation() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["theme"]["name"] == "material"
    assert _nav_pages(config["nav"]) == {p.name for p in DOCS.glob("*.md")}


def _gen_api_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api_docs", REPO / "scripts" /
                                                  "gen-api-docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_docs_are_generated_from_the_crd() -> None:
    gen = _gen_api_docs()
    crd = yaml.safe_load(gen.CRD.read_text())
    page = gen.render(crd)
    assert (DOCS / "api.md").read_text() == page, "run: make api-docs"
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for name in schema["properties"]:
        assert f"`spec.{name}`" in page


def test_the_api_docs_check_fails_on_a_hand_edit(tmp_path: Path) -> None:
    page = tmp_path / "api.md"
    page.write_text((DOCS / "api.md").read_text() + "a hand edit\n")
    gen = _gen_api_docs()
    assert gen.main(["--check", "--page", str(page)]) == 1
    assert gen.main(["--page", str(page)]) == 0
    assert gen.main(["--check", "--page", str(page)]) == 0


def test_the_readme_names_the_test_command_ci_runs() -> None:
    """.ci/run runs setup, then the README's test command."""
    run = (REPO / ".ci" / "run").read_text()
    (command,) = re.findall(r"^exec (.+)$", run, re.M)
    assert re.search(rf"^{re.escape(command)}\s+#", README.read_text(), re.M), command


def test_the_readme_and_the_docs_show_the_demos_plot() -> None:
    assert "](docs/img/demo-throughput.png)" in README.read_text()
    assert "](img/demo-throughput.png)" in (DOCS / "concepts.md").read_text()
    assert (DOCS / "img" / "demo-throughput.png").stat().st_size > 10_000
