//! Greedy by conflicts, best fit: the buffers that share their lifetime with the most bytes go
//! first. A buffer's key is the total size of the buffers alive at some step of its lifetime,
//! its own included (its size plus the sizes of the buffers it conflicts with); ties: larger
//! size, earlier start, lower index. Each buffer then goes into the smallest gap, after
//! alignment, left by the already placed buffers alive with it, or on top (as in
//! [`super::greedy_by_size`]).
//!
//! This is the most-constrained-first ordering of interference-graph register allocators and
//! a relative of the "greedy by breadth" strategies of Pisarchyk & Lee 2020 ("Efficient Memory
//! Management for Deep Neural Net Inference"), with the degree counted in bytes rather than in
//! neighbours so that many tiny neighbours do not outweigh a large one.
//!
//! Cost: the keys take `O(n log n)` (sorted starts and ends with prefix sums of sizes, no
//! pairwise scan); placement is one query and one insertion per buffer in the occupancy index
//! of `fit.rs`.

use super::fit::{conflict_bytes, place_in_order_within, Rule};
use super::Placer;
use crate::limits::Limits;
use crate::problem::{Placement, PlacementError, PlacementProblem};
use std::cmp::Reverse;

/// Greedy best-fit placer ordered by bytes in conflict, descending.
#[derive(Debug, Clone, Copy, Default)]
pub struct GreedyByConflicts;

/// Buffer indices by decreasing bytes alive during the buffer's lifetime (its own included),
/// then decreasing size, earlier start, lower index.
pub(crate) fn conflict_order(problem: &PlacementProblem) -> Vec<usize> {
    let b = &problem.buffers;
    let conflicts = conflict_bytes(b);
    let mut order: Vec<usize> = (0..b.len()).collect();
    order.sort_unstable_by_key(|&i| {
        (
            Reverse(conflicts[i].saturating_add(b[i].size)),
            Reverse(b[i].size),
            b[i].lifetime.start,
            i,
        )
    });
    order
}

impl Placer for GreedyByConflicts {
    fn name(&self) -> &'static str {
        "greedy-conflicts"
    }

    fn place(
        &self,
        problem: &PlacementProblem,
        limits: &Limits,
    ) -> Result<Placement, PlacementError> {
        place_in_order_within(problem, &conflict_order(problem), Rule::BestFit, limits)
            .map(|(p, _)| p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::problem::fixtures::buf;
    #[test]
    fn the_buffer_in_the_most_crowded_lifetime_goes_first() {
        // 0 [0,1) 50 meets only 1; 1 [0,3) 10 meets 0 and 2; 2 [2,3) 45 meets 1.
        // Keys: 0 -> 60, 1 -> 105, 2 -> 55. Order 1, 0, 2.
        let p = PlacementProblem::new(vec![buf(0, 1, 50), buf(0, 3, 10), buf(2, 3, 45)]);
        assert_eq!(conflict_order(&p), vec![1, 0, 2]);
        let pl = GreedyByConflicts.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(pl.offsets, vec![10, 0, 10]);
        assert_eq!(p.check(&pl), Ok(60));
    }

    #[test]
    fn it_reaches_load_where_greedy_by_size_does_not() {
        // Keys 31, 19, 20, 19, 20: order 0, 4, 2, 1, 3. Greedy by size (order 1, 0, 4, 2, 3)
        // strands buffer 2 on top and peaks at 21; by conflicts peaks at LOAD = 20.
        let p = PlacementProblem::new(vec![
            buf(2, 5, 8),
            buf(1, 3, 9),
            buf(3, 5, 4),
            buf(1, 3, 2),
            buf(3, 6, 8),
        ]);
        assert_eq!(conflict_order(&p), vec![0, 4, 2, 1, 3]);
        let pl = GreedyByConflicts.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(pl.offsets, vec![0, 8, 16, 17, 8]);
        assert_eq!(p.check(&pl), Ok(20));
        assert_eq!(p.load(), 20);
        let by_size = super::super::greedy_by_size::GreedyBySize
            .place(&p, &Limits::UNLIMITED)
            .unwrap();
        assert_eq!(p.check(&by_size), Ok(21));
    }
}
