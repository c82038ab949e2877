"""Export a PyTorch model as a memplan-graph/1 graph (the exporter behind `memplan.torch` and
the command-line tool tools/export_pytorch.py).

This module needs neither memplan's native module nor, at import, torch: the tool loads it
by file path, and `memplan.torch.export` wraps `trace` + `build_graph` and keeps the trace
for replay.

    tools/export_pytorch.py MODULE:FACTORY --batch N --mode inference|train -o GRAPH.json
        [--input-shape 3,224,224] [--name NAME] [--alignment 256]
    tools/export_pytorch.py MODULE:FACTORY --dynamic-batch 1..64 [--symbol B] --mode ... -o G.json

With --dynamic-batch the model is traced at a few batches (`trace_points`) and the graphs are
merged into one symbolic graph whose sizes are expressions over the batch symbol
(`merge_symbolic`): memplan plans it once for the whole range.

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


def _affine(values, symbol):
    """The expression `a + c*SYMBOL` through {batch: value} (two or more points), or None when
    the points are not on one line with a >= 0 and c >= 0 integers."""
    (b1, v1), (b2, v2) = sorted(values.items())[:2]
    c, rem = divmod(v2 - v1, b2 - b1)
    a = v1 - c * b1
    if rem or c < 0 or a < 0 or any(v != a + c * b for b, v in values.items()):
        return None
    if c == 0:
        return a
    term = symbol if c == 1 else f"{c}*{symbol}"
    return term if a == 0 else f"{a} + {term}"


def trace_points(lo, hi):
    """The batches traced for a dynamic batch lo..hi: two consecutive ones from 2 up (the fit;
    batch 1 is where a model may specialise), then lo, the middle and hi (the checks)."""
    f1 = max(lo, 2) if hi > max(lo, 2) else lo
    f2 = f1 + 1
    return sorted({f1, f2, lo, (lo + hi) // 2, hi})


def merge_symbolic(graphs, symbol, lo, hi, name=None, allow_specialised_min=False):
    """One symbolic graph (memplan's Dynamic shapes) from graphs traced at several batches.

    graphs = {batch: memplan-graph/1 dict}, with at least two batches. The graphs must have the
    same tensors (names, kinds, dtypes, ranks) and ops (names, types, inputs, outputs, attrs,
    hints); every tensor size and shape entry must be `a + c*batch` with integers a, c >= 0
    through every traced batch (fitted on the two smallest batches >= 2, checked on the rest).
    Varying values become expressions over `symbol`, declared with the range lo..hi. `flops`
    are the largest batch's. Raises ExportError naming the first tensor or op that differs or
    does not scale linearly, and the batches concerned.

    PyTorch specialises at batch 1: a transposed tensor with a dimension of size 1 is still
    contiguous, so `.contiguous()` / `reshape` copies become views (vit_b_16: 110 fewer
    tensors). With allow_specialised_min, a traced batch below the fitted ones whose trace
    differs is left out (listed in meta.dynamic_batch.specialised) and the symbolic graph keeps
    the general trace's ops there: the copies a dynamic-shape runtime (torch.export with a
    dynamic batch, ONNX) runs at every batch, at their sizes for that batch.
    """
    if len(graphs) < 2:
        raise ExportError("a dynamic batch needs traces at two batches or more")
    if not (1 <= lo < hi):
        raise ExportError(f"dynamic batch {lo}..{hi}: expected 1 <= MIN < MAX")
    batches = sorted(graphs)
    fit = [b for b in batches if b >= 2][:2]
    if len(fit) < 2:
        fit = batches[:2]
    ref_b = fit[0]
    ref = graphs[ref_b]
    top = graphs[batches[-1]]

    specialised = []

    def differs(b, what):
        hint = (
            " (the model specialises on that batch: start the range above it, or keep the "
            "general trace's ops there with --allow-specialised-min)"
            if b < ref_b
            else ""
        )
        return ExportError(f"the traces at batch {ref_b} and {b} differ: {what}{hint}")

    for b in list(batches):
        try:
            _same_structure(ref, graphs[b], lambda what, b=b: differs(b, what))
        except ExportError:
            if not (allow_specialised_min and b < ref_b):
                raise
            specialised.append(b)
            batches.remove(b)
    meta_extra = {"specialised": specialised} if specialised else {}
    return _merge_checked(graphs, batches, top, symbol, lo, hi, name, meta_extra)


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


def _merge_checked(graphs, batches, top, symbol, lo, hi, name, meta_extra):
    """merge_symbolic's second half: the expressions, once the structures agree."""
    tensors = []
    for i, t in enumerate(top["tensors"]):
        t = dict(t)
        size = _affine({b: graphs[b]["tensors"][i]["size"] for b in batches}, symbol)
        if size is None:
            sizes = ", ".join(f"{graphs[b]['tensors'][i]['size']} at {b}" for b in batches)
            raise ExportError(
                f"tensor {t['name']!r}: its size does not grow linearly with the batch ({sizes})"
            )
        t["size"] = size
        if "shape" in t:
            shape = []
            for d in range(len(t["shape"])):
                dim = _affine({b: graphs[b]["tensors"][i]["shape"][d] for b in batches}, symbol)
                if dim is None:
                    raise ExportError(
                        f"tensor {t['name']!r}: shape entry {d} does not grow linearly with the batch"
                    )
                shape.append(dim)
            t["shape"] = shape
        tensors.append(t)
    meta = dict(top.get("meta", {}))
    meta["batch"] = symbol
    meta["dynamic_batch"] = {"symbol": symbol, "min": lo, "max": hi, "traced": batches, **meta_extra}
    return {
        "format": top["format"],
        "name": name or top["name"],
        "alignment": top["alignment"],
        "meta": meta,
        "symbols": {symbol: {"min": lo, "max": hi}},
        "tensors": tensors,
        "ops": top["ops"],
    }


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
        help="a symbolic batch over MIN..MAX (traced at several batches; see merge_symbolic)",
    )
    ap.add_argument("--symbol", default="B", help="the batch symbol's name with --dynamic-batch")
    ap.add_argument(
        "--allow-specialised-min",
        action="store_true",
        help="with --dynamic-batch: keep the general trace's ops at small batches whose trace "
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
        dynamic = None
        if args.dynamic_batch is not None:
            dynamic = parse_range(args.dynamic_batch, "--dynamic-batch")
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args.symbol):
                raise ExportError(f"--symbol {args.symbol!r}: expected a name such as B or batch")
        try:
            shape = [int(d) for d in args.input_shape.split(",")]
        except ValueError:
            raise ExportError(f"--input-shape {args.input_shape!r}: expected e.g. 3,224,224")
        if any(d <= 0 for d in shape):
            raise ExportError(f"--input-shape {args.input_shape!r}: dimensions must be positive")
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
        if dynamic is None:
            records = trace_records(model, args.batch, args.mode, shape)
            name = args.name or f"{model_name}.{args.batch}.{args.mode}"
            graph = build_graph(records, name, args.alignment, {**meta, "batch": args.batch})
        else:
            lo, hi = dynamic
            graphs = {}
            for b in trace_points(lo, hi):
                try:
                    records = trace_records(model, b, args.mode, shape)
                except ExportError:
                    raise
                except Exception as e:  # the model's own error at that batch
                    raise ExportError(f"tracing at batch {b} failed: {type(e).__name__}: {e}") from e
                graphs[b] = build_graph(records, f"{model_name}.{b}.{args.mode}", args.alignment,
                                        {**meta, "batch": b})
            name = args.name or f"{model_name}.{lo}-{hi}.{args.mode}"
            graph = merge_symbolic(graphs, args.symbol, lo, hi, name, args.allow_specialised_min)
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

