"""PyTorch front end of memplan: export a module as a memplan-graph/1 graph, and replay a
memplan-plan/1 plan of it with PyTorch's own ATen kernels in one preallocated arena.

    import memplan, memplan.torch
    ex = memplan.torch.export(model, (x,), train=False)    # ex.graph: the memplan-graph/1 dict
    plan = memplan.plan(ex.graph, effort=1)                 # or any memplan-plan/1 dict / JSON / path
    r = memplan.torch.run(ex, (x,), plan)                   # replay, compared with eager PyTorch
    r.bitwise_equal, r.max_abs_diff, r.arena_bytes, r.eager_peak_bytes

This module needs torch but not memplan's native module (only `plan_and_run`, which plans,
imports it, lazily).

**Export** traces the module with torch.fx's make_fx over fake tensors (no computation):
the forward pass in eval mode (`train=False`), or forward + sum loss + backward through
torch.func.grad_and_value (`train=True`; the outputs are the loss and one gradient per
parameter). The graph is exactly what tools/export_pytorch.py writes (same code,
python/memplan/_export.py). Every graph op is one fx node of the kept trace and bears its
name; every graph tensor is one storage, produced by one node output (`tensor_nodes`).

**Replay** (`run`) follows the plan's instruction stream in order:
- `alloc T @o`: T lives at arena bytes [o, o+size(T)); the tensor the producing node returns
  is rebuilt there with the trace's shape, strides and storage offset (as_strided on a dtype
  view of the arena bytes). Graph inputs are copied in at their first alloc.
- `exec N`: N's fx node runs its ATen op on its arguments, which are arena tensors (or views
  of them: view nodes of the trace, which the graph folds onto their base, are re-evaluated
  on the base's current location), weights and constants. Its results are written into the
  outputs' arena tensors: through the op's `out=` overload when it has one and every output
  is a fresh graph tensor that shares no bytes with an input (`use_out=True`), else computed
  and copied (`dst.copy_(result)`). Executing a node again (recompute) does the same.
- `free T`: no-op on memory (T can no longer be read: a later read is a ReplayError).
- `spill_out T @h` / `spill_in T @o`: byte copies arena -> host pool [h, h+size) and back.
- `record_event` / `wait_event` (parallel plans): no-ops; the listed order is one valid
  linearisation of the streams.
- Weights stay in the module's own tensors, or (`weights_region=True`) in one weights tensor
  of `weights_bytes` at the plan's `weights` offsets. Buffers are cloned, so the module is
  never modified; the input mutations that functionalization appends (batch-norm running
  statistics in training) are not graph ops: their sources are saved when first produced and
  applied to the cloned buffers at the end, and returned (`RunResult.buffers`).
- Workspaces (`workspace_offset`) are not used: ATen kernels allocate their own scratch.
The kernels' own temporaries (an op computed before its copy into the arena, scratch
inside kernels) are allocated by PyTorch outside the arena; `RunResult.replay_peak_bytes`
measures them with the arena.

**Eager peak** on the CPU: torch.profiler(profile_memory=True) records every CPU allocation
and free made by PyTorch's allocator during the call; the peak is the largest running sum
of those sizes (bytes allocated during the call and not yet freed: activations, kernel
scratch and the outputs; not the weights and inputs, which exist before). On CUDA:
torch.cuda.max_memory_allocated() / max_memory_reserved() minus the allocated bytes before
the call, after reset_peak_memory_stats().
"""

import json
import os
import time

import torch

from . import _export

ExportError = _export.ExportError

__all__ = ["export", "export_dynamic", "export_dynamic_batch", "run", "plan_and_run", "Exported", "RunResult", "ReplayError", "ExportError"]

_TORCH_DTYPES = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f64": torch.float64,
    "i64": torch.int64,
    "i32": torch.int32,
    "i16": torch.int16,
    "i8": torch.int8,
    "u8": torch.uint8,
    "bool": torch.bool,
}


class ReplayError(Exception):
    """A plan that cannot be replayed on an export (the message names the instruction, op or
    tensor)."""


class Exported:
    """A module exported for memplan: the graph and what replaying a plan of it needs.

    Attributes:
        graph: the memplan-graph/1 dict (what tools/export_pytorch.py writes).
        gm: the traced torch.fx GraphModule; its call_function targets are ATen op overloads.
        mode: "inference" or "train".
        module: the exported nn.Module (its tensors are the weights).
        op_nodes: graph op name -> fx node (the node of that name).
        tensor_nodes: graph tensor name -> (fx node, output index or None): the node whose
            output is the tensor (None for a node with one tensor output, else its position
            in the node's tuple); placeholders for weights and inputs.
        weights: graph weight name (`param:NAME`, `buffer:NAME`) -> the module's real tensor.
        inputs: graph input name (`input`, or `input:0`, `input:1`, ...) -> example input.
        mutations: [(fx node of the mutated placeholder, fx node of the source, fx node of
            the copy_)]: the input mutations functionalization appended (batch-norm running
            statistics in training), dropped from the graph.
        unsupported: reasons why this trace cannot be replayed (empty when it can).
    """

    def __init__(self, graph, gm, mode, module, op_nodes, tensor_nodes, weights, inputs,
                 mutations, view_nodes, unsupported, out_structure):
        self.graph = graph
        self.gm = gm
        self.mode = mode
        self.module = module
        self.op_nodes = op_nodes
        self.tensor_nodes = tensor_nodes
        self.weights = weights
        self.inputs = inputs
        self.mutations = mutations
        self.view_nodes = view_nodes
        self.unsupported = unsupported
        self._out_structure = out_structure

    @property
    def train(self):
        """Whether the export is a training step (forward + backward)."""
        return self.mode == "train"

    def to_json(self):
        """The graph as memplan-graph/1 JSON text."""
        return json.dumps(self.graph)

    def __repr__(self):
        g = self.graph
        return (f"Exported({g['name']!r}, {self.mode}, {len(g['ops'])} ops, "
                f"{len(g['tensors'])} tensors)")


