"""The `staticfleet` command: the local environment, the operator and the demo."""

from __future__ import annotations

import argparse
import json
import sys
import time

from staticfleet_dev.tools import BuildFailed, ToolMissing


def _env_up(args: argparse.Namespace) -> int:
    from staticfleet_dev import environment
    from staticfleet_dev.kafka import KafkaSettings

    settings = KafkaSettings.for_tests() if args.test_settings else KafkaSettings()
    started = time.monotonic()
    env = environment.up(args.name, kafka_settings=settings, with_node=not args.no_node)
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


def _env_build(args: argparse.Namespace) -> int:
    from staticfleet_dev import build

    return build.main(args.steps)


def _operator_run(args: argparse.Namespace) -> int:
    from staticfleet.main import run_operator

    return run_operator(namespaces=args.namespace, all_namespaces=args.all_namespaces,
                        metrics_port=args.metrics_port, health_port=args.health_port,
                        metrics_host=args.metrics_host)


def _demo(args: argparse.Namespace) -> int:
    from staticfleet_dev.demo import run_demo

    return run_demo(args)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="staticfleet", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    env = sub.add_parser("env", help="the embedded local environment (Kafka, Kubernetes, node)")
    env_sub = env.add_subparsers(dest="env_command", required=True)
    e_up = env_sub.add_parser("up", help="start a broker, a control plane and the local node")
    e_up.add_argument("--name", default="default")
    e_up.add_argument("--json", action="store_true", help="print machine-readable JSON")
    e_up.add_argument("--test-settings", action="store_true",
                      help="lower the broker's group minimums and initial rebalance delay")
    e_up.add_argument("--no-node", action="store_true", help="do not start the local node")
    e_up.set_defaults(func=_env_up)
    e_st = env_sub.add_parser("status", help="show what runs")
    e_st.add_argument("--name", default="default")
    e_st.add_argument("--json", action="store_true")
    e_st.set_defaults(func=_env_status)
    e_dn = env_sub.add_parser("down", help="stop what `env up` started and remove its files")
    e_dn.add_argument("--name", default="default")
    e_dn.add_argument("--all", action="store_true", help="every registered environment")
    e_dn.set_defaults(func=_env_down)
    e_bd = env_sub.add_parser("build", help="build or download the servers into the cache")
    e_bd.add_argument("steps", nargs="*", default=["all"])
    e_bd.set_defaults(func=_env_build)

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
    run.set_defaults(func=_operator_run)

    demo = sub.add_parser("demo", help="show a rolling restart without a rebalance, locally")
    demo.add_argument("--down", action="store_true", help="tear everything down at the end")
    demo.add_argument("--rate", type=int, default=200, help="records produced per second")
    demo.add_argument("--settle", type=float, default=20.0,
                      help="seconds of steady consumption before and after the rollout")
    demo.add_argument("--members", type=int, default=3)
    demo.add_argument("--json", action="store_true", help="print the final report as JSON")
    demo.add_argument("--name", default="demo", help="name of the local environment")
    demo.set_defaults(func=_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ToolMissing, BuildFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
