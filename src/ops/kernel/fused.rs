//! The kernel of a fused op ([`crate::fused`]): its members run in sequence with the very
//! kernels the unfused graph would use (selected per member on the op's
//! [`MemberGraph`], with the members' original names, so the mixing kernel is seeded as
//! before), hence a fused graph's outputs are bit-identical to the unfused graph's.
//!
//! Intermediates never touch the arena. Each intermediate that a later member reads gets a
//! *home*: an output buffer of the fused op of the same size that is free over the
//! intermediate's lifetime (so conv → batch_norm → relu runs entirely in the final output
//! buffer: the conv writes it, batch_norm and relu update it in place), otherwise a private
//! buffer (kernel scratch, reported as memory outside the plan). A member whose output
//! shares a buffer with one of its inputs runs in place when its kernel is element-wise
//! (unary, batch_norm, a binary op without broadcasting, copy); any other kernel reads a
//! private copy of that input. An intermediate that nobody reads is not materialised when
//! it is a trailing output the kernel would only fill with the mixing pattern (batch_norm's
//! placeholder statistics in an inference graph); otherwise it gets a private buffer.
//!
//! Assigning homes is a greedy sweep over the intermediates in production order
//! (O(members · outputs)).

use super::{fills, select, Fill, Kernel, KernelMode};
use crate::fused::{MemberGraph, Slot};
use crate::graph::{Graph, Op};

/// Where a member operand lives during a fused exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buf {
    /// The fused op's input at this index.
    Input(usize),
    /// The fused op's output buffer at this index.
    Output(usize),
    /// Private buffer at this index of [`FusedKernel::buffers`].
    Private(usize),
}

/// One member's exec inside a fused op.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberStep {
    /// The member's original op name (seeds the mixing kernel).
    pub name: String,
    /// The member's kernel, as selected in the unfused graph.
    pub kernel: Kernel,
    /// Input buffers in the member's order.
    pub inputs: Vec<Buf>,
    /// Output buffers in the member's order (trailing unread intermediates left out).
    pub outputs: Vec<Buf>,
    /// How each output is filled by the mixing kernel.
    pub fills: Vec<Fill>,
    /// Workspace bytes the member uses (a prefix of the fused op's workspace).
    pub workspace: u64,
}

/// A fused op's member sequence with every operand's buffer resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct FusedKernel {
    /// Members in execution order.
    pub steps: Vec<MemberStep>,
    /// Sizes of the private buffers (bytes).
    pub buffers: Vec<u64>,
    /// Number of outputs of the fused op.
    pub outputs: usize,
}

impl FusedKernel {
    /// Bytes of the private buffers (held during the whole exec).
    pub fn private_bytes(&self) -> u64 {
        self.buffers.iter().sum()
    }
}