def _as_tuple(example_inputs):
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    return tuple(example_inputs)


def export(module, example_inputs, train=False, name=None, alignment=256):
    """Exports `module` called on `example_inputs` (a tensor or a tuple of tensors) as a
    memplan-graph/1 graph; returns an `Exported`.

    train=False: the forward pass in eval mode; train=True: a training step (forward, the
    loss `output.sum()`, the backward pass; outputs: the loss and every parameter's
    gradient). The module is put in eval or train mode. Tracing uses fake tensors: no
    computation, no memory for activations. name defaults to CLASS.BATCH.MODE.
    """
    xs = _as_tuple(example_inputs)
    mode = "train" if train else "inference"
    t = _export.trace(module, xs, mode)
    gm = t["gm"]
    batch = int(xs[0].shape[0]) if xs and xs[0].dim() > 0 else 1
    model_name = type(module).__name__.lower()
    prov = {}
    graph = _export.build_graph(
        t["records"],
        name or f"{model_name}.{batch}.{mode}",
        alignment,
        {"model": model_name, "mode": mode, "batch": batch, "torch": torch.__version__,
         "exporter": "memplan.torch"},
        provenance=prov,
    )
    nodes = {n.name: n for n in gm.graph.nodes}
    op_nodes = {op["name"]: nodes[op["name"]] for op in graph["ops"]}
    tensor_nodes = {}
    placeholder_of = {}
    real_of = {}
    for node, pname, real in t["placeholders"]:
        placeholder_of[node] = pname
        real_of[pname] = real
    weights, inputs = {}, {}
    kinds = {x["name"]: x["kind"] for x in graph["tensors"]}
    for tname, (src, idx) in prov["sources"].items():
        if src == "placeholder":
            node = t["placeholders"][idx][0]
            tensor_nodes[tname] = (node, None)
            (inputs if kinds[tname] == "input" else weights)[tname] = real_of[tname]
        else:
            node = nodes[src]
            multi = isinstance(node.meta.get("val"), (tuple, list))
            tensor_nodes[tname] = (node, idx if multi else None)
    # placeholder node -> graph tensor (a placeholder aliasing another's storage, e.g. tied
    # weights, reads the first one's tensor)
    placeholder_tensors = {}
    for node, pname, _ in t["placeholders"]:
        placeholder_tensors[node] = prov["storage_names"][t["node_storages"][node][0]]

    # Every other node: a view (re-evaluated on its base), a getitem, a constant, a dropped
    # input mutation, or something replay cannot do (named in `unsupported`).
    dropped = set(prov["dropped"])
    view_nodes = set()
    mutations = []
    mutation_bases = {}
    unsupported = []
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr") or node.name in op_nodes:
            if node.name in op_nodes:
                stor = t["node_storages"].get(node, [])
                produced = {idx for tn, (n2, idx) in tensor_nodes.items() if n2 is node}
                produced = {0 if i is None else i for i in produced}
                for i, s in enumerate(stor):
                    if s is not None and i not in produced:
                        unsupported.append(
                            f"node {node.name!r} ({node.target}) returns new tensors and, as "
                            f"output {i}, a view of an existing one"
                        )
            continue
        if node.op != "call_function":
            unsupported.append(f"node {node.name!r}: fx op {node.op!r} is not replayed")
            continue
        if node.name in dropped:
            src = node.args[1] if len(node.args) > 1 else None
            dst = node.args[0]
            if not (hasattr(dst, "op") and dst.op == "placeholder" and hasattr(src, "op")):
                unsupported.append(f"input mutation {node.name!r} has unexpected arguments")
            base = src
            while hasattr(base, "op") and base.op == "call_function" and base.name not in op_nodes:
                base = base.args[0] if base.args else None
            mutations.append((dst, src, node))
            mutation_bases[node] = base
            continue
        if node.target is _getitem:
            view_nodes.add(node)
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            unsupported.append(
                f"node {node.name!r}: target {node.target!r} is not an ATen op overload")
            continue
        writes = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        if writes:
            unsupported.append(
                f"node {node.name!r} ({schema.name}) mutates its argument(s) {writes} but is "
                "not a graph op: replay would lose the mutation")
            continue
        stor = t["node_storages"].get(node)
        if stor is not None and all(s is None for s in stor):
            unsupported.append(f"node {node.name!r} ({schema.name}) returns no tensor")
            continue
        view_nodes.add(node)

    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    ex = Exported(graph, gm, mode, module, op_nodes, tensor_nodes, weights, inputs,
                  mutations, view_nodes, unsupported, out_node)
    ex.placeholder_tensors = placeholder_tensors
    ex._mutation_bases = mutation_bases
    return ex


