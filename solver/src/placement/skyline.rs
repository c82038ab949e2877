//! Skyline best fit: fill the lowest free spot of the arena with the buffer that fits it best
//! (Burke, Kendall & Whitwell 2004, "A new placement heuristic for the orthogonal stock-cutting
//! problem", Operations Research 52(4), adapted to buffers whose time span is fixed, as in
//! Sekiyama et al. 2018, "Profile-guided memory optimization for deep neural networks").
//!
//! The skyline is the top of the placed buffers over time: a list of segments (time range,
//! height). Each step takes the lowest segment (ties: the earliest) and, among the unplaced
//! buffers whose lifetime lies inside its time range, places the best one by the rule of the
//! pass at the segment's height (aligned up), which splits the segment. When no buffer fits
//! the segment, it is wasted: it is raised to its lower neighbour and merged with it. Every
//! buffer thus rests on the skyline and no gap is left below a placed buffer that a later one
//! could have used, which packs the nested lifetimes of training graphs (a forward activation
//! lives until its backward use) far better than decreasing-size best fit. The pass runs with
//! four rules (the best buffer is the one that lives longest into the future, the largest
//! area, the largest, the longest-lived; ties: larger size, lower index) and the lowest peak
//! is kept (ties: the earlier rule).
//!
//! Cost per pass: `O(n log n)` for sorting and the skyline (segments in arrays indexed by
//! their start point, a min-heap of (height, start) with lazy deletion), plus one query per
//! step in a segment tree over the buffers sorted by start, which keeps per node the earliest
//! end and the best rule rank among the unplaced buffers below it and is searched branch and
//! bound (worst case `O(n)` a query, typically `O(log² n)`). There are at most `2n` steps
//! (each places a buffer or merges two segments). The passes share the time axis; a node
//! budget of `k` allows `max(k, 1)` passes.

use super::fit::{peak_of, place_in_order};
use super::greedy_by_size::size_order;
use super::Placer;
use crate::limits::Limits;
use crate::problem::{align_up, Buffer, Placement, PlacementError, PlacementProblem};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Skyline best-fit placer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Skyline;

/// Which unplaced buffer fits a segment best.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Latest end.
    End,
    /// Largest size × lifetime length.
    Area,
    /// Largest size.
    Size,
    /// Longest lifetime.
    Length,
}

/// The rules of the passes, in tie-breaking order.
const RULES: [Rule; 4] = [Rule::End, Rule::Area, Rule::Size, Rule::Length];

impl Rule {
    /// The sort key of a buffer, larger is better (ties: larger size; then lower index).
    fn key(self, b: &Buffer) -> (u128, u64) {
        let len = b.lifetime.len();
        let primary = match self {
            Rule::End => u128::from(b.lifetime.end),
            Rule::Area => u128::from(b.size) * u128::from(len),
            Rule::Size => u128::from(b.size),
            Rule::Length => u128::from(len),
        };
        (primary, b.size)
    }
}

/// Unplaced buffers sorted by start time, in a segment tree that finds the best-ranked one
/// whose lifetime lies in a time range.
struct Candidates {
    /// Leaves (a power of two); leaf `k` holds the `k`-th buffer by start.
    n: usize,
    /// Per node: the earliest end (time-point index) among unplaced buffers below it.
    min_end: Vec<usize>,
    /// Per node: the best rank among unplaced buffers below it (0: none).
    max_rank: Vec<usize>,
    /// Buffer index of each leaf.
    buffer: Vec<usize>,
    /// Start time-point index of each leaf, non-decreasing.
    start: Vec<usize>,
}

impl Candidates {
    /// The tree over `by_start` (buffer indices sorted by start), with `ends[i]` the end
    /// time-point index of buffer `i` and `rank[i] >= 1` its rank (higher is better).
    fn new(by_start: &[usize], starts: &[usize], ends: &[usize], rank: &[usize]) -> Self {
        let n = by_start.len().next_power_of_two().max(1);
        let mut min_end = vec![usize::MAX; 2 * n];
        let mut max_rank = vec![0usize; 2 * n];
        for (k, &i) in by_start.iter().enumerate() {
            min_end[n + k] = ends[i];
            max_rank[n + k] = rank[i];
        }
        for x in (1..n).rev() {
            min_end[x] = min_end[2 * x].min(min_end[2 * x + 1]);
            max_rank[x] = max_rank[2 * x].max(max_rank[2 * x + 1]);
        }
        Candidates {
            n,
            min_end,
            max_rank,
            buffer: by_start.to_vec(),
            start: by_start.iter().map(|&i| starts[i]).collect(),
        }
    }

    /// Removes leaf `k`.
    fn remove(&mut self, k: usize) {
        let mut x = self.n + k;
        self.min_end[x] = usize::MAX;
        self.max_rank[x] = 0;
        while x > 1 {
            x /= 2;
            self.min_end[x] = self.min_end[2 * x].min(self.min_end[2 * x + 1]);
            self.max_rank[x] = self.max_rank[2 * x].max(self.max_rank[2 * x + 1]);
        }
    }

