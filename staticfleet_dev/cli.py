"""The development environment's commands of `staticfleet`: `env up|status|down|build` and `demo`.

Each `add_*_command` is an entry point of the group `staticfleet.commands` (pyproject.toml), which
`staticfleet.cli` loads; the operator never imports this module. A missing host tool or a failed
build (ToolMissing, BuildFailed) becomes `staticfleet.cli.CommandError` with exit status 3.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from typing import Any

from staticfleet.cli import CommandError
from staticfleet_dev.tools import BuildFailed, ToolMissing

TOOL_EXIT_CODE = 3

Command = Callable[[argparse.Namespace], int]


def _tool_errors(command: Command) -> Command:
    """`command`, with a missing tool or a failed build reported as exit status 3."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (ToolMissing, BuildFailed) as exc:
            raise CommandError(str(exc), exit_code=TOOL_EXIT_CODE) from exc

    return run


def _env_up(args: argparse.Namespace) -> int:
    from staticfleet_dev import environment
    from staticfleet_dev.kafka import KafkaSettings

    settings = KafkaSettings.for_tests() if args.test_settings else KafkaSettings()
    started = time.monotonic()
    env = environment.up(args.name, kafka_settings=settings, with_node=not args.no_node,
                         brokers=args.brokers)
    took = time.monotonic() - started
    if args.json:
        print(json.dumps({**environment.status(args.name), "seconds": round(took, 1)}))
    else:
        print(f"environment {env.name!r} up in {took:.1f}s")
        print(f"  kafka bootstrap: {env.bootstrap}")
        print(f"  kubeconfig:      {env.kubeconfig}")
        print(f"  export KUBECONFIG={env.kubeconfig}")
        print(f"  pod logs:        {env.pod_log_dir}")
    return 0


def _env_status(args: argparse.Namespace) -> int:
    from staticfleet_dev import environment

    st = environment.status(args.name)
    if args.json:
        print(json.dumps(st))
    elif not st["processes"]:
        print(f"environment {args.name!r} is not up")
    else:
        print(f"environment {args.name!r}: {'up' if st['up'] else 'DEGRADED'}")
        print(f"  kafka bootstrap: {st['bootstrap']}\n  kubeconfig:      {st['kubeconfig']}")
        for p in st["processes"]:
            print(f"  {p['name']:<24} pid {p['pid']:<8} {'alive' if p['alive'] else 'DEAD'}"
                  f"  log {p['log']}")
    return 0 if st["up"] else 1


def _env_down(args: argparse.Namespace) -> int:
    from staticfleet_dev import environment

    names = [e.name for e in environment.registered()] if args.all else [args.name]
    for name in names:
        print(f"environment {name!r}: {'stopped' if environment.down(name) else 'was not up'}")
    return 0


def _env_broker(args: argparse.Namespace) -> int:
    from staticfleet_dev import environment
    from staticfleet_dev.procs import ServerFailed

    env = environment.load(args.name)
    if env is None:
        raise CommandError(f"environment {args.name!r} is not up: start it with "
                           "`staticfleet env up --brokers 3`")
    try:
        cluster = env.cluster()
        if args.action == "elect":
            cluster.elect_preferred_leaders()
            print("preferred leaders elected (group coordinators moved with them)")
            return 0
        if args.node is None:
            raise CommandError(f"`env broker {args.action}` needs the broker's id "
                               f"({', '.join(map(str, cluster.node_ids))})")
        started = time.monotonic()
        getattr(cluster, args.action)(args.node)
    except (ValueError, ServerFailed) as exc:
        raise CommandError(str(exc)) from exc
    env.replace_record(cluster.node(args.node).record)
    environment.save(env)
    done = {"stop": "stopped", "kill": "killed", "start": "serving and in sync"}[args.action]
    print(f"broker {args.node} {done} ({time.monotonic() - started:.1f}s)")
    return 0


def _env_build(args: argparse.Namespace) -> int:
    from staticfleet_dev import build

    return build.main(args.steps)


def _demo(args: argparse.Namespace) -> int:
    from staticfleet_dev.demo.main import run_demo

    return run_demo(args)


def add_env_command(sub: Any) -> None:
    """`staticfleet env up|status|down|build`: the embedded local environment."""
    env = sub.add_parser("env", help="the embedded local environment (Kafka, Kubernetes, node)")
    env_sub = env.add_subparsers(dest="env_command", required=True)
    e_up = env_sub.add_parser("up", help="start a broker, a control plane and the local node")
    e_up.add_argument("--name", default="default")
    e_up.add_argument("--json", action="store_true", help="print machine-readable JSON")
    e_up.add_argument("--test-settings", action="store_true",
                      help="lower the broker's group minimums and initial rebalance delay")
    e_up.add_argument("--no-node", action="store_true", help="do not start the local node")
    e_up.add_argument("--brokers", type=int, choices=(1, 3), default=1,
                      help="Kafka brokers: 1, or 3 (KRaft quorum of three, everything "
                           "replicated 3) to rehearse broker rolls with `env broker`")
    e_up.set_defaults(func=_tool_errors(_env_up))
    e_st = env_sub.add_parser("status", help="show what runs")
    e_st.add_argument("--name", default="default")
    e_st.add_argument("--json", action="store_true")
    e_st.set_defaults(func=_tool_errors(_env_status))
    e_dn = env_sub.add_parser("down", help="stop what `env up` started and remove its files")
    e_dn.add_argument("--name", default="default")
    e_dn.add_argument("--all", action="store_true", help="every registered environment")
    e_dn.set_defaults(func=_tool_errors(_env_down))
    e_br = env_sub.add_parser(
        "broker", help="stop, kill or start one broker, or elect preferred leaders "
                       "(an environment started with --brokers 3)")
    e_br.add_argument("action", choices=("stop", "kill", "start", "elect"),
                      help="stop: SIGTERM (controlled shutdown); kill: SIGKILL; start: start "
                           "it again and wait until its replicas are in sync; elect: move "
                           "leaderships (and group coordinators) to the preferred replicas")
    e_br.add_argument("node", type=int, nargs="?", help="the broker's id (1-3)")
    e_br.add_argument("--name", default="default")
    e_br.set_defaults(func=_tool_errors(_env_broker))
    e_bd = env_sub.add_parser("build", help="build or download the servers into the cache")
    e_bd.add_argument("steps", nargs="*", default=["all"])
    e_bd.set_defaults(func=_tool_errors(_env_build))


def add_demo_command(sub: Any) -> None:
    """`staticfleet demo`: a rolling restart without a rebalance, shown locally."""
    demo = sub.add_parser("demo", help="show a rolling restart without a rebalance, locally")
    demo.add_argument("--down", action="store_true", help="tear everything down at the end")
    demo.add_argument("--rate", type=int, default=200, help="records produced per second")
    demo.add_argument("--settle", type=float, default=20.0,
                      help="seconds of steady consumption before and after the rollout")
    demo.add_argument("--members", type=int, default=3)
    demo.add_argument("--brokers", type=int, choices=(1, 3), default=1,
                      help="Kafka brokers of the local environment (3: replicated 3)")
    demo.add_argument("--json", action="store_true", help="print the final report as JSON")
    demo.add_argument("--name", default="demo", help="name of the local environment")
    demo.set_defaults(func=_tool_errors(_demo))
