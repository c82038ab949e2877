//! ONNX → memplan-graph/1.
//!
//! Idea: every ONNX value becomes one tensor (graph inputs → `input`, initializers and
//! `Constant` outputs → `weight`, node outputs → `activation`, graph outputs → `output`) and
//! every node one op, in the model's (topological) node order. Sizes come from the shapes the
//! model carries: graph inputs/outputs, initializers, and `value_info`, which ONNX shape
//! inference (`onnx.shape_inference.infer_shapes`) fills for every intermediate. Symbolic
//! dimensions (`batch`, `N`, ...) are bound by `--input-shape NAME=d0,d1,...` through the
//! inputs that declare them, then substituted everywhere. The importer does not infer shapes
//! itself: a value without a static shape is an error that says how to add one.
//!
//! Symbolic import (issue 17): a `dim_param` declared in [`OnnxOptions::symbols`]
//! (`--symbol NAME=MIN..MAX`) is kept as a symbol of that range instead of being bound: every
//! size and shape that depends on it becomes an expression of [`crate::symbolic::expr`]
//! (`"602112*N"`: the product of the static dims, the element size and the symbols), and the
//! result is a symbolic graph ([`import_onnx_symbolic`], [`OnnxImport::symbolic`]) that
//! [`crate::symbolic::SymbolicGraph::parse`] accepts. Symbols bound by `--input-shape` become
//! numbers, so both options mix. A `dim_param` that is itself an expression of the grammar
//! (`"2*N"`, as symbolic shape inference writes) is substituted too. Rules, each refused with
//! an error naming the value or option:
//! - a declared name must be a symbol of the grammar (`[A-Za-z_][A-Za-z0-9_]*`; a `dim_param`
//!   such as `"batch-size"` cannot be declared: bind it with `--input-shape`), must occur as a
//!   `dim_param` of the model (a declared but unused symbol is an error, like an
//!   `--input-shape` for a missing input: it is almost always a typo) and must not also be
//!   bound by `--input-shape`;
//! - a dimension the grammar cannot express (`"(H-3)/2+1"`, or the fresh `unk__7` ONNX shape
//!   inference writes after arithmetic on a symbolic dim) is an error: symbols are supported
//!   on dims that only multiply (batch, sequence length), not on spatial dims a convolution
//!   or `auto_pad: SAME_*` computes with;
//! - 4-bit element types (two per byte) cannot have symbolic sizes.
//!
//! Ops on symbolic tensors carry no `flops` (a number in memplan-graph/1); in-place hints
//! compare the size expressions. Weights are always static.
//!
//! Op types and attributes are mapped to memplan's vocabulary where the executor has a real
//! kernel (Conv → `conv2d` with `stride/padding/dilation/groups`, Gemm → `linear`,
//! MaxPool → `max_pool2d`, ...); other ops keep their ONNX type in lower case. Elementwise
//! and reshape-like ops get `inplace` hints when their output is as large as their first
//! input. Flops are estimated for convolutions, matrix products and elementwise ops.
//!
//! Weights' data: [`import_onnx_with_weights`] also returns every weight's bytes (initializers
//! and `Constant` values, see [`super::onnx_data`]) as a [`TensorFile`] keyed by the graph's
//! tensor names, with the dtype named after the ONNX element type (FLOAT → `F32`, INT64 →
//! `I64`, ...) and exactly the graph tensor's size; weights with zero elements (which
//! memplan sizes as one element) are left out and listed in [`OnnxImport::empty_weights`].
//! The data also folds constant operands into attributes where a kernel takes them as
//! parameters: `Clip` with constant `min`/`max` becomes `hardtanh` with `min_val`/`max_val`
//! (an absent bound is ±f32::MAX), and its constant bound tensors leave the graph when no
//! other op reads them.
//!
//! Cost: O(nodes + values + weight bytes) after decoding.

use super::onnx_data::{constant_value, dtype_of, scalar_f64, tensor_bytes};
use super::onnx_proto::{
    AttributeProto, Dimension, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};
use crate::data_file::{TensorData, TensorFile};
use crate::graph::{Graph, GraphError, TensorKind, DEFAULT_ALIGNMENT};
use crate::symbolic::expr::is_symbol_name;
use crate::symbolic::{Poly, SymbolicGraph};
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use thiserror::Error;

/// The command that adds shapes to a model, quoted in errors.
pub const SHAPE_INFERENCE_HINT: &str = "run ONNX shape inference first: python3 -c \"import onnx, sys; m = onnx.load(sys.argv[1]); onnx.save(onnx.shape_inference.infer_shapes(m), sys.argv[2])\" MODEL.onnx MODEL.shaped.onnx";

/// Options of an import.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OnnxOptions {
    /// Shapes of graph inputs (`name → dims`), binding their symbolic dimensions.
    pub input_shapes: BTreeMap<String, Vec<u64>>,
    /// Graph name (default: the ONNX graph's name, else `onnx_model`).
    pub name: Option<String>,
    /// Graph alignment in bytes (default 256).
    pub alignment: Option<u64>,
    /// Symbols kept symbolic (`dim_param name → (min, max)`, inclusive), see the module docs.
    pub symbols: BTreeMap<String, (u64, u64)>,
}

/// Why a model cannot be imported (each names the value, node or option at fault).
#[derive(Debug, Clone, Error, PartialEq)]
pub enum OnnxError {
    /// The bytes are not an ONNX model.
    #[error("not an ONNX model (protobuf decoding failed: {0})")]
    Decode(String),
    /// The model has no graph.
    #[error("the ONNX model has no graph")]
    NoGraph,
    /// A value has no type or shape, or a dimension that is neither static nor bound.
    #[error("{0}")]
    Shape(String),
    /// An `--input-shape` option is malformed or contradicts the model.
    #[error("--input-shape {spec}: {message}")]
    InputShape {
        /// The option as given.
        spec: String,
        /// What is wrong.
        message: String,
    },
    /// A `--symbol` option is malformed, or contradicts the model or the other options.
    #[error("--symbol {spec}: {message}")]
    Symbol {
        /// The option as given (or the symbol's name).
        spec: String,
        /// What is wrong.
        message: String,
    },
    /// The imported symbolic graph breaks a rule of the symbolic graph format.
    #[error("the imported symbolic graph is invalid: {0}")]
    Symbolic(String),
    /// A node cannot be represented (control flow, unknown value read, ...).
    #[error("node {node:?} ({op_type}): {message}")]
    Node {
        /// The node's name (or its position).
        node: String,
        /// Its ONNX op type.
        op_type: String,
        /// What is wrong.
        message: String,
    },
    /// An element type without a fixed byte size (strings) or unknown.
    #[error(
        "value {value:?} has element type {elem_type} ({what}), which has no fixed size in bytes"
    )]
    ElementType {
        /// The value.
        value: String,
        /// The ONNX `TensorProto.DataType` number.
        elem_type: i32,
        /// Its name, when known.
        what: &'static str,
    },
    /// The converted graph breaks a rule of memplan-graph/1.
    #[error("the imported graph is invalid: {0}")]
    Graph(#[from] GraphError),
    /// An initializer's or `Constant`'s data cannot be read (external data, strings, a
    /// byte count that contradicts its shape, a type the tensor file cannot hold, ...).
    #[error("weight {tensor:?}: {message}")]
    Data {
        /// The initializer or `Constant` output.
        tensor: String,
        /// What is wrong, and what to do.
        message: String,
    },
}

/// Parses `NAME=d0,d1,...` (as given to `--input-shape`).
pub fn parse_input_shape(spec: &str) -> Result<(String, Vec<u64>), OnnxError> {
    let bad = |message: &str| OnnxError::InputShape {
        spec: spec.to_string(),
        message: message.to_string(),
    };
    let (name, dims) = spec
        .rsplit_once('=')
        .ok_or_else(|| bad("expected NAME=d0,d1,... (e.g. input=1,3,224,224)"))?;
    if name.is_empty() {
        return Err(bad("the input name is empty"));
    }
    let dims = if dims.trim().is_empty() {
        Vec::new() // a scalar input
    } else {
        dims.split(',')
            .map(|d| {
                match d.trim().parse::<u64>() {
                    // An empty dimension would give tensors of 0 bytes, which graphs refuse.
                    Ok(0) => Err(bad(&format!(
                        "dimension {d:?} is 0: every dimension must be at least 1"
                    ))),
                    Ok(v) => Ok(v),
                    Err(_) => Err(bad(&format!("dimension {d:?} is not a positive integer"))),
                }
            })
            .collect::<Result<Vec<_>, _>>()?
    };
    Ok((name.to_string(), dims))
}

