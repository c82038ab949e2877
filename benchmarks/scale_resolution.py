#!/usr/bin/env python3
"""Re-export a zoo inference graph (memplan-graph/1, NCHW) at a higher input resolution.

    scale_resolution.py IN.json OUT.json --size 512|1024

Idea: walk the ops in listed order and propagate every tensor's NCHW shape from the new
input size through each op's rule, then recompute sizes (bytes per element kept from the
original tensor: 4 for f32, 8 for i64 indices) and scale flops and workspace by the spatial
factor (output elements, or input elements for reductions). Rules:

- conv2d: stride/padding/dilation from attrs, kernel from the weight shape;
- max_pool2d/avg_pool2d: the window from attrs when given, else the first common
  configuration (kernel, stride, padding, ceil mode) that explains the 224-pixel shapes, as
  memplan's kernel selector infers it;
- adaptive pools and mean/sum reductions keep their output size;
- concat: the channel sum of its inputs, spatial size from them;
- element-wise ops (output shaped like an input): that input's new shape;
- ops that do not touch a changed tensor (classifier head, `empty`) stay as they are.

An op no rule covers while one of its inputs changed is an error naming the op.
Linear in the graph size.
"""

import argparse
import json
import math
import sys


class ScaleError(Exception):
    """An op or tensor the script cannot scale."""


POOL_CANDIDATES = [(3, 2, 1), (3, 2, 0), (2, 2, 0), (3, 1, 1), (2, 1, 0), (1, 1, 0), (1, 2, 0)]


def pair(v, default):
    if v is None:
        return (default, default)
    if isinstance(v, list):
        if len(v) == 0:
            return (default, default)
        if len(v) == 1:
            return (v[0], v[0])
        return (v[0], v[1])
    return (v, v)


def pool_len(n, k, s, p, ceil):
    if s == 0 or k == 0 or n + 2 * p < k or p > k // 2:
        return None
    span = n + 2 * p - k
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def pool_window(op, x, y):
    """(kernel, stride, padding, ceil) pairs of a pool, from attrs or inferred from shapes."""
    attrs = op.get("attrs") or {}
    if "kernel_size" in attrs:
        k = pair(attrs["kernel_size"], 1)
        s = pair(attrs.get("stride") or None, None)
        if s[0] is None:
            s = k
        cands = [(k, s, pair(attrs.get("padding"), 0))]
    else:
        cands = [((k, k), (s, s), (p, p)) for k, s, p in POOL_CANDIDATES]
    ceils = [attrs["ceil_mode"]] if "ceil_mode" in attrs else [False, True]
    for k, s, p in cands:
        for c in ceils:
            if (pool_len(x[2], k[0], s[0], p[0], c) == y[2]
                    and pool_len(x[3], k[1], s[1], p[1], c) == y[3]):
                return k, s, p, c
    raise ScaleError(f"op {op['name']!r} ({op['type']}): no pooling window explains "
                     f"{x} -> {y}")


def numel(shape):
    return math.prod(shape)


