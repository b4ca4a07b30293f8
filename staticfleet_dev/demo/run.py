"""The demo as it runs: `Demo.run`, its steps in order, each a method of `Demo`; what is left
running once it is done (`farewell`) or once it failed (`did_not_finish`)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from staticfleet_dev import environment
from staticfleet_dev.demo.group import (
    DLQ_TOPIC,
    EXAMPLE,
    GROUP,
    NAMESPACE,
    PARTITIONS,
    TOPIC,
    demo_group,
)
from staticfleet_dev.demo.kube import DemoFailed, install, kubectl, start_operator
from staticfleet_dev.demo.plots import draw_dashboard, draw_throughput, plot_paths
from staticfleet_dev.demo.progress import Console, Watcher
from staticfleet_dev.demo.report import build_report, generations, parquet_summary
from staticfleet_dev.demo.samples import Sample, processing
from staticfleet_dev.environment import LocalEnv
from staticfleet_dev.kafka import KafkaSettings
from staticfleet_dev.stream import SteadyProducer, committed_offsets, create_topic
from staticfleet_dev.testkit.groups import ready_and_idle, rollout_complete
from staticfleet_dev.testkit.kube import load_example, to_yaml

if TYPE_CHECKING:
    from staticfleet_dev.prometheus import Prometheus

READY_TIMEOUT_S = 300.0
ROLLOUT_TIMEOUT_S = 600.0
"""As long as the roller itself gives a member (spec.rollout.progressDeadlineSeconds' default):
three standbys that each take 70-100 s to warm Spark up on a loaded 2-core machine made a 300 s
limit fail a rollout that was going well (CI, 2026-11-24)."""
DRAIN_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Rollout:
    """The rolling restart: triggered and complete (unix seconds), and the generations of the
    group the broker had stabilized before it."""

    triggered: float
    complete: float
    generations_before: int


@dataclass(frozen=True)
class Drained:
    """The producer stopped after `produced` records and the group committed them all:
    `committed` and `end_offsets` summed over the partitions, `final` the ConsumerGroup then."""

    produced: int
    committed: int
    end_offsets: int
    final: dict[str, Any]


class Demo:
    """One run of the demo: its arguments, its console, the environment and Prometheus."""

    def __init__(self, args: argparse.Namespace, console: Console) -> None:
        self.args = args
        self.members = int(args.members)
        self.console = console
        self.env: LocalEnv | None = None
        self.prometheus: Prometheus | None = None

    def run(self) -> dict[str, Any]:
        """The demo, step by step; returns the report."""
        # 1: the local environment: a Kafka broker, a Kubernetes control plane, the local node.
        env = self.start_environment()
        watcher = Watcher(env.kubeconfig, self.console, self.members)
        # 2: the CRD, the operator, Prometheus, the topics, the producer, the ConsumerGroup.
        producer, output = self.set_up(env)
        # 3: every member Ready and processing.
        self.wait_until_processing(watcher)
        # 4: steady consumption, for --settle seconds.
        self.consume(watcher)
        # 5: the rolling restart, until the operator says it is complete.
        rollout = self.roll(env, watcher)
        # 6: every member processing again, and steady consumption for --settle seconds.
        self.consume_again(watcher)
        # 7: the producer stops; the group commits every record it produced.
        drained = self.drain(env, watcher, producer)
        # 8: the two PNGs, from the samples and from Prometheus; Prometheus stops.
        plot, dashboard_plot, panel_series = self.draw(env, watcher.samples, rollout,
                                                       drained.final)
        # 9: what the report counts outside the status, before a teardown removes it.
        output_summary = parquet_summary(output)
        broker_generations = generations(env.kafka_log) - rollout.generations_before
        # 10: with --down, everything torn down.
        if self.args.down:
            self.tear_down()
        # 11: the report, with the whole run's seconds.
        self.console.seconds["total"] = self.console.elapsed()
        return build_report(
            env_name=self.args.name, root=env.root, members=self.members, final=drained.final,
            produced=drained.produced,
            committed=drained.committed, end_offsets=drained.end_offsets,
            broker_generations=broker_generations, output=output_summary,
            seconds=self.console.seconds, plot=plot, panels=dashboard_plot,
            panel_series=panel_series, kubeconfig=env.kubeconfig,
            torn_down=bool(self.args.down))

    # -- the steps, in order ----------------------------------------------------------------

    def start_environment(self) -> LocalEnv:
        t = time.monotonic()
        self.console.at(f"starting the local environment {self.args.name!r} "
                        "(Kafka broker, Kubernetes control plane, local node)")
        self.env = env = environment.up(self.args.name, kafka_settings=KafkaSettings(),
                                        brokers=int(getattr(self.args, "brokers", 1)))
        self.console.done("envUp", f"environment up (broker {env.bootstrap}, root {env.root})",
                          t)
        return env

    def set_up(self, env: LocalEnv) -> tuple[SteadyProducer, Path]:
        """Returns the producer, running, and where the members write their Parquet output."""
        t = time.monotonic()
        install(env.kubeconfig)
        metrics_port = start_operator(env)
        self.start_prometheus(env, metrics_port)
        create_topic(env.bootstrap, TOPIC, PARTITIONS)
        create_topic(env.bootstrap, DLQ_TOPIC, 1)
        producer = SteadyProducer(env.bootstrap, TOPIC, rate=self.args.rate).start()
        output = env.root / "output" / "orders-counts"
        try:
            example = load_example(EXAMPLE)
        except FileNotFoundError as exc:
            raise DemoFailed(str(exc)) from None
        group = demo_group(example, bootstrap=env.bootstrap, members=self.members,
                           output=output)
        kubectl(env.kubeconfig, "apply", "-f", "-", input=to_yaml(group))
        self.console.done("setup", f"CRD installed, operator running, topic {TOPIC!r} "
                                   f"({PARTITIONS} partitions), producing {self.args.rate}/s, "
                                   f"ConsumerGroup {NAMESPACE}/{GROUP} applied", t)
        return producer, output

    def wait_until_processing(self, watcher: Watcher) -> None:
        t = time.monotonic()
        watcher.watch("starting", timeout=READY_TIMEOUT_S, every=5.0,
                      until=lambda cg, s: ready_and_idle(cg) and processing(s) == self.members)
        self.console.done("membersReady", f"{self.members} members Ready and processing", t)

    def consume(self, watcher: Watcher) -> None:
        t = time.monotonic()
        watcher.watch("steady", at_least=self.args.settle)
        self.console.done("steadyBefore", "steady consumption", t)

    def roll(self, env: LocalEnv, watcher: Watcher) -> Rollout:
        """Bumps spec.rollout.restartNonce and watches the rollout."""
        generations_before = generations(env.kafka_log)
        triggered = time.time()
        t = time.monotonic()
        self.console.at("rolling restart: "
                        f"kubectl -n {NAMESPACE} patch cg {GROUP} spec.rollout.restartNonce")
        kubectl(env.kubeconfig, "-n", NAMESPACE, "patch", "cg", GROUP, "--type=merge", "-p",
                json.dumps({"spec": {"rollout": {"restartNonce": f"demo-{int(triggered)}"}}}))
        watcher.watch("rolling", until=lambda cg, _s: rollout_complete(cg),
                      timeout=ROLLOUT_TIMEOUT_S)
        complete = time.time()
        self.console.done("rollout", "rollout complete", t)
        return Rollout(triggered=triggered, complete=complete,
                       generations_before=generations_before)

    def consume_again(self, watcher: Watcher) -> None:
        t = time.monotonic()
        # Back in the group is not yet processing: a new member first starts its Spark session.
        watcher.watch("steady", at_least=self.args.settle, timeout=READY_TIMEOUT_S,
                      until=lambda _cg, s: processing(s) == self.members)
        self.console.done("steadyAfter", "every member processing again, steady consumption", t)

    def drain(self, env: LocalEnv, watcher: Watcher, producer: SteadyProducer) -> Drained:
        t = time.monotonic()
        produced = producer.stop()
        if producer.failed:
            raise DemoFailed(f"the producer failed: {producer.failed[:5]}")
        self.console.at(f"producer stopped after {produced:,} records; "
                        "waiting until the group has committed them all")
        offsets = [0, 0]

        def caught_up(_cg: dict[str, Any], _s: Sample) -> bool:
            offsets[:] = committed_offsets(env.bootstrap, GROUP, TOPIC)
            return offsets[0] >= offsets[1] >= produced

        final = watcher.watch("draining", until=caught_up, timeout=DRAIN_TIMEOUT_S)
        self.console.done("drain", "group caught up", t)
        return Drained(produced=produced, committed=offsets[0], end_offsets=offsets[1],
                       final=final)

    def draw(self, env: LocalEnv, samples: Sequence[Sample], rollout: Rollout,
             final: dict[str, Any]) -> tuple[Path, Path, dict[str, int]]:
        """Returns where the throughput and the dashboard PNGs are, and each dashboard panel's
        number of series."""
        assert self.prometheus is not None  # set_up started it
        since = rollout.triggered - self.args.settle
        span = (rollout.triggered, rollout.complete)
        plot, dashboard_plot = plot_paths(env.root, self.args.name, down=bool(self.args.down))
        draw_throughput(plot, [s for s in samples if s.t >= since], final, rollout=span,
                        rate=self.args.rate, members=self.members)
        panel_series = draw_dashboard(dashboard_plot, self.prometheus, since=since,
                                      rollout=span)
        self.stop_prometheus()
        return plot, dashboard_plot, panel_series

    def tear_down(self) -> None:
        t = time.monotonic()
        environment.down(self.args.name)
        self.console.done("down", "environment torn down", t)

    # -- Prometheus -------------------------------------------------------------------------

    def start_prometheus(self, env: LocalEnv, metrics_port: int) -> None:
        """A real Prometheus scraping the operator and the members (as a cluster's would), so the
        demo can draw what the shipped dashboard shows."""
        from staticfleet_dev.prometheus import ALERT_RULES, Prometheus, scrape_config

        self.prometheus = Prometheus(workdir=env.root / "prometheus", config=scrape_config(
            operator_target=f"127.0.0.1:{metrics_port}", kubeconfig=env.kubeconfig,
            rule_files=[ALERT_RULES]))
        try:
            self.prometheus.start()
        except AssertionError as exc:
            raise DemoFailed(f"Prometheus did not start: {exc}") from None

    def stop_prometheus(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()
            self.prometheus = None

    # -- the end ----------------------------------------------------------------------------

    def farewell(self, report: dict[str, Any]) -> None:
        """What is left running and how to look at it, or that nothing is."""
        say = self.console.say
        if report["tornDown"]:
            say(f"everything is stopped and removed; the plot is kept at {report['plot']}")
            return
        assert self.env is not None  # run() started it
        name = self.args.name
        say("\nEverything is still running (the producer stopped with the demo, so the "
            "members are idle). Look around:")
        say(f"  export KUBECONFIG={self.env.kubeconfig}")
        say(f"  kubectl -n {NAMESPACE} get cg,pods")
        say(f"  kubectl -n {NAMESPACE} get cg {GROUP} -o jsonpath='{{.status.rollout}}'")
        say(f"  operator log: {self.env.root / 'operator.log'}; "
            f"member logs: {self.env.pod_log_dir}")
        say(f"Stop it all with:\n  staticfleet env down --name {name}")

    def did_not_finish(self, exc: BaseException) -> None:
        """Where to look, and what is left running or torn down (with --down)."""
        self.stop_prometheus()
        if self.env is None:
            return
        say = self.console.say
        say(f"\nthe demo did not finish ({type(exc).__name__})")
        say(f"operator log: {self.env.root / 'operator.log'}, "
            f"member logs: {self.env.pod_log_dir}")
        if self.args.down:
            environment.down(self.args.name)
            say(f"environment {self.args.name!r} torn down")
        else:
            say(f"it is left running: staticfleet env down --name {self.args.name}")

