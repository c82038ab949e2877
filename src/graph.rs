//! The graph model (memplan-graph/1, docs/FORMATS.md §1): tensors and ops with newtype ids, parsed
//! from JSON and checked against every rule of the format. All checks are iterative (a
//! 1,000,000-op chain parses and validates without deep recursion) and all byte arithmetic is
//! checked.

pub mod fused;

use memplan_solver::order::{Node, OrderError, OrderProblem, Value};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use thiserror::Error;

/// The format string of a graph file.
pub const GRAPH_FORMAT: &str = crate::json_path::GRAPH;

/// The sample graph bundled with memplan, as memplan-graph/1 text:
/// `samples/resnet_block.train.json`, two ResNet basic blocks, training step (what
/// `memplan plan sample` plans, and what the tests use as their small real graph).
pub const SAMPLE_JSON: &str = include_str!("../samples/resnet_block.train.json");
/// Alignment (bytes) used when a graph does not give one.
pub const DEFAULT_ALIGNMENT: u64 = 256;

/// The largest `flops` an op (or a fused op's member) may give: far above any real op, and
/// small enough that the modelled times summed over any graph stay finite.
pub const MAX_OP_FLOPS: f64 = 1e30;

/// The largest `time_us` an op (or a fused op's member) may give (about 31.7 years): far
/// above any real op, and small enough that the modelled times summed over any graph stay
/// finite.
pub const MAX_OP_TIME_US: f64 = 1e15;

/// Checks an op's `flops` or `time_us` (`what`) value `x`: finite, non-negative and at most
/// [`MAX_OP_FLOPS`] or [`MAX_OP_TIME_US`]; what is wrong otherwise.
pub fn check_op_figure(what: &str, x: f64) -> Result<(), String> {
    let max = if what == "flops" {
        MAX_OP_FLOPS
    } else {
        MAX_OP_TIME_US
    };
    if !x.is_finite() || x < 0.0 {
        Err(format!("{x} is not a finite non-negative number"))
    } else if x > max {
        Err(format!(
            "{x:e} is over the largest accepted {max:e} (modelled times summed over the \
             graph must stay finite)"
        ))
    } else {
        Ok(())
    }
}

/// Index of a tensor in [`Graph::tensors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);

/// Index of an op in [`Graph::ops`] (its position in the listed order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u32);

impl TensorId {
    /// As a vector index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl OpId {
    /// As a vector index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Role of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TensorKind {
    /// Graph input: valid before the first op.
    Input,
    /// Parameter or constant: valid all run, stored in the weights region.
    Weight,
    /// Intermediate produced by exactly one op.
    Activation,
    /// Produced by exactly one op and still valid when the graph ends.
    Output,
}

impl TensorKind {
    /// The name used in the format.
    pub fn as_str(self) -> &'static str {
        match self {
            TensorKind::Input => "input",
            TensorKind::Weight => "weight",
            TensorKind::Activation => "activation",
            TensorKind::Output => "output",
        }
    }
}

/// A tensor: one distinct storage.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// Unique name.
    pub name: String,
    /// Size in bytes (> 0).
    pub size: u64,
    /// Offset alignment in bytes (power of two).
    pub alignment: u64,
    /// Role.
    pub kind: TensorKind,
    /// Shape, when given (informative).
    pub shape: Option<Vec<u64>>,
    /// Element type, when given (informative).
    pub dtype: Option<String>,
}

/// An op.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    /// Unique name.
    pub name: String,
    /// Free-text type (`conv2d`, `relu`, an ATen name, ...).
    pub op_type: String,
    /// Tensors read, as listed (may repeat).
    pub inputs: Vec<TensorId>,
    /// Tensors written (at least one, distinct).
    pub outputs: Vec<TensorId>,
    /// Work estimate, when given.
    pub flops: Option<f64>,
    /// Measured run time in microseconds, when given.
    pub time_us: Option<f64>,
    /// Scratch bytes reserved only while the op runs (0 for none).
    pub workspace: u64,
    /// Op attributes, when given.
    pub attrs: Option<serde_json::Value>,
    /// `(output index, input index)` pairs that may share memory when the input dies here.
    pub inplace: Vec<(usize, usize)>,
    /// For a fused op (optional field `fused`, see [`crate::fused`]): its members, run in
    /// sequence inside the op; `None` for an ordinary op.
    pub fused: Option<crate::fused::Fused>,
    /// The optional field `recompute` (memplan extension): `Some(false)` forbids re-executing
    /// the op (a budgeted plan must spill or keep its outputs instead), `Some(true)` allows
    /// it, `None` (absent) leaves it to the op type's default. What the planner and the
    /// validator honour is [`crate::ops::may_recompute`], which combines both.
    pub recompute: Option<bool>,
    /// The optional field `stream` (memplan extension, parallel plans): the stream the op
    /// must run on; `None` leaves it to the planner (`streams` option).
    pub stream: Option<u32>,
}

