"""Export a PyTorch model as a memplan-graph/1 graph (the exporter behind `memplan.torch` and
the command-line tool tools/export_pytorch.py).

This module needs neither memplan's native module nor, at import, torch: the tool loads it
by file path, and `memplan.torch.export` wraps `trace` + `build_graph` and keeps the trace
for replay.

    tools/export_pytorch.py MODULE:FACTORY --batch N --mode inference|train -o GRAPH.json
        [--input-shape 3,224,224] [--name NAME] [--alignment 256]
    tools/export_pytorch.py MODULE:FACTORY --dynamic-batch 1..64 [--symbol B] --mode ... -o G.json
        [--dynamic-dim S=1:16..512]

With --dynamic-batch / --dynamic-dim the model is traced at a few points (`dynamic_points`)
and the graphs are merged into one symbolic graph whose sizes are polynomials over the symbols
(`merge_dynamic`): memplan plans it once for the whole range.

MODULE:FACTORY names a callable returning an nn.Module, e.g. torchvision.models:resnet50
(called with no arguments, so no weights are downloaded). The model is traced with
torch.fx's make_fx over fake tensors (no real computation, no device memory):

- inference: the forward pass in eval mode;
- train: forward, a sum loss, and the backward pass through torch.autograd.grad
  (weights' gradients are the graph's outputs, with the loss).

The trace is functionalized (mutations removed), then converted:
- every storage is one tensor: view ops (view, reshape of contiguous data, t, expand, split,
  getitem, ...) fold onto their base storage and emit no op;
- placeholders become `param:NAME` / `buffer:NAME` weights and `input`;
- multi-output ops name their outputs OP.0, OP.1, ...; outputs that are None are skipped;
- copies into inputs that functionalization appends (batch-norm running statistics in
  train mode) are dropped: they update weights, which memplan does not model;
- elementwise (pointwise-tagged) ops whose output has the first input's size get an
  `inplace` hint [[0, 0]];
- random ops (dropout in every variant, rand / randn / randint / bernoulli / uniform /
  normal / multinomial / ..., and any op torch tags `nondeterministic_seeded`) and ops that
  mutate an input in place (ATen names ending in one `_`, e.g. `add_`, `copy_`) get
  `"recompute": false`: running them again under a memory budget would change the results
  (the same rule as memplan's `ops::may_recompute`);
- op types use memplan's vocabulary where the executor has a kernel (conv2d, batch_norm,
  max_pool2d, matmul, ...), else the ATen name; flops come from torch's flop counter
  registry where it knows the op.

The conversion from trace records to the graph (`build_graph`) is plain Python and is
tested without torch (tools/test_export_pytorch.py).

`trace` returns, with the records, the traced fx GraphModule: its `call_function` targets
are ATen op overloads, callable on real tensors, and every graph op is named after the fx
node it comes from, so a plan of the graph can be replayed on the trace
(`memplan.torch.run`).
"""

import argparse
import importlib
import json
import os
import re
import sys

GRAPH_FORMAT = "memplan-graph/1"

# ATen op name -> memplan op type (where the executor has a real kernel or the zoo uses it).
TYPE_MAP = {
    "convolution": "conv2d",
    "convolution_backward": "conv2d_backward",
    "_native_batch_norm_legit_no_training": "batch_norm",
    "_native_batch_norm_legit_functional": "batch_norm",
    "_native_batch_norm_legit": "batch_norm",
    "native_batch_norm": "batch_norm",
    "native_batch_norm_backward": "batch_norm_backward",
    "max_pool2d_with_indices": "max_pool2d",
    "max_pool2d_with_indices_backward": "max_pool2d_backward",
    "avg_pool2d": "avg_pool2d",
    "_adaptive_avg_pool2d": "adaptive_avg_pool2d",
    "adaptive_avg_pool2d": "adaptive_avg_pool2d",
    "addmm": "matmul",
    "mm": "matmul",
    "bmm": "matmul",
    "_softmax": "softmax",
    "cat": "concat",
    "hardtanh": "hardtanh",
}

DTYPES = {
    "torch.float32": "f32",
    "torch.float16": "f16",
    "torch.bfloat16": "bf16",
    "torch.float64": "f64",
    "torch.int64": "i64",
    "torch.int32": "i32",
    "torch.int16": "i16",
    "torch.int8": "i8",
    "torch.uint8": "u8",
    "torch.bool": "bool",
}


