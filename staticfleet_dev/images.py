"""The two images built here, for real, with no registry and no Docker engine (issue 48).

- **The base**: Debian bookworm made by `debootstrap` from the Debian archive (minbase, with
  Python 3.11, its venv module, `python` as `python3` and the CA certificates): what the
  Dockerfiles' public base (`python:3.11-slim-bookworm`) gives them, made from packages.
- **The operator and the member image**: `images/*/Dockerfile`, unchanged for users who build
  with Docker from the public base, built by buildah (daemonless, from Debian) with
  `PYTHON_IMAGE` set to the base above.

Each image is named by the hash of what went into it (`localhost/staticfleet/<name>:<hash>`):
the base by its suite and packages, an image by its Dockerfile, every file its `COPY` lines take
from the repository, and the base's name. A build whose name is already in the store reuses it;
buildah's layer cache keeps the dependency layer across changes of the code (the Dockerfiles
install the dependencies from pyproject.toml before copying the sources).

Containers run with podman from the same store. This VM's root has no CAP_SYS_RESOURCE and
hybrid cgroups: the store's containers.conf sets no ulimits and no pids limit (raising them is
refused), runc instead of crun (crun refuses hybrid cgroups) and the cgroupfs manager. Both tools
read `environ()`; the store lives in the cache, outside the repository.

Run as ``python -m staticfleet_dev.images [base|operator|member|all]``: standard library only,
like `build`, so setup runs it beside the venv's install.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from staticfleet_dev.tools import BuildFailed, cache_root, require_tool

REPO = Path(__file__).resolve().parents[1]
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
BASE_RECIPE = 1
"""Raised when the base's recipe changes in a way its inputs above do not show."""
IMAGES = ("operator", "member")
REGISTRY = "localhost/staticfleet"

