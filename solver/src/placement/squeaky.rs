//! Squeaky-wheel optimisation of the greedy best-fit order (Joslin & Clements 1999, "Squeaky
//! Wheel Optimization", JAIR 10): construct, find the trouble makers, raise their priority,
//! construct again.
//!
//! Round 0 places by decreasing size ([`super::greedy_by_size`]), round 1 by decreasing bytes
//! in conflict ([`super::greedy_by_conflicts`]); the better of the two seeds the priorities
//! (its order's ranks). Each later round blames the buffers that end above LOAD (a lower
//! bound: every byte above it is excess), raises their priority by `n` plus up to `2n` in
//! proportion to how far above LOAD they end, re-sorts (ties: lower index) and places again
//! with best fit. The best placement seen is kept (the earliest on ties).
//!
//! Rounds stop at LOAD (optimal), when the [`Limits`] is spent (a node budget of `k` allows
//! `max(k, 1)` rounds; a time limit makes the result depend on the machine), after
//! `cap = clamp(WORK / n, 1, MAX_ROUNDS)` rounds, a deterministic cap that keeps the member
//! near the cost of a few greedy passes on large traces, or once it stagnates: after
//! `max(STALL, cap / 5)` rounds in a row (a fifth of the work allowed) that did not lower the
//! best peak by at least 1/1024 of it. (Measured: on DNN training graphs the gains after the
//! first rounds are a few bytes in a gigabyte, so the run used to spend its whole cap, 18
//! rounds on densenet121.16.train, for nothing; on the minimalloc instances gains come every
//! few rounds and the window keeps them.) In a portfolio, when the cap leaves no round past
//! the two seeds (which the greedy members place themselves), the member returns the best
//! placement of the members before it (iopddl_S_1). Each round is one greedy pass of `fit.rs`,
//! `O(n · log T · k)`.

use super::fit::{peak_of, place_in_order};
use super::greedy_by_conflicts::conflict_order;
use super::greedy_by_size::size_order;
use super::Placer;
use crate::limits::Limits;
use crate::problem::{Placement, PlacementError, PlacementProblem};
use std::cmp::Reverse;

/// Buffer placements allowed per run by default (`rounds × n`).
pub const WORK: u64 = 40_000;

/// Most rounds in a run.
pub const MAX_ROUNDS: u64 = 250;

/// Fewest rounds without a new best peak (lower by at least 1/1024) after which a run stops.
pub const STALL: u64 = 5;

/// Iterated greedy best fit with squeaky-wheel reordering.
#[derive(Debug, Clone, Copy, Default)]
pub struct SqueakyWheel;

/// Rounds allowed for `n` buffers.
fn rounds_for(n: usize) -> u64 {
    let n = u64::try_from(n).unwrap_or(u64::MAX).max(1);
    (WORK / n).clamp(1, MAX_ROUNDS)
}

/// Rounds without a clear gain after which a run of at most `rounds` rounds stops.
fn stall_for(rounds: u64) -> u64 {
    STALL.max(rounds / 5)
}

/// Whether `peak` lowers `best` by at least 1/1024 of it.
fn clear_gain(peak: u64, best: u64) -> bool {
    peak.saturating_add(best >> 10) < best
}

/// Raises the priority of every buffer ending above `load`: by `n`, plus up to `2n` more for
/// the one ending at the peak.
fn blame(problem: &PlacementProblem, placement: &Placement, load: u64, prio: &mut [u128]) {
    let buffers = &problem.buffers;
    let n = buffers.len() as u128;
    let peak = peak_of(buffers, placement);
    let span = u128::from(peak.saturating_sub(load)).max(1);
    for ((b, &off), p) in buffers.iter().zip(&placement.offsets).zip(prio.iter_mut()) {
        let end = off.saturating_add(b.size);
        if end > load {
            let over = u128::from(end - load);
            *p =
                p.saturating_add(n.saturating_add(n.saturating_mul(2).saturating_mul(over) / span));
        }
    }
}

