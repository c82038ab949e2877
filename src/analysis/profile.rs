//! What a plan does to the arena over time, recovered from its instruction stream alone:
//! the blocks (offset × step rectangles), live bytes per step, and the fragmentation rate.
//!
//! Step `s` is the `s`-th `exec`. A block allocated before exec `s` and freed after exec `e`
//! spans steps `s..=e`; an op's workspace spans its own step; a block never freed lives to the
//! last step. One pass over the instructions ([`arena_steps`], the walk shared with the
//! Chrome trace) plus one sweep over the steps:
//! O(I + S·L log L) for I instructions, S steps and at most L blocks live at once.

use super::walk::{arena_steps, ArenaStep};
use crate::graph::Graph;
use crate::plan::Plan;
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
    /// Mean fragmentation: the fragmentation rate `1 − largest free block / total free memory`,
    /// measured over the arena `[0, peak)` at every step and averaged over the steps (a step
    /// without free memory counts as 0). 0 means every step's free bytes form one hole. See
    /// [`PlanProfile::fragmentation_at_peak`] for the figure at the peak step.
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
    let mut blocks: Vec<Block> = Vec::new();
    let mut events = Vec::new();
    let mut open: BTreeMap<&str, usize> = BTreeMap::new();
    let mut step = 0usize;
    for ins in arena_steps(graph, plan) {
        match ins {
            ArenaStep::Reserve {
                tensor,
                offset,
                size,
                ..
            } => {
                let size = size.ok_or_else(|| unknown(format!("tensor {tensor}")))?;
                open.insert(tensor, blocks.len());
                events.push(ArenaEvent::Alloc(blocks.len()));
                blocks.push(Block {
                    name: tensor.to_string(),
                    offset,
                    size,
                    start: step,
                    end: usize::MAX,
                });
            }
            ArenaStep::Release { tensor, .. } => {
                let b = open
                    .remove(tensor)
                    .ok_or_else(|| unknown(format!("free of unallocated tensor {tensor}")))?;
                // Freed before any exec: it lived for no step; keep it at step 0.
                blocks[b].end = step.saturating_sub(1).max(blocks[b].start);
                events.push(ArenaEvent::Free(b));
            }
            ArenaStep::Exec {
                node,
                op,
                workspace_offset,
            } => {
                let op = op.ok_or_else(|| unknown(format!("op {node}")))?;
                let ws = graph.ops[op].workspace;
                if let (Some(offset), true) = (workspace_offset, ws > 0) {
                    let b = blocks.len();
                    blocks.push(Block {
                        name: format!("ws:{node}"),
                        offset,
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
    let mut live = vec![0u64; steps];
    let mut frag_sum = 0.0;
    sweep(&blocks, steps, |s, active| {
        // Sum of sizes (not the union): in-place partners count twice, as the replay does.
        live[s] = active.values().sum();
        let space = free_space(active.iter().map(|(&(off, _), &size)| (off, size)), 0, peak);
        let free = peak.saturating_sub(live[s]);
        if free > 0 {
            frag_sum += 1.0 - (space.largest_free_bytes.min(free) as f64 / free as f64);
        }
    });
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

/// Calls `f(step, active)` for every step, `active` holding the blocks reserved during that
/// step keyed by `(offset, block index)` with their sizes. O(S·L log L).
fn sweep(blocks: &[Block], steps: usize, mut f: impl FnMut(usize, &BTreeMap<(u64, usize), u64>)) {
    let mut starts: Vec<Vec<usize>> = vec![Vec::new(); steps];
    for (i, b) in blocks.iter().enumerate() {
        if b.start < steps {
            starts[b.start].push(i);
        }
    }
    let mut active: BTreeMap<(u64, usize), u64> = BTreeMap::new();
    for (s, starting) in starts.iter().enumerate() {
        for &i in starting {
            active.insert((blocks[i].offset, i), blocks[i].size);
        }
        f(s, &active);
        active.retain(|&(_, i), _| blocks[i].end > s);
    }
}

/// The free space of a region `[lo, hi)` around some reserved ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FreeSpace {
    /// Bytes of the region covered by at least one range.
    pub reserved_bytes: u64,
    /// Bytes of the region covered by none (`hi − lo − reserved_bytes`).
    pub free_bytes: u64,
    /// The longest run of free bytes.
    pub largest_free_bytes: u64,
}

impl FreeSpace {
    /// Seed 001 §4.1's fragmentation rate `1 − largest free block / total free`; 0 when
    /// nothing is free (a full region is not fragmented).
    pub fn rate(&self) -> f64 {
        if self.free_bytes == 0 {
            0.0
        } else {
            1.0 - self.largest_free_bytes as f64 / self.free_bytes as f64
        }
    }
}

/// The free space of `[lo, hi)` around `ranges` (`(offset, size)` sorted by offset; parts
/// outside the region are clipped, overlaps count once). O(number of ranges).
pub fn free_space(ranges: impl IntoIterator<Item = (u64, u64)>, lo: u64, hi: u64) -> FreeSpace {
    let (mut cursor, mut largest, mut reserved) = (lo, 0u64, 0u64);
    for (off, size) in ranges {
        let (a, b) = (off.max(lo), off.saturating_add(size).min(hi));
        if a >= b {
            continue;
        }
        largest = largest.max(a.saturating_sub(cursor));
        reserved += b.saturating_sub(a.max(cursor));
        cursor = cursor.max(b);
    }
    let hi = hi.max(lo);
    largest = largest.max(hi.saturating_sub(cursor));
    FreeSpace {
        reserved_bytes: reserved,
        free_bytes: (hi - lo) - reserved,
        largest_free_bytes: largest,
    }
}

/// A region's fragmentation at its peak step.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PeakFragmentation {
    /// The first step at which the region's reserved bytes peak.
    pub step: usize,
    /// The region's free space at that step.
    pub space: FreeSpace,
    /// `space.rate()`: the fragmentation rate (1 − largest free block / total free memory) at the peak.
    pub rate: f64,
}

impl PlanProfile {
    /// Seed 001 §4.1's fragmentation rate of the region `[lo, hi)` at its peak: the first step
    /// where the bytes reserved inside the region (ranges clipped to it, overlaps once) are
    /// largest; free means not reserved within `[lo, hi)` at that step. Unlike
    /// [`PlanProfile::fragmentation`] (the mean over all steps of `[0, peak)`), this is the
    /// figure at the one moment that sizes the region. O(S·L log L).
    pub fn fragmentation_at_peak(&self, lo: u64, hi: u64) -> PeakFragmentation {
        let mut best: Option<(usize, FreeSpace)> = None;
        sweep(&self.blocks, self.steps, |s, active| {
            let space = free_space(active.iter().map(|(&(off, _), &size)| (off, size)), lo, hi);
            if best.is_none_or(|(_, b)| space.reserved_bytes > b.reserved_bytes) {
                best = Some((s, space));
            }
        });
        let (step, space) = best.unwrap_or((0, free_space([], lo, hi)));
        PeakFragmentation {
            step,
            space,
            rate: space.rate(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Instruction;
    use crate::planner::{plan, OrderMode, PlanOptions, Strategy};

    fn sample() -> Graph {
        Graph::parse(crate::graph::SAMPLE_JSON).unwrap()
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

    /// Three steps over a 400-byte arena: `a` [0,100) steps 0–1, `b` [150,200) step 1,
    /// `c` [300,350) steps 0–2.
    fn holes() -> PlanProfile {
        let block = |name: &str, offset, size, start, end| Block {
            name: name.into(),
            offset,
            size,
            start,
            end,
        };
        PlanProfile {
            steps: 3,
            blocks: vec![
                block("a", 0, 100, 0, 1),
                block("c", 300, 50, 0, 2),
                block("b", 150, 50, 1, 1),
            ],
            events: Vec::new(),
            live: vec![150, 200, 50],
            peak: 400,
            max_live: 200,
            fragmentation: 0.0,
        }
    }

    #[test]
    fn fragmentation_at_peak_is_measured_at_the_step_with_the_most_reserved_bytes() {
        // Step 1 reserves 200 B; free: [100,150) 50, [200,300) 100, [350,400) 50.
        let f = holes().fragmentation_at_peak(0, 400);
        assert_eq!(f.step, 1);
        assert_eq!(
            f.space,
            FreeSpace {
                reserved_bytes: 200,
                free_bytes: 200,
                largest_free_bytes: 100
            }
        );
        assert!((f.rate - 0.5).abs() < 1e-12);
        // Clipped to [120, 320): step 1 holds b (50) and c's first 20 B; free 130, largest 100.
        let f = holes().fragmentation_at_peak(120, 320);
        assert_eq!(
            (f.step, f.space.reserved_bytes, f.space.free_bytes),
            (1, 70, 130)
        );
        assert!((f.rate - (1.0 - 100.0 / 130.0)).abs() < 1e-12);
        // A region full at its peak is not fragmented; an empty one has one hole.
        assert_eq!(holes().fragmentation_at_peak(0, 100).rate, 0.0);
        let empty = holes().fragmentation_at_peak(400, 500);
        assert_eq!((empty.space.free_bytes, empty.rate), (100, 0.0));
    }

    #[test]
    fn free_space_counts_overlaps_once_and_finds_the_largest_hole() {
        let s = free_space([(0, 10), (5, 10), (40, 10)], 0, 100);
        assert_eq!(
            s,
            FreeSpace {
                reserved_bytes: 25,
                free_bytes: 75,
                largest_free_bytes: 50
            }
        );
        assert!((s.rate() - (1.0 - 50.0 / 75.0)).abs() < 1e-12);
        assert_eq!(free_space([], 0, 0), FreeSpace::default());
        assert_eq!(free_space([], 0, 8).rate(), 0.0);
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
