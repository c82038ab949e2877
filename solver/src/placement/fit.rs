//! Shared machinery of the greedy placers (not a placer itself): a compressed time axis, an
//! occupancy index answering "which byte ranges are taken by placed buffers alive at some
//! step of `[start, end)`" fast, and the gap searches (best fit / lowest fit) over that answer.
//!
//! The index is a segment tree over the elementary time segments between lifetime boundaries
//! (built bottom-up, no recursion). Each node keeps two sets of merged byte ranges:
//! `own` (buffers whose lifetime covers the node's whole time range) and `agg` (buffers whose
//! lifetime meets the node's range and is stored at the node, below it, or straddles its edge).
//! A buffer is written into `O(log T)` nodes (its canonical nodes and the two boundary paths);
//! a query reads `agg` of the query's canonical nodes and `own` of the nodes on its two
//! boundary paths, which together cover exactly the placed buffers alive during the query.
//! Because the sets are merged, their size is the number of separate byte runs, not the number
//! of buffers: on real traces a query reads a few dozen ranges where a scan of the conflicting
//! buffers would read thousands (TFLite's and XLA's best-fit scan all of them, `O(n²)`).
//! Insertion and query cost `O(log T · k)` for `k` ranges per node (`T` = segments).
//! The index does not support removal; improvement passes rebuild it.

use crate::problem::{align_up, Buffer, Lifetime, Placement, PlacementError, PlacementProblem};

/// How a gap is chosen among those a buffer fits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// The smallest gap the buffer fits in (ties: lowest offset); on top when none fits.
    Best,
    /// The lowest offset the buffer fits at.
    Lowest,
}

/// The sorted distinct lifetime boundaries of a problem: maps lifetimes to ranges of
/// elementary segments `[points[i], points[i + 1])`.
#[derive(Debug, Clone)]
pub struct TimeAxis {
    points: Vec<u64>,
}

impl TimeAxis {
    /// The axis of all lifetimes of `buffers`.
    pub fn new(buffers: &[Buffer]) -> Self {
        let mut points: Vec<u64> = buffers
            .iter()
            .flat_map(|b| [b.lifetime.start, b.lifetime.end])
            .collect();
        points.sort_unstable();
        points.dedup();
        TimeAxis { points }
    }

    /// Number of elementary segments (at least 1, so that an index is never empty).
    pub fn segments(&self) -> usize {
        self.points.len().saturating_sub(1).max(1)
    }

    /// The segments `[a, b)` that meet `lt` (never empty; exact when `lt`'s boundaries are
    /// on the axis).
    pub fn range(&self, lt: Lifetime) -> (usize, usize) {
        let last = self.segments() - 1;
        let a = self.points.partition_point(|&p| p <= lt.start).saturating_sub(1).min(last);
        let b = self.points.partition_point(|&p| p < lt.end);
        (a, b.clamp(a + 1, last + 1))
    }
}

/// Inserts `[lo, hi)` into a sorted list of disjoint, non-touching ranges, merging.
fn merge_insert(set: &mut Vec<(u64, u64)>, lo: u64, hi: u64) {
    // First range that ends at or after `lo` (touching ranges merge).
    let i = set.partition_point(|&(_, h)| h < lo);
    // First range that starts after `hi`.
    let j = set.partition_point(|&(l, _)| l <= hi);
    if i == j {
        set.insert(i, (lo, hi));
        return;
    }
    let new_lo = set[i].0.min(lo);
    let new_hi = set[j - 1].1.max(hi);
    set[i] = (new_lo, new_hi);
    set.drain(i + 1..j);
}

