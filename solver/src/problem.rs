//! The placement problem (dynamic storage allocation): buffers with lifetimes and sizes, to be
//! given byte offsets so that buffers alive at the same step never share bytes.
//!
//! Also holds LOAD (max over steps of live bytes: a lower bound of every placement), LOAD
//! tightened by alignment ([`PlacementProblem::aligned_load`]) and an independent checker of a
//! placement, `O(n log n)` by a sweep over lifetime events.

use std::collections::BTreeMap;
use thiserror::Error;

/// Rounds `x` up to a multiple of `align` (a power of two, ≥ 1); `None` on overflow.
pub fn align_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    let mask = align - 1;
    x.checked_add(mask).map(|v| v & !mask)
}

/// The least peak of buffers `items` (size, alignment: powers of two) resident at once in
/// one arena (bytes): every offset is a multiple of the smallest alignment `m`, so each buffer
/// but the topmost spans at least its size rounded up to `m` (the next one starts at a
/// multiple of `m`), and the peak is at least the rounded sizes summed less the largest
/// rounding. Exact for one set; [`PlacementProblem::aligned_load`] takes it over the steps.
/// Saturates at `u64::MAX`.
pub fn packed_bytes(items: impl IntoIterator<Item = (u64, u64)>) -> u64 {
    let items: Vec<(u64, u64)> = items.into_iter().filter(|&(size, _)| size > 0).collect();
    let m = items.iter().map(|&(_, a)| a.max(1)).min().unwrap_or(1);
    let (mut sum, mut pad) = (0u64, 0u64);
    for (size, _) in items {
        let r = align_up(size, m).unwrap_or(u64::MAX);
        sum = sum.saturating_add(r);
        pad = pad.max(r - size);
    }
    sum.saturating_sub(pad)
}

/// Half-open step interval `[start, end)` during which a buffer is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lifetime {
    /// First step at which the buffer is reserved.
    pub start: u64,
    /// First step at which it is no longer reserved (`end > start`).
    pub end: u64,
}

impl Lifetime {
    /// Creates `[start, end)`.
    pub fn new(start: u64, end: u64) -> Self {
        Lifetime { start, end }
    }

    /// Whether two lifetimes share at least one step.
    pub fn overlaps(&self, other: &Lifetime) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// Number of steps covered.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// Whether the lifetime covers no step.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// Every lifetime start and end of `buffers`, sorted, without repeats: the boundaries of the
/// elementary time sections. `O(n log n)`.
pub fn time_points(buffers: &[Buffer]) -> Vec<u64> {
    let mut points: Vec<u64> = buffers
        .iter()
        .flat_map(|b| [b.lifetime.start, b.lifetime.end])
        .collect();
    points.sort_unstable();
    points.dedup();
    points
}

/// One buffer to place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Buffer {
    /// Steps during which it is reserved.
    pub lifetime: Lifetime,
    /// Size in bytes (> 0).
    pub size: u64,
    /// Required offset alignment in bytes (a power of two).
    pub alignment: u64,
}

/// A placement problem: buffers (indexed `0..n`) and an optional capacity in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlacementProblem {
    /// The buffers; a placement gives one offset per buffer, by index.
    pub buffers: Vec<Buffer>,
    /// Arena size the placement must fit in, if any.
    pub capacity: Option<u64>,
}

/// Offsets (bytes) for the buffers of a [`PlacementProblem`], by buffer index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// `offsets[i]` is where buffer `i` starts.
    pub offsets: Vec<u64>,
}

