#!/usr/bin/env bash
# Fills fuzz/corpus/<target>/ with seed inputs for the cargo-fuzz targets (README, Fuzzing):
#   graph_parse     the bundled sample, fuzz/graphs/*.json, the sample's rewrites (fused, tiled,
#                   conv algorithms chosen) and the zoo graphs of ../shared/zoo (compacted),
#                   each at most MAX_BYTES;
#   plan_validate   one byte picking the bundled graph (0 sample, 1 kinds, 2 fused; see
#                   fuzz_targets/plan_validate.rs) + a plan of it made by `memplan plan`
#                   (plain, in place, budgeted with spills, rewritten, tiered);
#   minimalloc_csv  one byte picking the default alignment (0: 1, 8: 256) + the CSVs of
#                   ../shared/bench/{minimalloc,traces}, cut to MAX_LINES lines, and a placed
#                   copy with an offset column (`memplan place`);
#   symbolic_parse  the bundled symbolic sample and benchmarks/graphs/symbolic/*.json
#                   (compacted; those over MAX_BYTES are skipped);
#   onnx_decode     tiny models from fuzz/gen_onnx_seeds.py (needs python3 with `onnx`;
#                   skipped with a note otherwise).
# Usage: fuzz/seed.sh   (env: MEMPLAN = memplan command, default `cargo run --release -q -p
# memplan-cli --`; MEMPLAN_SHARED_DIR = the shared folder, default ../shared; MAX_BYTES =
# 65536, the runs' -max_len; MAX_LINES = 120, under minimalloc_csv's 128-buffer solving cap).
# Existing corpus files are kept; seeds are named by content.
set -euo pipefail

FUZZ="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$FUZZ")"
SHARED="${MEMPLAN_SHARED_DIR:-$REPO/../shared}"
MAX_BYTES="${MAX_BYTES:-65536}"
MAX_LINES="${MAX_LINES:-120}"
read -r -a MEMPLAN <<<"${MEMPLAN:-cargo run --release -q --manifest-path $REPO/Cargo.toml -p memplan-cli --}"
CORPUS="$FUZZ/corpus"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# add TARGET PREFIX_BYTE(or "") FILE: copies FILE (after the optional selector byte) into the
# target's corpus, named by its hash, unless it is over MAX_BYTES.
add() {
    local target="$1" prefix="$2" file="$3" out="$TMP/seed"
    if [ -n "$prefix" ]; then
        { printf "\\x$prefix"; cat "$file"; } >"$out"
    else
        cp "$file" "$out"
    fi
    if [ "$(wc -c <"$out")" -gt "$MAX_BYTES" ]; then
        return 0
    fi
    mkdir -p "$CORPUS/$target"
    cp "$out" "$CORPUS/$target/seed-$(sha1sum "$out" | cut -c1-16)"
}

# compact FILE OUT: the JSON document without whitespace (so larger graphs fit MAX_BYTES).
compact() {
    python3 -c 'import json, sys; json.dump(json.load(open(sys.argv[1])), open(sys.argv[2], "w"), separators=(",", ":"))' "$1" "$2"
}

memplan() { "${MEMPLAN[@]}" "$@"; }

