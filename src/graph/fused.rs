//! Fused ops (memplan-graph/1 extension, optional field `fused`): an op that stands for a
//! sequence of member ops executed back to back inside one exec, whose intermediates are
//! not graph tensors (they never live in the arena).
//!
//! JSON, on an op (docs/FORMATS.md allows added optional fields):
//!
//! ```json
//! {"name": "convolution_1+native_batch_norm_1+relu_1", "type": "fused:conv2d+batch_norm+relu",
//!  "inputs": ["x", "param:w", "param:bn.weight", "param:bn.bias", "buffer:bn.mean", "buffer:bn.var"],
//!  "outputs": ["relu_1"], "flops": 1234, "workspace": 0,
//!  "fused": [
//!    {"name": "convolution_1", "type": "conv2d", "inputs": ["x", "param:w"],
//!     "outputs": ["convolution_1"], "attrs": {"stride": [1, 1], "padding": [1, 1]},
//!     "tensors": [{"name": "convolution_1", "size": 802816, "shape": [1, 64, 56, 56], "dtype": "f32"}]},
//!    {"name": "native_batch_norm_1", "type": "batch_norm",
//!     "inputs": ["convolution_1", "param:bn.weight", "param:bn.bias", "buffer:bn.mean", "buffer:bn.var"],
//!     "outputs": ["native_batch_norm_1.0", "native_batch_norm_1.1", "native_batch_norm_1.2"],
//!     "tensors": [{"name": "native_batch_norm_1.0", "size": 802816, "shape": [1, 64, 56, 56], "dtype": "f32"},
//!                 {"name": "native_batch_norm_1.1", "size": 1, "shape": [0], "dtype": "f32"},
//!                 {"name": "native_batch_norm_1.2", "size": 1, "shape": [0], "dtype": "f32"}]},
//!    {"name": "relu_1", "type": "relu", "inputs": ["native_batch_norm_1.0"], "outputs": ["relu_1"]}]}
//! ```
//!
//! - `fused` lists the members in execution order, each with the fields of an op (`name`,
//!   `type`, `inputs`, `outputs`, optional `flops`, `time_us`, `workspace`, `attrs`,
//!   `inplace`) — names are the ORIGINAL op and tensor names, so a member computes exactly
//!   what the op it replaces computed (the mixing kernel is seeded by the op name).
//! - A member's `tensors` declares its *internal* outputs: those that are not outputs of the
//!   fused op (`name`, `size` > 0, optional `shape`, `dtype`). Internal tensors are not graph
//!   tensors: their names must not be graph tensor names.
//! - A member reads inputs of the fused op, or outputs (internal or not) of earlier members.
//!   Every output of the fused op is written by exactly one member; every input of the fused
//!   op is read by some member; a member's `workspace` may not exceed the op's.
//! - An internal tensor that no later member reads is *dropped*: the fused op does not
//!   materialise it (e.g. batch_norm's unused saved statistics in an inference graph).
//!
//! Resolution is linear in the total size of the member lists.

use crate::graph::{Op, Tensor, TensorId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Where a member's operand lives inside its fused op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Slot {
    /// The fused op's input at this index (into [`Op::inputs`]).
    Input(usize),
    /// The fused op's output at this index (into [`Op::outputs`]).
    Output(usize),
    /// An internal tensor (index into [`Fused::tensors`]).
    Internal(usize),
}

/// An intermediate of a fused op (not a graph tensor).
#[derive(Debug, Clone, PartialEq)]
pub struct InternalTensor {
    /// Original tensor name.
    pub name: String,
    /// Size in bytes (> 0).
    pub size: u64,
    /// Shape, when given.
    pub shape: Option<Vec<u64>>,
    /// Element type, when given.
    pub dtype: Option<String>,
    /// Index of the member that writes it.
    pub producer: usize,
    /// Whether a later member reads it (a dropped tensor is not materialised).
    pub read: bool,
}