# Base names (lower case, leading/trailing `_` removed) of random ops beyond the prefix
# rules of `is_random` (memplan's src/ops/recompute.rs RANDOM_OPS, kept in step).
RANDOM_OPS = {
    "bernoulli",
    "multinomial",
    "uniform",
    "normal",
    "normal_functional",
    "exponential",
    "geometric",
    "cauchy",
    "log_normal",
    "poisson",
    "binomial",
    "rrelu",
    "rrelu_with_noise",
    "standard_gamma",
    "sample_dirichlet",
    "gumbel_softmax",
    "fused_dropout",
}

NAMESPACES = {"aten", "torch", "prims", "ops", "onnx", "ai", "nn", "functional", "_ops"}


def base_name(op_type):
    """Lower-case base name of an op type without namespace or overload (`aten.add_.Tensor`
    -> `add_`)."""
    t = op_type.strip().lower().split("::")[-1]
    for part in t.split("."):
        if part and part not in NAMESPACES:
            return part
    return ""


def is_random(op_type):
    """Whether an op type draws random numbers (dropout but not its backward, rand*, samplers)."""
    core = base_name(op_type).strip("_")
    if core.endswith("_backward") or core.endswith("backward_data"):
        return False
    return (
        "dropout" in core
        or core.startswith("rand")
        or core in RANDOM_OPS
        or any(core == r + "_like" for r in RANDOM_OPS)
    )


def mutates_input(op_type):
    """Whether an ATen-style op type mutates an input in place (ends in exactly one `_`)."""
    b = base_name(op_type)
    return len(b) > 1 and b.endswith("_") and not b.endswith("__")


def may_recompute_by_default(op_type):
    """memplan's default for an op without a `recompute` flag: neither random nor in place."""
    return not is_random(op_type) and not mutates_input(op_type)


class ExportError(Exception):
    """A model or option that cannot be exported (the message names it)."""


def build_graph(records, name, alignment=256, meta=None, provenance=None):
    """Converts trace records to a memplan-graph/1 dict.

    records = {
      "placeholders": [{"name", "kind": "weight"|"input", "storage", "nbytes", "shape", "dtype"}],
      "nodes": [{"name", "op", "inputs": [storage|None], "outputs": [out|None],
                 "attrs": {}, "pointwise": bool, "flops": float|None,
                 "mutates_input": bool, "aten": str (optional, the ATen name),
                 "random": bool (optional, torch's nondeterministic_seeded tag)}],
      "outputs": [storage|None],
    }
    with out = {"storage", "nbytes", "shape", "dtype"}. A node output whose storage already
    exists is a view: it adds no tensor; a node all of whose outputs are views is no op.

    When `provenance` is a dict, it receives where every graph tensor comes from:
    `provenance["storage_names"]` (storage -> tensor name) and `provenance["sources"]`
    (tensor name -> (node name, output index), or ("placeholder", position) for a
    placeholder record), and `provenance["dropped"]` (names of the dropped mutating nodes).
    """
    tensors = []
    name_of = {}  # storage id -> tensor name
    index_of = {}  # tensor name -> position in tensors
    used = set()

    def add_tensor(storage, tname, kind, nbytes, shape, dtype):
        if tname in used:
            raise ExportError(f"tensor name {tname!r} is used twice")
        used.add(tname)
        name_of[storage] = tname
        index_of[tname] = len(tensors)
        t = {"name": tname, "size": max(int(nbytes), 1), "kind": kind}
        if shape is not None:
            t["shape"] = [int(d) for d in shape]
        if dtype is not None:
            t["dtype"] = dtype
        tensors.append(t)

    sources = {}
    dropped = []
    for pi, p in enumerate(records["placeholders"]):
        if p["storage"] in name_of:
            continue  # a placeholder aliasing another (tied weights): one storage
        add_tensor(p["storage"], p["name"], p["kind"], p["nbytes"], p.get("shape"), p.get("dtype"))
        sources[p["name"]] = ("placeholder", pi)

    ops = []
    op_names = set()
    dropped_mutations = 0
    for n in records["nodes"]:
        if n.get("mutates_input"):
            dropped_mutations += 1
            dropped.append(n["name"])
            continue
        outs = n["outputs"]
        new = [o for o in outs if o is not None and o["storage"] not in name_of]
        if not new:
            continue  # a view (or an op without tensor outputs): folds onto its base
        ins = []
        for s in n["inputs"]:
            if s is None:
                continue
            if s not in name_of:
                raise ExportError(f"node {n['name']!r} reads a storage that nothing produced")
            ins.append(name_of[s])
        multi = len(outs) > 1
        out_names = []
        for i, o in enumerate(outs):
            if o is None or o["storage"] in name_of:
                continue
            tname = f"{n['name']}.{i}" if multi else n["name"]
            add_tensor(o["storage"], tname, "activation", o["nbytes"], o.get("shape"), o.get("dtype"))
            sources[tname] = (n["name"], i)
            out_names.append(tname)
        if n["name"] in op_names:
            raise ExportError(f"op name {n['name']!r} is used twice")
        op_names.add(n["name"])
        op = {"name": n["name"], "type": n["op"], "inputs": ins, "outputs": out_names}
        if n.get("flops") is not None:
            op["flops"] = float(n["flops"])
        if n.get("attrs"):
            op["attrs"] = n["attrs"]
        names = [n["op"], n.get("aten") or n["op"]]
        if n.get("random") or not all(may_recompute_by_default(t) for t in names):
            op["recompute"] = False  # random or in place: running it again changes results
        if (
            n.get("pointwise")
            and ins
            and tensors[index_of[ins[0]]]["kind"] == "activation"
            and tensors[index_of[ins[0]]]["size"] == tensors[index_of[out_names[0]]]["size"]
        ):
            op["inplace"] = [[0, 0]]
        ops.append(op)

    n_out = 0
    for s in records["outputs"]:
        if s is None or s not in name_of:
            continue
        t = tensors[index_of[name_of[s]]]
        if t["kind"] == "activation":
            t["kind"] = "output"
            n_out += 1
    if not ops:
        raise ExportError("the trace has no ops")
    if n_out == 0:
        raise ExportError("no graph output is computed by an op")
    if provenance is not None:
        provenance["storage_names"] = dict(name_of)
        provenance["sources"] = sources
        provenance["dropped"] = dropped
    m = dict(meta or {})
    if dropped_mutations:
        m["dropped_input_mutations"] = dropped_mutations
    return {
        "format": GRAPH_FORMAT,
        "name": name,
        "alignment": alignment,
        "meta": m,
        "tensors": tensors,
        "ops": ops,
    }


