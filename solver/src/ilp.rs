//! Placement integer programs solved by HiGHS through the `highs` crate: the big-M disjunctive
//! model of dynamic storage allocation that OLLA, TelaMalloc and minimalloc's MIP baseline start
//! from.
//!
//! **Model.** Minimise the peak `P` subject to `offset_i + size_i ≤ P` for every movable buffer
//! and, for every pair of movable buffers alive together, one binary `z_ij` choosing which lies
//! below (`offset_i + size_i ≤ offset_j + M·z_ij`, `offset_j + size_j ≤ offset_i + M·(1 − z_ij)`,
//! with a per-pair big-M from the offsets' bounds). (Clique rows over each buffer's heaviest
//! step were tried and removed: they cut off the optimum on an aligned 4-buffer instance, kept
//! in `proptest-regressions/ilp.txt`.) Offsets are integer *slots* in units of
//! `lcm(alignment, u)`, where `u` is the largest byte unit every left-packed placement is a
//! multiple of (the gcd of sizes and fixed offsets, adjusted for alignments), which keeps the
//! coefficients small and exact and lets HiGHS see an integral objective. Fixed buffers
//! ([`place_ilp_window`]) get no variable: each movable buffer chooses one of the free gaps
//! between the fixed buffers alive with it (one binary per gap; none when one gap fits).
//!
//! **Size** for `w` movable buffers, `c` conflicting movable pairs and `g` gap binaries:
//! `1 + w + c + g` columns, `w + 2c + 3·(buffers with several gaps)` rows. Exact, but HiGHS'
//! LP bound rarely rises above LOAD on big instances, so it takes a pair cap, a time limit and
//! a warm start; past a few hundred pairs prefer windows around the peak.
//!
//! **Guarantees.** The warm start is first compacted (each movable buffer lowered as far as it
//! goes, in the order of its offsets, which never raises an offset) and given to HiGHS as its
//! incumbent; HiGHS' answer is compacted the same way and re-checked with
//! [`PlacementProblem::check`], so the result is valid and never worse than the warm start. The
//! lower bound of [`place_ilp`] is `max(LOAD, ⌈mip_dual_bound⌉)`, read from HiGHS' info after the
//! solve, so a time-limited run still reports a proven gap. With one thread (the default) and no
//! time limit runs are deterministic; the `threads` option only takes effect the first time
//! HiGHS runs on an OS thread (HiGHS keeps one scheduler per thread).
//!
//! **Cancellation.** [`IlpOptions::cancel`] is polled from HiGHS' MIP-interrupt callback
//! (installed through `highs-sys`: the `highs` crate does not expose callbacks). HiGHS polls at
//! its limit checks, so a stop can lag by around a second on big models; an interrupted run
//! returns its best placement like a timed-out one ([`SolveStatus::TimeLimit`]).
//!
//! References: Steiner et al., "OLLA: Optimizing the Lifetime and Location of Arrays" (2022);
//! Sekiyama et al., "TelaMalloc" (ASPLOS 2023); Moffitt, "MiniMalloc" (ASPLOS 2023); HiGHS.

use crate::budget::{Budget, SolveStats, SolveStatus};
use crate::problem::{Placement, PlacementError, PlacementProblem};
use highs::{Col, HighsOptionValue, RowProblem, Sense};
use std::ffi::c_void;
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use thiserror::Error;

/// Largest magnitude (in model units) represented exactly by an `f64` column value.
const MAX_EXACT: u64 = 1 << 52;

/// Why an integer program could not be built or solved.
#[derive(Debug, Error)]
pub enum IlpError {
    /// The problem itself is malformed.
    #[error(transparent)]
    Problem(#[from] PlacementError),
    /// The warm start is not a valid placement.
    #[error("warm start is not a valid placement: {0}")]
    WarmStart(PlacementError),
    /// Too many binaries (movable pairs plus gaps between fixed neighbours) for the cap.
    #[error("{pairs} binaries (buffer pairs and gaps) exceed the model's cap of {cap}")]
    TooLarge {
        /// Binaries the model would need.
        pairs: usize,
        /// The cap.
        cap: usize,
    },
    /// A window names a buffer that does not exist.
    #[error("window names buffer {index}, but the problem has {len} buffers")]
    BadWindow {
        /// The offending index.
        index: usize,
        /// Number of buffers.
        len: usize,
    },
    /// Byte quantities too large to be represented exactly in the model.
    #[error("peak of {peak} bytes is too large to model exactly")]
    OutOfRange {
        /// The warm start's peak.
        peak: u64,
    },
    /// HiGHS failed.
    #[error("HiGHS: {0}")]
    Solver(String),
}

/// Settings of [`place_ilp`] and [`place_ilp_window`].
#[derive(Debug, Clone)]
pub struct IlpOptions<'a> {
    /// Time limit, and a limit on HiGHS branch-and-bound nodes (`mip_max_nodes`).
    pub budget: Budget,
    /// HiGHS threads (1 = deterministic).
    pub threads: u32,
    /// Largest number of binaries to model: pairs of movable buffers alive together, plus one
    /// per merged range of fixed buffers alive with a movable one.
    pub max_pairs: usize,
    /// HiGHS `mip_rel_gap`: relative gap at which the search stops (0 = prove optimality).
    pub mip_rel_gap: f64,
    /// When set to `true` by another thread, HiGHS stops at its next MIP interrupt check.
    pub cancel: Option<&'a AtomicBool>,
    /// Called from HiGHS' callback on every improving solution of the model with its peak and
    /// proven bound (bytes; for a window, of the model that moves only the window).
    pub progress: Option<&'a crate::budget::ProgressFn>,
}