def export_dynamic(module, example_inputs, dims, train=False, name=None, alignment=256,
                   allow_specialised_min=False):
    """Exports `module` as one symbolic graph (Dynamic shapes) over several dynamic input
    dimensions; returns the graph as a dict (plan it with `memplan.plan`, which gives a
    `SymbolicPlan` for the whole range).

    dims = {symbol: (axis, min, max)}: every input whose `axis` has the first input's size
    there is resized along it (axis 0 is the batch). The batch is fitted as linear, other
    dimensions as up to quadratic (attention scores grow with S*S). The module is traced at a
    few points (`dynamic_points`) and the traces merged (`merge_dynamic`, which documents the
    checks and `allow_specialised_min`). Errors (ExportError) name the point or tensor.
    """
    xs = _as_tuple(example_inputs)
    if not xs:
        raise _export.ExportError("no example inputs")
    spec = []
    for sym, d in dims.items():
        try:
            axis, lo, hi = (int(d[0]), int(d[1]), int(d[2]))
        except (TypeError, ValueError, IndexError):
            raise _export.ExportError(f"dynamic dim {sym!r}: expected (axis, min, max), got {d!r}")
        if axis >= xs[0].dim():
            raise _export.ExportError(
                f"dynamic dim {sym!r}: axis {axis} is outside the first input's shape "
                f"{tuple(xs[0].shape)}")
        spec.append((sym, axis, lo, hi))
    if len({a for _, a, _, _ in spec}) != len(spec):
        raise _export.ExportError("two dynamic dims name the same axis")
    mode = "train" if train else "inference"
    model_name = type(module).__name__.lower()
    ref = [int(xs[0].shape[a]) for _, a, _, _ in spec]

    def trace_at(values):
        at = []
        for x in xs:
            shape = list(x.shape)
            for (sym, axis, _, _), r in zip(spec, ref):
                if x.dim() > axis and shape[axis] == r:
                    shape[axis] = values[sym]
            at.append(torch.empty(shape, dtype=x.dtype))
        return _export.trace(module, tuple(at), mode)["records"]

    ranges = ".".join(f"{lo}-{hi}" for _, _, lo, hi in spec)
    meta = {"model": model_name, "mode": mode, "torch": torch.__version__,
            "exporter": "memplan.torch"}
    return _export.export_dynamic(
        trace_at, [(sym, lo, hi, 1 if axis == 0 else 2) for sym, axis, lo, hi in spec],
        name or f"{model_name}.{ranges}.{mode}", alignment, meta, allow_specialised_min)


def export_dynamic_batch(module, example_inputs, batch, train=False, symbol="B", name=None,
                         alignment=256, allow_specialised_min=False):
    """`export_dynamic` with the batch (axis 0) as the one dynamic dimension, over
    `batch` = (MIN, MAX)."""
    lo, hi = (int(batch[0]), int(batch[1]))
    if not (1 <= lo < hi):
        raise _export.ExportError(f"batch range {lo}..{hi}: expected 1 <= MIN < MAX")
    return export_dynamic(module, example_inputs, {symbol: (0, lo, hi)}, train, name, alignment,
                          allow_specialised_min)


def _getitem_target():
    import operator

    return operator.getitem


_getitem = _getitem_target()


class _Missing:
    """A tensor that is not in the arena (not reserved, or reserved but not yet valid)."""

    def __init__(self, name, why):
        self.name, self.why = name, why


def _plan_dict(plan):
    """A plan given as a dict, JSON text, a path, or an object with to_json() -> dict."""
    if isinstance(plan, dict):
        return plan
    if hasattr(plan, "to_json"):
        return json.loads(plan.to_json())
    if isinstance(plan, (str, bytes, os.PathLike)):
        text = plan
        if not (isinstance(plan, str) and plan.lstrip().startswith("{")):
            with open(plan) as f:
                text = f.read()
        return json.loads(text)
    raise TypeError(f"plan: expected a memplan-plan/1 dict, JSON text, path or Plan, "
                    f"got {type(plan).__name__}")