# --- graph_parse -------------------------------------------------------------------------
SAMPLE="$REPO/samples/resnet_block.train.json"
for g in "$SAMPLE" "$FUZZ"/graphs/*.json; do
    add graph_parse "" "$g"
done
for rw in fuse tile conv-algos all; do
    if memplan plan "$SAMPLE" --strategy heuristic --order given --rewrite "$rw" \
        --graph-out "$TMP/rw.json" -o "$TMP/rw.plan.json" 2>/dev/null; then
        compact "$TMP/rw.json" "$TMP/rw.min.json"
        add graph_parse "" "$TMP/rw.min.json"
    fi
done
if [ -d "$SHARED/zoo" ]; then
    for g in "$SHARED"/zoo/*.json; do
        compact "$g" "$TMP/zoo.json"
        add graph_parse "" "$TMP/zoo.json"
    done
else
    echo "seed.sh: no $SHARED/zoo; graph_parse gets the repository's graphs only" >&2
fi

# --- symbolic_parse ----------------------------------------------------------------------
for g in "$REPO"/samples/*.symbolic.json "$REPO"/benchmarks/graphs/symbolic/*.json; do
    compact "$g" "$TMP/sym.json"
    add symbolic_parse "" "$TMP/sym.json"
done

# --- plan_validate -----------------------------------------------------------------------
# plans SELECTOR GRAPH: plans GRAPH several ways and adds each plan with the selector byte.
plans() {
    local sel="$1" graph="$2" k=0
    local -a variants=(
        "--order given"
        "--order auto"
        "--inplace"
        "--budget 70%"
        "--budget 50% --spill-strategy chen"
        "--rewrite fuse"
        "--conv-algos fastest"
        "--tile 2"
        "--tiers"
    )
    for v in "${variants[@]}"; do
        k=$((k + 1))
        # shellcheck disable=SC2086
        if memplan plan "$graph" --strategy heuristic $v -o "$TMP/p$k.json" 2>/dev/null; then
            compact "$TMP/p$k.json" "$TMP/p$k.min.json"
            add plan_validate "$sel" "$TMP/p$k.min.json"
        fi
    done
}
plans 00 "$SAMPLE"
plans 01 "$FUZZ/graphs/kinds.json"
plans 02 "$FUZZ/graphs/fused.json"
# A hand-made kinds plan with spills, a second allocation while spilled and a recompute (the
# validator kind tests' `spilled_twice`).
cat >"$TMP/spilled.json" <<'PLAN'
{"format":"memplan-plan/1","graph":"kinds","arena_bytes":3172,"weights_bytes":128,"host_bytes":2024,
 "weights":[{"tensor":"w","offset":0},{"tensor":"w2","offset":64}],
 "instructions":[
  {"op":"alloc","tensor":"x","offset":0},{"op":"alloc","tensor":"a","offset":1024},
  {"op":"exec","node":"conv","workspace_offset":2048},{"op":"spill_out","tensor":"a","host_offset":0},
  {"op":"alloc","tensor":"a","offset":1024},{"op":"exec","node":"conv","workspace_offset":2048},
  {"op":"spill_out","tensor":"a","host_offset":1024},{"op":"spill_out","tensor":"x","host_offset":0},
  {"op":"spill_in","tensor":"x","offset":0},{"op":"spill_in","tensor":"a","offset":1024},
  {"op":"alloc","tensor":"b","offset":2048},{"op":"exec","node":"relu","workspace_offset":null},
  {"op":"free","tensor":"a"},{"op":"alloc","tensor":"c","offset":1024},
  {"op":"exec","node":"scale","workspace_offset":null},{"op":"alloc","tensor":"y","offset":3072},
  {"op":"exec","node":"head","workspace_offset":null},{"op":"free","tensor":"b"},
  {"op":"free","tensor":"c"},{"op":"free","tensor":"x"}],
 "stats":{"peak_bytes":3172}}
PLAN
add plan_validate 01 "$TMP/spilled.json"

# --- minimalloc_csv ----------------------------------------------------------------------
n=0
for csv in "$SHARED"/bench/minimalloc/*.csv "$SHARED"/bench/traces/*.csv; do
    [ -f "$csv" ] || continue
    head -n "$MAX_LINES" "$csv" >"$TMP/cut.csv"
    add minimalloc_csv 00 "$TMP/cut.csv"
    add minimalloc_csv 08 "$TMP/cut.csv"
    if [ "$n" -lt 3 ] && memplan place "$TMP/cut.csv" --heuristic -o "$TMP/placed.csv" 2>/dev/null; then
        add minimalloc_csv 00 "$TMP/placed.csv"
        n=$((n + 1))
    fi
done
printf 'id,lower,upper,size,alignment\na,0,2,100,1\nb,1,3,50,64\nc,2,4,30,8\n' >"$TMP/tiny.csv"
add minimalloc_csv 00 "$TMP/tiny.csv"

# --- onnx_decode -------------------------------------------------------------------------
if python3 -c 'import onnx' 2>/dev/null; then
    python3 "$FUZZ/gen_onnx_seeds.py" "$TMP/onnx"
    for m in "$TMP"/onnx/*.onnx; do
        add onnx_decode "" "$m"
    done
else
    echo "seed.sh: python3 has no onnx package (pip install onnx); onnx_decode starts empty" >&2
    mkdir -p "$CORPUS/onnx_decode"
fi

for t in graph_parse plan_validate minimalloc_csv onnx_decode; do
    echo "$t: $(find "$CORPUS/$t" -type f | wc -l) files"
done