impl Default for IlpOptions<'_> {
    fn default() -> Self {
        IlpOptions {
            budget: Budget::UNLIMITED,
            threads: 1,
            max_pairs: 5_000,
            mip_rel_gap: 0.0,
            cancel: None,
            progress: None,
        }
    }
}

/// The placement found and its stats.
#[derive(Debug, Clone)]
pub struct IlpOutcome {
    /// Offsets (valid, peak never above the warm start's).
    pub placement: Placement,
    /// Status, time, peak and global lower bound (`max(LOAD, dual bound)` for [`place_ilp`];
    /// LOAD for a window, whose model only bounds the moves it allows).
    pub stats: SolveStats,
    /// Proven lower bound of the model that was solved: for a window, no placement moving only
    /// the window's buffers goes below it (capped at the objective: equal means exhausted).
    pub model_bound: u64,
}

/// Minimises the peak of `problem` exactly, warm-started from `warm` (a valid placement).
pub fn place_ilp(
    problem: &PlacementProblem,
    warm: &Placement,
    opts: &IlpOptions<'_>,
) -> Result<IlpOutcome, IlpError> {
    solve(problem, warm, &vec![true; problem.buffers.len()], opts)
}

/// Minimises the peak moving only the buffers in `window`; every other buffer keeps its offset
/// from `warm` (a valid placement). Duplicate indices are allowed.
pub fn place_ilp_window(
    problem: &PlacementProblem,
    warm: &Placement,
    window: &[usize],
    opts: &IlpOptions<'_>,
) -> Result<IlpOutcome, IlpError> {
    let len = problem.buffers.len();
    let mut free = vec![false; len];
    for &index in window {
        *free
            .get_mut(index)
            .ok_or(IlpError::BadWindow { index, len })? = true;
    }
    solve(problem, warm, &free, opts)
}

/// Greatest common divisor.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `x` rounded up to a multiple of `m` (`m ≥ 1`); `None` on overflow.
fn round_up(x: u64, m: u64) -> Option<u64> {
    x.div_ceil(m).checked_mul(m)
}