/// Parses `NAME=MIN..MAX` (as given to `--symbol`): a symbol name of the size-expression
/// grammar and an inclusive range with `1 <= MIN <= MAX`.
pub fn parse_symbol(spec: &str) -> Result<(String, (u64, u64)), OnnxError> {
    let bad = |message: String| OnnxError::Symbol {
        spec: spec.to_string(),
        message,
    };
    let (name, range) = spec
        .split_once('=')
        .ok_or_else(|| bad("expected NAME=MIN..MAX (e.g. batch=1..64)".into()))?;
    let name = name.trim();
    if !is_symbol_name(name) {
        return Err(bad(format!(
            "{name:?} is not a symbol name (a letter or '_' followed by letters, digits or '_'); bind such a dim_param with --input-shape instead"
        )));
    }
    let (lo, hi) = range
        .split_once("..")
        .ok_or_else(|| bad(format!("expected a range MIN..MAX, found {range:?}")))?;
    let num = |x: &str| {
        x.trim()
            .parse::<u64>()
            .map_err(|_| bad(format!("{x:?} is not a non-negative integer")))
    };
    let (min, max) = (num(lo)?, num(hi)?);
    if min < 1 {
        return Err(bad(
            "the range starts at 1 or above (sizes must stay > 0)".into()
        ));
    }
    if min > max {
        return Err(bad(format!("min {min} is greater than max {max}")));
    }
    Ok((name.to_string(), (min, max)))
}

/// A dimension as the model declares it.
#[derive(Debug, Clone, PartialEq)]
enum Dim {
    Static(u64),
    Symbol(String),
    Unknown,
}

/// What the model says about a value: element type and (maybe) shape.
#[derive(Debug, Clone, PartialEq)]
struct Declared {
    elem_type: Option<i32>,
    dims: Option<Vec<Dim>>,
}

/// Byte size of one element and the memplan dtype name; `None` for strings and unknowns.
/// Sub-byte types report 1 byte for two elements through [`element_bytes`].
fn element_type(t: i32) -> Result<(&'static str, u64), &'static str> {
    Ok(match t {
        1 => ("f32", 4),
        2 => ("u8", 1),
        3 => ("i8", 1),
        4 => ("u16", 2),
        5 => ("i16", 2),
        6 => ("i32", 4),
        7 => ("i64", 8),
        9 => ("bool", 1),
        10 => ("f16", 2),
        11 => ("f64", 8),
        12 => ("u32", 4),
        13 => ("u64", 8),
        14 => ("c64", 8),
        15 => ("c128", 16),
        16 => ("bf16", 2),
        17..=20 => ("f8", 1),
        21 => ("u4", 0),
        22 => ("i4", 0),
        8 => return Err("STRING"),
        0 => return Err("UNDEFINED"),
        _ => return Err("unknown"),
    })
}

/// Bytes of `numel` elements of type `t` (4-bit types pack two per byte). Zero elements
/// still take one element's bytes: memplan tensors have size > 0.
fn element_bytes(value: &str, t: i32, numel: u64) -> Result<(&'static str, u64), OnnxError> {
    let (name, bytes) = element_type(t).map_err(|what| OnnxError::ElementType {
        value: value.to_string(),
        elem_type: t,
        what,
    })?;
    let numel = numel.max(1);
    let size = if bytes == 0 {
        numel.div_ceil(2)
    } else {
        numel.checked_mul(bytes).ok_or_else(|| {
            OnnxError::Shape(format!("value {value:?}: size in bytes overflows u64"))
        })?
    };
    Ok((name, size))
}

fn declared(v: &ValueInfoProto) -> Declared {
    let tensor = v.r#type.as_ref().and_then(|t| t.tensor_type.as_ref());
    Declared {
        elem_type: tensor.and_then(|t| t.elem_type),
        dims: tensor.and_then(|t| t.shape.as_ref()).map(|s| {
            s.dim
                .iter()
                .map(|d: &Dimension| match (d.dim_value, &d.dim_param) {
                    (Some(v), _) if v >= 0 => Dim::Static(v as u64),
                    (_, Some(p)) if !p.is_empty() => Dim::Symbol(p.clone()),
                    _ => Dim::Unknown,
                })
                .collect()
        }),
    }
}

fn tensor_dims(t: &TensorProto, what: &str) -> Result<Vec<u64>, OnnxError> {
    t.dims
        .iter()
        .map(|&d| {
            u64::try_from(d)
                .map_err(|_| OnnxError::Shape(format!("{what} has a negative dimension {d}")))
        })
        .collect()
}

/// An element type (`TensorProto.DataType`) and a static shape.
type Typed = (i32, Vec<u64>);

/// An element type and a shape whose dimensions may be expressions over declared symbols.
type SymTyped = (i32, Vec<Poly>);

/// The shape `dims` at every symbol's max.
fn max_shape(
    name: &str,
    dims: &[Poly],
    symbols: &BTreeMap<String, (u64, u64)>,
) -> Result<Vec<u64>, OnnxError> {
    dims.iter()
        .map(|d| {
            d.eval(|s| symbols.get(s).map(|r| r.1)).map_err(|_| {
                OnnxError::Shape(format!(
                    "value {name:?}: dimension {d} overflows u64 at the symbols' max"
                ))
            })
        })
        .collect()
}

fn constants(shape: Vec<u64>) -> Vec<Poly> {
    shape.into_iter().map(Poly::constant).collect()
}

/// One imported tensor.
struct Value_ {
    name: String,
    kind: &'static str,
    dtype: &'static str,
    shape: Vec<u64>,
    size: u64,
    /// Shape and size in bytes as expressions, when a dimension is symbolic.
    sym: Option<(Vec<Poly>, Poly)>,
}

/// An imported model with the data of its weights.
#[derive(Debug, Clone, PartialEq)]
pub struct OnnxImport {
    /// The graph.
    pub graph: Graph,
    /// Every weight's data by graph tensor name (sizes equal the graph tensors' sizes),
    /// but the zero-element ones.
    pub weights: TensorFile,
    /// Weights with zero elements: the graph gives them one element's bytes, the model has
    /// no data for them (any bytes will do).
    pub empty_weights: Vec<String>,
    /// With [`OnnxOptions::symbols`]: the symbolic graph document (checked by
    /// [`SymbolicGraph::parse`]); [`OnnxImport::graph`] is then its instance at every
    /// symbol's max.
    pub symbolic: Option<Value>,
}

/// A symbolic import: the document to write and its parsed form.
#[derive(Debug, Clone, PartialEq)]
pub struct SymbolicImport {
    /// The symbolic graph document (memplan-graph/1 plus `symbols` and string sizes).
    pub document: Value,
    /// The document, parsed.
    pub graph: SymbolicGraph,
}

/// The data of constant values (initializers and `Constant` outputs) by name: element type
/// and little-endian bytes, or why they cannot be read.
type Consts<'g> = HashMap<String, Result<(i32, Cow<'g, [u8]>), String>>;

/// Reads an ONNX model and converts it (see the module docs). With
/// [`OnnxOptions::symbols`] declared, the graph is the symbolic graph's instance at every
/// symbol's max (the largest sizes); [`import_onnx_symbolic`] gives the symbolic graph.
pub fn import_onnx(bytes: &[u8], opts: &OnnxOptions) -> Result<Graph, OnnxError> {
    let model = ModelProto::decode(bytes).map_err(|e| OnnxError::Decode(e.to_string()))?;
    Ok(import_model(&model, opts)?.0)
}