    /// The leaf of the best-ranked unplaced buffer with `s <= start` and `end <= e`.
    fn best(&self, s: usize, e: usize) -> Option<usize> {
        let mut q = Query {
            lo: self.start.partition_point(|&t| t < s),
            hi: self.start.partition_point(|&t| t < e),
            end: e,
            found: None,
        };
        self.search(1, 0, self.n, &mut q);
        q.found.map(|(_, k)| k)
    }

    /// Branch and bound below node `x`, which covers leaves `[nl, nr)`.
    fn search(&self, x: usize, nl: usize, nr: usize, q: &mut Query) {
        if nr <= q.lo || q.hi <= nl || self.min_end[x] > q.end {
            return;
        }
        if q.found.is_some_and(|(r, _)| self.max_rank[x] <= r) {
            return;
        }
        if nr - nl == 1 {
            q.found = Some((self.max_rank[x], nl));
            return;
        }
        let mid = (nl + nr) / 2;
        let (l, r) = (2 * x, 2 * x + 1);
        if self.max_rank[l] >= self.max_rank[r] {
            self.search(l, nl, mid, q);
            self.search(r, mid, nr, q);
        } else {
            self.search(r, mid, nr, q);
            self.search(l, nl, mid, q);
        }
    }
}

/// A candidate query: leaves `[lo, hi)` (buffers starting in the segment), ending by `end`;
/// the best `(rank, leaf)` found so far.
struct Query {
    lo: usize,
    hi: usize,
    end: usize,
    found: Option<(usize, usize)>,
}

/// No segment.
const NONE: usize = usize::MAX;

/// The skyline: segments `[s, e)` of time-point indices with their heights, stored at their
/// start point, and a min-heap of (height, start) with lazy deletion.
struct Sky {
    /// `end[s]`: end of the segment starting at `s`, or [`NONE`].
    end: Vec<usize>,
    /// `height[s]`: height of the segment starting at `s` (when there is one).
    height: Vec<u64>,
    /// `start_of[e]`: start of the segment ending at `e` (when `end[start_of[e]] == e`).
    start_of: Vec<usize>,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
}

impl Sky {
    /// One segment `[0, points - 1)` at height 0 (at least `[0, 1)`).
    fn new(points: usize) -> Self {
        let points = points.max(2);
        let mut sky = Sky {
            end: vec![NONE; points],
            height: vec![0; points],
            start_of: vec![NONE; points],
            heap: BinaryHeap::new(),
        };
        sky.insert(0, points - 1, 0);
        sky
    }

    /// The lowest segment (ties: the earliest) as `(start, end, height)`.
    fn lowest(&mut self) -> Option<(usize, usize, u64)> {
        while let Some(&Reverse((h, s))) = self.heap.peek() {
            if self.end[s] != NONE && self.height[s] == h {
                return Some((s, self.end[s], h));
            }
            self.heap.pop();
        }
        None
    }

    fn insert(&mut self, s: usize, e: usize, h: u64) {
        self.end[s] = e;
        self.height[s] = h;
        self.start_of[e] = s;
        self.heap.push(Reverse((h, s)));
    }

    fn remove(&mut self, s: usize) {
        self.end[s] = NONE;
    }

    /// The segment ending at `s`, as `(start, height)`.
    fn left_of(&self, s: usize) -> Option<(usize, u64)> {
        let ls = self.start_of[s];
        (ls != NONE && self.end[ls] == s).then(|| (ls, self.height[ls]))
    }

    /// The segment starting at `e`, as `(end, height)`.
    fn right_of(&self, e: usize) -> Option<(usize, u64)> {
        let re = self.end[e];
        (re != NONE).then(|| (re, self.height[e]))
    }

    /// Inserts `[s, e)` at height `h`, merged with neighbours of the same height.
    fn insert_merged(&mut self, mut s: usize, mut e: usize, h: u64) {
        if let Some((ls, lh)) = self.left_of(s) {
            if lh == h {
                self.remove(ls);
                s = ls;
            }
        }
        if let Some((re, rh)) = self.right_of(e) {
            if rh == h {
                self.remove(e);
                e = re;
            }
        }
        self.insert(s, e, h);
    }
}

/// What the passes share: lifetimes as time-point indices and the buffers by start.
struct Axis {
    points: usize,
    starts: Vec<usize>,
    ends: Vec<usize>,
    by_start: Vec<usize>,
}

impl Axis {
    fn new(buffers: &[Buffer]) -> Self {
        let points = crate::problem::time_points(buffers);
        let at = |t: u64| points.partition_point(|&p| p < t);
        let starts: Vec<usize> = buffers.iter().map(|b| at(b.lifetime.start)).collect();
        let ends: Vec<usize> = buffers.iter().map(|b| at(b.lifetime.end)).collect();
        let mut by_start: Vec<usize> = (0..buffers.len()).collect();
        by_start.sort_unstable_by_key(|&i| (starts[i], i));
        Axis {
            points: points.len(),
            starts,
            ends,
            by_start,
        }
    }
}

