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

/// `TensorProto` with dims, type, name and some raw data (which the importer must skip).
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
    let mut m = Vec::new();
    int(&mut m, 1, 8);
    string(&mut m, 2, "memplan-tests");
    bytes(&mut m, 7, graph);
    let mut opset = Vec::new();
    string(&mut opset, 1, "");
    int(&mut opset, 2, 17);
    bytes(&mut m, 8, &opset);
    m
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
