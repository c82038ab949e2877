//! Capacity minimisation: the lowest peak the search can reach from a valid placement.
//!
//! Idea: the fit problem ([`super::solve`]) answers "is there a placement under capacity
//! `C`?"; minimisation asks it for decreasing `C`. The first question is the lower bound itself
//! (LOAD tightened by alignment, [`PlacementProblem::aligned_load`]: the usual answer on real
//! traces, and then the placement is optimal at once); after that a
//! binary search between the best lower bound and the best peak found, where every found
//! placement lowers the upper end to its own peak and every proof of infeasibility raises the
//! lower bound; an unanswered question (budget) only stops that side from being retried. Each
//! question gets half of the budget left (time, nodes and, with
//! [`ExactOptions::work_limit`], work), so the total stays within the budget. The outcome
//! lists the unanswered questions with their budgets, and [`minimise_more`] continues from it
//! with more budget (the placement step gives it what the HiGHS model's turn leaves): it asks
//! only above every unanswered question below the peak that had at least the budget a
//! question gets now (the search is deterministic: the same question with less budget
//! explores a prefix of what it explored, and the bisection already assumes that a lower
//! capacity is no easier). Instances with
//! more than [`WINDOW_ABOVE`] buffers are too large for the search as a whole: they go to the
//! window search of [`super::window`] instead, which repairs the placement piecewise.
//!
//! Complexity: `O(log(peak − bound))` fit problems, each bounded by its share of the budget.

use super::dive::{dive, DiveOrder};
use super::window;
use super::{solve_with_clock, ExactOptions, ExactStatus, SearchTrace};
use crate::limits::Limits;
use crate::problem::{align_up, Placement, PlacementProblem};
use std::time::Duration;

/// Above this many buffers, [`minimise`] repairs windows instead of searching the whole.
pub const WINDOW_ABOVE: usize = 4096;

/// The answer of [`minimise`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinimiseOutcome {
    /// The best placement found (the start when nothing better was found).
    pub placement: Placement,
    /// Its peak.
    pub peak: u64,
    /// A proven lower bound of every placement's peak: the aligned LOAD, or one more than the
    /// highest capacity proven infeasible.
    pub lower_bound: u64,
    /// [`ExactStatus::Optimal`] when `peak == lower_bound`, [`ExactStatus::Feasible`]
    /// otherwise, [`ExactStatus::Infeasible`] for an invalid problem.
    pub status: ExactStatus,
    /// Search nodes entered in all.
    pub nodes: u64,
    /// Wall-clock time spent.
    pub elapsed: Duration,
    /// The questions asked without an answer, with the budget each had ([`minimise_more`]
    /// asks again only where it has more).
    pub unanswered: Vec<Unanswered>,
}

/// A capacity [`minimise`] asked about without an answer, and the budget the question had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unanswered {
    /// The capacity asked about (bytes).
    pub capacity: u64,
    /// The question's time budget.
    pub time: Option<Duration>,
    /// The question's node budget.
    pub nodes: Option<u64>,
}

impl Unanswered {
    /// Whether a question with `limits` has no more time (without time limits: no more nodes)
    /// than this one had, so that asking at or below its capacity again is no use.
    fn covers(&self, limits: &Limits) -> bool {
        match (limits.time, self.time, limits.nodes, self.nodes) {
            (Some(next), Some(had), _, _) => next <= had,
            (None, None, Some(next), Some(had)) => next <= had,
            _ => false,
        }
    }
}

/// Lowers the peak of `start` (capacities of `problem` are ignored) towards the aligned LOAD
/// within `opts.budget`.
///
/// The result is never worse than `start`; a `start` that does not pass
/// [`PlacementProblem::check`] is replaced by all buffers stacked one above the other. An
/// invalid problem (zero size, bad alignment, empty lifetime) returns `start` as given, with
/// peak and bound 0 and status [`ExactStatus::Infeasible`].
pub fn minimise(
    problem: &PlacementProblem,
    start: &Placement,
    opts: &ExactOptions,
) -> MinimiseOutcome {
    run(problem, start, None, opts)
}