/// Reads an ONNX model, converts it and reads its weights' data (see the module docs); an
/// initializer without readable data (external data, strings, a byte count that contradicts
/// its shape) is an error naming it.
pub fn import_onnx_with_weights(bytes: &[u8], opts: &OnnxOptions) -> Result<OnnxImport, OnnxError> {
    let model = ModelProto::decode(bytes).map_err(|e| OnnxError::Decode(e.to_string()))?;
    let (graph, symbolic, consts) = import_model(&model, opts)?;
    let mut weights = TensorFile::default();
    weights.metadata.insert("source".into(), "onnx".into());
    weights.metadata.insert("graph".into(), graph.name.clone());
    let mut empty_weights = Vec::new();
    for t in graph
        .tensors
        .iter()
        .filter(|t| t.kind == TensorKind::Weight)
    {
        let fail = |message: String| OnnxError::Data {
            tensor: t.name.clone(),
            message,
        };
        let (elem, bytes) = match consts.get(&t.name) {
            Some(Ok(c)) => c,
            Some(Err(m)) => return Err(fail(m.clone())),
            None => {
                return Err(fail(
                    "a sparse initializer, whose data memplan does not read".into(),
                ))
            }
        };
        let shape = t.shape.clone().unwrap_or_default();
        if shape.iter().product::<u64>() == 0 {
            empty_weights.push(t.name.clone());
            continue;
        }
        let dtype = dtype_of(*elem).map_err(fail)?;
        if bytes.len() as u64 != t.size {
            return Err(fail(format!(
                "{} bytes of data for a graph tensor of {} bytes",
                bytes.len(),
                t.size
            )));
        }
        let data = TensorData::new(&t.name, dtype, shape, bytes.to_vec())
            .map_err(|e| fail(e.to_string()))?;
        weights.tensors.insert(t.name.clone(), data);
    }
    Ok(OnnxImport {
        graph,
        weights,
        empty_weights,
        symbolic,
    })
}

/// Reads an ONNX model and converts it into a symbolic graph, keeping the `dim_param`s
/// declared in [`OnnxOptions::symbols`] as symbols (see the module docs). Without declared
/// symbols the document is an ordinary graph (no `symbols`, numeric sizes).
pub fn import_onnx_symbolic(bytes: &[u8], opts: &OnnxOptions) -> Result<SymbolicImport, OnnxError> {
    let model = ModelProto::decode(bytes).map_err(|e| OnnxError::Decode(e.to_string()))?;
    let (graph, symbolic, _) = import_model(&model, opts)?;
    let document = match symbolic {
        Some(doc) => doc,
        None => serde_json::from_str(&graph.to_json()).map_err(|e| {
            OnnxError::Symbolic(format!("the graph's JSON does not read back: {e}"))
        })?,
    };
    let graph = SymbolicGraph::parse(&document.to_string())
        .map_err(|e| OnnxError::Symbolic(e.to_string()))?;
    Ok(SymbolicImport { document, graph })
}

/// Converts a decoded model; returns the graph and the constants' data.
fn import_model<'g>(
    model: &'g ModelProto,
    opts: &OnnxOptions,
) -> Result<(Graph, Option<Value>, Consts<'g>), OnnxError> {
    let graph = model.graph.as_ref().ok_or(OnnxError::NoGraph)?;
    if graph.node.is_empty() {
        return Err(OnnxError::Shape(
            "the ONNX graph has no nodes (a memplan graph needs at least one op)".into(),
        ));
    }
    let mut declared_of: HashMap<&str, Declared> = HashMap::new();
    for v in graph
        .value_info
        .iter()
        .chain(&graph.output)
        .chain(&graph.input)
    {
        if let Some(name) = v.name.as_deref() {
            // Graph inputs/outputs win over value_info (chained last).
            declared_of.insert(name, declared(v));
        }
    }
    check_input_shapes(graph, opts)?;
    let bindings = bind_symbols(graph, &declared_of, opts)?;
    check_symbols(&declared_of, &bindings, opts)?;
    let resolve = |name: &str| -> Result<SymTyped, OnnxError> {
        resolve_value(name, &declared_of, &bindings, opts)
    };
    let mut values = Values::default();
    let mut consts: Consts<'g> = HashMap::new();
    values.add_weights_and_inputs(graph, &resolve, &mut consts, &opts.symbols)?;
    let opset = standard_opset(model);
    let mut folded: HashSet<String> = HashSet::new();
    let outputs: HashSet<&str> = graph
        .output
        .iter()
        .filter_map(|v| v.name.as_deref())
        .collect();
    let mut used_names: HashSet<String> = HashSet::new();
    let mut ops: Vec<Value> = Vec::new();
    for (i, node) in graph.node.iter().enumerate() {
        let mut ctx = NodeContext {
            used_names: &mut used_names,
            values: &mut values,
            outputs: &outputs,
            resolve: &resolve,
            symbols: &opts.symbols,
            consts: &mut consts,
            folded: &mut folded,
            opset,
        };
        if let Some(op) = node_op(node, i, &mut ctx)? {
            ops.push(op);
        }
    }
    for name in &outputs {
        match values.get(name).map(|v| v.kind) {
            Some("output") => {}
            Some(kind) => {
                return Err(OnnxError::Shape(format!(
                    "graph output {name:?} is a graph {kind}, not computed by any node; memplan outputs must be produced by an op"
                )))
            }
            None => {
                return Err(OnnxError::Shape(format!(
                    "graph output {name:?} is produced by no node"
                )))
            }
        }
    }
    let (g, symbolic) = graph_doc(model, graph, opts, &values, &folded, ops)?;
    Ok((g, symbolic, consts))
}

/// The version of the standard (`ai.onnx`, or empty) domain the model imports, if it says.
fn standard_opset(model: &ModelProto) -> Option<i64> {
    model
        .opset_import
        .iter()
        .find(|o| {
            o.domain
                .as_deref()
                .is_none_or(|d| d.is_empty() || d == "ai.onnx")
        })
        .and_then(|o| o.version)
}

/// Every `--input-shape` names a graph input that is not an initializer.
fn check_input_shapes(graph: &GraphProto, opts: &OnnxOptions) -> Result<(), OnnxError> {
    let initializers: HashSet<&str> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .collect();
    let inputs: Vec<&str> = graph
        .input
        .iter()
        .filter_map(|v| v.name.as_deref())
        .filter(|n| !initializers.contains(n))
        .collect();
    for name in opts.input_shapes.keys() {
        if !inputs.contains(&name.as_str()) {
            return Err(OnnxError::InputShape {
                spec: name.clone(),
                message: format!(
                    "the model has no graph input {name:?} (its inputs: {})",
                    inputs.join(", ")
                ),
            });
        }
    }
    Ok(())
}

/// The element type and static shape of value `name`: its `--input-shape` when given, else
/// its declared shape with the symbols bound by `bindings`.
fn resolve_value(
    name: &str,
    declared_of: &HashMap<&str, Declared>,
    bindings: &HashMap<String, u64>,
    opts: &OnnxOptions,
) -> Result<SymTyped, OnnxError> {
    let Some(d) = declared_of.get(name) else {
        return Err(OnnxError::Shape(format!(
            "the model has no type or shape for value {name:?}; {SHAPE_INFERENCE_HINT}"
        )));
    };
    let elem = d.elem_type.ok_or_else(|| {
        OnnxError::Shape(format!(
            "value {name:?} has no element type; {SHAPE_INFERENCE_HINT}"
        ))
    })?;
    if let Some(given) = opts.input_shapes.get(name) {
        return Ok((elem, constants(given.clone())));
    }
    let Some(dims) = &d.dims else {
        return Err(OnnxError::Shape(format!(
            "value {name:?} has no shape; {SHAPE_INFERENCE_HINT}"
        )));
    };
    let mut out = Vec::with_capacity(dims.len());
    for (i, dim) in dims.iter().enumerate() {
        out.push(match dim {
            Dim::Static(v) => Poly::constant(*v),
            Dim::Symbol(s) => symbolic_dim(name, i, s, bindings, &opts.symbols)?,
            Dim::Unknown => {
                return Err(OnnxError::Shape(format!(
                    "value {name:?} dimension {i} is unknown; {SHAPE_INFERENCE_HINT} (with the inputs' shapes fixed)"
                )))
            }
        });
    }
    Ok((elem, out))
}

