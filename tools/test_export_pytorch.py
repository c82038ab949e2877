#!/usr/bin/env python3
"""Tests of tools/export_pytorch.py.

    python3 tools/test_export_pytorch.py [OUT_DIR]

The conversion (`build_graph`) is tested on hand-made trace records, without torch. Where
torch and torchvision are installed, resnet18 is also exported for inference and training.
Every graph produced is written to OUT_DIR (when given) so that the Rust test
(tests/export_pytorch.rs) can parse, plan, validate and execute it with memplan.
"""

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_pytorch as ep  # noqa: E402

OUT_DIR = None


def t(storage, shape, dtype="f32"):
    n = 4
    for d in shape:
        n *= d
    return {"storage": storage, "nbytes": n, "shape": shape, "dtype": dtype}


def tiny_records(b=1):
    """x -> conv -> relu -> view (flatten) -> addmm(b, flat, w2^T) -> out; plus a view of a
    weight (t) that the matmul reads, and a multi-output op with a None output. `b` is the
    batch."""
    return {
        "placeholders": [
            {"name": "param:conv.weight", "kind": "weight", **t(0, [4, 3, 3, 3])},
            {"name": "param:fc.weight", "kind": "weight", **t(1, [10, 64])},
            {"name": "param:fc.bias", "kind": "weight", **t(2, [10])},
            {"name": "input", "kind": "input", **t(3, [b, 3, 4, 4])},
        ],
        "nodes": [
            {"name": "convolution", "op": "conv2d", "inputs": [3, 0, None],
             "outputs": [t(4, [b, 4, 4, 4])], "flops": 2 * 64 * 27,
             "attrs": {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1],
                       "transposed": False, "groups": 1}, "pointwise": False},
            {"name": "relu", "op": "relu", "inputs": [4], "outputs": [t(5, [b, 4, 4, 4])],
             "pointwise": True, "flops": 64},
            # a view: same storage as relu's output -> folds, no op
            {"name": "view", "op": "view", "inputs": [5], "outputs": [t(5, [b, 64])]},
            # a view of a weight
            {"name": "t", "op": "t", "inputs": [1], "outputs": [t(1, [64, 10])]},
            {"name": "addmm", "op": "matmul", "inputs": [2, 5, 1],
             "outputs": [t(6, [b, 10])], "flops": 2 * 640},
            {"name": "split_stats", "op": "stats", "inputs": [6],
             "outputs": [t(7, [10]), None]},
            # functionalization's copy into an input: dropped
            {"name": "copy_", "op": "copy_", "inputs": [2, 7], "outputs": [t(2, [10])],
             "mutates_input": True},
        ],
        "outputs": [6, 7],
    }


