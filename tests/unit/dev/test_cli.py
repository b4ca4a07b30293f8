"""The development environment's commands of `staticfleet` (`env up|status|down|build`, `demo`):
declared as entry points in pyproject.toml, added by `staticfleet.cli`, with the same flags as
before they moved out of the operator, and a missing tool or failed build as exit status 3."""

from __future__ import annotations

import argparse
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from staticfleet import cli
from staticfleet_dev import build, environment
from staticfleet_dev.tools import BuildFailed, ToolMissing

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def declared_plugins() -> list[EntryPoint]:
    """The entry points pyproject.toml declares (the installed metadata may be older)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    group = project["entry-points"][cli.PLUGIN_GROUP]
    return sorted((EntryPoint(name=name, value=value, group=cli.PLUGIN_GROUP)
                   for name, value in group.items()), key=lambda ep: ep.name)


@pytest.fixture
def dev_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "installed_plugins", declared_plugins)


def test_pyproject_declares_env_and_demo() -> None:
    assert {ep.name: ep.value for ep in declared_plugins()} == {
        "demo": "staticfleet_dev.cli:add_demo_command",
        "env": "staticfleet_dev.cli:add_env_command",
    }
    for ep in declared_plugins():
        assert callable(ep.load())


@pytest.mark.parametrize(("argv", "expected"), [
    (["env", "up"], {"name": "default", "json": False, "test_settings": False, "no_node": False}),
    (["env", "up", "--name", "x", "--json", "--test-settings", "--no-node"],
     {"name": "x", "json": True, "test_settings": True, "no_node": True}),
    (["env", "up", "--brokers", "3"], {"brokers": 3}),
    (["env", "broker", "kill", "2"], {"action": "kill", "node": 2, "name": "default"}),
    (["env", "broker", "elect", "--name", "x"], {"action": "elect", "node": None, "name": "x"}),
    (["demo", "--brokers", "3"], {"brokers": 3}),
    (["env", "status", "--name", "x", "--json"], {"name": "x", "json": True}),
    (["env", "down", "--all"], {"name": "default", "all": True}),
    (["env", "build"], {"steps": ["all"]}),
    (["env", "build", "kafka", "helm"], {"steps": ["kafka", "helm"]}),
    (["demo"], {"down": False, "rate": 200, "settle": 20.0, "members": 3, "json": False,
                "name": "demo"}),
    (["demo", "--down", "--rate", "50", "--settle", "1.5", "--members", "2", "--json", "--name",
      "d"], {"down": True, "rate": 50, "settle": 1.5, "members": 2, "json": True, "name": "d"}),
])
def test_commands_and_flags(argv: list[str], expected: dict[str, Any]) -> None:
    p = cli.parser(plugins=declared_plugins())
    args = vars(p.parse_args(argv))
    assert {k: args[k] for k in expected} == expected
    assert callable(args["func"])


@pytest.mark.parametrize("argv", [["env"], ["env", "restart"], ["demo", "--rate", "x"],
                                  ["env", "up", "--brokers", "2"],
                                  ["env", "broker", "reboot", "1"]])
def test_bad_command_lines_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.parser(plugins=declared_plugins()).parse_args(argv)
    assert exc.value.code == 2


@pytest.mark.parametrize("error", [ToolMissing("java not found on PATH: install a JDK 17"),
                                   BuildFailed("go build ... failed (exit 1)")])
def test_a_missing_tool_or_failed_build_exits_3(
        dev_cli: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        error: Exception) -> None:
    def up(*_args: Any, **_kwargs: Any) -> None:
        raise error

    monkeypatch.setattr(environment, "up", up)
    assert cli.main(["env", "up", "--name", "unit-test-never-started"]) == 3
    assert capsys.readouterr().err == f"error: {error}\n"


def test_other_runtime_errors_exit_1(dev_cli: None, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    def up(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("the broker did not start")

    monkeypatch.setattr(environment, "up", up)
    assert cli.main(["env", "up", "--name", "unit-test-never-started"]) == 1
    assert capsys.readouterr().err == "error: the broker did not start\n"


def test_env_build_keeps_its_own_exit_status(dev_cli: None,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def main(steps: list[str]) -> int:
        seen.append(steps)
        return 2

    monkeypatch.setattr(build, "main", main)
    assert cli.main(["env", "build", "nope"]) == 2
    assert seen == [["nope"]]


def test_help_lists_the_operator_first(dev_cli: None) -> None:
    p = cli.parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == ["operator", "demo", "env"]


def test_env_broker_says_what_is_wrong(dev_cli: None, monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No such environment, a single-broker one, no broker id, no such broker."""
    monkeypatch.setattr(environment, "registry_dir", lambda: tmp_path)
    assert cli.main(["env", "broker", "kill", "1", "--name", "none"]) == 1
    assert "is not up: start it with `staticfleet env up --brokers 3`" in capsys.readouterr().err
    single = environment.LocalEnv(name="one", root=tmp_path / "one", bootstrap="b",
                                  kubeconfig=tmp_path / "k", server="s", owner_pid=1)
    environment.save(single)
    assert cli.main(["env", "broker", "stop", "1", "--name", "one"]) == 1
    assert "runs a single broker" in capsys.readouterr().err
    (tmp_path / "three" / "kafka" / "node-1").mkdir(parents=True)
    (tmp_path / "three" / "kafka" / "node-1" / "node.json").write_text(
        '{"bootstrap": "127.0.0.1:1", "command": ["true"]}')
    three = environment.LocalEnv(name="three", root=tmp_path / "three", bootstrap="b",
                                 kubeconfig=tmp_path / "k", server="s", owner_pid=1, brokers=3,
                                 records=[environment.ProcessRecord("kafka-1", 1, 0, "log")])
    environment.save(three)
    assert cli.main(["env", "broker", "kill", "--name", "three"]) == 1
    assert "needs the broker's id (1)" in capsys.readouterr().err
    assert cli.main(["env", "broker", "kill", "7", "--name", "three"]) == 1
    assert "no broker 7: the cluster has brokers [1]" in capsys.readouterr().err
