#!/usr/bin/env python3
"""Measures memplan.torch's replay against eager PyTorch; prints a Markdown table.

    python3 python/tests/measure_torch.py [--size 64] [--budget 70%]

For resnet18, mobilenet_v2 and vgg16 inference and resnet18 and mobilenet_v2 training: export, plan (the
native module, else the CLI as in test_torch.py), check, replay in one arena, compare with
eager. Columns: equality with eager (bitwise, else the max abs diff), the plan's arena bytes,
eager's peak allocation (torch.profiler memory events on the CPU: the largest running sum of
the allocations and frees made during the call; weights and inputs exist before and are not
counted, kernel scratch and outputs are), the replay's peak by the same measure (arena +
host pool + kernels' temporaries), and the wall times of planning, one replay and one eager
call.
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_torch as tt  # noqa: E402


def mib(b):
    return f"{b / 2**20:.2f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--budget", help="also plan resnet18 training under this budget")
    args = ap.parse_args()
    cases = [("resnet18", 2, False), ("mobilenet_v2", 2, False), ("vgg16", 1, False),
             ("resnet18", 2, True), ("mobilenet_v2", 2, True)]
    if args.budget:
        cases.append(("resnet18", 4, True, args.budget))
    rows = []
    for case in cases:
        name, batch, train = case[:3]
        budget = case[3] if len(case) > 3 else None
        model, x = tt.model_and_input(name, batch, args.size)
        ex = tt.mt.export(model, (x,), train=train)
        tmp = tempfile.mkdtemp()
        t0 = time.perf_counter()
        opts = {"budget": budget} if budget else {}
        plan = tt.plan_graph(ex.graph, tmp, **opts)
        plan_s = time.perf_counter() - t0
        ok, shared_ok, text = tt.check_plan(ex.graph, plan, tmp)
        r = tt.mt.run(ex, (x,), plan)
        eq = "bitwise equal" if r.bitwise_equal else f"max abs diff {r.max_abs_diff:.3g}"
        spills = r.counts["spill_out"]
        mode = "train" if train else "inference"
        if budget:
            mode += f", budget {budget} ({spills} spills, {r.counts['recompute']} recomputes)"
        rows.append([f"{name} {mode}", f"{batch}x3x{args.size}x{args.size}", eq,
                     f"{ok}/{shared_ok}", mib(r.arena_bytes) + (f" + host {mib(r.host_bytes)}" if r.host_bytes else ""),
                     mib(r.eager_peak_bytes), mib(r.replay_peak_bytes),
                     f"{plan_s:.2f} / {r.replay_seconds:.2f} / {r.eager_seconds:.2f}"])
        print(" | ".join(rows[-1]), file=sys.stderr)
    head = ["model", "input", "replay vs eager", "check memplan/shared", "arena",
            "eager peak", "replay peak", "plan / replay / eager s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
