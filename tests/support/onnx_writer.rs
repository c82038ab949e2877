//! A minimal protobuf writer for ONNX test models, written from onnx/onnx.proto's field
//! numbers independently of the importer's decoder, so that tests build real `.onnx` bytes
//! (no Python onnx package needed). Proto2 style: repeated integers unpacked, like the
//! reference writers; `packed_ints` exercises the packed form too.
#![allow(dead_code)]

fn varint(buf: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf.push(b);
            return;
        }
        buf.push(b | 0x80);
    }
}

fn key(buf: &mut Vec<u8>, field: u32, wire: u8) {
    varint(buf, ((field as u64) << 3) | wire as u64);
}

fn int(buf: &mut Vec<u8>, field: u32, v: i64) {
    key(buf, field, 0);
    varint(buf, v as u64);
}

fn float(buf: &mut Vec<u8>, field: u32, v: f32) {
    key(buf, field, 5);
    buf.extend_from_slice(&v.to_le_bytes());
}

fn bytes(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
    key(buf, field, 2);
    varint(buf, data.len() as u64);
    buf.extend_from_slice(data);
}

fn string(buf: &mut Vec<u8>, field: u32, s: &str) {
    bytes(buf, field, s.as_bytes());
}

/// A dimension: a size, or a symbol.
#[derive(Clone)]
pub enum D {
    /// Static size.
    V(i64),
    /// Symbolic size.
    P(&'static str),
}

/// ONNX element types used in tests.
pub const FLOAT: i64 = 1;
/// int64.
pub const INT64: i64 = 7;
/// string.
pub const STRING: i64 = 8;

/// `ValueInfoProto` with a tensor type; `dims: None` leaves the shape out.
pub fn value_info(name: &str, elem: i64, dims: Option<&[D]>) -> Vec<u8> {
    let mut tensor = Vec::new();
    int(&mut tensor, 1, elem);
    if let Some(dims) = dims {
        let mut shape = Vec::new();
        for d in dims {
            let mut dim = Vec::new();
            match d {
                D::V(v) => int(&mut dim, 1, *v),
                D::P(p) => string(&mut dim, 2, p),
            }
            bytes(&mut shape, 1, &dim);
        }
        bytes(&mut tensor, 2, &shape);
    }
    let mut ty = Vec::new();
    bytes(&mut ty, 1, &tensor);
    let mut v = Vec::new();
    string(&mut v, 1, name);
    bytes(&mut v, 2, &ty);
    v
}

/// `TensorProto` with dims, type, name and 16 bytes of raw data (which a graph-only import
/// does not read; an import with weights finds them the wrong size unless they fit).
pub fn tensor(name: &str, elem: i64, dims: &[i64]) -> Vec<u8> {
    let mut t = Vec::new();
    for &d in dims {
        int(&mut t, 1, d);
    }
    int(&mut t, 2, elem);
    string(&mut t, 8, name);
    bytes(&mut t, 9, &[0u8; 16]);
    t
}

/// `TensorProto` of f32 `values` in `raw_data` (little-endian bytes).
pub fn tensor_f32(name: &str, dims: &[i64], values: &[f32]) -> Vec<u8> {
    let mut t = Vec::new();
    for &d in dims {
        int(&mut t, 1, d);
    }
    int(&mut t, 2, FLOAT);
    string(&mut t, 8, name);
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    bytes(&mut t, 9, &raw);
    t
}

/// `TensorProto` of f32 `values` in the typed `float_data` field (packed).
pub fn tensor_float_data(name: &str, dims: &[i64], values: &[f32]) -> Vec<u8> {
    let mut t = Vec::new();
    for &d in dims {
        int(&mut t, 1, d);
    }
    int(&mut t, 2, FLOAT);
    let packed: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    bytes(&mut t, 4, &packed);
    string(&mut t, 8, name);
    t
}

/// `TensorProto` of i64 `values` in the typed `int64_data` field (unpacked).
pub fn tensor_int64_data(name: &str, dims: &[i64], values: &[i64]) -> Vec<u8> {
    let mut t = Vec::new();
    for &d in dims {
        int(&mut t, 1, d);
    }
    int(&mut t, 2, INT64);
    for &v in values {
        int(&mut t, 7, v);
    }
    string(&mut t, 8, name);
    t
}

/// `TensorProto` whose data lives in an external file `location`.
pub fn tensor_external(name: &str, elem: i64, dims: &[i64], location: &str) -> Vec<u8> {
    let mut t = Vec::new();
    for &d in dims {
        int(&mut t, 1, d);
    }
    int(&mut t, 2, elem);
    string(&mut t, 8, name);
    let mut entry = Vec::new();
    string(&mut entry, 1, "location");
    string(&mut entry, 2, location);
    bytes(&mut t, 13, &entry);
    int(&mut t, 14, 1);
    t
}

/// An INTS attribute (unpacked).
pub fn attr_ints(name: &str, v: &[i64]) -> Vec<u8> {
    let mut a = Vec::new();
    string(&mut a, 1, name);
    for &x in v {
        int(&mut a, 8, x);
    }
    int(&mut a, 20, 7);
    a
}

/// An INTS attribute in packed encoding.
pub fn packed_ints(name: &str, v: &[i64]) -> Vec<u8> {
    let mut a = Vec::new();
    string(&mut a, 1, name);
    let mut p = Vec::new();
    for &x in v {
        varint(&mut p, x as u64);
    }
    bytes(&mut a, 8, &p);
    int(&mut a, 20, 7);
    a
}

/// An INT attribute.
pub fn attr_int(name: &str, v: i64) -> Vec<u8> {
    let mut a = Vec::new();
    string(&mut a, 1, name);
    int(&mut a, 3, v);
    int(&mut a, 20, 2);
    a
}

/// A FLOAT attribute.
pub fn attr_float(name: &str, v: f32) -> Vec<u8> {
    let mut a = Vec::new();
    string(&mut a, 1, name);
    float(&mut a, 2, v);
    int(&mut a, 20, 1);
    a
}

/// A STRING attribute.
pub fn attr_string(name: &str, v: &str) -> Vec<u8> {
    let mut a = Vec::new();
    string(&mut a, 1, name);
    string(&mut a, 4, v);
    int(&mut a, 20, 3);
    a
}

/// A TENSOR attribute.
pub fn attr_tensor(name: &str, t: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    string(&mut a, 1, name);
    bytes(&mut a, 5, t);
    int(&mut a, 20, 4);
    a
}

/// A GRAPH attribute (control flow).
pub fn attr_graph(name: &str, g: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    string(&mut a, 1, name);
    bytes(&mut a, 6, g);
    int(&mut a, 20, 5);
    a
}

/// `NodeProto`.
pub fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str], attrs: &[Vec<u8>]) -> Vec<u8> {
    let mut n = Vec::new();
    for i in inputs {
        string(&mut n, 1, i);
    }
    for o in outputs {
        string(&mut n, 2, o);
    }
    if !name.is_empty() {
        string(&mut n, 3, name);
    }
    string(&mut n, 4, op);
    for a in attrs {
        bytes(&mut n, 5, a);
    }
    n
}