def scale(graph, size):
    tensors = {t["name"]: t for t in graph["tensors"]}
    new_shape = {}
    inputs = [t for t in graph["tensors"] if t["kind"] == "input"]
    if not inputs:
        raise ScaleError("the graph has no input tensor")
    for t in inputs:
        s = t.get("shape")
        if not s or len(s) != 4:
            raise ScaleError(f"input {t['name']!r} is not NCHW (shape {s})")
        new_shape[t["name"]] = [s[0], s[1], size, size]

    def shape_of(name):
        return new_shape.get(name, tensors[name].get("shape"))

    for op in graph["ops"]:
        ins, outs = op["inputs"], op["outputs"]
        changed = [i for i in ins if i in new_shape and new_shape[i] != tensors[i].get("shape")]
        if not changed:
            continue
        ty = op["type"].removeprefix("aten.").rstrip("_")
        attrs = op.get("attrs") or {}
        orig_out = tensors[outs[0]].get("shape")
        x_old = tensors[ins[0]].get("shape") if ins else None
        x = shape_of(ins[0]) if ins else None
        if orig_out is None:
            raise ScaleError(f"op {op['name']!r}: output {outs[0]!r} has no shape")
        if ty in ("conv2d", "convolution", "conv"):
            if attrs.get("transposed"):
                raise ScaleError(f"op {op['name']!r}: transposed convolution")
            w = shape_of(ins[1])
            st, pd, dl = pair(attrs.get("stride"), 1), pair(attrs.get("padding"), 0), \
                pair(attrs.get("dilation"), 1)
            oh = (x[2] + 2 * pd[0] - dl[0] * (w[2] - 1) - 1) // st[0] + 1
            ow = (x[3] + 2 * pd[1] - dl[1] * (w[3] - 1) - 1) // st[1] + 1
            out = [x[0], w[0], oh, ow]
        elif ty in ("max_pool2d", "avg_pool2d", "max_pool2d_with_indices"):
            k, s, p, c = pool_window(op, x_old, orig_out)
            oh, ow = pool_len(x[2], k[0], s[0], p[0], c), pool_len(x[3], k[1], s[1], p[1], c)
            if oh is None or ow is None:
                raise ScaleError(f"op {op['name']!r}: window does not fit {x}")
            out = [x[0], x[1], oh, ow]
        elif ty in ("adaptive_avg_pool2d", "adaptive_max_pool2d", "mean", "sum"):
            if len(orig_out) == 4 and x_old and len(x_old) == 4 and orig_out[2:] != [1, 1] \
                    and ty in ("mean", "sum"):
                raise ScaleError(f"op {op['name']!r}: a {ty} keeping spatial dims")
            out = list(orig_out)
            if len(out) == 4:
                out[1] = x[1]
        elif ty in ("concat", "cat"):
            parts = [shape_of(i) for i in ins]
            if any(len(p) != 4 for p in parts) or len({tuple(p[2:]) for p in parts}) != 1:
                raise ScaleError(f"op {op['name']!r}: concat of {parts}")
            out = [parts[0][0], sum(p[1] for p in parts), parts[0][2], parts[0][3]]
        else:
            # Element-wise: the output is shaped like one of its (changed) inputs.
            src = next((i for i in ins if tensors[i].get("shape") == orig_out), None)
            if src is None:
                raise ScaleError(f"op {op['name']!r} ({op['type']}): no rule scales it "
                                 f"(inputs {[tensors[i].get('shape') for i in ins]} -> "
                                 f"{orig_out})")
            out = list(shape_of(src))
        new_shape[outs[0]] = out
        # Side outputs shaped like the main output (max_pool's indices) follow it.
        for o in outs[1:]:
            if tensors[o].get("shape") == orig_out:
                new_shape[o] = list(out)
        in_ratio = numel(x) / numel(x_old) if x and x_old and numel(x_old) else 1.0
        out_ratio = numel(out) / numel(orig_out) if numel(orig_out) else 1.0
        factor = out_ratio if out_ratio != 1.0 else in_ratio
        if op.get("flops") is not None:
            op["flops"] = op["flops"] * factor
        if op.get("workspace"):
            op["workspace"] = int(math.ceil(op["workspace"] * factor))
        if op.get("time_us") is not None:
            op["time_us"] = op["time_us"] * factor

    for t in graph["tensors"]:
        s = new_shape.get(t["name"])
        old = t.get("shape")
        if s is None or s == old:
            continue
        n_old = numel(old)
        if n_old == 0 or t["size"] % n_old:
            raise ScaleError(f"tensor {t['name']!r}: size {t['size']} is not a multiple of "
                             f"its {n_old} elements")
        t["size"] = numel(s) * (t["size"] // n_old)
        t["shape"] = s
    return graph


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--size", type=int, required=True, help="new input height and width")
    a = ap.parse_args()
    if a.size < 32:
        print("scale_resolution: --size must be at least 32", file=sys.stderr)
        return 2
    try:
        with open(a.input) as f:
            g = json.load(f)
        g = scale(g, a.size)
    except (OSError, json.JSONDecodeError, KeyError, ScaleError) as e:
        print(f"scale_resolution: {a.input}: {e}", file=sys.stderr)
        return 1
    base = g.get("name", "graph")
    g["name"] = f"{base}.{a.size}px"
    if isinstance(g.get("meta"), dict):
        g["meta"]["resolution"] = str(a.size)
    with open(a.output, "w") as f:
        json.dump(g, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
