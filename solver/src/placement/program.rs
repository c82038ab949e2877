//! The placement integer program, built and solved through [`crate::mip`] (HiGHS): the big-M disjunctive
//! model of dynamic storage allocation that OLLA, TelaMalloc and minimalloc's MIP baseline start
//! from.
//!
//! **Model.** Minimise the peak `P` subject to `offset_i + size_i ≤ P` for every movable buffer
//! and, for every pair of movable buffers alive together, one binary `z_ij` choosing which lies
//! below (`offset_i + size_i ≤ offset_j + M·z_ij`, `offset_j + size_j ≤ offset_i + M·(1 − z_ij)`,
//! with a per-pair big-M from the offsets' bounds). (Clique rows over each buffer's heaviest
//! step were tried and removed: they cut off the optimum on an aligned 4-buffer instance, kept
//! in `proptest-regressions/placement/program_tests.txt`.) Offsets are integer *slots* in units of
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
//! lower bound of [`place_ilp`] is `max(aligned LOAD, ⌈mip_dual_bound⌉)` (LOAD tightened by
//! alignment, [`PlacementProblem::aligned_load`]; the dual bound read from HiGHS' info after
//! the solve), so a time-limited run still reports a proven gap. With one thread (the default) and no
//! time limit runs are deterministic; a run with a time limit or a watch runs HiGHS on a thread
//! of its own ([`crate::mip::overrun`]), so its `threads` option always takes effect.
//!
//! **Cancellation.** [`IlpOptions::cancel`] is polled from HiGHS' MIP-interrupt callback
//! (installed by [`crate::mip`], through `highs-sys`). HiGHS polls at its limit checks, which
//! not every phase reaches; the run returns within
//! [`STOP_GRACE`](crate::mip::overrun::STOP_GRACE) of the flag (and within
//! [`LIMIT_GRACE`](crate::mip::overrun::LIMIT_GRACE) of its time limit) with the best placement
//! HiGHS had reported, like a timed-out one ([`SolveStatus::TimeLimit`]).
//!
//! References: Steiner et al., "OLLA: Optimizing the Lifetime and Location of Arrays" (2022);
//! Sekiyama et al., "TelaMalloc" (ASPLOS 2023); Moffitt, "MiniMalloc" (ASPLOS 2023); HiGHS.

//!
//! **Code.** `layout` finds the model's unit and the movable buffers'
//! neighbours; here `build` writes the model, [`crate::mip::solve`] runs it and `decode`
//! turns its answer back into a placement and a bound.

use super::layout::{model_unit, Layout};
use crate::limits::{Limits, SolveStats, SolveStatus};
use crate::mip::{self, Col, MipOptions, MipSolution, Model, Watch};
use crate::problem::{Placement, PlacementError, PlacementProblem};
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
    pub limits: Limits,
    /// HiGHS threads (1 = deterministic).
    pub threads: u32,
    /// Largest number of binaries to model: pairs of movable buffers alive together, plus one
    /// per merged range of fixed buffers alive with a movable one.
    pub max_pairs: usize,
    /// HiGHS `mip_rel_gap`: relative gap at which the search stops (0 = prove optimality).
    pub mip_rel_gap: f64,
    /// When set to `true` by another thread, HiGHS stops at its next MIP interrupt check.
    pub cancel: Option<&'a AtomicBool>,
    /// Called, on the calling thread, on every improving solution of the model with its peak and
    /// proven bound (bytes; for a window, of the model that moves only the window).
    pub progress: Option<&'a crate::limits::ProgressFn>,
}