CONTAINERS_CONF = """\
# Written by staticfleet_dev.images: what podman needs on this kind of VM (its docstring).
[containers]
default_ulimits = []
pids_limit = 0

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
STORAGE_CONF = """\
# Written by staticfleet_dev.images: the image store in the cache.
[storage]
driver = "overlay"
graphroot = "{root}"
runroot = "{run}"
"""


def store() -> Path:
    return cache_root() / "containers"


def environ() -> dict[str, str]:
    """The environment for buildah and podman: the store's configuration files."""
    root = store()
    root.mkdir(parents=True, exist_ok=True)
    conf, storage = root / "containers.conf", root / "storage.conf"
    want = STORAGE_CONF.format(root=root / "storage", run=root / "run")
    for path, text in ((conf, CONTAINERS_CONF), (storage, want)):
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return {**os.environ, "CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage)}


def tool(*args: str, check: bool = True, capture: bool = True,
         timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """Run buildah or podman (`args[0]`) against the store."""
    require_tool(args[0])
    proc = subprocess.run(list(args), env=environ(), text=True, timeout=timeout,
                          stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.STDOUT if capture else None)
    if check and proc.returncode != 0:
        raise BuildFailed(f"{shlex.join(args)} exited {proc.returncode}:\n"
                          f"{(proc.stdout or '')[-4000:]}")
    return proc


def exists(name: str) -> bool:
    return tool("buildah", "inspect", "--type", "image", name, check=False).returncode == 0


def size_bytes(name: str) -> int:
    """The image's size as podman reports it (its layers, uncompressed)."""
    out = tool("podman", "image", "inspect", "--format", "{{.Size}}", name).stdout
    return int(out.strip())


def _digest(parts: Iterator[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()[:16]


def base_name() -> str:
    recipe = json.dumps([BASE_RECIPE, SUITE, MIRROR, BASE_PACKAGES]).encode()
    return f"{REGISTRY}/base:{SUITE}-{_digest(iter([recipe]))}"


def base(log: Path | None = None) -> str:
    """The base image, made once: debootstrap into a scratch container's root, committed."""
    name = base_name()
    if exists(name):
        return name
    require_tool("debootstrap")
    log = log or store() / "base.log"
    container = tool("buildah", "from", "scratch").stdout.strip().splitlines()[-1]
    try:
        root = tool("buildah", "mount", container).stdout.strip().splitlines()[-1]
        with log.open("w") as out:
            done = subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                 SUITE, root, MIRROR], stdout=out, stderr=subprocess.STDOUT, timeout=1800)
        if done.returncode != 0:
            raise BuildFailed(f"debootstrap exited {done.returncode}; its log: {log}\n"
                              + log.read_text(errors="replace")[-3000:])
        # What a slim image leaves out: apt's lists and caches (a RUN apt-get update fetches
        # them again).
        for junk in ("var/lib/apt/lists", "var/cache/apt/archives"):
            subprocess.run(["find", f"{root}/{junk}", "-type", "f", "-delete"], check=False)
        tool("buildah", "umount", container)
        tool("buildah", "config", "--env", "LANG=C.UTF-8", "--cmd", "python3",
             "--label", f"org.opencontainers.image.description=Debian {SUITE} minbase with "
             "Python 3, made by staticfleet_dev.images", container)
        tool("buildah", "commit", "--quiet", container, name)
    finally:
        tool("buildah", "rm", container, check=False)
    return name


def copied_sources(dockerfile: Path) -> list[str]:
    """What the Dockerfile's `COPY` lines take from the build context (not `--from` stages)."""
    sources: list[str] = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if not words or words[0].upper() != "COPY":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words[1:]):
            continue
        sources += args[:-1]
    return sources


def _context_files(patterns: Sequence[str]) -> list[Path]:
    files: set[Path] = set()
    for pattern in patterns:
        for match in REPO.glob(pattern.rstrip("/")):
            candidates = match.rglob("*") if match.is_dir() else [match]
            files |= {f for f in candidates if f.is_file() and "__pycache__" not in f.parts
                      and f.suffix != ".pyc"}
    return sorted(files)


def image_name(image: str, base_image: str) -> str:
    dockerfile = REPO / "images" / image / "Dockerfile"
    files = _context_files(copied_sources(dockerfile))

    def parts() -> Iterator[bytes]:
        yield base_image.encode()
        yield dockerfile.read_bytes()
        for f in files:
            yield str(f.relative_to(REPO)).encode()
            yield f.read_bytes()
    return f"{REGISTRY}/{image}:{_digest(parts())}"


def host_ca_bundle() -> Path | None:
    """The CA bundle this machine's pip trusts when it is not the default (`PIP_CERT`, or
    `cert` in /etc/pip.conf): a network that inspects TLS signs with a CA of its own."""
    named = os.environ.get("PIP_CERT")
    if not named and Path("/etc/pip.conf").is_file():
        parser = configparser.ConfigParser()
        parser.read("/etc/pip.conf")
        named = parser.get("global", "cert", fallback=None)
    return Path(named) if named and Path(named).is_file() else None


def _build_trust() -> list[str]:
    """Volumes for the builds' RUN steps (never in the image): this machine's CA bundle and a
    pip.conf that names it, where pip here needs one."""
    bundle = host_ca_bundle()
    if bundle is None:
        return []
    conf = store() / "build-pip.conf"
    conf.write_text("[global]\ncert = /etc/staticfleet-build/ca.crt\n")
    return ["--volume", f"{bundle}:/etc/staticfleet-build/ca.crt:ro",
            "--volume", f"{conf}:/etc/pip.conf:ro"]


def build(image: str, log: Path | None = None) -> str:
    """The image `image` (operator or member), built from its Dockerfile on the base unless
    the store has it; its name."""
    base_image = base()
    name = image_name(image, base_image)
    if exists(name):
        return name
    log = log or store() / f"{image}.log"
    args = ["buildah", "bud", "--isolation", "chroot", "--network", "host", "--layers",
            "--ulimit", "nofile=20000:20000", "--build-arg", f"PYTHON_IMAGE={base_image}",
            *_build_trust(), "-f", str(REPO / "images" / image / "Dockerfile"), "-t", name,
            str(REPO)]
    require_tool("buildah")
    with log.open("w") as out:
        done = subprocess.run(args, env=environ(), stdout=out, stderr=subprocess.STDOUT,
                              timeout=3600)
    if done.returncode != 0:
        raise BuildFailed(f"{shlex.join(args)} exited {done.returncode}; its log: {log}\n"
                          + log.read_text(errors="replace")[-4000:])
    tool("buildah", "tag", name, f"{REGISTRY}/{image}:dev")
    return name


def built(image: str) -> str:
    """The name of the image as this checkout would build it, which must be in the store."""
    name = image_name(image, base_name())
    if not exists(name):
        raise BuildFailed(f"image {name} is not built; run `python -m staticfleet_dev.images "
                          f"{image}` (or `bash scripts/setup.sh`)")
    return name


def run(image: str, *args: str, env: Mapping[str, str] | None = None,
        entrypoint: str | None = None, timeout: float = 300,
        volumes: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """`podman run --rm` of `image` on the host's network; stdout and stderr together."""
    cmd = ["podman", "run", "--rm", "--network", "host"]
    for key, value in (env or {}).items():
        cmd += ["--env", f"{key}={value}"]
    for volume in volumes:
        cmd += ["--volume", volume]
    if entrypoint is not None:
        cmd += ["--entrypoint", entrypoint]
    return tool(*cmd, image, *args, check=False, timeout=timeout)


def main(argv: Sequence[str]) -> int:
    which = list(argv) or ["all"]
    wanted = ["base", *IMAGES] if which == ["all"] else which
    for one in wanted:
        if one not in ("base", *IMAGES):
            print(f"usage: python -m staticfleet_dev.images [base|{'|'.join(IMAGES)}|all]",
                  file=sys.stderr)
            return 2
        started = time.monotonic()
        try:
            name = base() if one == "base" else build(one)
        except BuildFailed as exc:
            print(f"image {one}: {exc}", file=sys.stderr)
            return 1
        mib = size_bytes(name) / 2**20
        print(f"image {one}: {name}, {mib:.0f} MiB ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