/// The most streams a plan may use (stream ids are `0..MAX_STREAMS`; an op's `stream` too).
pub const MAX_STREAMS: u32 = 64;

/// A validated graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    /// Graph name.
    pub name: String,
    /// Default tensor alignment and the workspace alignment (bytes).
    pub alignment: u64,
    /// Free-form metadata, when given.
    pub meta: Option<serde_json::Value>,
    /// Tensors by [`TensorId`].
    pub tensors: Vec<Tensor>,
    /// Ops by [`OpId`], in the listed order.
    pub ops: Vec<Op>,
    /// Producer of each tensor (`None` for inputs and weights).
    pub producer: Vec<Option<OpId>>,
}

/// A rule of the graph format that the input breaks, naming the culprit.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum GraphError {
    /// The file is not valid JSON or does not have the expected structure.
    #[error("graph JSON error at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the parser expected.
        message: String,
    },
    /// A graph handed over already read as JSON (a plan's `rewritten_graph`, a symbolic
    /// graph at a binding) does not have the expected structure; the message starts with the
    /// path to the culprit (it has no line and column: the text it came from is not at hand).
    #[error("graph JSON error: {message}")]
    Document {
        /// What is wrong, starting with the path (`tensors[5] ("x").size: ...`).
        message: String,
    },
    /// Wrong or missing `format`.
    #[error(
        "format is {found:?}, expected \"{GRAPH_FORMAT}\"{}",
        crate::json_path::kind_hint(found)
    )]
    Format {
        /// The format string found.
        found: String,
    },
    /// A tensor or op has an empty name.
    #[error("{what} #{index} has an empty name")]
    EmptyName {
        /// "tensor" or "op".
        what: &'static str,
        /// Position in its list.
        index: usize,
    },
    /// Two tensors share a name.
    #[error("tensor {0:?} is defined twice (tensor names must be unique)")]
    DuplicateTensor(String),
    /// Two ops share a name.
    #[error("op {0:?} is defined twice (op names must be unique)")]
    DuplicateOp(String),
    /// A tensor has size 0.
    #[error("tensor {0:?} has size 0 (sizes must be > 0)")]
    ZeroSize(String),
    /// An alignment is not a power of two.
    #[error("{what} alignment {alignment} is not a power of two")]
    BadAlignment {
        /// "graph" or `tensor "name"`.
        what: String,
        /// The alignment.
        alignment: u64,
    },
    /// An op names a tensor that does not exist.
    #[error("op {op:?} {role} unknown tensor {tensor:?}")]
    UnknownTensor {
        /// The op.
        op: String,
        /// "reads" or "writes".
        role: &'static str,
        /// The missing tensor name.
        tensor: String,
    },
    /// An op has no outputs.
    #[error("op {0:?} has no outputs (every op writes at least one tensor)")]
    NoOutputs(String),
    /// An op lists the same output twice.
    #[error("op {op:?} lists output {tensor:?} twice")]
    RepeatedOutput {
        /// The op.
        op: String,
        /// The tensor.
        tensor: String,
    },
    /// An activation or output tensor is written by no op.
    #[error("{kind} tensor {tensor:?} is produced by no op (each activation/output needs exactly one producer)")]
    NotProduced {
        /// The tensor.
        tensor: String,
        /// Its kind.
        kind: &'static str,
    },
    /// A tensor is written by two ops.
    #[error("tensor {tensor:?} is produced by two ops, {first:?} and {second:?}")]
    ProducedTwice {
        /// The tensor.
        tensor: String,
        /// First producer.
        first: String,
        /// Second producer.
        second: String,
    },
    /// An input or weight tensor is written by an op.
    #[error(
        "{kind} tensor {tensor:?} is produced by op {op:?} (inputs and weights have no producer)"
    )]
    ProducedConstant {
        /// The tensor.
        tensor: String,
        /// Its kind.
        kind: &'static str,
        /// The op writing it.
        op: String,
    },
    /// An in-place pair indexes outside the op's inputs or outputs.
    #[error("op {op:?} inplace pair [{output}, {input}] is out of range ({outputs} outputs, {inputs} inputs)")]
    BadInplace {
        /// The op.
        op: String,
        /// Output index given.
        output: usize,
        /// Input index given.
        input: usize,
        /// Number of outputs.
        outputs: usize,
        /// Number of inputs.
        inputs: usize,
    },
    /// A numeric field is negative, fractional or not finite where it must not be.
    #[error("{what}: {message}")]
    BadNumber {
        /// Where (`op "x" workspace`, ...).
        what: String,
        /// What is wrong.
        message: String,
    },
    /// The ops form a cycle.
    #[error("ops form a cycle: {}", .ops.join(" -> "))]
    Cycle {
        /// Op names on the cycle, in dependency order.
        ops: Vec<String>,
    },
    /// An op's `stream` is not below [`MAX_STREAMS`].
    #[error(
        "op {op:?} stream is {stream}, expected a stream id below {}",
        MAX_STREAMS
    )]
    BadStream {
        /// The op.
        op: String,
        /// The stream given.
        stream: u32,
    },
    /// An op's `recompute` field is not a boolean.
    #[error("op {op:?} recompute is {found}, expected true or false")]
    BadRecompute {
        /// The op.
        op: String,
        /// The JSON value found.
        found: String,
    },
    /// A fused op's member list breaks a rule of the `fused` extension ([`crate::fused`]).
    #[error("fused op {op:?}: {message}")]
    BadFused {
        /// The fused op.
        op: String,
        /// What is wrong, naming the member and tensor.
        message: String,
    },
    /// Byte arithmetic overflowed u64.
    #[error("{0} overflows u64")]
    Overflow(String),
    /// More tensors or ops than ids can address.
    #[error("graph has more than {} tensors or ops", u32::MAX)]
    TooLarge,
    /// The document declares `symbols`: a symbolic graph (`crate::symbolic`), which this
    /// concrete parser does not read.
    #[error(
        "a symbolic graph (it declares symbols {symbols}): plan it once for the whole range \
         (`memplan plan`, `POST /v1/plan/symbolic`, `memplan.plan` in Python), or instantiate it \
         at a binding first (`memplan instantiate GRAPH {example}`, `POST /v1/instantiate`)"
    )]
    Symbolic {
        /// The declared symbols, comma-separated.
        symbols: String,
        /// An example binding, `B=...`.
        example: String,
    },
}

