//! Placement: the whole placement step ([`step`]: the heuristic portfolio, then the exact
//! search, then the HiGHS address program), the program itself ([`program`], with its
//! `layout` of the movable buffers) and its peak-window refinement ([`refine`]).
//!
//! Heuristic placement: each algorithm in its own file behind the [`Placer`] trait, and a
//! [`portfolio`] that runs every registered placer and keeps the lowest peak (ties go to the
//! earlier registry entry, so the result is deterministic). Members run in registry order and
//! each is handed the best placement of the members before it ([`Placer::place_from`]):
//! constructive members ignore it, the improvement member ([`local_search`]) starts from it.
//! [`peak_clique`] runs after it, so it changes a result only where it is strictly better.
//! Once a member reaches LOAD (optimal) the later ones are skipped. Each member gets what is
//! left of the time limit, and the first (greedy by size) always returns a placement, since
//! every later stage starts from one: when the time limit or the stop flag cuts a member's
//! pass short (greedy by size or by conflicts, colouring, peak clique), the buffers it has
//! not reached are placed by the online allocator ([`online`]: best fit in time order, freed
//! blocks reused) above those it placed, or all buffers are placed online, whichever peak is
//! lower (a million-op chain: LOAD either way), so the portfolio answers within the limit
//! (`time_limit`) where the first pass alone took about 3 s on 60,000 random buffers each
//! alive alongside thousands of others; the whole portfolio takes 0.9 s on the 28,526-buffer
//! trace iopddl_S_1.

pub mod coloring;
pub mod conflict;
pub mod first_fit;
mod fit;
pub mod greedy_by_conflicts;
pub mod greedy_by_size;
pub(crate) mod layout;
pub mod local_search;
pub mod online;
pub mod peak_clique;
pub mod program;
pub mod refine;
pub mod skyline;
pub mod squeaky;
pub mod step;

#[cfg(test)]
mod registry_tests;

use crate::limits::{Limits, SolveStats, SolveStatus};
use crate::problem::{Placement, PlacementError, PlacementProblem};
use std::time::{Duration, Instant};

/// A placement algorithm.
pub trait Placer: Send + Sync {
    /// Stable short name (used in CLI, plan stats and benchmarks).
    fn name(&self) -> &'static str;

    /// Places every buffer; the returned placement must pass [`PlacementProblem::check`]
    /// when the capacity is ignored. Heuristics place regardless of `problem.capacity` and
    /// report the peak they reach. Must be deterministic for the same input.
    fn place(
        &self,
        problem: &PlacementProblem,
        limits: &Limits,
    ) -> Result<Placement, PlacementError>;

    /// Like [`Placer::place`], given `best`: a valid placement of `problem` (capacity
    /// ignored) found by the portfolio members before this one, with its peak. Improvement
    /// methods start from it and never return worse; by default it is ignored. Must be
    /// deterministic.
    fn place_from(
        &self,
        problem: &PlacementProblem,
        best: Option<(&Placement, u64)>,
        limits: &Limits,
    ) -> Result<Placement, PlacementError> {
        let _ = best;
        self.place(problem, limits)
    }
}

/// Every heuristic placer, in portfolio order (earlier wins ties).
pub fn registry() -> Vec<Box<dyn Placer>> {
    vec![
        Box::new(greedy_by_size::GreedyBySize),
        Box::new(online::Online),
        Box::new(greedy_by_conflicts::GreedyByConflicts),
        Box::new(first_fit::FirstFit),
        Box::new(coloring::Coloring),
        Box::new(skyline::Skyline),
        Box::new(squeaky::SqueakyWheel),
        Box::new(local_search::LocalSearch),
        Box::new(peak_clique::PeakClique),
    ]
}

/// Looks a placer up by name.
pub fn by_name(name: &str) -> Option<Box<dyn Placer>> {
    registry().into_iter().find(|p| p.name() == name)
}