/// [`minimise`] continued with more budget after `earlier` (a call on the same problem) from
/// `start`: keeps its proven bound, skips the dives and the first question, and asks only
/// above every question `earlier` left without an answer with at least the budget a question
/// gets now. The outcome's `lower_bound` includes `earlier`'s; its `nodes` and `elapsed` are
/// this call's alone.
pub fn minimise_more(
    problem: &PlacementProblem,
    start: &Placement,
    earlier: &MinimiseOutcome,
    opts: &ExactOptions,
) -> MinimiseOutcome {
    run(problem, start, Some(earlier), opts)
}

/// [`minimise`] and [`minimise_more`].
fn run(
    problem: &PlacementProblem,
    start: &Placement,
    earlier: Option<&MinimiseOutcome>,
    opts: &ExactOptions,
) -> MinimiseOutcome {
    let clock = opts.limits.start();
    let mut nodes = 0u64;
    let uncapped = PlacementProblem {
        buffers: problem.buffers.clone(),
        capacity: None,
    };
    let stacked = stack(problem);
    let valid = match (problem.validate(), uncapped.check(start), stacked) {
        (Err(_), _, _) => None,
        (Ok(()), Ok(peak), _) => Some((start.clone(), peak)),
        (Ok(()), Err(_), Some(s)) => uncapped.check(&s).ok().map(|p| (s, p)),
        (Ok(()), Err(_), None) => None,
    };
    let Some((mut best, mut peak)) = valid else {
        return MinimiseOutcome {
            placement: start.clone(),
            peak: 0,
            lower_bound: 0,
            status: ExactStatus::Infeasible,
            nodes,
            elapsed: clock.elapsed(),
            unanswered: Vec::new(),
        };
    };
    let mut lower_bound = problem
        .aligned_load()
        .max(earlier.map_or(0, |e| e.lower_bound.min(peak)));
    let mut unanswered = earlier.map(|e| e.unanswered.clone()).unwrap_or_default();
    // Cheap upper bounds first (the first time): canonical dives (no backtracking).
    for order in [DiveOrder::AreaWidthSize, DiveOrder::SizeAreaWidth] {
        if earlier.is_some() || peak <= lower_bound || clock.exhausted().is_some() {
            break;
        }
        let max_pushes = (problem.buffers.len() as u64).saturating_mul(256);
        if let Some(placement) = dive(problem, order, max_pushes, &clock) {
            if let Ok(p) = uncapped.check(&placement) {
                if p < peak {
                    best = placement;
                    peak = p;
                }
            }
        }
    }
    if peak <= lower_bound {
        // Already optimal.
    } else if problem.buffers.len() > WINDOW_ABOVE {
        let mut offsets = best.offsets.clone();
        window::improve(problem, &mut offsets, lower_bound, opts, &clock, &mut nodes);
        let candidate = Placement { offsets };
        if let Ok(p) = uncapped.check(&candidate) {
            if p < peak {
                best = candidate;
                peak = p;
            }
        }
    } else {
        // `lo`: the lowest capacity still worth asking about (proven or given up below it).
        let mut lo = lower_bound;
        // The lower bound first (the usual answer), unless an earlier call asked it.
        let mut first = earlier.is_none();
        // Work of the questions so far (`ExactOptions::work_limit` bounds it in all).
        let mut work = 0u64;
        while clock.exhausted().is_none() {
            let limits = half_of_what_is_left(&opts.limits, clock.elapsed(), nodes);
            let work_limit = match opts.work_limit {
                Some(w) if work >= w => break,
                Some(w) => Some((w.saturating_sub(work) / 2).max(1)),
                None => None,
            };
            // Below a question left unanswered with at least this budget, no use asking (one
            // at or above the peak is answered by the best placement now).
            for u in unanswered
                .iter()
                .filter(|u| u.capacity < peak && u.covers(&limits))
            {
                lo = lo.max(u.capacity.saturating_add(1));
            }
            if lo >= peak {
                break;
            }
            let cap = if first {
                lower_bound
            } else {
                lo + (peak - 1 - lo) / 2
            };
            first = false;
            let sub = ExactOptions {
                limits: limits.clone(),
                work_limit,
                ..*opts
            };
            let sub_clock = sub.limits.start();
            let mut question = SearchTrace::default();
            let answer = solve_with_clock(
                problem,
                cap,
                &[],
                &sub,
                &sub_clock,
                &mut nodes,
                &mut question,
            );
            work = work.saturating_add(question.work);
            match answer {
                Ok(placement) => {
                    if let Ok(p) = uncapped.check(&placement) {
                        if p < peak {
                            best = placement;
                            peak = p;
                        }
                    }
                }
                Err(ExactStatus::Infeasible) => {
                    lower_bound = lower_bound.max(cap.saturating_add(1));
                    lo = lo.max(cap.saturating_add(1));
                }
                Err(_) => {
                    unanswered.push(Unanswered {
                        capacity: cap,
                        time: limits.time,
                        nodes: limits.nodes,
                    });
                    lo = cap.saturating_add(1);
                }
            }
        }
    }
    MinimiseOutcome {
        placement: best,
        peak,
        lower_bound: lower_bound.min(peak),
        status: if peak <= lower_bound {
            ExactStatus::Optimal
        } else {
            ExactStatus::Feasible
        },
        nodes,
        elapsed: clock.elapsed(),
        unanswered,
    }
}