/// One member op of a fused op.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Original op name.
    pub name: String,
    /// Original op type.
    pub op_type: String,
    /// Operands read, in the member's order.
    pub inputs: Vec<Slot>,
    /// Operands written, in the member's order.
    pub outputs: Vec<Slot>,
    /// Work estimate, when given.
    pub flops: Option<f64>,
    /// Measured run time (µs), when given.
    pub time_us: Option<f64>,
    /// Scratch bytes the member needs (<= the fused op's workspace).
    pub workspace: u64,
    /// Attributes, when given.
    pub attrs: Option<serde_json::Value>,
    /// The member's own in-place hints (informative inside a fused op).
    pub inplace: Vec<(usize, usize)>,
}

/// The members of a fused op and its internal tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused {
    /// Members in execution order.
    pub members: Vec<Member>,
    /// Internal tensors, in the order the members declare them.
    pub tensors: Vec<InternalTensor>,
}

/// A member as read from JSON.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RawMember {
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
    #[serde(default)]
    tensors: Vec<RawInternal>,
}

#[derive(Debug, Clone, Deserialize)]
struct RawInternal {
    name: String,
    size: u64,
    shape: Option<Vec<u64>>,
    dtype: Option<String>,
}

/// A member as written to JSON.
#[derive(Serialize)]
pub(crate) struct OutMember<'a> {
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
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tensors: Vec<OutInternal<'a>>,
}

#[derive(Serialize)]
struct OutInternal<'a> {
    name: &'a str,
    size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    shape: Option<&'a [u64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dtype: Option<&'a str>,
}

impl Fused {
    /// The name of an operand, resolved against its op and the graph's tensors.
    pub fn slot_name<'a>(&'a self, op: &Op, tensors: &'a [Tensor], slot: Slot) -> &'a str {
        match slot {
            Slot::Input(i) => &tensors[op.inputs[i].index()].name,
            Slot::Output(k) => &tensors[op.outputs[k].index()].name,
            Slot::Internal(j) => &self.tensors[j].name,
        }
    }

    /// The members as JSON structs (for [`crate::Graph::to_json`]).
    pub(crate) fn to_out<'a>(&'a self, op: &Op, tensors: &'a [Tensor]) -> Vec<OutMember<'a>> {
        self.members
            .iter()
            .enumerate()
            .map(|(m, mem)| OutMember {
                name: &mem.name,
                op_type: &mem.op_type,
                inputs: mem
                    .inputs
                    .iter()
                    .map(|&s| self.slot_name(op, tensors, s))
                    .collect(),
                outputs: mem
                    .outputs
                    .iter()
                    .map(|&s| self.slot_name(op, tensors, s))
                    .collect(),
                flops: mem.flops,
                time_us: mem.time_us,
                workspace: (mem.workspace > 0).then_some(mem.workspace),
                attrs: mem.attrs.as_ref(),
                inplace: (!mem.inplace.is_empty()).then_some(mem.inplace.as_slice()),
                tensors: self
                    .tensors
                    .iter()
                    .filter(|t| t.producer == m)
                    .map(|t| OutInternal {
                        name: &t.name,
                        size: t.size,
                        shape: t.shape.as_deref(),
                        dtype: t.dtype.as_deref(),
                    })
                    .collect(),
            })
            .collect()
    }
}