/// Dimension `i` of value `name`, the `dim_param` `p`: a number when `--input-shape` binds it,
/// the symbol when `--symbol` declares it, else an expression of the grammar over bound and
/// declared symbols (`"2*N"`); anything else is an error naming the value and both options.
fn symbolic_dim(
    name: &str,
    i: usize,
    p: &str,
    bindings: &HashMap<String, u64>,
    symbols: &BTreeMap<String, (u64, u64)>,
) -> Result<Poly, OnnxError> {
    let unbound = |s: &str| {
        let mut m = format!(
            "value {name:?} dimension {i} is the symbol {s:?}, which no --input-shape binds and no --symbol declares; pass --input-shape INPUT=d0,d1,... for the graph input that declares {s:?}, or --symbol {s}=MIN..MAX to keep it symbolic"
        );
        if !symbols.is_empty() && s.starts_with("unk__") {
            m.push_str(&format!(
                " (ONNX shape inference names {s:?} a dimension it computed from others: symbols are supported on dims that only multiply, such as the batch, not on dims that go through arithmetic such as a convolution's spatial size)"
            ));
        }
        OnnxError::Shape(m)
    };
    let lookup = |s: &str| -> Result<Poly, OnnxError> {
        if let Some(&v) = bindings.get(s) {
            Ok(Poly::constant(v))
        } else if symbols.contains_key(s) {
            Ok(Poly::symbol(s))
        } else {
            Err(unbound(s))
        }
    };
    // A dim_param an --input-shape binds is that number whatever its spelling (`batch-size`
    // is no symbol name nor expression of the grammar, but a bound one needs neither).
    if let Some(&v) = bindings.get(p) {
        return Ok(Poly::constant(v));
    }
    if is_symbol_name(p) {
        return lookup(p);
    }
    let expr = Poly::parse(p).map_err(|e| {
        OnnxError::Shape(format!(
            "value {name:?} dimension {i} is {p:?}, which memplan's size expressions cannot write ({e}): symbols are supported on dims that only multiply (batch, sequence length); bind the symbols it uses with --input-shape"
        ))
    })?;
    let overflow = || {
        OnnxError::Shape(format!(
            "value {name:?} dimension {i} ({p:?}) overflows u64"
        ))
    };
    let mut out = Poly::constant(0);
    for (mono, coeff) in expr.terms() {
        let mut term = Poly::constant(coeff);
        for (s, exp) in mono {
            let f = lookup(s)?;
            for _ in 0..*exp {
                term = term.checked_mul(&f).ok_or_else(overflow)?;
            }
        }
        out = out.checked_add(&term).ok_or_else(overflow)?;
    }
    Ok(out)
}

