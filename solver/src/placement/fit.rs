//! Shared machinery of the greedy placers (not a placer itself): a compressed time axis, an
//! occupancy index answering "which byte ranges are taken by placed buffers alive at some step
//! of `[start, end)`", the best-fit and lowest-fit gap searches over that answer, greedy
//! passes in a given order with either, and per-buffer conflict bytes.
//!
//! The index is a segment tree over the elementary time segments between lifetime boundaries
//! (bottom-up, no recursion). Each node keeps two sorted lists of merged byte ranges: `agg`,
//! the ranges of buffers stored at the node, below it, or whose boundary path crosses it, and
//! `own`, the ranges of buffers covering the node's whole time range. A buffer goes into the
//! `agg` lists of its `O(log T)` canonical nodes and of its two boundary paths, and into the
//! `own` lists of its canonical nodes; a query reads `agg` of its canonical nodes and `own` of
//! the nodes on its two boundary paths, which together cover exactly the placed buffers alive
//! during the query. Two refinements keep the work and the lists short:
//! - `own` lists exist only up to height `flat` (the tree height minus [`FLAT_LEVELS`]): a
//!   canonical node above it copies its range into the `own` lists of its descendants at
//!   height `flat` (`O(len / 2^flat)` extra insertions for long buffers), so every query reads
//!   at most `flat + 1` `own` lists per boundary path;
//! - gaps no buffer of the problem can use (smaller than the smallest size after the smallest
//!   alignment) are closed, so alignment slivers do not fragment the lists; this is exact.
//!
//! Since the lists are merged, a query reads a few dozen to a few hundred ranges where a scan
//! of the conflicting buffers (TFLite, XLA's heap simulator: `O(n²)` overall) reads thousands
//! (iopddl_S_1: 43M overlapping pairs); it unions them by merges, smallest list first, that
//! skip by galloping search what the union already covers. Insertion and query cost
//! `O(log T · k)` for `k` ranges per list (`T` = segments). There is no removal: improvement
//! passes rebuild the index.

use crate::limits::Limits;
use crate::problem::{align_up, Buffer, Lifetime, Placement, PlacementError, PlacementProblem};

/// Tree levels above the height `flat` whose `own` lists absorb those of their ancestors
/// (measured on iopddl_S_1: 4 to 9 perform alike; more levels cost queries, fewer cost
/// insertions of long buffers).
const FLAT_LEVELS: u32 = 6;

/// The sorted distinct lifetime boundaries of a problem: maps lifetimes to ranges of
/// elementary segments `[points[i], points[i + 1])`.
#[derive(Debug, Clone)]
struct TimeAxis {
    points: Vec<u64>,
}

impl TimeAxis {
    /// The axis of all lifetimes of `buffers`.
    fn new(buffers: &[Buffer]) -> Self {
        let points = crate::problem::time_points(buffers);
        TimeAxis { points }
    }

    /// Number of elementary segments (at least 1, so that an index is never empty).
    fn segments(&self) -> usize {
        self.points.len().saturating_sub(1).max(1)
    }

    /// The segments `[a, b)` that meet `lt` (never empty; exact when `lt`'s boundaries are
    /// on the axis).
    fn range(&self, lt: Lifetime) -> (usize, usize) {
        let last = self.segments() - 1;
        let a = self
            .points
            .partition_point(|&p| p <= lt.start)
            .saturating_sub(1)
            .min(last);
        let b = self.points.partition_point(|&p| p < lt.end);
        (a, b.clamp(a + 1, last + 1))
    }
}

/// Which gaps between taken ranges can never hold a buffer: those where no buffer of at least
/// `min_size` bytes at an alignment of at least `min_align` fits.
#[derive(Debug, Clone, Copy)]
struct Closer {
    min_size: u64,
    min_align: u64,
}

