#!/usr/bin/env bash
# Install everything staticfleet's tests and demo need, idempotently, cached outside the repo.
#
#   Debian packages: a JDK 17+, Maven, kubectl, shellcheck (only those missing)
#   Go:              the installed go if >= 1.26, else the toolchain from the Go module proxy
#   Python:          a venv at $STATICFLEET_CACHE/venv with the project (editable) and test deps
#   Servers:         Kafka jars (Maven Central); etcd, kube-apiserver, kube-controller-manager,
#                    helm, prometheus, promtool, kwok (built from the Go module proxy)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${STATICFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/staticfleet}"
GO_VERSION="1.26.8"
mkdir -p "$CACHE"
log() { printf '[setup %s] %s\n' "$(date +%T)" "$*"; }

need_apt=()
command -v java >/dev/null || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
command -v kubectl >/dev/null || need_apt+=(kubectl)
command -v shellcheck >/dev/null || need_apt+=(shellcheck)
command -v make >/dev/null || need_apt+=(make)
if ((${#need_apt[@]})); then
  log "apt-get install ${need_apt[*]}"
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
    log "fetching Go $GO_VERSION from the Go module proxy"
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

VENV="$CACHE/venv"
if [ ! -x "$VENV/bin/python" ]; then
  log "creating the venv $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -U pip
fi
stamp="$VENV/.staticfleet-$(sha256sum "$REPO/pyproject.toml" | cut -c1-16)"
# The editable install must point at this checkout (CI clones to a new path each time).
installed_at="$("$VENV/bin/python" -c 'import os, staticfleet
print(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(staticfleet.__file__)))))' \
  2>/dev/null || true)"
if [ ! -e "$stamp" ] || [ "$installed_at" != "$REPO" ]; then
  log "installing the project and its test dependencies into the venv"
  # pip's own output (the build backend's notes on editable installs among it) goes to a log
  # file; a newcomer sees it only when the install fails.
  pip_log="$CACHE/pip-install.log"
  if ! "$VENV/bin/pip" install -q -e "${REPO}[test]" > "$pip_log" 2>&1; then
    tail -n 60 "$pip_log" >&2
    log "pip install failed; its whole output: $pip_log"
    exit 1
  fi
  rm -f "$VENV"/.staticfleet-* && touch "$stamp"
fi

log "building or reusing the servers (first run: several minutes)"
"$VENV/bin/staticfleet" env build all
log "ready: source $VENV/bin/activate"
