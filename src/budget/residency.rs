//! A budgeted plan before placement, independent of how it was chosen: per tensor its
//! residency intervals `[start, end)` (steps) with how each starts and ends, the recomputes
//! `(step, producer, tensor)` and each op's workspace (bytes). A per-gap [`Sched`] on a fixed
//! order converts into one ([`Residency::of_sched`]); the joint program
//! ([`super::joint`]), which also moves ops, builds one from per-step residency
//! ([`Residency::from_spans`]). The pipeline places and emits a `Residency` the same way
//! whichever strategy made it.

use super::schedule::{Ctx, End, Interval, Sched, Start};
use crate::graph::{Graph, TensorId, TensorKind};

/// Residency intervals, recomputes and workspaces of one budgeted plan (module doc).
#[derive(Debug, Clone)]
pub struct Residency {
    /// Per tensor index, its intervals in step order (empty: never in the arena).
    pub intervals: Vec<Vec<Interval>>,
    /// Recomputes as `(step, producer op index, tensor)`, sorted by step and then the
    /// producer's position in the order (a topological order within a step).
    pub recomputes: Vec<(usize, usize, TensorId)>,
    /// Per op index, its workspace (bytes) under this plan's conv algorithms.
    pub workspace: Vec<u64>,
    /// The graph the plan runs (the context's, with any conv downgrades written in).
    pub graph: Graph,
}

/// One maximal run of steps `[start, end)` during which a tensor is resident, and how it
/// became resident (its end is derived from what follows, [`Residency::from_spans`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// First step resident.
    pub start: usize,
    /// One past the last step resident.
    pub end: usize,
    /// How it starts.
    pub how: Start,
}

impl Residency {
    /// The residency of a per-gap schedule on `ctx`'s order.
    pub fn of_sched(ctx: &Ctx, sched: &Sched) -> Self {
        let n = ctx.graph.tensors.len();
        Residency {
            intervals: (0..n)
                .map(|i| sched.intervals(ctx, TensorId(i as u32)))
                .collect(),
            recomputes: sched.recomputes(ctx),
            workspace: (0..ctx.graph.ops.len())
                .map(|k| sched.workspace(ctx, k))
                .collect(),
            graph: sched.graph(ctx),
        }
    }

    /// The residency of per-tensor runs on `ctx`'s order (sorted, disjoint, not touching:
    /// two runs that touch are one). Each run but the last ends with a `spill_out` when the
    /// next one starts with a `spill_in`, else with a `free`; a graph output's last run stays
    /// to the end. Recomputes are the runs that start with [`Start::Recompute`].
    pub fn from_spans(ctx: &Ctx, runs: &[Vec<Span>], workspace: Vec<u64>, graph: Graph) -> Self {
        let steps = ctx.steps();
        let mut intervals = Vec::with_capacity(runs.len());
        let mut recomputes = Vec::new();
        for (i, rs) in runs.iter().enumerate() {
            let t = TensorId(i as u32);
            let output = ctx.graph.tensor(t).kind == TensorKind::Output;
            let mut v = Vec::with_capacity(rs.len());
            for (j, r) in rs.iter().enumerate() {
                let (end, how_end) = match rs.get(j + 1) {
                    Some(next) if next.how == Start::SpillIn => (r.end, End::SpillOut),
                    Some(_) => (r.end, End::Free),
                    None if output => (steps, End::Stay),
                    None => (r.end, End::Free),
                };
                if r.how == Start::Recompute {
                    if let Some(p) = ctx.single_producer(t) {
                        recomputes.push((r.start, p, t));
                    }
                }
                v.push(Interval {
                    tensor: t,
                    start: r.start,
                    end,
                    how_start: r.how,
                    how_end,
                });
            }
            intervals.push(v);
        }
        recomputes.sort_by_key(|&(s, p, t)| (s, ctx.step_of[p], t));
        Residency {
            intervals,
            recomputes,
            workspace,
            graph,
        }
    }

    /// The runs of every tensor (the intervals without their ends).
    pub fn spans(&self) -> Vec<Vec<Span>> {
        self.intervals
            .iter()
            .map(|ivs| {
                ivs.iter()
                    .map(|iv| Span {
                        start: iv.start,
                        end: iv.end,
                        how: iv.how_start,
                    })
                    .collect()
            })
            .collect()
    }

    /// Live arena bytes at each step of `ctx`'s order: resident tensors plus the workspaces
    /// of the op and of the recomputes at that step.
    pub fn live(&self, ctx: &Ctx) -> Vec<u64> {
        super::schedule::live_bytes(
            ctx,
            self.intervals.iter().flatten().copied(),
            &self.recomputes,
            |k| self.workspace[k],
        )
    }
}