/// Checks the `--symbol` declarations against the model and the `--input-shape` bindings:
/// each names a `dim_param` of the model and none is also bound.
fn check_symbols(
    declared_of: &HashMap<&str, Declared>,
    bindings: &HashMap<String, u64>,
    opts: &OnnxOptions,
) -> Result<(), OnnxError> {
    let mut params: Vec<&str> = declared_of
        .values()
        .filter_map(|d| d.dims.as_ref())
        .flatten()
        .filter_map(|d| match d {
            Dim::Symbol(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    params.sort_unstable();
    params.dedup();
    for (name, &(min, max)) in &opts.symbols {
        let bad = |message: String| OnnxError::Symbol {
            spec: format!("{name}={min}..{max}"),
            message,
        };
        if !is_symbol_name(name) {
            return Err(bad(format!("{name:?} is not a symbol name (a letter or '_' followed by letters, digits or '_')")));
        }
        if min < 1 || min > max {
            return Err(bad("the range must satisfy 1 <= MIN <= MAX".into()));
        }
        if let Some(v) = bindings.get(name) {
            return Err(bad(format!(
                "{name:?} is also bound to {v} by --input-shape; give one or the other"
            )));
        }
        let used = params.iter().any(|p| {
            *p == name || Poly::parse(p).is_ok_and(|e| e.symbols().contains(&name.as_str()))
        });
        if !used {
            return Err(bad(format!(
                "the model has no dimension named {name:?} (its dim_params: {})",
                if params.is_empty() {
                    "none".to_string()
                } else {
                    params.join(", ")
                }
            )));
        }
    }
    Ok(())
}

/// The imported tensors, in the order they were met, by name.
#[derive(Default)]
struct Values {
    values: Vec<Value_>,
    index: HashMap<String, usize>,
}

impl Values {
    fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    fn get(&self, name: &str) -> Option<&Value_> {
        self.index.get(name).map(|&k| &self.values[k])
    }

    /// Adds tensor `name` of element type `elem` and static `shape`.
    fn add(
        &mut self,
        name: &str,
        kind: &'static str,
        elem: i32,
        shape: Vec<u64>,
    ) -> Result<(), OnnxError> {
        let numel = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| {
                OnnxError::Shape(format!("value {name:?}: element count overflows u64"))
            })?;
        let (dtype, size) = element_bytes(name, elem, numel)?;
        self.index.insert(name.to_string(), self.values.len());
        self.values.push(Value_ {
            name: name.to_string(),
            kind,
            dtype,
            shape,
            size,
            sym: None,
        });
        Ok(())
    }

    /// Adds tensor `name` whose dimensions may be expressions: its numeric shape and size are
    /// those at every symbol's max (which bounds them), the expressions are kept besides.
    fn add_dims(
        &mut self,
        name: &str,
        kind: &'static str,
        elem: i32,
        dims: Vec<Poly>,
        symbols: &BTreeMap<String, (u64, u64)>,
    ) -> Result<(), OnnxError> {
        let shape = max_shape(name, &dims, symbols)?;
        self.add(name, kind, elem, shape)?;
        if dims.iter().all(|d| d.as_constant().is_some()) {
            return Ok(());
        }
        let overflow =
            || OnnxError::Shape(format!("value {name:?}: size expression overflows u64"));
        let (_, bytes) = element_type(elem).map_err(|what| OnnxError::ElementType {
            value: name.to_string(),
            elem_type: elem,
            what,
        })?;
        if bytes == 0 {
            return Err(OnnxError::Shape(format!(
                "value {name:?} has a 4-bit element type (two per byte) and a symbolic shape, whose size memplan's expressions cannot write; bind its symbols with --input-shape"
            )));
        }
        let size = dims
            .iter()
            .try_fold(Poly::constant(bytes), |a, d| a.checked_mul(d))
            .ok_or_else(overflow)?;
        if let Some(v) = self.values.last_mut() {
            v.sym = Some((dims, size));
        }
        Ok(())
    }

    /// Adds the weights (dense and sparse initializers), then the graph inputs that are not
    /// initializers.
    fn add_weights_and_inputs<'g>(
        &mut self,
        graph: &'g GraphProto,
        resolve: &dyn Fn(&str) -> Result<SymTyped, OnnxError>,
        consts: &mut Consts<'g>,
        symbols: &BTreeMap<String, (u64, u64)>,
    ) -> Result<(), OnnxError> {
        // Weights: initializers (dense and sparse).
        for t in &graph.initializer {
            let name = t.name.clone().unwrap_or_default();
            if name.is_empty() || self.contains(&name) {
                continue;
            }
            let dims = tensor_dims(t, &format!("initializer {name:?}"))?;
            let elem = t.data_type.unwrap_or(0);
            let numel = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            let data = numel
                .ok_or_else(|| "its element count overflows u64".to_string())
                .and_then(|n| tensor_bytes(t, elem, n))
                .map(|b| (elem, b));
            consts.insert(name.clone(), data);
            self.add(&name, "weight", elem, dims)?;
        }
        for s in &graph.sparse_initializer {
            let Some(v) = &s.values else { continue };
            let name = v.name.clone().unwrap_or_default();
            if name.is_empty() || self.contains(&name) {
                continue;
            }
            let dims = s
                .dims
                .iter()
                .map(|&d| u64::try_from(d).unwrap_or(0))
                .collect();
            self.add(&name, "weight", v.data_type.unwrap_or(0), dims)?;
        }
        // Inputs that are not initializers.
        for v in &graph.input {
            let name = v.name.clone().unwrap_or_default();
            if name.is_empty() || self.contains(&name) {
                continue;
            }
            let (elem, dims) = resolve(&name)?;
            self.add_dims(&name, "input", elem, dims, symbols)?;
        }
        Ok(())
    }
}

/// What converting a node reads and updates.
struct NodeContext<'a, 'g> {
    /// The op names given so far.
    used_names: &'a mut HashSet<String>,
    /// The tensors so far.
    values: &'a mut Values,
    /// The graph outputs' names.
    outputs: &'a HashSet<&'a str>,
    /// A value's element type and shape (dimensions may be expressions).
    resolve: &'a dyn Fn(&str) -> Result<SymTyped, OnnxError>,
    /// The declared symbols.
    symbols: &'a BTreeMap<String, (u64, u64)>,
    /// Constants' data (a `Constant` node adds its value).
    consts: &'a mut Consts<'g>,
    /// Constants some node folded into its attributes (dropped unless read elsewhere).
    folded: &'a mut HashSet<String>,
    /// The standard domain's opset version.
    opset: Option<i64>,
}

/// Converts node `i`: adds its outputs to the values and returns its memplan op (`None` for
/// a `Constant`, which becomes a weight).
fn node_op(
    node: &NodeProto,
    i: usize,
    ctx: &mut NodeContext<'_, '_>,
) -> Result<Option<Value>, OnnxError> {
    let (used_names, outputs, resolve) = (&mut *ctx.used_names, ctx.outputs, ctx.resolve);
    let op_type = node.op_type.clone().unwrap_or_default();
    let node_name = match node.name.as_deref() {
        Some(n) if !n.is_empty() && !used_names.contains(n) => n.to_string(),
        _ => {
            let base = format!("{}_{i}", op_type.to_lowercase());
            let mut n = base.clone();
            let mut k = 1;
            while used_names.contains(&n) {
                n = format!("{base}_{k}");
                k += 1;
            }
            n
        }
    };
    used_names.insert(node_name.clone());
    let fail = |message: String| OnnxError::Node {
        node: node_name.clone(),
        op_type: op_type.clone(),
        message,
    };
    if op_type.is_empty() {
        return Err(fail("the node has no op_type".into()));
    }
    if let Some(a) = node
        .attribute
        .iter()
        .find(|a| a.has_graph || matches!(a.r#type, Some(5) | Some(10)))
    {
        return Err(fail(format!(
            "attribute {:?} holds a subgraph; control flow (If, Loop, Scan) is not supported — unroll or export without it",
            a.name.as_deref().unwrap_or("")
        )));
    }
    let standard = node
        .domain
        .as_deref()
        .is_none_or(|d| d.is_empty() || d == "ai.onnx");
    let values = &mut *ctx.values;
    if standard && op_type == "Constant" {
        let (out, (elem, shape)) = constant(node, resolve).map_err(|e| match e {
            OnnxError::Shape(m) => fail(m),
            other => other,
        })?;
        if values.contains(&out) {
            return Err(fail(format!("writes {out:?}, which already exists")));
        }
        let data = match node.attribute.first().and_then(constant_value) {
            Some(Ok((e, s, bytes))) if (e, &s) == (elem, &shape) => Ok((elem, Cow::Owned(bytes))),
            Some(Ok(_)) => Err("the Constant's value contradicts its declared type".to_string()),
            Some(Err(m)) => Err(m),
            None => Err("a Constant without a dense numeric value (sparse or strings)".to_string()),
        };
        ctx.consts.insert(out.clone(), data);
        values.add(&out, "weight", elem, shape)?;
        return Ok(None);
    }
    let mut inputs = Vec::new();
    for name in node.input.iter().filter(|n| !n.is_empty()) {
        if !values.contains(name) {
            return Err(fail(format!(
                "reads {name:?}, which is no graph input, initializer or output of an earlier node (is the model topologically sorted?)"
            )));
        }
        inputs.push(name.clone());
    }
    let mut outs = Vec::new();
    for name in node.output.iter().filter(|n| !n.is_empty()) {
        if values.contains(name) {
            return Err(fail(format!(
                "writes {name:?}, which is already a graph input, initializer or an earlier node's output"
            )));
        }
        let (elem, dims) = resolve(name)?;
        let kind = if outputs.contains(name.as_str()) {
            "output"
        } else {
            "activation"
        };
        values.add_dims(name, kind, elem, dims, ctx.symbols)?;
        outs.push(name.clone());
    }
    if outs.is_empty() {
        return Err(fail("the node writes no value".into()));
    }
    let shape_of = |n: &str| values.get(n).map(|v| v.shape.clone());
    let size_of = |n: &str| values.get(n).map(|v| v.size);
    let clip = (standard && op_type == "Clip")
        .then(|| clip_bounds(node, ctx.consts))
        .flatten();
    let (ty, attrs) = if let Some((lo, hi)) = clip {
        // A clamp with constant bounds: the bounds become attributes, x the only input.
        ctx.folded
            .extend(node.input.iter().skip(1).filter(|n| !n.is_empty()).cloned());
        inputs.truncate(1);
        let mut a = Map::new();
        a.insert("min_val".into(), json!(lo));
        a.insert("max_val".into(), json!(hi));
        ("hardtanh".to_string(), a)
    } else {
        if let Some(m) = symbolic_padding(node, &op_type, standard, values) {
            return Err(fail(m));
        }
        map_op(node, &op_type, standard, ctx.opset, &shape_of).map_err(fail)?
    };
    let mut op = Map::new();
    op.insert("name".into(), json!(node_name));
    op.insert("type".into(), json!(ty));
    op.insert("inputs".into(), json!(inputs));
    op.insert("outputs".into(), json!(outs));
    let symbolic = inputs
        .iter()
        .chain(&outs)
        .any(|n| values.get(n).is_some_and(|v| v.sym.is_some()));
    if !symbolic {
        if let Some(f) = flops(&ty, node, &inputs, &outs, &shape_of) {
            op.insert("flops".into(), json!(f));
        }
    }
    if !attrs.is_empty() {
        op.insert("attrs".into(), Value::Object(attrs));
    }
    if inplace_candidate(&ty)
        && !inputs.is_empty()
        && size_of(&inputs[0]).is_some()
        && size_of(&inputs[0]) == size_of(&outs[0])
        && sym_size(values, &inputs[0]) == sym_size(values, &outs[0])
        && values.get(&inputs[0]).is_some_and(|v| v.kind != "weight")
    {
        op.insert("inplace".into(), json!([[0, 0]]));
    }
    // Random ops (RandomNormal, RandomUniform(Like), Bernoulli, Multinomial, Dropout — whose
    // training_mode input is data the importer does not read, so training is assumed) may
    // not run twice: a recompute would draw new numbers. Said explicitly in the graph.
    if !crate::ops::recompute::recompute_by_default(&op_type)
        || !crate::ops::recompute::recompute_by_default(&ty)
    {
        op.insert("recompute".into(), json!(false));
    }
    Ok(Some(Value::Object(op)))
}

/// The size expression of value `name`, when it is symbolic.
fn sym_size<'v>(values: &'v Values, name: &str) -> Option<&'v Poly> {
    values.get(name)?.sym.as_ref().map(|(_, size)| size)
}

/// Why a convolution or pooling with `auto_pad: SAME_*` cannot be imported: its padding
/// depends on a spatial dimension of its input that is symbolic (`None` when it does not).
fn symbolic_padding(
    node: &NodeProto,
    op_type: &str,
    standard: bool,
    values: &Values,
) -> Option<String> {
    if !standard
        || !matches!(
            op_type,
            "Conv" | "ConvTranspose" | "MaxPool" | "AveragePool"
        )
    {
        return None;
    }
    let auto = attr_str(node, "auto_pad").unwrap_or_default();
    if auto != "SAME_UPPER" && auto != "SAME_LOWER" {
        return None;
    }
    let x = node.input.first()?;
    let (dims, _) = values.get(x)?.sym.as_ref()?;
    let (d, p) = dims
        .iter()
        .enumerate()
        .skip(2)
        .find(|(_, p)| p.as_constant().is_none())?;
    Some(format!(
        "auto_pad {auto} pads by the spatial size of {x:?}, whose dimension {d} is the expression {:?}; the padding would need arithmetic memplan's size expressions cannot write (symbols are supported on dims that only multiply, such as the batch)",
        p.to_string()
    ))
}

/// The memplan graph document of the imported `values` and `ops`, parsed.
/// Constants in `folded` that no op reads are left out.
fn graph_doc(
    model: &ModelProto,
    graph: &GraphProto,
    opts: &OnnxOptions,
    values: &Values,
    folded: &HashSet<String>,
    ops: Vec<Value>,
) -> Result<(Graph, Option<Value>), OnnxError> {
    let read: HashSet<&str> = ops
        .iter()
        .filter_map(|op| op.get("inputs")?.as_array())
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let opset = standard_opset(model);
    let name = opts
        .name
        .clone()
        .or_else(|| graph.name.clone().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "onnx_model".to_string());
    let kept = || {
        values
            .values
            .iter()
            .filter(|v| !folded.contains(&v.name) || read.contains(v.name.as_str()))
    };
    let mut doc = json!({
        "format": crate::graph::GRAPH_FORMAT,
        "name": name,
        "alignment": opts.alignment.unwrap_or(DEFAULT_ALIGNMENT),
        "meta": {
            "source": "onnx",
            "producer": model.producer_name,
            "ir_version": model.ir_version,
            "opset": opset,
            "input_shapes": opts.input_shapes,
        },
        "tensors": kept().map(|v| json!({
            "name": v.name, "size": v.size, "shape": v.shape, "dtype": v.dtype, "kind": v.kind,
        })).collect::<Vec<_>>(),
        "ops": ops,
    });
    if opts.symbols.is_empty() {
        return Ok((Graph::parse(&doc.to_string())?, None));
    }
    // Symbolic: the same document with `symbols` and expressions where a dimension is one.
    let symbols: Map<String, Value> = opts
        .symbols
        .iter()
        .map(|(s, &(min, max))| (s.clone(), json!({"min": min, "max": max})))
        .collect();
    if let Some(meta) = doc.get_mut("meta").and_then(Value::as_object_mut) {
        meta.insert("symbols".into(), Value::Object(symbols.clone()));
    }
    doc["tensors"] = kept()
        .map(|v| match &v.sym {
            None => json!({
                "name": v.name, "size": v.size, "shape": v.shape, "dtype": v.dtype, "kind": v.kind,
            }),
            Some((dims, size)) => json!({
                "name": v.name,
                "size": size.to_string(),
                "shape": dims.iter().map(|d| match d.as_constant() {
                    Some(c) => json!(c),
                    None => json!(d.to_string()),
                }).collect::<Vec<_>>(),
                "dtype": v.dtype,
                "kind": v.kind,
            }),
        })
        .collect();
    if let Some(o) = doc.as_object_mut() {
        o.insert("symbols".into(), Value::Object(symbols));
    }
    let sg =
        SymbolicGraph::parse(&doc.to_string()).map_err(|e| OnnxError::Symbolic(e.to_string()))?;
    let max = sg
        .instantiate(&sg.max_corner())
        .map_err(|e| OnnxError::Symbolic(e.to_string()))?;
    Ok((max, Some(doc)))
}

/// Binds every symbolic dimension declared by a graph input to the `--input-shape` given for
/// it; checks ranks and static dimensions.
fn bind_symbols(
    graph: &GraphProto,
    declared_of: &HashMap<&str, Declared>,
    opts: &OnnxOptions,
) -> Result<HashMap<String, u64>, OnnxError> {
    let mut bindings: HashMap<String, u64> = HashMap::new();
    for v in &graph.input {
        let Some(name) = v.name.as_deref() else {
            continue;
        };
        let Some(given) = opts.input_shapes.get(name) else {
            continue;
        };
        let spec = || format!("{name}={}", join(given));
        let Some(dims) = declared_of.get(name).and_then(|d| d.dims.as_ref()) else {
            continue; // no declared shape: the given one is taken as is
        };
        if dims.len() != given.len() {
            return Err(OnnxError::InputShape {
                spec: spec(),
                message: format!(
                    "the model declares {name:?} with {} dimensions, not {}",
                    dims.len(),
                    given.len()
                ),
            });
        }
        // Symbols come from the input's declaration in the model itself (not value_info).
        let own = declared(v).dims.unwrap_or_default();
        for (i, (d, &g)) in own.iter().zip(given).enumerate() {
            match d {
                Dim::Static(s) if *s != g => {
                    return Err(OnnxError::InputShape {
                        spec: spec(),
                        message: format!(
                            "the model fixes dimension {i} of {name:?} to {s}; re-export the model with a dynamic axis there to change it"
                        ),
                    })
                }
                Dim::Symbol(sym) => {
                    if let Some(&prev) = bindings.get(sym.as_str()) {
                        if prev != g {
                            return Err(OnnxError::InputShape {
                                spec: spec(),
                                message: format!(
                                    "symbol {sym:?} is already bound to {prev} by another input"
                                ),
                            });
                        }
                    }
                    bindings.insert(sym.clone(), g);
                }
                _ => {}
            }
        }
    }
    Ok(bindings)
}

fn join(d: &[u64]) -> String {
    d.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// A `Constant` node's output as a weight: shape and type from its `value*` attribute.
fn constant(
    node: &NodeProto,
    resolve: &dyn Fn(&str) -> Result<SymTyped, OnnxError>,
) -> Result<(String, Typed), OnnxError> {
    let Some(out) = node.output.first().filter(|o| !o.is_empty()) else {
        return Err(OnnxError::Shape("the Constant node writes no value".into()));
    };
    let resolve = |name: &str| -> Result<Typed, OnnxError> {
        let (elem, dims) = resolve(name)?;
        let shape = dims
            .iter()
            .map(Poly::as_constant)
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| {
                OnnxError::Shape(format!(
                    "Constant {name:?} has a symbolic shape; a weight's shape must be static"
                ))
            })?;
        Ok((elem, shape))
    };
    let attr = node.attribute.first();
    let (elem, shape) = match attr.map(|a| (a.name.as_deref().unwrap_or(""), a)) {
        Some(("value", a)) => match &a.t {
            Some(t) => (t.data_type.unwrap_or(0), tensor_dims(t, "its value")?),
            None => resolve(out)?,
        },
        Some(("value_float", _)) => (1, vec![]),
        Some(("value_int", _)) => (7, vec![]),
        Some(("value_floats", a)) => (1, vec![a.floats.len() as u64]),
        Some(("value_ints", a)) => (7, vec![a.ints.len() as u64]),
        _ => resolve(out)?,
    };
    Ok((out.clone(), (elem, shape)))
}

/// The bounds of a `Clip` when they are constants: attributes `min`/`max` (opset < 11) or
/// inputs 1 and 2 holding one f32/f64 each; an absent bound is ±f32::MAX. `None` when a
/// bound is computed at run time (the op then keeps its ONNX type).
fn clip_bounds(node: &NodeProto, consts: &Consts<'_>) -> Option<(f64, f64)> {
    let bound = |k: usize, attr_name: &str, default: f64| -> Option<f64> {
        match node.input.get(k).filter(|n| !n.is_empty()) {
            Some(name) => match consts.get(name.as_str())? {
                Ok((elem, bytes)) => scalar_f64(*elem, bytes),
                Err(_) => None,
            },
            None => Some(
                attr(node, attr_name)
                    .and_then(|a| a.f)
                    .map_or(default, f64::from),
            ),
        }
    };
    let max = f64::from(f32::MAX);
    Some((bound(1, "min", -max)?, bound(2, "max", max)?))
}

fn attr<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute
        .iter()
        .find(|a| a.name.as_deref() == Some(name))
}

