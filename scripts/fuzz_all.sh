#!/usr/bin/env bash
# Seeds the fuzz corpora (fuzz/seed.sh) and runs every cargo-fuzz target for RUNS executions
# (default 10,000,000), one after another on one core, then prints one summary line per
# target: executions, exec/s, seconds, new corpus units, peak RSS, and the result (ok, or the
# crash/timeout/OOM libFuzzer reported, with the artifact under fuzz/artifacts/TARGET/).
# Usage: scripts/fuzz_all.sh [RUNS]   (env: FUZZ_TARGETS = targets to run, default all five;
# FUZZ_SANITIZER = none|address, default none (see the README's Fuzzing section);
# FUZZ_FEATURES = cargo features of fuzz/, e.g. system-highs; FUZZ_LOGS = log folder,
# default fuzz/logs; SKIP_SEED=1 keeps the corpora as they are). Exits 1 if any target
# failed.
set -uo pipefail

RUNS="${1:-10000000}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ="$ROOT/fuzz"
LOGS="${FUZZ_LOGS:-$FUZZ/logs}"
SANITIZER="${FUZZ_SANITIZER:-none}"
FLAGS=(-s "$SANITIZER")
if [ -n "${FUZZ_FEATURES:-}" ]; then
    FLAGS+=(--features "$FUZZ_FEATURES")
fi
TARGETS="${FUZZ_TARGETS:-graph_parse plan_validate minimalloc_csv onnx_decode symbolic_parse}"
mkdir -p "$LOGS"

# Inputs past these lengths are cut by libFuzzer: JSON documents up to 64 KiB, CSVs and ONNX
# models up to 16 KiB.
max_len() {
    case "$1" in
        minimalloc_csv | onnx_decode) echo 16384 ;;
        *) echo 65536 ;;
    esac
}

cd "$FUZZ" || exit 1
if [ "${SKIP_SEED:-0}" != 1 ]; then
    ./seed.sh || exit 1
fi
cargo +nightly fuzz build "${FLAGS[@]}" || exit 1

failed=0
summary=()
for t in $TARGETS; do
    log="$LOGS/$t.log"
    echo "fuzz_all: $t, $RUNS runs (log: $log)" >&2
    start=$(date +%s)
    cargo +nightly fuzz run "${FLAGS[@]}" "$t" -- \
        -runs="$RUNS" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"$log" 2>&1
    rc=$?
    secs=$(($(date +%s) - start))
    stat() { grep -m1 "^stat::$1:" "$log" | awk '{print $2}'; }
    execs=$(stat number_of_executed_units)
    rate=$(stat average_exec_per_sec)
    units=$(stat new_units_added)
    rss=$(stat peak_rss_mb)
    if [ "$rc" -eq 0 ]; then
        result=ok
    else
        failed=1
        result="FAILED (exit $rc: $(grep -m1 -oE 'ERROR: libFuzzer: [a-z-]+( signal)?|panicked at [^:]+:[0-9]+|deadly signal' "$log"); $(grep -m1 -oE 'Test unit written to [^ ]+' "$log"))"
    fi
    summary+=("$(printf '%-15s execs %-10s exec/s %-7s secs %-6s new_units %-5s rss_mb %-5s %s' \
        "$t" "${execs:-?}" "${rate:-?}" "$secs" "${units:-?}" "${rss:-?}" "$result")")
done
printf '%s\n' "${summary[@]}"
exit "$failed"
