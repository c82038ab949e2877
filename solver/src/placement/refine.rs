//! Peak-window refinement with the HiGHS placement model: the integer program of
//! [`program`](super::program) as a member of the placement step for instances too big to model whole.
//!
//! **Idea.** The peak of a placement is set by the buffers whose top reaches it ("top
//! buffers"). Lowering the peak means re-packing the columns of buffers alive with them, so
//! each round frees a window made of, for every top buffer, the highest buffers alive during
//! its lifetime (up to [`IlpRefineOptions::window`] buffers in all), keeps every other buffer
//! where it is, and lets HiGHS minimise the peak over the window
//! ([`place_ilp_window`]), warm-started from the current placement. A round that lowers the
//! peak starts the next one from the new placement; a round that cannot, doubles the window
//! (up to [`IlpRefineOptions::max_window`]) before giving up, and so does a peak reached by
//! more top buffers than the window holds. Small instances (at most
//! [`FULL_MODEL_BUFFERS`] buffers) are modelled whole, and then HiGHS' dual bound is a proven
//! lower bound for the whole problem.
//!
//! **Cost.** Each round builds a model of `w` movable buffers (`O(w·n)` to find their fixed
//! neighbours, at most [`IlpRefineOptions::max_pairs`] pair binaries) and solves it under the
//! round's share of the budget.
//!
//! **Determinism.** With a node limit and no time limit, every HiGHS run stops at
//! `mip_max_nodes` (one thread), so the result is reproducible; a time limit trades that for a
//! bounded wall time. The result is never worse than the start: every window solve returns a
//! valid placement no higher than its warm start.
//!
//! References: OLLA (Steiner et al., 2022) solves the address model by windows of the
//! timeline; the same "optimise around the hottest part, fix the rest" idea drives this loop.

use super::program::{place_ilp, place_ilp_window, IlpError, IlpOptions};
use crate::limits::{Limits, LimitsClock, SolveStats, SolveStatus};
use crate::problem::{Placement, PlacementProblem};
use std::time::Instant;

/// Instances with at most this many buffers are modelled whole (no window).
pub const FULL_MODEL_BUFFERS: usize = 24;

/// HiGHS branch-and-bound nodes per model when the caller gives no limit at all.
pub const DEFAULT_NODES_PER_MODEL: u64 = 2_000;

/// Options of [`refine_peak`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IlpRefineOptions {
    /// Limits for the whole refinement; `nodes` is the total of HiGHS branch-and-bound nodes
    /// (each model gets what is left). Without any limit every model gets
    /// [`DEFAULT_NODES_PER_MODEL`] nodes.
    pub limits: Limits,
    /// Movable buffers in the first window of a round.
    pub window: usize,
    /// Largest window tried before giving up.
    pub max_window: usize,
    /// Largest number of pair binaries in one model.
    pub max_pairs: usize,
    /// Largest number of models solved.
    pub max_models: usize,
}

impl Default for IlpRefineOptions {
    fn default() -> Self {
        IlpRefineOptions {
            limits: Limits::UNLIMITED,
            window: 4,
            max_window: 32,
            max_pairs: 1_500,
            max_models: 24,
        }
    }
}

/// What [`refine_peak`] found.
#[derive(Debug, Clone)]
pub struct IlpRefineOutcome {
    /// Best placement (valid, never higher than the start).
    pub placement: Placement,
    /// Status, elapsed, peak, and lower bound (HiGHS' dual bound when the whole instance was
    /// modelled, else LOAD tightened by alignment, [`PlacementProblem::aligned_load`]).
    pub stats: SolveStats,
    /// Models solved.
    pub models: usize,
    /// Models that lowered the peak.
    pub improved: usize,
}

