//! Canonical dive: the first path of the canonical search, without backtracking, in
//! `O((n + r) log n)` for instances far too large for the search itself.
//!
//! Idea (Moffitt, "MiniMalloc", ASPLOS 2023, §3): the canonical search places, at every node,
//! a buffer at the lowest offset any unplaced buffer can take (its *level*), choosing among
//! equals by a preorder rank. Followed without pruning or backtracking that path is a
//! constructive heuristic that never leaves a usable gap below the skyline. It needs no
//! overlap lists (iopddl_S_1 has 43M overlapping pairs): the lowest offset of a buffer is the
//! highest *floor* over its lifetime, kept in a segment tree over the elementary time segments
//! with range-max updates and queries, and a heap holds the buffers by (stale) lowest offset and
//! rank; a popped buffer whose offset rose since it was pushed goes back with the new one
//! (offsets only rise, so a stale key is always a lower bound). `r` counts those re-pushes,
//! bounded by the caller.
//!
//! Complexity: `O((n + r) log n)` time, `O(n)` memory.

use crate::limits::LimitsClock;
use crate::problem::{align_up, Placement, PlacementProblem};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A preorder for the dive (all descending, ties by index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiveOrder {
    /// Area (width × size), then width, then size.
    AreaWidthSize,
    /// Size, then area, then width.
    SizeAreaWidth,
}

/// Max over ranges of `u64`, with range "raise to at least" updates; bottom-up, no recursion.
#[derive(Debug)]
struct MaxTree {
    size: usize,
    /// Max of the subtree, tags included.
    max: Vec<u64>,
    /// A value every leaf below is raised to.
    tag: Vec<u64>,
}

impl MaxTree {
    fn new(n: usize) -> Self {
        let size = n.max(1).next_power_of_two();
        MaxTree {
            size,
            max: vec![0; 2 * size],
            tag: vec![0; 2 * size],
        }
    }

    /// Raises every leaf of `[l, r)` to at least `v`.
    fn raise(&mut self, l: usize, r: usize, v: u64) {
        if l >= r {
            return;
        }
        let (mut a, mut b) = (l + self.size, r + self.size);
        let (first, last) = (a, b - 1);
        while a < b {
            if a & 1 == 1 {
                self.max[a] = self.max[a].max(v);
                self.tag[a] = self.tag[a].max(v);
                a += 1;
            }
            if b & 1 == 1 {
                b -= 1;
                self.max[b] = self.max[b].max(v);
                self.tag[b] = self.tag[b].max(v);
            }
            a >>= 1;
            b >>= 1;
        }
        for leaf in [first, last] {
            let mut p = leaf >> 1;
            while p >= 1 {
                self.max[p] = self.max[2 * p].max(self.max[2 * p + 1]).max(self.tag[p]);
                p >>= 1;
            }
        }
    }

    /// The max over `[l, r)` (0 when empty).
    fn max_of(&self, l: usize, r: usize) -> u64 {
        if l >= r {
            return 0;
        }
        let mut res = 0u64;
        let (mut a, mut b) = (l + self.size, r + self.size);
        let (first, last) = (a, b - 1);
        while a < b {
            if a & 1 == 1 {
                res = res.max(self.max[a]);
                a += 1;
            }
            if b & 1 == 1 {
                b -= 1;
                res = res.max(self.max[b]);
            }
            a >>= 1;
            b >>= 1;
        }
        // Tags above the boundary leaves cover leaves of the range.
        for leaf in [first, last] {
            let mut p = leaf >> 1;
            while p >= 1 {
                res = res.max(self.tag[p]);
                p >>= 1;
            }
        }
        res
    }
}

/// Places every buffer of `problem` along the canonical dive in `order`; `None` when more than
/// `max_pushes` re-pushes are needed or `clock` runs out. The placement is valid (checked by
/// the caller).
pub(crate) fn dive(
    problem: &PlacementProblem,
    order: DiveOrder,
    max_pushes: u64,
    clock: &LimitsClock,
) -> Option<Placement> {
    let bufs = &problem.buffers;
    let n = bufs.len();
    let times = crate::problem::time_points(bufs);
    let at = |t: u64| times.partition_point(|&x| x < t);
    let key = |i: usize| -> (Reverse<u128>, Reverse<u128>, Reverse<u128>, usize) {
        let b = &bufs[i];
        let (w, s) = (u128::from(b.lifetime.len()), u128::from(b.size));
        match order {
            DiveOrder::AreaWidthSize => (Reverse(w * s), Reverse(w), Reverse(s), i),
            DiveOrder::SizeAreaWidth => (Reverse(s), Reverse(w * s), Reverse(w), i),
        }
    };
    let mut by_rank: Vec<usize> = (0..n).collect();
    by_rank.sort_by_cached_key(|&i| key(i));
    let mut rank = vec![0u32; n];
    for (r, &i) in by_rank.iter().enumerate() {
        rank[i] = r as u32;
    }
    let mut tree = MaxTree::new(times.len());
    let mut heap: BinaryHeap<Reverse<(u64, u32, u32)>> =
        (0..n).map(|i| Reverse((0, rank[i], i as u32))).collect();
    let mut offsets = vec![u64::MAX; n];
    let mut pushes = 0u64;
    let mut pops = 0u64;
    while let Some(Reverse((stale, r, i))) = heap.pop() {
        pops += 1;
        if pops % 4096 == 0 && clock.exhausted().is_some() {
            return None;
        }
        let b = &bufs[i as usize];
        let (lo, hi) = (at(b.lifetime.start), at(b.lifetime.end));
        let x = align_up(tree.max_of(lo, hi), b.alignment)?;
        if x > stale {
            pushes += 1;
            if pushes > max_pushes {
                return None;
            }
            heap.push(Reverse((x, r, i)));
            continue;
        }
        offsets[i as usize] = x;
        tree.raise(lo, hi, x.checked_add(b.size)?);
    }
    Some(Placement { offsets })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;
    use crate::problem::{Buffer, Lifetime};

    #[test]
    fn the_max_tree_raises_and_reads_ranges() {
        let mut t = MaxTree::new(10);
        t.raise(2, 7, 5);
        t.raise(4, 5, 9);
        assert_eq!(t.max_of(0, 2), 0);
        assert_eq!(t.max_of(0, 3), 5);
        assert_eq!(t.max_of(5, 10), 5);
        assert_eq!(t.max_of(3, 6), 9);
        assert_eq!(t.max_of(7, 10), 0);
    }

    #[test]
    fn the_dive_stacks_by_level_and_rank_and_respects_alignment() {
        let buf = |s, e, size, alignment| Buffer {
            lifetime: Lifetime::new(s, e),
            size,
            alignment,
        };
        // Area order: 0 (area 12), then 1 (area 8) on top of it, then 2 next to 0's end.
        let p = PlacementProblem::new(vec![buf(0, 4, 3, 1), buf(2, 6, 2, 4), buf(4, 6, 3, 1)]);
        let clock = Limits::UNLIMITED.start();
        let pl = dive(&p, DiveOrder::AreaWidthSize, 100, &clock).unwrap();
        assert_eq!(pl.offsets, vec![0, 4, 0]);
        assert_eq!(p.check(&pl), Ok(6));
    }
}