class _Replay:
    """One replay of a plan on an export (see the module docstring)."""

    def __init__(self, ex, xs, plan, device, weights_region, use_out):
        if ex.unsupported:
            raise ReplayError("this export cannot be replayed: " + "; ".join(ex.unsupported))
        if plan.get("format") != "memplan-plan/1":
            raise ReplayError(f"plan format {plan.get('format')!r}: expected 'memplan-plan/1'")
        if plan.get("graph") != ex.graph["name"]:
            raise ReplayError(f"the plan is for graph {plan.get('graph')!r}, the export is "
                              f"{ex.graph['name']!r}")
        self.ex = ex
        self.plan = plan
        self.device = torch.device(device)
        self.use_out = use_out
        self.tensors = {t["name"]: t for t in ex.graph["tensors"]}
        self.ops = {o["name"]: o for o in ex.graph["ops"]}
        self.arena = torch.empty(int(plan["arena_bytes"]), dtype=torch.uint8, device=self.device)
        host_bytes = int(plan.get("host_bytes", 0) or 0)
        pin = self.device.type == "cuda"
        self.host = torch.empty(host_bytes, dtype=torch.uint8, pin_memory=pin)
        self.offset = {}  # tensor -> arena offset while reserved
        self.valid = set()  # reserved tensors holding data
        self.on_host = {}  # spilled tensor -> host offset
        self.inplace = set()  # tensors allocated over another's bytes (inplace_of)
        self.cache = {}
        self.counts = {"exec": 0, "recompute": 0, "out_variant": 0, "copied": 0,
                       "spill_out": 0, "spill_in": 0}
        self.out_fallbacks = {}
        self.executed = set()
        self.pending = {}  # mutated placeholder node -> saved source value
        self._inputs_loaded = set()

        if len(xs) != len(ex.inputs):
            raise ReplayError(f"{len(xs)} inputs given, the export takes {len(ex.inputs)}")
        self.input_values = {}
        for (iname, proto), x in zip(ex.inputs.items(), xs):
            if tuple(x.shape) != tuple(proto.shape) or x.dtype != proto.dtype:
                raise ReplayError(f"input {iname!r}: {tuple(x.shape)} {x.dtype}, exported with "
                                  f"{tuple(proto.shape)} {proto.dtype}")
            self.input_values[iname] = x.to(self.device)
        # Weights: the module's tensors (buffers cloned: the replay updates its copies).
        self.fixed = {}
        mutated = {dst for dst, _, _ in ex.mutations}
        mutated_names = {n for n, (node, _) in ex.tensor_nodes.items() if node in mutated}
        for wname, w in ex.weights.items():
            w = w.detach().to(self.device)
            # buffers are cloned: batch-norm in training updates its running statistics in
            # place (native_batch_norm's schema does not say so), and the replay must leave
            # the module as it is
            cloned = wname in mutated_names or wname.startswith("buffer:")
            self.fixed[wname] = w.clone() if cloned else w
        if weights_region:
            self.weights = torch.empty(int(plan.get("weights_bytes", 0)), dtype=torch.uint8,
                                       device=self.device)
            listed = set()
            for e in plan.get("weights", []):
                wname = e["tensor"]
                if wname not in self.fixed:
                    raise ReplayError(f"plan weight {wname!r} is not a weight of the graph")
                node, _ = ex.tensor_nodes[wname]
                v = self._place(self.weights, int(e["offset"]), wname, node.meta["val"])
                v.copy_(self.fixed[wname])
                self.fixed[wname] = v
                listed.add(wname)
            missing = set(self.fixed) - listed
            if missing:
                raise ReplayError(f"weights_region: the plan does not place weight(s) "
                                  f"{sorted(missing)[:5]}")

    # -- arena tensors --------------------------------------------------------------------
    def _place(self, buf, off, tname, val):
        """The tensor `val` (a trace value) rebuilt at byte offset `off` of `buf`."""
        t = self.tensors[tname]
        dtype = val.dtype
        size = int(t["size"])
        if off + size > buf.numel():
            raise ReplayError(f"tensor {tname!r} at [{off}, {off + size}) exceeds the "
                              f"{buf.numel()}-byte region")
        es = torch.empty((), dtype=dtype).element_size()
        if off % es:
            raise ReplayError(f"tensor {tname!r}: offset {off} is not a multiple of its "
                              f"element size {es}")
        nbytes = size - size % es
        flat = buf[off:off + nbytes].view(dtype)
        return torch.as_strided(flat, tuple(val.shape), tuple(val.stride()),
                                flat.storage_offset() + val.storage_offset())

    def _tensor(self, tname, need_valid=True):
        """The arena tensor of graph tensor `tname` (the producing node's output)."""
        if tname in self.fixed:
            return self.fixed[tname]
        if tname not in self.offset:
            where = "spilled to the host" if tname in self.on_host else "not reserved"
            return _Missing(tname, where)
        if need_valid and tname not in self.valid:
            return _Missing(tname, "reserved but holds no data yet")
        node, idx = self.ex.tensor_nodes[tname]
        val = node.meta["val"]
        if idx is not None:
            val = val[idx]
        return self._place(self.arena, self.offset[tname], tname, val)

    def _value(self, node):
        """The value of fx node `node` in the replay's current state."""
        if node in self.cache:
            return self.cache[node]
        ex = self.ex
        if node.op == "placeholder":
            tname = self._name_of_placeholder(node)
            v = self._tensor(tname)
        elif node.op == "get_attr":
            v = getattr(ex.gm, node.target)
            if isinstance(v, torch.Tensor):
                v = v.to(self.device)
        elif node.name in ex.op_nodes:
            outs = self.ops[node.name]["outputs"]
            val = node.meta["val"]
            if isinstance(val, (tuple, list)):
                v = [None] * len(val)
                for tname in outs:
                    _, idx = ex.tensor_nodes[tname]
                    v[idx] = self._tensor(tname)
                v = tuple(v)
            else:
                v = self._tensor(outs[0])
        elif node in ex.view_nodes:
            args, kwargs = self._args(node)
            if node.target is _getitem:
                v = args[0][args[1]]
            else:
                v = node.target(*args, **kwargs)
        else:
            raise ReplayError(f"node {node.name!r} ({node.target}) has no value in the replay")
        self.cache[node] = v
        return v

    def _name_of_placeholder(self, node):
        name = self.ex.placeholder_tensors.get(node)
        if name is None:
            raise ReplayError(f"placeholder {node.name!r} has no graph tensor")
        return name

    def _args(self, node):
        import torch.fx

        missing = []

        def get(n):
            v = self._value(n)
            if isinstance(v, _Missing):
                missing.append(v)
            return v

        args = torch.fx.node.map_arg(node.args, get)
        kwargs = torch.fx.node.map_arg(node.kwargs, get)
        if missing:
            m = missing[0]
            raise ReplayError(f"node {node.name!r} reads tensor {m.name!r}, which is {m.why}")
        return args, kwargs

    # -- instructions ---------------------------------------------------------------------
    def run(self):
        """Replays every instruction in order; returns the outputs (cloned out of the arena)."""
        for i, ins in enumerate(self.plan["instructions"]):
            kind = ins.get("op")
            try:
                getattr(self, "_do_" + kind)(ins)
            except AttributeError as e:
                if not hasattr(self, "_do_" + str(kind)):
                    raise ReplayError(f"instruction {i}: unknown instruction {kind!r}") from e
                raise
            except ReplayError as e:
                raise ReplayError(f"instruction {i} ({kind}): {e}") from None
        not_run = [o for o in self.ops if o not in self.executed]
        if not_run:
            raise ReplayError(f"the plan never executes op(s) {not_run[:5]}")
        self.cache.clear()
        args, _ = self._args(self.ex._out_structure)
        outputs = _flatten(args[0])
        outputs = [o.clone() if isinstance(o, torch.Tensor) else o for o in outputs]
        # the input mutations, applied to the replay's buffers at the end
        for dst, src, _ in self.ex.mutations:
            if dst not in self.pending:  # the source is a weight or input, not an op's
                self.pending[dst] = self._value(src).clone()
        for dst, _, _ in self.ex.mutations:
            tname = self._name_of_placeholder(dst)
            self.fixed[tname].copy_(self.pending[dst])
        buffers = {k: v.clone() for k, v in self.fixed.items() if k.startswith("buffer:")}
        return outputs, buffers

    def _check_tensor(self, ins):
        tname = ins.get("tensor")
        if tname not in self.tensors:
            raise ReplayError(f"tensor {tname!r} is not in the graph")
        if tname in self.fixed:
            raise ReplayError(f"weight {tname!r} appears in the instruction stream")
        return tname

    def _do_alloc(self, ins):
        tname = self._check_tensor(ins)
        if tname in self.offset:
            raise ReplayError(f"tensor {tname!r} is allocated twice")
        self.cache.clear()
        self.offset[tname] = int(ins["offset"])
        if ins.get("inplace_of") is not None:
            self.inplace.add(tname)
        else:
            self.inplace.discard(tname)
        if tname in self.input_values and tname not in self._inputs_loaded:
            self._tensor(tname, need_valid=False).copy_(self.input_values[tname])
            self._inputs_loaded.add(tname)
            self.valid.add(tname)

    def _do_record_event(self, ins):
        """Parallel plans: the replay runs the listed order, one linearisation of the
        streams that every valid parallel plan allows; events order nothing more here."""

    def _do_wait_event(self, ins):
        """See `_do_record_event`."""

    def _do_free(self, ins):
        tname = self._check_tensor(ins)
        if tname not in self.offset:
            raise ReplayError(f"tensor {tname!r} is freed but not reserved")
        self.cache.clear()
        del self.offset[tname]
        self.valid.discard(tname)

    def _do_spill_out(self, ins):
        tname = self._check_tensor(ins)
        if tname not in self.valid:
            raise ReplayError(f"tensor {tname!r} is spilled out but holds no data")
        off, h, size = self.offset[tname], int(ins["host_offset"]), int(self.tensors[tname]["size"])
        if h + size > self.host.numel():
            raise ReplayError(f"tensor {tname!r}: host range [{h}, {h + size}) exceeds "
                              f"host_bytes {self.host.numel()}")
        self.host[h:h + size].copy_(self.arena[off:off + size])
        self.cache.clear()
        del self.offset[tname]
        self.valid.discard(tname)
        self.on_host[tname] = h
        self.counts["spill_out"] += 1

    def _do_spill_in(self, ins):
        tname = self._check_tensor(ins)
        if tname not in self.on_host:
            raise ReplayError(f"tensor {tname!r} is spilled in but was not spilled out")
        if tname in self.offset:
            raise ReplayError(f"tensor {tname!r} is spilled in while reserved")
        off, size = int(ins["offset"]), int(self.tensors[tname]["size"])
        if off + size > self.arena.numel():
            raise ReplayError(f"tensor {tname!r} at [{off}, {off + size}) exceeds the arena")
        h = self.on_host.pop(tname)
        self.arena[off:off + size].copy_(self.host[h:h + size])
        self.cache.clear()
        self.offset[tname] = off
        self.inplace.discard(tname)
        self.valid.add(tname)
        self.counts["spill_in"] += 1

    def _do_exec(self, ins):
        opname = ins.get("node")
        if opname not in self.ops:
            raise ReplayError(f"op {opname!r} is not in the graph (a rewritten plan? replay "
                              "needs a plan of the exported graph itself)")
        node = self.ex.op_nodes[opname]
        outs = self.ops[opname]["outputs"]
        args, kwargs = self._args(node)
        if opname in self.executed:
            # A recompute must not repeat the op's updates of weights (batch-norm running
            # statistics): it writes them into throwaway copies.
            args = list(args)
            for i in _written_weight_args(node, args):
                args[i] = args[i].clone()
            args = tuple(args)
        dsts = []
        for tname in outs:
            d = self._tensor(tname, need_valid=False)
            if isinstance(d, _Missing):
                raise ReplayError(f"op {opname!r} writes tensor {tname!r}, which is {d.why}")
            dsts.append((tname, d))
        val = node.meta["val"]
        multi = isinstance(val, (tuple, list))
        if not self._try_out(node, args, kwargs, dsts, multi):
            result = node.target(*args, **kwargs)
            for tname, d in dsts:
                _, idx = self.ex.tensor_nodes[tname]
                r = result[idx] if multi else result
                if not isinstance(r, torch.Tensor):
                    raise ReplayError(f"op {opname!r} ({node.target}) returned no tensor for "
                                      f"{tname!r}")
                if tuple(r.shape) != tuple(d.shape) or r.dtype != d.dtype:
                    raise ReplayError(
                        f"op {opname!r} ({node.target}) returned {tuple(r.shape)} {r.dtype} "
                        f"for {tname!r}, traced as {tuple(d.shape)} {d.dtype}")
                d.copy_(r)
            self.counts["copied"] += 1
        self.cache.clear()
        for tname, _ in dsts:
            self.valid.add(tname)
        self.counts["recompute" if opname in self.executed else "exec"] += 1
        self.executed.add(opname)
        for dst, src, cp in self.ex.mutations:
            if self.ex._mutation_bases[cp] is node and dst not in self.pending:
                self.pending[dst] = self._value(src).clone()

    def _try_out(self, node, args, kwargs, dsts, multi):
        """Runs `node` through its out= overload writing straight into the arena; False when
        that is not possible (then the caller computes and copies)."""
        if not self.use_out:
            return False
        target = node.target
        if not any(isinstance(a, torch.Tensor) for a in _flatten(list(args))):
            return False  # a factory (empty, zeros, ...): computed and copied
        out_op, names = _out_overload(target)
        val = node.meta["val"]
        n_out = len(val) if multi else 1
        if out_op is None or len(names) != n_out or len(dsts) != n_out:
            return False
        if any(t in self.inplace for t, _ in dsts):
            return False  # its output shares an input's bytes: computed, then copied
        by_idx = {}
        for tname, d in dsts:
            _, idx = self.ex.tensor_nodes[tname]
            by_idx[0 if idx is None else idx] = d
        if sorted(by_idx) != list(range(n_out)):
            return False
        ptrs = [(d.data_ptr(), tuple(d.shape), d.stride()) for d in by_idx.values()]
        try:
            out_op(*args, **kwargs, **{names[i]: by_idx[i] for i in range(n_out)})
        except (RuntimeError, TypeError) as e:
            self.out_fallbacks[str(target)] = str(e).splitlines()[0][:200]
            return False
        after = [(d.data_ptr(), tuple(d.shape), d.stride()) for d in by_idx.values()]
        if after != ptrs:
            raise ReplayError(f"op {node.name!r}: {out_op} resized or moved its output "
                              "out of the arena")
        self.counts["out_variant"] += 1
        return True


