"""Tests of memplan.torch: export torchvision models, plan them, check the plans, replay them
in one arena with PyTorch's ATen kernels and compare with eager PyTorch.

    python3 -m pytest python/tests/test_torch.py -v

Needs torch and torchvision (else skipped). Plans with `memplan.plan` when the native
module is built, else with the CLI at $MEMPLAN_BIN or $CARGO_TARGET_DIR/release/memplan
(else target/release/memplan of this checkout), else the tests skip. Plans are also checked
by `memplan check` (or Plan.check) and, when ../shared exists, by the independent
../shared/tools/check_plan.py.

Sizes (2 shared CPU cores): batch 2 at 64x64 for resnet18 / mobilenet_v2 inference and
resnet18 training, batch 1 at 64x64 for vgg16 inference (its 138 M parameters dominate);
the budgeted plan is resnet18 training at batch 4, 160x160, where the activations outweigh
the gradients that must stay resident (at 64x64 no 70% budget is feasible).
"""

import importlib
import json
import os
import subprocess
import sys
import types

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))
PKG = os.path.join(ROOT, "python", "memplan")
SHARED = os.environ.get("MEMPLAN_SHARED_DIR") or os.path.join(ROOT, os.pardir, "shared")


def _import_memplan():
    """memplan (installed, or this checkout's python/ folder) and memplan.torch. Without the
    native module, python/memplan is loaded as a bare package so that memplan.torch (which
    does not need it) still imports."""
    try:
        import memplan  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.dirname(PKG))
        try:
            import memplan  # noqa: F401
        except ImportError:
            sys.modules.pop("memplan", None)
            stub = types.ModuleType("memplan")
            stub.__path__ = [PKG]
            sys.modules["memplan"] = stub
    import memplan

    return memplan, importlib.import_module("memplan.torch")


memplan, mt = _import_memplan()


def _cli():
    for cand in [
        os.environ.get("MEMPLAN_BIN"),
        os.environ.get("CARGO_TARGET_DIR") and os.path.join(os.environ["CARGO_TARGET_DIR"], "release", "memplan"),
        os.path.join(ROOT, "target", "release", "memplan"),
        os.path.expanduser("~/.cache/memplan-target/release/memplan"),
    ]:
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


NATIVE = callable(getattr(memplan, "plan", None))
CLI = _cli()


