//! Sections: the time axis of the exact search, cut at every lifetime boundary of the buffers
//! still to place, and the preprocessed instance the search runs on.
//!
//! Idea (Moffitt, "MiniMalloc", ASPLOS 2023, §4 "spatial inference"): between two consecutive
//! lifetime boundaries the set of live buffers is constant, so a *section* is a cross-section
//! of buffers that must all be stacked disjointly. During the search every section keeps a
//! *floor* (no unplaced buffer of the section can go below it) and the *total* of the bytes
//! still to place in it; `max(floor, current offset) + total + fixed bytes above the floor`
//! above the capacity proves the partial placement cannot be completed (section inference).
//! Buffers with fixed offsets are obstacles: each free buffer keeps the merged byte ranges of
//! the fixed buffers alive during its lifetime, each section those alive during the section.
//!
//! Complexity: building is `O(n log n + Σ spans + Σ overlaps)` for `n` free buffers (`spans`:
//! sections per buffer, `overlaps`: pairs of free buffers alive together), plus
//! `O(n_free · n_fixed)` filtering and `O(k log k)` merging of obstacles; a section bound is
//! `O(log k)` for `k` merged fixed ranges in the section (`O(1)` without fixed buffers).

use crate::limits::{Limits, LimitsClock};
use crate::problem::{align_up, Buffer, PlacementProblem};

/// Compressed sparse rows: `items[start[i]..start[i + 1]]` is row `i`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Csr<T> {
    start: Vec<usize>,
    items: Vec<T>,
}

impl<T: Copy> Csr<T> {
    /// Builds from rows given in order.
    fn from_rows<I: IntoIterator<Item = Vec<T>>>(rows: I) -> Self {
        let mut csr = Csr {
            start: vec![0],
            items: Vec::new(),
        };
        for row in rows {
            csr.items.extend(row);
            csr.start.push(csr.items.len());
        }
        csr
    }

    /// Row `i` (empty when out of range).
    pub(crate) fn row(&self, i: usize) -> &[T] {
        match (self.start.get(i), self.start.get(i + 1)) {
            (Some(&a), Some(&b)) => self.items.get(a..b).unwrap_or(&[]),
            _ => &[],
        }
    }
}

/// Merged byte ranges `[start, end)`, sorted and disjoint, with suffix sums of their lengths.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ranges {
    ranges: Vec<(u64, u64)>,
    /// `suffix[i]` = total length of `ranges[i..]`; one longer than `ranges`.
    suffix: Vec<u64>,
}

impl Ranges {
    /// Sorts and merges (touching ranges merge too).
    pub(crate) fn merged(mut v: Vec<(u64, u64)>) -> Self {
        v.sort_unstable();
        let mut ranges: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for (a, b) in v {
            match ranges.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => ranges.push((a, b)),
            }
        }
        let mut suffix = vec![0u64; ranges.len() + 1];
        for i in (0..ranges.len()).rev() {
            let (a, b) = ranges[i];
            suffix[i] = suffix[i + 1].saturating_add(b - a);
        }
        Ranges { ranges, suffix }
    }

    /// Whether there are no ranges.
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Bytes of the ranges at or above `level`.
    pub(crate) fn bytes_above(&self, level: u64) -> u64 {
        let i = self.ranges.partition_point(|&(_, b)| b <= level);
        match self.ranges.get(i) {
            None => 0,
            Some(&(a, _)) => self.suffix[i].saturating_sub(level.saturating_sub(a)),
        }
    }

    /// The lowest multiple of `align` at or above `base` where `[x, x + size)` meets no range;
    /// `None` on overflow.
    pub(crate) fn first_fit(&self, base: u64, size: u64, align: u64) -> Option<u64> {
        let mut x = align_up(base, align)?;
        let mut i = self.ranges.partition_point(|&(_, b)| b <= x);
        while let Some(&(a, b)) = self.ranges.get(i) {
            if x.checked_add(size)? <= a {
                break;
            }
            x = align_up(b.max(x), align)?;
            i += 1;
        }
        Some(x)
    }
}

