"""The `staticfleet` command: the operator, plus the commands of installed plugins.

`operator run` is the operator's own. Further commands come from the entry points of the group
`staticfleet.commands`: each is a function that takes the argparse subparsers object and adds its
parser, with `func` set to a function of the parsed arguments returning the exit status. The
development environment (`staticfleet_dev`) adds `env` and `demo` this way; where it is not
installed (the operator image) the command simply lacks them. A plugin that fails with a
`CommandError` exits with that error's status; any other RuntimeError exits with 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points

PLUGIN_GROUP = "staticfleet.commands"


class CommandError(Exception):
    """A command failed in a way its message explains; the process exits with `exit_code`."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _operator_run(args: argparse.Namespace) -> int:
    from staticfleet.run import run_operator

    return run_operator(namespaces=args.namespace, all_namespaces=args.all_namespaces,
                        metrics_port=args.metrics_port, health_port=args.health_port,
                        metrics_host=args.metrics_host, shard=args.shard,
                        other_shards=args.other_shards, peering=args.peering)


def installed_plugins() -> list[EntryPoint]:
    """The entry points of the group `staticfleet.commands`, by name."""
    return sorted(entry_points(group=PLUGIN_GROUP), key=lambda ep: ep.name)


def _is_absent(exc: ModuleNotFoundError, ep: EntryPoint) -> bool:
    """The plugin's own module (or a package above it) is not installed; a module missing
    further down, e.g. a dependency the plugin imports, is an error worth showing."""
    parts = ep.module.split(".")
    return exc.name in {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def _add_plugin_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                         plugins: Iterable[EntryPoint]) -> None:
    for ep in plugins:
        try:
            add_command = ep.load()
        except ModuleNotFoundError as exc:
            if _is_absent(exc, ep):
                continue
            raise
        add_command(sub)


def parser(plugins: Iterable[EntryPoint] | None = None) -> argparse.ArgumentParser:
    """The command line: `operator run`, then the commands of `plugins` (default: those
    installed)."""
    p = argparse.ArgumentParser(prog="staticfleet", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    op = sub.add_parser("operator", help="the Kubernetes operator")
    op_sub = op.add_subparsers(dest="operator_command", required=True)
    run = op_sub.add_parser("run", help="run the operator against the current kubeconfig")
    scope = run.add_mutually_exclusive_group()
    scope.add_argument("--namespace", action="append", default=[],
                       help="watch this namespace (repeatable)")
    scope.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    run.add_argument("--metrics-port", type=int, default=8080)
    run.add_argument("--metrics-host", default="0.0.0.0")
    run.add_argument("--health-port", type=int, default=8081)
    run.add_argument("--shard", metavar="NAME",
                     help="own only the ConsumerGroups labelled staticfleet.io/shard=NAME "
                          "(default: $STATICFLEET_SHARD; unset: every ConsumerGroup)")
    run.add_argument("--other-shards", metavar="NAME,...",
                     help="makes --shard the default shard: it also owns every ConsumerGroup "
                          "not labelled with one of these shards (unlabelled ones included; "
                          "default: $STATICFLEET_OTHER_SHARDS)")
    run.add_argument("--peering", metavar="NAME",
                     help="pause while an older operator runs in kopf's peering object NAME "
                          "(one per shard; default: standalone, no peering)")
    run.set_defaults(func=_operator_run)

    _add_plugin_commands(sub, installed_plugins() if plugins is None else plugins)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