/// What is wrong with a problem or a placement.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum PlacementError {
    /// A buffer has size 0.
    #[error("buffer {index}: size must be > 0")]
    ZeroSize {
        /// Buffer index.
        index: usize,
    },
    /// A buffer's alignment is not a power of two.
    #[error("buffer {index}: alignment {alignment} is not a power of two")]
    BadAlignment {
        /// Buffer index.
        index: usize,
        /// The offending alignment.
        alignment: u64,
    },
    /// A buffer's lifetime is empty.
    #[error("buffer {index}: lifetime [{start}, {end}) is empty")]
    EmptyLifetime {
        /// Buffer index.
        index: usize,
        /// Lifetime start.
        start: u64,
        /// Lifetime end.
        end: u64,
    },
    /// The number of offsets differs from the number of buffers.
    #[error("placement has {got} offsets for {expected} buffers")]
    WrongLength {
        /// Buffers in the problem.
        expected: usize,
        /// Offsets in the placement.
        got: usize,
    },
    /// An offset is not a multiple of the buffer's alignment.
    #[error("buffer {index}: offset {offset} is not a multiple of its alignment {alignment}")]
    Misaligned {
        /// Buffer index.
        index: usize,
        /// Its offset.
        offset: u64,
        /// Its alignment.
        alignment: u64,
    },
    /// Two buffers alive at the same step share bytes.
    #[error("buffers {a} and {b} are alive together and overlap in memory")]
    Overlap {
        /// One buffer index.
        a: usize,
        /// The other buffer index.
        b: usize,
    },
    /// `offset + size` does not fit in u64.
    #[error("buffer {index}: offset + size overflows u64")]
    Overflow {
        /// Buffer index.
        index: usize,
    },
    /// The placement needs more bytes than the capacity.
    #[error("placement needs {peak} bytes, over the capacity of {capacity}")]
    OverCapacity {
        /// Bytes needed.
        peak: u64,
        /// The capacity.
        capacity: u64,
    },
}

impl PlacementProblem {
    /// A problem without capacity.
    pub fn new(buffers: Vec<Buffer>) -> Self {
        PlacementProblem {
            buffers,
            capacity: None,
        }
    }

    /// Checks every buffer: size > 0, power-of-two alignment, non-empty lifetime.
    pub fn validate(&self) -> Result<(), PlacementError> {
        for (index, b) in self.buffers.iter().enumerate() {
            if b.size == 0 {
                return Err(PlacementError::ZeroSize { index });
            }
            if !b.alignment.is_power_of_two() {
                return Err(PlacementError::BadAlignment {
                    index,
                    alignment: b.alignment,
                });
            }
            if b.lifetime.is_empty() {
                return Err(PlacementError::EmptyLifetime {
                    index,
                    start: b.lifetime.start,
                    end: b.lifetime.end,
                });
            }
        }
        Ok(())
    }

    /// Every lifetime start and end as `(step, is_start, buffer)`, sorted by step, ends before
    /// starts at one step (`[a, b)` and `[b, c)` do not overlap), then by buffer.
    /// `O(n log n)`.
    fn events(&self) -> Vec<(u64, bool, usize)> {
        let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(self.buffers.len() * 2);
        for (i, b) in self.buffers.iter().enumerate() {
            events.push((b.lifetime.start, true, i));
            events.push((b.lifetime.end, false, i));
        }
        events.sort_unstable_by_key(|&(t, is_start, i)| (t, is_start, i));
        events
    }

    /// LOAD: the maximum over steps of the summed sizes of live buffers. Every placement's peak
    /// is at least this. Saturates at `u64::MAX` instead of wrapping.
    pub fn load(&self) -> u64 {
        let (mut cur, mut best) = (0u64, 0u64);
        for (_, is_start, i) in self.events() {
            let s = self.buffers[i].size;
            if is_start {
                cur = cur.saturating_add(s);
                best = best.max(cur);
            } else {
                cur = cur.saturating_sub(s);
            }
        }
        best
    }

    /// The first lifetime start, in sweep order, at which the buffers alive together need more
    /// bytes than a 64-bit arena holds (`u64::MAX`): `(step, buffer, bytes)`, the buffer whose
    /// start crossed it and the bytes alive then. `None` when LOAD fits in `u64`, as it must for
    /// any placement to exist. `O(n log n)`.
    pub fn address_space_overflow(&self) -> Option<(u64, usize, u128)> {
        let mut live = 0u128;
        for (step, is_start, i) in self.events() {
            let size = u128::from(self.buffers[i].size);
            if is_start {
                live += size;
                if live > u128::from(u64::MAX) {
                    return Some((step, i, live));
                }
            } else {
                live -= size;
            }
        }
        None
    }