fn attr_ints(node: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(node, name).map(|a| a.ints.clone())
}

fn attr_int(node: &NodeProto, name: &str) -> Option<i64> {
    attr(node, name).and_then(|a| a.i)
}

fn attr_str(node: &NodeProto, name: &str) -> Option<String> {
    attr(node, name)
        .and_then(|a| a.s.as_ref())
        .map(|s| String::from_utf8_lossy(s).into_owned())
}

/// Every attribute as JSON (for ops without a mapping), sorted by name.
fn raw_attrs(node: &NodeProto) -> Map<String, Value> {
    let mut sorted: Vec<&AttributeProto> = node.attribute.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut m = Map::new();
    for a in sorted {
        let name = a.name.clone().unwrap_or_default();
        let v = match a.r#type {
            Some(1) => json!(a.f),
            Some(2) => json!(a.i),
            Some(3) => json!(a
                .s
                .as_ref()
                .map(|s| String::from_utf8_lossy(s).into_owned())),
            Some(6) => json!(a.floats),
            Some(7) => json!(a.ints),
            Some(8) => json!(a
                .strings
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()),
            Some(4) => json!(a.t.as_ref().map(|t| t.dims.clone())),
            _ => {
                if let Some(i) = a.i {
                    json!(i)
                } else if let Some(f) = a.f {
                    json!(f)
                } else if !a.ints.is_empty() {
                    json!(a.ints)
                } else if !a.floats.is_empty() {
                    json!(a.floats)
                } else {
                    continue;
                }
            }
        };
        m.insert(name, v);
    }
    m
}

