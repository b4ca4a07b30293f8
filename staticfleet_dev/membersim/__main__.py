"""`python -m staticfleet_dev.membersim`: run the member simulator (see the package)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import threading
from dataclasses import fields
from pathlib import Path
from typing import Any

from staticfleet_dev.membersim.members import Pace
from staticfleet_dev.membersim.server import Simulator
from staticfleet_dev.membersim.watch import watch_into

log = logging.getLogger("staticfleet_dev.membersim")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m staticfleet_dev.membersim",
        description="Answer every member pod's /status, /drain, /activate, /leave and /rejoin "
                    "(the operator started with STATICFLEET_MEMBER_HTTP_VIA=<listen>).")
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--listen", default="127.0.0.1:18080", help="host:port (port 0: any)")
    parser.add_argument("--simulate", type=ipaddress.IPv4Network, default=None,
                        metavar="NETWORK",
                        help="simulate only the pods whose IP is in NETWORK (kwok's pod network, "
                             "127.64.0.0/10); relay the requests for the others to the pods "
                             "themselves (default: simulate every pod)")
    for f in fields(Pace):  # every pace knob as a flag: --warm-s 2.0, --partitions 3, ...
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default),
                            default=f.default, help=f"(default {f.default})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(threadName)s %(message)s")
    host, _, port = args.listen.rpartition(":")
    sim = Simulator(Pace(**{f.name: getattr(args, f.name) for f in fields(Pace)}),
                    simulate=args.simulate)
    stopping = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received signal %d; stopping", signum)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    bound = sim.start(host or "127.0.0.1", int(port))
    watch_into(sim, args.kubeconfig, stopping)
    print(f"membersim: listening on {host or '127.0.0.1'}:{bound}", flush=True)
    stopping.wait()
    sim.stop()
    log.info("stopped: %s", sim.stats())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
