#!/usr/bin/env python3
"""Writes a few tiny ONNX models (onnx.helper, shapes inferred) into DIR, as seeds for the
`onnx_decode` fuzz target: a small CNN with a symbolic batch, a Gemm/MatMul head, a Constant
node, a sparse initializer, an elementwise chain, `auto_pad` convolutions and pools, a
transposed convolution, reductions, a custom-domain node, a model without inferred shapes and
one with control flow (refused by the importer). Usage: gen_onnx_seeds.py DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

F = TensorProto.FLOAT


def init(name, *dims):
    return numpy_helper.from_array(np.zeros(dims, dtype=np.float32), name)


def save(out, name, graph, infer=True, opset=17):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.producer_name = "memplan-fuzz-seeds"
    if infer:
        model = shape_inference.infer_shapes(model)
    with open(os.path.join(out, name + ".onnx"), "wb") as f:
        f.write(model.SerializeToString())


def main(out):
    os.makedirs(out, exist_ok=True)
    # Conv -> BatchNorm -> Relu -> MaxPool -> GlobalAveragePool -> Flatten -> Gemm, batch "N".
    cnn = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3],
                             pads=[1, 1, 1, 1], strides=[1, 1]),
            helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], name="bn"),
            helper.make_node("Relu", ["bn"], ["r"], name="relu"),
            helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2],
                             strides=[2, 2]),
            helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
            helper.make_node("Flatten", ["g"], ["f"], name="flat"),
            helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc", transB=1),
        ],
        "tiny_cnn",
        [helper.make_tensor_value_info("x", F, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", F, ["N", 10])],
        [init("w", 4, 3, 3, 3), init("s", 4), init("b", 4), init("m", 4), init("v", 4),
         init("fw", 10, 4), init("fb", 10)],
    )
    save(out, "tiny_cnn", cnn)
    # Elementwise chain with a Constant node and broadcasting, static shapes.
    ew = helper.make_graph(
        [
            helper.make_node("Constant", [], ["k"], name="k",
                             value=numpy_helper.from_array(np.ones((1, 4), np.float32))),
            helper.make_node("Add", ["x", "k"], ["a"], name="add"),
            helper.make_node("Sigmoid", ["a"], ["s"], name="sig"),
            helper.make_node("Mul", ["a", "s"], ["m"], name="mul"),
            helper.make_node("MatMul", ["m", "w"], ["y"], name="mm"),
        ],
        "elementwise",
        [helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("y", F, [2, 3])],
        [init("w", 4, 3)],
    )
    save(out, "elementwise", ew)
    # Reshape/Transpose/Softmax/Concat with an int64 initializer.
    shape = numpy_helper.from_array(np.array([2, 6], dtype=np.int64), "shape")
    rs = helper.make_graph(
        [
            helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
            helper.make_node("Transpose", ["r"], ["t"], name="tr", perm=[1, 0]),
            helper.make_node("Softmax", ["t"], ["s"], name="softmax", axis=1),
            helper.make_node("Concat", ["s", "t"], ["y"], name="cat", axis=0),
        ],
        "reshape",
        [helper.make_tensor_value_info("x", F, [3, 4])],
        [helper.make_tensor_value_info("y", F, [12, 2])],
        [shape],
    )
    save(out, "reshape", rs)
    # Sparse initializer and a value without an inferred shape.
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.ones(2, np.float32), "sw"),
        numpy_helper.from_array(np.array([0, 3], np.int64), "sw_idx"),
        [2, 2],
    )
    sp = helper.make_graph(
        [helper.make_node("Add", ["x", "sw"], ["y"], name="add")],
        "sparse",
        [helper.make_tensor_value_info("x", F, [2, 2])],
        [helper.make_tensor_value_info("y", F, [2, 2])],
        sparse_initializer=[sparse],
    )
    save(out, "sparse", sp, infer=False)
    noshape = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "noshape",
        [helper.make_tensor_value_info("x", F, ["B", 5])],
        [helper.make_tensor_value_info("y", F, ["B", 5])],
    )
    save(out, "no_inferred_shapes", noshape, infer=False)
    # auto_pad SAME_UPPER / SAME_LOWER convolutions and pools, ConvTranspose, Gemm with alpha,
    # ReduceMean with keepdims/axes, Unsqueeze and a node of a custom domain.
    pads = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv_same", auto_pad="SAME_UPPER",
                             kernel_shape=[3, 3], strides=[2, 2], dilations=[1, 1], group=1),
            helper.make_node("AveragePool", ["c"], ["p"], name="avg_same", auto_pad="SAME_LOWER",
                             kernel_shape=[2, 2], strides=[1, 1], count_include_pad=1),
            helper.make_node("ConvTranspose", ["p", "wt"], ["t"], name="deconv",
                             kernel_shape=[2, 2], strides=[2, 2], output_padding=[0, 0],
                             pads=[0, 0, 0, 0]),
            helper.make_node("MaxPool", ["t"], ["m"], name="max_asym", kernel_shape=[2, 2],
                             pads=[0, 0, 1, 1], ceil_mode=1),
            helper.make_node("ReduceMean", ["m"], ["r"], name="mean", axes=[2, 3], keepdims=0),
            helper.make_node("Unsqueeze", ["r", "ax"], ["u"], name="unsq"),
            helper.make_node("Flatten", ["u"], ["f"], name="flat"),
            helper.make_node("Gemm", ["f", "gw"], ["g"], name="gemm", alpha=0.5, transA=0),
            helper.make_node("MyOp", ["g"], ["y"], name="custom", domain="com.example", k=3,
                             fs=[1.0, 2.0], ss=["a", "b"]),
        ],
        "pads",
        [helper.make_tensor_value_info("x", F, [1, 2, 7, 7])],
        [helper.make_tensor_value_info("y", F, [1, 3])],
        [init("w", 4, 2, 3, 3), init("wt", 4, 3, 2, 2), init("gw", 3, 5),
         numpy_helper.from_array(np.array([2], dtype=np.int64), "ax")],
    )
    model = helper.make_model(pads, opset_imports=[helper.make_opsetid("", 13),
                                                   helper.make_opsetid("com.example", 1)])
    model = shape_inference.infer_shapes(model)
    vi = {v.name for v in model.graph.value_info}
    for name, dims in [("g", [1, 3])]:
        if name not in vi:
            model.graph.value_info.append(helper.make_tensor_value_info(name, F, dims))
    with open(os.path.join(out, "pads.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    # Control flow: If with two subgraphs (refused, naming the node).
    branch = lambda v: helper.make_graph(  # noqa: E731
        [helper.make_node("Identity", ["x"], ["o" + v])], "b" + v, [],
        [helper.make_tensor_value_info("o" + v, F, [1])])
    cf = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch("t"),
                          else_branch=branch("e"))],
        "control_flow",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", F, [1])],
        [helper.make_tensor_value_info("y", F, [1])],
    )
    save(out, "control_flow", cf, infer=False)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