def _solve_1d(xs, ys):
    """Coefficients c of sum(c[j] * x**j) through the points (xs[i], ys[i]) (exact, Fractions)."""
    from fractions import Fraction

    n = len(xs)
    a = [[Fraction(x) ** j for j in range(n)] + [Fraction(y)] for x, y in zip(xs, ys)]
    for col in range(n):
        piv = next(r for r in range(col, n) if a[r][col] != 0)
        a[col], a[piv] = a[piv], a[col]
        for r in range(n):
            if r != col and a[r][col] != 0:
                f = a[r][col] / a[col][col]
                a[r] = [u - f * v for u, v in zip(a[r], a[col])]
    return [a[j][n] / a[j][j] for j in range(n)]


def _fit(values, names, grid):
    """The polynomial through {point tuple: value}, as a memplan size expression (an int when
    constant), or None when it is not one with non-negative integer coefficients.

    grid[k] lists the fit coordinates of symbol names[k] (degree len(grid[k]) - 1 in it); the
    polynomial is solved exactly on the grid's points (tensor-product Vandermonde), then
    checked at every other point of `values`."""
    import itertools

    dims = [len(g) for g in grid]
    coef = {idx: values[tuple(grid[k][i] for k, i in enumerate(idx))]
            for idx in itertools.product(*(range(d) for d in dims))}
    for k, g in enumerate(grid):
        new = {}
        for rest in itertools.product(*(range(d) for j, d in enumerate(dims) if j != k)):
            def at(i, rest=rest):
                r = list(rest)
                r.insert(k, i)
                return tuple(r)

            cs = _solve_1d(g, [coef[at(i)] for i in range(dims[k])])
            for i, c in enumerate(cs):
                new[at(i)] = c
        coef = new
    if any(c < 0 or c.denominator != 1 for c in coef.values()):
        return None
    terms = {e: int(c) for e, c in coef.items() if c != 0}

    def value(point):
        total = 0
        for e, c in terms.items():
            m = c
            for x, p in zip(point, e):
                m *= x ** p
            total += m
        return total

    if any(value(pt) != v for pt, v in values.items()):
        return None
    if all(sum(e) == 0 for e in terms) or not terms:
        return terms.get(tuple(0 for _ in names), 0)
    parts = []
    for e in sorted(terms, key=lambda e: (sum(e), [-x for x in e])):
        factors = [n for n, p in zip(names, e) for _ in range(p)]
        c = terms[e]
        if not factors:
            parts.append(str(c))
        else:
            parts.append("*".join(([str(c)] if c != 1 else []) + factors))
    return " + ".join(parts)