/// The instance the search runs on: the free buffers (local indices `0..m`), their sections,
/// overlaps, obstacles, and the fixed buffers' occupancy per section.
#[derive(Debug, Clone, Default)]
pub(crate) struct Instance {
    /// Global index of each local buffer.
    pub global: Vec<usize>,
    /// The local buffers.
    pub bufs: Vec<Buffer>,
    /// First section of each buffer.
    pub lo: Vec<u32>,
    /// One past the last section of each buffer.
    pub hi: Vec<u32>,
    /// Number of sections.
    pub n_sec: usize,
    /// Buffers alive in each section.
    pub members: Csr<u32>,
    /// Buffers alive together with each buffer (excluding itself), by local index.
    pub overlaps: Csr<u32>,
    /// Bytes of free buffers per section.
    pub total: Vec<u64>,
    /// Merged byte ranges of fixed buffers alive with each buffer (empty without fixed ones).
    pub obstacles: Vec<Ranges>,
    /// Merged byte ranges of fixed buffers alive during each section (empty without fixed).
    pub sec_fixed: Vec<Ranges>,
    /// Whether any fixed buffer meets a free one.
    pub has_fixed: bool,
    /// For each buffer, the previous identical buffer (same lifetime, size and alignment) by
    /// local index, or [`NONE32`].
    pub twin_prev: Vec<u32>,
    /// For each buffer, the next identical buffer by local index, or [`NONE32`].
    pub twin_next: Vec<u32>,
    /// For each buffer, the smallest size of a buffer alive with it (`u64::MAX` if none).
    pub min_overlap_size: Vec<u64>,
}

/// Marker for "no buffer".
pub(crate) const NONE32: u32 = u32::MAX;

impl Instance {
    /// The instance with time reversed (lifetime `[s, e)` becomes `[T - e, T - s)` for the
    /// latest end `T`): the same buffers by local index, so a placement of one is a placement
    /// of the other. Only for instances without fixed buffers.
    pub(crate) fn reversed(&self) -> Self {
        let t = self.bufs.iter().map(|b| b.lifetime.end).max().unwrap_or(0);
        let bufs: Vec<Buffer> = self
            .bufs
            .iter()
            .map(|b| Buffer {
                lifetime: crate::problem::Lifetime::new(t - b.lifetime.end, t - b.lifetime.start),
                ..*b
            })
            .collect();
        let mut r = Self::new(&PlacementProblem::new(bufs), &[], u64::MAX);
        r.global = self.global.clone();
        r
    }

    /// Builds the instance of the buffers of `problem` whose `fixed` entry is `None` (all when
    /// `fixed` is empty); `fixed` ones are obstacles (those starting at or above `cap` are
    /// dropped: nothing under the capacity meets them).
    pub(crate) fn new(problem: &PlacementProblem, fixed: &[Option<u64>], cap: u64) -> Self {
        // An unlimited clock never stops the build, so the default is never used.
        Self::within(problem, fixed, cap, &Limits::UNLIMITED.start()).unwrap_or_default()
    }

