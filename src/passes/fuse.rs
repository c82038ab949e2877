//! Operator fusion (seed 000 §3.2): chains of ops whose intermediates are read only by the
//! next op of the chain become one fused op ([`crate::fused`]), so the intermediates never
//! occupy the arena.
//!
//! Three modules carry "fused" in their path and are three different things: this one is
//! the fusion *pass* (the graph rewrite that creates fused ops); [`crate::graph::fused`]
//! (also at `crate::fused`) is the *format* of a fused op (the optional `fused` field on an
//! op: members, slots, internal tensors); `executor/kernels/fused.rs` is the *kernel* that
//! runs a fused op's members in sequence.
//!
//! Rules, applied in order:
//! 1. **Pad folding.** A constant-zero spatial pad (`pad` / `constant_pad_nd`, attrs
//!    `pad: [left, right, top, bottom, 0...]` over NCHW, `value` absent or 0, left = right and
//!    top = bottom) whose output is read only by one non-transposed conv, as that conv's data
//!    input, is removed; the conv reads the pad's input and its `padding` attr grows by the
//!    pad amounts. (Zero padding in the im2col matrix equals explicitly padded zeros, so the
//!    conv computes the same values bit for bit.)
//! 2. **Chains.** Ops are grouped along the pattern `[conv] [batch_norm] elementwise*` with
//!    at least two members: conv → batch_norm → activation and its prefixes conv → bn,
//!    conv → act, bn → act, conv/bn followed by an elementwise epilogue (e.g. a residual
//!    add and relu), and chains of elementwise ops (unary like relu, hardtanh, silu, gelu,
//!    sigmoid; binary like add, mul, whose other operand comes from outside the chain and
//!    becomes an input of the fused op). A chain grows from member `m` to op `n` only when
//!    `m`'s first output (the chain tensor) is not a graph output and `n` is its only reader
//!    — in a training graph an activation saved for backward has a second reader, so it is
//!    never fused away — and when none of `n`'s other operands depends on a member (which
//!    would make the fused op a cycle).
//!
//! Members keep their original names, types and attrs (the mixing kernel is seeded by op
//! names, so fused graphs compute bit-identical outputs). A member output read outside the
//! chain, or a graph output, stays a graph tensor and becomes an output of the fused op; a
//! member output that nobody reads (batch_norm's saved statistics in an inference graph) is
//! dropped: the fused op does not materialise it. The fused op is listed where its last
//! member was; flops (and time_us) are the members' sums, the workspace their maximum; an
//! in-place hint survives when the whole chain is in place back to an input of the op.
//!
//! Ops such as `empty` (no inputs; their output read by nobody) that the exporter lists
//! between a conv and its batch_norm are not members: they keep their own place and neither
//! join nor break a chain, because chains follow data edges, not the listed order.
//!
//! Cost: one pass over the ops in topological order; each extension checks its operands
//! with a backward search bounded to ops after the chain's head (O(V + E) worst case per
//! extension, linear in practice).

use super::rebuild::Rebuild;
use super::{Pass, PassError, PassOutcome, PassReport};
use crate::fused::{Fused, InternalTensor, Member, Slot};
use crate::graph::{Graph, Op, OpId, TensorId, TensorKind};
use serde_json::Value;
use std::collections::BTreeMap;

/// The fusion pass. Every rule is on by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fuse {
    /// Fold constant-zero spatial pads into the following conv.
    pub fold_pad: bool,
    /// Fuse `[conv] [batch_norm] elementwise*` chains.
    pub chains: bool,
}

impl Default for Fuse {
    fn default() -> Self {
        Fuse {
            fold_pad: true,
            chains: true,
        }
    }
}

/// Unary element-wise op types (after stripping `aten.` and a trailing `_`).
const UNARY: &[&str] = &[
    "relu",
    "relu6",
    "hardtanh",
    "silu",
    "gelu",
    "sigmoid",
    "tanh",
    "neg",
    "hardswish",
    "hardsigmoid",
    "leaky_relu",
    "elu",
    "mish",
    "abs",
    "exp",
    "sqrt",
    "rsqrt",
    "clamp",
];

/// Binary element-wise op types (one operand may be a scalar attribute).
const BINARY: &[&str] = &[
    "add",
    "sub",
    "mul",
    "div",
    "maximum",
    "minimum",
    "threshold_backward",
    "hardtanh_backward",
    "sigmoid_backward",
    "gelu_backward",
    "silu_backward",
];

const CONV: &[&str] = &["conv2d", "convolution", "conv"];
const BATCH_NORM: &[&str] = &["batch_norm", "native_batch_norm"];
const PAD: &[&str] = &["pad", "constant_pad_nd"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    Conv,
    BatchNorm,
    Elementwise,
}

fn base_type(op: &Op) -> &str {
    op.op_type.trim_start_matches("aten.").trim_end_matches('_')
}

