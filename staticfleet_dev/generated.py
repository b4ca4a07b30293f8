"""The command line of a module that writes a checked-in file (`--check`: fail when stale)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def main(doc: str, out: Path, render: Callable[[], str], module: str, in_sync: str,
         argv: list[str] | None = None) -> int:
    """Write `render()` to `out`, or with `--check` fail when `out` differs from it."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="fail when the shipped file differs from what this builds")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not out.exists() or out.read_text() != text:
            print(f"{out} is not what {module} builds: run `python -m {module}` and commit the "
                  "result", file=sys.stderr)
            return 1
        print(in_sync)
        return 0
    out.write_text(text)
    print(f"wrote {out}")
    return 0