class BuildGraph(unittest.TestCase):
    def test_views_fold_onto_their_base_and_emit_no_op(self):
        g = ep.build_graph(tiny_records(), "tiny")
        names = [o["name"] for o in g["ops"]]
        self.assertEqual(names, ["convolution", "relu", "addmm", "split_stats"])
        addmm = g["ops"][2]
        # the flattened relu output and the transposed weight read their bases
        self.assertEqual(addmm["inputs"], ["param:fc.bias", "relu", "param:fc.weight"])

    def test_kinds_sizes_and_multi_output_names(self):
        g = ep.build_graph(tiny_records(), "tiny")
        by = {x["name"]: x for x in g["tensors"]}
        self.assertEqual(by["input"]["kind"], "input")
        self.assertEqual(by["param:conv.weight"]["kind"], "weight")
        self.assertEqual(by["relu"]["size"], 256)
        self.assertEqual(by["addmm"]["kind"], "output")
        # a multi-output op names its outputs OP.i and skips None outputs
        self.assertIn("split_stats.0", by)
        self.assertNotIn("split_stats.1", by)
        self.assertEqual(by["split_stats.0"]["kind"], "output")
        self.assertEqual(g["meta"]["dropped_input_mutations"], 1)

    def test_pointwise_ops_get_an_inplace_hint_only_on_activations_of_equal_size(self):
        g = ep.build_graph(tiny_records(), "tiny")
        ops = {o["name"]: o for o in g["ops"]}
        self.assertEqual(ops["relu"].get("inplace"), [[0, 0]])
        self.assertNotIn("inplace", ops["convolution"])
        rec = tiny_records()
        rec["nodes"][1]["inputs"] = [3]  # relu of the graph input: never overwritten
        g = ep.build_graph(rec, "tiny")
        self.assertNotIn("inplace", {o["name"]: o for o in g["ops"]}["relu"])

    def test_a_read_of_an_unknown_storage_is_an_error_naming_the_node(self):
        rec = tiny_records()
        rec["nodes"][1]["inputs"] = [99]
        with self.assertRaises(ep.ExportError) as cm:
            ep.build_graph(rec, "tiny")
        self.assertIn("'relu'", str(cm.exception))

    def test_a_trace_without_computed_outputs_is_an_error(self):
        rec = tiny_records()
        rec["outputs"] = [0]
        with self.assertRaises(ep.ExportError):
            ep.build_graph(rec, "tiny")

    def test_bad_factories_are_reported(self):
        for spec in ["no_colon", "json:nope", "no_such_module_xyz:f"]:
            with self.assertRaises(ep.ExportError):
                ep.load_factory(spec)

    def test_random_and_in_place_ops_get_recompute_false_and_others_no_flag(self):
        rec = tiny_records()
        # relu becomes a dropout, the matmul an in-place add_, split_stats tagged random
        rec["nodes"][1]["op"] = "native_dropout"
        rec["nodes"][4]["op"] = "add_"
        rec["nodes"][5]["random"] = True
        g = ep.build_graph(rec, "tiny")
        ops = {o["name"]: o for o in g["ops"]}
        self.assertIs(ops["relu"].get("recompute"), False)
        self.assertIs(ops["addmm"].get("recompute"), False)
        self.assertIs(ops["split_stats"].get("recompute"), False)
        self.assertNotIn("recompute", ops["convolution"])
        # the in-place hint is unrelated to the flag
        self.assertEqual(ops["relu"].get("inplace"), [[0, 0]])
        g = ep.build_graph(tiny_records(), "tiny")
        self.assertFalse(any("recompute" in o for o in g["ops"]))

    def test_the_default_predicate_matches_memplans(self):
        for t in ["dropout", "aten.native_dropout.default", "feature_alpha_dropout", "rand",
                  "randn_like", "randint", "bernoulli", "uniform_", "normal", "multinomial",
                  "random_", "RandomNormal", "RandomUniformLike", "Bernoulli", "add_",
                  "copy_", "index_put_", "aten::relu_"]:
            self.assertFalse(ep.may_recompute_by_default(t), t)
        for t in ["relu", "add", "native_dropout_backward", "layer_norm", "normalize",
                  "range", "__and__", "_unsafe_view", "empty", "index_put"]:
            self.assertTrue(ep.may_recompute_by_default(t), t)

    def test_the_tiny_graph_is_written_for_memplan(self):
        g = ep.build_graph(tiny_records(), "tiny.export")
        if OUT_DIR:
            with open(os.path.join(OUT_DIR, "tiny.export.json"), "w") as f:
                json.dump(g, f)


def tiny_encoder():
    """A small transformer encoder layer over (batch, seq, 32) inputs, for the dynamic-dims
    test."""
    import torch

    return torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0,
                                            batch_first=True)


def have_torchvision():
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError:
        return False
    return True


