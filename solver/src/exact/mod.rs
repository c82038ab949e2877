//! Exact placement by a MiniMalloc-class depth-first search over canonical placements
//! (Moffitt, "MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated Machine
//! Learning", ASPLOS 2023).
//!
//! - [`solve`]: the *fit* problem: place every buffer under a capacity, optionally around
//!   buffers with fixed offsets; answers with a placement ([`ExactStatus::Optimal`]), a proof
//!   that none exists ([`ExactStatus::Infeasible`]) or [`ExactStatus::Timeout`].
//! - [`minimise`]: lowers the peak of a valid placement by solving fit problems at decreasing
//!   capacities towards LOAD; returns the best placement (never worse than the start) and the
//!   best proven lower bound.
//!
//! The search ([`search`]) places buffers one at a time at their lowest offsets in a canonical
//! order, with an explicit stack (no recursion). Its pruning techniques are switches of
//! [`ExactOptions`], all on by default: section inference ([`sections`]), dominance
//! ([`search`]), dynamic ordering with restarts ([`ordering`]) and temporal decomposition
//! ([`decompose`]). Results are deterministic for a node budget; a time budget stops the
//! search wherever the clock says.
//!
//! ```
//! use memplan_solver::exact::{self, ExactOptions, ExactStatus};
//! use memplan_solver::{Buffer, Lifetime, PlacementProblem};
//!
//! let buf = |start, end, size| Buffer { lifetime: Lifetime::new(start, end), size, alignment: 1 };
//! // Three buffers are alive at step 2, so nothing fits in 2 bytes; 3 bytes suffice.
//! let p = PlacementProblem::new(vec![buf(0, 2, 1), buf(1, 3, 1), buf(0, 3, 1), buf(2, 3, 1)]);
//! assert_eq!(exact::solve(&p, 3, &[], &ExactOptions::default()).status, ExactStatus::Optimal);
//! assert_eq!(exact::solve(&p, 2, &[], &ExactOptions::default()).status, ExactStatus::Infeasible);
//! ```

pub mod decompose;
mod minimise;
pub mod ordering;
pub mod search;
pub mod sections;
#[cfg(test)]
mod tests;
mod window;

pub use minimise::{minimise, MinimiseOutcome};

use crate::budget::{Budget, BudgetClock};
use crate::problem::{Placement, PlacementProblem};
use ordering::{ranks, PREORDERS};
use search::{Config, Nogoods, RunEnd, Search};
use sections::Instance;
use std::time::Duration;

/// Options of the exact search: the budget and one switch per technique (all on by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExactOptions {
    /// Time and node limits; a node is one partial placement entered by the search.
    pub budget: Budget,
    /// Section inference: prune when, in some section, the floor (or the last offset placed)
    /// plus the bytes still to place there (plus fixed bytes above) exceeds the capacity.
    pub section_inference: bool,
    /// Dominance: raise section floors over gaps no unplaced buffer can use, skip candidates
    /// that would leave room below them for another whole buffer, and try only the first of
    /// identical buffers.
    pub dominance: bool,
    /// Dynamic ordering: try candidates by lowest offset, then by a preorder rank (width,
    /// area, section total); off: by input index alone.
    pub dynamic_ordering: bool,
    /// Restarts: with dynamic ordering, rotate three preorders under a doubling node limit.
    pub restarts: bool,
    /// Temporal decomposition: solve pieces separated by boundaries no unplaced buffer
    /// crosses one after the other.
    pub decomposition: bool,
}

impl Default for ExactOptions {
    fn default() -> Self {
        ExactOptions {
            budget: Budget::UNLIMITED,
            section_inference: true,
            dominance: true,
            dynamic_ordering: true,
            restarts: true,
            decomposition: true,
        }
    }
}

impl ExactOptions {
    /// The default options with `budget`.
    pub fn with_budget(budget: Budget) -> Self {
        ExactOptions {
            budget,
            ..ExactOptions::default()
        }
    }

    fn config(&self) -> Config {
        Config {
            section_inference: self.section_inference,
            dominance: self.dominance,
            dynamic_ordering: self.dynamic_ordering,
            decomposition: self.decomposition,
        }
    }
}

/// What an exact search established.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExactStatus {
    /// [`solve`]: a placement under the capacity was found; [`minimise`]: its peak is proven
    /// minimal (equals the lower bound).
    Optimal,
    /// [`minimise`]: a placement was found without proof of minimality.
    Feasible,
    /// No placement fits the capacity (proven by exhausting the canonical placements).
    Infeasible,
    /// The budget ran out first.
    Timeout,
}

/// The answer of [`solve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactOutcome {
    /// What was established.
    pub status: ExactStatus,
    /// The placement (checked, under the capacity) when one was found.
    pub placement: Option<Placement>,
    /// Search nodes entered (over all restarts).
    pub nodes: u64,
    /// Wall-clock time spent.
    pub elapsed: Duration,
}

/// Places every buffer of `problem` under `capacity` (`problem.capacity` is ignored).
///
/// `fixed` is empty or has one entry per buffer: `Some(offset)` pins a buffer, which the others
/// then avoid. An invalid problem (zero size, bad alignment, empty lifetime), a `fixed` of the
/// wrong length, or pinned buffers that are misaligned, overlap or exceed the capacity have
/// no placement: [`ExactStatus::Infeasible`]. A returned placement always passes
/// [`PlacementProblem::check`] under `capacity` and keeps the pinned offsets.
pub fn solve(
    problem: &PlacementProblem,
    capacity: u64,
    fixed: &[Option<u64>],
    opts: &ExactOptions,
) -> ExactOutcome {
    let clock = opts.budget.start();
    let mut nodes = 0u64;
    let status = solve_with_clock(problem, capacity, fixed, opts, &clock, &mut nodes);
    let (status, placement) = match status {
        Ok(placement) => (ExactStatus::Optimal, Some(placement)),
        Err(s) => (s, None),
    };
    ExactOutcome {
        status,
        placement,
        nodes,
        elapsed: clock.elapsed(),
    }
}

