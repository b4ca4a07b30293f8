"""`staticfleet`: the operator's own command, and commands added by plugins (entry points of the
group `staticfleet.commands`). Plugins here are made up; the development environment's real ones
are tested in tests/unit/dev/test_cli.py."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from staticfleet import cli

PLUGIN = "sf_test_plugin"


def plugin(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=cli.PLUGIN_GROUP)


def commands(p: argparse.ArgumentParser) -> list[str]:
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


@pytest.fixture
def plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on the import path for made-up plugin packages (pytest takes it off again);
    the packages imported from it are forgotten afterwards."""
    monkeypatch.syspath_prepend(tmp_path)
    yield tmp_path
    for name in [m for m in sys.modules if m == PLUGIN or m.startswith(f"{PLUGIN}.")]:
        del sys.modules[name]


def write_plugin(root: Path, body: str) -> None:
    (root / PLUGIN).mkdir()
    (root / PLUGIN / "__init__.py").write_text("")
    (root / PLUGIN / "cli.py").write_text(body)


def test_the_operator_alone() -> None:
    p = cli.parser(plugins=[])
    assert commands(p) == ["operator"]
    args = p.parse_args(["operator", "run", "--namespace", "a", "--namespace", "b",
                         "--metrics-port", "9000"])
    assert (args.namespace, args.all_namespaces, args.metrics_port, args.health_port,
            args.metrics_host) == (["a", "b"], False, 9000, 8081, "0.0.0.0")
    with pytest.raises(SystemExit):
        p.parse_args(["operator", "run", "--namespace", "a", "--all-namespaces"])


def test_a_plugin_adds_its_command(plugin_module: Path) -> None:
    write_plugin(plugin_module, (
        "def add(sub):\n"
        "    p = sub.add_parser('hello')\n"
        "    p.add_argument('--who', default='world')\n"
        "    p.set_defaults(func=lambda args: print('hello', args.who) or 0)\n"))
    p = cli.parser(plugins=[plugin("hello", f"{PLUGIN}.cli:add")])
    assert commands(p) == ["operator", "hello"]
    assert p.parse_args(["hello", "--who", "you"]).who == "you"


@pytest.mark.parametrize("value", [f"{PLUGIN}.cli:add", f"{PLUGIN}:add"])
def test_a_plugin_whose_package_is_absent_is_left_out(value: str) -> None:
    """The operator image: the distribution names the development environment's commands, but
    its package is not installed."""
    p = cli.parser(plugins=[plugin("env", value)])
    assert commands(p) == ["operator"]


def test_a_plugin_missing_a_dependency_is_an_error(plugin_module: Path) -> None:
    write_plugin(plugin_module, "import sf_test_no_such_dependency\n\ndef add(sub): pass\n")
    with pytest.raises(ModuleNotFoundError, match="sf_test_no_such_dependency"):
        cli.parser(plugins=[plugin("broken", f"{PLUGIN}.cli:add")])


@pytest.mark.parametrize(("body", "error"), [
    ("def other(sub): pass\n", AttributeError),
    ("def add(sub): raise ValueError('bad plugin')\n", ValueError),
])
def test_other_plugin_errors_are_not_hidden(plugin_module: Path, body: str,
                                            error: type[Exception]) -> None:
    write_plugin(plugin_module, body)
    with pytest.raises(error):
        cli.parser(plugins=[plugin("broken", f"{PLUGIN}.cli:add")])


@pytest.mark.parametrize(("raised", "code"), [
    (cli.CommandError("no java", exit_code=3), 3),
    (cli.CommandError("it failed"), 1),
    (RuntimeError("it failed"), 1),
])
def test_errors_become_one_line_and_an_exit_status(
        plugin_module: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        raised: Exception, code: int) -> None:
    write_plugin(plugin_module, (
        "def add(sub):\n"
        "    sub.add_parser('fail').set_defaults(func=fail)\n"
        "def fail(args):\n"
        "    raise RAISED\n"))
    monkeypatch.setattr(cli, "installed_plugins", lambda: [plugin("fail", f"{PLUGIN}.cli:add")])
    import sf_test_plugin.cli as module  # type: ignore[import-not-found]

    module.RAISED = raised
    assert cli.main(["fail"]) == code
    assert capsys.readouterr().err == f"error: {raised}\n"


def test_installed_plugins_are_sorted_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    found = [plugin("b", "x:b"), plugin("a", "x:a")]

    def entry_points(**kwargs: Any) -> list[EntryPoint]:
        assert kwargs == {"group": "staticfleet.commands"}
        return found

    monkeypatch.setattr(cli, "entry_points", entry_points)
    assert [ep.name for ep in cli.installed_plugins()] == ["a", "b"]