/// `GraphProto`.
pub fn graph(
    name: &str,
    nodes: &[Vec<u8>],
    initializers: &[Vec<u8>],
    inputs: &[Vec<u8>],
    outputs: &[Vec<u8>],
    value_info: &[Vec<u8>],
) -> Vec<u8> {
    let mut g = Vec::new();
    for n in nodes {
        bytes(&mut g, 1, n);
    }
    string(&mut g, 2, name);
    for t in initializers {
        bytes(&mut g, 5, t);
    }
    for v in inputs {
        bytes(&mut g, 11, v);
    }
    for v in outputs {
        bytes(&mut g, 12, v);
    }
    for v in value_info {
        bytes(&mut g, 13, v);
    }
    g
}

/// `ModelProto` (IR 8, opset 17).
pub fn model(graph: &[u8]) -> Vec<u8> {
    model_opset(graph, 17)
}

/// `ModelProto` (IR 8) importing the standard domain at `opset`.
pub fn model_opset(graph: &[u8], opset: i64) -> Vec<u8> {
    let mut m = Vec::new();
    int(&mut m, 1, 8);
    string(&mut m, 2, "memplan-tests");
    bytes(&mut m, 7, graph);
    let mut o = Vec::new();
    string(&mut o, 1, "");
    int(&mut o, 2, opset);
    bytes(&mut m, 8, &o);
    m
}

