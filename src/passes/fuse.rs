//! Operator fusion: chains of ops whose intermediates are read only by the
//! next op of the chain become one fused op ([`crate::fused`]), so the intermediates never
//! occupy the arena.
//!
//! Three modules carry "fused" in their path and are three different things: this one is
//! the fusion *pass* (the graph rewrite that creates fused ops); [`crate::graph::fused`]
//! (also at `crate::fused`) is the *format* of a fused op (the optional `fused` field on an
//! op: members, slots, internal tensors); [`crate::ops::kernel::fused`] is the *kernel* (what
//! the executor runs: a fused op's members in sequence).
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
use super::{Pass, PassError, PassOutcome, PassReport, RewriteStep};
use crate::fused::{Fused, InternalTensor, Member, Slot};
use crate::graph::{Graph, Op, OpId, TensorId, TensorKind};
use serde_json::Value;
use std::collections::BTreeMap;

/// The pass's name.
pub const NAME: &str = "fuse";

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
        pass: NAME,
        source: e,
    }
}

impl Pass for Fuse {
    fn name(&self) -> &'static str {
        NAME
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
        let step = (g != *graph).then_some(RewriteStep::Fuse {
            fold_pad: self.fold_pad,
            chains: self.chains,
        });
        Ok(PassOutcome {
            graph: g,
            report,
            step,
        })
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
                    pass: NAME,
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
    rb.finish(new_ops, NAME)
}

/// The `recompute` flag of a fused op of `members`: forbidden when one member may not be
/// recomputed ([`crate::ops::may_recompute`], flag or type), allowed explicitly when every
/// member may be but one only by its flag, else absent (the members' types decide).
fn fused_recompute(members: &[&Op]) -> Option<bool> {
    if !members.iter().all(|o| crate::ops::may_recompute(o)) {
        Some(false)
    } else if members
        .iter()
        .all(|o| crate::ops::recompute::recompute_by_default(&o.op_type))
    {
        None
    } else {
        Some(true)
    }
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
        stream: None,
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
        recompute: fused_recompute(&ops),
    };
    (op, internal)
}