/// One skyline pass with `rule`; `None` when an offset would overflow.
fn pass(buffers: &[Buffer], axis: &Axis, rule: Rule) -> Option<Vec<u64>> {
    let n = buffers.len();
    let (starts, ends) = (&axis.starts, &axis.ends);
    // Rank n for the best buffer down to 1 for the worst.
    let mut by_key: Vec<usize> = (0..n).collect();
    by_key.sort_unstable_by_key(|&i| (Reverse(rule.key(&buffers[i])), i));
    let mut rank = vec![0usize; n];
    for (k, &i) in by_key.iter().enumerate() {
        rank[i] = n - k;
    }
    let mut cands = Candidates::new(&axis.by_start, starts, ends, &rank);
    let mut sky = Sky::new(axis.points);
    let mut offsets = vec![0u64; n];
    let mut left = n;
    while left > 0 {
        let (s, e, h) = sky.lowest()?;
        if let Some(k) = cands.best(s, e) {
            let i = cands.buffer[k];
            let b = &buffers[i];
            let off = align_up(h, b.alignment)?;
            let top = off.checked_add(b.size)?;
            offsets[i] = off;
            cands.remove(k);
            left -= 1;
            sky.remove(s);
            if starts[i] > s {
                sky.insert(s, starts[i], h);
            }
            if ends[i] < e {
                sky.insert(ends[i], e, h);
            }
            sky.insert_merged(starts[i], ends[i], top);
        } else {
            // Nothing fits: raise the segment to its lower neighbour.
            let lh = sky.left_of(s).map(|(_, lh)| lh);
            let rh = sky.right_of(e).map(|(_, rh)| rh);
            let to = match (lh, rh) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                // A lone segment holds every unplaced buffer: unreachable.
                (None, None) => return None,
            };
            sky.remove(s);
            sky.insert_merged(s, e, to);
        }
    }
    Some(offsets)
}

impl Placer for Skyline {
    fn name(&self) -> &'static str {
        "skyline"
    }

    fn place(
        &self,
        problem: &PlacementProblem,
        limits: &Limits,
    ) -> Result<Placement, PlacementError> {
        let buffers = &problem.buffers;
        let mut clock = limits.start();
        let axis = Axis::new(buffers);
        let mut best: Option<(u64, Placement)> = None;
        for (k, &rule) in RULES.iter().enumerate() {
            if k > 0 && clock.tick().is_some() {
                break;
            }
            let Some(offsets) = pass(buffers, &axis, rule) else {
                continue;
            };
            let placement = Placement { offsets };
            let peak = peak_of(buffers, &placement);
            if best.as_ref().is_none_or(|(b, _)| peak < *b) {
                best = Some((peak, placement));
            }
        }
        match best {
            Some((_, placement)) => Ok(placement),
            // Every pass overflowed: greedy by size reports which buffer.
            None => place_in_order(problem, &size_order(problem)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Lifetime;

    use crate::problem::fixtures::buf;
    /// Greedy by size peaks at 21 here (see `greedy_by_conflicts`); LOAD is 20.
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
    fn the_lowest_segment_takes_the_buffer_that_lives_longest_and_wasted_ones_rise() {
        // Sky [1,6)@0: 4 (ends last) at 0. [1,3)@0: 1 at 0. [3,6)@8: 2 at 8. [5,6)@8 holds
        // nothing: raised to 12. [1,3)@9: 3 at 9. [1,3)@11 holds nothing: raised to 12.
        // [1,6)@12: 0 at 12, peak 20 = LOAD.
        let p = stranding();
        let axis = Axis::new(&p.buffers);
        assert_eq!(
            pass(&p.buffers, &axis, Rule::End),
            Some(vec![12, 0, 8, 9, 0])
        );
        let pl = Skyline.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(p.check(&pl), Ok(20));
        assert_eq!(p.load(), 20);
    }

    #[test]
    fn offsets_are_aligned_up_from_the_skyline() {
        let p = PlacementProblem::new(vec![
            buf(0, 2, 10),
            Buffer {
                lifetime: Lifetime::new(0, 2),
                size: 3,
                alignment: 64,
            },
        ]);
        let pl = Skyline.place(&p, &Limits::UNLIMITED).unwrap();
        assert_eq!(pl.offsets, vec![0, 64]);
        assert_eq!(p.check(&pl), Ok(67));
    }

    #[test]
    fn the_candidate_tree_finds_the_best_buffer_inside_a_range() {
        // Buffers by start: 0 [0,4) rank 3, 1 [1,2) rank 1, 2 [2,3) rank 2 (time points).
        let starts = [0, 1, 2];
        let ends = [4, 2, 3];
        let rank = [3, 1, 2];
        let mut c = Candidates::new(&[0, 1, 2], &starts, &ends, &rank);
        assert_eq!(c.best(0, 4), Some(0));
        assert_eq!(c.best(1, 3), Some(2));
        assert_eq!(c.best(1, 2), Some(1));
        c.remove(2);
        assert_eq!(c.best(1, 3), Some(1));
        assert_eq!(c.best(2, 3), None);
    }
}