fn role(op: &Op) -> Option<Role> {
    if op.fused.is_some() {
        return None;
    }
    let ty = base_type(op);
    if CONV.contains(&ty) {
        Some(Role::Conv)
    } else if BATCH_NORM.contains(&ty) {
        Some(Role::BatchNorm)
    } else if (UNARY.contains(&ty) || BINARY.contains(&ty))
        && op.outputs.len() == 1
        && !op.inputs.is_empty()
        && op.inputs.len() <= 2
    {
        Some(Role::Elementwise)
    } else {
        None
    }
}

/// Whether `next` may follow a member with role `prev` in a chain.
fn may_follow(prev: Role, next: Role) -> bool {
    match next {
        Role::Conv => false,
        Role::BatchNorm => prev == Role::Conv,
        Role::Elementwise => true,
    }
}

/// Readers of every tensor (each op once, in op order).
fn readers(graph: &Graph) -> Vec<Vec<OpId>> {
    let mut r: Vec<Vec<OpId>> = vec![Vec::new(); graph.tensors.len()];
    for (k, op) in graph.ops.iter().enumerate() {
        for &t in &op.inputs {
            let v = &mut r[t.index()];
            if v.last() != Some(&OpId(k as u32)) {
                v.push(OpId(k as u32));
            }
        }
    }
    r
}

fn invalid(e: crate::GraphError) -> PassError {
    PassError::Invalid {
        pass: "fuse",
        source: e,
    }
}

impl Pass for Fuse {
    fn name(&self) -> &'static str {
        "fuse"
    }

    fn run(&self, graph: &Graph) -> Result<PassOutcome, PassError> {
        let mut notes = Vec::new();
        let mut g = graph.clone();
        if self.fold_pad {
            g = fold_pads(&g, &mut notes)?;
        }
        if self.chains {
            g = fuse_chains(&g, &mut notes)?;
        }
        if notes.is_empty() {
            notes.push("nothing to fuse".to_string());
        }
        let mut report = PassReport::compare(self.name(), graph, &g);
        report.notes = notes;
        Ok(PassOutcome { graph: g, report })
    }
}

/// The conv `padding` attr as a pair (absent: 0; an int or a list of one or two ints).
fn padding_pair(op: &Op) -> Option<(u64, u64)> {
    match op.attrs.as_ref().and_then(|a| a.get("padding")) {
        None => Some((0, 0)),
        Some(Value::Array(a)) if a.len() == 2 => Some((a[0].as_u64()?, a[1].as_u64()?)),
        Some(Value::Array(a)) if a.len() == 1 => a[0].as_u64().map(|x| (x, x)),
        Some(Value::Array(a)) if a.is_empty() => Some((0, 0)),
        Some(v) => v.as_u64().map(|x| (x, x)),
    }
}

/// The symmetric (h, w) padding of a constant-zero spatial pad op, if it is one.
fn spatial_zero_pad(op: &Op) -> Option<(u64, u64)> {
    let attrs = op.attrs.as_ref()?;
    if let Some(v) = attrs.get("value") {
        if v.as_f64()? != 0.0 {
            return None;
        }
    }
    if let Some(mode) = attrs.get("mode") {
        if mode.as_str()? != "constant" {
            return None;
        }
    }
    let pad: Vec<i64> = attrs
        .get("pad")?
        .as_array()?
        .iter()
        .map(Value::as_i64)
        .collect::<Option<_>>()?;
    if pad.len() < 2 || pad.len() % 2 != 0 || pad.len() > 8 || pad.iter().any(|&p| p < 0) {
        return None;
    }
    // Only W (pad[0..2]) and H (pad[2..4]) may be padded, symmetrically.
    if pad[4.min(pad.len())..].iter().any(|&p| p != 0) {
        return None;
    }
    let (l, r) = (pad[0], pad[1]);
    let (t, b) = if pad.len() >= 4 {
        (pad[2], pad[3])
    } else {
        (0, 0)
    };
    (l == r && t == b).then_some((t as u64, l as u64))
}