/// One portfolio member's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberResult {
    /// Placer name.
    pub name: &'static str,
    /// Its peak in bytes.
    pub peak: u64,
    /// Time it took.
    pub elapsed: Duration,
    /// Whether it was not run (its time zero): an earlier member reached LOAD (its peak is
    /// then that member's), or the time limit or the stop flag was reached once a member had
    /// placed the buffers (its peak is then the best so far).
    pub skipped: bool,
}

/// The best placement of a portfolio run, with every member's figures.
#[derive(Debug, Clone)]
pub struct PortfolioResult {
    /// The lowest-peak placement.
    pub placement: Placement,
    /// Name of the placer that produced it.
    pub method: &'static str,
    /// Per-member figures, in registry order.
    pub members: Vec<MemberResult>,
    /// Stats of the chosen placement (objective = peak, lower bound = LOAD tightened by
    /// alignment, [`PlacementProblem::aligned_load`]).
    pub stats: SolveStats,
}

/// Runs `placers` on `problem`, in order, each given the best placement so far
/// ([`Placer::place_from`]), and keeps the lowest peak; once the best peak meets the lower
/// bound ([`PlacementProblem::aligned_load`]) the remaining members are skipped. Each member's
/// placement is checked with [`PlacementProblem::check`] (capacity ignored); a member whose
/// placement fails the check is an internal error and is returned as such. `limits` bound the
/// whole run: each member gets what is left of the time limit when it starts (and the stop
/// flag and node limit as given), and every member that takes more than `O(n log n)` looks at
/// them while it places, so the portfolio ends close to the limit.
pub fn run_portfolio(
    placers: &[Box<dyn Placer>],
    problem: &PlacementProblem,
    limits: &Limits,
) -> Result<PortfolioResult, PlacementError> {
    problem.validate()?;
    // The portfolio's clock: time and stop flag (a node limit is the members' own).
    let clock = limits.start_time_and_flag();
    let uncapped = PlacementProblem {
        buffers: problem.buffers.clone(),
        capacity: None,
    };
    let bound = problem.aligned_load();
    let mut best: Option<(u64, Placement, &'static str)> = None;
    let mut members = Vec::with_capacity(placers.len());
    // The limits bound the portfolio too: once a member has placed the buffers, a spent
    // time limit or a raised stop flag skips the members left (the answer then says
    // `time_limit` unless it meets the bound).
    let spent = || clock.exhausted().is_some();
    let mut cut = false;
    for placer in placers {
        let reached = best.as_ref().filter(|(peak, _, _)| *peak <= bound);
        let stopped = best.as_ref().filter(|_| spent());
        cut |= reached.is_none() && stopped.is_some();
        if let Some((peak, _, _)) = reached.or(stopped) {
            members.push(MemberResult {
                name: placer.name(),
                peak: *peak,
                elapsed: Duration::ZERO,
                skipped: true,
            });
            continue;
        }
        let t0 = Instant::now();
        let seed = best.as_ref().map(|(peak, placement, _)| (placement, *peak));
        // A member's time limit is what is left of the portfolio's (its node limit its own).
        let left = limits.remaining_after(clock.elapsed());
        let placement = placer.place_from(problem, seed, &left)?;
        let peak = uncapped.check(&placement)?;
        members.push(MemberResult {
            name: placer.name(),
            peak,
            elapsed: t0.elapsed(),
            skipped: false,
        });
        if best.as_ref().is_none_or(|(b, _, _)| peak < *b) {
            best = Some((peak, placement, placer.name()));
        }
    }
    let (peak, placement, method) = best.unwrap_or((0, Placement::default(), "none"));
    let mut stats = SolveStats::heuristic(peak, bound, clock.elapsed());
    if cut && stats.status != SolveStatus::Optimal {
        stats.status = SolveStatus::TimeLimit;
    }
    Ok(PortfolioResult {
        placement,
        method,
        members,
        stats,
    })
}

/// Runs the whole [`registry`] (see [`run_portfolio`]).
pub fn portfolio(
    problem: &PlacementProblem,
    limits: &Limits,
) -> Result<PortfolioResult, PlacementError> {
    run_portfolio(&registry(), problem, limits)
}
