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
//! The search ([`search`]) places buffers one at a time, bottom-up, at their lowest offsets in
//! a canonical order, with an explicit stack (no recursion; instances reach 28k buffers). Its
//! techniques are switches of [`ExactOptions`], all on by default: section inference
//! ([`sections`]), dominance ([`search`]), dynamic ordering with restarts ([`ordering`]),
//! temporal decomposition ([`decompose`]) and a failed-state memo. [`minimise`] also builds
//! upper bounds by canonical dives (the search's first path, `O(n log n)`) and, above a few
//! thousand buffers, repairs windows of a placement with the rest fixed. Results are
//! deterministic under a node budget; a time budget stops wherever the clock says.
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
mod dive;
mod memo;
mod minimise;
pub mod ordering;
pub mod search;
pub mod sections;
#[cfg(test)]
mod tests;
mod window;

pub use minimise::{minimise, MinimiseOutcome};

use crate::limits::{Limits, LimitsClock};
use crate::problem::{Placement, PlacementProblem};
use memo::Memo;
use ordering::{ranks, Pivot, STRATEGIES};
use search::{Config, RunEnd, Search};
use sections::Instance;
use std::time::Duration;

/// Options of the exact search: the budget and one switch per technique (all on by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactOptions {
    /// Time and node limits; a node is one partial placement entered by the search.
    pub limits: Limits,
    /// Section inference: prune when, in some section, the floor (or the current level) plus
    /// the bytes still to place there (plus fixed bytes above the floor) exceeds the capacity.
    pub section_inference: bool,
    /// Dominance: raise section floors over gaps no unplaced buffer can use, fail branches
    /// where an excluded buffer would fit entirely below the level (an equivalent sibling
    /// holds it), place identical buffers in index order, and place a buffer that meets no
    /// unplaced one at once.
    pub dominance: bool,
    /// Dynamic ordering: branch on the candidates covering the most constrained section of
    /// the lowest level (pivot), tried by flushness then by a preorder rank (size, area,
    /// width…); off: all candidates of the lowest level by input index.
    pub dynamic_ordering: bool,
    /// Restarts: with dynamic ordering, rotate four strategies (pivot rule × preorder) under
    /// a node limit per run that doubles every round.
    pub restarts: bool,
    /// Temporal decomposition: solve pieces separated by boundaries no unplaced buffer
    /// crosses one after the other.
    pub decomposition: bool,
    /// Failed-state memo: remember (128-bit fingerprints of) exhausted search states and fail
    /// on meeting one again, across restarts too.
    pub memo: bool,
    /// Run only this member of the restart rotation ([`strategy_count`] of them; the pivot
    /// rule and preorder of each are in [`ordering`]), with no restarts: how the benchmark
    /// measures each strategy's own success rate. `None` (the default): as `restarts` says.
    /// Ignored without dynamic ordering.
    pub only_strategy: Option<usize>,
}

/// Number of strategies in the restart rotation (valid [`ExactOptions::only_strategy`]
/// values are `0..strategy_count()`).
pub fn strategy_count() -> usize {
    STRATEGIES.len()
}

impl Default for ExactOptions {
    fn default() -> Self {
        ExactOptions {
            limits: Limits::UNLIMITED,
            section_inference: true,
            dominance: true,
            dynamic_ordering: true,
            restarts: true,
            decomposition: true,
            memo: true,
            only_strategy: None,
        }
    }
}

impl ExactOptions {
    /// The default options with `budget`.
    pub fn with_limits(limits: Limits) -> Self {
        ExactOptions {
            limits,
            ..ExactOptions::default()
        }
    }

    fn config(&self) -> Config {
        Config {
            section_inference: self.section_inference,
            dominance: self.dominance,
            dynamic_ordering: self.dynamic_ordering,
            decomposition: self.decomposition,
            memo: self.memo,
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
    /// No placement fits the capacity (proven by exhausting the canonical placements; with
    /// the memo on, up to 128-bit fingerprint collisions, see its module).
    Infeasible,
    /// The budget ran out first.
    Timeout,
}

impl ExactStatus {
    /// Stable lower-case name used in JSON and CLI output.
    pub fn as_str(self) -> &'static str {
        match self {
            ExactStatus::Optimal => "optimal",
            ExactStatus::Feasible => "feasible",
            ExactStatus::Infeasible => "infeasible",
            ExactStatus::Timeout => "timeout",
        }
    }
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
    let clock = opts.limits.start();
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
    clock: &LimitsClock,
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
    let inst = Instance::new(problem, fixed, capacity);
    let end = fit(&inst, capacity, opts, clock, nodes);
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

/// Runs the search on `inst` under `capacity` with the strategies of `opts` (restarts and
/// the memo shared by them), at most `opts.budget.nodes` more nodes and until `clock` runs out.
pub(crate) fn fit(
    inst: &Instance,
    capacity: u64,
    opts: &ExactOptions,
    clock: &LimitsClock,
    nodes: &mut u64,
) -> RunEnd {
    let limit = opts
        .limits
        .nodes
        .map_or(u64::MAX, |l| nodes.saturating_add(l));
    let cfg = opts.config();
    let strategies: Vec<(Pivot, Vec<u32>)> = if !opts.dynamic_ordering {
        vec![(Pivot::Fewest, ranks(inst, &[]))]
    } else if let Some(k) = opts.only_strategy {
        let s = STRATEGIES[k % STRATEGIES.len()];
        vec![(s.pivot, ranks(inst, &s.keys))]
    } else {
        let count = if opts.restarts { STRATEGIES.len() } else { 1 };
        STRATEGIES[..count]
            .iter()
            .map(|s| (s.pivot, ranks(inst, &s.keys)))
            .collect()
    };
    let mut memo = Memo::default();
    if let [strategy] = strategies.as_slice() {
        return Search::new(inst, capacity, cfg, strategy.clone(), &mut memo)
            .run(limit, clock, nodes);
    }
    // Round robin with a node limit per run doubling every round; the memo carries the failed
    // states over from run to run.
    let mut per_run = (inst.len() as u64).max(64);
    loop {
        for strategy in &strategies {
            let run_limit = nodes.saturating_add(per_run).min(limit);
            let end = Search::new(inst, capacity, cfg, strategy.clone(), &mut memo)
                .run(run_limit, clock, nodes);
            match end {
                RunEnd::NodeLimit if *nodes < limit => continue,
                other => return other,
            }
        }
        per_run = per_run.saturating_mul(2);
    }
}