def fit_points(lo, hi, degree):
    """The fit coordinates of one symbol: degree + 1 consecutive values from 2 up (1 is where
    models specialise), within lo..hi (fewer when the range is smaller)."""
    start = max(lo, 2)
    if start + degree > hi:
        start = max(lo, hi - degree)
    return list(range(start, min(hi, start + degree) + 1))


def dynamic_points(dims):
    """The points traced for dynamic dims [(name, lo, hi, degree)]: the fit grid, then the min
    corner, the max corner and the middle (the checks)."""
    import itertools

    grid = [fit_points(lo, hi, deg) for _, lo, hi, deg in dims]
    pts = set(itertools.product(*grid))
    pts.add(tuple(lo for _, lo, _, _ in dims))
    pts.add(tuple(hi for _, _, hi, _ in dims))
    pts.add(tuple((lo + hi) // 2 for _, lo, hi, _ in dims))
    return grid, sorted(pts)


def merge_dynamic(graphs, dims, name=None, allow_specialised_min=False):
    """One symbolic graph from graphs traced at several points of several symbols.

    graphs = {point tuple: memplan-graph/1 dict}, dims = [(symbol, lo, hi, degree)] in the
    points' order, with every point of `dynamic_points(dims)`. As `merge_symbolic` (same
    structure checks, `allow_specialised_min` for points below the fit grid in any symbol), but
    sizes and shape entries are polynomials of the given degree in each symbol (e.g. `B*S*S`
    for attention scores), fitted exactly on the grid and checked at the other points.
    """
    names = [d[0] for d in dims]
    for nm, lo, hi, deg in dims:
        if not (1 <= lo < hi):
            raise ExportError(f"dynamic dim {nm} {lo}..{hi}: expected 1 <= MIN < MAX")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", nm):
            raise ExportError(f"dynamic dim name {nm!r}: expected a name such as B or S")
    if len(set(names)) != len(names):
        raise ExportError(f"dynamic dims name a symbol twice: {names}")
    grid, _ = dynamic_points(dims)
    ref_pt = tuple(g[0] for g in grid)
    if ref_pt not in graphs:
        raise ExportError(f"no trace at the fit point {ref_pt}")
    ref = graphs[ref_pt]
    points = sorted(graphs)
    top = graphs[max(points)]
    specialised = []

    def label(pt):
        return ", ".join(f"{n}={v}" for n, v in zip(names, pt))

    for pt in list(points):
        below = any(v < g[0] for v, g in zip(pt, grid))

        def differs(what, pt=pt, below=below):
            hint = (
                " (the model specialises there: start the range above it, or keep the "
                "general trace's ops there with --allow-specialised-min)" if below else ""
            )
            return ExportError(f"the traces at {label(ref_pt)} and {label(pt)} differ: {what}{hint}")

        try:
            _same_structure(ref, graphs[pt], differs)
        except ExportError:
            if not (allow_specialised_min and below):
                raise
            specialised.append(list(pt))
            points.remove(pt)
    tensors = []
    for i, t in enumerate(top["tensors"]):
        t = dict(t)

        def fit(get, what, t=t):
            e = _fit({pt: get(graphs[pt]) for pt in points}, names, grid)
            if e is None:
                vals = ", ".join(f"{get(graphs[pt])} at {label(pt)}" for pt in points)
                raise ExportError(
                    f"tensor {t['name']!r}: {what} is not a polynomial with non-negative integer "
                    f"coefficients in {', '.join(names)} ({vals})"
                )
            return e

        t["size"] = fit(lambda g, i=i: g["tensors"][i]["size"], "its size")
        if "shape" in t:
            t["shape"] = [
                fit(lambda g, i=i, d=d: g["tensors"][i]["shape"][d], f"shape entry {d}")
                for d in range(len(t["shape"]))
            ]
        tensors.append(t)
    meta = dict(top.get("meta", {}))
    meta["dynamic"] = {
        "symbols": {n: {"min": lo, "max": hi, "degree": deg} for n, lo, hi, deg in dims},
        "traced": [list(p) for p in points],
        **({"specialised": specialised} if specialised else {}),
    }
    return {
        "format": top["format"],
        "name": name or top["name"],
        "alignment": top["alignment"],
        "meta": meta,
        "symbols": {n: {"min": lo, "max": hi} for n, lo, hi, _ in dims},
        "tensors": tensors,
        "ops": top["ops"],
    }


def merge_symbolic(graphs, symbol, lo, hi, name=None, allow_specialised_min=False):
    """One symbolic graph (memplan's Dynamic shapes) from graphs traced at several batches:
    `merge_dynamic` with one symbol of degree 1, graphs = {batch: graph}.

    The graphs must have the same tensors (names, kinds, dtypes, ranks) and ops (names, types,
    inputs, outputs, attrs, hints); every tensor size and shape entry must be `a + c*batch`
    with integers a, c >= 0 through every traced batch (fitted on two consecutive batches from
    2 up, checked on the rest). `flops` are the largest batch's. Raises ExportError naming the
    first tensor or op that differs or does not fit, and the batches concerned.

    PyTorch specialises at batch 1: a transposed tensor with a dimension of size 1 is still
    contiguous, so `.contiguous()` / `reshape` copies become views (vit_b_16: 110 fewer
    tensors). With allow_specialised_min, a traced batch below the fitted ones whose trace
    differs is left out (listed in meta.dynamic.specialised) and the symbolic graph keeps the
    general trace's ops there: the copies a dynamic-shape runtime (torch.export with a dynamic
    batch, ONNX) runs at every batch, at their sizes for that batch.
    """
    if len(graphs) < 2:
        raise ExportError("a dynamic batch needs traces at two batches or more")
    g = merge_dynamic({(b,): g for b, g in graphs.items()}, [(symbol, lo, hi, 1)], name,
                      allow_specialised_min)
    g["meta"]["batch"] = symbol
    return g


def _same_structure(ref, g, differs):
    """Raises differs(what) at the first tensor or op where g's structure is not ref's."""
    if len(g["tensors"]) != len(ref["tensors"]):
        raise differs(f"{len(ref['tensors'])} vs {len(g['tensors'])} tensors")
    if len(g["ops"]) != len(ref["ops"]):
        raise differs(f"{len(ref['ops'])} vs {len(g['ops'])} ops")
    for t, u in zip(ref["tensors"], g["tensors"]):
        for key in ("name", "kind", "dtype"):
            if t.get(key) != u.get(key):
                raise differs(f"tensor {t['name']!r} vs {u['name']!r} ({key})")
        if len(t.get("shape", [])) != len(u.get("shape", [])):
            raise differs(
                f"tensor {t['name']!r} has rank {len(t.get('shape', []))} vs {len(u.get('shape', []))}"
            )
    for o, p in zip(ref["ops"], g["ops"]):
        for key in ("name", "type", "inputs", "outputs", "attrs", "recompute", "inplace"):
            if o.get(key) != p.get(key):
                raise differs(f"op {o['name']!r}: {key} {o.get(key)!r} vs {p.get(key)!r}")


def export_dynamic(trace_at, dims, name, alignment=256, meta=None, allow_specialised_min=False):
    """Traces at every point of `dynamic_points(dims)` and merges (`merge_dynamic`).

    trace_at(values) -> trace records for build_graph, with values = {symbol: value};
    dims = [(symbol, lo, hi, degree)]. A trace that raises (the model's own error at that
    point) is an ExportError naming the point."""
    _, points = dynamic_points(dims)
    graphs = {}
    for pt in points:
        values = {d[0]: v for d, v in zip(dims, pt)}
        at = ", ".join(f"{k}={v}" for k, v in values.items())
        try:
            records = trace_at(values)
        except ExportError:
            raise
        except Exception as e:  # the model's own error at that point
            raise ExportError(f"tracing at {at} failed: {type(e).__name__}: {e}") from e
        graphs[pt] = build_graph(records, f"{name}@{at}", alignment, dict(meta or {}))
    return merge_dynamic(graphs, dims, name, allow_specialised_min)


def parse_dynamic_dim(text):
    """NAME=AXIS:MIN..MAX (AXIS of the input's full shape, 0 = batch) -> (name, axis, lo, hi)."""
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(\d+):(.+)", text)
    if not m:
        raise ExportError(
            f"--dynamic-dim {text!r}: expected NAME=AXIS:MIN..MAX, e.g. S=1:16..512 (axis 0 is "
            "the batch)"
        )
    lo, hi = parse_range(m.group(3), "--dynamic-dim")
    return m.group(1), int(m.group(2)), lo, hi


def parse_range(text, option):
    """MIN..MAX -> (min, max), integers 1 <= MIN < MAX."""
    try:
        a, b = text.split("..", 1)
        lo, hi = int(a), int(b)
    except ValueError:
        raise ExportError(f"{option} {text!r}: expected MIN..MAX, e.g. 1..64") from None
    if not (1 <= lo < hi):
        raise ExportError(f"{option} {text!r}: expected 1 <= MIN < MAX")
    return lo, hi


def load_factory(spec):
    """MODULE:FACTORY -> the callable."""
    if ":" not in spec:
        raise ExportError(f"{spec!r}: expected MODULE:FACTORY, e.g. torchvision.models:resnet50")
    module, attr = spec.split(":", 1)
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ExportError(f"cannot import module {module!r}: {e}") from e
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ExportError(f"module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ExportError(f"{spec} is not callable")
    return obj


def make_step(model, mode, n_inputs=1):
    """The function a trace records, and the tensors it takes.

    Returns (step, params, buffers) with step(params, buffers, *inputs): in inference (the
    model put in eval mode) the forward pass under no_grad; in train (the model put in train
    mode) (loss, [gradient of every parameter]) for the loss `output.sum()`, through
    torch.func.grad_and_value. params and buffers are the module's named parameters and
    buffers (insertion order, which fixes the placeholders' order).
    """
    import torch

    if mode not in ("inference", "train"):
        raise ExportError(f"mode {mode!r}: expected 'inference' or 'train'")
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    if mode == "inference":
        model.eval()

        def step(params, buffers, *xs):
            with torch.no_grad():
                return torch.func.functional_call(model, {**params, **buffers}, xs)

    else:
        model.train()
        names = list(params)

        def loss_of(params, buffers, *xs):
            out = torch.func.functional_call(model, {**params, **buffers}, xs)
            if not isinstance(out, torch.Tensor):
                raise ExportError(
                    f"train mode needs the model to return one tensor (its sum is the loss); "
                    f"{type(model).__name__} returned {type(out).__name__}"
                )
            return out.sum()

        # torch.func differentiates with respect to `params` whether or not the traced
        # (fake) tensors require grad; torch.autograd.grad needs them to, and make_fx's fake
        # inputs do not in recent torch ("element 0 of tensors does not require grad").
        def step(params, buffers, *xs):
            grads, loss = torch.func.grad_and_value(loss_of)(params, buffers, *xs)
            return loss, [grads[k] for k in names]

    return step, params, buffers


def input_names(n_inputs):
    """Graph names of a model's inputs: `input` for one, `input:0`, `input:1`, ... else."""
    return ["input"] if n_inputs == 1 else [f"input:{i}" for i in range(n_inputs)]


def trace_records(model, batch, mode, input_shape):
    """Traces `model` with make_fx over fake tensors on an input of shape
    (batch, *input_shape); returns records for build_graph."""
    import torch

    return trace(model, (torch.empty(batch, *input_shape),), mode)["records"]


def trace(model, example_inputs, mode):
    """Traces `model` on `example_inputs` (a tuple of tensors) with make_fx over fake
    tensors (no real computation).

    Returns {"records": records for build_graph, "gm": the traced fx GraphModule,
    "placeholders": [(fx placeholder node, graph name, real tensor)], "node_storages":
    {fx node: [storage id or None per output]}}. The placeholders' real tensors are the module's parameters and buffers and
    the example inputs themselves (not copies).
    """
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.multiprocessing.reductions import StorageWeakRef

    try:
        from torch.utils.flop_counter import flop_registry
    except ImportError:  # older torch
        flop_registry = {}

    example_inputs = tuple(example_inputs)
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise ExportError(f"example input {i} is a {type(x).__name__}, not a tensor")
    step, params, buffers = make_step(model, mode, len(example_inputs))
    fn = torch.func.functionalize(step, remove="mutations")
    gm = make_fx(fn, tracing_mode="fake")(params, buffers, *example_inputs)

    storage_ids = {}

    def sid(t):
        ref = StorageWeakRef(t.untyped_storage())
        key = ref.cdata
        if key not in storage_ids:
            storage_ids[key] = len(storage_ids)
        return storage_ids[key]

    def describe(t):
        if not isinstance(t, torch.Tensor):
            return None
        return {
            "storage": sid(t),
            "nbytes": t.untyped_storage().nbytes(),
            "shape": list(t.shape),
            "dtype": DTYPES.get(str(t.dtype), str(t.dtype).replace("torch.", "")),
        }

    placeholders = []
    in_names = input_names(len(example_inputs))
    order = ["param:" + k for k in params] + ["buffer:" + k for k in buffers] + in_names
    real = list(params.values()) + list(buffers.values()) + list(example_inputs)
    fx_placeholders = []
    node_storages = {}
    nodes = []
    place_i = 0
    val_of = {}
    placeholder_storages = set()
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder":
            # functional_call's pytree flattening keeps params, then buffers, then x.
            pname = order[place_i] if place_i < len(order) else node.name
            rv = real[place_i] if place_i < len(real) else None
            place_i += 1
            d = describe(val)
            if d is None:
                continue
            kind = "input" if pname in in_names else "weight"
            placeholders.append({"name": pname, "kind": kind, **d})
            fx_placeholders.append((node, pname, rv))
            node_storages[node] = [d["storage"]]
            placeholder_storages.add(d["storage"])
            val_of[node] = val
        elif node.op == "call_function":
            val_of[node] = val
            target = node.target
            packet = getattr(target, "overloadpacket", None)
            aten = packet.__name__ if packet is not None else getattr(target, "__name__", str(target))
            if aten == "getitem":
                continue  # the element's storage is the producer's output: a view
            vals = list(val) if isinstance(val, (tuple, list)) else [val]
            outs = [describe(v) for v in vals]
            node_storages[node] = [o["storage"] if o else None for o in outs]
            if all(o is None for o in outs):
                continue
            ins = []
            flat_in = []
            torch.fx.node.map_arg((node.args, node.kwargs), lambda n: flat_in.append(n))
            for a in flat_in:
                v = val_of.get(a)
                if isinstance(v, torch.Tensor):
                    ins.append(sid(v))
                elif isinstance(v, (tuple, list)):
                    ins.extend(sid(e) for e in v if isinstance(e, torch.Tensor))
            mutates = aten == "copy_" and ins and ins[0] in placeholder_storages
            op_type = TYPE_MAP.get(aten, aten)
            attrs = {}
            if aten == "convolution":
                _, _, _, stride, padding, dilation, transposed, _, groups = node.args[:9]
                attrs = {
                    "stride": list(stride),
                    "padding": list(padding),
                    "dilation": list(dilation),
                    "transposed": bool(transposed),
                    "groups": int(groups),
                }
            elif aten == "max_pool2d_with_indices":
                a = list(node.args) + [None] * 6
                attrs = {"kernel_size": list(a[1])}
                attrs["stride"] = list(a[2]) if a[2] else list(a[1])
                attrs["padding"] = list(a[3]) if a[3] else [0, 0]
                attrs["dilation"] = list(a[4]) if a[4] else [1, 1]
                attrs["ceil_mode"] = bool(a[5])
            elif aten == "hardtanh":
                a = list(node.args) + [-1.0, 1.0]
                attrs = {"min_val": float(a[1]), "max_val": float(a[2])}
            elif op_type == "batch_norm":
                attrs = {"eps": float(node.args[-1])}
            flops = None
            if packet in flop_registry:
                try:
                    shapes_args = torch.utils._pytree.tree_map(
                        lambda v: v.shape if isinstance(v, torch.Tensor) else v,
                        torch.fx.node.map_arg(node.args, lambda n: val_of.get(n)),
                    )
                    shapes_kwargs = torch.utils._pytree.tree_map(
                        lambda v: v.shape if isinstance(v, torch.Tensor) else v,
                        torch.fx.node.map_arg(node.kwargs, lambda n: val_of.get(n)),
                    )
                    out_shape = torch.utils._pytree.tree_map(
                        lambda v: v.shape if isinstance(v, torch.Tensor) else v, val
                    )
                    flops = flop_registry[packet](*shapes_args, **shapes_kwargs, out_shape=out_shape)
                except Exception:  # the registry's signature differs across versions
                    flops = None
            pointwise = hasattr(torch, "Tag") and torch.Tag.pointwise in getattr(target, "tags", ())
            random = hasattr(torch, "Tag") and torch.Tag.nondeterministic_seeded in getattr(
                target, "tags", ()
            )
            if flops is None and pointwise and outs[0] is not None:
                n = 1
                for d in outs[0]["shape"]:
                    n *= d
                flops = n
            nodes.append(
                {
                    "name": node.name,
                    "op": op_type,
                    "inputs": ins,
                    "outputs": outs,
                    "attrs": attrs,
                    "pointwise": bool(pointwise),
                    "flops": flops,
                    "mutates_input": bool(mutates),
                    "aten": aten,
                    "random": bool(random),
                }
            )
        elif node.op == "output":
            flat = []
            torch.fx.node.map_arg(node.args, lambda n: flat.append(n))
            outputs = []
            for a in flat:
                v = val_of.get(a)
                if isinstance(v, torch.Tensor):
                    outputs.append(sid(v))
    return {
        "records": {"placeholders": placeholders, "nodes": nodes, "outputs": outputs},
        "gm": gm,
        "placeholders": fx_placeholders,
        "node_storages": node_storages,
    }


def main(argv=None, exporter="tools/export_pytorch.py", prog=None):
    """The command-line tool (tools/export_pytorch.py): returns the exit status."""
    ap = argparse.ArgumentParser(prog=prog, description="Export a PyTorch model as a memplan-graph/1 graph.")
    ap.add_argument("factory", help="MODULE:FACTORY, e.g. torchvision.models:resnet50")
    batch = ap.add_mutually_exclusive_group(required=True)
    batch.add_argument("--batch", type=int)
    batch.add_argument(
        "--dynamic-batch",
        metavar="MIN..MAX",
        help="a symbolic batch over MIN..MAX (traced at several batches; see merge_dynamic)",
    )
    ap.add_argument("--symbol", default="B", help="the batch symbol's name with --dynamic-batch")
    ap.add_argument(
        "--dynamic-dim",
        action="append",
        default=[],
        metavar="NAME=AXIS:MIN..MAX",
        help="another symbolic input dimension, e.g. S=1:16..512 for a (batch, seq, d) input; "
        "sizes may be quadratic in it (attention)",
    )
    ap.add_argument(
        "--allow-specialised-min",
        action="store_true",
        help="with dynamic dims: keep the general trace's ops at small values whose trace "
        "differs (PyTorch turns copies into views at batch 1; see merge_symbolic)",
    )
    ap.add_argument("--mode", choices=["inference", "train"], required=True)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--input-shape", default="3,224,224", help="per-sample input shape")
    ap.add_argument("--name", help="graph name (default MODEL.BATCH.MODE, MODEL.MIN-MAX.MODE)")
    ap.add_argument("--alignment", type=int, default=256)
    args = ap.parse_args(argv)
    try:
        if args.batch is not None and args.batch <= 0:
            raise ExportError(f"--batch {args.batch} must be positive")
        try:
            shape = [int(d) for d in args.input_shape.split(",")]
        except ValueError:
            raise ExportError(f"--input-shape {args.input_shape!r}: expected e.g. 3,224,224")
        if any(d <= 0 for d in shape):
            raise ExportError(f"--input-shape {args.input_shape!r}: dimensions must be positive")
        # (symbol, axis of the full input shape, lo, hi)
        dyn = []
        if args.dynamic_batch is not None:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args.symbol):
                raise ExportError(f"--symbol {args.symbol!r}: expected a name such as B or batch")
            dyn.append((args.symbol, 0, *parse_range(args.dynamic_batch, "--dynamic-batch")))
        for text in args.dynamic_dim:
            d = parse_dynamic_dim(text)
            if d[1] == 0:
                raise ExportError(f"--dynamic-dim {text!r}: axis 0 is the batch: use --dynamic-batch")
            if d[1] > len(shape):
                raise ExportError(
                    f"--dynamic-dim {text!r}: axis {d[1]} is outside the input shape "
                    f"(batch, {args.input_shape})"
                )
            dyn.append(d)
        if len({d[1] for d in dyn}) != len(dyn):
            raise ExportError("two dynamic dims name the same axis")
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ExportError("PyTorch is not installed (pip install torch torchvision)")
        factory = load_factory(args.factory)
        model = factory()
        model_name = args.factory.split(":", 1)[1]
        import torch as _t

        meta = {"model": model_name, "mode": args.mode, "torch": _t.__version__,
                "exporter": exporter}
        if not dyn:
            records = trace_records(model, args.batch, args.mode, shape)
            name = args.name or f"{model_name}.{args.batch}.{args.mode}"
            graph = build_graph(records, name, args.alignment, {**meta, "batch": args.batch})
        else:
            def trace_at(values):
                full = [args.batch or 1] + shape
                for sym, axis, _, _ in dyn:
                    full[axis] = values[sym]
                return trace_records(model, full[0], args.mode, full[1:])

            # The batch is linear in every size; other dims may be quadratic (attention).
            dims = [(sym, lo, hi, 1 if axis == 0 else 2) for sym, axis, lo, hi in dyn]
            ranges = ".".join(f"{lo}-{hi}" for _, _, lo, hi in dyn)
            batch_part = "" if args.dynamic_batch is not None else f"{args.batch}."
            name = args.name or f"{model_name}.{batch_part}{ranges}.{args.mode}"
            graph = export_dynamic(trace_at, dims, name, args.alignment,
                                   {**meta, "batch": args.symbol if args.dynamic_batch else args.batch},
                                   args.allow_specialised_min)
    except ExportError as e:
        print(f"export_pytorch: {e}", file=sys.stderr)
        return 2
    tmp = args.output + ".tmp~"
    with open(tmp, "w") as f:
        json.dump(graph, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.output)
    print(
        f"{graph['name']}: {len(graph['ops'])} ops, {len(graph['tensors'])} tensors -> {args.output}",
        file=sys.stderr,
    )
    return 0