/// Occupied byte ranges of placed buffers over time (see the module doc).
#[derive(Debug, Clone)]
pub struct Occupancy {
    axis: TimeAxis,
    /// Leaves (a power of two ≥ the number of segments).
    n: usize,
    /// Height of the level whose `own` sets also hold the buffers of all their ancestors.
    flat: u32,
    own: Vec<Vec<(u64, u64)>>,
    agg: Vec<Vec<(u64, u64)>>,
    /// Highest end of any placed buffer.
    peak: u64,
    /// Query scratch: the gathered ranges, run bounds, and the merge's second buffers.
    taken: Vec<(u64, u64)>,
    bounds: Vec<usize>,
    spare: Vec<(u64, u64)>,
    spare_bounds: Vec<usize>,
}

impl Occupancy {
    /// An empty index for the lifetimes of `buffers`.
    pub fn new(buffers: &[Buffer]) -> Self {
        let axis = TimeAxis::new(buffers);
        let n = axis.segments().next_power_of_two();
        let flat = std::env::var("FLAT").ok().and_then(|v| v.parse().ok()).unwrap_or(7u32).min(n.trailing_zeros());
        Occupancy {
            axis,
            n,
            flat,
            own: vec![Vec::new(); 2 * n],
            agg: vec![Vec::new(); 2 * n],
            peak: 0,
            taken: Vec::new(),
            bounds: Vec::new(),
            spare: Vec::new(),
            spare_bounds: Vec::new(),
        }
    }

    /// Highest `offset + size` placed so far.
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Records that bytes `[lo, hi)` are taken during `lt`.
    pub fn insert(&mut self, lt: Lifetime, lo: u64, hi: u64) {
        if hi <= lo {
            return;
        }
        self.peak = self.peak.max(hi);
        let (a, b) = self.axis.range(lt);
        let (mut l, mut r) = (a + self.n, b + self.n);
        let mut height = 0u32;
        while l < r {
            if l & 1 == 1 {
                self.add_own(l, height, lo, hi);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                self.add_own(r, height, lo, hi);
            }
            l >>= 1;
            r >>= 1;
            height += 1;
        }
        // Boundary paths: every ancestor of a canonical node lies on one of them.
        let (mut x, mut y) = (a + self.n, b - 1 + self.n);
        while x != y {
            merge_insert(&mut self.agg[x], lo, hi);
            merge_insert(&mut self.agg[y], lo, hi);
            x >>= 1;
            y >>= 1;
        }
        while x >= 1 {
            merge_insert(&mut self.agg[x], lo, hi);
            x >>= 1;
        }
    }

    /// Stores a range at canonical node `c` of the given height, and copies it down into the
    /// `own` sets of `c`'s descendants at height `flat` when `c` is above that height.
    fn add_own(&mut self, c: usize, height: u32, lo: u64, hi: u64) {
        merge_insert(&mut self.own[c], lo, hi);
        merge_insert(&mut self.agg[c], lo, hi);
        if height > self.flat {
            let shift = height - self.flat;
            for d in (c << shift)..((c + 1) << shift) {
                merge_insert(&mut self.own[d], lo, hi);
            }
        }
    }

    /// Appends to `out` the byte ranges taken at some step of `lt`, as a concatenation of
    /// sorted disjoint runs; `bounds` receives the end index in `out` of each run.
    pub fn collect(&self, lt: Lifetime, out: &mut Vec<(u64, u64)>, bounds: &mut Vec<usize>) {
        let mut push = |set: &Vec<(u64, u64)>| {
            if !set.is_empty() {
                out.extend_from_slice(set);
                bounds.push(out.len());
            }
        };
        let (a, b) = self.axis.range(lt);
        let (mut l, mut r) = (a + self.n, b + self.n);
        let mut height = 0u32;
        let mut top = 0u32;
        while l < r {
            if l & 1 == 1 {
                push(&self.agg[l]);
                top = height;
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                push(&self.agg[r]);
                top = height;
            }
            l >>= 1;
            r >>= 1;
            height += 1;
        }
        // Boundary paths: up to height `flat` (whose sets hold everything above) when every
        // canonical node is at or below it, else up to the root.
        let stop = if top <= self.flat { self.flat } else { u32::MAX };
        let (mut x, mut y) = (a + self.n, b - 1 + self.n);
        let mut height = 0u32;
        while x != y && height <= stop {
            push(&self.own[x]);
            push(&self.own[y]);
            x >>= 1;
            y >>= 1;
            height += 1;
        }
        while x >= 1 && height <= stop {
            push(&self.own[x]);
            x >>= 1;
            height += 1;
        }
    }

