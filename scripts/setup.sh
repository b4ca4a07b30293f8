#!/usr/bin/env bash
# Install what a command needs, idempotently, cached outside the repo.
#
#   bash scripts/setup.sh demo   what `make demo` needs: no helm, no promtool, no test tools
#   bash scripts/setup.sh [all]  everything the tests need (`make test`, .ci/run)
#
#   Debian packages: a JDK 17+, Maven, kubectl, make (all: also shellcheck, buildah, podman,
#                    runc, debootstrap); only those missing
#   Go:              the installed go if >= 1.26, else the toolchain from the Go module proxy
#   Python:          a venv at $STATICFLEET_CACHE/venv with the project (editable) and its extra:
#                    demo: `dev`; all: `test` (which includes `dev`)
#   Servers:         Kafka jars (Maven Central); etcd, kube-apiserver, kube-controller-manager,
#                    prometheus (all: also promtool, helm and kwok), built from the Go module proxy
#   Images (all):    the operator and member images from images/*/Dockerfile, built by buildah
#                    on a Debian base made by debootstrap (staticfleet_dev.images)
#
# The Kafka jars and the Go builds run in the background while pip installs the venv (the builds
# need only the standard library: `python3 -m staticfleet_dev.build`). Each step prints its name
# and how long it takes the first time on the project's CI machine (2 cores); with warm caches
# every step takes a second or less.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${STATICFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/staticfleet}"
GO_VERSION="1.26.8"
TARGET="${1:-all}"
case "$TARGET" in
  demo) EXTRA="dev"; BUILDS=(etcd k8s prometheus) ;;
  all) EXTRA="test"; BUILDS=(etcd k8s prometheus promtool helm kwok) ;;
  *) echo "usage: $0 [demo|all]" >&2; exit 2 ;;
esac
mkdir -p "$CACHE"
export STATICFLEET_CACHE="$CACHE"
log() { printf '[setup %s] %s\n' "$(date +%T)" "$*"; }

# First-run times on the CI machine (2 cores, nothing cached); docs/benchmarks.md has the whole run.
declare -A EXPECTED=(
  [apt]="about 1 min" [go]="about 20 s" [venv]="about 1 min 30 s"
  [kafka]="about 10 s" [etcd]="about 1 min" [k8s]="about 4 min"
  [prometheus]="about 3 min" [promtool]="about 1 min" [helm]="about 1 min 40 s"
  [kwok]="about 1 min 10 s" [images]="about 6 min"
)
step() { log "step $1 (first run: ${EXPECTED[$1]}): $2"; }

need_apt=()
command -v java >/dev/null || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
command -v kubectl >/dev/null || need_apt+=(kubectl)
command -v make >/dev/null || need_apt+=(make)
if [ "$TARGET" = all ]; then
  command -v shellcheck >/dev/null || need_apt+=(shellcheck)
  # The images (staticfleet_dev.images): a Debian base by debootstrap, the Dockerfiles built by
  # buildah and run by podman with runc.
  for tool in buildah podman runc debootstrap; do
    command -v "$tool" >/dev/null || need_apt+=("$tool")
  done