impl Closer {
    /// The closer for the buffers of a problem.
    fn of(buffers: &[Buffer]) -> Self {
        Closer {
            min_size: buffers.iter().map(|b| b.size).min().unwrap_or(1).max(1),
            min_align: buffers
                .iter()
                .map(|b| b.alignment)
                .min()
                .unwrap_or(1)
                .max(1),
        }
    }

    /// Whether a range ending at `prev_hi` and one starting at `next_lo` join into one:
    /// they overlap, touch, or leave a gap nothing fits in.
    fn joins(self, prev_hi: u64, next_lo: u64) -> bool {
        next_lo <= prev_hi
            || align_up(prev_hi, self.min_align)
                .and_then(|o| o.checked_add(self.min_size))
                .is_none_or(|end| end > next_lo)
    }

    /// Inserts `[lo, hi)` into a sorted list of disjoint ranges separated by useful gaps,
    /// merging it with the ranges it joins.
    fn insert(self, set: &mut Vec<(u64, u64)>, lo: u64, hi: u64) {
        // First range that joins `[lo, hi)` from below, and first range past the join
        // (both predicates are monotone along the sorted list).
        let i = set.partition_point(|&(_, h)| !self.joins(h, lo));
        let j = i + set[i..].partition_point(|&(l, _)| self.joins(hi, l));
        if i == j {
            set.insert(i, (lo, hi));
            return;
        }
        let new_lo = set[i].0.min(lo);
        let new_hi = set[j - 1].1.max(hi);
        set[i] = (new_lo, new_hi);
        set.drain(i + 1..j);
    }
}

/// The two range lists of a tree node (see the module doc).
#[derive(Debug, Clone, Default)]
struct Lists {
    own: Vec<(u64, u64)>,
    agg: Vec<(u64, u64)>,
}

/// Occupied byte ranges of placed buffers over time (see the module doc).
#[derive(Debug, Clone)]
pub struct Occupancy {
    axis: TimeAxis,
    /// Leaves (a power of two ≥ the number of segments); node `x` has children `2x`, `2x + 1`.
    n: usize,
    /// Height whose `own` lists also hold the ranges of all their ancestors.
    flat: u32,
    /// The `own` and `agg` lists of each node, side by side for locality.
    nodes: Vec<Lists>,
    closer: Closer,
    /// Query scratch: gathered runs and their end indices, list order, merge buffers.
    runs: Vec<(u64, u64)>,
    bounds: Vec<usize>,
    lists: Vec<(usize, usize, usize)>,
    acc: Vec<(u64, u64)>,
    next: Vec<(u64, u64)>,
}

impl Occupancy {
    /// An empty index for the lifetimes of `buffers` (whose sizes and alignments also tell
    /// which gaps are too small to ever be used).
    pub fn new(buffers: &[Buffer]) -> Self {
        let axis = TimeAxis::new(buffers);
        let n = axis.segments().next_power_of_two();
        Occupancy {
            axis,
            n,
            flat: n.trailing_zeros().saturating_sub(FLAT_LEVELS),
            nodes: vec![Lists::default(); 2 * n],
            closer: Closer::of(buffers),
            runs: Vec::new(),
            bounds: Vec::new(),
            lists: Vec::new(),
            acc: Vec::new(),
            next: Vec::new(),
        }
    }

    /// Records that bytes `[lo, hi)` are taken during `lt`.
    pub fn insert(&mut self, lt: Lifetime, lo: u64, hi: u64) {
        if hi <= lo {
            return;
        }
        let c = self.closer;
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
        // Every ancestor of a canonical node lies on one of the two boundary paths.
        let (mut x, mut y) = (a + self.n, b - 1 + self.n);
        while x != y {
            c.insert(&mut self.nodes[x].agg, lo, hi);
            c.insert(&mut self.nodes[y].agg, lo, hi);
            x >>= 1;
            y >>= 1;
        }
        while x >= 1 {
            c.insert(&mut self.nodes[x].agg, lo, hi);
            x >>= 1;
        }
    }