fn fold_pads(graph: &Graph, notes: &mut Vec<String>) -> Result<Graph, PassError> {
    let rd = readers(graph);
    let mut removed_op = vec![false; graph.ops.len()];
    let mut removed_tensor = vec![false; graph.tensors.len()];
    let mut ops = graph.ops.clone();
    for (k, pad) in graph.ops.iter().enumerate() {
        if pad.fused.is_some()
            || !PAD.contains(&base_type(pad))
            || pad.inputs.len() != 1
            || pad.outputs.len() != 1
        {
            continue;
        }
        let Some((ph, pw)) = spatial_zero_pad(pad) else {
            continue;
        };
        let (x, t) = (pad.inputs[0], pad.outputs[0]);
        if graph.tensor(t).kind == TensorKind::Output || rd[t.index()].len() != 1 {
            continue;
        }
        let c = rd[t.index()][0];
        let conv = &graph.ops[c.index()];
        let transposed = conv
            .attrs
            .as_ref()
            .and_then(|a| a.get("transposed"))
            .and_then(Value::as_bool)
            == Some(true);
        if role(conv) != Some(Role::Conv)
            || transposed
            || conv.inputs.first() != Some(&t)
            || conv.inputs[1..].contains(&t)
        {
            continue;
        }
        // With shapes known, the pad must add exactly (ph, pw) on each side of H and W.
        if let (Some(xs), Some(ts)) = (&graph.tensor(x).shape, &graph.tensor(t).shape) {
            if xs.len() != 4
                || ts.len() != 4
                || xs[..2] != ts[..2]
                || ts[2] != xs[2] + 2 * ph
                || ts[3] != xs[3] + 2 * pw
            {
                continue;
            }
        }
        let Some((h0, w0)) = padding_pair(conv) else {
            continue;
        };
        let new_pad = (h0 + ph, w0 + pw);
        let mut attrs = conv
            .attrs
            .clone()
            .unwrap_or_else(|| Value::Object(Default::default()));
        if let Value::Object(m) = &mut attrs {
            m.insert(
                "padding".into(),
                Value::Array(vec![new_pad.0.into(), new_pad.1.into()]),
            );
        }
        let new_conv = &mut ops[c.index()];
        new_conv.inputs[0] = x;
        new_conv.attrs = Some(attrs);
        removed_op[k] = true;
        removed_tensor[t.index()] = true;
        notes.push(format!(
            "folded pad {:?} into conv {:?}: padding [{h0}, {w0}] -> [{}, {}], removed tensor {:?} ({} B)",
            pad.name,
            conv.name,
            new_pad.0,
            new_pad.1,
            graph.tensor(t).name,
            graph.tensor(t).size
        ));
    }
    if !removed_op.contains(&true) {
        return Ok(graph.clone());
    }
    rebuild(graph, ops, &removed_op, &removed_tensor, &BTreeMap::new())
}

/// A new graph from `graph` with `ops` (same ids as `graph.ops`), without the removed ops
/// and tensors; `replace[last member] = fused op` puts each fused op in its last member's
/// place (fused ops use the old tensor ids).
fn rebuild(
    graph: &Graph,
    ops: Vec<Op>,
    removed_op: &[bool],
    removed_tensor: &[bool],
    replace: &BTreeMap<usize, Op>,
) -> Result<Graph, PassError> {
    let rb = Rebuild::keeping(graph, |t| !removed_tensor[t.index()]);
    let map = |ids: &[TensorId]| -> Result<Vec<TensorId>, PassError> {
        ids.iter()
            .map(|t| {
                rb.new_id(*t).ok_or_else(|| PassError::Unsupported {
                    pass: "fuse",
                    message: format!(
                        "tensor {:?} was removed but is still used",
                        graph.tensor(*t).name
                    ),
                })
            })
            .collect()
    };
    let mut new_ops = Vec::with_capacity(ops.len());
    for (k, op) in ops.into_iter().enumerate() {
        let op = match replace.get(&k) {
            Some(f) => f.clone(),
            None if removed_op[k] => continue,
            None => op,
        };
        new_ops.push(Op {
            inputs: map(&op.inputs)?,
            outputs: map(&op.outputs)?,
            ..op
        });
    }
    rb.finish(new_ops, "fuse")
}

/// Whether op `from` depends on one of `members` (is one, or reads what one produces,
/// transitively): a backward search over producers limited to ops whose topological position
/// is after `floor` (the head's). An op of an already formed chain stands for its whole
/// chain (`group[o]` indexes `chains`), since the chain becomes one op.
fn depends_on_members(
    graph: &Graph,
    from: OpId,
    members: &[OpId],
    pos: &[usize],
    floor: usize,
    group: &[Option<usize>],
    chains: &[Vec<OpId>],
) -> bool {
    let mut seen = vec![false; graph.ops.len()];
    let mut stack = vec![from];
    while let Some(o) = stack.pop() {
        if members.contains(&o) {
            return true;
        }
        if seen[o.index()] {
            continue;
        }
        seen[o.index()] = true;
        if let Some(c) = group[o.index()] {
            stack.extend(chains[c].iter().filter(|m| !seen[m.index()]));
        }
        if pos[o.index()] <= floor {
            continue;
        }
        for &t in &graph.ops[o.index()].inputs {
            if let Some(p) = graph.producer[t.index()] {
                if !seen[p.index()] {
                    stack.push(p);
                }
            }
        }
    }
    false
}