fi
if ((${#need_apt[@]})); then
  step apt "apt-get install ${need_apt[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

go_ok() {
  command -v go >/dev/null || return 1
  local v; v="$(go env GOVERSION 2>/dev/null | sed 's/^go//')"
  [ "$(printf '%s\n%s\n' "1.26" "$v" | sort -V | head -1)" = "1.26" ]
}
if ! go_ok; then
  GOROOT_DIR="$CACHE/go-$GO_VERSION"
  if [ ! -x "$GOROOT_DIR/bin/go" ]; then
    step go "fetching Go $GO_VERSION from the Go module proxy"
    zip="$CACHE/go-$GO_VERSION.zip"
    curl -fsSL -o "$zip" \
      "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go${GO_VERSION}.linux-amd64.zip"
    rm -rf "$GOROOT_DIR.tmp" && mkdir -p "$GOROOT_DIR.tmp"
    python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" \
      "$zip" "$GOROOT_DIR.tmp"
    mv "$GOROOT_DIR.tmp/golang.org/toolchain@v0.0.1-go${GO_VERSION}.linux-amd64" "$GOROOT_DIR"
    chmod +x "$GOROOT_DIR"/bin/* "$GOROOT_DIR"/pkg/tool/*/*
    rm -rf "$GOROOT_DIR.tmp" "$zip"
  fi
  export PATH="$GOROOT_DIR/bin:$PATH"
fi

# The servers, in the background: the Kafka jars (network-bound) beside the Go builds (one after
# the other: each uses both cores). Their output goes to a log each; a failure shows its tail.
build() {  # build NAME...: one staticfleet_dev.build step after another, each announced
  local name started
  for name in "$@"; do
    started=$SECONDS
    step "$name" "building or reusing $name"
    PYTHONPATH="$REPO" python3 -m staticfleet_dev.build "$name" >/dev/null || return 1
    log "$name ready in $((SECONDS - started)) s"
  done
}
BUILD_LOGS="$CACHE/setup-logs"
mkdir -p "$BUILD_LOGS"
pids=()
# Each background job in a process group of its own (set -m), so that leaving early (a failed
# pip install, Ctrl-C) stops the job's builds with it.
cleanup() { local pid; for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
set -m
build kafka 2> "$BUILD_LOGS/kafka.log" & pids+=($!)
build "${BUILDS[@]}" 2> "$BUILD_LOGS/go.log" & pids+=($!)
set +m

VENV="$CACHE/venv"
# One stamp per pyproject.toml and extra; `test` includes `dev`, so its stamp serves the demo too.
hash="$(sha256sum "$REPO/pyproject.toml" | cut -c1-16)"
stamp="$VENV/.staticfleet-$hash-$EXTRA"
# The editable install must point at this checkout (CI clones to a new path each time).
installed_at="$("$VENV/bin/python" -c 'import os, staticfleet
print(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(staticfleet.__file__)))))' \
  2>/dev/null || true)"
if { [ ! -e "$stamp" ] && [ ! -e "$VENV/.staticfleet-$hash-test" ]; } \
    || [ "$installed_at" != "$REPO" ]; then
  started=$SECONDS
  step venv "installing the project and its $EXTRA extra into the venv $VENV"
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q -U pip
  fi
  # pip's own output (the build backend's notes on editable installs among it) goes to a log
  # file; a newcomer sees it only when the install fails.
  pip_log="$CACHE/pip-install.log"
  if ! "$VENV/bin/pip" install -q -e "${REPO}[$EXTRA]" > "$pip_log" 2>&1; then
    tail -n 60 "$pip_log" >&2
    log "pip install failed; its whole output: $pip_log"
    exit 1
  fi
  rm -f "$VENV"/.staticfleet-* && touch "$stamp"
  log "venv ready in $((SECONDS - started)) s"
fi

failed=0
what=("kafka" "${BUILDS[*]}")
logfile=("$BUILD_LOGS/kafka.log" "$BUILD_LOGS/go.log")
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    failed=1
    tail -n 40 "${logfile[$i]}" >&2
    log "building ${what[$i]} failed; its output: ${logfile[$i]}"
  fi
done
pids=()
((failed == 0)) || exit 1
if [ "$TARGET" = all ]; then
  # The images, once the builds are done (both use the two cores): named by the hash of what
  # went into them, so a warm run builds nothing, and one after a change of the code rebuilds
  # from buildah's layer cache (the dependencies' layer stays).
  started=$SECONDS
  step images "building or reusing the base, operator and member images"
  if ! PYTHONPATH="$REPO" python3 -m staticfleet_dev.images all; then
    log "building the images failed; the build logs: $CACHE/containers/*.log"
    exit 1
  fi
  log "images ready in $((SECONDS - started)) s"
fi
log "ready ($TARGET): source $VENV/bin/activate"
