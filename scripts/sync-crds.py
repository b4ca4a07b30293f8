#!/usr/bin/env python3
"""Copy the CRDs from their one source, crds/, into the Helm chart's crds/ folder.

Usage:
    python scripts/sync-crds.py           # copy crds/* into charts/staticfleet/crds/
    python scripts/sync-crds.py --check   # exit 1 if the chart's copies differ (CI)

The chart's copies are byte-for-byte copies; a file in the chart's crds/ that has no source is
reported as drift too (and removed by a sync), so deleting a CRD from crds/ cannot leave a stale
one in the chart.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "crds"
TARGET = REPO / "charts" / "staticfleet" / "crds"
FIX = "python scripts/sync-crds.py"
PATTERNS = ("*.yaml", "*.yml", "*.json")


def _files(folder: Path) -> dict[str, Path]:
    if not folder.is_dir():
        return {}
    return {p.name: p for pattern in PATTERNS for p in folder.glob(pattern) if p.is_file()}


def _show(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def drift(source: Path = SOURCE, target: Path = TARGET) -> list[str]:
    """One line per file that differs between `source` and `target`; empty when in sync."""
    src, dst = _files(source), _files(target)
    problems: list[str] = []
    for name in sorted(src.keys() | dst.keys()):
        if name not in dst:
            problems.append(f"{_show(target / name)}: missing (source {_show(source / name)})")
        elif name not in src:
            problems.append(f"{_show(target / name)}: has no source in {_show(source)}/")
        elif src[name].read_bytes() != dst[name].read_bytes():
            problems.append(f"{_show(target / name)}: differs from {_show(source / name)}")
    return problems


def sync(source: Path = SOURCE, target: Path = TARGET) -> list[str]:
    """Make `target` an exact copy of the CRD files in `source`; return the names changed."""
    changed = drift(source, target)
    target.mkdir(parents=True, exist_ok=True)
    src = _files(source)
    for name, path in _files(target).items():
        if name not in src:
            path.unlink()
    for name, path in src.items():
        shutil.copyfile(path, target / name)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="do not copy; exit 1 and list the files that differ"
    )
    parser.add_argument("--source", type=Path, default=SOURCE, help=argparse.SUPPRESS)
    parser.add_argument("--target", type=Path, default=TARGET, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if not _files(args.source):
        print(f"error: no CRD files in {_show(args.source)}/", file=sys.stderr)
        return 2
    if args.check:
        problems = drift(args.source, args.target)
        if problems:
            print("the chart's CRDs drifted from their source:", file=sys.stderr)
            for line in problems:
                print(f"  {line}", file=sys.stderr)
            print(f"fix: run `{FIX}` and commit the result", file=sys.stderr)
            return 1
        print(f"chart CRDs in sync with {_show(args.source)}/ ({len(_files(args.source))} files)")
        return 0
    changed = sync(args.source, args.target)
    for line in changed:
        print(f"synced {line}")
    if not changed:
        print("already in sync")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
