//! What a plan does to the arena over time, recovered from its instruction stream alone:
//! the blocks (offset × step rectangles), live bytes per step, and the fragmentation rate.
//!
//! Step `s` is the `s`-th `exec`. A block allocated before exec `s` and freed after exec `e`
//! spans steps `s..=e`; an op's workspace spans its own step; a block never freed lives to the
//! last step. One pass over the instructions plus one sweep over the steps:
//! O(I + S·L log L) for I instructions, S steps and at most L blocks live at once.

use crate::graph::Graph;
use crate::plan::{Instruction, Plan};
use std::collections::BTreeMap;
use thiserror::Error;

/// A plan that names something its graph does not have (a plan of another graph).
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("plan of {plan} does not fit graph {graph}: {what}")]
pub struct ProfileError {
    /// The plan's graph name.
    pub plan: String,
    /// The graph's name.
    pub graph: String,
    /// The unknown tensor or op.
    pub what: String,
}

/// One arena reservation: `[offset, offset + size)` during steps `start..=end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Tensor name, or `ws:OP` for an op's workspace.
    pub name: String,
    /// Arena offset (bytes).
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// First step (exec index) the block is reserved for.
    pub start: usize,
    /// Last step the block is reserved for.
    pub end: usize,
}

/// An arena event in instruction order (what an allocator replaying the plan sees).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArenaEvent {
    /// Block `index` of [`PlanProfile::blocks`] is reserved.
    Alloc(usize),
    /// Block `index` is released.
    Free(usize),
}

/// The arena over time for one plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanProfile {
    /// Number of exec steps.
    pub steps: usize,
    /// Every reservation, in instruction order.
    pub blocks: Vec<Block>,
    /// Reservations and releases in instruction order (workspaces: reserve, release around
    /// their exec).
    pub events: Vec<ArenaEvent>,
    /// Bytes reserved while each step runs (workspaces included).
    pub live: Vec<u64>,
    /// Largest `offset + size` (bytes).
    pub peak: u64,
    /// Largest live bytes at one step (the order's LOAD as this plan realises it).
    pub max_live: u64,
    /// Fragmentation rate of seed 001 §4.1, `1 − largest free block / total free memory`,
    /// measured over the arena `[0, peak)` at every step and averaged over the steps (a step
    /// without free memory counts as 0). 0 means every step's free bytes form one hole.
    pub fragmentation: f64,
}

impl PlanProfile {
    /// `1 − max_live / peak`: the share of the arena never used at the busiest step.
    pub fn waste(&self) -> f64 {
        if self.peak == 0 {
            0.0
        } else {
            1.0 - self.max_live as f64 / self.peak as f64
        }
    }
}