fn fuse_chains(graph: &Graph, notes: &mut Vec<String>) -> Result<Graph, PassError> {
    let order = graph
        .order_problem()
        .listed_topological_order()
        .map_err(|e| invalid(graph.order_error(e)))?;
    let mut pos = vec![0usize; graph.ops.len()];
    for (p, &k) in order.iter().enumerate() {
        pos[k] = p;
    }
    let rd = readers(graph);
    let mut taken = vec![false; graph.ops.len()];
    let mut group: Vec<Option<usize>> = vec![None; graph.ops.len()];
    let mut chains: Vec<Vec<OpId>> = Vec::new();
    for &k in &order {
        let head = OpId(k as u32);
        if taken[k] {
            continue;
        }
        let Some(mut last_role) = role(&graph.ops[k]) else {
            continue;
        };
        let mut chain = vec![head];
        loop {
            let tail = &graph.ops[chain[chain.len() - 1].index()];
            let c = tail.outputs[0];
            if graph.tensor(c).kind == TensorKind::Output || rd[c.index()].len() != 1 {
                break;
            }
            let n = rd[c.index()][0];
            let next = &graph.ops[n.index()];
            let Some(r) = role(next).filter(|&r| !taken[n.index()] && may_follow(last_role, r))
            else {
                break;
            };
            // The chain tensor must be the data operand, not a batch_norm parameter.
            if r == Role::BatchNorm && next.inputs.first() != Some(&c) {
                break;
            }
            let outside_ok =
                next.inputs
                    .iter()
                    .filter(|&&t| t != c)
                    .all(|&t| match graph.producer[t.index()] {
                        None => true,
                        Some(p) => {
                            !depends_on_members(graph, p, &chain, &pos, pos[k], &group, &chains)
                        }
                    });
            if !outside_ok {
                break;
            }
            chain.push(n);
            last_role = r;
        }
        if chain.len() >= 2 {
            for o in &chain {
                taken[o.index()] = true;
                group[o.index()] = Some(chains.len());
            }
            chains.push(chain);
        }
    }
    if chains.is_empty() {
        return Ok(graph.clone());
    }
    let mut removed_op = vec![false; graph.ops.len()];
    let mut removed_tensor = vec![false; graph.tensors.len()];
    let mut replace = BTreeMap::new();
    for chain in &chains {
        let (op, internal) = fused_op(graph, chain, &rd);
        let mut dropped = Vec::new();
        let mut gone = Vec::new();
        for t in &internal {
            removed_tensor[t.index()] = true;
            let tensor = graph.tensor(*t);
            if rd[t.index()].is_empty() {
                dropped.push(tensor.name.as_str());
            } else {
                gone.push(format!("{:?} ({} B)", tensor.name, tensor.size));
            }
        }
        for o in chain {
            removed_op[o.index()] = true;
        }
        let last = chain.iter().map(|o| o.index()).max().unwrap_or(0);
        notes.push(format!(
            "fused {} into {:?}: intermediates not materialised: {}{}",
            chain
                .iter()
                .map(|o| format!("{:?}", graph.ops[o.index()].name))
                .collect::<Vec<_>>()
                .join(", "),
            op.name,
            if gone.is_empty() {
                "none".to_string()
            } else {
                gone.join(", ")
            },
            if dropped.is_empty() {
                String::new()
            } else {
                format!(
                    "; unread outputs dropped (not materialised): {}",
                    dropped.join(", ")
                )
            }
        ));
        replace.insert(last, op);
    }
    rebuild(
        graph,
        graph.ops.clone(),
        &removed_op,
        &removed_tensor,
        &replace,
    )
}

