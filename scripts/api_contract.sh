#!/usr/bin/env bash
# The HTTP API's contract: runs schemathesis 4 (every check, every phase including the stateful
# one that follows the OpenAPI links) against `memplan serve` and exits with its status.
#
#   MEMPLAN_BIN=path/to/memplan  use this binary (default: build it, cargo build --release)
#   SEED=N                       schemathesis seed (default 1)
#   MAX_EXAMPLES=N               test cases per operation (default 40)
#
# The service runs on a free loopback port with a throw-away database and small time-limit caps
# (2 s), which its OpenAPI document states, so that generated plans finish quickly.
# Generating the large request bodies (a plan and its graph) is slow, so schemathesis' too_slow
# health check is suppressed. scripts/api_contract_hooks.py tells schemathesis which refusals of schema-valid requests are
# the rules JSON Schema cannot state (the graph's cross references, option combinations, ...).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c 'import schemathesis, sys; sys.exit(0 if schemathesis.__version__.startswith("4.") else 1)' 2>/dev/null; then
  python3 -m pip install -q 'schemathesis>=4,<5'
fi

if [ -z "${MEMPLAN_BIN:-}" ]; then
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/memplan-target}"
  cargo build --release -p memplan-cli
  MEMPLAN_BIN="$CARGO_TARGET_DIR/release/memplan"
fi

work=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# `--addr 127.0.0.1:0` takes a free port; the service prints the address it listens on.
"$MEMPLAN_BIN" serve --addr 127.0.0.1:0 --db "$work/contract.db" \
  --sync-time-limit-cap 2 --max-time-limit 2 --default-time-limit 1 --shutdown-grace 1 \
  2>"$work/serve.log" &
pid=$!
base=""
for _ in $(seq 1 100); do
  base=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$work/serve.log" | head -n 1 || true)
  if [ -n "$base" ] && python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/healthz", timeout=2)' "$base" 2>/dev/null; then
    break
  fi
  base=""
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
if [ -z "$base" ]; then
  echo "api_contract: memplan serve did not become healthy" >&2
  cat "$work/serve.log" >&2
  exit 1
fi
echo "api_contract: memplan serve at $base"

# Run from the temporary folder so that schemathesis' own files stay out of the checkout.
status=0
hooks="$PWD/scripts"
(
  cd "$work"
  SCHEMATHESIS_HOOKS=api_contract_hooks PYTHONPATH="$hooks${PYTHONPATH:+:$PYTHONPATH}" \
    schemathesis run "$base/openapi.json" --checks all \
    --max-examples "${MAX_EXAMPLES:-40}" --seed "${SEED:-1}" \
    --request-timeout 30 --suppress-health-check too_slow --no-color
) || status=$?
exit "$status"