/// The input of [`tiny_with_weights`]: x = 1, 2, ..., 9 as [1, 1, 3, 3].
pub const TINY_X: [f32; 9] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
/// Its conv weight [1, 1, 2, 2] (raw_data).
pub const TINY_W: [f32; 4] = [0.1, 0.2, -0.3, 0.4];
/// Its conv bias.
pub const TINY_BIAS: f32 = 0.5;
/// Its clip bounds: min from a `Constant` node, max from an initializer.
pub const TINY_CLIP: (f32, f32) = (0.0, 2.5);
/// Its Gemm weight B [4, 4] (float_data), used untransposed (transB = 0).
pub const TINY_B: [f32; 16] = [
    1.0, 0.0, 0.5, 0.0, //
    0.0, 1.0, 0.0, -1.0, //
    1.0, 1.0, 0.0, 0.0, //
    -1.0, 2.0, 0.0, 3.0,
];
/// Its Gemm bias C [4].
pub const TINY_C: [f32; 4] = [0.25, -0.25, 0.0, 1.0];

/// A model small enough to compute by hand, with its weights' data: x [1,1,3,3] →
/// Conv(w [1,1,2,2], bias, no padding) → [1,1,2,2] → Clip(min: a Constant, max: an
/// initializer) → Reshape(shape: an int64_data initializer [1, 4]) → Gemm(B [4,4] with
/// transB = 0, C [4]) → y [1, 4].
pub fn tiny_with_weights() -> Vec<u8> {
    let nodes = vec![
        node(
            "conv",
            "Conv",
            &["x", "w", "bias"],
            &["c"],
            &[attr_ints("kernel_shape", &[2, 2])],
        ),
        node(
            "lo",
            "Constant",
            &[],
            &["lo"],
            &[attr_tensor("value", &tensor_f32("", &[], &[TINY_CLIP.0]))],
        ),
        node("clip", "Clip", &["c", "lo", "hi"], &["k"], &[]),
        node("flat", "Reshape", &["k", "shape"], &["f"], &[]),
        node(
            "fc",
            "Gemm",
            &["f", "b", "cc"],
            &["y"],
            &[attr_int("transB", 0)],
        ),
    ];
    let inits = vec![
        tensor_f32("w", &[1, 1, 2, 2], &TINY_W),
        tensor_f32("bias", &[1], &[TINY_BIAS]),
        tensor_f32("hi", &[], &[TINY_CLIP.1]),
        tensor_int64_data("shape", &[2], &[1, 4]),
        tensor_float_data("b", &[4, 4], &TINY_B),
        tensor_float_data("cc", &[4], &TINY_C),
    ];
    let dims = |d: &[i64]| d.iter().map(|&v| D::V(v)).collect::<Vec<_>>();
    let inputs = vec![value_info("x", FLOAT, Some(&dims(&[1, 1, 3, 3])))];
    let outputs = vec![value_info("y", FLOAT, Some(&dims(&[1, 4])))];
    let vi = vec![
        value_info("c", FLOAT, Some(&dims(&[1, 1, 2, 2]))),
        value_info("k", FLOAT, Some(&dims(&[1, 1, 2, 2]))),
        value_info("f", FLOAT, Some(&dims(&[1, 4]))),
        value_info("lo", FLOAT, Some(&[])),
    ];
    model(&graph("tiny", &nodes, &inits, &inputs, &outputs, &vi))
}