/// Resolves and checks a fused op's member list against the op's resolved `inputs` and
/// `outputs`. `by_name` maps every graph tensor name to its id. The error message names the
/// member and tensor (the caller adds the op).
pub(crate) fn resolve(
    raw: Vec<RawMember>,
    inputs: &[TensorId],
    outputs: &[TensorId],
    workspace: u64,
    by_name: &HashMap<&str, TensorId>,
    graph_tensors: &[Tensor],
) -> Result<Fused, String> {
    if raw.is_empty() {
        return Err("the fused list is empty".into());
    }
    let input_slot: BTreeMap<TensorId, usize> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, &t)| (t, i))
        .collect();
    let output_slot: BTreeMap<TensorId, usize> =
        outputs.iter().enumerate().map(|(k, &t)| (t, k)).collect();
    let mut internal_ids: HashMap<String, usize> = HashMap::new();
    let mut tensors: Vec<InternalTensor> = Vec::new();
    let mut written_output = vec![false; outputs.len()];
    let mut read_input = vec![false; inputs.len()];
    let mut member_names: HashMap<String, usize> = HashMap::new();
    let mut members = Vec::with_capacity(raw.len());
    for (m, r) in raw.into_iter().enumerate() {
        if r.name.is_empty() {
            return Err(format!("member #{m} has an empty name"));
        }
        if member_names.insert(r.name.clone(), m).is_some() {
            return Err(format!("member {:?} is listed twice", r.name));
        }
        let who = format!("member {:?}", r.name);
        if r.outputs.is_empty() {
            return Err(format!("{who} has no outputs"));
        }
        for (what, v) in [("flops", r.flops), ("time_us", r.time_us)] {
            if let Some(x) = v {
                crate::graph::check_op_figure(what, x).map_err(|m| format!("{who} {what} {m}"))?;
            }
        }
        let ws = r.workspace.unwrap_or(0);
        if ws > workspace {
            return Err(format!(
                "{who} needs {ws} workspace bytes, more than the fused op's {workspace}"
            ));
        }
        let mut ins = Vec::with_capacity(r.inputs.len());
        for name in &r.inputs {
            let slot = if let Some(&j) = internal_ids.get(name) {
                tensors[j].read = true;
                Slot::Internal(j)
            } else if let Some(&t) = by_name.get(name.as_str()) {
                if let Some(&i) = input_slot.get(&t) {
                    read_input[i] = true;
                    Slot::Input(i)
                } else if let Some(&k) = output_slot.get(&t).filter(|&&k| written_output[k]) {
                    Slot::Output(k)
                } else {
                    return Err(format!(
                        "{who} reads {name:?}, which is neither an input of the fused op nor an output of an earlier member"
                    ));
                }
            } else {
                return Err(format!(
                    "{who} reads {name:?}, which is neither an input of the fused op nor an output of an earlier member"
                ));
            };
            ins.push(slot);
        }
        let declared: BTreeMap<&str, &RawInternal> =
            r.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
        if declared.len() != r.tensors.len() {
            return Err(format!("{who} declares an internal tensor twice"));
        }
        let mut outs = Vec::with_capacity(r.outputs.len());
        for name in &r.outputs {
            if r.outputs.iter().filter(|o| *o == name).count() > 1 {
                return Err(format!("{who} lists output {name:?} twice"));
            }
            if let Some(d) = declared.get(name.as_str()) {
                if by_name.contains_key(name.as_str()) {
                    return Err(format!(
                        "{who} declares internal tensor {name:?}, which is also a graph tensor"
                    ));
                }
                if internal_ids.contains_key(name) {
                    return Err(format!("internal tensor {name:?} is written twice"));
                }
                if d.size == 0 {
                    return Err(format!("internal tensor {name:?} has size 0"));
                }
                internal_ids.insert(name.clone(), tensors.len());
                outs.push(Slot::Internal(tensors.len()));
                tensors.push(InternalTensor {
                    name: name.clone(),
                    size: d.size,
                    shape: d.shape.clone(),
                    dtype: d.dtype.clone(),
                    producer: m,
                    read: false,
                });
            } else if let Some(&k) = by_name.get(name.as_str()).and_then(|t| output_slot.get(t)) {
                if written_output[k] {
                    return Err(format!("output {name:?} of the fused op is written twice"));
                }
                written_output[k] = true;
                outs.push(Slot::Output(k));
            } else {
                return Err(format!(
                    "{who} writes {name:?}, which is neither an output of the fused op nor declared in its \"tensors\""
                ));
            }
        }
        if let Some(t) = declared.keys().find(|n| !r.outputs.iter().any(|o| o == *n)) {
            return Err(format!(
                "{who} declares internal tensor {t:?}, which is not one of its outputs"
            ));
        }
        let inplace = r.inplace.clone().unwrap_or_default();
        if let Some(&(o, i)) = inplace
            .iter()
            .find(|&&(o, i)| o >= outs.len() || i >= ins.len())
        {
            return Err(format!("{who} inplace pair [{o}, {i}] is out of range"));
        }
        members.push(Member {
            name: r.name,
            op_type: r.op_type,
            inputs: ins,
            outputs: outs,
            flops: r.flops,
            time_us: r.time_us,
            workspace: ws,
            attrs: r.attrs,
            inplace,
        });
    }
    if let Some(k) = written_output.iter().position(|&w| !w) {
        return Err(format!(
            "output {:?} of the fused op is written by no member",
            graph_tensors[outputs[k].index()].name
        ));
    }
    if let Some(i) = read_input
        .iter()
        .enumerate()
        .position(|(i, &r)| !r && input_slot.get(&inputs[i]) == Some(&i))
    {
        return Err(format!(
            "input {:?} of the fused op is read by no member",
            graph_tensors[inputs[i].index()].name
        ));
    }
    Ok(Fused { members, tensors })
}