# ATen ops that write arguments their schema does not mark as written:
# native_batch_norm(input, weight, bias, running_mean, running_var, training, ...) updates
# running_mean and running_var when training is true.
_HIDDEN_WRITES = {"aten::native_batch_norm": (5, (3, 4))}


def _written_weight_args(node, args):
    """Positions of the positional arguments that `node`'s op writes in place (its schema's
    written arguments, and the running statistics of native_batch_norm in training)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return []
    pos = [i for i, a in enumerate(schema.arguments[:len(args)])
           if a.alias_info is not None and a.alias_info.is_write]
    hidden = _HIDDEN_WRITES.get(schema.name)
    if hidden is not None and len(args) > hidden[0] and args[hidden[0]] is True:
        pos += list(hidden[1])
    return [i for i in pos if i < len(args) and isinstance(args[i], torch.Tensor)]


_OUT_OVERLOADS = {}


def _out_overload(target):
    """The out= overload of ATen op overload `target` (same arguments, plus keyword-only
    written outputs) and the names of its out arguments; (None, []) when it has none."""
    if target in _OUT_OVERLOADS:
        return _OUT_OVERLOADS[target]
    found = (None, [])
    packet = getattr(target, "overloadpacket", None)
    schema = getattr(target, "_schema", None)
    if packet is not None and schema is not None:
        want = [(a.name, str(a.type)) for a in schema.arguments]
        for ov in packet.overloads():
            cand = getattr(packet, ov)
            cs = cand._schema
            outs = [a.name for a in cs.arguments
                    if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]
            rest = [(a.name, str(a.type)) for a in cs.arguments if a.name not in outs]
            if outs and rest == want:
                found = (cand, outs)
                break
    _OUT_OVERLOADS[target] = found
    return found


def _flatten(x):
    if isinstance(x, (tuple, list)):
        out = []
        for e in x:
            out.extend(_flatten(e))
        return out
    return [x]


class RunResult:
    """What `run` measured.

    Attributes:
        outputs: the replay's outputs, flat (inference: the module's outputs; train: the
            loss, then every parameter's gradient in named_parameters order), on the device.
        buffers: every buffer of the module after the replay ({graph name `buffer:NAME`:
            tensor}; train: batch-norm running statistics updated), compared with eager's.
        eager_outputs, eager_buffers: the same from eager PyTorch (None when compare=False).
        bitwise_equal: every output (and updated buffer) equal bit for bit to eager's.
        max_abs_diff: the largest absolute difference over all outputs and buffers.
        arena_bytes, host_bytes, weights_bytes: the plan's.
        eager_peak_bytes: eager PyTorch's peak allocation for the same call (see
            `peak_method`); eager_reserved_bytes: CUDA only, the caching allocator's peak.
        replay_peak_bytes: the same measurement of the replay (arena, host pool and the
            kernels' temporaries outside it); None when measure=False.
        input_bytes: the graph inputs' bytes (in the arena, not in eager's peak).
        peak_method: how the peaks were measured.
        replay_seconds, eager_seconds: wall time of one replay and one eager call (without
            the memory measurement).
        counts: instructions replayed: exec, recompute, spill_out, spill_in, and how the
            ops' results reached the arena (out_variant or copied).
        out_fallbacks: ops whose out= overload raised (then computed and copied): the error.
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def summary(self):
        """One line: equality, max abs diff, arena and eager peak bytes, times."""
        eq = "bitwise equal" if self.bitwise_equal else f"max abs diff {self.max_abs_diff:.3g}"
        return (f"{eq}; arena {self.arena_bytes} B (+ host {self.host_bytes} B), eager peak "
                f"{self.eager_peak_bytes} B + inputs {self.input_bytes} B; replay "
                f"{self.replay_seconds:.3f} s, eager {self.eager_seconds:.3f} s")

    def __repr__(self):
        return f"RunResult({self.summary()})"