/// Selects the kernel of fused op `op` (`None` when it is not fused).
pub fn select_fused(graph: &Graph, op: &Op, mode: KernelMode) -> Option<FusedKernel> {
    let fused = op.fused.as_ref()?;
    let mg = MemberGraph::of(graph, op)?;
    let fill = fills(&mg.graph);
    let n = fused.members.len();
    // Last member reading each internal tensor, and the member writing each op output.
    let mut last_read: Vec<Option<usize>> = vec![None; fused.tensors.len()];
    let mut out_writer = vec![n; op.outputs.len()];
    for (m, mem) in fused.members.iter().enumerate() {
        for s in &mem.inputs {
            if let Slot::Internal(j) = s {
                last_read[*j] = Some(m);
            }
        }
        for s in &mem.outputs {
            if let Slot::Output(k) = s {
                out_writer[*k] = m;
            }
        }
    }
    let out_size: Vec<u64> = op.outputs.iter().map(|&t| graph.tensor(t).size).collect();
    // busy[k]: last member that reads the intermediate currently homed in output buffer k.
    let mut busy: Vec<Option<usize>> = vec![None; op.outputs.len()];
    let mut buffers = Vec::new();
    let mut home: Vec<Option<Buf>> = vec![None; fused.tensors.len()];
    for (j, t) in fused.tensors.iter().enumerate() {
        let Some(r) = last_read[j] else {
            continue;
        };
        let p = t.producer;
        let k = (0..op.outputs.len()).find(|&k| {
            out_size[k] == t.size && out_writer[k] >= r && busy[k].is_none_or(|b| b <= p)
        });
        home[j] = Some(match k {
            Some(k) => {
                busy[k] = Some(r);
                Buf::Output(k)
            }
            None => {
                buffers.push(t.size);
                Buf::Private(buffers.len() - 1)
            }
        });
    }
    let mut steps = Vec::with_capacity(n);
    for (m, mem) in fused.members.iter().enumerate() {
        let member_op = &mg.graph.ops[m];
        let kernel = select(&mg.graph, member_op, mode);
        let buf = |s: Slot, home: &[Option<Buf>]| match s {
            Slot::Input(i) => Some(Buf::Input(i)),
            Slot::Output(k) => Some(Buf::Output(k)),
            Slot::Internal(j) => home[j],
        };
        let inputs = mem
            .inputs
            .iter()
            .map(|&s| buf(s, &home))
            .collect::<Option<Vec<_>>>()?;
        // Keep outputs up to the last one that is needed and every output the kernel
        // computes itself (a kernel may write them as a group, like batch_norm's statistics);
        // unread ones among them get a private buffer. Only trailing outputs that would get
        // the mixing fill, written one by one, are left out.
        let keep = mem
            .outputs
            .iter()
            .rposition(|&s| buf(s, &home).is_some())
            .map_or(0, |p| p + 1)
            .max(kernel.computed_outputs().min(mem.outputs.len()));
        let mut outputs = Vec::with_capacity(keep);
        for &s in &mem.outputs[..keep] {
            outputs.push(match buf(s, &home) {
                Some(b) => b,
                None => {
                    let Slot::Internal(j) = s else {
                        return None;
                    };
                    buffers.push(fused.tensors[j].size);
                    Buf::Private(buffers.len() - 1)
                }
            });
        }
        steps.push(MemberStep {
            name: mem.name.clone(),
            kernel,
            inputs,
            fills: mem.outputs[..keep]
                .iter()
                .map(|&s| fill[mg.tensor(s).index()])
                .collect(),
            outputs,
            workspace: mem.workspace,
        });
    }
    Some(FusedKernel {
        steps,
        buffers,
        outputs: op.outputs.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_bn_relu_runs_in_the_output_buffer_and_unread_statistics_are_not_handed_over() {
        let g = Graph::parse(
            r#"{"format": "memplan-graph/1",
                "tensors": [
                  {"name": "x", "size": 64, "shape": [1,1,4,4], "dtype": "f32", "kind": "input"},
                  {"name": "w", "size": 4, "shape": [1,1,1,1], "dtype": "f32", "kind": "weight"},
                  {"name": "g", "size": 4, "shape": [1], "dtype": "f32", "kind": "weight"},
                  {"name": "b", "size": 4, "shape": [1], "dtype": "f32", "kind": "weight"},
                  {"name": "m", "size": 4, "shape": [1], "dtype": "f32", "kind": "weight"},
                  {"name": "v", "size": 4, "shape": [1], "dtype": "f32", "kind": "weight"},
                  {"name": "y", "size": 64, "shape": [1,1,4,4], "dtype": "f32", "kind": "output"}],
                "ops": [{"name": "c+n+r", "type": "fused:conv2d+batch_norm+relu",
                  "inputs": ["x", "w", "g", "b", "m", "v"], "outputs": ["y"],
                  "fused": [
                    {"name": "c", "type": "conv2d", "inputs": ["x", "w"], "outputs": ["c"],
                     "tensors": [{"name": "c", "size": 64, "shape": [1,1,4,4], "dtype": "f32"}]},
                    {"name": "n", "type": "batch_norm", "inputs": ["c", "g", "b", "m", "v"],
                     "outputs": ["n.0", "n.1", "n.2"],
                     "tensors": [{"name": "n.0", "size": 64, "shape": [1,1,4,4], "dtype": "f32"},
                                 {"name": "n.1", "size": 1, "shape": [0], "dtype": "f32"},
                                 {"name": "n.2", "size": 1, "shape": [0], "dtype": "f32"}]},
                    {"name": "r", "type": "relu", "inputs": ["n.0"], "outputs": ["y"]}]}]}"#,
        )
        .unwrap();
        let k = select_fused(&g, &g.ops[0], KernelMode::Real).unwrap();
        assert!(k.buffers.is_empty(), "{k:?}");
        assert_eq!(k.steps[0].outputs, vec![Buf::Output(0)]);
        assert_eq!(k.steps[1].inputs[0], Buf::Output(0));
        assert_eq!(k.steps[1].outputs, vec![Buf::Output(0)]);
        assert_eq!(k.steps[2].inputs, vec![Buf::Output(0)]);
        assert_eq!(k.steps[0].kernel.name(), "conv2d");
        assert_eq!(k.steps[1].kernel.name(), "batch_norm");
        assert_eq!(k.steps[2].kernel.name(), "unary");
    }
}
