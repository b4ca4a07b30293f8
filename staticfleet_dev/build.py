"""Resolve the real servers into the cache: Kafka jars from Maven Central, Kubernetes
control-plane binaries, etcd, helm, Prometheus, promtool and kwok built from the Go module proxy.

Every step is idempotent: a finished artifact is marked by a stamp file and reused. The demo
needs kafka, etcd, k8s and prometheus; helm, promtool and kwok only the tests and benches
(scripts/setup.sh).
Run as ``python -m staticfleet_dev.build [kafka|etcd|k8s|prometheus|promtool|helm|kwok|all]``; it
needs nothing beyond the standard library, so setup runs it while the venv is installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from staticfleet_dev import versions
from staticfleet_dev.tools import BuildFailed, cache_root, require_tool, run_logged

KAFKA_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.staticfleet.local</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId>
      <version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version></dependency>
  </dependencies>
</project>
"""


@dataclass(frozen=True)
class GoBinary:
    """One binary built from a Go package through a wrapper module."""

    name: str
    package: str


def _stamp_ok(stamp: Path, outputs: list[Path]) -> bool:
    return stamp.exists() and all(p.exists() for p in outputs)


def kafka_libs() -> Path:
    """Directory of the Kafka broker's runtime jars, resolved from Maven Central once."""
    root = cache_root() / f"kafka-{versions.KAFKA_VERSION}"
    libs = root / "libs"
    stamp = root / ".complete"
    if _stamp_ok(stamp, [libs]):
        return libs
    mvn = require_tool("mvn")
    require_tool("java")
    root.mkdir(parents=True, exist_ok=True)
    (root / "pom.xml").write_text(
        KAFKA_POM.format(kafka=versions.KAFKA_VERSION, log4j=versions.LOG4J_VERSION)
    )
    run_logged(
        [mvn, "-B", "-q", "dependency:copy-dependencies", "-DincludeScope=runtime",
         f"-DoutputDirectory={libs}"],
        cwd=root, log=root / "build.log",
    )
    stamp.write_text(versions.KAFKA_VERSION)
    return libs


def _go_env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-buildvcs=false")
    env["GOTOOLCHAIN"] = "local"
    env["GOWORK"] = "off"
    env["CGO_ENABLED"] = "0"
    env.setdefault("GOMAXPROCS", str(os.cpu_count() or 2))
    return env


