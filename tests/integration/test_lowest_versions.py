"""The lowest versions pyproject.toml allows: every direct dependency of the `operator` and
`member` extras pinned to its `>=` bound, in a venv of its own, where the project's code runs
the product's unit tests and the operator starts against the real API server.

What is installed there (`lowest_venv`): those dependencies at their bounds (`constraints`, made
from pyproject.toml's `>=` bounds, so it follows them), and, unconstrained beside them, what the
tests and `staticfleet_dev` need (the `dev` and `test` extras' own requirements: pytest,
hypothesis, aiohttp, cryptography, ...); they may pull the constrained packages' own
dependencies (numpy, grpcio, ...) up, never those pinned. Then the project itself, from this
checkout, without dependencies (`pip check` then says whether its own requirements hold); the
tests and the operator run with the checkout's sources first on the path, the same code.

The unit tests run are the product's: tests/unit/operator, tests/unit/runtime and
tests/unit/test_member_contract.py (the operator, the member runtime and the contract between
them). Not the chart's, the docs' or the development tools' (staticfleet_dev's local
environment, demo and dashboard tests), which need helm, mkdocs or hadolint and test no code that
a user's install runs.

The venv is kept in the cache (`tools.cache_root()/lowest-venv/<hash>`), named by the hash of
what it was made from (the pinned and the unconstrained requirement lines, and the
interpreter's version), so a run after the first reinstalls nothing; a change of a bound makes a
new one. Made by pip with `--only-binary :all:` (no compilers: a bound with no wheel for this
Python fails here, as it would for a user), but for pyspark, which PyPI has only as an sdist (a
pure-Python one with its jars). A first run downloads pyspark (about 400 MB) and takes minutes;
a warm one about a minute.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from staticfleet_dev.procs import free_port
from staticfleet_dev.testkit.kube import create_namespace, kubectl
from staticfleet_dev.testkit.operator import OperatorProcess
from staticfleet_dev.testkit.poll import wait_for
from staticfleet_dev.tools import cache_root
from tests.integration.support import PLACEHOLDER, consumer_group, has_condition
from tests.support import unique

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PINNED_EXTRAS = ("operator", "member")
FREE_EXTRAS = ("dev", "test")
UNIT_TESTS = ("tests/unit/operator", "tests/unit/runtime", "tests/unit/test_member_contract.py")
PROJECT_FILES = ("pyproject.toml", "README.md", "LICENSE", "operator", "consumer_runtime",
                 "staticfleet_dev", "member_contract", "kafkawire")
SOURCE_ONLY = ("pyspark",)
"""Packages PyPI has no wheel of, built from their sdist."""


def _extras() -> dict[str, list[str]]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return dict(tomllib.load(f)["project"]["optional-dependencies"])


def constraints() -> list[str]:
    """`name==bound` for every `>=` bound of the pinned extras' requirements (sorted, one per
    package; a package in both extras must have one bound)."""
    pins: dict[str, str] = {}
    extras = _extras()
    for extra in PINNED_EXTRAS:
        for line in extras[extra]:
            req = Requirement(line)
            lows = [s.version for s in req.specifier if s.operator == ">="]
            assert len(lows) == 1, f"{line!r} ({extra}): no single >= bound to install"
            pin = f"{req.name.lower()}=={lows[0]}"
            assert pins.setdefault(req.name.lower(), pin) == pin, (
                f"{req.name}: two lower bounds in {PINNED_EXTRAS}: {pins[req.name.lower()]}, {pin}")
    return sorted(pins.values())


def requirements() -> list[str]:
    """Every requirement line of the extras, but the project's own (`staticfleet[...]`)."""
    extras = _extras()
    return [line for extra in (*PINNED_EXTRAS, *FREE_EXTRAS) for line in extras[extra]
            if Requirement(line).name != "staticfleet"]


def _pip(python: Path, *args: str, log: Path) -> None:
    with log.open("a") as out:
        out.write(f"$ pip {' '.join(args)}\n")
        out.flush()
        proc = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args],
                              stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode:
        pytest.fail(f"pip {args[0]} failed in the lowest-versions venv; log: {log}\n"
                    f"{log.read_text()[-4000:]}", pytrace=False)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _base_python() -> str:
    """The interpreter under this venv (a venv made from a venv's python is the base's)."""
    return getattr(sys, "_base_executable", sys.executable)


