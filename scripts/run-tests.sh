#!/usr/bin/env bash
# `make test`'s body: the gates (`make lint docs`) beside the whole pytest run, both awaited;
# either one failing fails the run. The gates' output comes after the tests', whole.
#
# Usage: bash scripts/run-tests.sh WORKERS [pytest args...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
workers="${1:?usage: run-tests.sh WORKERS [pytest args...]}"
shift
gates_log="$(mktemp -t staticfleet-gates.XXXXXX)"
trap 'rm -f "$gates_log"' EXIT
make --no-print-directory lint docs >"$gates_log" 2>&1 &
gates=$!
tests=0
pytest -q -p no:cacheprovider -n "$workers" --dist loadfile --no-loadscope-reorder \
    --durations=25 "$@" || tests=$?
gated=0
wait "$gates" || gated=$?
echo "--- make lint docs, beside the tests: exit $gated ---"
cat "$gates_log"
if (( tests != 0 || gated != 0 )); then
    echo "make test failed: pytest exit $tests, make lint docs exit $gated" >&2
    exit 1
fi
