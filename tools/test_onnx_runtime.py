#!/usr/bin/env python3
"""memplan's CPU executor against ONNX Runtime, on the same weights and inputs.

    python3 tools/test_onnx_runtime.py [-v]          # or: python3 -m pytest tools/test_onnx_runtime.py

Each model goes through `memplan import onnx --weights-out` (the initializers' data),
`memplan plan`, and `memplan run --data WEIGHTS --data INPUT --outputs-out OUT
--require-real-kernels` (every op must run a real kernel: a mixing kernel's output is a hash,
so comparing it would be meaningless); ONNX Runtime (CPU, all graph optimisations off) runs
the model on the same input, and the outputs must agree within TOLERANCE (below).

- Small CNNs built with onnx.helper (seeded numpy initializers): Conv with pads, strides and
  groups, BatchNormalization, Relu, Clip (relu6, bounds as Constant nodes and initializers, a
  missing bound), Add, Mul with broadcasting, MaxPool (ceil_mode), AveragePool
  (count_include_pad 0 and 1), GlobalAveragePool, Flatten, Reshape, ReduceMean with an axes
  input, Gemm (transB 0 and 1, square weights), MatMul, Softmax. Need onnx, onnxruntime and
  numpy only.
- torchvision resnet18 and mobilenet_v2 (default random init, seeded: no download; batch
  norms given random affines and the statistics of one random batch, see `calibrate`), exported
  by torch.onnx.export with the legacy exporter (dynamo=False) and the dynamo exporter;
  skipped when torch/torchvision are missing (MEMPLAN_ONNX_TORCH=0 skips them too).

The memplan binary: $MEMPLAN_BIN, else target/release/memplan under $CARGO_TARGET_DIR or the
workspace's target/ (build it with `cargo build --release`). `cli/tests/onnx_runtime.rs`
runs this file with the binary cargo built.

TOLERANCE. Both runtimes compute in f32 but sum in different orders (memplan: im2col + a
GEMM, ONNX Runtime: MLAS kernels), so results differ by rounding only: a sum of K products
reordered moves by at most about K·2⁻²⁴·Σ|products| and typically √K·2⁻²⁴ relative (K ≤
4608 here: ~4e-6), compounding over depth. We require
    max |memplan − ORT| ≤ 1e-4 · max |ORT| + 1e-6
per output, and max |ORT| > 1e-2 (a vanishing output would pass anything): over 10× the rounding we measure on resnet18 and mobilenet_v2 (see the printed
"max abs diff"), and far below what a wrong semantic gives (a swapped transpose, a
missing bias, a wrong pooling divisor or clip bound all move outputs by O(scale)).
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    import onnxruntime as ort
except ImportError as e:  # the Rust test checks for these before running this file
    print(f"onnx/onnxruntime not installed ({e})", file=sys.stderr)
    raise

RTOL = 1e-4
ATOL = 1e-6
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# --- safetensors (numpy only) -------------------------------------------------------------

DTYPES = {
    "F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
    "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "U16": np.uint16,
    "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_,
}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


def write_safetensors(path, tensors):
    """Writes {name: ndarray} as safetensors (little-endian, tensors in name order)."""
    header, blobs, at = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """{name: ndarray} of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        dt = np.dtype(DTYPES[e["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(body[lo:hi], dtype=dt).reshape(e["shape"])
    return out


# --- running both -------------------------------------------------------------------------

def memplan_bin():
    if os.environ.get("MEMPLAN_BIN"):
        return os.environ["MEMPLAN_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    path = os.path.join(target, "release", "memplan")
    if not os.path.exists(path):
        raise unittest.SkipTest(f"no memplan binary at {path}: set MEMPLAN_BIN or cargo build --release")
    return path


def memplan(*args):
    r = subprocess.run([memplan_bin(), *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"memplan {' '.join(map(str, args))} exited {r.returncode}:\n{r.stderr}{r.stdout}")
    return r


def run_memplan(model, inputs, work):
    """memplan's outputs of `model` (an onnx.ModelProto) on `inputs` ({name: ndarray})."""
    shaped = os.path.join(work, "model.onnx")
    onnx.save(onnx.shape_inference.infer_shapes(model), shaped)
    graph, weights, plan = (os.path.join(work, n) for n in ("g.json", "w.safetensors", "p.json"))
    x, y = os.path.join(work, "x.safetensors"), os.path.join(work, "y.safetensors")
    shapes = [a for n, v in inputs.items() for a in ("--input-shape", f"{n}={','.join(map(str, v.shape))}")]
    memplan("import", "onnx", shaped, "-o", graph, "--weights-out", weights, *shapes)
    memplan("plan", graph, "-o", plan, "--time-limit", "60")
    write_safetensors(x, inputs)
    r = memplan("run", graph, plan, "--data", weights, "--data", x, "--outputs-out", y,
                "--require-real-kernels")
    assert "outputs equal     yes" in r.stdout, r.stdout
    return read_safetensors(y), r.stdout


def run_ort(model, inputs):
    so = ort.SessionOptions()
    # Graph optimisations fuse and rewrite ops (e.g. Conv+Add); off, ORT runs the model's ops.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))


def compare(test, model, inputs, label):
    """Runs both, asserts every output within tolerance; returns {output: max abs diff}."""
    work = tempfile.mkdtemp(prefix="memplan-ort-")
    try:
        got, report = run_memplan(model, inputs, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    want = run_ort(model, inputs)
    diffs = {}
    for name, w in want.items():
        test.assertIn(name, got, f"{label}: memplan wrote no output {name!r}")
        g = got[name]
        test.assertEqual(tuple(g.shape), tuple(w.shape), f"{label}: {name} shape")
        diff = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
        scale = float(np.max(np.abs(w)))
        tol = RTOL * scale + ATOL
        print(f"{label}: output {name} {list(w.shape)}: max abs diff {diff:.3e} "
              f"(max |ORT| {scale:.3e}, relative {diff / scale:.1e}, tolerance {tol:.1e})",
              file=sys.stderr)
        # A vanishing output would make any comparison pass.
        test.assertGreater(scale, 1e-2, f"{label}: {name} is degenerate (max |ORT| {scale})")
        test.assertLessEqual(diff, tol, f"{label}: {name} differs from ONNX Runtime")
        diffs[name] = diff
    return diffs


# --- small models with onnx.helper --------------------------------------------------------

RNG = np.random.default_rng(2024)


def init(name, *shape, scale=None, positive=False):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    s = scale if scale is not None else (2.0 / fan_in) ** 0.5
    a = RNG.standard_normal(shape).astype(np.float32) * np.float32(s)
    if positive:
        a = np.abs(a) + np.float32(0.5)
    return numpy_helper.from_array(a, name)


def const(name, value, dtype=np.float32):
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.array(value, dtype=dtype), name))


def make(nodes, inits, x_shape, y_shape, opset=17, name="m"):
    g = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def cnn_resnet_like():
    """Conv(pads, bias) → BN → Relu → MaxPool(3, 2, pad 1) → [Conv s2 groups 2 → Clip(0, 6)
    bounds from Constants] + [1×1 Conv s2] → Add → GlobalAveragePool → Flatten →
    Gemm(transB=1) → Softmax."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g", "beta", "mean", "var"], ["n1"], epsilon=1e-3),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], group=2),
        const("lo", 0.0), const("hi", 6.0),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["k2"]),
        helper.make_node("Conv", ["p1", "w3", "b3"], ["c3"], kernel_shape=[1, 1], strides=[2, 2]),
        helper.make_node("Add", ["k2", "c3"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["l"], transB=1),
        helper.make_node("Softmax", ["l"], ["y"], axis=1),
    ]
    inits = [init("w1", 8, 3, 3, 3), init("b1", 8, scale=0.1),
             init("g", 8, positive=True), init("beta", 8, scale=0.1), init("mean", 8, scale=0.1),
             init("var", 8, positive=True),
             init("w2", 8, 4, 3, 3, scale=1.0), init("w3", 8, 8, 1, 1), init("b3", 8, scale=0.1),
             init("wf", 10, 8), init("bf", 10, scale=0.1)]
    return make(nodes, inits, [2, 3, 16, 16], [2, 10], name="cnn_resnet_like")


def cnn_pools():
    """Depthwise Conv s2 → Clip(max only, an initializer) → MaxPool(3, 2, ceil_mode) →
    AveragePool(3, pad 1, count_include_pad 0) and (…, 1) → Mul (per-channel broadcast) →
    Add → ReduceMean(axes input, keepdims) → Reshape(shape initializer) → Gemm(transB=0,
    square)."""
    nodes = [
        helper.make_node("Conv", ["x", "dw"], ["c"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], group=4),
        helper.make_node("Clip", ["c", "", "cmax"], ["k"]),
        helper.make_node("MaxPool", ["k"], ["m"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        helper.make_node("AveragePool", ["m"], ["a0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         count_include_pad=0),
        helper.make_node("AveragePool", ["m"], ["a1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         count_include_pad=1),
        helper.make_node("Mul", ["a0", "scale"], ["s"]),
        helper.make_node("Add", ["s", "a1"], ["t"]),
        helper.make_node("ReduceMean", ["t", "axes"], ["r"], keepdims=1),
        helper.make_node("Reshape", ["r", "shape"], ["f"]),
        helper.make_node("Gemm", ["f", "sq", "bias"], ["y"], transB=0),
    ]
    inits = [init("dw", 4, 1, 3, 3), numpy_helper.from_array(np.array(0.8, np.float32), "cmax"),
             init("scale", 4, 1, 1, positive=True),
             numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
             numpy_helper.from_array(np.array([2, 4], np.int64), "shape"),
             init("sq", 4, 4, scale=1.0), init("bias", 4, scale=0.1)]
    # 19×19 → conv s2 → 10×10 → maxpool 3/2 with ceil_mode → 5×5 (4×4 without) → avg pools 5×5
    return make(nodes, inits, [2, 4, 19, 19], [2, 4], opset=18, name="cnn_pools")


def mlp_square():
    """Gemm(16→16, transB=1) → Relu → MatMul(16×16) → Add (bias) → Gemm(transB=0, 16×16):
    square weights, so only the transpose attribute tells the orientation."""
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["m"]),
        helper.make_node("Add", ["m", "b2"], ["a"]),
        helper.make_node("Gemm", ["a", "w3"], ["y"], transB=0),
    ]
    inits = [init("w1", 16, 16), init("b1", 16, scale=0.1), init("w2", 16, 16),
             init("b2", 16, scale=0.1), init("w3", 16, 16)]
    return make(nodes, inits, [3, 16], [3, 16], name="mlp_square")


def x_for(model):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": RNG.standard_normal(shape).astype(np.float32)}


class SmallModels(unittest.TestCase):
    def test_a_resnet_like_cnn_matches_onnx_runtime(self):
        m = cnn_resnet_like()
        compare(self, m, x_for(m), "cnn_resnet_like")

    def test_pooling_variants_clip_reduce_and_an_untransposed_gemm_match_onnx_runtime(self):
        m = cnn_pools()
        compare(self, m, x_for(m), "cnn_pools")

    def test_square_linear_layers_keep_their_orientation(self):
        m = mlp_square()
        compare(self, m, x_for(m), "mlp_square")

    def test_the_safetensors_helpers_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            t = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], np.int64)}
            write_safetensors(os.path.join(d, "t.safetensors"), t)
            back = read_safetensors(os.path.join(d, "t.safetensors"))
            for k in t:
                np.testing.assert_array_equal(back[k], t[k])


# --- torchvision models -------------------------------------------------------------------

def torch_available():
    if os.environ.get("MEMPLAN_ONNX_TORCH", "1") == "0":
        return False
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
        return True
    except Exception:  # ImportError, or a broken CUDA wheel
        return False


def calibrate(model):
    """Random batch-norm affines, running statistics from one training-mode batch, then eval.

    torchvision's default init leaves batch norms at the identity, and with it mobilenet_v2's
    signal vanishes with depth (kaiming fan_out on depthwise convs): its logits come out
    around 1e-9, where any comparison passes. Normalised by real statistics, every layer
    carries an O(1) signal, and the folded batch norms are not trivial."""
    import torch
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.reset_running_stats()
                m.momentum = None  # cumulative average: one batch gives its statistics
        model.train()
        model(torch.randn(4, 3, 224, 224))
    model.eval()


def export(name, dynamo):
    import io
    import warnings
    import torch
    import torchvision
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None)
    calibrate(model)
    x = torch.randn(1, 3, 224, 224)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            prog = torch.onnx.export(model, (x,), dynamo=True, input_names=["x"], output_names=["y"])
            m = prog.model_proto
        else:
            f = io.BytesIO()
            torch.onnx.export(model, (x,), f, dynamo=False, input_names=["x"], output_names=["y"],
                              opset_version=17)
            m = onnx.load_from_string(f.getvalue())
    return m, {"x": x.numpy()}


@unittest.skipUnless(torch_available(), "torch/torchvision not installed (or MEMPLAN_ONNX_TORCH=0)")
class TorchvisionModels(unittest.TestCase):
    def check(self, name, dynamo):
        label = f"{name} ({'dynamo' if dynamo else 'legacy'} exporter)"
        try:
            m, inputs = export(name, dynamo)
        except Exception as e:  # an exporter that does not work here is a skip, not a failure
            if dynamo:
                self.skipTest(f"{label}: export failed: {type(e).__name__}: {e}")
            raise
        compare(self, m, inputs, label)

    def test_resnet18_from_the_legacy_exporter_matches_onnx_runtime(self):
        self.check("resnet18", False)

    def test_resnet18_from_the_dynamo_exporter_matches_onnx_runtime(self):
        self.check("resnet18", True)

    def test_mobilenet_v2_from_the_legacy_exporter_matches_onnx_runtime(self):
        self.check("mobilenet_v2", False)

    def test_mobilenet_v2_from_the_dynamo_exporter_matches_onnx_runtime(self):
        self.check("mobilenet_v2", True)


if __name__ == "__main__":
    unittest.main()