/// `(h, w)` pair from a 2-element ONNX list, or `default`.
fn pair(v: Option<Vec<i64>>, default: i64) -> Option<[i64; 2]> {
    match v.as_deref() {
        None | Some([]) => Some([default, default]),
        Some(&[a, b]) => Some([a, b]),
        Some(&[a]) => Some([a, a]),
        _ => None,
    }
}

/// Symmetric `(top, left)` padding from ONNX `pads` (`[top, left, bottom, right]`) or
/// `auto_pad`; `None` when asymmetric (then the raw `pads` are kept). An `auto_pad` whose
/// padding does not fit in i64 (absurd strides, kernel or dilations, or an input dimension
/// over i64) is an error naming the attributes.
fn padding(
    node: &NodeProto,
    input: Option<&[u64]>,
    kernel: [i64; 2],
    stride: [i64; 2],
    dilation: [i64; 2],
) -> Result<Option<[i64; 2]>, String> {
    let auto = attr_str(node, "auto_pad").unwrap_or_default();
    if auto == "SAME_UPPER" || auto == "SAME_LOWER" {
        let Some(x) = input.filter(|s| s.len() == 4) else {
            return Ok(None);
        };
        let mut pad = [0; 2];
        for d in 0..2 {
            let total = same_padding_total(x[2 + d], stride[d], kernel[d], dilation[d])
                .ok_or_else(|| {
                    format!(
                        "auto_pad {auto} with strides {stride:?}, kernel {kernel:?} and                          dilations {dilation:?} on an input of shape {x:?}: the padding                          overflows a 64-bit integer"
                    )
                })?;
            if total % 2 != 0 {
                return Ok(None);
            }
            pad[d] = total / 2;
        }
        return Ok(Some(pad));
    }
    Ok(match attr_ints(node, "pads").as_deref() {
        None | Some([]) => Some([0, 0]),
        Some(&[t, l, b, r]) if t == b && l == r => Some([t, l]),
        _ => None,
    })
}

/// ONNX's total `SAME_*` padding along one axis of `size`:
/// `max(0, (ceil(size / stride) - 1) · stride + (kernel - 1) · dilation + 1 - size)`, with
/// strides below 1 taken as 1; `None` when a step overflows i64.
fn same_padding_total(size: u64, stride: i64, kernel: i64, dilation: i64) -> Option<i64> {
    let (size, s) = (i64::try_from(size).ok()?, stride.max(1));
    let out = size.checked_add(s - 1)? / s;
    let reach = (kernel.checked_sub(1)?).checked_mul(dilation)?;
    let total = (out - 1)
        .checked_mul(s)?
        .checked_add(reach)?
        .checked_add(1)?
        .checked_sub(size)?;
    Some(total.max(0))
}

/// memplan op type and attributes for an ONNX node.
fn map_op(
    node: &NodeProto,
    op_type: &str,
    standard: bool,
    opset: Option<i64>,
    shape_of: &dyn Fn(&str) -> Option<Vec<u64>>,
) -> Result<(String, Map<String, Value>), String> {
    let first_shape = node.input.first().and_then(|n| shape_of(n));
    let first = first_shape.as_deref();
    let mut a = Map::new();
    if !standard {
        return Ok((op_type.to_lowercase(), raw_attrs(node)));
    }
    let simple = |t: &str| (t.to_string(), Map::new());
    Ok(match op_type {
        "Conv" | "ConvTranspose" if first.is_some_and(|s| s.len() == 4) => {
            let weight = node.input.get(1).and_then(|n| shape_of(n));
            let kernel = pair(attr_ints(node, "kernel_shape"), 1)
                .or_else(|| {
                    weight
                        .filter(|w| w.len() == 4)
                        .map(|w| [w[2] as i64, w[3] as i64])
                })
                .unwrap_or([1, 1]);
            let stride = pair(attr_ints(node, "strides"), 1).unwrap_or([1, 1]);
            let dilation = pair(attr_ints(node, "dilations"), 1).unwrap_or([1, 1]);
            a.insert("stride".into(), json!(stride));
            match padding(node, first, kernel, stride, dilation)? {
                Some(p) => a.insert("padding".into(), json!(p)),
                None => a.insert("pads".into(), json!(attr_ints(node, "pads"))),
            };
            a.insert("dilation".into(), json!(dilation));
            a.insert("transposed".into(), json!(op_type == "ConvTranspose"));
            a.insert("groups".into(), json!(attr_int(node, "group").unwrap_or(1)));
            if op_type == "ConvTranspose" {
                if let Some(op) = attr_ints(node, "output_padding") {
                    a.insert("output_padding".into(), json!(op));
                }
            }
            ("conv2d".into(), a)
        }
        "MaxPool" | "AveragePool" if first.is_some_and(|s| s.len() == 4) => {
            let kernel = pair(attr_ints(node, "kernel_shape"), 1).unwrap_or([1, 1]);
            let stride = pair(attr_ints(node, "strides"), 1).unwrap_or([1, 1]);
            let dilation = pair(attr_ints(node, "dilations"), 1).unwrap_or([1, 1]);
            a.insert("kernel_size".into(), json!(kernel));
            a.insert("stride".into(), json!(stride));
            match padding(node, first, kernel, stride, dilation)? {
                Some(p) => a.insert("padding".into(), json!(p)),
                None => a.insert("pads".into(), json!(attr_ints(node, "pads"))),
            };
            a.insert("dilation".into(), json!(dilation));
            a.insert(
                "ceil_mode".into(),
                json!(attr_int(node, "ceil_mode").unwrap_or(0) != 0),
            );
            if op_type == "MaxPool" {
                if node.output.get(1).is_some_and(|o| !o.is_empty()) {
                    // ONNX's Indices flatten over N·C·H·W (PyTorch's: within each plane).
                    a.insert("indices_layout".into(), json!("nchw"));
                }
                ("max_pool2d".into(), a)
            } else {
                a.insert(
                    "count_include_pad".into(),
                    json!(attr_int(node, "count_include_pad").unwrap_or(0) != 0),
                );
                ("avg_pool2d".into(), a)
            }
        }
        "GlobalAveragePool" => simple("adaptive_avg_pool2d"),
        "GlobalMaxPool" => simple("adaptive_max_pool2d"),
        "Gemm" => {
            // Y = A · op(B) + C: `linear` (weight [N, K], transB = 1) or, with transB = 0,
            // `linear` with `trans_b: false` (weight [K, N]). Scaled or transposed-A forms
            // keep the type `gemm` (no real kernel).
            let plain = attr_int(node, "transA").unwrap_or(0) == 0
                && attr(node, "alpha").and_then(|x| x.f).unwrap_or(1.0) == 1.0
                && attr(node, "beta").and_then(|x| x.f).unwrap_or(1.0) == 1.0;
            match attr_int(node, "transB").unwrap_or(0) {
                1 if plain => simple("linear"),
                0 if plain => {
                    a.insert("trans_b".into(), json!(false));
                    ("linear".into(), a)
                }
                _ => ("gemm".into(), raw_attrs(node)),
            }
        }
        "MatMul" => simple("matmul"),
        "BatchNormalization" => {
            let eps = attr(node, "epsilon").and_then(|x| x.f).unwrap_or(1e-5);
            a.insert("eps".into(), json!(eps));
            a.insert("training".into(), json!(false));
            ("batch_norm".into(), a)
        }
        "Relu" => simple("relu"),
        "Sigmoid" => simple("sigmoid"),
        "Tanh" => simple("tanh"),
        "Neg" => simple("neg"),
        "Gelu" => simple("gelu"),
        "Add" => simple("add"),
        "Sub" => simple("sub"),
        "Mul" => simple("mul"),
        "Div" => simple("div"),
        "Softmax" => {
            // Before opset 13, Softmax flattens the input to 2-D at `axis` (default 1): the
            // same as the last dimension only when `axis` is the last one.
            let rank = first.map_or(0, <[u64]>::len) as i64;
            let axis = if opset.is_some_and(|v| v < 13) {
                let axis = attr_int(node, "axis").unwrap_or(1);
                let axis = if axis < 0 { axis + rank } else { axis };
                if axis == rank - 1 {
                    -1
                } else {
                    a.insert("coerced_2d".into(), json!(true));
                    axis
                }
            } else {
                attr_int(node, "axis").unwrap_or(-1)
            };
            a.insert("dim".into(), json!(axis));
            ("softmax".into(), a)
        }
        "Concat" => {
            a.insert("dim".into(), json!(attr_int(node, "axis").unwrap_or(0)));
            ("concat".into(), a)
        }
        "ReduceMean" | "ReduceSum" => {
            let mut m = raw_attrs(node);
            if let Some(k) = m.remove("keepdims") {
                m.insert("keepdim".into(), json!(k.as_i64().unwrap_or(1) != 0));
            }
            if let Some(axes) = m.remove("axes") {
                m.insert("dim".into(), axes);
            }
            let t = if op_type == "ReduceMean" {
                "mean"
            } else {
                "sum"
            };
            (t.into(), m)
        }
        "Flatten" | "Reshape" | "Squeeze" | "Unsqueeze" => ("reshape".into(), raw_attrs(node)),
        "Identity" => simple("clone"),
        _ => (op_type.to_lowercase(), raw_attrs(node)),
    })
}

