//! The placement program's view of a problem: the byte unit of its slots, and the layout of
//! the movable buffers (their offset steps, movable neighbours and fixed ranges), which
//! compacts placements onto the model's grid and lists the gaps each buffer may take.

use super::program::IlpError;
use crate::problem::PlacementProblem;

/// Greatest common divisor.
pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `x` rounded up to a multiple of `m` (`m ≥ 1`); `None` on overflow.
pub(crate) fn round_up(x: u64, m: u64) -> Option<u64> {
    x.div_ceil(m).checked_mul(m)
}

/// The byte unit `u` of the model: it divides every size and every fixed offset, and every
/// alignment either divides it or is a multiple of it. Then every left-packed placement (each
/// movable buffer at the lowest aligned offset above the buffers below it) has offsets that are
/// multiples of `lcm(alignment, u)`, so slots in that unit lose no optimum.
pub(crate) fn model_unit(problem: &PlacementProblem, offsets: &[u64], free: &[bool]) -> u64 {
    let mut g = 0;
    for (i, b) in problem.buffers.iter().enumerate() {
        g = gcd(g, b.size);
        if !free[i] {
            g = gcd(g, offsets[i]);
        }
    }
    for b in &problem.buffers {
        if g % b.alignment != 0 {
            g = gcd(g, b.alignment);
        }
    }
    g.max(1)
}

/// What the model needs to know about the movable buffers.
pub(crate) struct Layout {
    /// Movable buffers, by index.
    pub(crate) free: Vec<usize>,
    /// Offset step of each movable buffer (`lcm(alignment, u)`), by position in `free`.
    pub(crate) step: Vec<u64>,
    /// Movable neighbours (alive together) of each movable buffer, by position in `free`.
    pub(crate) free_nbrs: Vec<Vec<usize>>,
    /// Merged byte ranges `[start, end)` of the fixed buffers alive with each movable buffer.
    pub(crate) fixed_ranges: Vec<Vec<(u64, u64)>>,
}

impl Layout {
    /// Finds conflicts; fails when more than `cap` pairs involve a movable buffer.
    pub(crate) fn new(
        problem: &PlacementProblem,
        offsets: &[u64],
        free_mask: &[bool],
        unit: u64,
        cap: usize,
    ) -> Result<Layout, IlpError> {
        let bufs = &problem.buffers;
        let free: Vec<usize> = (0..bufs.len()).filter(|&i| free_mask[i]).collect();
        let mut slot_of = vec![None; bufs.len()];
        for (k, &i) in free.iter().enumerate() {
            slot_of[i] = Some(k);
        }
        let mut pairs = 0usize;
        let mut free_nbrs = vec![Vec::new(); free.len()];
        let mut fixed_ranges = Vec::with_capacity(free.len());
        for (k, &i) in free.iter().enumerate() {
            let mut ranges = Vec::new();
            for (j, b) in bufs.iter().enumerate() {
                if j == i || !b.lifetime.overlaps(&bufs[i].lifetime) {
                    continue;
                }
                match slot_of[j] {
                    Some(l) => {
                        free_nbrs[k].push(l);
                        if l > k {
                            pairs += 1;
                        }
                    }
                    None => ranges.push((offsets[j], offsets[j].saturating_add(b.size))),
                }
            }
            ranges.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
            for (s, e) in ranges {
                match merged.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => merged.push((s, e)),
                }
            }
            // Fixed neighbours cost at most one gap binary per merged range.
            pairs += merged.len();
            fixed_ranges.push(merged);
        }
        if pairs > cap {
            return Err(IlpError::TooLarge { pairs, cap });
        }
        let step = free
            .iter()
            .map(|&i| {
                let a = bufs[i].alignment;
                a / gcd(a, unit) * unit
            })
            .collect();
        Ok(Layout {
            free,
            step,
            free_nbrs,
            fixed_ranges,
        })
    }

    /// Lowers every movable buffer as far as it goes, in the order of `offsets` (ties by index),
    /// keeping fixed buffers in place. Valid whenever the order is (always, as it only places a
    /// buffer above its earlier neighbours), never raises an offset of a valid placement, and
    /// puts every movable offset on its step. `None` on overflow.
    pub(crate) fn compact(&self, problem: &PlacementProblem, offsets: &[u64]) -> Option<Vec<u64>> {
        let bufs = &problem.buffers;
        let mut order: Vec<usize> = (0..self.free.len()).collect();
        order.sort_unstable_by_key(|&k| (offsets[self.free[k]], self.free[k]));
        let mut out = offsets.to_vec();
        let mut placed = vec![false; self.free.len()];
        for k in order {
            let i = self.free[k];
            let size = bufs[i].size;
            let mut low = 0u64;
            for &l in &self.free_nbrs[k] {
                if placed[l] {
                    let j = self.free[l];
                    low = low.max(out[j].checked_add(bufs[j].size)?);
                }
            }
            let step = self.step[k];
            let mut off = round_up(low, step)?;
            for &(s, e) in &self.fixed_ranges[k] {
                if e <= off {
                    continue;
                }
                if s >= off.checked_add(size)? {
                    break;
                }
                off = round_up(e, step)?;
            }
            out[i] = off;
            placed[k] = true;
        }
        Some(out)
    }

    /// Slot ranges `[lo, hi]` of the gaps between fixed ranges where movable buffer `k` fits
    /// below `ub` (its highest allowed offset, in bytes).
    pub(crate) fn gaps(&self, problem: &PlacementProblem, k: usize, ub: u64) -> Vec<(u64, u64)> {
        let size = problem.buffers[self.free[k]].size;
        let step = self.step[k];
        let mut gaps = Vec::new();
        let mut push = |from: u64, to: u64| {
            // Offsets in [from, to], on the step.
            let lo = from.div_ceil(step);
            let hi = to / step;
            if from <= to && lo <= hi {
                gaps.push((lo, hi));
            }
        };
        let mut cur = 0u64;
        for &(s, e) in &self.fixed_ranges[k] {
            if cur > ub {
                break;
            }
            if let Some(top) = s.checked_sub(size) {
                push(cur, top.min(ub));
            }
            cur = cur.max(e);
        }
        if cur <= ub {
            push(cur, ub);
        }
        gaps
    }
}
