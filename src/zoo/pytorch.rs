//! A simulation of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, as
//! documented for PyTorch 2.x), to say what PyTorch eager would *reserve* for a graph.
//!
//! Rules modelled: every request is rounded up to a multiple of 512 B (at least 512 B);
//! requests up to 1 MiB come from the small pool, whose segments are 2 MiB; larger ones come
//! from the large pool, whose segments are 20 MiB for requests below 10 MiB and the request
//! rounded up to 2 MiB otherwise. A request takes the best-fitting free block of its pool
//! (smallest, then oldest segment, then lowest offset) and splits it when the remainder is at
//! least 512 B (small pool) or more than 1 MiB (large pool). A freed block merges with free
//! neighbours of its own segment only (never across segments). Segments stay cached: nothing
//! is returned to the device, so the reserved peak is the final reserved size.
//! Not modelled: streams, `max_split_size_mb`, expandable segments, garbage collection, and
//! the retry that frees cached segments on an out-of-memory error.
//! Cost: O(blocks) per request (a linear best-fit scan), fine for zoo graphs.

use super::profile::{ArenaEvent, PlanProfile};
use std::collections::BTreeMap;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
/// Request rounding (kMinBlockSize).
pub const MIN_BLOCK: u64 = 512;
/// Largest small-pool request (kSmallSize).
pub const SMALL_SIZE: u64 = MIB;
/// Small-pool segment (kSmallBuffer).
pub const SMALL_SEGMENT: u64 = 2 * MIB;
/// Large-pool segment for requests below [`MIN_LARGE_ALLOC`] (kLargeBuffer).
pub const LARGE_SEGMENT: u64 = 20 * MIB;
/// Requests from here on get a segment of their own size (kMinLargeAlloc).
pub const MIN_LARGE_ALLOC: u64 = 10 * MIB;
/// Rounding of such segments (kRoundLarge).
pub const ROUND_LARGE: u64 = 2 * MIB;

fn round_up(x: u64, m: u64) -> u64 {
    x.div_ceil(m).saturating_mul(m)
}

/// One cached segment: offset → (size, free).
#[derive(Debug, Clone)]
struct Segment {
    small: bool,
    blocks: BTreeMap<u64, (u64, bool)>,
}

/// The simulated allocator.
#[derive(Debug, Clone, Default)]
pub struct CachingAllocator {
    segments: Vec<Segment>,
    reserved: u64,
    allocated: u64,
    peak_allocated: u64,
}

/// A live allocation: segment index and offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    segment: usize,
    offset: u64,
}