class MergeSymbolic(unittest.TestCase):
    """--dynamic-batch: graphs traced at several batches merged into one symbolic graph."""

    def graphs(self, batches=(1, 2, 3, 4), records=tiny_records):
        return {b: ep.build_graph(records(b), f"tiny.{b}") for b in batches}

    def test_sizes_that_grow_with_the_batch_become_expressions_and_weights_stay_numbers(self):
        g = ep.merge_symbolic(self.graphs(), "B", 1, 4, "tiny.symbolic")
        self.assertEqual(g["symbols"], {"B": {"min": 1, "max": 4}})
        by = {x["name"]: x for x in g["tensors"]}
        self.assertEqual(by["input"]["size"], "192*B")
        self.assertEqual(by["input"]["shape"], ["B", 3, 4, 4])
        self.assertEqual(by["addmm"]["size"], "40*B")
        self.assertEqual(by["param:fc.weight"]["size"], 2560)
        self.assertEqual(by["split_stats.0"]["size"], 40)
        self.assertEqual(g["meta"]["dynamic"]["traced"], [[1], [2], [3], [4]])
        self.assertEqual(g["meta"]["batch"], "B")
        if OUT_DIR:
            with open(os.path.join(OUT_DIR, "tiny.symbolic.json"), "w") as f:
                json.dump(g, f)

    def test_sizes_are_fitted_exactly_as_polynomials_with_non_negative_integer_coefficients(self):
        def fit(values, grid):
            return ep._fit({(k,): v for k, v in values.items()}, ["B"], [grid])

        self.assertEqual(fit({2: 106, 3: 156, 5: 256}, [2, 3]), "6 + 50*B")
        self.assertEqual(fit({2: 7, 3: 7}, [2, 3]), 7)
        self.assertEqual(fit({2: 2, 3: 3}, [2, 3]), "B")
        self.assertIsNone(fit({2: 4, 3: 9, 4: 16}, [2, 3]))  # B^2 off the line
        self.assertEqual(fit({2: 4, 3: 9, 4: 16, 8: 64}, [2, 3, 4]), "B*B")
        self.assertIsNone(fit({2: 10, 3: 5}, [2, 3]))  # shrinks
        self.assertIsNone(fit({2: 3, 3: 4, 4: 6}, [2, 3, 4]))  # half-integer coefficients
        # Two symbols: B*S*S*4 + 64*B*S (attention scores and a projection).
        vals = {(b, sq): 4 * b * sq * sq + 64 * b * sq for b in (1, 2, 3, 9) for sq in (2, 3, 4, 17)}
        self.assertEqual(ep._fit(vals, ["B", "S"], [[2, 3], [2, 3, 4]]), "64*B*S + 4*B*S*S")

    def test_a_size_that_does_not_grow_linearly_is_an_error_naming_the_tensor(self):
        def squared(b):
            r = tiny_records(b)
            r["nodes"][0]["outputs"] = [t(4, [b * b, 4, 4, 4])]
            return r

        with self.assertRaisesRegex(ep.ExportError, "'convolution'.*not a polynomial"):
            ep.merge_symbolic(self.graphs((2, 3, 4), squared), "B", 2, 4)

    def test_a_trace_that_differs_at_batch_1_is_refused_unless_allowed(self):
        def specialised(b):
            r = tiny_records(b)
            if b == 1:  # batch 1 folds relu's copy away
                del r["nodes"][1]
                r["nodes"][1]["inputs"] = [4]  # the view
                r["nodes"][1]["outputs"] = [t(4, [1, 64])]
                r["nodes"][3]["inputs"] = [2, 4, 1]  # addmm
            return r

        gs = self.graphs((1, 2, 3, 4), specialised)
        with self.assertRaisesRegex(ep.ExportError, "B=2 and B=1 differ.*--allow-specialised-min"):
            ep.merge_symbolic(gs, "B", 1, 4)
        g = ep.merge_symbolic(gs, "B", 1, 4, allow_specialised_min=True)
        self.assertEqual(g["meta"]["dynamic"]["specialised"], [[1]])
        self.assertEqual(g["meta"]["dynamic"]["traced"], [[2], [3], [4]])
        self.assertIn("relu", [o["name"] for o in g["ops"]])

    def test_a_trace_that_differs_above_the_fitted_batches_is_always_refused(self):
        def late(b):
            r = tiny_records(b)
            if b == 4:
                r["nodes"][1]["op"] = "gelu"
            return r

        with self.assertRaisesRegex(ep.ExportError, "'relu': type"):
            ep.merge_symbolic(self.graphs((2, 3, 4), late), "B", 2, 4, allow_specialised_min=True)

    def test_traced_points_fit_above_1_and_check_both_corners_and_the_middle(self):
        self.assertEqual(ep.dynamic_points([("B", 1, 64, 1)])[1], [(1,), (2,), (3,), (32,), (64,)])
        self.assertEqual(ep.dynamic_points([("B", 8, 16, 1)])[1], [(8,), (9,), (12,), (16,)])
        self.assertEqual(ep.dynamic_points([("B", 1, 2, 1)])[1], [(1,), (2,)])
        grid, pts = ep.dynamic_points([("B", 1, 8, 1), ("S", 1, 64, 2)])
        self.assertEqual(grid, [[2, 3], [2, 3, 4]])
        self.assertEqual(len(pts), 6 + 3)  # the grid, the min and max corners, the middle
        self.assertIn((1, 1), pts)
        self.assertIn((8, 64), pts)

    def test_two_symbols_merge_into_products_and_squares(self):
        def attention(b, sq):
            return {
                "placeholders": [
                    {"name": "input", "kind": "input", **t(0, [b, sq, 8])},
                    {"name": "param:w", "kind": "weight", **t(1, [8, 8])},
                ],
                "nodes": [
                    {"name": "scores", "op": "matmul", "inputs": [0, 0],
                     "outputs": [t(2, [b, sq, sq])], "pointwise": False},
                    {"name": "proj", "op": "matmul", "inputs": [2, 1],
                     "outputs": [t(3, [b, sq, 8])], "pointwise": False},
                ],
                "outputs": [3],
            }

        dims = [("B", 1, 8, 1), ("S", 1, 64, 2)]
        _, pts = ep.dynamic_points(dims)
        graphs = {pt: ep.build_graph(attention(*pt), "attn") for pt in pts}
        g = ep.merge_dynamic(graphs, dims, "attn.symbolic")
        by = {x["name"]: x for x in g["tensors"]}
        self.assertEqual(by["scores"]["size"], "4*B*S*S")
        self.assertEqual(by["scores"]["shape"], ["B", "S", "S"])
        self.assertEqual(by["proj"]["size"], "32*B*S")
        self.assertEqual(by["param:w"]["size"], 256)
        self.assertEqual(g["symbols"], {"B": {"min": 1, "max": 8}, "S": {"min": 1, "max": 64}})
        if OUT_DIR:
            with open(os.path.join(OUT_DIR, "attn.symbolic.json"), "w") as f:
                json.dump(g, f)
        with self.assertRaisesRegex(ep.ExportError, "name a symbol twice"):
            ep.merge_dynamic(graphs, [("B", 1, 8, 1), ("B", 1, 64, 2)])

    def test_bad_dynamic_dims_are_refused_naming_them(self):
        for bad in ("S", "S=1", "S=x:1..4", "S=1:4..2", "-S=1:1..4"):
            with self.assertRaises(ep.ExportError):
                ep.parse_dynamic_dim(bad)
        self.assertEqual(ep.parse_dynamic_dim("S=1:16..512"), ("S", 1, 16, 512))

    def test_bad_ranges_are_refused(self):
        for bad in ("64", "4..2", "0..4", "a..b"):
            with self.assertRaises(ep.ExportError):
                ep.parse_range(bad, "--dynamic-batch")
        self.assertEqual(ep.parse_range("1..64", "--dynamic-batch"), (1, 64))