    /// [`Instance::new`], or `None` when `clock` runs out while it is built (the sections,
    /// the overlapping pairs and the fixed obstacles all grow with the overlap: `O(m²)` pairs
    /// for `m` buffers alive together).
    pub(crate) fn within(
        problem: &PlacementProblem,
        fixed: &[Option<u64>],
        cap: u64,
        clock: &LimitsClock,
    ) -> Option<Self> {
        let is_fixed = |i: usize| fixed.get(i).copied().flatten();
        let global: Vec<usize> = (0..problem.buffers.len())
            .filter(|&i| is_fixed(i).is_none())
            .collect();
        let bufs: Vec<Buffer> = global.iter().map(|&i| problem.buffers[i]).collect();
        let times = crate::problem::time_points(&bufs);
        let n_sec = times.len().saturating_sub(1);
        let at = |t: u64| times.partition_point(|&x| x < t) as u32;
        let lo: Vec<u32> = bufs.iter().map(|b| at(b.lifetime.start)).collect();
        let hi: Vec<u32> = bufs.iter().map(|b| at(b.lifetime.end)).collect();
        let m = bufs.len();

        // Members per section and section totals.
        // Every loop below that grows with the lifetimes' overlap (up to `m²` pairs, `m · n_sec`
        // memberships) looks at the clock every 64 buffers.
        let stopped = |i: usize| i % 64 == 63 && clock.exhausted().is_some();
        let mut count = vec![0usize; n_sec + 1];
        for i in 0..m {
            if stopped(i) {
                return None;
            }
            for s in lo[i]..hi[i] {
                count[s as usize] += 1;
            }
        }
        let mut rows: Vec<Vec<u32>> = count
            .iter()
            .take(n_sec)
            .map(|&c| Vec::with_capacity(c))
            .collect();
        let mut total = vec![0u64; n_sec];
        for i in 0..m {
            if stopped(i) {
                return None;
            }
            for s in lo[i]..hi[i] {
                rows[s as usize].push(i as u32);
                total[s as usize] = total[s as usize].saturating_add(bufs[i].size);
            }
        }
        let members = Csr::from_rows(rows);

        // Overlaps by a sweep in order of first section.
        let mut by_lo: Vec<u32> = (0..m as u32).collect();
        by_lo.sort_unstable_by_key(|&i| (lo[i as usize], i));
        let mut ov: Vec<Vec<u32>> = vec![Vec::new(); m];
        let mut active: Vec<u32> = Vec::new();
        for (k, &i) in by_lo.iter().enumerate() {
            if stopped(k) {
                return None;
            }
            let li = lo[i as usize];
            active.retain(|&j| hi[j as usize] > li);
            for &j in &active {
                ov[i as usize].push(j);
                ov[j as usize].push(i);
            }
            active.push(i);
        }
        for (k, row) in ov.iter_mut().enumerate() {
            if stopped(k) {
                return None;
            }
            row.sort_unstable();
        }
        let overlaps = Csr::from_rows(ov);

        if clock.exhausted().is_some() {
            return None;
        }
        // Fixed obstacles: only those meeting the span of the free buffers and starting below
        // the capacity matter. Short ones are found by their start (a short one starts at most
        // `short` steps before a query), the few long ones by a scan.
        let mut obstacles = vec![Ranges::default(); m];
        let mut sec_fixed = vec![Ranges::default(); n_sec];
        let mut has_fixed = false;
        if let (Some(&t0), Some(&t1)) = (times.first(), times.last()) {
            let mut relevant: Vec<(u64, u64, u64, u64)> = (0..problem.buffers.len())
                .filter_map(|i| is_fixed(i).map(|off| (problem.buffers[i], off)))
                .filter(|(b, off)| b.lifetime.start < t1 && t0 < b.lifetime.end && *off < cap)
                .map(|(b, off)| {
                    (
                        b.lifetime.start,
                        b.lifetime.end,
                        off,
                        off.saturating_add(b.size),
                    )
                })
                .collect();
            relevant.sort_unstable();
            let mut lens: Vec<u64> = relevant.iter().map(|r| r.1 - r.0).collect();
            lens.sort_unstable();
            let short = lens.get(lens.len() * 15 / 16).copied().unwrap_or(0);
            let (shorts, longs): (Vec<_>, Vec<_>) =
                relevant.into_iter().partition(|r| r.1 - r.0 <= short);
            let meeting = |a: u64, b: u64| -> Vec<(u64, u64)> {
                let from = shorts.partition_point(|r| r.0 < a.saturating_sub(short));
                let to = shorts.partition_point(|r| r.0 < b);
                shorts[from..to.max(from)]
                    .iter()
                    .chain(longs.iter())
                    .filter(|r| r.0 < b && r.1 > a)
                    .map(|r| (r.2, r.3))
                    .collect()
            };
            if !shorts.is_empty() || !longs.is_empty() {
                for (i, b) in bufs.iter().enumerate() {
                    if stopped(i) {
                        return None;
                    }
                    obstacles[i] = Ranges::merged(meeting(b.lifetime.start, b.lifetime.end));
                    has_fixed |= !obstacles[i].is_empty();
                }
                for (s, r) in sec_fixed.iter_mut().enumerate() {
                    if stopped(s) {
                        return None;
                    }
                    *r = Ranges::merged(meeting(times[s], times[s + 1]));
                }
            }
        }

        // Identical buffers, previous by index.
        let mut keyed: Vec<(u64, u64, u64, u64, u32)> = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| {
                (
                    b.lifetime.start,
                    b.lifetime.end,
                    b.size,
                    b.alignment,
                    i as u32,
                )
            })
            .collect();
        keyed.sort_unstable();
        let mut twin_prev = vec![NONE32; m];
        let mut twin_next = vec![NONE32; m];
        for w in keyed.windows(2) {
            if w[0].0 == w[1].0 && w[0].1 == w[1].1 && w[0].2 == w[1].2 && w[0].3 == w[1].3 {
                twin_prev[w[1].4 as usize] = w[0].4;
                twin_next[w[0].4 as usize] = w[1].4;
            }
        }
        let min_overlap_size: Vec<u64> = (0..m)
            .map(|i| {
                overlaps
                    .row(i)
                    .iter()
                    .map(|&o| bufs[o as usize].size)
                    .min()
                    .unwrap_or(u64::MAX)
            })
            .collect();