    /// The byte ranges taken at some step of `lt`, sorted, disjoint and not touching.
    pub fn gather(&mut self, lt: Lifetime) -> &[(u64, u64)] {
        let mut runs = std::mem::take(&mut self.taken);
        let mut bounds = std::mem::take(&mut self.bounds);
        runs.clear();
        bounds.clear();
        self.collect(lt, &mut runs, &mut bounds);
        union_runs(&mut runs, &mut bounds, &mut self.spare, &mut self.spare_bounds);
        self.taken = runs;
        self.bounds = bounds;
        &self.taken
    }

    /// The offset where a buffer of `size` bytes and `alignment` alive during `lt` goes
    /// under `fit`; `None` when `offset + size` would overflow.
    pub fn find(&mut self, lt: Lifetime, size: u64, alignment: u64, fit: Fit) -> Option<u64> {
        best_gap(self.gather(lt), size, alignment, fit)
    }
}

/// Appends `[lo, hi)` to the run of `dst` that starts at index `base`, joining it with the
/// run's last range when they overlap or touch (ranges come in ascending `lo`).
fn push_range(dst: &mut Vec<(u64, u64)>, base: usize, lo: u64, hi: u64) {
    if dst.len() > base {
        if let Some(last) = dst.last_mut() {
            if lo <= last.1 {
                last.1 = last.1.max(hi);
                return;
            }
        }
    }
    dst.push((lo, hi));
}

/// Unions the sorted disjoint runs `runs[bounds[k-1]..bounds[k]]` into one sorted disjoint
/// list left in `runs` (bounds end as `[runs.len()]`), by rounds of pairwise linear merges;
/// `spare` and `spare_bounds` are scratch.
fn union_runs(
    runs: &mut Vec<(u64, u64)>,
    bounds: &mut Vec<usize>,
    spare: &mut Vec<(u64, u64)>,
    spare_bounds: &mut Vec<usize>,
) {
    while bounds.len() > 1 {
        spare.clear();
        spare_bounds.clear();
        let mut start = 0usize;
        let mut k = 0usize;
        while k < bounds.len() {
            let mid = bounds[k];
            let base = spare.len();
            if k + 1 < bounds.len() {
                let end = bounds[k + 1];
                let (mut i, mut j) = (start, mid);
                while i < mid || j < end {
                    let take_left = j >= end || (i < mid && runs[i].0 <= runs[j].0);
                    let (lo, hi) = if take_left {
                        i += 1;
                        runs[i - 1]
                    } else {
                        j += 1;
                        runs[j - 1]
                    };
                    push_range(spare, base, lo, hi);
                }
                start = end;
            } else {
                spare.extend_from_slice(&runs[start..mid]);
                start = mid;
            }
            spare_bounds.push(spare.len());
            k += 2;
        }
        std::mem::swap(runs, spare);
        std::mem::swap(bounds, spare_bounds);
    }
}

/// Sorts ranges and merges overlapping or touching ones, in place.
pub fn normalize(ranges: &mut Vec<(u64, u64)>) {
    // The input is a concatenation of sorted runs: the stable sort merges runs.
    ranges.sort_by_key(|r| r.0);
    let mut w = 0usize;
    for i in 0..ranges.len() {
        let (lo, hi) = ranges[i];
        if w > 0 && lo <= ranges[w - 1].1 {
            ranges[w - 1].1 = ranges[w - 1].1.max(hi);
        } else {
            ranges[w] = (lo, hi);
            w += 1;
        }
    }
    ranges.truncate(w);
}