impl Placer for SqueakyWheel {
    fn name(&self) -> &'static str {
        "squeaky"
    }

    fn place(
        &self,
        problem: &PlacementProblem,
        limits: &Limits,
    ) -> Result<Placement, PlacementError> {
        let buffers = &problem.buffers;
        let n = buffers.len();
        let load = problem.load();
        // No placement goes below this: the search stops there.
        let bound = problem.aligned_load();
        let rounds = rounds_for(n);
        let mut clock = limits.start();
        let mut order = size_order(problem);
        let mut best = place_in_order(problem, &order)?;
        let mut best_peak = peak_of(buffers, &best);
        let mut round = 1u64;
        if round < rounds && best_peak > bound && clock.tick().is_none() {
            let other = conflict_order(problem);
            let placed = place_in_order(problem, &other)?;
            let peak = peak_of(buffers, &placed);
            if peak < best_peak {
                (best, best_peak, order) = (placed, peak, other);
            }
            round += 1;
        }
        // Priorities: the seed order's ranks, scaled so that blame moves buffers gradually.
        let mut prio = vec![0u128; n];
        for (rank, &i) in order.iter().enumerate() {
            prio[i] = (n - rank) as u128 * 100;
        }
        let mut current = best.clone();
        let (stall, mut idle) = (stall_for(rounds), 0u64);
        while round < rounds && best_peak > bound && idle < stall && clock.tick().is_none() {
            blame(problem, &current, load, &mut prio);
            order.sort_unstable_by_key(|&i| (Reverse(prio[i]), i));
            current = place_in_order(problem, &order)?;
            let peak = peak_of(buffers, &current);
            idle = if clear_gain(peak, best_peak) {
                0
            } else {
                idle + 1
            };
            if peak < best_peak {
                (best, best_peak) = (current.clone(), peak);
            }
            round += 1;
        }
        Ok(best)
    }

    fn place_from(
        &self,
        problem: &PlacementProblem,
        best: Option<(&Placement, u64)>,
        limits: &Limits,
    ) -> Result<Placement, PlacementError> {
        match best {
            // Only the two seeds fit in the cap: the greedy members placed them already.
            Some((placement, _)) if rounds_for(problem.buffers.len()) <= 2 => Ok(placement.clone()),
            _ => self.place(problem, limits),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::SolveStatus;

    use crate::problem::fixtures::buf;
    /// Greedy by size peaks at 21 here, greedy by conflicts at LOAD = 20.
    fn stranding() -> PlacementProblem {
        PlacementProblem::new(vec![
            buf(2, 5, 8),
            buf(1, 3, 9),
            buf(3, 5, 4),
            buf(1, 3, 2),
            buf(3, 6, 8),
        ])
    }

    #[test]
    fn it_keeps_the_better_seed_and_stops_at_load() {
        let p = stranding();
        let pl = SqueakyWheel.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(p.check(&pl), Ok(20));
    }

    #[test]
    fn a_one_node_budget_stops_after_the_size_order_seed() {
        let p = stranding();
        let limits = Limits {
            time: None,
            nodes: Some(1),
            ..Limits::UNLIMITED
        };
        assert_eq!(limits.start().tick(), Some(SolveStatus::NodeLimit));
        let pl = SqueakyWheel.place(&p, &limits).unwrap();
        assert_eq!(p.check(&pl), Ok(21));
    }

    #[test]
    fn blamed_buffers_move_ahead_until_the_peak_reaches_load() {
        // Both seeds peak at 15 (found by search over small random instances); LOAD is 11.
        let p = PlacementProblem::new(vec![buf(1, 2, 6), buf(2, 5, 4), buf(1, 3, 5), buf(3, 5, 7)]);
        assert_eq!(p.load(), 11);
        for seed in [size_order(&p), conflict_order(&p)] {
            let placed = place_in_order(&p, &seed).unwrap();
            assert_eq!(p.check(&placed), Ok(15));
        }
        let pl = SqueakyWheel.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(p.check(&pl), Ok(11));
    }

    #[test]
    fn the_round_cap_shrinks_with_the_instance() {
        assert_eq!(rounds_for(0), MAX_ROUNDS);
        assert_eq!(rounds_for(1_000), WORK / 1_000);
        assert_eq!(rounds_for(1_000_000), 1);
        assert_eq!(stall_for(MAX_ROUNDS), MAX_ROUNDS / 5);
        assert_eq!(stall_for(18), STALL);
    }

    #[test]
    fn only_a_gain_of_a_thousandth_resets_the_stall_count() {
        assert!(clear_gain(1000, 1024));
        assert!(!clear_gain(1023, 1024));
        assert!(!clear_gain(1024, 1024));
    }

    #[test]
    fn in_a_portfolio_a_one_round_cap_returns_the_best_so_far() {
        let b = buf(0, 1, 1);
        let p = PlacementProblem::new(vec![b; 30_000]);
        let given = Placement {
            offsets: (0..30_000).collect(),
        };
        let got = SqueakyWheel
            .place_from(&p, Some((&given, 30_000)), &Limits::UNLIMITED)
            .unwrap();
        assert_eq!(got, given);
    }
}