    /// LOAD tightened by alignment (bytes): at least [`Self::load`], at most the peak of every
    /// placement.
    ///
    /// Buffers whose alignments are at least `a` (powers of two, so multiples of `a`) sit at
    /// multiples of `a`. Of two such buffers alive together and adjacent in memory among them,
    /// the upper one starts at or above the lower one's size rounded up to `a`. So at a step any
    /// set `S` of live buffers with alignment at least `a` needs `Σ_S align_up(size, a) − max_S
    /// (align_up(size, a) − size)` bytes ([`packed_bytes`] of `S`): every size rounded up but
    /// the topmost, which at best is the one that rounding would grow most. The bound is the
    /// maximum of that over the steps (swept, the sums kept up to date) and the distinct
    /// alignments `a` of the problem (`a` = 1 gives LOAD). It is exact for a
    /// single step of buffers of one alignment, and proves optimal the placements whose only
    /// loss is the rounding between aligned buffers (common in DNN arenas: 256-byte offsets,
    /// sizes multiples of 4). `O(k · n log n)` for `k` distinct alignments; saturates at
    /// `u64::MAX`.
    pub fn aligned_load(&self) -> u64 {
        let mut alignments: Vec<u64> = self.buffers.iter().map(|b| b.alignment.max(1)).collect();
        alignments.sort_unstable();
        alignments.dedup();
        let events = self.events();
        let mut best = 0u128;
        let mut wastes: BTreeMap<u128, usize> = BTreeMap::new();
        for &a in &alignments {
            let a128 = u128::from(a);
            let mut sum = 0u128;
            wastes.clear();
            for &(_, is_start, i) in &events {
                let b = &self.buffers[i];
                if b.alignment.max(1) < a {
                    continue;
                }
                let size = u128::from(b.size);
                let rounded = size.div_ceil(a128) * a128;
                let waste = rounded - size;
                if is_start {
                    sum += rounded;
                    *wastes.entry(waste).or_default() += 1;
                    let top = wastes.last_key_value().map_or(0, |(&w, _)| w);
                    best = best.max(sum - top);
                } else {
                    sum -= rounded;
                    if let Some(count) = wastes.get_mut(&waste) {
                        *count -= 1;
                        if *count == 0 {
                            wastes.remove(&waste);
                        }
                    }
                }
            }
        }
        u64::try_from(best).unwrap_or(u64::MAX)
    }

    /// The number of steps spanned: one past the largest lifetime end (0 when empty).
    pub fn horizon(&self) -> u64 {
        self.buffers
            .iter()
            .map(|b| b.lifetime.end)
            .max()
            .unwrap_or(0)
    }

    /// Checks a placement and returns its peak (max `offset + size`, 0 when empty).
    ///
    /// Verifies length, alignment, overflow, pairwise disjointness of buffers alive together
    /// (a sweep over lifetimes with an ordered map of live byte ranges), and the capacity.
    pub fn check(&self, placement: &Placement) -> Result<u64, PlacementError> {
        if placement.offsets.len() != self.buffers.len() {
            return Err(PlacementError::WrongLength {
                expected: self.buffers.len(),
                got: placement.offsets.len(),
            });
        }
        let mut peak = 0u64;
        for (index, (b, &off)) in self.buffers.iter().zip(&placement.offsets).enumerate() {
            if b.alignment == 0 || off % b.alignment != 0 {
                return Err(PlacementError::Misaligned {
                    index,
                    offset: off,
                    alignment: b.alignment,
                });
            }
            let end = off
                .checked_add(b.size)
                .ok_or(PlacementError::Overflow { index })?;
            peak = peak.max(end);
        }
        let events = self.events();
        // Live byte ranges keyed by (offset, buffer) -> end; disjoint at all times.
        let mut live: BTreeMap<(u64, usize), u64> = BTreeMap::new();
        for (_, is_start, i) in events {
            let off = placement.offsets[i];
            let b = &self.buffers[i];
            if !is_start {
                live.remove(&(off, i));
                continue;
            }
            let end = off + b.size;
            // The nearest range starting at or before `off`, and the nearest after it.
            if let Some((&(_, j), &jend)) = live.range(..=(off, usize::MAX)).next_back() {
                if jend > off {
                    return Err(PlacementError::Overlap {
                        a: j.min(i),
                        b: j.max(i),
                    });
                }
            }
            if let Some((&(joff, j), _)) = live.range((off, usize::MAX)..).next() {
                if joff < end {
                    return Err(PlacementError::Overlap {
                        a: j.min(i),
                        b: j.max(i),
                    });
                }
            }
            live.insert((off, i), end);
        }
        if let Some(capacity) = self.capacity {
            if peak > capacity {
                return Err(PlacementError::OverCapacity { peak, capacity });
            }
        }
        Ok(peak)
    }
}