impl CachingAllocator {
    /// An empty allocator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes held in segments (PyTorch's `memory_reserved`).
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Largest bytes handed out at once (after rounding; PyTorch's `max_memory_allocated`).
    pub fn peak_allocated(&self) -> u64 {
        self.peak_allocated
    }

    /// Serves a request of `size` bytes.
    pub fn alloc(&mut self, size: u64) -> Handle {
        let req = round_up(size.max(1), MIN_BLOCK);
        let small = req <= SMALL_SIZE;
        let mut best: Option<(u64, usize, u64)> = None;
        for (si, seg) in self.segments.iter().enumerate() {
            if seg.small != small {
                continue;
            }
            for (&off, &(bsize, free)) in &seg.blocks {
                if free && bsize >= req && best.is_none_or(|(b, _, _)| bsize < b) {
                    best = Some((bsize, si, off));
                }
            }
        }
        let (bsize, si, off) = match best {
            Some(b) => b,
            None => {
                let seg_size = if small {
                    SMALL_SEGMENT
                } else if req < MIN_LARGE_ALLOC {
                    LARGE_SEGMENT
                } else {
                    round_up(req, ROUND_LARGE)
                };
                self.reserved += seg_size;
                self.segments.push(Segment {
                    small,
                    blocks: BTreeMap::from([(0, (seg_size, true))]),
                });
                (seg_size, self.segments.len() - 1, 0)
            }
        };
        let rest = bsize - req;
        let split = if small {
            rest >= MIN_BLOCK
        } else {
            rest > SMALL_SIZE
        };
        let seg = &mut self.segments[si];
        let taken = if split {
            seg.blocks.insert(off + req, (rest, true));
            req
        } else {
            bsize
        };
        seg.blocks.insert(off, (taken, false));
        self.allocated += taken;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        Handle {
            segment: si,
            offset: off,
        }
    }

    /// Returns an allocation to its segment's cache, merging free neighbours.
    pub fn free(&mut self, h: Handle) {
        let Some(seg) = self.segments.get_mut(h.segment) else {
            return;
        };
        let Some(&(mut size, false)) = seg.blocks.get(&h.offset) else {
            return;
        };
        self.allocated -= size;
        let mut start = h.offset;
        if let Some((&next_off, &(next_size, true))) = seg.blocks.range(start + 1..).next() {
            if next_off == start + size {
                seg.blocks.remove(&next_off);
                size += next_size;
            }
        }
        if let Some((&prev_off, &(prev_size, true))) = seg.blocks.range(..start).next_back() {
            if prev_off + prev_size == start {
                seg.blocks.remove(&start);
                start = prev_off;
                size += prev_size;
            }
        }
        seg.blocks.insert(start, (size, true));
    }
}

/// Replays a plan's arena events (alloc at birth, free at death, in instruction order) through
/// the simulated allocator; returns the reserved peak (bytes).
pub fn simulate_reserved(profile: &PlanProfile) -> u64 {
    let mut a = CachingAllocator::new();
    let mut handles: Vec<Option<Handle>> = vec![None; profile.blocks.len()];
    for ev in &profile.events {
        match *ev {
            ArenaEvent::Alloc(i) => handles[i] = Some(a.alloc(profile.blocks[i].size)),
            ArenaEvent::Free(i) => {
                if let Some(h) = handles[i].take() {
                    a.free(h)
                }
            }
        }
    }
    a.reserved()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_byte_reserves_a_small_segment() {
        let mut a = CachingAllocator::new();
        a.alloc(1);
        assert_eq!(a.reserved(), 2 * MIB);
        assert_eq!(a.peak_allocated(), 512);
    }

    #[test]
    fn small_requests_share_a_segment_until_it_is_full() {
        let mut a = CachingAllocator::new();
        for _ in 0..3 {
            a.alloc(600 * KIB);
        }
        assert_eq!(a.reserved(), 2 * MIB);
        a.alloc(600 * KIB);
        assert_eq!(a.reserved(), 4 * MIB);
    }

    #[test]
    fn large_requests_below_10_mib_get_20_mib_segments_and_larger_ones_their_rounded_size() {
        let mut a = CachingAllocator::new();
        a.alloc(MIB + 1);
        assert_eq!(a.reserved(), 20 * MIB);
        // The 20 MiB segment has 19 MiB - 512 B free: an 11 MiB request fits there.
        a.alloc(11 * MIB);
        assert_eq!(a.reserved(), 20 * MIB);
        a.alloc(11 * MIB);
        assert_eq!(a.reserved(), 32 * MIB);
    }

    #[test]
    fn a_freed_block_is_split_for_a_smaller_request() {
        let mut a = CachingAllocator::new();
        let h = a.alloc(15 * MIB);
        assert_eq!(a.reserved(), 16 * MIB);
        a.free(h);
        a.alloc(12 * MIB);
        a.alloc(4 * MIB);
        assert_eq!(a.reserved(), 16 * MIB);
        assert_eq!(a.peak_allocated(), 16 * MIB);
    }

    #[test]
    fn a_large_remainder_of_at_most_1_mib_is_not_split() {
        let mut a = CachingAllocator::new();
        let h = a.alloc(12 * MIB);
        a.free(h);
        let _ = a.alloc(11 * MIB + 512);
        // 12 MiB block, remainder < 1 MiB: the whole block is handed out.
        assert_eq!(a.peak_allocated(), 12 * MIB);
        a.alloc(2 * MIB);
        assert_eq!(a.reserved(), 32 * MIB);
    }

    #[test]
    fn free_blocks_of_different_segments_never_merge() {
        let mut a = CachingAllocator::new();
        let x = a.alloc(11 * MIB);
        let y = a.alloc(11 * MIB);
        assert_eq!(a.reserved(), 24 * MIB);
        a.free(x);
        a.free(y);
        a.alloc(20 * MIB);
        assert_eq!(a.reserved(), 44 * MIB);
    }

    #[test]
    fn neighbours_in_a_segment_merge_when_freed() {
        let mut a = CachingAllocator::new();
        let x = a.alloc(11 * MIB);
        let y = a.alloc(11 * MIB);
        let z = a.alloc(11 * MIB);
        let _ = (x, z);
        a.free(y);
        a.free(x);
        // 12 MiB segments each, one per request: x and y are in different segments.
        a.alloc(12 * MIB);
        assert_eq!(a.reserved(), 36 * MIB);
        let mut b = CachingAllocator::new();
        let p = b.alloc(MIB + 1);
        let q = b.alloc(MIB + 1);
        b.free(p);
        b.free(q);
        // p and q were split from one 20 MiB segment; merged back it serves 19 MiB.
        b.alloc(19 * MIB);
        assert_eq!(b.reserved(), 20 * MIB);
    }
}