/// Lowers the peak of `start` (a valid placement of `problem`) with the placement integer
/// program, whole for small instances and by peak windows otherwise (see the module doc).
pub fn refine_peak(
    problem: &PlacementProblem,
    start: &Placement,
    opts: &IlpRefineOptions,
) -> Result<IlpRefineOutcome, IlpError> {
    let started = Instant::now();
    let uncapped = PlacementProblem::new(problem.buffers.clone());
    let mut peak = uncapped.check(start).map_err(IlpError::WarmStart)?;
    let bound = problem.aligned_load();
    let mut best = start.clone();
    let mut lower = bound;
    let mut models = 0;
    let mut improved = 0;
    let mut clock: LimitsClock = opts.limits.start();
    let mut stop = None;
    let cancel = opts.limits.cancel.as_ref().map(|c| c.flag());
    // Limits of the next model: what is left of time and nodes.
    let model_opts = |clock: &LimitsClock| IlpOptions {
        limits: Limits {
            time: opts.limits.time.map(|t| t.saturating_sub(clock.elapsed())),
            nodes: match (opts.limits.time, opts.limits.nodes) {
                (None, None) => Some(DEFAULT_NODES_PER_MODEL),
                (_, n) => n.map(|n| n.saturating_sub(clock.nodes()).max(1)),
            },
            cancel: None,
        },
        max_pairs: opts.max_pairs,
        cancel,
        ..IlpOptions::default()
    };
    if problem.buffers.len() <= FULL_MODEL_BUFFERS {
        if peak > bound {
            let out = place_ilp(problem, &best, &model_opts(&clock))?;
            models = 1;
            if out.stats.objective < peak {
                improved = 1;
            }
            (best, peak, lower) = (out.placement, out.stats.objective, out.stats.lower_bound);
            if out.stats.status == SolveStatus::TimeLimit {
                stop = Some(SolveStatus::TimeLimit);
            }
        }
    } else {
        let mut window = opts.window.max(1);
        while peak > bound && models < opts.max_models && window <= opts.max_window.max(1) {
            if let Some(s) = clock.exhausted() {
                stop = Some(s);
                break;
            }
            let Some(free) = peak_window(problem, &best, peak, window) else {
                // More buffers reach the peak than the window holds: a wider one may.
                window = window.saturating_mul(2);
                continue;
            };
            let out = match place_ilp_window(problem, &best, &free, &model_opts(&clock)) {
                Ok(out) => out,
                // Too many pairs: a bigger window would be worse.
                Err(IlpError::TooLarge { .. }) => break,
                Err(e) => return Err(e),
            };
            models += 1;
            // HiGHS reports no node count here; count one per model so a node budget of `n`
            // also caps the number of models.
            clock.tick();
            if out.stats.objective < peak {
                improved += 1;
                (best, peak) = (out.placement, out.stats.objective);
            } else {
                window *= 2;
            }
            if out.stats.status == SolveStatus::TimeLimit {
                stop = Some(SolveStatus::TimeLimit);
                break;
            }
        }
    }
    let lower = lower.max(bound).min(peak);
    let status = if peak <= lower {
        SolveStatus::Optimal
    } else {
        stop.unwrap_or(SolveStatus::Heuristic)
    };
    Ok(IlpRefineOutcome {
        placement: best,
        stats: SolveStats {
            status,
            elapsed: started.elapsed(),
            objective: peak,
            lower_bound: lower,
        },
        models,
        improved,
    })
}