/// Test fixtures shared by the solver's unit tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::{Buffer, Lifetime};

    /// A buffer alive `[start, end)` of `size` bytes, alignment 1.
    pub(crate) fn buf(start: u64, end: u64, size: u64) -> Buffer {
        aligned(start, end, size, 1)
    }

    /// A buffer alive `[start, end)` of `size` bytes with the given alignment.
    pub(crate) fn aligned(start: u64, end: u64, size: u64, alignment: u64) -> Buffer {
        Buffer {
            lifetime: Lifetime::new(start, end),
            size,
            alignment,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::buf;
    use super::*;

    #[test]
    fn load_counts_buffers_that_touch_end_to_start_as_disjoint() {
        let p = PlacementProblem::new(vec![buf(0, 2, 10), buf(2, 4, 20), buf(1, 3, 5)]);
        assert_eq!(p.load(), 25);
    }

    #[test]
    fn an_address_space_overflow_names_the_step_and_the_buffer_whose_start_crossed_it() {
        let half = u64::MAX / 2 + 1;
        // [0, 4) and [3, 5) touch [5, 6) end to start: only at step 3 do two halves meet.
        let p = PlacementProblem::new(vec![buf(0, 4, half), buf(5, 6, half), buf(3, 5, half)]);
        assert_eq!(
            p.address_space_overflow(),
            Some((3, 2, 2 * u128::from(half)))
        );
        let fits = PlacementProblem::new(vec![buf(0, 4, half), buf(4, 6, half), buf(0, 1, 1)]);
        assert_eq!(fits.address_space_overflow(), None);
        assert_eq!(fits.load(), half + 1);
    }

    #[test]
    fn the_aligned_load_is_load_when_nothing_is_aligned() {
        let p = PlacementProblem::new(vec![buf(0, 2, 10), buf(2, 4, 20), buf(1, 3, 5)]);
        assert_eq!(p.aligned_load(), 25);
        assert_eq!(PlacementProblem::default().aligned_load(), 0);
    }

    #[test]
    fn the_aligned_load_rounds_every_live_buffer_but_the_one_that_would_round_most() {
        use super::fixtures::aligned;
        // One step: 5, 300 and 10 bytes at 256-byte offsets. Rounded 256 + 512 + 256; the
        // 5-byte buffer on top saves 251: 773 bytes, which the order 300, 10, 5 reaches.
        let p = PlacementProblem::new(vec![
            aligned(0, 1, 5, 256),
            aligned(0, 1, 300, 256),
            aligned(0, 1, 10, 256),
        ]);
        assert_eq!(p.load(), 315);
        assert_eq!(p.aligned_load(), 773);
        let placed = Placement {
            offsets: vec![768, 0, 512],
        };
        assert_eq!(p.check(&placed), Ok(773));
        // Buffers that never live together round nothing.
        let apart = PlacementProblem::new(vec![aligned(0, 1, 5, 256), aligned(1, 2, 300, 256)]);
        assert_eq!(apart.aligned_load(), 300);
    }

    #[test]
    fn the_aligned_load_counts_only_buffers_aligned_at_least_as_much() {
        use super::fixtures::aligned;
        // A 1-byte unaligned buffer may sit in the 4-aligned one's rounding: 3 + 1 = 4 bytes.
        let p = PlacementProblem::new(vec![aligned(0, 2, 3, 4), aligned(0, 2, 1, 1)]);
        assert_eq!(p.aligned_load(), 4);
        // Two 4-aligned 3-byte buffers need 4 + 3 = 7 bytes, one more than their LOAD; with a
        // 2-byte unaligned one beside them LOAD (8) is the larger bound.
        let q = PlacementProblem::new(vec![
            aligned(0, 2, 3, 4),
            aligned(0, 2, 3, 4),
            aligned(1, 2, 2, 1),
        ]);
        assert_eq!((q.load(), q.aligned_load()), (8, 8));
        let r = PlacementProblem::new(vec![aligned(0, 2, 3, 4), aligned(0, 2, 3, 4)]);
        assert_eq!((r.load(), r.aligned_load()), (6, 7));
    }

    #[test]
    fn the_aligned_load_of_one_step_is_at_least_its_packed_bytes_and_equal_for_one_alignment() {
        use super::fixtures::aligned;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..500 {
            let mut next = |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let one = next(2) == 0;
            let bufs: Vec<Buffer> = (0..1 + next(6))
                .map(|_| {
                    let a = if one { 64 } else { 1 << next(8) };
                    aligned(0, 1, 1 + next(700), a)
                })
                .collect();
            let packed = packed_bytes(bufs.iter().map(|b| (b.size, b.alignment)));
            let p = PlacementProblem::new(bufs);
            assert!(p.aligned_load() >= packed, "{p:?}");
            if one {
                assert_eq!(p.aligned_load(), packed, "{p:?}");
            }
        }
    }

    #[test]
    fn the_aligned_load_of_huge_buffers_saturates_instead_of_overflowing() {
        use super::fixtures::aligned;
        let p = PlacementProblem::new(vec![
            aligned(0, 1, u64::MAX - 3, 8),
            aligned(0, 1, u64::MAX - 3, 8),
        ]);
        assert_eq!(p.aligned_load(), u64::MAX);
    }

    #[test]
    fn checker_accepts_reuse_across_disjoint_lifetimes() {
        let p = PlacementProblem::new(vec![buf(0, 2, 10), buf(2, 4, 10)]);
        let peak = p
            .check(&Placement {
                offsets: vec![0, 0],
            })
            .unwrap();
        assert_eq!(peak, 10);
    }

    #[test]
    fn checker_rejects_overlap_of_live_buffers_and_names_both() {
        let p = PlacementProblem::new(vec![buf(0, 3, 10), buf(2, 4, 10), buf(5, 6, 1)]);
        assert_eq!(
            p.check(&Placement {
                offsets: vec![0, 5, 0]
            }),
            Err(PlacementError::Overlap { a: 0, b: 1 })
        );
    }

    #[test]
    fn checker_rejects_misalignment_and_capacity_excess() {
        let mut p = PlacementProblem::new(vec![Buffer {
            lifetime: Lifetime::new(0, 1),
            size: 8,
            alignment: 4,
        }]);
        assert!(matches!(
            p.check(&Placement { offsets: vec![2] }),
            Err(PlacementError::Misaligned { index: 0, .. })
        ));
        p.capacity = Some(10);
        assert!(matches!(
            p.check(&Placement { offsets: vec![4] }),
            Err(PlacementError::OverCapacity {
                peak: 12,
                capacity: 10
            })
        ));
    }

    #[test]
    fn align_up_rounds_and_reports_overflow() {
        assert_eq!(align_up(0, 256), Some(0));
        assert_eq!(align_up(1, 256), Some(256));
        assert_eq!(align_up(256, 256), Some(256));
        assert_eq!(align_up(u64::MAX, 2), None);
    }
}
