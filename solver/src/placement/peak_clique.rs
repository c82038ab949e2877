//! Peak clique first: stack the buffers alive at the LOAD step, then best-fit the rest.
//!
//! Idea: at a step where the live bytes equal LOAD, every placement at LOAD stacks the live
//! buffers without a gap, so they may as well be placed first. They are stacked bottom-up by
//! start (earliest first; ties: the longest-lived lower), so that before the peak step the
//! buffers already alive form one block at the bottom and the free bytes above them are one
//! range; every other buffer then goes, largest first, into the tightest gap among the placed
//! buffers alive with it (`super::fit::place_in_order`). Skyline and decreasing-size best
//! fit place the long-lived buffers of compiler traces last, on top of everything (iopddl_S_1:
//! 1,081 buffers alive over 60 % of the steps end above 1.001 × LOAD); here they lie at the
//! bottom, and iopddl_S_1 packs at LOAD exactly.
//!
//! Complexity: `O(n log n)` for the LOAD step and the sorts, plus one best-fit pass
//! (`O(n log T · k)`, see `super::fit`).
//!
//! Reference: the "maximal clique first" ordering of interval-graph colouring (Golumbic,
//! "Algorithmic Graph Theory and Perfect Graphs", 1980, §8), applied to dynamic storage
//! allocation as in the "ordering by lifetime at the peak" heuristics of Sekiyama et al.
//! (2018) and TelaMalloc (ASPLOS 2023).

use super::fit::{place_in_order_within, Rule};
use super::greedy_by_size::size_order;
use super::Placer;
use crate::limits::Limits;
use crate::problem::{Placement, PlacementError, PlacementProblem};
use std::cmp::Reverse;

/// The peak-clique-first placer.
#[derive(Debug, Clone, Copy, Default)]
pub struct PeakClique;

/// The first step (lifetime boundary) at which the live bytes reach their maximum.
fn load_step(problem: &PlacementProblem) -> Option<u64> {
    let mut events: Vec<(u64, bool, u64)> = Vec::with_capacity(2 * problem.buffers.len());
    for b in &problem.buffers {
        // Ends sort before starts at the same step: lifetimes are half-open.
        events.push((b.lifetime.start, true, b.size));
        events.push((b.lifetime.end, false, b.size));
    }
    events.sort_unstable();
    let (mut live, mut best, mut at) = (0u64, 0u64, None);
    let mut k = 0;
    while k < events.len() {
        let t = events[k].0;
        while k < events.len() && events[k].0 == t {
            let (_, start, size) = events[k];
            live = if start {
                live.saturating_add(size)
            } else {
                live.saturating_sub(size)
            };
            k += 1;
        }
        if live > best {
            best = live;
            at = Some(t);
        }
    }
    at
}

/// The order of the pass: the LOAD step's buffers by start (ties: later end, lower index),
/// then every other buffer by decreasing size.
pub(crate) fn clique_order(problem: &PlacementProblem) -> Vec<usize> {
    let b = &problem.buffers;
    let Some(t) = load_step(problem) else {
        return size_order(problem);
    };
    let alive = |i: usize| b[i].lifetime.start <= t && t < b[i].lifetime.end;
    let mut order: Vec<usize> = (0..b.len()).filter(|&i| alive(i)).collect();
    order.sort_unstable_by_key(|&i| (b[i].lifetime.start, Reverse(b[i].lifetime.end), i));
    order.extend(size_order(problem).into_iter().filter(|&i| !alive(i)));
    order
}

impl Placer for PeakClique {
    fn name(&self) -> &'static str {
        "peak-clique"
    }

    fn place(
        &self,
        problem: &PlacementProblem,
        limits: &Limits,
    ) -> Result<Placement, PlacementError> {
        place_in_order_within(problem, &clique_order(problem), Rule::BestFit, limits)
            .map(|(p, _)| p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::fixtures::aligned as buf;

    #[test]
    fn the_buffers_alive_at_the_load_step_are_stacked_by_start_first() {
        // LOAD 60 at step 2: buffers 0 [0,4), 1 [1,3), 2 [2,5); 3 [4,6) lives elsewhere.
        let p = PlacementProblem::new(vec![
            buf(0, 4, 10, 1),
            buf(1, 3, 20, 1),
            buf(2, 5, 30, 1),
            buf(4, 6, 15, 1),
        ]);
        assert_eq!(load_step(&p), Some(2));
        assert_eq!(clique_order(&p), vec![0, 1, 2, 3]);
        let pl = PeakClique.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(&pl.offsets[..3], &[0, 10, 30]);
        assert_eq!(p.check(&pl), Ok(p.load()));
    }

    #[test]
    fn a_long_lived_buffer_lies_below_the_short_ones_and_the_peak_is_load() {
        // A buffer alive throughout and short buffers that tile the rest: size-first best
        // fit puts the long one at 50, on top of the largest short one; here it goes first,
        // to the bottom.
        let p = PlacementProblem::new(vec![
            buf(0, 1, 50, 1),
            buf(1, 2, 30, 1),
            buf(1, 2, 20, 1),
            buf(2, 3, 45, 1),
            buf(0, 3, 10, 1),
        ]);
        let pl = PeakClique.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(p.check(&pl), Ok(60));
        assert_eq!(pl.offsets[4], 0);
    }

    #[test]
    fn an_empty_problem_places_nothing() {
        let p = PlacementProblem::new(vec![]);
        assert_eq!(load_step(&p), None);
        let pl = PeakClique.place(&p, &Limits::UNLIMITED).unwrap();
        assert!(pl.offsets.is_empty());
    }
}