/// A fused op's members as a stand-alone graph, so that per-member tools (kernel selection,
/// fills, reports) see each member exactly as the op it was in the unfused graph: the op's
/// inputs and outputs keep their tensors (kinds included), internal tensors become
/// activations, and every member becomes an ordinary op with its original name, type and
/// attributes. [`MemberGraph::tensor`] maps a [`Slot`] to its tensor there.
#[derive(Debug, Clone)]
pub struct MemberGraph {
    /// The graph (members in execution order; not checked against every format rule: a
    /// dropped internal tensor may be read by nobody).
    pub graph: crate::Graph,
    inputs: Vec<TensorId>,
    outputs: Vec<TensorId>,
    internal: Vec<TensorId>,
}

impl MemberGraph {
    /// Builds the member graph of `op` in `graph`; `None` when `op` is not fused.
    pub fn of(graph: &crate::Graph, op: &Op) -> Option<MemberGraph> {
        let fused = op.fused.as_ref()?;
        let mut tensors: Vec<Tensor> = Vec::new();
        let mut seen: BTreeMap<TensorId, TensorId> = BTreeMap::new();
        let mut add = |t: TensorId, tensors: &mut Vec<Tensor>| -> TensorId {
            *seen.entry(t).or_insert_with(|| {
                tensors.push(graph.tensor(t).clone());
                TensorId((tensors.len() - 1) as u32)
            })
        };
        let inputs: Vec<TensorId> = op.inputs.iter().map(|&t| add(t, &mut tensors)).collect();
        let outputs: Vec<TensorId> = op.outputs.iter().map(|&t| add(t, &mut tensors)).collect();
        let internal: Vec<TensorId> = fused
            .tensors
            .iter()
            .map(|t| {
                tensors.push(Tensor {
                    name: t.name.clone(),
                    size: t.size,
                    alignment: graph.alignment,
                    kind: crate::TensorKind::Activation,
                    shape: t.shape.clone(),
                    dtype: t.dtype.clone(),
                });
                TensorId((tensors.len() - 1) as u32)
            })
            .collect();
        let mut mg = MemberGraph {
            graph: crate::Graph {
                name: op.name.clone(),
                alignment: graph.alignment,
                meta: None,
                producer: vec![None; tensors.len()],
                tensors,
                ops: Vec::with_capacity(fused.members.len()),
            },
            inputs,
            outputs,
            internal,
        };
        for (m, mem) in fused.members.iter().enumerate() {
            let ins = mem.inputs.iter().map(|&s| mg.tensor(s)).collect();
            let outs: Vec<TensorId> = mem.outputs.iter().map(|&s| mg.tensor(s)).collect();
            for &t in &outs {
                mg.graph.producer[t.index()] = Some(crate::OpId(m as u32));
            }
            mg.graph.ops.push(Op {
                stream: None,
                name: mem.name.clone(),
                op_type: mem.op_type.clone(),
                inputs: ins,
                outputs: outs,
                flops: mem.flops,
                time_us: mem.time_us,
                workspace: mem.workspace,
                attrs: mem.attrs.clone(),
                inplace: mem.inplace.clone(),
                fused: None,
                recompute: None,
            });
        }
        Some(mg)
    }