#[derive(Serialize)]
struct OutGraph<'a> {
    format: &'static str,
    name: &'a str,
    alignment: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    meta: Option<&'a serde_json::Value>,
    tensors: Vec<OutTensor<'a>>,
    ops: Vec<OutOp<'a>>,
}

#[derive(Serialize)]
struct OutTensor<'a> {
    name: &'a str,
    size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    shape: Option<&'a [u64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dtype: Option<&'a str>,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    alignment: Option<u64>,
}

#[derive(Serialize)]
struct OutOp<'a> {
    name: &'a str,
    #[serde(rename = "type")]
    op_type: &'a str,
    inputs: Vec<&'a str>,
    outputs: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flops: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    workspace: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    attrs: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inplace: Option<&'a [(usize, usize)]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fused: Option<Vec<crate::fused::OutMember<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recompute: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<u32>,
}

#[derive(Deserialize)]
struct RawGraph {
    format: Option<String>,
    /// Present in symbolic graphs only: refused with [`GraphError::Symbolic`].
    symbols: Option<serde_json::Value>,
    #[serde(default)]
    name: String,
    alignment: Option<u64>,
    meta: Option<serde_json::Value>,
    tensors: Vec<RawTensor>,
    ops: Vec<RawOp>,
}

#[derive(Deserialize)]
struct RawTensor {
    name: String,
    size: u64,
    shape: Option<Vec<u64>>,
    dtype: Option<String>,
    kind: TensorKind,
    alignment: Option<u64>,
}

#[derive(Deserialize)]
struct RawOp {
    name: String,
    #[serde(rename = "type", default)]
    op_type: String,
    #[serde(default)]
    inputs: Vec<String>,
    #[serde(default)]
    outputs: Vec<String>,
    flops: Option<f64>,
    time_us: Option<f64>,
    workspace: Option<u64>,
    attrs: Option<serde_json::Value>,
    inplace: Option<Vec<(usize, usize)>>,
    fused: Option<Vec<crate::fused::RawMember>>,
    /// Any JSON value (null included), so that a non-boolean is an error naming the op.
    #[serde(default, deserialize_with = "present")]
    recompute: Option<serde_json::Value>,
    stream: Option<u32>,
}

/// Deserialises a field that is present (even as `null`) as `Some`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}