/// Half of the time and nodes `budget` leaves after `elapsed` and `nodes` (unlimited stays
/// unlimited; at least one node and one millisecond).
pub(crate) fn half_of_what_is_left(limits: &Limits, elapsed: Duration, nodes: u64) -> Limits {
    share_of_what_is_left(limits, elapsed, nodes, 0.5)
}

/// `share` (in `[0, 1]`) of the time and nodes `limits` leave after `elapsed` and `nodes`
/// (unlimited stays unlimited; at least one node and one millisecond), with the same stop flag.
pub(crate) fn share_of_what_is_left(
    limits: &Limits,
    elapsed: Duration,
    nodes: u64,
    share: f64,
) -> Limits {
    Limits {
        time: limits.time.map(|t| {
            t.saturating_sub(elapsed)
                .mul_f64(share)
                .max(Duration::from_millis(1))
        }),
        nodes: limits
            .nodes
            .map(|n| ((n.saturating_sub(nodes) as f64 * share) as u64).max(1)),
        cancel: limits.cancel.clone(),
    }
}

/// Every buffer above the previous ones (always valid when it fits in `u64`).
pub(super) fn stack(problem: &PlacementProblem) -> Option<Placement> {
    let mut top = 0u64;
    let mut offsets = Vec::with_capacity(problem.buffers.len());
    for b in &problem.buffers {
        let off = align_up(top, b.alignment.max(1))?;
        top = off.checked_add(b.size)?;
        offsets.push(off);
    }
    Some(Placement { offsets })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::problem::fixtures::buf;
    #[test]
    fn a_stacked_start_drops_to_load_and_is_proven_optimal() {
        let p = PlacementProblem::new(vec![buf(0, 2, 4), buf(1, 3, 4), buf(2, 4, 4), buf(3, 5, 4)]);
        let start = stack(&p).unwrap();
        assert_eq!(p.check(&start), Ok(16));
        let out = minimise(&p, &start, &ExactOptions::default());
        assert_eq!(out.status, ExactStatus::Optimal);
        assert_eq!((out.peak, out.lower_bound), (8, 8));
        assert_eq!(p.check(&out.placement), Ok(8));
    }

    #[test]
    fn an_invalid_start_is_replaced_and_an_invalid_problem_is_refused() {
        let p = PlacementProblem::new(vec![buf(0, 2, 4), buf(1, 3, 4)]);
        let out = minimise(
            &p,
            &Placement {
                offsets: vec![0, 0],
            },
            &ExactOptions::default(),
        );
        assert_eq!((out.peak, out.status), (8, ExactStatus::Optimal));
        let bad = PlacementProblem::new(vec![buf(0, 2, 0)]);
        let out = minimise(
            &bad,
            &Placement { offsets: vec![0] },
            &ExactOptions::default(),
        );
        assert_eq!(out.status, ExactStatus::Infeasible);
    }

    #[test]
    fn the_budget_halves_what_is_left() {
        let b = Limits {
            time: Some(Duration::from_secs(10)),
            nodes: Some(100),
            ..Limits::UNLIMITED
        };
        let h = half_of_what_is_left(&b, Duration::from_secs(4), 40);
        assert_eq!(h.time, Some(Duration::from_secs(3)));
        assert_eq!(h.nodes, Some(30));
        assert_eq!(
            half_of_what_is_left(&Limits::UNLIMITED, Duration::ZERO, 5),
            Limits::UNLIMITED
        );
    }
}