        Some(Instance {
            global,
            bufs,
            lo,
            hi,
            n_sec,
            members,
            overlaps,
            total,
            obstacles,
            sec_fixed,
            has_fixed,
            twin_prev,
            twin_next,
            min_overlap_size,
        })
    }

    /// Number of free buffers.
    pub(crate) fn len(&self) -> usize {
        self.bufs.len()
    }

    /// The lowest offset at or above `base` where local buffer `i` fits between the fixed
    /// buffers, aligned; `None` on overflow.
    pub(crate) fn fit(&self, i: usize, base: u64) -> Option<u64> {
        let b = &self.bufs[i];
        match self.obstacles.get(i) {
            Some(r) if !r.is_empty() => r.first_fit(base, b.size, b.alignment),
            _ => align_up(base, b.alignment),
        }
    }

    /// Fixed bytes at or above `level` during section `s`.
    pub(crate) fn fixed_above(&self, s: usize, level: u64) -> u64 {
        if !self.has_fixed {
            return 0;
        }
        self.sec_fixed.get(s).map_or(0, |r| r.bytes_above(level))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::problem::fixtures::buf;
    #[test]
    fn sections_are_cut_at_every_boundary_and_hold_the_live_bytes() {
        let p = PlacementProblem::new(vec![buf(0, 4, 10), buf(2, 6, 20), buf(4, 6, 5)]);
        let inst = Instance::new(&p, &[], u64::MAX);
        assert_eq!(inst.n_sec, 3); // [0,2) [2,4) [4,6)
        assert_eq!(inst.total, vec![10, 30, 25]);
        assert_eq!((inst.lo[1], inst.hi[1]), (1, 3));
        assert_eq!(inst.members.row(1), &[0, 1]);
        assert_eq!(inst.overlaps.row(1), &[0, 2]);
        assert_eq!(inst.overlaps.row(0), &[1]);
    }

    #[test]
    fn fixed_buffers_become_obstacles_that_first_fit_jumps_over() {
        let p = PlacementProblem::new(vec![buf(0, 4, 10), buf(0, 2, 4), buf(3, 5, 4)]);
        let inst = Instance::new(&p, &[None, Some(2), Some(12)], u64::MAX);
        assert_eq!(inst.len(), 1);
        // Obstacles [2,6) and [12,16): 10 bytes fit at 16 only; 2 bytes fit at 0 or 6.
        assert_eq!(inst.fit(0, 0), Some(16));
        let r = Ranges::merged(vec![(12, 16), (2, 6)]);
        assert_eq!(r.first_fit(0, 2, 1), Some(0));
        assert_eq!(r.first_fit(1, 2, 1), Some(6));
        assert_eq!(r.first_fit(1, 2, 8), Some(8));
        assert_eq!(r.bytes_above(4), 6);
        assert_eq!(r.bytes_above(0), 8);
        assert_eq!(r.bytes_above(16), 0);
    }

    #[test]
    fn identical_buffers_point_to_their_previous_twin() {
        let p = PlacementProblem::new(vec![buf(0, 2, 8), buf(0, 3, 8), buf(0, 2, 8)]);
        let inst = Instance::new(&p, &[], u64::MAX);
        assert_eq!(inst.twin_prev, vec![NONE32, NONE32, 0]);
        assert_eq!(inst.twin_next, vec![2, NONE32, NONE32]);
        assert_eq!(inst.min_overlap_size, vec![8, 8, 8]);
    }
}