@contextlib.contextmanager
def _building(root: Path) -> Iterator[None]:
    """Hold `root`'s build lock: one build of a cache directory at a time across processes (two
    pytest-xdist workers, or two checkouts' test runs, that both find a binary missing), so one
    never removes or rewrites what another is building; the second then finds it built."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


Replaces = Callable[[], list[str]]
"""A wrapper module's replace directives, asked for only when it is built: what they come from
(the Go module proxy) is needed by a build, never by a start from the cache (`env up` offline)."""


def _go_build(
    label: str, module: str, version: str, binaries: list[GoBinary],
    *, replaces: Replaces | None = None, ldflags: str = "", tags: str = "",
) -> Path:
    """Build `binaries` of `module@version` in a wrapper module; return the bin directory.

    Binaries of one module may be built by separate calls (prometheus, then promtool) into one
    directory: the stamp holds the recipe they were built with, and a binary built by another
    recipe is removed, not reused."""
    root = cache_root() / f"{label}-{version}"
    with _building(root):
        return _go_build_locked(root, module, version, binaries, label=label,
                                replaces=replaces, ldflags=ldflags, tags=tags)


def _go_build_locked(root: Path, module: str, version: str, binaries: list[GoBinary], *,
                     label: str, replaces: Replaces | None, ldflags: str, tags: str) -> Path:
    bindir = root / "bin"
    stamp = root / ".complete"
    outputs = [bindir / b.name for b in binaries]
    recipe = f"{version} {ldflags} {tags}"  # rebuild when the flags change too
    if stamp.exists() and stamp.read_text() == recipe:
        if all(p.exists() for p in outputs):
            return bindir
    elif bindir.exists():
        shutil.rmtree(bindir)
    go = require_tool("go")
    src = root / "wrapper"
    src.mkdir(parents=True, exist_ok=True)
    gomod = [f"module staticfleet.local/{label}", "", "go 1.26.0", "",
             f"require {module} {version}", ""]
    gomod += [f"replace {r}" for r in (replaces() if replaces else [])]
    (src / "go.mod").write_text("\n".join(gomod) + "\n")
    env = _go_env(src)
    log = root / "build.log"
    packages = [f"{b.package}@{version}" for b in binaries]
    run_logged([go, "get", *packages], cwd=src, log=log, env=env)
    for b in binaries:
        cmd = [go, "build", "-trimpath", "-o", str(bindir / b.name)]
        if ldflags:
            cmd += ["-ldflags", ldflags]
        if tags:
            cmd += ["-tags", tags]
        run_logged([*cmd, b.package], cwd=src, log=log, env=env)
    stamp.write_text(recipe)
    return bindir


def _go_install(label: str, package: str, version: str, *, ldflags: str = "") -> Path:
    """`go install package@version` into a versioned bin directory; return the binary.

    For a module whose go.mod builds as it is (no replace directives): its own go.sum pins
    every dependency, so no wrapper module is needed.
    """
    root = cache_root() / f"{label}-{version}"
    binary = root / "bin" / package.rsplit("/", 1)[1]
    stamp = root / ".complete"
    recipe = f"{version} {ldflags}"
    with _building(root):
        if _stamp_ok(stamp, [binary]) and stamp.read_text() == recipe:
            return binary
        go = require_tool("go")
        env = _go_env(root)
        env["GOBIN"] = str(binary.parent)
        cmd = [go, "install", "-trimpath"]
        if ldflags:
            cmd += ["-ldflags", ldflags]
        run_logged([*cmd, f"{package}@{version}"], cwd=root, log=root / "build.log", env=env)
        stamp.write_text(recipe)
        return binary


def _kubernetes_replaces(version: str) -> list[str]:
    """Every staging module k8s.io/kubernetes pins at v0.0.0, pointed at its published tag."""
    url = f"https://proxy.golang.org/k8s.io/kubernetes/@v/{version}.mod"
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            text = resp.read().decode()
    except OSError as exc:
        raise BuildFailed(f"cannot read {url}: {exc}") from exc
    staging_version = "v0." + version.split(".", 1)[1]
    names = sorted(set(re.findall(r"^\s*(k8s\.io/[\w./-]+) v0\.0\.0\s*$", text, re.M)))
    return [f"{n} => {n} {staging_version}" for n in names]


def kubernetes_bin() -> Path:
    """kube-apiserver and kube-controller-manager, built once per Kubernetes version."""
    v = versions.KUBERNETES_VERSION
    major, minor = v.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    ldflags = (f"-s -w -X {pkg}.gitVersion={v} -X {pkg}.gitMajor={major} -X {pkg}.gitMinor={minor}"
               f" -X {pkg}.gitTreeState=clean")
    return _go_build(
        "kubernetes", "k8s.io/kubernetes", v,
        [GoBinary("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
         GoBinary("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager")],
        replaces=lambda: _kubernetes_replaces(v), ldflags=ldflags,
    )


def etcd_bin() -> Path:
    return _go_build("etcd", "go.etcd.io/etcd/server/v3", versions.ETCD_VERSION,
                     [GoBinary("etcd", "go.etcd.io/etcd/server/v3")], ldflags="-s -w")


def helm_bin() -> Path:
    """Helm, told which Kubernetes version to assume when no cluster is asked (helm template,
    helm lint): the one the local control plane runs, instead of Helm's built-in v1.20."""
    major, minor = versions.KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = ["-s -w"]
    pkg = "helm.sh/helm/v3/pkg/chartutil"
    flags.append(f"-X {pkg}.k8sVersionMajor={major} -X {pkg}.k8sVersionMinor={minor}")
    return _go_build("helm", "helm.sh/helm/v3", versions.HELM_VERSION,
                     [GoBinary("helm", "helm.sh/helm/v3/cmd/helm")], ldflags=" ".join(flags))


def _prometheus_module(binary: str) -> Path:
    return _go_build(
        "prometheus", "github.com/prometheus/prometheus", versions.PROMETHEUS_MODULE_VERSION,
        [GoBinary(binary, f"github.com/prometheus/prometheus/cmd/{binary}")], ldflags="-s -w",
    )


def prometheus_bin() -> Path:
    """The Prometheus server (the demo's dashboard panels, the e2e tests' scrapes)."""
    return _prometheus_module("prometheus")


def promtool_bin() -> Path:
    """promtool (the tests check the alert rules and the dashboard's queries with it), built
    into the directory of `prometheus_bin`."""
    return _prometheus_module("promtool")


def kwok_bin() -> Path:
    """kwok, which plays the kubelets of fake nodes (staticfleet_dev.kwok)."""
    return _go_install("kwok", "sigs.k8s.io/kwok/cmd/kwok", versions.KWOK_VERSION,
                       ldflags="-s -w")


STEPS = {
    "kafka": kafka_libs,
    "etcd": etcd_bin,
    "k8s": kubernetes_bin,
    "prometheus": prometheus_bin,
    "promtool": promtool_bin,
    "helm": helm_bin,
    "kwok": kwok_bin,
}


def main(argv: list[str]) -> int:
    wanted = argv or ["all"]
    names = list(STEPS) if "all" in wanted else wanted
    for name in names:
        if name not in STEPS:
            print(f"unknown build step {name!r}; choose from {', '.join(STEPS)} or all",
                  file=sys.stderr)
            return 2
    try:
        for name in names:
            print(f"{name}: {STEPS[name]()}", flush=True)
    except (BuildFailed, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