/// The byte unit `u` of the model: it divides every size and every fixed offset, and every
/// alignment either divides it or is a multiple of it. Then every left-packed placement (each
/// movable buffer at the lowest aligned offset above the buffers below it) has offsets that are
/// multiples of `lcm(alignment, u)`, so slots in that unit lose no optimum.
fn model_unit(problem: &PlacementProblem, offsets: &[u64], free: &[bool]) -> u64 {
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
struct Layout {
    /// Movable buffers, by index.
    free: Vec<usize>,
    /// Offset step of each movable buffer (`lcm(alignment, u)`), by position in `free`.
    step: Vec<u64>,
    /// Movable neighbours (alive together) of each movable buffer, by position in `free`.
    free_nbrs: Vec<Vec<usize>>,
    /// Merged byte ranges `[start, end)` of the fixed buffers alive with each movable buffer.
    fixed_ranges: Vec<Vec<(u64, u64)>>,
}

impl Layout {
    /// Finds conflicts; fails when more than `cap` pairs involve a movable buffer.
    fn new(
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
    fn compact(&self, problem: &PlacementProblem, offsets: &[u64]) -> Option<Vec<u64>> {
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
    fn gaps(&self, problem: &PlacementProblem, k: usize, ub: u64) -> Vec<(u64, u64)> {
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

fn set_option<V: HighsOptionValue>(
    model: &mut highs::Model,
    name: &str,
    value: V,
) -> Result<(), IlpError> {
    model
        .try_set_option(name, value)
        .map_err(|_| IlpError::Solver(format!("setting option {name}")))
}

/// What the HiGHS callback watches: a stop flag, and a progress callback receiving the MIP's
/// primal and dual bounds (in model units; `scale` converts them to bytes).
pub(crate) struct HighsWatch<'a> {
    /// Raised: HiGHS stops at its next MIP interrupt check.
    pub cancel: Option<&'a AtomicBool>,
    /// Called on every improving solution with `(primal, dual)` in bytes.
    pub progress: Option<&'a crate::budget::ProgressFn>,
    /// Bytes per model unit of the objective.
    pub scale: f64,
}

/// The HiGHS callback: asks for an interrupt when the stop flag is raised, and reports
/// improving solutions to the progress callback.
///
/// # Safety
/// `user` must be null or point to a [`HighsWatch`] alive for the whole solve; `data_in` and
/// `data_out` must be null or valid (HiGHS guarantees it for its callbacks).
unsafe extern "C" fn watch_callback(
    kind: c_int,
    _message: *const c_char,
    data_out: *const highs_sys::HighsCallbackDataOut,
    data_in: *mut highs_sys::HighsCallbackDataIn,
    user: *mut c_void,
) {
    if user.is_null() {
        return;
    }
    // SAFETY: per the contract above, `user` is a live `HighsWatch`.
    let watch = unsafe { &*(user as *const HighsWatch<'_>) };
    if kind == highs_sys::kHighsCallbackMipInterrupt && !data_in.is_null() {
        if watch.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            // SAFETY: `data_in` is valid (checked non-null; HiGHS owns it for this call).
            unsafe { (*data_in).user_interrupt = 1 };
        }
    } else if kind == highs_sys::kHighsCallbackMipImprovingSolution && !data_out.is_null() {
        if let Some(progress) = watch.progress {
            // SAFETY: `data_out` is valid for this call.
            let (primal, dual) =
                unsafe { ((*data_out).mip_primal_bound, (*data_out).mip_dual_bound) };
            let bytes = |v: f64| {
                if v.is_finite() && v > 0.0 {
                    (v * watch.scale) as u64
                } else {
                    0
                }
            };
            // A panic must not unwind into C++.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                progress.report(bytes(primal), bytes(dual).min(bytes(primal)))
            }));
        }
    }
}

/// Installs [`watch_callback`] with `watch`: interrupts when its flag is raised, reports
/// improving solutions to its progress callback. The caller keeps `watch` alive (borrowed)
/// until the model is solved and dropped.
pub(crate) fn install_watch(model: &mut highs::Model, watch: &HighsWatch<'_>) -> Result<(), ()> {
    // SAFETY: the model's pointer is a live Highs instance; `watch` outlives the solve (the
    // caller borrows it for the whole solve, and the solved model is dropped before it).
    let ok = unsafe {
        let ptr = model.as_mut_ptr();
        highs_sys::Highs_setCallback(
            ptr,
            Some(watch_callback),
            watch as *const HighsWatch<'_> as *mut c_void,
        ) == highs_sys::STATUS_OK
            && (watch.cancel.is_none()
                || highs_sys::Highs_startCallback(ptr, highs_sys::kHighsCallbackMipInterrupt)
                    == highs_sys::STATUS_OK)
            && (watch.progress.is_none()
                || highs_sys::Highs_startCallback(
                    ptr,
                    highs_sys::kHighsCallbackMipImprovingSolution,
                ) == highs_sys::STATUS_OK)
    };
    if ok {
        Ok(())
    } else {
        Err(())
    }
}

/// Solves `model` with HiGHS' MIP-interrupt callback watching `cancel` (for integer programs
/// built outside this crate): once the flag is raised, the branch and bound stops at its next
/// limit check with status `ReachedInterrupt` and its best solution so far. The callback is
/// detached before returning, so the solved model keeps no reference to `cancel`. Without a
/// flag this is a plain solve.
pub fn solve_interruptible(
    mut model: highs::Model,
    cancel: Option<&AtomicBool>,
) -> Result<highs::SolvedModel, IlpError> {
    let watch = HighsWatch {
        cancel,
        progress: None,
        scale: 1.0,
    };
    if cancel.is_some() {
        install_watch(&mut model, &watch)
            .map_err(|_| IlpError::Solver("installing the interrupt callback".into()))?;
    }
    let mut solved = model
        .try_solve()
        .map_err(|e| IlpError::Solver(format!("run failed: {e:?}")))?;
    if cancel.is_some() {
        // SAFETY: a live Highs instance owned by `solved`; a null user pointer makes the
        // callback return at once, so nothing refers to `watch` after this call.
        unsafe {
            highs_sys::Highs_setCallback(
                solved.as_mut_ptr(),
                Some(watch_callback),
                std::ptr::null_mut(),
            );
        }
    }
    Ok(solved)
}

/// Branch-and-bound nodes HiGHS explored in `solved` (its `mip_node_count` info, an `int64`
/// that the `highs` crate's `int_info_value` cannot read), if it reports them.
pub fn mip_node_count(solved: &highs::SolvedModel) -> Option<u64> {
    let mut nodes: i64 = 0;
    // SAFETY: a live Highs instance owned by `solved`; the name is NUL-terminated and
    // `nodes` is a valid `int64_t` to write to.
    let status = unsafe {
        highs_sys::Highs_getInt64InfoValue(solved.as_ptr(), c"mip_node_count".as_ptr(), &mut nodes)
    };
    (status == highs_sys::STATUS_OK)
        .then(|| u64::try_from(nodes).ok())
        .flatten()
}

/// The shared solver: `free[i]` says whether buffer `i` may move.
fn solve(
    problem: &PlacementProblem,
    warm: &Placement,
    free_mask: &[bool],
    opts: &IlpOptions<'_>,
) -> Result<IlpOutcome, IlpError> {
    let started = Instant::now();
    problem.validate()?;
    let bufs = &problem.buffers;
    let uncapped = PlacementProblem::new(bufs.clone());
    let warm_peak = uncapped.check(warm).map_err(IlpError::WarmStart)?;
    let load = problem.load();
    let global = free_mask.iter().all(|&f| f);
    let finish = |offsets: Vec<u64>, peak: u64, lower: u64, model_bound: u64, stopped: bool| {
        let lower = lower.min(peak);
        IlpOutcome {
            placement: Placement { offsets },
            stats: SolveStats {
                status: if peak <= lower {
                    SolveStatus::Optimal
                } else if stopped {
                    SolveStatus::TimeLimit
                } else {
                    SolveStatus::Heuristic
                },
                elapsed: started.elapsed(),
                objective: peak,
                lower_bound: lower,
            },
            model_bound: model_bound.min(peak),
        }
    };
    let unit = model_unit(problem, &warm.offsets, free_mask);
    let layout = Layout::new(problem, &warm.offsets, free_mask, unit, opts.max_pairs)?;
    if warm_peak <= load {
        return Ok(finish(warm.offsets.clone(), warm_peak, load, load, false));
    }
    // Compact the warm start: valid, no higher, and on the model's grid.
    let (best, best_peak) = match layout.compact(problem, &warm.offsets).and_then(|o| {
        uncapped
            .check(&Placement { offsets: o.clone() })
            .ok()
            .map(|p| (o, p))
    }) {
        Some((o, p)) if p <= warm_peak => (o, p),
        _ => return Ok(finish(warm.offsets.clone(), warm_peak, load, load, false)),
    };
    let fixed_peak = (0..bufs.len())
        .filter(|&i| !free_mask[i])
        .map(|i| best[i] + bufs[i].size)
        .max()
        .unwrap_or(0);
    let floor = load.max(fixed_peak);
    let cancelled = || opts.cancel.is_some_and(|c| c.load(Ordering::Relaxed));
    let remaining = opts
        .budget
        .time
        .map(|t| t.saturating_sub(started.elapsed()).as_secs_f64());
    if best_peak <= floor || layout.free.is_empty() {
        let lower = if global { floor } else { load };
        return Ok(finish(best, best_peak, lower, floor, false));
    }
    if cancelled() || remaining.is_some_and(|r| r <= 0.0) {
        return Ok(finish(best, best_peak, load, floor, true));
    }
    if best_peak / unit > MAX_EXACT {
        return Err(IlpError::OutOfRange { peak: best_peak });
    }

    // ---- Build the model (all byte quantities divided by `unit`, exact in f64). ----
    let u = unit as f64;
    let mut pb = RowProblem::default();
    let mut start: Vec<f64> = Vec::new();
    let peak_col = pb.add_integer_column(1.0, (floor / unit) as f64..=(best_peak / unit) as f64);
    start.push((best_peak / unit) as f64);
    let n_free = layout.free.len();
    let mut slot_cols: Vec<Col> = Vec::with_capacity(n_free);
    // Offset bounds in bytes of each movable buffer, from its gaps.
    let mut off_lo = vec![0u64; n_free];
    let mut off_hi = vec![0u64; n_free];
    let mut gap_lists = Vec::with_capacity(n_free);
    for (k, &i) in layout.free.iter().enumerate() {
        let b = &bufs[i];
        let step = layout.step[k];
        let gaps = layout.gaps(problem, k, best_peak - b.size);
        let warm_slot = best[i] / step;
        let (Some(&(lo, _)), Some(&(_, hi))) = (gaps.first(), gaps.last()) else {
            return Err(IlpError::Solver(format!(
                "buffer {i} has no room below the warm peak"
            )));
        };
        let col = pb.add_integer_column(0.0, lo as f64..=hi as f64);
        start.push(warm_slot as f64);
        slot_cols.push(col);
        off_lo[k] = lo * step;
        off_hi[k] = hi * step;
        let sf = (step as f64) / u;
        pb.add_row(..=-(b.size as f64) / u, [(col, sf), (peak_col, -1.0)]);
        gap_lists.push(gaps);
    }
    // Gap choice for buffers with several gaps between fixed neighbours.
    for (k, gaps) in gap_lists.iter().enumerate() {
        if gaps.len() < 2 {
            continue;
        }
        let warm_slot = best[layout.free[k]] / layout.step[k];
        let ys: Vec<Col> = gaps
            .iter()
            .map(|&(lo, hi)| {
                start.push(if (lo..=hi).contains(&warm_slot) {
                    1.0
                } else {
                    0.0
                });
                pb.add_integer_column(0.0, 0.0..=1.0)
            })
            .collect();
        pb.add_row(1.0..=1.0, ys.iter().map(|&y| (y, 1.0)));
        let x = slot_cols[k];
        pb.add_row(
            0.0..,
            std::iter::once((x, 1.0))
                .chain(ys.iter().zip(gaps).map(|(&y, &(lo, _))| (y, -(lo as f64)))),
        );
        pb.add_row(
            ..=0.0,
            std::iter::once((x, 1.0))
                .chain(ys.iter().zip(gaps).map(|(&y, &(_, hi))| (y, -(hi as f64)))),
        );
    }
    // Disjunctions between movable buffers alive together. z = 0: i below j; z = 1: j below i.
    for k in 0..n_free {
        for &l in &layout.free_nbrs[k] {
            if l <= k {
                continue;
            }
            let (i, j) = (layout.free[k], layout.free[l]);
            let (si, sj) = (bufs[i].size, bufs[j].size);
            let m1 = (off_hi[k] + si).saturating_sub(off_lo[l]) as f64 / u;
            let m2 = (off_hi[l] + sj).saturating_sub(off_lo[k]) as f64 / u;
            let (fi, fj) = (layout.step[k] as f64 / u, layout.step[l] as f64 / u);
            let z = pb.add_integer_column(0.0, 0.0..=1.0);
            start.push(if best[i] < best[j] { 0.0 } else { 1.0 });
            let (xi, xj) = (slot_cols[k], slot_cols[l]);
            pb.add_row(..=-(si as f64) / u, [(xi, fi), (xj, -fj), (z, -m1)]);
            pb.add_row(..=m2 - sj as f64 / u, [(xj, fj), (xi, -fi), (z, m2)]);
        }
    }

    // ---- Solve. ----
    let highs_err = |what: &str| IlpError::Solver(what.to_string());
    let mut model = pb
        .try_optimise(Sense::Minimise)
        .map_err(|e| IlpError::Solver(format!("building the model: {e:?}")))?;
    set_option(&mut model, "output_flag", false)?;
    let threads = i32::try_from(opts.threads.max(1)).unwrap_or(i32::MAX);
    set_option(&mut model, "threads", threads)?;
    set_option(&mut model, "mip_rel_gap", opts.mip_rel_gap.max(0.0))?;
    // With presolve on, a model that presolve solves outright hands back the warm start as its
    // solution (the objective value is right, the column values stale).
    set_option(&mut model, "presolve", "off")?;
    if let Some(r) = remaining {
        set_option(&mut model, "time_limit", r)?;
    }
    if let Some(n) = opts.budget.nodes {
        // Branch-and-bound nodes: a limit that, unlike time, keeps results deterministic.
        set_option(
            &mut model,
            "mip_max_nodes",
            i32::try_from(n).unwrap_or(i32::MAX),
        )?;
    }
    model
        .try_set_solution(Some(&start), None, None, None)
        .map_err(|_| highs_err("setting the warm start"))?;
    let watch = HighsWatch {
        cancel: opts.cancel,
        progress: opts.progress,
        scale: unit as f64,
    };
    if watch.cancel.is_some() || watch.progress.is_some() {
        install_watch(&mut model, &watch)
            .map_err(|_| highs_err("installing the interrupt callback"))?;
    }
    let solved = model
        .try_solve()
        .map_err(|e| IlpError::Solver(format!("run failed: {e:?}")))?;
    // SAFETY: a live Highs instance owned by `solved`.
    let raw_status = unsafe { highs_sys::Highs_getModelStatus(solved.as_ptr()) };
    let stopped = matches!(
        raw_status,
        highs_sys::MODEL_STATUS_REACHED_TIME_LIMIT | highs_sys::MODEL_STATUS_REACHED_INTERRUPT
    );
    let dual_bound = solved
        .double_info_value(c"mip_dual_bound")
        .ok()
        .filter(|d| d.is_finite())
        .map(|d| {
            // Units -> bytes, rounding up (the optimum is a whole number of units) with a
            // tolerance for LP noise.
            let units = (d - 1e-6 * d.abs().max(1.0)).ceil().max(0.0);
            if units >= best_peak as f64 {
                best_peak
            } else {
                (units as u64).saturating_mul(unit)
            }
        })
        .unwrap_or(0);
    let feasible = solved.int_info_value(c"primal_solution_status").ok() == Some(2);
    let mut result = (best, best_peak);
    if feasible {
        let cols = solved.get_solution();
        let cols = cols.columns();
        let mut offsets = result.0.clone();
        let mut ok = true;
        for (k, &i) in layout.free.iter().enumerate() {
            let v = cols.get(slot_cols[k].index()).copied().unwrap_or(f64::NAN);
            match (v.is_finite() && v > -0.5)
                .then(|| (v.round() as u64).checked_mul(layout.step[k]))
                .flatten()
            {
                Some(off) => offsets[i] = off,
                None => ok = false,
            }
        }
        if ok {
            if let Some(o) = layout.compact(problem, &offsets) {
                if let Ok(p) = uncapped.check(&Placement { offsets: o.clone() }) {
                    if p <= result.1 {
                        result = (o, p);
                    }
                }
            }
        }
    }
    drop(solved);
    let model_bound = floor.max(dual_bound);
    let lower = if global { model_bound } else { load };
    Ok(finish(result.0, result.1, lower, model_bound, stopped))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// good_lp (with its `highs` feature) is the modelling layer for the integer programs that
    /// need no HiGHS internals; this settles that it builds and solves here: a 0/1 knapsack
    /// whose optimum (items 0 and 2, value 13) the LP relaxation does not give directly.
    #[test]
    fn good_lp_with_highs_solves_a_small_integer_program() {
        use good_lp::{constraint, variable, ProblemVariables, Solution, SolverModel};
        let (values, weights) = ([6.0, 5.0, 7.0], [3.0, 4.0, 4.0]);
        let mut vars = ProblemVariables::new();
        let take: Vec<_> = (0..3).map(|_| vars.add(variable().binary())).collect();
        let value: good_lp::Expression = take.iter().zip(values).map(|(&x, v)| v * x).sum();
        let weight: good_lp::Expression = take.iter().zip(weights).map(|(&x, w)| w * x).sum();
        let mut model = vars
            .maximise(value.clone())
            .using(good_lp::solvers::highs::highs);
        model.set_verbose(false);
        let solution = model.with(constraint!(weight <= 8.0)).solve().unwrap();
        let picked: Vec<f64> = take.iter().map(|&x| solution.value(x).round()).collect();
        assert_eq!(picked, vec![1.0, 0.0, 1.0]);
        assert!((solution.eval(&value) - 13.0).abs() < 1e-6);
    }
    use crate::problem::{Buffer, Lifetime};
    use proptest::prelude::*;
    use std::time::Duration;

    use crate::problem::fixtures::buf;
    /// Places buffers in the given order, each at its lowest aligned offset that is free of the
    /// buffers already placed and alive with it; returns the offsets.
    fn place_in_order(p: &PlacementProblem, order: &[usize]) -> Vec<u64> {
        let b = &p.buffers;
        let mut off = vec![0u64; b.len()];
        let mut placed: Vec<usize> = Vec::new();
        for &i in order {
            let mut ranges: Vec<(u64, u64)> = placed
                .iter()
                .filter(|&&j| b[j].lifetime.overlaps(&b[i].lifetime))
                .map(|&j| (off[j], off[j] + b[j].size))
                .collect();
            ranges.sort_unstable();
            let mut o = 0;
            for (s, e) in ranges {
                if s >= o + b[i].size {
                    break;
                }
                o = o.max(round_up(e, b[i].alignment).unwrap());
            }
            off[i] = o;
            placed.push(i);
        }
        off
    }

    /// Optimum by enumerating every order (the canonical placements include an optimum).
    fn brute_force(p: &PlacementProblem) -> u64 {
        fn rec(p: &PlacementProblem, order: &mut Vec<usize>, used: &mut [bool], best: &mut u64) {
            if order.len() == used.len() {
                let off = place_in_order(p, order);
                *best = (*best).min(p.check(&Placement { offsets: off }).unwrap());
                return;
            }
            for i in 0..used.len() {
                if !used[i] {
                    used[i] = true;
                    order.push(i);
                    rec(p, order, used, best);
                    order.pop();
                    used[i] = false;
                }
            }
        }
        let mut best = u64::MAX;
        rec(
            p,
            &mut Vec::new(),
            &mut vec![false; p.buffers.len()],
            &mut best,
        );
        best
    }

    /// Deterministic pseudo-random instance: `n` buffers in `steps` steps, sizes `1..=max`,
    /// alignments 1, 2 or 4.
    fn random_problem(n: usize, steps: u64, max: u64, seed: u64) -> PlacementProblem {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move |m: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % m
        };
        PlacementProblem::new(
            (0..n)
                .map(|_| {
                    let start = next(steps);
                    let end = (start + 1 + next(steps / 2)).min(steps);
                    Buffer {
                        lifetime: Lifetime::new(start, end),
                        size: 1 + next(max),
                        alignment: [1, 2, 4][next(3) as usize],
                    }
                })
                .collect(),
        )
    }

    /// The greedy warm start of these tests: decreasing size, each at its lowest free offset.
    fn greedy(p: &PlacementProblem) -> Placement {
        let mut order: Vec<usize> = (0..p.buffers.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(p.buffers[i].size), i));
        Placement {
            offsets: place_in_order(p, &order),
        }
    }

    /// LOAD is 5 (steps 1 and 2); the warm start stacks the 3-byte buffer on top and needs 6.
    /// HiGHS must move it to the bottom and reach 5.
    #[test]
    fn highs_solves_a_small_placement_program_to_optimality() {
        let p = PlacementProblem::new(vec![
            buf(0, 2, 2),
            buf(2, 4, 2),
            buf(1, 3, 3),
            buf(0, 1, 1),
            buf(3, 4, 1),
        ]);
        // Warm start: everything stacked.
        let warm = Placement {
            offsets: vec![0, 0, 2, 5, 5],
        };
        assert_eq!(p.check(&warm).unwrap(), 6);
        let out = place_ilp(&p, &warm, &IlpOptions::default()).unwrap();
        assert_eq!(out.stats.status, SolveStatus::Optimal);
        assert_eq!(p.check(&out.placement).unwrap(), out.stats.objective);
        assert_eq!(out.stats.objective, 5);
        assert_eq!(out.stats.lower_bound, 5);
    }

    #[test]
    fn warm_start_at_load_is_returned_as_optimal_without_solving() {
        let p = PlacementProblem::new(vec![buf(0, 1, 4), buf(1, 2, 4)]);
        let warm = Placement {
            offsets: vec![0, 0],
        };
        let out = place_ilp(&p, &warm, &IlpOptions::default()).unwrap();
        assert_eq!(
            (out.stats.status, out.stats.objective),
            (SolveStatus::Optimal, 4)
        );
    }

    #[test]
    fn models_over_the_pair_cap_are_refused_with_the_count() {
        let p = PlacementProblem::new((0..4).map(|_| buf(0, 1, 1)).collect());
        let warm = Placement {
            offsets: vec![0, 1, 2, 3],
        };
        let opts = IlpOptions {
            max_pairs: 2,
            ..IlpOptions::default()
        };
        assert!(matches!(
            place_ilp(&p, &warm, &opts),
            Err(IlpError::TooLarge { pairs: 6, cap: 2 })
        ));
    }

    /// LOAD is 11 but the optimum is 13 (alignment waste), and the size-greedy needs 17: only
    /// HiGHS' dual bound can prove 13.
    #[test]
    fn dual_bound_proves_an_optimum_above_load_where_the_greedy_is_not_optimal() {
        let b = |start, end, size, alignment| Buffer {
            lifetime: Lifetime::new(start, end),
            size,
            alignment,
        };
        let p = PlacementProblem::new(vec![
            b(0, 2, 5, 1),
            b(1, 3, 2, 4),
            b(0, 2, 3, 4),
            b(1, 3, 1, 4),
            b(0, 1, 1, 1),
        ]);
        let warm = greedy(&p);
        assert_eq!(
            (p.load(), brute_force(&p), p.check(&warm).unwrap()),
            (11, 13, 17)
        );
        let out = place_ilp(&p, &warm, &IlpOptions::default()).unwrap();
        assert_eq!(out.stats.status, SolveStatus::Optimal);
        assert_eq!(p.check(&out.placement).unwrap(), 13);
        assert_eq!((out.stats.objective, out.stats.lower_bound), (13, 13));
        assert_eq!(out.model_bound, 13);
    }

    #[test]
    fn time_limited_solve_is_valid_bounded_and_never_worse() {
        let p = random_problem(40, 12, 64, 7);
        let warm = greedy(&p);
        let warm_peak = p.check(&warm).unwrap();
        let opts = IlpOptions {
            budget: Budget::with_time(Duration::from_millis(300)),
            ..IlpOptions::default()
        };
        let out = place_ilp(&p, &warm, &opts).unwrap();
        let peak = p.check(&out.placement).unwrap();
        assert_eq!(peak, out.stats.objective);
        assert!(peak <= warm_peak);
        assert!(p.load() <= out.stats.lower_bound && out.stats.lower_bound <= peak);
        assert!(matches!(
            out.stats.status,
            SolveStatus::Optimal | SolveStatus::TimeLimit
        ));
        assert_eq!(
            out.stats.status == SolveStatus::Optimal,
            out.stats.lower_bound == peak
        );
        assert!(out.stats.elapsed < Duration::from_secs(10));
    }

    #[test]
    fn window_moves_only_its_buffers_and_never_worsens() {
        let p = random_problem(40, 12, 64, 11);
        let warm = greedy(&p);
        let warm_peak = p.check(&warm).unwrap();
        // The buffers reaching highest: the ones a peak-refining window would pick.
        let mut by_end: Vec<usize> = (0..p.buffers.len()).collect();
        by_end.sort_by_key(|&i| std::cmp::Reverse(warm.offsets[i] + p.buffers[i].size));
        let window = &by_end[..8];
        let opts = IlpOptions {
            budget: Budget::with_time(Duration::from_secs(5)),
            ..IlpOptions::default()
        };
        let out = place_ilp_window(&p, &warm, window, &opts).unwrap();
        let peak = p.check(&out.placement).unwrap();
        assert_eq!(peak, out.stats.objective);
        assert!(peak <= warm_peak);
        for i in (0..p.buffers.len()).filter(|i| !window.contains(i)) {
            assert_eq!(
                out.placement.offsets[i], warm.offsets[i],
                "buffer {i} moved"
            );
        }
        assert!(out.stats.lower_bound <= peak && out.model_bound <= peak);
        assert_eq!(out.stats.lower_bound, p.load().min(peak));
    }

    #[test]
    fn window_of_one_buffer_reaches_load_by_moving_it() {
        let p = PlacementProblem::new(vec![
            buf(0, 2, 2),
            buf(2, 4, 2),
            buf(1, 3, 3),
            buf(0, 1, 1),
            buf(3, 4, 1),
        ]);
        // The 3-byte buffer sits on top; the two 1-byte ones sit on the 2-byte ones.
        let warm = Placement {
            offsets: vec![0, 0, 2, 2, 2],
        };
        assert_eq!(p.check(&warm).unwrap(), 5);
        let warm = Placement {
            offsets: vec![3, 3, 0, 5, 5],
        };
        assert_eq!(p.check(&warm).unwrap(), 6);
        // Moving only buffer 2 cannot help (the others fill [3, 6) around it)...
        let out = place_ilp_window(&p, &warm, &[2], &IlpOptions::default()).unwrap();
        assert_eq!(out.placement, warm);
        assert_eq!((out.stats.objective, out.model_bound), (6, 6));
        assert_eq!(out.stats.status, SolveStatus::Heuristic);
        // ...moving buffers 3 and 4 below does.
        let out = place_ilp_window(&p, &warm, &[3, 4, 3], &IlpOptions::default()).unwrap();
        assert_eq!(p.check(&out.placement).unwrap(), 5);
        assert_eq!(out.stats.status, SolveStatus::Optimal);
        assert_eq!(&out.placement.offsets[..3], &warm.offsets[..3]);
    }

    #[test]
    fn windows_naming_missing_buffers_and_invalid_warm_starts_are_refused() {
        let p = PlacementProblem::new(vec![buf(0, 2, 2), buf(1, 3, 3)]);
        let warm = Placement {
            offsets: vec![0, 2],
        };
        assert!(matches!(
            place_ilp_window(&p, &warm, &[0, 2], &IlpOptions::default()),
            Err(IlpError::BadWindow { index: 2, len: 2 })
        ));
        let bad = Placement {
            offsets: vec![0, 1],
        };
        assert!(matches!(
            place_ilp(&p, &bad, &IlpOptions::default()),
            Err(IlpError::WarmStart(PlacementError::Overlap { a: 0, b: 1 }))
        ));
    }

    #[test]
    fn a_raised_cancel_flag_returns_the_compacted_warm_start_at_once() {
        let p = random_problem(40, 12, 64, 7);
        let warm = greedy(&p);
        let flag = AtomicBool::new(true);
        let opts = IlpOptions {
            cancel: Some(&flag),
            ..IlpOptions::default()
        };
        let out = place_ilp(&p, &warm, &opts).unwrap();
        assert_eq!(out.stats.status, SolveStatus::TimeLimit);
        assert!(p.check(&out.placement).unwrap() <= p.check(&warm).unwrap());
    }

    #[test]
    fn the_cancel_flag_interrupts_a_running_solve() {
        let p = random_problem(60, 12, 1000, 3);
        let warm = greedy(&p);
        let warm_peak = p.check(&warm).unwrap();
        // Raised from HiGHS' own callback at its first improving solution, so always while
        // the solve runs (never before it starts, never after it ends), whatever the load.
        let flag = std::sync::Arc::new(AtomicBool::new(false));
        let improved = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let raise = {
            let (flag, improved) = (flag.clone(), improved.clone());
            crate::budget::ProgressFn::new(move |_, _| {
                improved.fetch_add(1, Ordering::Relaxed);
                flag.store(true, Ordering::Relaxed);
            })
        };
        let opts = IlpOptions {
            budget: Budget::with_time(Duration::from_secs(60)),
            cancel: Some(&*flag),
            progress: Some(&raise),
            ..IlpOptions::default()
        };
        let out = place_ilp(&p, &warm, &opts).unwrap();
        assert!(
            improved.load(Ordering::Relaxed) >= 1,
            "HiGHS found no solution"
        );
        // An interrupted solve reads as a spent time limit, with its best placement so far,
        // long before the 60 s limit.
        assert_eq!(out.stats.status, SolveStatus::TimeLimit, "{:?}", out.stats);
        assert!(p.check(&out.placement).unwrap() <= warm_peak);
        assert!(out.stats.lower_bound < out.stats.objective);
        assert!(
            out.stats.elapsed < Duration::from_secs(10),
            "{:?}",
            out.stats
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// On tiny instances the MIP optimum equals the optimum over all placement orders.
        #[test]
        fn mip_optimum_matches_brute_force(
            specs in prop::collection::vec((0u64..5, 1u64..4, 1u64..=8, 0usize..3), 1..=6)
        ) {
            let p = PlacementProblem::new(
                specs
                    .iter()
                    .map(|&(start, len, size, a)| Buffer {
                        lifetime: Lifetime::new(start, start + len),
                        size,
                        alignment: [1, 2, 4][a],
                    })
                    .collect(),
            );
            // Warm start: everything stacked.
            let mut top = 0;
            let offsets = p
                .buffers
                .iter()
                .map(|b| {
                    let o = round_up(top, b.alignment).unwrap();
                    top = o + b.size;
                    o
                })
                .collect();
            let warm = Placement { offsets };
            let opt = brute_force(&p);
            let out = place_ilp(&p, &warm, &IlpOptions::default()).unwrap();
            prop_assert_eq!(out.stats.status, SolveStatus::Optimal);
            prop_assert_eq!(p.check(&out.placement).unwrap(), opt);
            prop_assert_eq!((out.stats.objective, out.stats.lower_bound), (opt, opt));
            let all: Vec<usize> = (0..p.buffers.len()).collect();
            let win = place_ilp_window(&p, &warm, &all, &IlpOptions::default()).unwrap();
            prop_assert_eq!((win.stats.objective, win.stats.lower_bound), (opt, opt));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]

        /// Cross-check beyond brute force: on 8–10 buffers, HiGHS and the exact search
        /// (two independent methods) prove the same optimum.
        #[test]
        fn highs_and_the_exact_search_prove_the_same_optimum(seed in 0u64..1_000_000, n in 8usize..=10) {
            let p = random_problem(n, 8, 40, seed);
            let warm = greedy(&p);
            let ilp = place_ilp(&p, &warm, &IlpOptions::default()).unwrap();
            let exact = crate::exact::minimise(&p, &warm, &crate::exact::ExactOptions::default());
            prop_assert_eq!(ilp.stats.status, SolveStatus::Optimal);
            prop_assert_eq!(exact.status, crate::exact::ExactStatus::Optimal);
            prop_assert_eq!(ilp.stats.objective, exact.peak);
            prop_assert_eq!(p.check(&ilp.placement).unwrap(), exact.peak);
            prop_assert_eq!(p.check(&exact.placement).unwrap(), exact.peak);
        }
    }
}