def _cpu_peak(fn):
    """(result, peak bytes) of fn(): the largest running sum of the CPU allocations and frees
    that torch.profiler(profile_memory=True) records during the call."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = []

    def walk(evs):
        for e in evs:
            if e.tag == torch._C._profiler._EventType.Allocation:
                f = e.extra_fields
                if f.device.type == "cpu":
                    events.append((e.start_time_ns, f.alloc_size))
            walk(e.children)

    walk(prof.profiler.kineto_results.experimental_event_tree())
    events.sort(key=lambda e: e[0])
    cur = peak = 0
    for _, size in events:
        cur += size
        peak = max(peak, cur)
    return result, peak


def _cuda_peak(fn, device):
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    base_r = torch.cuda.memory_reserved(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = fn()
    torch.cuda.synchronize(device)
    return result, (torch.cuda.max_memory_allocated(device) - base,
                    torch.cuda.max_memory_reserved(device) - base_r)


def _eager(ex, xs, device):
    """One eager call of the exported computation on real tensors; returns (flat outputs,
    updated buffers {graph name: tensor}). The module's buffers are not modified."""
    model = ex.module
    params = dict(model.named_parameters())
    buffers = {k: b.detach().clone() for k, b in model.named_buffers()}
    if ex.mode == "inference":
        model.eval()
        with torch.no_grad():
            out = torch.func.functional_call(model, {**params, **buffers}, xs)
        outs = _flatten(out)
    else:
        model.train()
        out = torch.func.functional_call(model, {**params, **buffers}, xs)
        loss = out.sum()
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params.values())]
        outs = [loss.detach()] + list(grads)
    return outs, {"buffer:" + k: v for k, v in buffers.items()}