/// [`solve`] under a running clock, adding the nodes entered to `*nodes`; `Err` carries
/// [`ExactStatus::Infeasible`] or [`ExactStatus::Timeout`].
pub(crate) fn solve_with_clock(
    problem: &PlacementProblem,
    capacity: u64,
    fixed: &[Option<u64>],
    opts: &ExactOptions,
    clock: &BudgetClock,
    nodes: &mut u64,
) -> Result<Placement, ExactStatus> {
    let n = problem.buffers.len();
    if problem.validate().is_err() || !(fixed.is_empty() || fixed.len() == n) {
        return Err(ExactStatus::Infeasible);
    }
    let capped = PlacementProblem {
        buffers: problem.buffers.clone(),
        capacity: Some(capacity),
    };
    if !fixed.is_empty() {
        let (bufs, offsets): (Vec<_>, Vec<_>) = problem
            .buffers
            .iter()
            .zip(fixed)
            .filter_map(|(b, f)| f.map(|o| (*b, o)))
            .unzip();
        let pinned = PlacementProblem {
            buffers: bufs,
            capacity: Some(capacity),
        };
        if pinned.check(&Placement { offsets }).is_err() {
            return Err(ExactStatus::Infeasible);
        }
    }
    let inst = Instance::new(problem, fixed);
    let limit = opts.budget.nodes.unwrap_or(u64::MAX);
    let cfg = opts.config();
    let preorders: &[[ordering::Key; 3]] = if !opts.dynamic_ordering {
        &[]
    } else if opts.restarts {
        &PREORDERS
    } else {
        &PREORDERS[..1]
    };
    let env_pre: Option<Vec<Vec<ordering::Key>>> = std::env::var("PRE").ok().map(|v| {
        v.split(',')
            .map(|w| {
                w.chars()
                    .filter_map(|c| match c {
                        'W' => Some(ordering::Key::Width),
                        'A' => Some(ordering::Key::Area),
                        'T' => Some(ordering::Key::Total),
                        'Z' => Some(ordering::Key::Size),
                        _ => None,
                    })
                    .collect()
            })
            .collect()
    });
    let seeds: Option<u64> = std::env::var("SEEDS").ok().and_then(|v| v.parse().ok());
    let rank_sets: Vec<Vec<u32>> = if let Some(k) = seeds {
        let s0: u64 = std::env::var("SEED0").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        (s0..s0 + k)
            .map(|seed| {
                let base = ranks(&inst, &PREORDERS[(seed % 3) as usize]);
                let mut st = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
                let mut keyed: Vec<(u64, usize)> = base
                    .iter()
                    .enumerate()
                    .map(|(i, &r)| {
                        st ^= st << 13;
                        st ^= st >> 7;
                        st ^= st << 17;
                        (u64::from(r) + st % (inst.len() as u64 / 4 + 1), i)
                    })
                    .collect();
                keyed.sort_unstable();
                let mut rank = vec![0u32; inst.len()];
                for (r, &(_, i)) in keyed.iter().enumerate() {
                    rank[i] = r as u32;
                }
                rank
            })
            .collect()
    } else if let Some(e) = env_pre {
        e.iter().map(|k| ranks(&inst, k)).collect()
    } else if preorders.is_empty() {
        vec![ranks(&inst, &[])]
    } else {
        preorders.iter().map(|keys| ranks(&inst, keys)).collect()
    };
    let mut nogoods = Nogoods::default();
    let end = if rank_sets.len() == 1 {
        let rank = rank_sets.into_iter().next().unwrap_or_default();
        Search::new(&inst, capacity, cfg, rank, &mut nogoods).run(limit, clock, nodes)
    } else {
        // Round robin with a doubling node limit per run.
        let mut per_run = std::env::var("PERRUN").ok().and_then(|v| v.parse().ok()).unwrap_or((inst.len() as u64).max(16));
        'outer: loop {
            per_run = per_run.saturating_mul(2);
            for rank in &rank_sets {
                let run_limit = nodes.saturating_add(per_run).min(limit);
                let end =
                    Search::new(&inst, capacity, cfg, rank.clone(), &mut nogoods)
                    .run(run_limit, clock, nodes);
                match end {
                    RunEnd::NodeLimit if *nodes < limit => continue,
                    other => break 'outer other,
                }
            }
        }
    };
    match end {
        RunEnd::Found(local) => {
            let mut offsets: Vec<u64> = (0..n)
                .map(|i| fixed.get(i).copied().flatten().unwrap_or(0))
                .collect();
            for (k, &g) in inst.global.iter().enumerate() {
                offsets[g] = local[k];
            }
            let placement = Placement { offsets };
            // Never hand out an unchecked placement.
            match capped.check(&placement) {
                Ok(_) => Ok(placement),
                Err(_) => Err(ExactStatus::Timeout),
            }
        }
        RunEnd::Infeasible => Err(ExactStatus::Infeasible),
        RunEnd::NodeLimit | RunEnd::TimeLimit => Err(ExactStatus::Timeout),
    }
}