def plan_graph(graph, tmp_path, **options):
    """Plans `graph`; returns the memplan-plan/1 dict (native module, else the CLI)."""
    if NATIVE:
        return json.loads(memplan.plan(graph, **options).to_json())
    if CLI is None:
        pytest.skip("no planner: build the native module (pip install ./python) or the CLI "
                    "(cargo build --release -p memplan-cli), or set MEMPLAN_BIN")
    gp, pp = _write(tmp_path, graph, None)
    flags = []
    for k, v in options.items():
        flags += ["--" + k.replace("_", "-"), str(v)]
    r = subprocess.run([CLI, "plan", gp, "-o", pp, *flags], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(pp) as f:
        return json.load(f)


def _write(tmp_path, graph, plan):
    gp = os.path.join(str(tmp_path), "graph.json")
    pp = os.path.join(str(tmp_path), "plan.json")
    with open(gp, "w") as f:
        json.dump(graph, f)
    if plan is not None:
        with open(pp, "w") as f:
            json.dump(plan, f)
    return gp, pp


def check_plan(graph, plan, tmp_path):
    """(valid per memplan, valid per ../shared/tools/check_plan.py or None without it, text)."""
    gp, pp = _write(tmp_path, graph, plan)
    if NATIVE:
        try:
            memplan.check(graph, plan)
            ok, text = True, ""
        except memplan.InvalidPlanError as e:
            ok, text = False, str(e)
    elif CLI is not None:
        r = subprocess.run([CLI, "check", gp, pp], capture_output=True, text=True)
        ok, text = r.returncode == 0, r.stdout + r.stderr
    else:
        ok, text = None, "no checker"
    tool = os.path.join(SHARED, "tools", "check_plan.py")
    shared_ok = None
    if os.path.isfile(tool):
        r = subprocess.run([sys.executable, tool, gp, pp], capture_output=True, text=True)
        shared_ok = r.returncode == 0
        text += r.stdout + r.stderr
    return ok, shared_ok, text


def model_and_input(name, batch, size, seed=0):
    torch.manual_seed(seed)
    model = getattr(torchvision.models, name)()
    x = torch.randn(batch, 3, size, size)
    return model, x


def export_plan_check_run(tmp_path, name, batch, size, train, **plan_options):
    """The whole path: export, plan, check (both checkers), replay, compare; returns
    (Exported, plan, RunResult)."""
    model, x = model_and_input(name, batch, size)
    ex = mt.export(model, (x,), train=train)
    plan = plan_graph(ex.graph, tmp_path, **plan_options)
    ok, shared_ok, text = check_plan(ex.graph, plan, tmp_path)
    assert ok is not False, text
    assert shared_ok is not False, text
    result = mt.run(ex, (x,), plan)
    return ex, plan, result


def assert_replay_equals_eager(result):
    # The replay runs the same ATen kernels on the same values: bit-for-bit equality is
    # expected (and observed with torch 2.15 on CPU).
    assert result.bitwise_equal, f"max abs diff {result.max_abs_diff}"
    assert result.max_abs_diff == 0.0
    assert result.eager_peak_bytes > 0 and result.replay_peak_bytes >= result.arena_bytes


def export_tool():
    """tools/export_pytorch.py loaded as a module."""
    spec = importlib.util.spec_from_file_location(
        "export_pytorch_tool", os.path.join(ROOT, "tools", "export_pytorch.py"))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_the_exported_graph_is_what_the_command_line_tool_writes(tmp_path):
    tool = export_tool()
    out = os.path.join(str(tmp_path), "g.json")
    assert tool.main(["torchvision.models:resnet18", "--batch", "2", "--mode", "train",
                      "--input-shape", "3,32,32", "-o", out]) == 0
    with open(out) as f:
        written = json.load(f)
    ex = mt.export(torchvision.models.resnet18(), (torch.empty(2, 3, 32, 32),), train=True,
                   name=written["name"])
    for k in ("tensors", "ops", "alignment", "format", "name"):
        assert ex.graph[k] == written[k], k


def test_a_dynamic_batch_export_is_the_symbolic_graph_the_command_line_tool_writes(tmp_path):
    tool = export_tool()
    out = os.path.join(str(tmp_path), "g.json")
    assert tool.main(["torchvision.models:resnet18", "--dynamic-batch", "1..8", "--mode",
                      "inference", "--input-shape", "3,32,32", "-o", out]) == 0
    with open(out) as f:
        written = json.load(f)
    g = mt.export_dynamic_batch(torchvision.models.resnet18(), torch.empty(2, 3, 32, 32),
                                (1, 8), name=written["name"])
    for k in ("tensors", "ops", "alignment", "format", "name", "symbols"):
        assert g[k] == written[k], k
    assert g["meta"]["dynamic"] == {"symbols": {"B": {"min": 1, "max": 8, "degree": 1}},
                                    "traced": [[1], [2], [3], [4], [8]]}
    with pytest.raises(mt.ExportError, match="MIN < MAX"):
        mt.export_dynamic_batch(torchvision.models.resnet18(), torch.empty(2, 3, 32, 32), (4, 4))


def test_every_graph_op_and_tensor_maps_to_a_node_of_the_kept_trace():
    model, x = model_and_input("resnet18", 2, 32)
    ex = mt.export(model, (x,), train=True)
    assert not ex.unsupported
    assert set(ex.op_nodes) == {o["name"] for o in ex.graph["ops"]}
    assert all(ex.op_nodes[o].name == o for o in ex.op_nodes)
    assert set(ex.tensor_nodes) == {t["name"] for t in ex.graph["tensors"]}
    assert ex.weights["param:conv1.weight"] is model.conv1.weight
    assert ex.inputs["input"] is x
    # batch-norm running statistics are updated through dropped input mutations
    assert len(ex.mutations) == ex.graph["meta"]["dropped_input_mutations"] > 0


def test_resnet18_inference_replays_bitwise_equal_to_eager(tmp_path):
    _, plan, r = export_plan_check_run(tmp_path, "resnet18", 2, 64, False)
    assert_replay_equals_eager(r)
    assert r.arena_bytes == plan["arena_bytes"]
    assert r.counts["exec"] == len([i for i in plan["instructions"] if i["op"] == "exec"])


def test_mobilenet_v2_inference_replays_bitwise_equal_to_eager(tmp_path):
    _, _, r = export_plan_check_run(tmp_path, "mobilenet_v2", 2, 64, False)
    assert_replay_equals_eager(r)


def test_vgg16_inference_replays_bitwise_equal_to_eager(tmp_path):
    _, _, r = export_plan_check_run(tmp_path, "vgg16", 1, 64, False)
    assert_replay_equals_eager(r)


def test_resnet18_training_replays_loss_gradients_and_running_stats_bitwise(tmp_path):
    ex, _, r = export_plan_check_run(tmp_path, "resnet18", 2, 64, True)
    assert_replay_equals_eager(r)
    n_params = len(list(ex.module.parameters()))
    assert len(r.outputs) == 1 + n_params  # the loss, then one gradient per parameter
    # the running statistics are updated as in eager (and compared with eager's)
    assert not torch.equal(r.buffers["buffer:bn1.running_mean"], torch.zeros(64))
    # the module itself is not modified by the replay or the eager comparison
    assert torch.equal(ex.module.bn1.running_mean, torch.zeros(64))


def test_mobilenet_v2_training_exports_plans_validates_and_replays_bitwise(tmp_path):
    ex, _, r = export_plan_check_run(tmp_path, "mobilenet_v2", 2, 64, True)
    assert_replay_equals_eager(r)
    assert len(r.outputs) == 1 + len(list(ex.module.parameters()))


def test_the_weights_can_live_in_the_plans_weights_region(tmp_path):
    model, x = model_and_input("resnet18", 1, 32)
    ex = mt.export(model, (x,))
    plan = plan_graph(ex.graph, tmp_path)
    r = mt.run(ex, (x,), plan, weights_region=True, measure=False)
    assert r.bitwise_equal


def test_results_copied_into_the_arena_equal_out_variant_writes(tmp_path):
    model, x = model_and_input("resnet18", 2, 32)
    ex = mt.export(model, (x,), train=True)
    plan = plan_graph(ex.graph, tmp_path)
    r = mt.run(ex, (x,), plan, use_out=False, measure=False)
    assert r.bitwise_equal and r.counts["out_variant"] == 0


def test_a_budgeted_plan_with_spills_and_recomputes_replays_bitwise_equal(tmp_path):
    ex, plan, r = export_plan_check_run(tmp_path, "resnet18", 4, 160, True, budget="70%")
    kinds = [i["op"] for i in plan["instructions"]]
    if "spill_out" not in kinds and r.counts["recompute"] == 0:
        pytest.skip("the 70% plan has neither spills nor recomputes")
    assert r.counts["spill_out"] == kinds.count("spill_out")
    assert_replay_equals_eager(r)


def corrupt(graph, plan):
    """A copy of `plan` in which one tensor T is allocated over another live tensor U that
    holds data and is read after T is written (and is not read by T's producer): T's write
    clobbers U. Returns (corrupted plan, T, U)."""
    sizes = {t["name"]: t["size"] for t in graph["tensors"]}
    ops = {o["name"]: o for o in graph["ops"]}
    producer = {t: o["name"] for o in graph["ops"] for t in o["outputs"]}
    ins = plan["instructions"]
    reads_at = {}  # tensor -> instruction indices of the execs reading it
    for i, x in enumerate(ins):
        if x["op"] == "exec":
            for t in ops[x["node"]]["inputs"]:
                reads_at.setdefault(t, []).append(i)
    offset, valid = {}, set()
    for i, x in enumerate(ins):
        if x["op"] == "alloc":
            t = x["tensor"]
            if t in producer:
                p = next(j for j in range(i, len(ins))
                         if ins[j]["op"] == "exec" and ins[j]["node"] == producer[t])
                for u in sorted(valid, key=lambda u: offset[u]):
                    if u in ops[producer[t]]["inputs"] or min(sizes[u], sizes[t]) < 64:
                        continue
                    if any(j > p for j in reads_at.get(u, [])):
                        bad = json.loads(json.dumps(plan))
                        bad["instructions"][i]["offset"] = offset[u]
                        bad["arena_bytes"] = max(bad["arena_bytes"], offset[u] + sizes[t])
                        return bad, t, u
            offset[x["tensor"]] = x["offset"]
            if x["tensor"] not in producer:
                valid.add(x["tensor"])
        elif x["op"] in ("free", "spill_out"):
            offset.pop(x["tensor"], None)
            valid.discard(x["tensor"])
        elif x["op"] == "spill_in":
            offset[x["tensor"]] = x["offset"]
            valid.add(x["tensor"])
        elif x["op"] == "exec":
            valid.update(ops[x["node"]]["outputs"])
    raise AssertionError("no tensor to corrupt")


def test_a_plan_with_one_tensor_moved_over_a_live_one_replays_differently(tmp_path):
    model, x = model_and_input("resnet18", 2, 64)
    ex = mt.export(model, (x,))
    plan = plan_graph(ex.graph, tmp_path)
    bad, t, u = corrupt(ex.graph, plan)
    ok, shared_ok, _ = check_plan(ex.graph, bad, tmp_path)
    assert ok is not True and shared_ok is not True, f"{t} over {u} is not flagged"
    good = mt.run(ex, (x,), plan, measure=False)
    r = mt.run(ex, (x,), bad, measure=False)
    assert good.bitwise_equal
    assert not r.bitwise_equal and r.max_abs_diff > 0, f"{t} over {u}"


def test_a_plan_of_another_graph_is_refused_naming_both(tmp_path):
    model, x = model_and_input("resnet18", 1, 32)
    ex = mt.export(model, (x,))
    plan = plan_graph(ex.graph, tmp_path)
    plan["graph"] = "other"
    with pytest.raises(mt.ReplayError, match="'other'.*'resnet.1.inference'"):
        mt.run(ex, (x,), plan, compare=False, measure=False)


def test_a_plan_reading_a_freed_tensor_is_refused_naming_it(tmp_path):
    model, x = model_and_input("resnet18", 1, 32)
    ex = mt.export(model, (x,))
    plan = plan_graph(ex.graph, tmp_path)
    ins = plan["instructions"]
    first_exec = next(i for i, x in enumerate(ins) if x["op"] == "exec")
    ins.insert(first_exec, {"op": "free", "tensor": "input"})
    with pytest.raises(mt.ReplayError, match="reads tensor 'input', which is not reserved"):
        mt.run(ex, (x,), plan, compare=False, measure=False)


def test_recomputing_a_training_batch_norm_does_not_update_its_running_stats_twice(tmp_path):
    model, x = model_and_input("resnet18", 2, 32)
    ex = mt.export(model, (x,), train=True)
    plan = plan_graph(ex.graph, tmp_path)
    bn = {o["name"] for o in ex.graph["ops"] if o["type"] == "batch_norm"}
    ins = plan["instructions"]
    at = next(i for i, x in enumerate(ins) if x["op"] == "exec" and x["node"] in bn)
    ins.insert(at + 1, dict(ins[at]))  # the same op again, its inputs still valid
    ok, _, text = check_plan(ex.graph, plan, tmp_path)
    assert ok is not False, text
    r = mt.run(ex, (x,), plan, measure=False)
    assert r.counts["recompute"] == 1
    assert r.bitwise_equal, f"max abs diff {r.max_abs_diff}"


def test_a_two_stream_plan_of_resnet18_replays_bitwise_equal_to_eager(tmp_path):
    model, x = model_and_input("resnet18", 2, 64)
    ex = mt.export(model, (x,), train=False)
    plan = plan_graph(ex.graph, tmp_path, streams=2, stream_peak_ratio=1.5)
    ops = {i["op"] for i in plan["instructions"]}
    assert "record_event" in ops and "wait_event" in ops, plan["stats"].get("streams")
    assert plan["stats"]["streams"]["makespan_us"] < plan["stats"]["streams"]["serial_makespan_us"]
    ok, _, text = check_plan(ex.graph, plan, tmp_path)
    assert ok is not False, text
    assert_replay_equals_eager(mt.run(ex, (x,), plan))