/// Recovers the arena over time from `plan` (a plan of `graph`; validate it first).
pub fn profile(graph: &Graph, plan: &Plan) -> Result<PlanProfile, ProfileError> {
    let unknown = |what: String| ProfileError {
        plan: plan.graph.clone(),
        graph: graph.name.clone(),
        what,
    };
    let ops = graph.op_indices();
    let mut blocks: Vec<Block> = Vec::new();
    let mut events = Vec::new();
    let mut open: BTreeMap<String, usize> = BTreeMap::new();
    let mut step = 0usize;
    let size_of = |name: &str| {
        graph
            .tensor_by_name(name)
            .map(|t| graph.tensor(t).size)
            .ok_or_else(|| unknown(format!("tensor {name}")))
    };
    for ins in &plan.instructions {
        match ins {
            Instruction::Alloc { tensor, offset, .. }
            | Instruction::SpillIn { tensor, offset, .. } => {
                let size = size_of(tensor)?;
                open.insert(tensor.clone(), blocks.len());
                events.push(ArenaEvent::Alloc(blocks.len()));
                blocks.push(Block {
                    name: tensor.clone(),
                    offset: *offset,
                    size,
                    start: step,
                    end: usize::MAX,
                });
            }
            Instruction::Free { tensor } | Instruction::SpillOut { tensor, .. } => {
                let b = open
                    .remove(tensor)
                    .ok_or_else(|| unknown(format!("free of unallocated tensor {tensor}")))?;
                // Freed before any exec: it lived for no step; keep it at step 0.
                blocks[b].end = step.saturating_sub(1).max(blocks[b].start);
                events.push(ArenaEvent::Free(b));
            }
            Instruction::Exec {
                node,
                workspace_offset,
                ..
            } => {
                let op = *ops
                    .get(node.as_str())
                    .ok_or_else(|| unknown(format!("op {node}")))?;
                let ws = graph.ops[op].workspace;
                if let (Some(offset), true) = (workspace_offset, ws > 0) {
                    let b = blocks.len();
                    blocks.push(Block {
                        name: format!("ws:{node}"),
                        offset: *offset,
                        size: ws,
                        start: step,
                        end: step,
                    });
                    events.push(ArenaEvent::Alloc(b));
                    events.push(ArenaEvent::Free(b));
                }
                step += 1;
            }
        }
    }
    let steps = step.max(1);
    for b in &mut blocks {
        if b.end == usize::MAX {
            b.end = steps - 1;
        }
        b.end = b.end.min(steps - 1);
        b.start = b.start.min(b.end);
    }
    let peak = blocks.iter().map(|b| b.offset + b.size).max().unwrap_or(0);
    // Sweep the steps: blocks starting at s join, blocks ending at s leave after s.
    let mut starts: Vec<Vec<usize>> = vec![Vec::new(); steps];
    for (i, b) in blocks.iter().enumerate() {
        starts[b.start].push(i);
    }
    let mut active: BTreeMap<(u64, usize), u64> = BTreeMap::new();
    let mut live = vec![0u64; steps];
    let mut frag_sum = 0.0;
    for s in 0..steps {
        for &i in &starts[s] {
            active.insert((blocks[i].offset, i), blocks[i].size);
        }
        let (mut cursor, mut largest, mut used) = (0u64, 0u64, 0u64);
        for (&(off, _), &size) in &active {
            largest = largest.max(off.saturating_sub(cursor));
            used += size;
            cursor = cursor.max(off + size);
        }
        largest = largest.max(peak.saturating_sub(cursor));
        live[s] = used;
        let free = peak.saturating_sub(used);
        if free > 0 {
            frag_sum += 1.0 - (largest.min(free) as f64 / free as f64);
        }
        active.retain(|&(_, i), _| blocks[i].end > s);
    }
    let max_live = live.iter().copied().max().unwrap_or(0);
    Ok(PlanProfile {
        steps,
        blocks,
        events,
        live,
        peak,
        max_live,
        fragmentation: frag_sum / steps as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::{plan, OrderMode, PlanOptions, Strategy};

    fn sample() -> Graph {
        Graph::parse(include_str!("../../samples/resnet_block.train.json")).unwrap()
    }

    #[test]
    fn the_profile_of_a_plan_matches_its_replay() {
        let g = sample();
        let opts = PlanOptions {
            order: OrderMode::Given,
            strategy: Strategy::Heuristic,
            time_limit: None,
            ..PlanOptions::default()
        };
        let p = plan(&g, &opts).unwrap();
        let replay = crate::validate(&g, &p, None).unwrap();
        let prof = profile(&g, &p).unwrap();
        assert_eq!(prof.steps, g.ops.len());
        assert_eq!(prof.peak, replay.peak);
        assert_eq!(prof.max_live, replay.max_live);
        assert!((0.0..=1.0).contains(&prof.fragmentation));
        assert!(prof.waste() >= 0.0);
    }

    #[test]
    fn a_plan_naming_an_unknown_tensor_is_refused_by_name() {
        let g = sample();
        let mut p = plan(&g, &PlanOptions::default()).unwrap();
        p.instructions.insert(
            0,
            Instruction::Alloc {
                tensor: "nope".into(),
                offset: 0,
                mem_id: None,
                inplace_of: None,
            },
        );
        let e = profile(&g, &p).unwrap_err();
        assert!(e.to_string().contains("tensor nope"), "{e}");
    }
}
