//! The online allocator (not a placer of the portfolio): buffers placed as a runtime's
//! allocator would place them, in time order, each the moment it starts, into the best-fitting
//! free block left by the buffers that have ended (coalesced with its free neighbours), the
//! arena growing at its top when no free block fits. It looks neither ahead nor at buffers
//! placed by someone else, so it is the fallback of a greedy pass cut short by the clock
//! (`place_in_order_within` in `fit.rs`): the buffers the pass did not reach go above what
//! it placed, where nothing can conflict with them, or every buffer is placed online, which
//! ever peak is lower.
//!
//! Unlike stacking each buffer on the highest top alive during its lifetime (a skyline), the
//! arena never climbs on a chain of short-lived buffers: a block freed is reused (a chain of
//! buffers of one size, each alive beside the next, takes two blocks however long the chain).
//!
//! Cost: `O(n log n)`: a sort by start, a heap of ends, and ordered maps of the free blocks by
//! offset and by (length, offset); best fit scans the blocks of sufficient length in
//! increasing length until one fits after alignment (the first, unless alignments leave
//! slivers). Reference: Knuth, TAOCP vol. 1, § 2.5 (dynamic storage allocation, best fit with
//! boundary coalescing).

use super::Placer;
use crate::limits::Limits;
use crate::problem::{align_up, Buffer, Placement, PlacementError, PlacementProblem};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

/// Free blocks of the arena, by offset and by (length, offset).
#[derive(Default)]
struct FreeList {
    by_offset: BTreeMap<u64, u64>,
    by_length: BTreeSet<(u64, u64)>,
}

impl FreeList {
    fn insert(&mut self, offset: u64, length: u64) {
        if length > 0 {
            self.by_offset.insert(offset, length);
            self.by_length.insert((length, offset));
        }
    }

    fn remove(&mut self, offset: u64, length: u64) {
        self.by_offset.remove(&offset);
        self.by_length.remove(&(length, offset));
    }

    /// Frees `[offset, end)`, merged with the free blocks that touch it.
    fn free(&mut self, mut offset: u64, mut end: u64) {
        if let Some((&o, &l)) = self.by_offset.range(..offset).next_back() {
            if o + l == offset {
                self.remove(o, l);
                offset = o;
            }
        }
        if let Some(&l) = self.by_offset.get(&end) {
            self.remove(end, l);
            end += l;
        }
        self.insert(offset, end - offset);
    }

    /// Takes `size` bytes aligned to `alignment` from the best-fitting free block (the
    /// shortest that holds them, then the lowest), returning the offset; the bytes of the
    /// block before and after stay free.
    fn take(&mut self, size: u64, alignment: u64) -> Option<u64> {
        let (length, offset, at) =
            self.by_length
                .range((size, 0)..)
                .find_map(|&(length, offset)| {
                    let at = align_up(offset, alignment)?;
                    (at.checked_add(size)? <= offset + length).then_some((length, offset, at))
                })?;
        self.remove(offset, length);
        self.insert(offset, at - offset);
        self.insert(at + size, offset + length - at - size);
        Some(at)
    }
}

/// The online allocator as a portfolio member: every buffer placed online. Cheap
/// (`O(n log n)`) and never the best on the zoo's planned graphs, it is the best member within
/// 10 s on 60,000 random buffers each alive beside thousands (1.078 × LOAD, where greedy by
/// size ends at 1.102 and greedy by conflicts at 1.089), whose later members the time limit
/// skips.
#[derive(Debug, Clone, Copy, Default)]
pub struct Online;

impl Placer for Online {
    fn name(&self) -> &'static str {
        "online"
    }

    fn place(
        &self,
        problem: &PlacementProblem,
        _limits: &Limits,
    ) -> Result<Placement, PlacementError> {
        place_all(&problem.buffers)
    }
}

