"""The layers contracts of `.importlinter` inside decisions/ name every module of their package:
import-linter checks only the modules a `layers` contract lists, so a module added beside them
and left out of the contract would import anything, unnoticed."""

from __future__ import annotations

import configparser
import pkgutil
from pathlib import Path

import pytest

import staticfleet.decisions

ROOT = Path(__file__).resolve().parents[3]
DECISIONS = Path(staticfleet.decisions.__file__).parent


def _layers_contracts() -> dict[str, set[str]]:
    """Each `layers` contract's container, with the modules its layers name."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    out = {}
    for section in config.sections():
        contract = config[section]
        if contract.get("type") != "layers":
            continue
        for container in contract["containers"].split():
            out[container] = {name.strip() for line in contract["layers"].splitlines()
                              for name in line.split("|") if name.strip()}
    return out


PACKAGES = ["staticfleet.decisions", *(
    f"staticfleet.decisions.{m.name}" for m in pkgutil.iter_modules([str(DECISIONS)])
    if m.ispkg)]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_of_decisions_stands_in_a_layer(package: str) -> None:
    path = DECISIONS.joinpath(*package.split(".")[2:])
    modules = {m.name for m in pkgutil.iter_modules([str(path)])}
    assert _layers_contracts().get(package) == modules, (
        f"add the module to the layers contract of {package} in .importlinter")
