#!/usr/bin/env bash
# GPU check for the plan executor: build with --features cuda, run the GPU tests,
# run `memplan run --device cuda` on four zoo plans (and a 2-stream plan of each); the two training
# graphs are planned at a 60 % budget (spill and recompute round trips) when that budget can be met
# (squeezenet1_0.32.train: yes; alexnet.64.train: no, its outputs alone need 97 %, and the log says
# so), and a fused plan of resnet18, and write a JSON summary to $OUT/gpu_check.json. Usage: OUT=dir [ZOO=dir] scripts/gpu_check.sh
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
ZOO=${ZOO:-../shared/zoo}
log() { echo "[gpu_check] $*" | tee -a "$OUT/log.txt"; }
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || log "nvidia-smi failed"
# On a machine without cargo (the GPU device), carry prebuilt binaries and point PREBUILT at
# them: PREBUILT/memplan (`cargo build --release --features cuda`) and PREBUILT/gpu-tests
# (the test binary of `cargo test --release -p memplan-executor --features cuda --test gpu
# --no-run`). Otherwise both are built here.
if [ -n "${PREBUILT:-}" ]; then
  BIN="$PREBUILT/memplan"
  log "gpu tests (prebuilt)"
  "$PREBUILT/gpu-tests" --nocapture > "$OUT/gpu_tests.txt" 2>&1
else
  log "build"
  cargo build --release --features cuda > "$OUT/build.txt" 2>&1 || { log "build failed"; tail -50 "$OUT/build.txt"; exit 1; }
  BIN=${CARGO_TARGET_DIR:-target}/release/memplan
  log "gpu tests"
  cargo test --release -p memplan-executor --features cuda --test gpu -- --nocapture > "$OUT/gpu_tests.txt" 2>&1
fi
TESTS_RC=$?
runs=()
# run_both NAME PLAN KERNELS: runs graph $g's PLAN on the GPU and on the CPU, as run NAME.
run_both() {
  log "run $g ($1, $3)"
  "$BIN" run "$ZOO/$g.json" "$2" --device cuda --kernels "$3" --json > "$OUT/$1.cuda.json" 2> "$OUT/$1.cuda.err"
  echo "$1 rc=$?" >> "$OUT/log.txt"
  "$BIN" run "$ZOO/$g.json" "$2" --device cpu --kernels "$3" --json > "$OUT/$1.cpu.json" 2>> "$OUT/log.txt"
  runs+=("$1")
}
for g in resnet18.1.inference mobilenet_v2.1.inference alexnet.64.train squeezenet1_0.32.train; do
  [ -f "$ZOO/$g.json" ] || { log "missing $g"; continue; }
  "$BIN" plan "$ZOO/$g.json" --strategy heuristic -o "$OUT/$g.plan.json" 2>> "$OUT/log.txt"
  plan="$OUT/$g.plan.json"
  case "$g" in
    *.train)
      if "$BIN" plan "$ZOO/$g.json" --budget 60% -o "$OUT/$g.budget.plan.json" 2>> "$OUT/log.txt"; then
        plan="$OUT/$g.budget.plan.json"
      else
        log "$g: the 60 % budget cannot be met; its unconstrained plan runs instead"
      fi
      ;;
  esac
  # A 2-stream plan of every graph too: CUDA streams and events.
  if "$BIN" plan --help | grep -q -- --streams; then
    "$BIN" plan "$ZOO/$g.json" --strategy heuristic --streams 2 -o "$OUT/$g.streams.plan.json" 2>> "$OUT/log.txt"
    run_both "$g.streams" "$OUT/$g.streams.plan.json" mix
  fi
  for k in mix real; do
    run_both "$g.$k" "$plan" $k
  done
done
# A fused plan (conv → bn → relu groups): every member on GPU kernels, the run compared with
# the original graph's reference too.
g=resnet18.1.inference
if [ -f "$ZOO/$g.json" ] && "$BIN" plan "$ZOO/$g.json" --rewrite fuse --strategy heuristic -o "$OUT/$g.fused.plan.json" 2>> "$OUT/log.txt"; then
  for k in mix real; do
    run_both "$g.fused.$k" "$OUT/$g.fused.plan.json" $k
  done
fi
python3 - "$OUT" "$TESTS_RC" "${runs[@]}" <<'PY'
import json, sys, os
out, rc, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
summary = {"gpu_tests_rc": rc, "runs": {}}
for r in runs:
    entry = {}
    for dev in ("cuda", "cpu"):
        p = os.path.join(out, f"{r}.{dev}.json")
        try:
            j = json.load(open(p))
            entry[dev] = {k: j.get(k) for k in ("outputs_equal", "step_ms", "total_ms", "plan_arena_bytes",
                          "plan_weights_bytes", "spill_out_bytes", "recomputes", "device_memory", "notes", "first_mismatch", "kernels", "original")}
        except Exception as e:
            entry[dev] = {"error": str(e)}
    summary["runs"][r] = entry
json.dump(summary, open(os.path.join(out, "gpu_check.json"), "w"), indent=2)
print(json.dumps(summary, indent=2))
PY