    /// Stores a range at canonical node `x` of the given height: in its `agg` list, and in
    /// its `own` list or, above height `flat`, in the `own` lists of its descendants there.
    fn add_own(&mut self, x: usize, height: u32, lo: u64, hi: u64) {
        let c = self.closer;
        c.insert(&mut self.nodes[x].agg, lo, hi);
        if height > self.flat {
            let shift = height - self.flat;
            for d in (x << shift)..((x + 1) << shift) {
                c.insert(&mut self.nodes[d].own, lo, hi);
            }
        } else {
            c.insert(&mut self.nodes[x].own, lo, hi);
        }
    }

    /// Fills `self.runs` with the lists of ranges taken at some step of `lt`, each sorted and
    /// disjoint, and `self.bounds` with the end index of each list.
    fn collect(&mut self, lt: Lifetime) {
        let (runs, bounds) = (&mut self.runs, &mut self.bounds);
        runs.clear();
        bounds.clear();
        let mut push = |list: &[(u64, u64)]| {
            if !list.is_empty() {
                runs.extend_from_slice(list);
                bounds.push(runs.len());
            }
        };
        let (a, b) = self.axis.range(lt);
        let (mut l, mut r) = (a + self.n, b + self.n);
        while l < r {
            if l & 1 == 1 {
                push(&self.nodes[l].agg);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                push(&self.nodes[r].agg);
            }
            l >>= 1;
            r >>= 1;
        }
        // Boundary paths up to height `flat`, whose `own` lists hold everything above.
        let (mut x, mut y) = (a + self.n, b - 1 + self.n);
        let mut height = 0u32;
        while x != y && height <= self.flat {
            push(&self.nodes[x].own);
            push(&self.nodes[y].own);
            x >>= 1;
            y >>= 1;
            height += 1;
        }
        while x >= 1 && height <= self.flat {
            push(&self.nodes[x].own);
            x >>= 1;
            height += 1;
        }
    }

    /// The byte ranges taken at some step of `lt`: sorted, disjoint and not touching.
    pub fn gather(&mut self, lt: Lifetime) -> &[(u64, u64)] {
        self.collect(lt);
        // Union by linear merges, smallest list first, so the big lists are read once.
        self.lists.clear();
        let mut start = 0usize;
        for &end in &self.bounds {
            self.lists.push((end - start, start, end));
            start = end;
        }
        self.lists.sort_unstable();
        self.acc.clear();
        for &(_, s, e) in &self.lists {
            let (acc, next) = (&mut self.acc, &mut self.next);
            next.clear();
            union_into(next, acc, &self.runs[s..e]);
            std::mem::swap(acc, next);
        }
        &self.acc
    }
}

/// Appends the sorted disjoint ranges `src` to the sorted disjoint `dst`, where `src` starts
/// at or after `dst`'s last start: ranges that overlap or touch `dst`'s last one are merged
/// into it, the rest are copied in one block.
fn append_merged(dst: &mut Vec<(u64, u64)>, src: &[(u64, u64)]) {
    let mut k = 0usize;
    if let Some(last) = dst.last_mut() {
        while k < src.len() && src[k].0 <= last.1 {
            last.1 = last.1.max(src[k].1);
            k += 1;
        }
    }
    dst.extend_from_slice(&src[k..]);
}

/// Writes into `out` the union of two sorted disjoint lists by a merge that, after each range
/// it emits, skips (by galloping search) the ranges of both lists the emitted range already
/// covers, so heavily overlapping lists cost about the size of their union. The tail left when
/// one list runs out is copied in one block.
fn union_into(out: &mut Vec<(u64, u64)>, a: &[(u64, u64)], b: &[(u64, u64)]) {
    let (mut i, mut j) = (0usize, 0usize);
    loop {
        let (lo, hi) = match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) => {
                if x.0 <= y.0 {
                    i += 1;
                    x
                } else {
                    j += 1;
                    y
                }
            }
            (Some(_), None) => return append_merged(out, &a[i..]),
            (None, _) => return append_merged(out, &b[j..]),
        };
        let covered = match out.last_mut() {
            Some(last) if lo <= last.1 => {
                last.1 = last.1.max(hi);
                last.1
            }
            _ => {
                out.push((lo, hi));
                hi
            }
        };
        i = skip_covered(a, i, covered);
        j = skip_covered(b, j, covered);
    }
}