impl Graph {
    /// Parses and validates a memplan-graph/1 JSON document (a leading UTF-8 byte order mark,
    /// which RFC 8259 lets a parser ignore, is ignored).
    pub fn parse(text: &str) -> Result<Graph, GraphError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let raw: RawGraph = crate::json_path::from_str(text).map_err(|e| {
            // A document of another kind (a plan, a symbolic plan) is named by its format.
            if let Some(found) =
                crate::json_path::declared_format(text).filter(|f| f != GRAPH_FORMAT)
            {
                return GraphError::Format { found };
            }
            // String sizes fail the typed parse: say what the document is when it is symbolic.
            match serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .and_then(|v| v.get("symbols").cloned())
            {
                Some(symbols) => symbolic_error(&symbols),
                None => GraphError::Json {
                    line: e.line,
                    column: e.column,
                    message: e.message,
                },
            }
        })?;
        if let Some(symbols) = &raw.symbols {
            return Err(symbolic_error(symbols));
        }
        Graph::from_raw(raw)
    }

    /// Reads and validates a memplan-graph/1 document already parsed as JSON, as
    /// [`Graph::parse`] does the text; a structure error names the path to the culprit
    /// ([`GraphError::Document`]) instead of a position in a text the caller would have to
    /// re-serialise.
    pub fn from_value(doc: &serde_json::Value) -> Result<Graph, GraphError> {
        // `"symbols": null` reads as absent, as in [`Graph::parse`].
        if let Some(symbols) = doc.get("symbols").filter(|s| !s.is_null()) {
            return Err(symbolic_error(symbols));
        }
        let raw: RawGraph = crate::json_path::from_value(doc)
            .map_err(|message| GraphError::Document { message })?;
        Graph::from_raw(raw)
    }

    fn from_raw(raw: RawGraph) -> Result<Graph, GraphError> {
        let found = raw.format.unwrap_or_default();
        if found != GRAPH_FORMAT {
            return Err(GraphError::Format { found });
        }
        let alignment = raw
            .alignment
            .filter(|&a| a != 0)
            .unwrap_or(DEFAULT_ALIGNMENT);
        if !alignment.is_power_of_two() {
            return Err(GraphError::BadAlignment {
                what: "graph".into(),
                alignment,
            });
        }
        if raw.tensors.len() > u32::MAX as usize || raw.ops.len() > u32::MAX as usize {
            return Err(GraphError::TooLarge);
        }
        let mut tensors = Vec::with_capacity(raw.tensors.len());
        for (i, t) in raw.tensors.into_iter().enumerate() {
            if t.name.is_empty() {
                return Err(GraphError::EmptyName {
                    what: "tensor",
                    index: i,
                });
            }
            if t.size == 0 {
                return Err(GraphError::ZeroSize(t.name));
            }
            let a = t.alignment.unwrap_or(alignment);
            if !a.is_power_of_two() {
                return Err(GraphError::BadAlignment {
                    what: format!("tensor {:?}", t.name),
                    alignment: a,
                });
            }
            if memplan_solver::align_up(t.size, a).is_none() {
                return Err(GraphError::Overflow(format!(
                    "tensor {:?} size aligned to {a}",
                    t.name
                )));
            }
            tensors.push(Tensor {
                name: t.name,
                size: t.size,
                alignment: a,
                kind: t.kind,
                shape: t.shape,
                dtype: t.dtype,
            });
        }
        let mut by_name: HashMap<&str, TensorId> = HashMap::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            if by_name.insert(&t.name, TensorId(i as u32)).is_some() {
                return Err(GraphError::DuplicateTensor(t.name.clone()));
            }
        }
        let mut op_names: HashMap<&str, usize> = HashMap::with_capacity(raw.ops.len());
        let mut producer: Vec<Option<OpId>> = vec![None; tensors.len()];
        let mut ops = Vec::with_capacity(raw.ops.len());
        for (i, o) in raw.ops.iter().enumerate() {
            if o.name.is_empty() {
                return Err(GraphError::EmptyName {
                    what: "op",
                    index: i,
                });
            }
            if op_names.insert(&o.name, i).is_some() {
                return Err(GraphError::DuplicateOp(o.name.clone()));
            }
        }
        for (i, o) in raw.ops.iter().enumerate() {
            let lookup = |name: &String, role: &'static str| {
                by_name
                    .get(name.as_str())
                    .copied()
                    .ok_or_else(|| GraphError::UnknownTensor {
                        op: o.name.clone(),
                        role,
                        tensor: name.clone(),
                    })
            };
            let inputs = o
                .inputs
                .iter()
                .map(|n| lookup(n, "reads"))
                .collect::<Result<Vec<_>, _>>()?;
            let outputs = o
                .outputs
                .iter()
                .map(|n| lookup(n, "writes"))
                .collect::<Result<Vec<_>, _>>()?;
            if outputs.is_empty() {
                return Err(GraphError::NoOutputs(o.name.clone()));
            }
            for (k, &t) in outputs.iter().enumerate() {
                let tensor = &tensors[t.index()];
                if outputs[..k].contains(&t) {
                    return Err(GraphError::RepeatedOutput {
                        op: o.name.clone(),
                        tensor: tensor.name.clone(),
                    });
                }
                if matches!(tensor.kind, TensorKind::Input | TensorKind::Weight) {
                    return Err(GraphError::ProducedConstant {
                        tensor: tensor.name.clone(),
                        kind: tensor.kind.as_str(),
                        op: o.name.clone(),
                    });
                }
                if let Some(first) = producer[t.index()] {
                    return Err(GraphError::ProducedTwice {
                        tensor: tensor.name.clone(),
                        first: raw.ops[first.index()].name.clone(),
                        second: o.name.clone(),
                    });
                }
                producer[t.index()] = Some(OpId(i as u32));
            }
            let inplace = o.inplace.clone().unwrap_or_default();
            for &(out, inp) in &inplace {
                if out >= outputs.len() || inp >= inputs.len() {
                    return Err(GraphError::BadInplace {
                        op: o.name.clone(),
                        output: out,
                        input: inp,
                        outputs: outputs.len(),
                        inputs: inputs.len(),
                    });
                }
            }
            for (what, v) in [("flops", o.flops), ("time_us", o.time_us)] {
                if let Some(x) = v {
                    check_op_figure(what, x).map_err(|message| GraphError::BadNumber {
                        what: format!("op {:?} {what}", o.name),
                        message,
                    })?;
                }
            }
            let recompute = match &o.recompute {
                None => None,
                Some(serde_json::Value::Bool(b)) => Some(*b),
                Some(other) => {
                    return Err(GraphError::BadRecompute {
                        op: o.name.clone(),
                        found: other.to_string(),
                    })
                }
            };
            if let Some(st) = o.stream {
                if st >= MAX_STREAMS {
                    return Err(GraphError::BadStream {
                        op: o.name.clone(),
                        stream: st,
                    });
                }
            }
            let workspace = o.workspace.unwrap_or(0);
            if memplan_solver::align_up(workspace, alignment).is_none() {
                return Err(GraphError::Overflow(format!("op {:?} workspace", o.name)));
            }
            let fused = match &o.fused {
                None => None,
                Some(members) => Some(
                    crate::fused::resolve(
                        members.clone(),
                        &inputs,
                        &outputs,
                        workspace,
                        &by_name,
                        &tensors,
                    )
                    .map_err(|message| GraphError::BadFused {
                        op: o.name.clone(),
                        message,
                    })?,
                ),
            };
            ops.push((inputs, outputs, inplace, workspace, fused, recompute));
        }
        for (t, p) in tensors.iter().zip(&producer) {
            if p.is_none() && matches!(t.kind, TensorKind::Activation | TensorKind::Output) {
                return Err(GraphError::NotProduced {
                    tensor: t.name.clone(),
                    kind: t.kind.as_str(),
                });
            }
        }
        let ops = raw
            .ops
            .into_iter()
            .zip(ops)
            .map(
                |(o, (inputs, outputs, inplace, workspace, fused, recompute))| Op {
                    name: o.name,
                    op_type: o.op_type,
                    inputs,
                    outputs,
                    flops: o.flops,
                    time_us: o.time_us,
                    workspace,
                    attrs: o.attrs,
                    inplace,
                    fused,
                    recompute,
                    stream: o.stream,
                },
            )
            .collect();
        let graph = Graph {
            name: raw.name,
            alignment,
            meta: raw.meta,
            tensors,
            ops,
            producer,
        };
        graph.check_sums()?;
        // Cycle check: the listed topological order fails exactly when there is a cycle.
        graph
            .order_problem()
            .listed_topological_order()
            .map_err(|e| graph.order_error(e))?;
        Ok(graph)
    }

    /// Guards every byte total used later (naive bytes, weights region) against overflow.
    fn check_sums(&self) -> Result<(), GraphError> {
        let mut total: u64 = 0;
        for t in &self.tensors {
            let aligned = memplan_solver::align_up(t.size, t.alignment)
                .ok_or_else(|| GraphError::Overflow(format!("tensor {:?} size", t.name)))?;
            total = total
                .checked_add(aligned)
                .ok_or_else(|| GraphError::Overflow("the sum of tensor sizes".into()))?;
        }
        for o in &self.ops {
            let aligned = memplan_solver::align_up(o.workspace, self.alignment)
                .ok_or_else(|| GraphError::Overflow(format!("op {:?} workspace", o.name)))?;
            total = total.checked_add(aligned).ok_or_else(|| {
                GraphError::Overflow("the sum of tensor and workspace sizes".into())
            })?;
        }
        Ok(())
    }

    /// The graph as memplan-graph/1 JSON (pretty-printed, fields in the format's order;
    /// optional fields only when set; a tensor's `alignment` only when it differs from the
    /// graph's). `Graph::parse(&g.to_json())` gives back `g`.
    pub fn to_json(&self) -> String {
        let doc = OutGraph {
            format: GRAPH_FORMAT,
            name: &self.name,
            alignment: self.alignment,
            meta: self.meta.as_ref(),
            tensors: self
                .tensors
                .iter()
                .map(|t| OutTensor {
                    name: &t.name,
                    size: t.size,
                    shape: t.shape.as_deref(),
                    dtype: t.dtype.as_deref(),
                    kind: t.kind.as_str(),
                    alignment: (t.alignment != self.alignment).then_some(t.alignment),
                })
                .collect(),
            ops: self
                .ops
                .iter()
                .map(|o| OutOp {
                    name: &o.name,
                    op_type: &o.op_type,
                    inputs: o
                        .inputs
                        .iter()
                        .map(|&t| self.tensor(t).name.as_str())
                        .collect(),
                    outputs: o
                        .outputs
                        .iter()
                        .map(|&t| self.tensor(t).name.as_str())
                        .collect(),
                    flops: o.flops,
                    time_us: o.time_us,
                    workspace: (o.workspace > 0).then_some(o.workspace),
                    attrs: o.attrs.as_ref(),
                    inplace: (!o.inplace.is_empty()).then_some(o.inplace.as_slice()),
                    fused: o.fused.as_ref().map(|f| f.to_out(o, &self.tensors)),
                    recompute: o.recompute,
                    stream: o.stream,
                })
                .collect(),
        };
        // Serialising these plain structs cannot fail.
        serde_json::to_string_pretty(&doc).unwrap_or_default()
    }

    /// The memplan-graph/1 document as a JSON value (what a plan carries as its
    /// `rewritten_graph`). `Graph::parse(&g.to_value().to_string())` gives back `g`.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.to_json()).unwrap_or(serde_json::Value::Null)
    }

    /// Checks a graph built or edited in memory (by a pass or an importer) against every rule
    /// of the format, by a round trip through [`Graph::to_json`] and [`Graph::parse`]: the
    /// result has fresh, consistent `producer` links.
    pub fn rebuilt(&self) -> Result<Graph, GraphError> {
        Graph::parse(&self.to_json())
    }

    /// Turns an order error (node indices) into a graph error (op names).
    pub fn order_error(&self, e: OrderError) -> GraphError {
        match e {
            OrderError::Cycle { cycle } => GraphError::Cycle {
                ops: cycle.iter().map(|&i| self.ops[i].name.clone()).collect(),
            },
            other => GraphError::BadNumber {
                what: "order".into(),
                message: other.to_string(),
            },
        }
    }

    /// Every tensor's id by name (for replaying name-based plans).
    pub fn tensor_ids(&self) -> std::collections::HashMap<&str, TensorId> {
        self.tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), TensorId(i as u32)))
            .collect()
    }

    /// Every op's index (its [`OpId`]'s) by name (for replaying name-based plans).
    pub fn op_indices(&self) -> std::collections::HashMap<&str, usize> {
        self.ops
            .iter()
            .enumerate()
            .map(|(i, o)| (o.name.as_str(), i))
            .collect()
    }

    /// Looks a tensor up by name (linear scan; use for diagnostics and tests).
    pub fn tensor_by_name(&self, name: &str) -> Option<TensorId> {
        self.tensors
            .iter()
            .position(|t| t.name == name)
            .map(|i| TensorId(i as u32))
    }

    /// The tensor with this id.
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }

    /// Whether a tensor lives in the arena (everything but weights).
    pub fn in_arena(&self, id: TensorId) -> bool {
        self.tensors[id.index()].kind != TensorKind::Weight
    }

    /// Sum of weight sizes, each aligned (the weights region's size when packed in order).
    pub fn weights_bytes(&self) -> u64 {
        self.weight_layout().1
    }

    /// Offsets of every weight packed in tensor order, and the region's size.
    pub fn weight_layout(&self) -> (Vec<(TensorId, u64)>, u64) {
        let mut end = 0u64;
        let mut out = Vec::new();
        for (i, t) in self.tensors.iter().enumerate() {
            if t.kind == TensorKind::Weight {
                // check_sums guarantees these do not overflow.
                let off = memplan_solver::align_up(end, t.alignment).unwrap_or(u64::MAX);
                out.push((TensorId(i as u32), off));
                end = off.saturating_add(t.size);
            }
        }
        (out, end)
    }

    /// The graph as a graph-agnostic order problem: one value per arena tensor (weights
    /// excluded), value `i` ↔ tensor [`OrderMapping::value_tensor`]`[i]`, node `i` ↔ op `i`.
    pub fn order_problem(&self) -> OrderProblem {
        self.order_problem_with_mapping().0
    }

    /// [`Graph::order_problem`] with the value ↔ tensor mapping.
    pub fn order_problem_with_mapping(&self) -> (OrderProblem, OrderMapping) {
        let mut tensor_value = vec![None; self.tensors.len()];
        let mut value_tensor = Vec::new();
        let mut values = Vec::new();
        for (i, t) in self.tensors.iter().enumerate() {
            if t.kind == TensorKind::Weight {
                continue;
            }
            tensor_value[i] = Some(values.len());
            value_tensor.push(TensorId(i as u32));
            values.push(Value {
                size: t.size,
                alignment: t.alignment,
                producer: self.producer[i].map(OpId::index),
                consumers: Vec::new(),
                live_at_end: t.kind == TensorKind::Output,
            });
        }
        let mut nodes = Vec::with_capacity(self.ops.len());
        for (k, o) in self.ops.iter().enumerate() {
            let mut inputs: Vec<usize> = o
                .inputs
                .iter()
                .filter_map(|t| tensor_value[t.index()])
                .collect();
            inputs.sort_unstable();
            inputs.dedup();
            for &v in &inputs {
                values[v].consumers.push(k);
            }
            let outputs: Vec<usize> = o
                .outputs
                .iter()
                .filter_map(|t| tensor_value[t.index()])
                .collect();
            let inplace = o
                .inplace
                .iter()
                .filter_map(|&(out, inp)| {
                    let ov = tensor_value[o.outputs[out].index()]?;
                    let iv = tensor_value[o.inputs[inp].index()]?;
                    (ov != iv).then_some((ov, iv))
                })
                .collect();
            nodes.push(Node {
                inputs,
                outputs,
                workspace: o.workspace,
                inplace,
            });
        }
        (
            OrderProblem {
                nodes,
                values,
                workspace_alignment: self.alignment,
            },
            OrderMapping {
                tensor_value,
                value_tensor,
            },
        )
    }
}