/// The offset chosen under `fit` for `size` bytes at `alignment` among the gaps left by
/// `taken` (sorted, disjoint); the space above the last range is an unbounded gap used when
/// no bounded gap fits. `None` when `offset + size` would overflow.
pub fn best_gap(taken: &[(u64, u64)], size: u64, alignment: u64, fit: Fit) -> Option<u64> {
    let mut best: Option<(u64, u64)> = None; // (gap length, offset)
    let mut prev_end = 0u64;
    for &(lo, hi) in taken {
        if lo > prev_end {
            if let Some(off) = align_up(prev_end, alignment) {
                if off.checked_add(size).is_some_and(|end| end <= lo) {
                    let gap = lo - prev_end;
                    match fit {
                        Fit::Lowest => return Some(off),
                        Fit::Best => {
                            if best.is_none_or(|(g, _)| gap < g) {
                                best = Some((gap, off));
                            }
                        }
                    }
                }
            }
        }
        prev_end = prev_end.max(hi);
    }
    if let Some((_, off)) = best {
        return Some(off);
    }
    let off = align_up(prev_end, alignment)?;
    off.checked_add(size).map(|_| off)
}

/// Places the buffers one by one in `order` (a permutation of the indices, or a prefix:
/// buffers not listed keep offset 0 and are not recorded) with the gap choice `fit`, against
/// all previously placed buffers alive at the same time.
pub fn place_in_order(
    problem: &PlacementProblem,
    order: &[usize],
    fit: Fit,
) -> Result<Placement, PlacementError> {
    let buffers = &problem.buffers;
    let mut occ = Occupancy::new(buffers);
    let mut offsets = vec![0u64; buffers.len()];
    for &i in order {
        let b = &buffers[i];
        let off = occ
            .find(b.lifetime, b.size, b.alignment, fit)
            .ok_or(PlacementError::Overflow { index: i })?;
        let end = off
            .checked_add(b.size)
            .ok_or(PlacementError::Overflow { index: i })?;
        occ.insert(b.lifetime, off, end);
        offsets[i] = off;
    }
    Ok(Placement { offsets })
}

/// The peak (max `offset + size`) of a placement, saturating.
pub fn peak_of(buffers: &[Buffer], placement: &Placement) -> u64 {
    buffers
        .iter()
        .zip(&placement.offsets)
        .map(|(b, &o)| o.saturating_add(b.size))
        .max()
        .unwrap_or(0)
}