    /// The tensor of a slot in [`MemberGraph::graph`].
    pub fn tensor(&self, slot: Slot) -> TensorId {
        match slot {
            Slot::Input(i) => self.inputs[i],
            Slot::Output(k) => self.outputs[k],
            Slot::Internal(j) => self.internal[j],
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::{Graph, GraphError};

    fn with_members(members: &str, workspace: u64) -> Result<Graph, GraphError> {
        Graph::parse(&format!(
            r#"{{"format": "memplan-graph/1",
                "tensors": [{{"name": "x", "size": 16, "kind": "input"}},
                            {{"name": "y", "size": 16, "kind": "output"}}],
                "ops": [{{"name": "f", "type": "fused:neg+relu", "inputs": ["x"], "outputs": ["y"],
                          "workspace": {workspace}, "fused": {members}}}]}}"#
        ))
    }

    const GOOD: &str = r#"[
        {"name": "a", "type": "neg", "inputs": ["x"], "outputs": ["t"], "workspace": 64,
         "tensors": [{"name": "t", "size": 16, "shape": [4], "dtype": "f32"}]},
        {"name": "b", "type": "relu", "inputs": ["t"], "outputs": ["y"]}]"#;

    fn err(members: &str, workspace: u64) -> String {
        let e = with_members(members, workspace).unwrap_err();
        assert!(
            matches!(e, GraphError::BadFused { ref op, .. } if op == "f"),
            "{e}"
        );
        e.to_string()
    }

    #[test]
    fn a_fused_op_survives_a_round_trip_with_its_members_and_internal_tensors() {
        let g = with_members(GOOD, 64).unwrap();
        let f = g.ops[0].fused.as_ref().unwrap();
        assert_eq!(f.members.len(), 2);
        assert_eq!(f.tensors[0].name, "t");
        assert!(f.tensors[0].read);
        assert_eq!(Graph::parse(&g.to_json()).unwrap(), g);
        assert!(g.to_json().contains("\"fused\""));
    }

    #[test]
    fn broken_member_lists_are_refused_naming_the_op_member_and_tensor() {
        let reads_unknown = GOOD.replace(r#""inputs": ["t"]"#, r#""inputs": ["q"]"#);
        assert!(err(&reads_unknown, 64).contains(r#"member "b" reads "q""#));
        let shadows = GOOD
            .replace(r#""name": "t""#, r#""name": "x""#)
            .replace(r#"["t"]"#, r#"["x"]"#);
        assert!(err(&shadows, 64).contains("also a graph tensor"));
        let no_writer = GOOD.replace(r#""outputs": ["y"]"#, r#""outputs": ["u"]"#);
        assert!(err(&no_writer, 64).contains(r#"writes "u""#));
        assert!(err(GOOD, 0).contains("workspace"));
        assert!(err("[]", 0).contains("empty"));
        let twice = GOOD.replace(r#""name": "b""#, r#""name": "a""#);
        assert!(err(&twice, 64).contains("listed twice"));
        let skips_input = r#"[{"name": "a", "type": "neg", "inputs": [], "outputs": ["y"]}]"#;
        assert!(err(skips_input, 0).contains(r#"input "x" of the fused op is read by no member"#));
    }
}