@unittest.skipUnless(have_torchvision(), "torch/torchvision not installed: tracing not tested")
class TraceTorchvision(unittest.TestCase):
    def export(self, mode, model="resnet18"):
        out = os.path.join(OUT_DIR or tempfile.mkdtemp(), f"{model}.2.{mode}.json")
        rc = ep.main([f"torchvision.models:{model}", "--batch", "2", "--mode", mode,
                      "--input-shape", "3,64,64", "-o", out])
        self.assertEqual(rc, 0)
        with open(out) as f:
            return json.load(f)

    def test_resnet18_inference_exports_convs_with_attrs(self):
        g = self.export("inference")
        convs = [o for o in g["ops"] if o["type"] == "conv2d"]
        self.assertEqual(len(convs), 20)
        self.assertEqual(convs[0]["attrs"]["stride"], [2, 2])
        self.assertTrue(any(o.get("inplace") for o in g["ops"]))
        self.assertFalse(any(o["type"] in ("view", "t", "_unsafe_view") for o in g["ops"]))

    def test_resnet18_training_has_backward_ops_and_gradient_outputs(self):
        g = self.export("train")
        self.assertTrue(any(o["type"] == "conv2d_backward" for o in g["ops"]))
        outs = [x for x in g["tensors"] if x["kind"] == "output"]
        self.assertGreater(len(outs), 20)

    def test_resnet18_with_a_dynamic_batch_is_one_symbolic_graph(self):
        out = os.path.join(OUT_DIR or tempfile.mkdtemp(), "resnet18.1-4.train.symbolic.json")
        rc = ep.main(["torchvision.models:resnet18", "--dynamic-batch", "1..4", "--mode", "train",
                      "--input-shape", "3,64,64", "-o", out])
        self.assertEqual(rc, 0)
        with open(out) as f:
            g = json.load(f)
        self.assertEqual(g["symbols"], {"B": {"min": 1, "max": 4}})
        inp = next(x for x in g["tensors"] if x["name"] == "input")
        self.assertEqual(inp["size"], "49152*B")
        self.assertEqual(inp["shape"], ["B", 3, 64, 64])
        weights = [x for x in g["tensors"] if x["kind"] == "weight"]
        self.assertTrue(all(isinstance(x["size"], int) for x in weights))
        self.assertEqual(g["name"], "resnet18.1-4.train")

    def test_a_transformer_layer_with_dynamic_batch_and_sequence_is_one_symbolic_graph(self):
        out = os.path.join(OUT_DIR or tempfile.mkdtemp(), "encoder.1-4.1-32.train.symbolic.json")
        rc = ep.main([f"{__name__}:tiny_encoder", "--dynamic-batch", "1..4",
                      "--dynamic-dim", "S=1:1..32", "--allow-specialised-min", "--mode", "train",
                      "--input-shape", "16,32", "-o", out])
        self.assertEqual(rc, 0)
        with open(out) as f:
            g = json.load(f)
        self.assertEqual(set(g["symbols"]), {"B", "S"})
        inp = next(x for x in g["tensors"] if x["name"] == "input")
        self.assertEqual(inp["size"], "128*B*S")
        self.assertEqual(inp["shape"], ["B", "S", 32])
        # CPU attention is a fused kernel (no S x S scores tensor): activations grow with B*S.
        sizes = [x["size"] for x in g["tensors"] if x["kind"] != "weight"]
        self.assertTrue(all(isinstance(v, int) or "B*S" in v for v in sizes), sizes)

    def test_a_batch_the_model_cannot_trace_is_an_error_naming_it(self):
        # Training batch norm needs more than one value per channel: batch 1 at 32x32 leaves
        # resnet18's last stage with 1x1 maps.
        out = os.path.join(tempfile.mkdtemp(), "bad.json")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = ep.main(["torchvision.models:resnet18", "--dynamic-batch", "1..4", "--mode",
                          "train", "--input-shape", "3,32,32", "-o", out])
        self.assertEqual(rc, 2)
        self.assertIn("tracing at B=1", err.getvalue())
        self.assertFalse(os.path.exists(out))

    def test_mobilenet_v2_training_exports_with_batch_norm_and_hardtanh_backward(self):
        # torch 2.15 gave "element 0 of tensors does not require grad" here through
        # torch.autograd.grad on make_fx's fake inputs; torch.func.grad_and_value does not
        # depend on them requiring grad.
        g = self.export("train", "mobilenet_v2")
        types = {o["type"] for o in g["ops"]}
        self.assertIn("conv2d_backward", types)
        self.assertIn("batch_norm_backward", types)
        self.assertTrue(any("hardtanh_backward" in t for t in types), sorted(types))
        # The loss and one gradient per parameter are the outputs.
        outs = [x for x in g["tensors"] if x["kind"] == "output"]
        params = [t for t in g["tensors"] if t["name"].startswith("param:")]
        self.assertEqual(len(outs), 1 + len(params))


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        OUT_DIR = sys.argv.pop(1)
    if not have_torchvision():
        print("note: torch/torchvision not installed; only the conversion is tested", file=sys.stderr)
    unittest.main(verbosity=2)
