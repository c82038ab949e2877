//! The one walk over a plan's instruction stream that the arena analyses share
//! ([`profile`](super::profile::profile) and the Chrome trace, [`crate::trace`]): each
//! instruction as the arena sees it ([`ArenaStep`]: a reservation, a release or an exec),
//! with its tensor's size and its op resolved against the graph by name. O(1) per
//! instruction after one O(T + N) index of the graph's names.

use crate::graph::{Graph, TensorId};
use crate::plan::{Instruction, Plan};
use std::collections::HashMap;

/// One instruction as the arena sees it. A name the graph lacks resolves to `None`; each
/// user says what that means for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArenaStep<'p> {
    /// `alloc` (`spill: false`) or `spill_in` (`spill: true`): `tensor` is reserved at
    /// `offset`.
    Reserve {
        /// Tensor name.
        tensor: &'p str,
        /// Arena offset (bytes).
        offset: u64,
        /// The tensor's size (bytes), `None` when the graph has no such tensor.
        size: Option<u64>,
        /// Whether it comes back from the host (`spill_in`).
        spill: bool,
    },
    /// `free` (`spill: false`) or `spill_out` (`spill: true`): `tensor`'s range is released.
    Release {
        /// Tensor name.
        tensor: &'p str,
        /// The tensor's size (bytes), `None` when the graph has no such tensor.
        size: Option<u64>,
        /// Whether it goes to the host (`spill_out`).
        spill: bool,
    },
    /// `exec`: op `node` runs.
    Exec {
        /// Op name.
        node: &'p str,
        /// The op's index in [`Graph::ops`], `None` when the graph has no such op.
        op: Option<usize>,
        /// The workspace offset the instruction gives.
        workspace_offset: Option<u64>,
    },
}

/// The instructions of `plan` as [`ArenaStep`]s, in order, resolved against `graph` (event
/// instructions, which touch no byte, are skipped).
pub fn arena_steps<'g, 'p>(
    graph: &'g Graph,
    plan: &'p Plan,
) -> impl Iterator<Item = ArenaStep<'p>> + use<'g, 'p> {
    // One map each, not a scan per name: plans of million-op graphs are walked too.
    let ids: HashMap<&'g str, TensorId> = graph.tensor_ids();
    let ops: HashMap<&'g str, usize> = graph.op_indices();
    let size = move |name: &str| ids.get(name).map(|&t| graph.tensor(t).size);
    // Events order streams and touch no byte: they are not arena steps.
    plan.instructions.iter().filter_map(move |ins| {
        Some(match ins {
            Instruction::RecordEvent { .. } | Instruction::WaitEvent { .. } => return None,
            Instruction::Alloc { tensor, offset, .. } => ArenaStep::Reserve {
                tensor,
                offset: *offset,
                size: size(tensor),
                spill: false,
            },
            Instruction::SpillIn { tensor, offset, .. } => ArenaStep::Reserve {
                tensor,
                offset: *offset,
                size: size(tensor),
                spill: true,
            },
            Instruction::Free { tensor, .. } => ArenaStep::Release {
                tensor,
                size: size(tensor),
                spill: false,
            },
            Instruction::SpillOut { tensor, .. } => ArenaStep::Release {
                tensor,
                size: size(tensor),
                spill: true,
            },
            Instruction::Exec {
                node,
                workspace_offset,
                ..
            } => ArenaStep::Exec {
                node,
                op: ops.get(node.as_str()).copied(),
                workspace_offset: *workspace_offset,
            },
        })
    })
}