@pytest.fixture(scope="module")
def lowest_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cached venv (see the module), with this checkout installed in it: its python."""
    pins, reqs = constraints(), requirements()
    key = hashlib.sha256(json.dumps([pins, reqs, sys.version]).encode()).hexdigest()[:16]
    venv = cache_root() / "lowest-venv" / key
    python = venv / "bin" / "python"
    log = tmp_path_factory.mktemp("lowest") / "pip.log"
    with _locked(cache_root() / "lowest-venv" / ".lock"):
        if not (venv / ".complete").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([_base_python(), "-m", "venv", str(venv)], check=True)
            (venv / "constraints.txt").write_text("\n".join(pins) + "\n")
            (venv / "requirements.txt").write_text("\n".join(reqs) + "\n")
            _pip(python, "install", "--only-binary", ":all:",
                 *[a for name in SOURCE_ONLY for a in ("--no-binary", name)],
                 "-c", str(venv / "constraints.txt"), "-r", str(venv / "requirements.txt"),
                 log=log)
            (venv / ".complete").write_text("\n".join(pins) + "\n")
        # This checkout (no dependencies, no build isolation: setuptools and wheel are in the
        # test extra), over whatever an earlier run left; built from a copy, since setuptools
        # leaves build/ and *.egg-info where it builds.
        src = tmp_path_factory.mktemp("project")
        for name in PROJECT_FILES:
            (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(
                ROOT / name, src / name)
        _pip(python, "install", "--no-deps", "--no-build-isolation", "--force-reinstall",
             "--no-index", str(src), log=log)
        _pip(python, "check", log=log)
    listed = json.loads(subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json"], capture_output=True, text=True,
        check=True).stdout)
    installed = {canonicalize_name(p["name"]): Version(p["version"]) for p in listed}
    off = [pin for pin in pins if installed.get(canonicalize_name(pin.split("==")[0]))
           != Version(pin.split("==")[1])]
    assert not off, f"not installed at its bound: {off}"
    print(f"lowest versions ({venv}): {', '.join(pins)}")
    return python


def _clean_env() -> dict[str, str]:
    """This process's environment without what points at the session's own venv or sources:
    the lowest venv's interpreter finds the project only where it was installed."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def test_the_unit_tier_passes_on_the_lowest_versions(lowest_venv: Path) -> None:
    # From the checkout, its sources first on the path (the same as those installed; some tests
    # read the source tree and compare it with the modules' own files, as under the editable
    # install of scripts/setup.sh). The dependencies are the venv's either way.
    env = {**_clean_env(), "PYTHONPATH": f"{ROOT / 'operator'}:{ROOT}"}
    proc = subprocess.run(
        [str(lowest_venv), "-m", "pytest", *UNIT_TESTS, "-m", "unit", "-q",
         "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    print(tail)
    assert proc.returncode == 0, f"the unit tests failed on the lowest versions:\n{tail}"


def test_the_operator_starts_and_acts_on_the_lowest_versions(
    lowest_venv: Path, kubeconfig: Path, crds: None, tmp_path: Path,
) -> None:
    """Its startup (kopf's settings, kopfpatch, the watches with their label selectors) and a
    pass over a ConsumerGroup whose broker refuses (status and an Event written through the
    kubernetes client): the group gets Degraded with the broker's reason."""
    namespace = unique("lowest")
    create_namespace(kubeconfig, namespace)
    log = tmp_path / "operator.log"
    # `source`: this checkout's sources first on its path (the same as those installed; it also
    # replaces a PYTHONPATH this session may have pointing elsewhere).
    operator = OperatorProcess(kubeconfig=kubeconfig, log=log, python=lowest_venv, source=ROOT,
                               extra_env={"PYTHONNOUSERSITE": "1",
                                          "STATICFLEET_RESYNC_SECONDS": "5"})
    try:
        operator.start(timeout=90)
    except Exception as exc:
        pytest.fail(f"the operator did not start on the lowest versions: {exc}\n"
                    f"{operator.log_tail(60)}", pytrace=False)
    try:
        cg = consumer_group("g", bootstrap=f"127.0.0.1:{free_port()}", topics=["t"],
                            replicas=1, command=PLACEHOLDER)
        cg["metadata"]["namespace"] = namespace
        kubectl(kubeconfig, "apply", "-f", "-", input=json.dumps(cg))

        found = wait_for("Degraded=True KafkaUnreachable on the lowest versions",
                         lambda: has_condition(kubeconfig, namespace, "g", "Degraded", "True",
                                               "KafkaUnreachable"),
                         timeout=90, describe=lambda: operator.log_tail(40))
        print(f"Degraded: {found}")
        assert operator.proc is not None and operator.proc.poll() is None
    finally:
        operator.stop()
        kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=false", check=False)