/// The first index `k >= i` of `list` (sorted, disjoint) whose range ends after `upto`.
fn skip_covered(list: &[(u64, u64)], i: usize, upto: u64) -> usize {
    if list.get(i).is_none_or(|r| r.1 > upto) {
        return i;
    }
    // Gallop: `list[lo].1 <= upto`; double the step until past it, then binary search.
    let (mut lo, mut step) = (i, 1usize);
    while lo + step < list.len() && list[lo + step].1 <= upto {
        lo += step;
        step *= 2;
    }
    let end = (lo + step).min(list.len());
    lo + 1 + list[lo + 1..end].partition_point(|r| r.1 <= upto)
}

/// Sorts ranges and merges overlapping or touching ones, in place.
pub fn normalize(ranges: &mut Vec<(u64, u64)>) {
    ranges.sort_unstable();
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

/// Best fit (TFLite's rule) for `size` bytes at `alignment` among the gaps left by `taken`
/// (sorted, disjoint): the smallest gap the aligned buffer fits in (ties: the lowest), else
/// the unbounded space above the last range. `None` when `offset + size` would overflow.
pub fn best_gap(taken: &[(u64, u64)], size: u64, alignment: u64) -> Option<u64> {
    let mut best: Option<(u64, u64)> = None; // (gap length, offset)
    let mut prev_end = 0u64;
    for &(lo, hi) in taken {
        if lo > prev_end {
            if let Some(off) = align_up(prev_end, alignment) {
                let gap = lo - prev_end;
                let fits = off.checked_add(size).is_some_and(|end| end <= lo);
                if fits && best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, off));
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

/// First fit by address for `size` bytes at `alignment` among the gaps left by `taken`
/// (sorted, disjoint): the lowest aligned offset where the buffer fits. `None` when
/// `offset + size` would overflow.
pub fn lowest_gap(taken: &[(u64, u64)], size: u64, alignment: u64) -> Option<u64> {
    let mut prev_end = 0u64;
    for &(lo, hi) in taken {
        if lo > prev_end {
            let off = align_up(prev_end, alignment)?;
            if off.checked_add(size).is_some_and(|end| end <= lo) {
                return Some(off);
            }
        }
        prev_end = prev_end.max(hi);
    }
    let off = align_up(prev_end, alignment)?;
    off.checked_add(size).map(|_| off)
}

/// Where a greedy pass puts each buffer among the free gaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The tightest gap ([`best_gap`]).
    BestFit,
    /// The lowest gap ([`lowest_gap`]).
    LowestFit,
}

/// Places the buffers one by one in `order` (indices; buffers not listed keep offset 0 and
/// are not recorded) by best fit against the already placed buffers alive at the same time.
pub fn place_in_order(
    problem: &PlacementProblem,
    order: &[usize],
) -> Result<Placement, PlacementError> {
    place_in_order_by(problem, order, Rule::BestFit)
}

/// [`place_in_order`] with the given gap rule (the pass of [`place_in_order_within`] without
/// limits: it runs to the end).
pub fn place_in_order_by(
    problem: &PlacementProblem,
    order: &[usize],
    rule: Rule,
) -> Result<Placement, PlacementError> {
    place_in_order_within(problem, order, rule, &Limits::UNLIMITED).map(|(placement, _)| placement)
}

/// Buffers a greedy pass places between two looks at the clock in
/// [`place_in_order_within`] (a few milliseconds at most, on 60,000 buffers each alive beside
/// thousands).
pub(super) const CLOCK_EVERY: usize = 64;

/// [`place_in_order_by`] under `limits`' time and stop flag (its node limit does not apply):
/// the pass looks at them every [`CLOCK_EVERY`] buffers, and once either is spent it ends with
/// the lower of two placements, both `O(n log n)` (the online allocator, [`super::online`]):
/// the buffers it has not reached above the peak of those it placed (aligned to every
/// alignment among them), or every buffer placed online (where the pass's part was a small
/// share, or sits across the whole time axis, as on a long chain). So a valid placement
/// always comes back. The second value says whether the pass was cut short (the placement
/// then depends on the clock).
pub fn place_in_order_within(
    problem: &PlacementProblem,
    order: &[usize],
    rule: Rule,
    limits: &Limits,
) -> Result<(Placement, bool), PlacementError> {
    let clock = limits.start_time_and_flag();
    let buffers = &problem.buffers;
    let mut occ = Occupancy::new(buffers);
    let mut offsets = vec![0u64; buffers.len()];
    let mut peak = 0u64;
    for (k, &i) in order.iter().enumerate() {
        if k % CLOCK_EVERY == 0 && k > 0 && clock.exhausted().is_some() {
            return Ok((finish_cut(buffers, offsets, peak, &order[k..])?, true));
        }
        let b = &buffers[i];
        let taken = occ.gather(b.lifetime);
        let off = match rule {
            Rule::BestFit => best_gap(taken, b.size, b.alignment),
            Rule::LowestFit => lowest_gap(taken, b.size, b.alignment),
        }
        .ok_or(PlacementError::Overflow { index: i })?;
        let end = off
            .checked_add(b.size)
            .ok_or(PlacementError::Overflow { index: i })?;
        occ.insert(b.lifetime, off, end);
        offsets[i] = off;
        peak = peak.max(end);
    }
    Ok((Placement { offsets }, false))
}

/// Ends a placement pass cut short by its limits: `offsets` holds the buffers placed so far
/// (peak `peak`), `rest` the buffers not reached. The lower of two placements, both
/// `O(n log n)` (the online allocator, [`super::online`]): `rest` placed online above `peak`
/// (aligned to every alignment among them), or every buffer placed online (where the pass's
/// part was a small share, or sits across the whole time axis, as on a long chain).
pub(super) fn finish_cut(
    buffers: &[Buffer],
    mut offsets: Vec<u64>,
    peak: u64,
    rest: &[usize],
) -> Result<Placement, PlacementError> {
    let alignment = rest
        .iter()
        .map(|&j| buffers[j].alignment.max(1))
        .max()
        .unwrap_or(1);
    let first = rest.first().copied().unwrap_or(0);
    let base = align_up(peak, alignment).ok_or(PlacementError::Overflow { index: first })?;
    let mut above = peak;
    for (j, o) in super::online::place(buffers, rest)? {
        offsets[j] = base
            .checked_add(o)
            .filter(|o| o.checked_add(buffers[j].size).is_some())
            .ok_or(PlacementError::Overflow { index: j })?;
        above = above.max(offsets[j] + buffers[j].size);
    }
    let online = super::online::place_all(buffers)?;
    if peak_of(buffers, &online) < above {
        return Ok(online);
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
/// by sorted starts and ends with prefix sums, `O(n log n)`.
pub fn conflict_bytes(buffers: &[Buffer]) -> Vec<u64> {
    let mut by_start: Vec<(u64, u64)> =
        buffers.iter().map(|b| (b.lifetime.start, b.size)).collect();
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
            // Bytes of buffers ending at or before our start, and starting at or after our end.
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

    use crate::problem::fixtures::buf;
    const EXACT: Closer = Closer {
        min_size: 1,
        min_align: 1,
    };

    #[test]
    fn inserting_a_range_joins_the_ranges_it_overlaps_or_touches() {
        let mut s = vec![(0, 4), (10, 12), (20, 30)];
        EXACT.insert(&mut s, 4, 10);
        assert_eq!(s, vec![(0, 12), (20, 30)]);
        EXACT.insert(&mut s, 14, 16);
        assert_eq!(s, vec![(0, 12), (14, 16), (20, 30)]);
        EXACT.insert(&mut s, 13, 40);
        assert_eq!(s, vec![(0, 12), (13, 40)]);
    }

    #[test]
    fn gaps_no_buffer_fits_in_are_closed() {
        // Every buffer has at least 4 bytes at alignment 8: [10, 16) holds none (16 + 4 > 16),
        // [20, 28) holds one at 24.
        let c = Closer {
            min_size: 4,
            min_align: 8,
        };
        let mut s = vec![(0, 10)];
        c.insert(&mut s, 16, 20);
        assert_eq!(s, vec![(0, 20)]);
        c.insert(&mut s, 28, 30);
        assert_eq!(s, vec![(0, 20), (28, 30)]);
    }

    #[test]
    fn lowest_gap_takes_the_first_gap_that_fits_after_alignment() {
        let taken = [(0, 10), (30, 40), (45, 50)];
        assert_eq!(lowest_gap(&taken, 5, 1), Some(10));
        assert_eq!(lowest_gap(&taken, 25, 1), Some(50));
        assert_eq!(lowest_gap(&taken, 12, 16), Some(16));
        assert_eq!(lowest_gap(&taken, 15, 16), Some(64));
        assert_eq!(lowest_gap(&[(0, u64::MAX - 1)], 5, 1), None);
    }

    #[test]
    fn best_gap_takes_the_tightest_gap_that_fits_after_alignment() {
        let taken = [(0, 10), (30, 40), (45, 50)];
        assert_eq!(best_gap(&taken, 5, 1), Some(40));
        assert_eq!(best_gap(&taken, 25, 1), Some(50));
        // [10, 30) is the only bounded gap for 12 bytes at alignment 16: 16 + 12 <= 30.
        assert_eq!(best_gap(&taken, 12, 16), Some(16));
        assert_eq!(best_gap(&taken, 15, 16), Some(64));
        assert_eq!(best_gap(&[(0, u64::MAX - 1)], 5, 1), None);
    }

    #[test]
    fn occupancy_reports_exactly_the_ranges_of_buffers_alive_during_the_query() {
        let bufs = vec![
            buf(0, 3, 1),
            buf(3, 6, 1),
            buf(1, 5, 1),
            buf(5, 9, 1),
            buf(8, 9, 1),
        ];
        let mut occ = Occupancy::new(&bufs);
        occ.insert(bufs[0].lifetime, 0, 10);
        occ.insert(bufs[1].lifetime, 20, 30);
        occ.insert(bufs[3].lifetime, 40, 50);
        assert_eq!(occ.gather(Lifetime::new(1, 5)), &[(0, 10), (20, 30)]);
        assert_eq!(occ.gather(Lifetime::new(8, 9)), &[(40, 50)]);
        assert_eq!(
            occ.gather(Lifetime::new(0, 9)),
            &[(0, 10), (20, 30), (40, 50)]
        );
    }

    #[test]
    fn occupancy_agrees_with_a_pairwise_scan_on_many_intervals() {
        // Deterministic pseudo-random lifetimes over a long horizon, so that long buffers sit
        // above the flattened height.
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let bufs: Vec<Buffer> = (0..3000)
            .map(|k| {
                let s = next() % 2000;
                let len = if k % 10 == 0 {
                    1 + next() % 1500
                } else {
                    1 + next() % 8
                };
                buf(s, s + len, 1 + next() % 50)
            })
            .collect();
        let mut occ = Occupancy::new(&bufs);
        assert!(occ.flat > 0);
        let mut placed: Vec<(Lifetime, u64, u64)> = Vec::new();
        for (i, b) in bufs.iter().enumerate() {
            if i % 2 == 0 {
                let lo = (next() % 2000) * 3;
                occ.insert(b.lifetime, lo, lo + b.size);
                placed.push((b.lifetime, lo, lo + b.size));
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