/// [`tiny_with_weights`]'s output, computed directly from its definition.
pub fn tiny_expected() -> [f32; 4] {
    let x = |r: usize, c: usize| TINY_X[r * 3 + c];
    let mut k = [0f32; 4];
    for oy in 0..2 {
        for ox in 0..2 {
            let conv = TINY_W[0] * x(oy, ox)
                + TINY_W[1] * x(oy, ox + 1)
                + TINY_W[2] * x(oy + 1, ox)
                + TINY_W[3] * x(oy + 1, ox + 1)
                + TINY_BIAS;
            k[oy * 2 + ox] = conv.clamp(TINY_CLIP.0, TINY_CLIP.1);
        }
    }
    let mut y = TINY_C;
    for (n, yn) in y.iter_mut().enumerate() {
        for (kk, kv) in k.iter().enumerate() {
            *yn += kv * TINY_B[kk * 4 + n];
        }
    }
    y
}

/// A small CNN with a symbolic batch: Conv(3→4, 3×3, pad 1) → Relu → MaxPool(2) →
/// GlobalAveragePool → Flatten → Gemm(4→10, transB) → Softmax. `with_value_info: false`
/// drops the intermediate shapes (as a model before shape inference).
pub fn small_cnn(with_value_info: bool) -> Vec<u8> {
    let b = D::P("batch");
    let nodes = vec![
        node(
            "conv",
            "Conv",
            &["x", "w", "bias"],
            &["c"],
            &[
                attr_ints("kernel_shape", &[3, 3]),
                packed_ints("pads", &[1, 1, 1, 1]),
                attr_ints("strides", &[1, 1]),
                attr_int("group", 1),
            ],
        ),
        node("", "Relu", &["c"], &["r"], &[]),
        node(
            "pool",
            "MaxPool",
            &["r"],
            &["p"],
            &[
                attr_ints("kernel_shape", &[2, 2]),
                attr_ints("strides", &[2, 2]),
            ],
        ),
        node("gap", "GlobalAveragePool", &["p"], &["g"], &[]),
        node("flat", "Flatten", &["g"], &["f"], &[attr_int("axis", 1)]),
        node(
            "fc",
            "Gemm",
            &["f", "w2", "b2"],
            &["l"],
            &[attr_int("transB", 1), attr_float("alpha", 1.0)],
        ),
        node("softmax", "Softmax", &["l"], &["y"], &[attr_int("axis", 1)]),
    ];
    let inits = vec![
        tensor("w", FLOAT, &[4, 3, 3, 3]),
        tensor("bias", FLOAT, &[4]),
        tensor("w2", FLOAT, &[10, 4]),
        tensor("b2", FLOAT, &[10]),
    ];
    let inputs = vec![value_info(
        "x",
        FLOAT,
        Some(&[b.clone(), D::V(3), D::V(8), D::V(8)]),
    )];
    let outputs = vec![value_info("y", FLOAT, Some(&[b.clone(), D::V(10)]))];
    let vi = if with_value_info {
        vec![
            value_info("c", FLOAT, Some(&[b.clone(), D::V(4), D::V(8), D::V(8)])),
            value_info("r", FLOAT, Some(&[b.clone(), D::V(4), D::V(8), D::V(8)])),
            value_info("p", FLOAT, Some(&[b.clone(), D::V(4), D::V(4), D::V(4)])),
            value_info("g", FLOAT, Some(&[b.clone(), D::V(4), D::V(1), D::V(1)])),
            value_info("f", FLOAT, Some(&[b.clone(), D::V(4)])),
            value_info("l", FLOAT, Some(&[b, D::V(10)])),
        ]
    } else {
        Vec::new()
    };
    model(&graph("small_cnn", &nodes, &inits, &inputs, &outputs, &vi))
}