/// Per buffer, the summed sizes of the other buffers whose lifetimes overlap it (saturating),
/// by a sort and binary searches in `O(n log n)`.
pub fn conflict_bytes(buffers: &[Buffer]) -> Vec<u64> {
    // Sorted starts and ends with prefix sums of sizes.
    let mut by_start: Vec<(u64, u64)> = buffers.iter().map(|b| (b.lifetime.start, b.size)).collect();
    let mut by_end: Vec<(u64, u64)> = buffers.iter().map(|b| (b.lifetime.end, b.size)).collect();
    by_start.sort_unstable();
    by_end.sort_unstable();
    let prefix = |v: &[(u64, u64)]| -> Vec<u128> {
        let mut acc = Vec::with_capacity(v.len() + 1);
        let mut s = 0u128;
        acc.push(0);
        for &(_, z) in v {
            s += u128::from(z);
            acc.push(s);
        }
        acc
    };
    let (ps, pe) = (prefix(&by_start), prefix(&by_end));
    let total = ps.last().copied().unwrap_or(0);
    buffers
        .iter()
        .map(|b| {
            // Buffers ending at or before our start, and starting at or after our end.
            let ended = pe[by_end.partition_point(|&(e, _)| e <= b.lifetime.start)];
            let later = total - ps[by_start.partition_point(|&(s, _)| s < b.lifetime.end)];
            let others = total - ended - later - u128::from(b.size);
            u64::try_from(others).unwrap_or(u64::MAX)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(start: u64, end: u64, size: u64) -> Buffer {
        Buffer {
            lifetime: Lifetime::new(start, end),
            size,
            alignment: 1,
        }
    }

    #[test]
    fn merge_insert_joins_overlapping_and_touching_ranges() {
        let mut s = vec![(0, 4), (10, 12), (20, 30)];
        merge_insert(&mut s, 4, 10);
        assert_eq!(s, vec![(0, 12), (20, 30)]);
        merge_insert(&mut s, 14, 16);
        assert_eq!(s, vec![(0, 12), (14, 16), (20, 30)]);
        merge_insert(&mut s, 13, 40);
        assert_eq!(s, vec![(0, 12), (13, 40)]);
    }

    #[test]
    fn best_gap_prefers_the_tightest_gap_and_lowest_prefers_the_first() {
        let taken = [(0, 10), (30, 40), (45, 50)];
        assert_eq!(best_gap(&taken, 5, 1, Fit::Best), Some(40));
        assert_eq!(best_gap(&taken, 5, 1, Fit::Lowest), Some(10));
        assert_eq!(best_gap(&taken, 25, 1, Fit::Best), Some(50));
        // Alignment pushes the offset inside the gap: 10 -> 16, 16 + 5 <= 30.
        assert_eq!(best_gap(&taken, 5, 16, Fit::Lowest), Some(16));
        assert_eq!(best_gap(&[(0, u64::MAX - 1)], 5, 1, Fit::Best), None);
    }

    #[test]
    fn occupancy_reports_exactly_the_ranges_of_buffers_alive_during_the_query() {
        let bufs = vec![buf(0, 3, 1), buf(3, 6, 1), buf(1, 5, 1), buf(5, 9, 1), buf(8, 9, 1)];
        let mut occ = Occupancy::new(&bufs);
        // Placed: [0,3) at 0..10, [3,6) at 20..30, [5,9) at 40..50.
        occ.insert(bufs[0].lifetime, 0, 10);
        occ.insert(bufs[1].lifetime, 20, 30);
        occ.insert(bufs[3].lifetime, 40, 50);
        assert_eq!(occ.gather(Lifetime::new(1, 5)), &[(0, 10), (20, 30)]);
        assert_eq!(occ.gather(Lifetime::new(8, 9)), &[(40, 50)]);
        assert_eq!(occ.peak(), 50);
    }

    #[test]
    fn occupancy_agrees_with_a_pairwise_scan_on_many_intervals() {
        // Deterministic pseudo-random lifetimes.
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let bufs: Vec<Buffer> = (0..200)
            .map(|_| {
                let s = next() % 100;
                buf(s, s + 1 + next() % 30, 1 + next() % 50)
            })
            .collect();
        let mut occ = Occupancy::new(&bufs);
        let mut placed: Vec<(Lifetime, u64, u64)> = Vec::new();
        for (i, b) in bufs.iter().enumerate() {
            let lo = (i as u64) * 7;
            let hi = lo + b.size;
            if i % 2 == 0 {
                occ.insert(b.lifetime, lo, hi);
                placed.push((b.lifetime, lo, hi));
            }
        }
        for b in &bufs {
            let got = occ.gather(b.lifetime).to_vec();
            let mut want: Vec<(u64, u64)> = placed
                .iter()
                .filter(|(lt, _, _)| lt.overlaps(&b.lifetime))
                .map(|&(_, lo, hi)| (lo, hi))
                .collect();
            normalize(&mut want);
            assert_eq!(got, want);
        }
    }

    #[test]
    fn conflict_bytes_sums_the_sizes_of_overlapping_buffers() {
        let bufs = vec![buf(0, 2, 10), buf(2, 4, 20), buf(1, 3, 5)];
        assert_eq!(conflict_bytes(&bufs), vec![5, 5, 30]);
    }
}