/// Maps tensors to order-problem values and back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderMapping {
    /// Value index of each tensor (`None` for weights).
    pub tensor_value: Vec<Option<usize>>,
    /// Tensor of each value.
    pub value_tensor: Vec<TensorId>,
}

/// serde_json appends " at line L column C"; the error already carries both.
/// [`GraphError::Symbolic`] for a document's `symbols` value.
fn symbolic_error(symbols: &serde_json::Value) -> GraphError {
    let names: Vec<String> = symbols
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    let example = names
        .iter()
        .map(|n| format!("{n}=..."))
        .collect::<Vec<_>>()
        .join(" ");
    GraphError::Symbolic {
        symbols: if names.is_empty() {
            "(none listed)".into()
        } else {
            names.join(", ")
        },
        example: if example.is_empty() {
            "SYMBOL=VALUE".into()
        } else {
            example
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_zoo_graph_survives_a_round_trip_through_to_json() {
        let Some(dir) = crate::test_shared::shared_path("zoo") else {
            return;
        };
        let mut seen = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let g = Graph::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let back = Graph::parse(&g.to_json()).unwrap();
            assert_eq!(back, g, "{}", path.display());
            assert_eq!(g.rebuilt().unwrap(), g);
            seen += 1;
        }
        assert!(seen >= 10);
    }

    use super::*;

    #[test]
    fn a_leading_byte_order_mark_is_ignored_and_one_inside_is_an_error() {
        let text = SAMPLE_JSON;
        let marked = format!("\u{feff}{text}");
        assert_eq!(Graph::parse(&marked).unwrap(), Graph::parse(text).unwrap());
        let twice = format!("\u{feff}{marked}");
        assert!(matches!(
            Graph::parse(&twice),
            Err(GraphError::Json { line: 1, .. })
        ));
    }

    #[test]
    fn a_graph_read_from_a_value_is_the_graph_read_from_its_text() {
        let doc: serde_json::Value = serde_json::from_str(SAMPLE_JSON).unwrap();
        assert_eq!(
            Graph::from_value(&doc).unwrap(),
            Graph::parse(SAMPLE_JSON).unwrap()
        );
        let mut bad = doc.clone();
        bad["ops"][0]["inputs"] = serde_json::json!("x");
        let e = Graph::from_value(&bad).unwrap_err();
        assert!(matches!(e, GraphError::Document { .. }), "{e}");
        assert!(
            e.to_string().starts_with("graph JSON error: ops[0] ("),
            "{e}"
        );
        let e = Graph::from_value(&serde_json::json!([1, 2])).unwrap_err();
        assert!(e.to_string().contains("must be a JSON object"), "{e}");
        let mut symbolic = doc;
        symbolic["symbols"] = serde_json::json!({"B": [1, 8]});
        let e = Graph::from_value(&symbolic).unwrap_err();
        assert_eq!(e, Graph::parse(&symbolic.to_string()).unwrap_err());
        symbolic["symbols"] = serde_json::Value::Null;
        assert_eq!(
            Graph::from_value(&symbolic).unwrap(),
            Graph::parse(&symbolic.to_string()).unwrap()
        );
    }

    #[test]
    fn the_order_problem_leaves_weights_out_and_dedups_repeated_inputs() {
        let g = Graph::parse(
            r#"{"format": "memplan-graph/1",
                "tensors": [
                  {"name": "x", "size": 8, "kind": "input"},
                  {"name": "w", "size": 8, "kind": "weight"},
                  {"name": "y", "size": 8, "kind": "output", "alignment": 1024}],
                "ops": [{"name": "sq", "type": "mul", "inputs": ["x", "x", "w"], "outputs": ["y"],
                         "inplace": [[0, 0], [0, 2]]}]}"#,
        )
        .unwrap();
        let (p, m) = g.order_problem_with_mapping();
        assert_eq!(m.value_tensor, vec![TensorId(0), TensorId(2)]);
        assert_eq!(m.tensor_value, vec![Some(0), None, Some(1)]);
        assert_eq!(p.nodes[0].inputs, vec![0]);
        assert_eq!(p.values[0].consumers, vec![0]);
        assert!(p.values[1].live_at_end);
        assert_eq!(p.values[1].alignment, 1024);
        // the pair naming the weight is dropped: weights never share arena bytes
        assert_eq!(p.nodes[0].inplace, vec![(1, 0)]);
        assert_eq!(p.workspace_alignment, DEFAULT_ALIGNMENT);
    }

    #[test]
    fn unknown_fields_are_tolerated_and_optional_ones_default() {
        let g = Graph::parse(
            r#"{"format": "memplan-graph/1", "future": 1, "alignment": 0,
                "tensors": [{"name": "x", "size": 8, "kind": "input", "layout": "nchw"},
                            {"name": "y", "size": 8, "kind": "output"}],
                "ops": [{"name": "id", "inputs": ["x"], "outputs": ["y"], "time_us": 1.5}]}"#,
        )
        .unwrap();
        assert_eq!(g.alignment, DEFAULT_ALIGNMENT);
        assert_eq!(g.ops[0].workspace, 0);
        assert_eq!(g.ops[0].time_us, Some(1.5));
        assert_eq!(g.name, "");
    }

    #[test]
    fn a_negative_flops_value_is_named() {
        let err = Graph::parse(
            r#"{"format": "memplan-graph/1",
                "tensors": [{"name": "x", "size": 8, "kind": "input"}, {"name": "y", "size": 8, "kind": "output"}],
                "ops": [{"name": "id", "inputs": ["x"], "outputs": ["y"], "flops": -3}]}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("op \"id\" flops"), "{err}");
    }

    fn with_recompute(value: &str) -> Result<Graph, GraphError> {
        Graph::parse(&format!(
            r#"{{"format": "memplan-graph/1",
                "tensors": [{{"name": "x", "size": 8, "kind": "input"}},
                            {{"name": "y", "size": 8, "kind": "output"}}],
                "ops": [{{"name": "drop", "type": "dropout", "inputs": ["x"], "outputs": ["y"]
                         {value}}}]}}"#
        ))
    }

    #[test]
    fn the_recompute_flag_parses_as_true_false_or_absent_and_round_trips() {
        for (text, flag) in [
            (r#", "recompute": true"#, Some(true)),
            (r#", "recompute": false"#, Some(false)),
            ("", None),
        ] {
            let g = with_recompute(text).unwrap();
            assert_eq!(g.ops[0].recompute, flag, "{text}");
            let back = Graph::parse(&g.to_json()).unwrap();
            assert_eq!(back, g);
            assert_eq!(
                g.to_json().contains("\"recompute\""),
                flag.is_some(),
                "written only when given"
            );
        }
        let v = with_recompute(r#", "recompute": false"#)
            .unwrap()
            .to_value();
        assert_eq!(v["ops"][0]["recompute"], serde_json::json!(false));
    }

    #[test]
    fn a_recompute_flag_that_is_not_a_boolean_is_an_error_naming_the_op() {
        for bad in [r#""no""#, "0", "null", "[]"] {
            let err = with_recompute(&format!(r#", "recompute": {bad}"#)).unwrap_err();
            assert!(
                matches!(err, GraphError::BadRecompute { .. }),
                "{bad}: {err}"
            );
            let msg = err.to_string();
            assert!(
                msg.contains("op \"drop\"") && msg.contains("recompute") && msg.contains(bad),
                "{msg}"
            );
        }
    }
}