def _diff(a, b):
    """(bitwise equal, max abs diff) of two lists of tensors."""
    if len(a) != len(b):
        raise ReplayError(f"the replay has {len(a)} outputs, eager {len(b)}")
    same, worst = True, 0.0
    for x, y in zip(a, b):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            same = same and x == y
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            raise ReplayError(f"output {tuple(x.shape)} {x.dtype} vs eager "
                              f"{tuple(y.shape)} {y.dtype}")
        x, y = x.detach().cpu(), y.detach().cpu()
        if not torch.equal(x, y):
            same = False
        if x.numel():
            d = (x.double() - y.double()).abs().max().item()
            worst = max(worst, d)
    return same, worst


def _seeded(seed, cuda):
    """A context in which torch's random generators start from `seed` (the global state is
    restored afterwards)."""
    import contextlib

    @contextlib.contextmanager
    def ctx():
        devices = [torch.cuda.current_device()] if cuda else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            yield

    return ctx()


def run(module_or_exported, example_inputs, plan, train=False, device=None, compare=True,
        measure=True, weights_region=False, use_out=True, seed=0):
    """Replays `plan` (a memplan-plan/1 dict, JSON text, path, or a memplan.Plan) of the
    export of a module with PyTorch's ATen kernels in one preallocated arena; returns a
    `RunResult`.

    module_or_exported: an `Exported` (from `export`) or an nn.Module, then exported here
    with `train` (the plan must be of that same graph). example_inputs: a tensor or tuple,
    with the shapes and dtypes of the export. device: "cpu" (default: the inputs' device) or
    "cuda" (the module's tensors must be there). compare: also run eager PyTorch on the same
    inputs and compare (bitwise_equal, max_abs_diff); measure: measure eager's and the
    replay's peak allocation (see the module docstring). weights_region: put the weights in
    one tensor at the plan's `weights` offsets instead of using the module's tensors.
    use_out: write ops' results through their out= overloads where possible. seed: the
    replay and the eager call each start torch's random generators from it (dropout and other
    random ops then draw the same numbers in both when the plan runs them in the trace's
    relative order; the global generator state is restored afterwards).

    Raises ReplayError naming the instruction, op or tensor when the plan does not fit the
    export or reads a tensor it has freed, spilled or not computed.
    """
    xs = _as_tuple(example_inputs)
    ex = module_or_exported
    if not isinstance(ex, Exported):
        ex = export(module_or_exported, xs, train=train)
    p = _plan_dict(plan)
    if device is None:
        device = xs[0].device if xs else torch.device("cpu")
    device = torch.device(device)
    xs = tuple(x.to(device) for x in xs)
    cuda = device.type == "cuda"

    def replay():
        r = _Replay(ex, xs, p, device, weights_region, use_out)
        with torch.no_grad(), _seeded(seed, cuda):
            outs, bufs = r.run()
        if cuda:
            torch.cuda.synchronize(device)
        return r, outs, bufs

    def eager():
        with _seeded(seed, cuda):
            return _eager(ex, xs, device)

    t0 = time.perf_counter()
    rep, outs, bufs = replay()
    replay_s = time.perf_counter() - t0
    res = dict(outputs=outs, buffers=bufs, counts=dict(rep.counts),
               out_fallbacks=dict(rep.out_fallbacks),
               arena_bytes=int(p["arena_bytes"]), host_bytes=int(p.get("host_bytes", 0) or 0),
               weights_bytes=int(p.get("weights_bytes", 0) or 0),
               input_bytes=sum(int(ex.graph["tensors"][i]["size"])
                               for i, t in enumerate(ex.graph["tensors"]) if t["kind"] == "input"),
               replay_seconds=replay_s, eager_outputs=None, eager_buffers=None,
               bitwise_equal=None, max_abs_diff=None, eager_seconds=None,
               eager_peak_bytes=None, eager_reserved_bytes=None, replay_peak_bytes=None,
               peak_method=None)
    del rep
    if compare:
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        e_outs, e_bufs = eager()
        if cuda:
            torch.cuda.synchronize(device)
        res["eager_seconds"] = time.perf_counter() - t0
        names = sorted(bufs)
        same, worst = _diff(outs + [bufs[k] for k in names], e_outs + [e_bufs[k] for k in names])
        res.update(eager_outputs=e_outs, eager_buffers=e_bufs, bitwise_equal=bool(same),
                   max_abs_diff=worst)
        del e_outs
    if measure:
        if cuda:
            _, (peak, reserved) = _cuda_peak(eager, device)
            _, (rpeak, _) = _cuda_peak(replay, device)
            res.update(eager_peak_bytes=peak, eager_reserved_bytes=reserved,
                       replay_peak_bytes=rpeak,
                       peak_method="torch.cuda.max_memory_allocated/max_memory_reserved "
                                   "minus the bytes allocated before the call")
        else:
            _, peak = _cpu_peak(eager)
            _, rpeak = _cpu_peak(replay)
            res.update(eager_peak_bytes=peak, replay_peak_bytes=rpeak,
                       peak_method="torch.profiler(profile_memory=True): largest running sum "
                                   "of the CPU allocations and frees made during the call")
    return RunResult(**res)


def plan_and_run(module, example_inputs, train=False, run_options=None, **plan_options):
    """Exports `module`, plans it with memplan's native module (`memplan.plan(graph,
    **plan_options)`) and replays the plan; returns (Exported, plan, RunResult)."""
    import memplan

    if not hasattr(memplan, "plan"):
        raise ImportError("memplan.plan is not available: build the native module "
                          "(pip install ./python)")
    ex = export(module, example_inputs, train=train)
    plan = memplan.plan(ex.graph, **plan_options)
    return ex, plan, run(ex, example_inputs, plan, **(run_options or {}))