impl Default for IlpOptions<'_> {
    fn default() -> Self {
        IlpOptions {
            limits: Limits::UNLIMITED,
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
    /// Status, time, peak and global lower bound (`max(aligned LOAD, dual bound)` for
    /// [`place_ilp`]; the aligned LOAD for a window, whose model only bounds the moves it allows).
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

/// The outcome from a placement, its peak, the lower bound and the model's bound; the status
/// is optimal when the bound meets the peak, else time limit when `stopped`, else heuristic.
fn finish(
    started: Instant,
    offsets: Vec<u64>,
    peak: u64,
    lower: u64,
    model_bound: u64,
    stopped: bool,
) -> IlpOutcome {
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
    let bound = problem.aligned_load();
    let global = free_mask.iter().all(|&f| f);
    let unit = model_unit(problem, &warm.offsets, free_mask);
    let layout = Layout::new(problem, &warm.offsets, free_mask, unit, opts.max_pairs)?;
    let keep_warm = || {
        finish(
            started,
            warm.offsets.clone(),
            warm_peak,
            bound,
            bound,
            false,
        )
    };
    if warm_peak <= bound {
        return Ok(keep_warm());
    }
    // Compact the warm start: valid, no higher, and on the model's grid.
    let (best, best_peak) = match layout.compact(problem, &warm.offsets).and_then(|o| {
        uncapped
            .check(&Placement { offsets: o.clone() })
            .ok()
            .map(|p| (o, p))
    }) {
        Some((o, p)) if p <= warm_peak => (o, p),
        _ => return Ok(keep_warm()),
    };
    let fixed_peak = (0..bufs.len())
        .filter(|&i| !free_mask[i])
        .map(|i| best[i] + bufs[i].size)
        .max()
        .unwrap_or(0);
    let floor = bound.max(fixed_peak);
    let cancelled = || opts.cancel.is_some_and(|c| c.load(Ordering::Relaxed));
    let remaining = opts
        .limits
        .time
        .map(|t| t.saturating_sub(started.elapsed()).as_secs_f64());
    if best_peak <= floor || layout.free.is_empty() {
        let lower = if global { floor } else { bound };
        return Ok(finish(started, best, best_peak, lower, floor, false));
    }
    if cancelled() || remaining.is_some_and(|r| r <= 0.0) {
        return Ok(finish(started, best, best_peak, bound, floor, true));
    }
    if best_peak / unit > MAX_EXACT {
        return Err(IlpError::OutOfRange { peak: best_peak });
    }

    let built = build(problem, &layout, &best, best_peak, floor, unit)?;
    let options = MipOptions {
        threads: i32::try_from(opts.threads.max(1)).unwrap_or(i32::MAX),
        mip_rel_gap: opts.mip_rel_gap.max(0.0),
        presolve: false,
        time_limit: remaining,
        max_nodes: opts.limits.nodes,
        ..MipOptions::default()
    };
    let watch = Watch {
        cancel: opts.cancel,
        progress: opts.progress,
        scale: unit as f64,
    };
    let solution = mip::solve(built.model, &options, &built.start, &watch)
        .map_err(|e| IlpError::Solver(e.to_string()))?;
    let stopped = solution.status.timed_out();
    let dual_bound = decode_bound(&solution, best_peak, unit);
    let (offsets, peak) = decode(
        problem,
        &uncapped,
        &layout,
        &built.slot_cols,
        &solution,
        (best, best_peak),
    );
    let model_bound = floor.max(dual_bound);
    let lower = if global { model_bound } else { bound };
    Ok(finish(started, offsets, peak, lower, model_bound, stopped))
}

/// The model of [`build`], with its warm start and the slot column of each movable buffer.
struct Built {
    model: Model,
    start: Vec<f64>,
    slot_cols: Vec<Col>,
}

/// Builds the model (all byte quantities divided by `unit`, exact in `f64`) warm-started from
/// `best` (compacted, peak `best_peak`), with the peak bounded below by `floor`.
fn build(
    problem: &PlacementProblem,
    layout: &Layout,
    best: &[u64],
    best_peak: u64,
    floor: u64,
    unit: u64,
) -> Result<Built, IlpError> {
    let bufs = &problem.buffers;
    let u = unit as f64;
    let mut pb = Model::new();
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
    Ok(Built {
        model: pb,
        start,
        slot_cols,
    })
}

/// HiGHS' dual bound in bytes (0 without one): units rounded up (the optimum is a whole number
/// of units) with a tolerance for LP noise, `best_peak` when it reaches it.
fn decode_bound(solution: &MipSolution, best_peak: u64, unit: u64) -> u64 {
    solution
        .dual_bound
        .map(|d| {
            let units = (d - 1e-6 * d.abs().max(1.0)).ceil().max(0.0);
            if units >= best_peak as f64 {
                best_peak
            } else {
                (units as u64).saturating_mul(unit)
            }
        })
        .unwrap_or(0)
}

/// The placement of HiGHS' solution (slots times steps, compacted and re-checked) when it is
/// valid and no higher than `best` (offsets and peak), else `best`.
fn decode(
    problem: &PlacementProblem,
    uncapped: &PlacementProblem,
    layout: &Layout,
    slot_cols: &[Col],
    solution: &MipSolution,
    best: (Vec<u64>, u64),
) -> (Vec<u64>, u64) {
    let Some(cols) = &solution.columns else {
        return best;
    };
    let mut offsets = best.0.clone();
    for (k, &i) in layout.free.iter().enumerate() {
        let v = cols.get(slot_cols[k].index()).copied().unwrap_or(f64::NAN);
        match (v.is_finite() && v > -0.5)
            .then(|| (v.round() as u64).checked_mul(layout.step[k]))
            .flatten()
        {
            Some(off) => offsets[i] = off,
            None => return best,
        }
    }
    if let Some(o) = layout.compact(problem, &offsets) {
        if let Ok(p) = uncapped.check(&Placement { offsets: o.clone() }) {
            if p <= best.1 {
                return (o, p);
            }
        }
    }
    best
}

#[cfg(test)]
#[path = "program_tests.rs"]
mod tests;
