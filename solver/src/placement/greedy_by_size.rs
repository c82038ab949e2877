//! Greedy by size, best fit (TFLite GPU delegate's `GreedyBySizeAssignment`; Pisarchyk & Lee
//! 2020, "Efficient Memory Management for Deep Neural Net Inference"; XLA's
//! `GlobalDecreasingSizeBestFitHeap`).
//!
//! Buffers are taken by decreasing size (ties: earlier start, then lower index); each goes into
//! the smallest gap, after alignment, left between the already placed buffers whose lifetimes
//! overlap its own, or on top of them when no gap fits.
//!
//! Cost: `O(n log n)` to sort plus one query and one insertion in the occupancy index of
//! `fit.rs` per buffer, `O(n · log T · k)` for `k` merged byte runs per index node,
//! instead of the `O(n²)` scan of the original. A time limit or stop flag cuts the pass
//! short: the buffers left go above by the online allocator (`online.rs`, `O(n log n)`).

use super::fit::{place_in_order_within, Rule};
use super::Placer;
use crate::limits::Limits;
use crate::problem::{Placement, PlacementError, PlacementProblem};

/// TFLite's greedy-by-size best-fit placer.
#[derive(Debug, Clone, Copy, Default)]
pub struct GreedyBySize;

/// Buffer indices by decreasing size, then earlier start, then lower index.
pub(crate) fn size_order(problem: &PlacementProblem) -> Vec<usize> {
    let b = &problem.buffers;
    let mut order: Vec<usize> = (0..b.len()).collect();
    order.sort_unstable_by_key(|&i| (std::cmp::Reverse(b[i].size), b[i].lifetime.start, i));
    order
}

impl Placer for GreedyBySize {
    fn name(&self) -> &'static str {
        "greedy-size"
    }

    /// Under a time limit or a stop flag the pass may be cut short: the buffers it has not
    /// reached then go above the others by the online allocator
    /// (`place_in_order_within` in `fit.rs`).
    fn place(
        &self,
        problem: &PlacementProblem,
        limits: &Limits,
    ) -> Result<Placement, PlacementError> {
        place_in_order_within(problem, &size_order(problem), Rule::BestFit, limits)
            .map(|(placement, _)| placement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::problem::fixtures::aligned as buf;
    #[test]
    fn largest_buffer_goes_first_and_smaller_ones_fill_the_tightest_gap() {
        // 0: [0,4) 100 at 0; 1: [0,1) 50 on top at 100; 2: [2,4) 30 on top at 100;
        // 3: [1,2) 40 fits the gap [100,∞) only -> 100 (both 1 and 2 are dead at step 1).
        let p = PlacementProblem::new(vec![
            buf(0, 4, 100, 1),
            buf(0, 1, 50, 1),
            buf(2, 4, 30, 1),
            buf(1, 2, 40, 1),
        ]);
        let pl = GreedyBySize.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(pl.offsets, vec![0, 100, 100, 100]);
        assert_eq!(p.check(&pl), Ok(150));
    }

    #[test]
    fn a_small_buffer_takes_the_smallest_gap_not_the_lowest() {
        // Order 2 (20), 4 (12), 0 (10), 1 (8), 3 (4). 2 [0,2) -> 0; 4 [4,5) -> 0 (alone);
        // 0 [0,10) meets 2 and 4 -> on top at 20; 1 -> 30; 3 [2,3) meets 0 and 1 only, the
        // gaps are [0,20) and [38,inf): best fit takes 0.
        let p = PlacementProblem::new(vec![
            buf(0, 10, 10, 1),
            buf(0, 10, 8, 1),
            buf(0, 2, 20, 1),
            buf(2, 3, 4, 1),
            buf(4, 5, 12, 1),
        ]);
        let pl = GreedyBySize.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(pl.offsets, vec![20, 30, 0, 0, 0]);
        assert_eq!(p.check(&pl), Ok(38));
    }

    #[test]
    fn a_pass_the_clock_cuts_short_places_the_rest_above_by_the_online_allocator() {
        // A chain of equal buffers, each alive beside the next, and an aligned one: cut after
        // 64 buffers, the pass ends with the lower of its part plus the rest above, and all
        // placed online (the chain in two blocks, the aligned buffer above them): no stacking
        // along the chain, the alignment kept.
        let mut buffers: Vec<_> = (0..50_000).map(|i| buf(i, i + 2, 512, 1)).collect();
        buffers.push(buf(7, 9, 100, 4096));
        let p = PlacementProblem::new(buffers);
        let order = size_order(&p);
        let (cut, was_cut) = place_in_order_within(
            &p,
            &order,
            Rule::BestFit,
            &Limits::with_time(Duration::ZERO),
        )
        .unwrap();
        assert!(was_cut);
        let peak = p.check(&cut).unwrap();
        assert_eq!(peak, 4096 + 100);
        assert_eq!(cut.offsets[50_000] % 4096, 0);
        // A raised stop flag cuts it as the clock does; without limits it runs to the end.
        let cancel = crate::limits::CancelToken::new();
        cancel.cancel();
        let stopped = Limits {
            cancel: Some(cancel),
            ..Limits::UNLIMITED
        };
        assert_eq!(GreedyBySize.place(&p, &stopped).unwrap(), cut);
        let (full, was_cut) =
            place_in_order_within(&p, &order, Rule::BestFit, &Limits::UNLIMITED).unwrap();
        assert!(!was_cut);
        assert_eq!(full, GreedyBySize.place(&p, &Limits::UNLIMITED).unwrap());
        assert_eq!(p.check(&full), Ok(4096 + 100));
        // The chain alone, cut at once: at LOAD.
        let chain = PlacementProblem::new(p.buffers[..50_000].to_vec());
        let (cut, _) = place_in_order_within(
            &chain,
            &size_order(&chain),
            Rule::BestFit,
            &Limits::with_time(Duration::ZERO),
        )
        .unwrap();
        assert_eq!(chain.check(&cut), Ok(1024));
    }

    #[test]
    fn offsets_respect_alignment() {
        let p = PlacementProblem::new(vec![buf(0, 2, 10, 1), buf(0, 2, 3, 64)]);
        let pl = GreedyBySize.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(pl.offsets, vec![0, 64]);
        assert_eq!(p.check(&pl), Ok(67));
    }

    #[test]
    fn offsets_that_would_overflow_are_reported_not_wrapped() {
        let p = PlacementProblem::new(vec![buf(0, 2, u64::MAX - 1, 1), buf(0, 2, 5, 1)]);
        assert_eq!(
            GreedyBySize.place(&p, &Limits::UNLIMITED),
            Err(PlacementError::Overflow { index: 1 })
        );
    }
}