/// Elementwise and reshape-like op types that may write over their first input.
fn inplace_candidate(ty: &str) -> bool {
    matches!(
        ty,
        "relu"
            | "sigmoid"
            | "tanh"
            | "neg"
            | "gelu"
            | "add"
            | "sub"
            | "mul"
            | "div"
            | "reshape"
            | "clip"
            | "hardtanh"
            | "leakyrelu"
            | "hardswish"
            | "hardsigmoid"
            | "elu"
            | "selu"
            | "softplus"
            | "exp"
            | "sqrt"
            | "erf"
            | "pow"
            | "cast"
            | "dropout"
    )
}

/// Work estimate (flops) where it is standard: 2·MACs for convolutions and products, one
/// per output element for elementwise ops.
fn flops(
    ty: &str,
    node: &NodeProto,
    inputs: &[String],
    outs: &[String],
    shape_of: &dyn Fn(&str) -> Option<Vec<u64>>,
) -> Option<f64> {
    let numel = |s: &[u64]| s.iter().map(|&d| d as f64).product::<f64>();
    let out = shape_of(outs.first()?)?;
    match ty {
        "conv2d" => {
            let w = shape_of(inputs.get(1)?)?;
            if w.len() != 4 {
                return None;
            }
            let transposed = attr(node, "output_padding").is_some()
                || node.op_type.as_deref() == Some("ConvTranspose");
            if transposed {
                let x = shape_of(inputs.first()?)?;
                // Each input element scatters into C_out/groups · kh · kw outputs.
                Some(2.0 * numel(&x) * w[1] as f64 * w[2] as f64 * w[3] as f64)
            } else {
                Some(2.0 * numel(&out) * w[1] as f64 * w[2] as f64 * w[3] as f64)
            }
        }
        "matmul" | "linear" | "gemm" => {
            let a = shape_of(inputs.first()?)?;
            let k = if attr_int(node, "transA").unwrap_or(0) == 1 {
                *a.first()?
            } else {
                *a.last()?
            };
            Some(2.0 * numel(&out) * k as f64)
        }
        t if inplace_candidate(t) && t != "reshape" && t != "cast" && t != "dropout" => {
            Some(numel(&out))
        }
        "batch_norm" | "softmax" | "max_pool2d" | "avg_pool2d" | "mean" | "sum" => {
            Some(numel(&shape_of(inputs.first()?)?))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_shapes_parse_and_bad_ones_name_the_problem() {
        assert_eq!(
            parse_input_shape("x=1,3,224,224").unwrap(),
            ("x".into(), vec![1, 3, 224, 224])
        );
        assert_eq!(parse_input_shape("a=b=2").unwrap(), ("a=b".into(), vec![2]));
        assert_eq!(parse_input_shape("s=").unwrap(), ("s".into(), vec![]));
        for bad in ["x", "=1,2", "x=1,-3", "x=1,,2", "x=a", "x=0,3"] {
            let e = parse_input_shape(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
        let e = parse_input_shape("x=0,3").unwrap_err().to_string();
        assert!(
            e.ends_with("dimension \"0\" is 0: every dimension must be at least 1"),
            "{e}"
        );
    }

    #[test]
    fn element_sizes_follow_the_onnx_data_types() {
        assert_eq!(element_bytes("v", 1, 6).unwrap(), ("f32", 24));
        assert_eq!(element_bytes("v", 7, 2).unwrap(), ("i64", 16));
        assert_eq!(element_bytes("v", 10, 3).unwrap(), ("f16", 6));
        assert_eq!(element_bytes("v", 21, 5).unwrap(), ("u4", 3));
        // Zero elements still take one element: sizes are > 0.
        assert_eq!(element_bytes("v", 1, 0).unwrap(), ("f32", 4));
        let e = element_bytes("names", 8, 4).unwrap_err().to_string();
        assert!(e.contains("names") && e.contains("STRING"), "{e}");
    }

    #[test]
    fn same_padding_is_computed_from_the_input_size() {
        let node = NodeProto {
            attribute: vec![AttributeProto {
                name: Some("auto_pad".into()),
                s: Some(b"SAME_UPPER".to_vec()),
                r#type: Some(3),
                ..Default::default()
            }],
            ..Default::default()
        };
        // 3×3, stride 1 on 8×8: total padding 2 → 1 each side.
        assert_eq!(
            padding(&node, Some(&[1, 3, 8, 8]), [3, 3], [1, 1], [1, 1]),
            Ok(Some([1, 1]))
        );
        // 2×2, stride 1: total 1 is odd → asymmetric, no symmetric padding.
        assert_eq!(
            padding(&node, Some(&[1, 3, 8, 8]), [2, 2], [1, 1], [1, 1]),
            Ok(None)
        );
    }

    /// Seen while seeding the `onnx_decode` fuzz target with `auto_pad` models (crafted from
    /// the code, then crashed the target): a Conv with `auto_pad: SAME_UPPER` and a stride of
    /// i64::MAX overflowed the padding arithmetic (a panic in debug builds, a silently
    /// dropped padding in release ones).
    #[test]
    fn a_same_padded_conv_whose_stride_overflows_the_padding_is_refused_not_a_panic() {
        const MODEL: &[u8] =
            b":\x95\x01\x0aG\x0a\x01x\x0a\x01w\x12\x01y\x1a\x01c\x22\x04Conv*\x19\x0a\x08auto_pad\
          \x22\x0aSAME_UPPER\xa0\x01\x03*\x18\x0a\x07strides@\xff\xff\xff\xff\xff\xff\xff\xff\
          \x7f@\x01\xa0\x01\x07\x12\x01g*\x0d\x08\x01\x08\x01\x08\x03\x08\x03\x10\x01B\x01wZ\
          \x1b\x0a\x01x\x12\x16\x0a\x14\x08\x01\x12\x10\x0a\x02\x08\x01\x0a\x02\x08\x01\x0a\
          \x02\x08\x02\x0a\x02\x08\x02b\x1b\x0a\x01y\x12\x16\x0a\x14\x08\x01\x12\x10\x0a\x02\
          \x08\x01\x0a\x02\x08\x01\x0a\x02\x08\x01\x0a\x02\x08\x02";
        let err = import_onnx(MODEL, &OnnxOptions::default()).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, OnnxError::Node { .. }), "{msg}");
        assert!(
            msg.contains("node \"c\" (Conv)")
                && msg.contains("auto_pad SAME_UPPER with strides [9223372036854775807, 1]")
                && msg.contains("overflows"),
            "{msg}"
        );
        assert_eq!(same_padding_total(2, 1, i64::MIN, 2), None);
        assert_eq!(same_padding_total(u64::MAX, 1, 3, 1), None);
        assert_eq!(same_padding_total(8, 2, 3, 1), Some(1));
    }
}