/// The fused op of `chain` (old tensor ids) and the tensors that become internal.
fn fused_op(graph: &Graph, chain: &[OpId], rd: &[Vec<OpId>]) -> (Op, Vec<TensorId>) {
    let in_chain = |o: OpId| chain.contains(&o);
    let last = chain.len() - 1;
    let mut inputs: Vec<TensorId> = Vec::new();
    let mut outputs: Vec<TensorId> = Vec::new();
    let mut internal: Vec<TensorId> = Vec::new();
    // Which member output is an op output, in member order.
    for (m, &o) in chain.iter().enumerate() {
        let op = &graph.ops[o.index()];
        for &t in &op.inputs {
            let produced_inside = graph.producer[t.index()].is_some_and(in_chain);
            if !produced_inside && !inputs.contains(&t) {
                inputs.push(t);
            }
        }
        for (j, &t) in op.outputs.iter().enumerate() {
            let read_outside = rd[t.index()].iter().any(|&r| !in_chain(r));
            if graph.tensor(t).kind == TensorKind::Output || read_outside || (m == last && j == 0) {
                outputs.push(t);
            } else {
                internal.push(t);
            }
        }
    }
    let slot = |t: TensorId| -> Slot {
        if let Some(j) = internal.iter().position(|&x| x == t) {
            Slot::Internal(j)
        } else if let Some(k) = outputs.iter().position(|&x| x == t) {
            Slot::Output(k)
        } else {
            Slot::Input(inputs.iter().position(|&x| x == t).unwrap_or(0))
        }
    };
    let members: Vec<Member> = chain
        .iter()
        .map(|&o| {
            let op = &graph.ops[o.index()];
            Member {
                name: op.name.clone(),
                op_type: op.op_type.clone(),
                inputs: op.inputs.iter().map(|&t| slot(t)).collect(),
                outputs: op.outputs.iter().map(|&t| slot(t)).collect(),
                flops: op.flops,
                time_us: op.time_us,
                workspace: op.workspace,
                attrs: op.attrs.clone(),
                inplace: op.inplace.clone(),
            }
        })
        .collect();
    let tensors = internal
        .iter()
        .map(|&t| {
            let tensor = graph.tensor(t);
            let producer = chain
                .iter()
                .position(|&o| graph.producer[t.index()] == Some(o))
                .unwrap_or(0);
            InternalTensor {
                name: tensor.name.clone(),
                size: tensor.size,
                shape: tensor.shape.clone(),
                dtype: tensor.dtype.clone(),
                producer,
                read: !rd[t.index()].is_empty(),
            }
        })
        .collect();
    let ops: Vec<&Op> = chain.iter().map(|o| &graph.ops[o.index()]).collect();
    let sum = |f: fn(&Op) -> Option<f64>| -> Option<f64> {
        let v: Vec<f64> = ops.iter().filter_map(|o| f(o)).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    // In-place hint: the final output in place of an op input, when every link of the
    // chain back to that input is an in-place pair between equal sizes.
    let mut inplace = Vec::new();
    let final_t = graph.ops[chain[last].index()].outputs[0];
    let mut cur = (last, 0usize);
    while let Some(&(_, i)) = ops[cur.0].inplace.iter().find(|&&(o, _)| o == cur.1) {
        let src = ops[cur.0].inputs[i];
        if graph.tensor(src).size != graph.tensor(final_t).size {
            break;
        }
        match graph.producer[src.index()].and_then(|p| chain.iter().position(|&o| o == p)) {
            Some(m) => match ops[m].outputs.iter().position(|&t| t == src) {
                Some(j) => cur = (m, j),
                None => break,
            },
            None => {
                if let (Some(k), Some(j)) = (
                    outputs.iter().position(|&t| t == final_t),
                    inputs.iter().position(|&t| t == src),
                ) {
                    if graph.tensor(src).kind != TensorKind::Weight {
                        inplace.push((k, j));
                    }
                }
                break;
            }
        }
    }
    let op = Op {
        name: ops
            .iter()
            .map(|o| o.name.as_str())
            .collect::<Vec<_>>()
            .join("+"),
        op_type: format!(
            "fused:{}",
            ops.iter()
                .map(|o| base_type(o))
                .collect::<Vec<_>>()
                .join("+")
        ),
        inputs,
        outputs,
        flops: sum(|o| o.flops),
        time_us: sum(|o| o.time_us),
        workspace: ops.iter().map(|o| o.workspace).max().unwrap_or(0),
        attrs: None,
        inplace,
        fused: Some(Fused { members, tensors }),
    };
    (op, internal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::{equivalence, ExecOptions, KernelMode};

    fn t(name: &str, shape: &[u64], kind: &str) -> String {
        let n: u64 = shape.iter().product();
        format!(
            r#"{{"name": "{name}", "size": {}, "shape": {shape:?}, "dtype": "f32", "kind": "{kind}"}}"#,
            (n * 4).max(1)
        )
    }

    fn op(name: &str, ty: &str, ins: &[&str], outs: &[&str], extra: &str) -> String {
        format!(
            r#"{{"name": "{name}", "type": "{ty}", "inputs": {ins:?}, "outputs": {outs:?}{extra}}}"#
        )
    }

    fn graph(tensors: &[String], ops: &[String]) -> Graph {
        Graph::parse(&format!(
            r#"{{"format": "memplan-graph/1", "name": "g", "tensors": [{}], "ops": [{}]}}"#,
            tensors.join(","),
            ops.join(",")
        ))
        .unwrap()
    }

    const CONV: &str = r#", "attrs": {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1, "transposed": false}"#;

    /// conv -> empty -> batch_norm (3 outputs, stats unread) -> relu, as exported.
    fn conv_bn_relu(out_kind: &str) -> Vec<String> {
        vec![
            t("x", &[1, 2, 6, 6], "input"),
            t("w", &[3, 2, 3, 3], "weight"),
            t("g", &[3], "weight"),
            t("b", &[3], "weight"),
            t("m", &[3], "weight"),
            t("v", &[3], "weight"),
            t("c", &[1, 3, 6, 6], "activation"),
            r#"{"name": "e", "size": 1, "shape": [0], "dtype": "u8", "kind": "activation"}"#
                .to_string(),
            t("n.0", &[1, 3, 6, 6], "activation"),
            t("n.1", &[0], "activation"),
            t("n.2", &[0], "activation"),
            t("r", &[1, 3, 6, 6], out_kind),
        ]
    }

    fn conv_bn_relu_ops() -> Vec<String> {
        vec![
            op("conv", "conv2d", &["x", "w"], &["c"], CONV),
            op("empty", "empty", &[], &["e"], ""),
            op(
                "bn",
                "batch_norm",
                &["c", "g", "b", "m", "v"],
                &["n.0", "n.1", "n.2"],
                "",
            ),
            op("relu", "relu", &["n.0"], &["r"], r#", "inplace": [[0, 0]]"#),
        ]
    }

    fn fused(g: &Graph) -> Graph {
        Fuse::default().run(g).unwrap().graph
    }

    fn assert_same_outputs(g: &Graph, f: &Graph) {
        assert_same_outputs_with(g, f, &[KernelMode::Real, KernelMode::Mix]);
    }

    fn assert_same_outputs_with(g: &Graph, f: &Graph, modes: &[KernelMode]) {
        for &kernels in modes {
            let opts = ExecOptions {
                kernels,
                seed: 3,
                ..ExecOptions::default()
            };
            let e = equivalence(g, f, &opts, 0.0).unwrap();
            assert!(e.outputs_equal, "{kernels:?}: {:?}", e.first_mismatch);
        }
    }

    fn members(g: &Graph) -> Vec<Vec<&str>> {
        g.ops
            .iter()
            .filter_map(|o| o.fused.as_ref())
            .map(|f| f.members.iter().map(|m| m.name.as_str()).collect())
            .collect()
    }

    #[test]
    fn conv_batch_norm_relu_becomes_one_op_and_the_empty_op_keeps_its_place() {
        let g = graph(&conv_bn_relu("output"), &conv_bn_relu_ops());
        let out = Fuse::default().run(&g).unwrap();
        let f = &out.graph;
        assert_eq!(members(f), vec![vec!["conv", "bn", "relu"]]);
        assert_eq!(f.ops.len(), 2);
        assert_eq!(f.ops[0].name, "empty");
        let op = &f.ops[1];
        assert_eq!(op.op_type, "fused:conv2d+batch_norm+relu");
        assert_eq!(op.outputs.len(), 1);
        assert_eq!(f.tensor(op.outputs[0]).name, "r");
        // intermediates and the unread statistics are gone from the graph
        for name in ["c", "n.0", "n.1", "n.2"] {
            assert!(f.tensor_by_name(name).is_none(), "{name}");
        }
        assert_eq!(out.report.ops_before - out.report.ops_after, 2);
        assert_eq!(
            out.report.arena_tensor_bytes_before - out.report.arena_tensor_bytes_after,
            2 * 432 + 2
        );
        assert!(
            out.report.notes[0].contains("not materialised"),
            "{:?}",
            out.report.notes
        );
        assert_same_outputs(&g, f);
    }

    #[test]
    fn the_prefixes_conv_bn_conv_act_and_bn_act_fuse() {
        // conv -> bn (bn output read twice: the chain stops after bn)
        let mut ts = conv_bn_relu("activation");
        ts.push(t("s", &[1, 3, 6, 6], "output"));
        let mut ops = conv_bn_relu_ops();
        ops.push(op("sum", "add", &["r", "n.0"], &["s"], ""));
        let g = graph(&ts, &ops);
        let f = fused(&g);
        assert_eq!(members(&f), vec![vec!["conv", "bn"], vec!["relu", "sum"]]);
        assert_same_outputs(&g, &f);
        // conv -> act
        let g = graph(
            &[
                t("x", &[1, 2, 6, 6], "input"),
                t("w", &[3, 2, 3, 3], "weight"),
                t("c", &[1, 3, 6, 6], "activation"),
                t("y", &[1, 3, 6, 6], "output"),
            ],
            &[
                op("conv", "conv2d", &["x", "w"], &["c"], CONV),
                op("act", "hardtanh", &["c"], &["y"], ""),
            ],
        );
        let f = fused(&g);
        assert_eq!(members(&f), vec![vec!["conv", "act"]]);
        assert_same_outputs(&g, &f);
        // bn -> act (the conv output is also a graph output, so conv stays alone)
        let mut ts = conv_bn_relu("output");
        ts[6] = t("c", &[1, 3, 6, 6], "output");
        let g = graph(&ts, &conv_bn_relu_ops());
        let f = fused(&g);
        assert_eq!(members(&f), vec![vec!["bn", "relu"]]);
        assert_same_outputs(&g, &f);
    }

    #[test]
    fn an_elementwise_chain_takes_its_outside_operands_as_inputs() {
        let g = graph(
            &[
                t("x", &[2, 8], "input"),
                t("y", &[2, 8], "input"),
                t("z", &[8], "weight"),
                t("a", &[2, 8], "activation"),
                t("r", &[2, 8], "activation"),
                t("m", &[2, 8], "activation"),
                t("s", &[2, 8], "output"),
            ],
            &[
                op(
                    "add",
                    "add",
                    &["x", "y"],
                    &["a"],
                    r#", "inplace": [[0, 0]]"#,
                ),
                op("relu", "relu", &["a"], &["r"], r#", "inplace": [[0, 0]]"#),
                op("mul", "mul", &["r", "z"], &["m"], ""),
                op("sig", "sigmoid", &["m"], &["s"], ""),
            ],
        );
        let f = fused(&g);
        assert_eq!(members(&f), vec![vec!["add", "relu", "mul", "sig"]]);
        let names: Vec<&str> = f.ops[0]
            .inputs
            .iter()
            .map(|&i| f.tensor(i).name.as_str())
            .collect();
        assert_eq!(names, ["x", "y", "z"]);
        // mul breaks the in-place chain back to x
        assert!(f.ops[0].inplace.is_empty());
        assert_same_outputs(&g, &f);
    }

    #[test]
    fn an_in_place_chain_back_to_an_input_keeps_its_hint() {
        let g = graph(
            &[
                t("x", &[2, 8], "input"),
                t("y", &[2, 8], "input"),
                t("a", &[2, 8], "activation"),
                t("r", &[2, 8], "output"),
            ],
            &[
                op(
                    "add",
                    "add",
                    &["x", "y"],
                    &["a"],
                    r#", "inplace": [[0, 0]]"#,
                ),
                op("relu", "relu", &["a"], &["r"], r#", "inplace": [[0, 0]]"#),
            ],
        );
        let f = fused(&g);
        assert_eq!(f.ops[0].inplace, vec![(0, 0)]);
        assert_same_outputs(&g, &f);
    }

    #[test]
    fn a_zero_pad_folds_into_the_following_conv_and_computes_the_same_values() {
        let g = graph(
            &[
                t("x", &[1, 2, 5, 5], "input"),
                t("w", &[3, 2, 3, 3], "weight"),
                t("p", &[1, 2, 9, 7], "activation"),
                t("y", &[1, 3, 9, 7], "output"),
            ],
            &[
                op(
                    "pad",
                    "constant_pad_nd",
                    &["x"],
                    &["p"],
                    r#", "attrs": {"pad": [1, 1, 2, 2], "value": 0}"#,
                ),
                op("conv", "conv2d", &["p", "w"], &["y"], CONV),
            ],
        );
        let out = Fuse::default().run(&g).unwrap();
        let f = out.graph;
        assert_eq!(f.ops.len(), 1);
        let conv = &f.ops[0];
        assert_eq!(conv.name, "conv");
        assert_eq!(f.tensor(conv.inputs[0]).name, "x");
        assert_eq!(
            conv.attrs.as_ref().unwrap()["padding"],
            serde_json::json!([3, 2])
        );
        assert!(out.report.notes[0].starts_with("folded pad"));
        // Real kernels only: the mixing kernel treats the pad as an opaque op, which folding
        // removes by design.
        assert_same_outputs_with(&g, &f, &[KernelMode::Real]);
    }

    #[test]
    fn asymmetric_nonzero_and_channel_pads_stay() {
        for attrs in [
            r#"{"pad": [1, 0, 0, 0], "value": 0}"#,
            r#"{"pad": [1, 1, 0, 0], "value": 1.5}"#,
            r#"{"pad": [0, 0, 0, 0, 1, 1], "value": 0}"#,
        ] {
            let g = graph(
                &[
                    t("x", &[1, 2, 5, 5], "input"),
                    t("w", &[3, 2, 3, 3], "weight"),
                    t("p", &[1, 2, 5, 6], "activation"),
                    t("y", &[1, 3, 5, 6], "output"),
                ],
                &[
                    op(
                        "pad",
                        "pad",
                        &["x"],
                        &["p"],
                        &format!(r#", "attrs": {attrs}"#),
                    ),
                    op("conv", "conv2d", &["p", "w"], &["y"], CONV),
                ],
            );
            assert_eq!(fused(&g).ops.len(), 2, "{attrs}");
        }
    }

    #[test]
    fn an_intermediate_with_a_second_reader_is_not_fused() {
        let mut ts = conv_bn_relu("output");
        ts.push(t("z", &[1, 3, 6, 6], "output"));
        let mut ops = conv_bn_relu_ops();
        ops.push(op("other", "neg", &["c"], &["z"], ""));
        let g = graph(&ts, &ops);
        let f = fused(&g);
        // conv's output has two readers: only bn -> relu fuses
        assert_eq!(members(&f), vec![vec!["bn", "relu"]]);
        assert!(f.tensor_by_name("c").is_some());
        assert_same_outputs(&g, &f);
    }

    #[test]
    fn a_graph_output_intermediate_is_not_fused_away() {
        let mut ts = conv_bn_relu("output");
        ts[8] = t("n.0", &[1, 3, 6, 6], "output");
        ts[6] = t("c", &[1, 3, 6, 6], "output");
        let g = graph(&ts, &conv_bn_relu_ops());
        let out = Fuse::default().run(&g).unwrap();
        assert_eq!(out.graph, g);
        assert_eq!(out.report.notes, vec!["nothing to fuse"]);
    }

    #[test]
    fn a_training_conv_whose_output_is_saved_for_backward_fuses_nothing() {
        let mut ts = conv_bn_relu("activation");
        ts[9] = t("n.1", &[3], "activation");
        ts[10] = t("n.2", &[3], "activation");
        ts.push(t("gr", &[1, 3, 6, 6], "input"));
        ts.push(t("gb", &[1, 3, 6, 6], "activation"));
        ts.push(t("gx", &[1, 2, 6, 6], "output"));
        ts.push(t("next", &[1, 3, 6, 6], "output"));
        let mut ops = conv_bn_relu_ops();
        ops[2] = op(
            "bn",
            "batch_norm",
            &["c", "g", "b"],
            &["n.0", "n.1", "n.2"],
            "",
        );
        // the next layer and relu's grad read relu's output; bn's grad reads the conv output,
        // the saved statistics and (here) bn's output: every intermediate is saved
        ops.push(op("next", "neg", &["r"], &["next"], ""));
        ops.push(op(
            "relu_bw",
            "threshold_backward",
            &["gr", "r"],
            &["gb"],
            "",
        ));
        ops.push(op(
            "bn_bw",
            "batch_norm_backward",
            &["gb", "c", "n.1", "n.2", "n.0", "x"],
            &["gx"],
            "",
        ));
        let g = graph(&ts, &ops);
        let f = fused(&g);
        assert_eq!(f, g, "{:?}", members(&f));
        // when bn's output is not saved (it is not, in PyTorch), only bn -> relu fuses:
        // the conv output, saved for backward, stays in the arena
        ops[6] = op(
            "bn_bw",
            "batch_norm_backward",
            &["gb", "c", "n.1", "n.2", "x"],
            &["gx"],
            "",
        );
        let g = graph(&ts, &ops);
        let f = fused(&g);
        assert_eq!(members(&f), vec![vec!["bn", "relu"]]);
        assert!(f.tensor_by_name("c").is_some());
        let fop = f.ops.iter().find(|o| o.fused.is_some()).unwrap();
        let outs: Vec<&str> = fop
            .outputs
            .iter()
            .map(|&o| f.tensor(o).name.as_str())
            .collect();
        assert_eq!(outs, ["n.1", "n.2", "r"]);
        assert_same_outputs(&g, &f);
    }

    #[test]
    fn an_operand_that_depends_on_a_member_stops_the_chain() {
        // bn's statistics feed `scale`, whose output is the add's other operand: fusing the
        // add would make the fused op read its own output.
        let mut ts = conv_bn_relu("activation");
        ts[9] = t("n.1", &[3], "activation");
        ts[10] = t("n.2", &[3], "activation");
        ts.push(t("k", &[3, 1, 1], "activation"));
        ts.push(t("s", &[1, 3, 6, 6], "output"));
        let mut ops = conv_bn_relu_ops();
        ops[2] = op(
            "bn",
            "batch_norm",
            &["c", "g", "b"],
            &["n.0", "n.1", "n.2"],
            "",
        );
        ops[3] = op("scale", "neg", &["n.1"], &["k"], "");
        ops.push(op("add", "add", &["n.0", "k"], &["s"], ""));
        ts[11] = t("r", &[1, 3, 6, 6], "activation");
        ts.retain(|x| !x.contains(r#""name": "r""#));
        let g = graph(&ts, &ops);
        let f = fused(&g);
        // scale -> add is a chain of its own (after the conv -> bn op)
        assert_eq!(members(&f), vec![vec!["conv", "bn"], vec!["scale", "add"]]);
        let fop = f.ops.iter().find(|o| o.fused.is_some()).unwrap();
        let outs: Vec<&str> = fop
            .outputs
            .iter()
            .map(|&o| f.tensor(o).name.as_str())
            .collect();
        assert_eq!(outs, ["n.0", "n.1"]);
        assert_same_outputs(&g, &f);
    }

    #[test]
    fn fusing_twice_changes_nothing_more() {
        let g = graph(&conv_bn_relu("output"), &conv_bn_relu_ops());
        let f = fused(&g);
        assert_eq!(fused(&f), f);
    }
}