/// The buffers to free for one round: for each top buffer (top = `peak`), the highest buffers
/// alive with it, `window` in all (ties by index). `None` when there are more top buffers than
/// `window` (no window can lower them all).
fn peak_window(
    problem: &PlacementProblem,
    placement: &Placement,
    peak: u64,
    window: usize,
) -> Option<Vec<usize>> {
    let bufs = &problem.buffers;
    let top = |i: usize| placement.offsets[i].saturating_add(bufs[i].size);
    let tops: Vec<usize> = (0..bufs.len()).filter(|&i| top(i) == peak).collect();
    if tops.is_empty() || tops.len() > window {
        return None;
    }
    let per = window / tops.len();
    let mut free = Vec::with_capacity(window);
    for &t in &tops {
        let mut column: Vec<usize> = (0..bufs.len())
            .filter(|&j| bufs[j].lifetime.overlaps(&bufs[t].lifetime))
            .collect();
        column.sort_unstable_by_key(|&j| (std::cmp::Reverse(top(j)), j));
        free.extend(column.into_iter().take(per.max(1)));
    }
    free.sort_unstable();
    free.dedup();
    Some(free)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::fixtures::buf;

    fn stacked(problem: &PlacementProblem) -> Placement {
        let mut offsets = Vec::new();
        let mut top = 0;
        for b in &problem.buffers {
            offsets.push(top);
            top += b.size;
        }
        Placement { offsets }
    }

    /// A staircase of `n` buffers where buffer `i` lives `[i, i + 3)`: LOAD is three sizes.
    fn staircase(n: u64) -> PlacementProblem {
        PlacementProblem::new((0..n).map(|i| buf(i, i + 3, 10 + i % 4)).collect())
    }

    #[test]
    fn a_small_instance_is_modelled_whole_and_proven_optimal() {
        let p = staircase(8);
        let out = refine_peak(&p, &stacked(&p), &IlpRefineOptions::default()).unwrap();
        assert_eq!(p.check(&out.placement).unwrap(), out.stats.objective);
        assert_eq!(out.stats.status, SolveStatus::Optimal);
        assert_eq!(out.stats.objective, out.stats.lower_bound);
        assert_eq!(out.models, 1);
    }

    #[test]
    fn windows_lower_a_stacked_start_on_a_big_instance_and_never_worsen() {
        let p = staircase(60);
        let start = stacked(&p);
        let start_peak = p.check(&start).unwrap();
        let out = refine_peak(&p, &start, &IlpRefineOptions::default()).unwrap();
        let peak = p.check(&out.placement).unwrap();
        assert_eq!(peak, out.stats.objective);
        assert!(out.improved > 0, "no window improved the stacked start");
        assert!(peak < start_peak);
        assert!(out.stats.lower_bound <= peak);
    }

    #[test]
    fn a_peak_reached_by_more_buffers_than_the_first_window_widens_it() {
        // Six steps, five buffers of 10 bytes each: LOAD 50. The start leaves a 10-byte hole
        // under the top buffer of every step, so six buffers reach the peak 60.
        let p = PlacementProblem::new(
            (0..6)
                .flat_map(|t| (0..5).map(move |_| buf(t, t + 1, 10)))
                .collect(),
        );
        let start = Placement {
            offsets: (0..6).flat_map(|_| [0, 10, 20, 30, 50]).collect(),
        };
        assert_eq!(p.check(&start), Ok(60));
        let out = refine_peak(&p, &start, &IlpRefineOptions::default()).unwrap();
        assert!(out.models > 0, "no model built");
        assert_eq!(p.check(&out.placement), Ok(50));
        assert_eq!(out.stats.status, SolveStatus::Optimal);
    }

    #[test]
    fn node_limited_runs_are_deterministic() {
        let p = staircase(60);
        let start = stacked(&p);
        let opts = IlpRefineOptions {
            limits: Limits {
                nodes: Some(6),
                ..Limits::UNLIMITED
            },
            ..IlpRefineOptions::default()
        };
        let a = refine_peak(&p, &start, &opts).unwrap();
        let b = refine_peak(&p, &start, &opts).unwrap();
        assert_eq!(a.placement, b.placement);
        assert!(a.models <= 6);
    }

    #[test]
    fn a_start_at_load_is_returned_untouched() {
        let p = PlacementProblem::new(vec![buf(0, 2, 4), buf(2, 4, 4)]);
        let start = Placement {
            offsets: vec![0, 0],
        };
        let out = refine_peak(&p, &start, &IlpRefineOptions::default()).unwrap();
        assert_eq!(out.placement, start);
        assert_eq!(out.models, 0);
        assert_eq!(out.stats.status, SolveStatus::Optimal);
    }

    #[test]
    fn an_invalid_start_is_refused() {
        let p = PlacementProblem::new(vec![buf(0, 2, 4), buf(1, 4, 4)]);
        let start = Placement {
            offsets: vec![0, 0],
        };
        assert!(matches!(
            refine_peak(&p, &start, &IlpRefineOptions::default()),
            Err(IlpError::WarmStart(_))
        ));
    }
}
