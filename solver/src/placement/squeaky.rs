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
//! Rounds stop at LOAD (optimal), when the [`Budget`] is spent (a node budget of `k` allows
//! `max(k, 1)` rounds; a time limit makes the result depend on the machine), or after
//! `clamp(WORK / n, 1, MAX_ROUNDS)` rounds, a deterministic cap that keeps the member near the
//! cost of a few greedy passes on large traces (one on iopddl_S_1, where it then equals
//! greedy by size). Each round is one greedy pass of `fit.rs`, `O(n · log T · k)`.

use super::fit::{peak_of, place_in_order};
use super::greedy_by_conflicts::conflict_order;
use super::greedy_by_size::size_order;
use super::Placer;
use crate::budget::Budget;
use crate::problem::{Placement, PlacementError, PlacementProblem};
use std::cmp::Reverse;

/// Buffer placements allowed per run by default (`rounds × n`).
pub const WORK: u64 = 40_000;

/// Most rounds in a run.
pub const MAX_ROUNDS: u64 = 250;

/// Iterated greedy best fit with squeaky-wheel reordering.
#[derive(Debug, Clone, Copy, Default)]
pub struct SqueakyWheel;

/// Rounds allowed for `n` buffers.
fn rounds_for(n: usize) -> u64 {
    let n = u64::try_from(n).unwrap_or(u64::MAX).max(1);
    let w: u64 = std::env::var("WORK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(WORK);
    let m: u64 = std::env::var("MAXR")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_ROUNDS);
    (w / n).clamp(1, m)
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
        budget: &Budget,
    ) -> Result<Placement, PlacementError> {
        let buffers = &problem.buffers;
        let n = buffers.len();
        let load = problem.load();
        let rounds = rounds_for(n);
        let mut clock = budget.start();
        let mut order = size_order(problem);
        let mut best = place_in_order(problem, &order)?;
        let mut best_peak = peak_of(buffers, &best);
        let mut round = 1u64;
        if round < rounds && best_peak > load && clock.tick().is_none() {
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
        while round < rounds && best_peak > load && clock.tick().is_none() {
            blame(problem, &current, load, &mut prio);
            order.sort_unstable_by_key(|&i| (Reverse(prio[i]), i));
            current = place_in_order(problem, &order)?;
            let peak = peak_of(buffers, &current);
            if peak < best_peak {
                (best, best_peak) = (current.clone(), peak);
            }
            round += 1;
        }
        Ok(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::SolveStatus;
    use crate::problem::{Buffer, Lifetime};

    fn buf(start: u64, end: u64, size: u64) -> Buffer {
        Buffer {
            lifetime: Lifetime::new(start, end),
            size,
            alignment: 1,
        }
    }

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
        let pl = SqueakyWheel.place(&p, &Budget::UNLIMITED).unwrap();
        assert_eq!(p.check(&pl), Ok(20));
    }

    #[test]
    fn a_one_node_budget_stops_after_the_size_order_seed() {
        let p = stranding();
        let budget = Budget {
            time: None,
            nodes: Some(1),
        };
        assert_eq!(budget.start().tick(), Some(SolveStatus::NodeLimit));
        let pl = SqueakyWheel.place(&p, &budget).unwrap();
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
        let pl = SqueakyWheel.place(&p, &Budget::UNLIMITED).unwrap();
        assert_eq!(p.check(&pl), Ok(11));
    }

    #[test]
    fn the_round_cap_shrinks_with_the_instance() {
        assert_eq!(rounds_for(0), MAX_ROUNDS);
        assert_eq!(rounds_for(1_000), WORK / 1_000);
        assert_eq!(rounds_for(1_000_000), 1);
    }
}