/// Every buffer placed online (module doc), as a placement by index.
pub(crate) fn place_all(buffers: &[Buffer]) -> Result<Placement, PlacementError> {
    let all: Vec<usize> = (0..buffers.len()).collect();
    let mut offsets = vec![0u64; buffers.len()];
    for (i, o) in place(buffers, &all)? {
        offsets[i] = o;
    }
    Ok(Placement { offsets })
}

/// Offsets for `which` (indices into `buffers`), relative to a base aligned to every
/// alignment among them, as the online allocator places them (module doc). Every other
/// buffer is ignored. `Err` names a buffer whose offset would overflow u64.
pub(crate) fn place(
    buffers: &[Buffer],
    which: &[usize],
) -> Result<Vec<(usize, u64)>, PlacementError> {
    let mut by_start: Vec<usize> = which.to_vec();
    // Ties: the larger first (it has the fewest blocks to choose from), then the index.
    by_start.sort_unstable_by_key(|&i| (buffers[i].lifetime.start, Reverse(buffers[i].size), i));
    let mut free = FreeList::default();
    let mut top = 0u64;
    // Live buffers by end: (end, offset, size).
    let mut live: BinaryHeap<Reverse<(u64, u64, u64)>> = BinaryHeap::new();
    let mut out = Vec::with_capacity(which.len());
    for i in by_start {
        let b = &buffers[i];
        // Half-open lifetimes: what ends at this start is free for it.
        while let Some(&Reverse((end, offset, size))) = live.peek() {
            if end > b.lifetime.start {
                break;
            }
            live.pop();
            free.free(offset, offset + size);
        }
        let offset = match free.take(b.size, b.alignment) {
            Some(o) => o,
            None => {
                let at = align_up(top, b.alignment).ok_or(PlacementError::Overflow { index: i })?;
                let end = at
                    .checked_add(b.size)
                    .ok_or(PlacementError::Overflow { index: i })?;
                free.insert(top, at - top);
                top = end;
                at
            }
        };
        live.push(Reverse((b.lifetime.end, offset, b.size)));
        out.push((i, offset));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::fixtures::aligned as buf;

    fn placed(buffers: &[Buffer]) -> (Placement, u64) {
        let placement = place_all(buffers).unwrap();
        let peak = PlacementProblem::new(buffers.to_vec())
            .check(&placement)
            .unwrap();
        (placement, peak)
    }

    #[test]
    fn a_long_chain_of_buffers_each_alive_beside_the_next_takes_two_blocks() {
        let chain: Vec<Buffer> = (0..100_000).map(|i| buf(i, i + 2, 512, 1)).collect();
        assert_eq!(placed(&chain).1, 1024);
    }

    #[test]
    fn a_freed_block_is_reused_best_fit_and_coalesced_with_its_neighbours() {
        // 0 and 1 side by side, both end at 2; 2 (the sum of both) fits their merged block.
        let b = [
            buf(0, 2, 100, 1),
            buf(0, 2, 50, 1),
            buf(0, 4, 10, 1),
            buf(2, 4, 150, 1),
        ];
        let (p, peak) = placed(&b);
        assert_eq!(peak, 160);
        assert_eq!(p.offsets[3], 0);
    }

    #[test]
    fn alignments_are_honoured_in_free_blocks_and_at_the_top() {
        let b = [
            buf(0, 1, 3, 1),
            buf(0, 3, 5, 1),
            buf(1, 3, 2, 2),
            buf(1, 3, 16, 16),
            buf(2, 4, 1, 1),
        ];
        let (p, _) = placed(&b);
        for (x, o) in b.iter().zip(&p.offsets) {
            assert_eq!(o % x.alignment, 0, "{x:?} at {o}");
        }
    }

    #[test]
    fn an_offset_past_u64_is_an_overflow_naming_the_buffer() {
        let b = [buf(0, 2, u64::MAX - 8, 1), buf(0, 2, 16, 1)];
        let e = place(&b, &[0, 1]).unwrap_err();
        assert!(matches!(e, PlacementError::Overflow { index: 1 }), "{e}");
    }
}
