//! First fit in time order: an online allocator replayed over the lifetimes. Steps are swept in
//! increasing order; at each step the buffers that end there are freed first, then the buffers
//! that start there are allocated (by lower index, the trace's own order), each at the lowest
//! aligned address where it fits among the buffers alive at that moment — what a caching
//! allocator does without size rounding or bins (e.g. PyTorch's CUDA caching allocator, or
//! the "first fit" of Knuth, TAOCP vol. 1 §2.5).
//!
//! It ignores the future, so it is weaker than the offline planners, but it is the baseline a
//! runtime allocator would reach and is cheap: events sort in `O(n log n)`; free space is kept
//! as an ordered map of free gaps below the top of the live buffers, so an allocation scans
//! the gaps from the bottom up to the first that fits, and a free merges with its neighbours
//! in `O(log n)`. Worst case `O(n · g)` for `g` free gaps.

use super::Placer;
use crate::limits::Limits;
use crate::problem::{align_up, Placement, PlacementError, PlacementProblem};
use std::collections::BTreeMap;

/// Online first-fit allocator replayed in time order.
#[derive(Debug, Clone, Copy, Default)]
pub struct FirstFit;

/// The free space of a simulated arena: free gaps below `top`, everything above `top` free.
#[derive(Debug, Default)]
struct Arena {
    /// Free gaps `start -> end`, disjoint, not touching, all below `top`.
    gaps: BTreeMap<u64, u64>,
    /// One past the highest byte in use.
    top: u64,
}

impl Arena {
    /// Reserves `size` bytes at the lowest multiple of `alignment` that fits; `None` on
    /// overflow.
    fn alloc(&mut self, size: u64, alignment: u64) -> Option<u64> {
        let mut chosen = None;
        for (&start, &end) in &self.gaps {
            let off = align_up(start, alignment)?;
            if off.checked_add(size).is_some_and(|e| e <= end) {
                chosen = Some((start, end, off));
                break;
            }
        }
        let Some((start, end, off)) = chosen else {
            let off = align_up(self.top, alignment)?;
            let new_top = off.checked_add(size)?;
            if off > self.top {
                self.gaps.insert(self.top, off);
            }
            self.top = new_top;
            return Some(off);
        };
        self.gaps.remove(&start);
        if off > start {
            self.gaps.insert(start, off);
        }
        let used_end = off + size; // fits below `end`, checked above
        if end > used_end {
            self.gaps.insert(used_end, end);
        }
        Some(off)
    }

    /// Releases `[off, off + size)` (in use), merging it with adjacent free space.
    fn free(&mut self, off: u64, size: u64) {
        let (mut start, mut end) = (off, off.saturating_add(size));
        if let Some((&s, &e)) = self.gaps.range(..start).next_back() {
            if e == start {
                self.gaps.remove(&s);
                start = s;
            }
        }
        if let Some(e) = self.gaps.remove(&end) {
            end = e;
        }
        if end >= self.top {
            self.top = start;
        } else {
            self.gaps.insert(start, end);
        }
    }
}

impl Placer for FirstFit {
    fn name(&self) -> &'static str {
        "first-fit"
    }

    fn place(
        &self,
        problem: &PlacementProblem,
        _limits: &Limits,
    ) -> Result<Placement, PlacementError> {
        let buffers = &problem.buffers;
        // (step, 0 = free / 1 = alloc, index): frees before allocations at the same step.
        let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(buffers.len() * 2);
        for (i, b) in buffers.iter().enumerate() {
            events.push((b.lifetime.start, 1, i));
            events.push((b.lifetime.end, 0, i));
        }
        events.sort_unstable();
        let mut arena = Arena::default();
        let mut offsets = vec![0u64; buffers.len()];
        for (_, kind, i) in events {
            let b = &buffers[i];
            if kind == 0 {
                arena.free(offsets[i], b.size);
            } else {
                offsets[i] = arena
                    .alloc(b.size, b.alignment)
                    .ok_or(PlacementError::Overflow { index: i })?;
            }
        }
        Ok(Placement { offsets })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::problem::fixtures::aligned as buf;
    #[test]
    fn a_freed_hole_is_reused_by_the_next_buffer_that_fits() {
        // 0 [0,2) 10 @0, 1 [0,4) 10 @10; at step 2, 0 is freed and 2 (8 bytes) takes @0;
        // 3 [2,4) 5 finds [8,10) too small and goes on top @20.
        let p = PlacementProblem::new(vec![
            buf(0, 2, 10, 1),
            buf(0, 4, 10, 1),
            buf(2, 4, 8, 1),
            buf(2, 4, 5, 1),
        ]);
        let pl = FirstFit.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(pl.offsets, vec![0, 10, 0, 20]);
        assert_eq!(p.check(&pl), Ok(25));
    }

    #[test]
    fn frees_happen_before_allocations_at_the_same_step() {
        let p = PlacementProblem::new(vec![buf(0, 1, 10, 1), buf(1, 2, 10, 1)]);
        let pl = FirstFit.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(pl.offsets, vec![0, 0]);
    }

    #[test]
    fn freeing_the_top_buffer_lowers_the_top_through_free_gaps_below_it() {
        let mut a = Arena::default();
        assert_eq!(a.alloc(10, 1), Some(0));
        assert_eq!(a.alloc(3, 16), Some(16)); // gap [10,16) left below
        assert_eq!(a.gaps.get(&10), Some(&16));
        a.free(16, 3);
        assert_eq!(a.top, 10);
        assert!(a.gaps.is_empty());
        a.free(0, 10);
        assert_eq!(a.top, 0);
    }

    #[test]
    fn alignment_is_honoured_inside_gaps() {
        // Freeing 1 at step 1 lowers the top to 10; 2 needs 32-alignment, so it goes at 32
        // and leaves [10, 32) free.
        let p = PlacementProblem::new(vec![buf(0, 3, 10, 1), buf(0, 1, 20, 1), buf(1, 3, 4, 32)]);
        let pl = FirstFit.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(pl.offsets, vec![0, 10, 32]);
        assert_eq!(p.check(&pl), Ok(36));
    }
}