/// A transformer-like block with two symbols, batch `N` and sequence `S`:
/// x[N, S, 8] · w1[8, 16] → h → Relu → r · w2[16, 4] → y[N, S, 4], with every intermediate
/// shape in `value_info` (as after ONNX shape inference).
pub fn seq_mlp() -> Vec<u8> {
    let (n, s) = (D::P("N"), D::P("S"));
    let dims = |k: i64| [n.clone(), s.clone(), D::V(k)];
    let nodes = vec![
        node("mm1", "MatMul", &["x", "w1"], &["h"], &[]),
        node("act", "Relu", &["h"], &["r"], &[]),
        node("mm2", "MatMul", &["r", "w2"], &["y"], &[]),
    ];
    let inits = vec![tensor("w1", FLOAT, &[8, 16]), tensor("w2", FLOAT, &[16, 4])];
    let inputs = vec![value_info("x", FLOAT, Some(&dims(8)))];
    let outputs = vec![value_info("y", FLOAT, Some(&dims(4)))];
    let vi = vec![
        value_info("h", FLOAT, Some(&dims(16))),
        value_info("r", FLOAT, Some(&dims(16))),
    ];
    model(&graph("seq_mlp", &nodes, &inits, &inputs, &outputs, &vi))
}

/// A stride-2 3×3 convolution on x[N, 3, H, 8] (H symbolic) → c[N, 4, `out_h`, 3] → Relu
/// → y; `out_h` is the dim_param shape inference wrote for the computed height (an
/// expression such as `"(H-3)/2+1"`, or a fresh `"unk__1"`).
pub fn strided_conv(out_h: &'static str) -> Vec<u8> {
    let (n, h) = (D::P("N"), D::P("H"));
    let c = [n.clone(), D::V(4), D::P(out_h), D::V(3)];
    let nodes = vec![
        node(
            "conv",
            "Conv",
            &["x", "w"],
            &["c"],
            &[
                attr_ints("kernel_shape", &[3, 3]),
                attr_ints("strides", &[2, 2]),
            ],
        ),
        node("act", "Relu", &["c"], &["y"], &[]),
    ];
    let inits = vec![tensor("w", FLOAT, &[4, 3, 3, 3])];
    let inputs = vec![value_info("x", FLOAT, Some(&[n, D::V(3), h, D::V(8)]))];
    let outputs = vec![value_info("y", FLOAT, Some(&c))];
    let vi = vec![value_info("c", FLOAT, Some(&c))];
    model(&graph(
        "strided_conv",
        &nodes,
        &inits,
        &inputs,
        &outputs,
        &vi,
    ))
}

/// A 3×3 convolution with `auto_pad: SAME_UPPER` on x[N, 3, H, 8] (H symbolic) → c[N, 4, H,
/// 8] → Relu → y: the padding depends on H.
pub fn same_padded_conv() -> Vec<u8> {
    let (n, h) = (D::P("N"), D::P("H"));
    let c = [n.clone(), D::V(4), h.clone(), D::V(8)];
    let nodes = vec![
        node(
            "conv",
            "Conv",
            &["x", "w"],
            &["c"],
            &[
                attr_ints("kernel_shape", &[3, 3]),
                attr_string("auto_pad", "SAME_UPPER"),
            ],
        ),
        node("act", "Relu", &["c"], &["y"], &[]),
    ];
    let inits = vec![tensor("w", FLOAT, &[4, 3, 3, 3])];
    let inputs = vec![value_info("x", FLOAT, Some(&[n, D::V(3), h, D::V(8)]))];
    let outputs = vec![value_info("y", FLOAT, Some(&c))];
    let vi = vec![value_info("c", FLOAT, Some(&c))];
    model(&graph(
        "same_padded_conv",
        &nodes,
        &inits,
        &inputs,
        &outputs,
        &vi,
    ))
}
