//! HiGHS' callback, installed through `highs-sys` (the `highs` crate exposes none): the
//! `Relay` a guarded solve shares with HiGHS' thread (or an unguarded one with an iteration
//! cap keeps on its own). At every MIP-interrupt check HiGHS reads the relay's stop flag and
//! iteration cap and leaves its dual bound and node count there; on every
//! improving solution it leaves the solution's columns and bounds. The caller's thread
//! forwards its own stop flag to the relay and the improving solutions to the progress
//! callback ([`super::overrun`]). HiGHS polls at its limit checks, so a stop can lag by around
//! a second on big models, and not at all in some of its phases (hence the guard).

use crate::limits::ProgressFn;
use std::ffi::c_void;
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// What the caller watches during one solve.
#[derive(Clone, Copy)]
pub struct Watch<'a> {
    /// Raised (by any thread): HiGHS stops at its next MIP interrupt check, with status
    /// [`MipStatus::Interrupt`](super::MipStatus::Interrupt) and its best solution so far; if
    /// it has not returned within [`STOP_GRACE`](super::overrun::STOP_GRACE), the solve
    /// returns without it.
    pub cancel: Option<&'a AtomicBool>,
    /// Called, on the caller's thread, with the primal and dual bounds in bytes (objective
    /// times [`Watch::scale`], truncated; the dual bound capped at the primal one) of every
    /// improving solution.
    pub progress: Option<&'a ProgressFn>,
    /// Bytes per unit of the objective.
    pub scale: f64,
}

impl Watch<'_> {
    /// Watches nothing.
    pub const NONE: Watch<'static> = Watch {
        cancel: None,
        progress: None,
        scale: 1.0,
    };

    /// Whether there is anything to watch.
    pub(crate) fn is_active(&self) -> bool {
        self.cancel.is_some() || self.progress.is_some()
    }

    /// Reports an improving solution (objective values) to the progress callback, if any.
    pub(crate) fn report(&self, primal: f64, dual: f64) {
        let Some(progress) = self.progress else {
            return;
        };
        let bytes = |v: f64| {
            if v.is_finite() && v > 0.0 {
                (v * self.scale) as u64
            } else {
                0
            }
        };
        progress.report(bytes(primal), bytes(dual).min(bytes(primal)));
    }
}

/// What HiGHS last reported during one solve.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    /// Columns of the last improving solution (HiGHS reports them in the original space).
    pub(crate) columns: Option<Vec<f64>>,
    /// Its objective value (set with the columns).
    pub(crate) objective: Option<f64>,
    /// The MIP dual bound at the last report, when finite.
    pub(crate) dual_bound: Option<f64>,
    /// Branch-and-bound nodes at the last report.
    pub(crate) nodes: Option<u64>,
    /// LP iterations in all at the last report.
    pub(crate) lp_iterations: Option<u64>,
    /// Improving solutions (primal, dual objective values) not yet passed to the progress
    /// callback.
    pub(crate) pending: Vec<(f64, f64)>,
}

/// Shared between the caller's thread and HiGHS' during one solve.
#[derive(Debug, Default)]
pub(crate) struct Relay {
    /// Raised by the caller: HiGHS stops at its next MIP-interrupt check.
    pub(crate) stop: AtomicBool,
    /// HiGHS stops at the first MIP-interrupt check with at least this many LP iterations in
    /// all ([`MipOptions::max_lp_iterations`](super::MipOptions::max_lp_iterations)).
    pub(crate) lp_cap: Option<u64>,
    /// Set by the callback when it stopped HiGHS for [`Relay::lp_cap`].
    pub(crate) capped: AtomicBool,
    /// When HiGHS started solving (its time limit counts from there).
    pub(crate) started: OnceLock<Instant>,
    /// What HiGHS reported.
    seen: Mutex<Seen>,
}

impl Relay {
    /// A relay for a solve whose LP iterations are capped at `lp_cap`.
    pub(crate) fn new(lp_cap: Option<u64>) -> Self {
        Relay {
            lp_cap,
            ..Relay::default()
        }
    }

    /// What HiGHS reported so far (a poisoned lock is still read: the data stays whole).
    pub(crate) fn seen(&self) -> MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Reads a finite value.
fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

/// The HiGHS callback: asks for an interrupt when the relay's flag is raised or its LP
/// iteration cap is reached, and records the dual bound and nodes of every interrupt check and
/// every improving solution.
///
/// # Safety
/// `user` must be null or point to a [`Relay`] alive for the whole solve; `data_in` and
/// `data_out` must be null or valid (HiGHS guarantees it for its callbacks).
unsafe extern "C" fn callback(
    kind: c_int,
    _message: *const c_char,
    data_out: *const highs_sys::HighsCallbackDataOut,
    data_in: *mut highs_sys::HighsCallbackDataIn,
    user: *mut c_void,
) {
    if user.is_null() || data_out.is_null() {
        return;
    }
    // SAFETY: per the contract above, `user` is a live `Relay` and `data_out` is valid for
    // this call.
    let (relay, out) = unsafe { (&*(user as *const Relay), &*data_out) };
    // A panic must not unwind into C++.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut seen = relay.seen();
        seen.dual_bound = finite(out.mip_dual_bound).or(seen.dual_bound);
        seen.nodes = u64::try_from(out.mip_node_count).ok().or(seen.nodes);
        seen.lp_iterations = u64::try_from(out.mip_total_lp_iterations)
            .ok()
            .or(seen.lp_iterations);
        if kind == highs_sys::kHighsCallbackMipImprovingSolution {
            let len = usize::try_from(out.mip_solution_size).unwrap_or(0);
            if !out.mip_solution.is_null() && len > 0 {
                // SAFETY: HiGHS passes `mip_solution_size` values at `mip_solution`.
                let columns = unsafe { std::slice::from_raw_parts(out.mip_solution, len) };
                seen.columns = Some(columns.to_vec());
                seen.objective = finite(out.objective_function_value);
            }
            seen.pending
                .push((out.mip_primal_bound, out.mip_dual_bound));
        }
    }));
    if kind == highs_sys::kHighsCallbackMipInterrupt && !data_in.is_null() {
        let capped = relay
            .lp_cap
            .is_some_and(|cap| u64::try_from(out.mip_total_lp_iterations).unwrap_or(0) >= cap);
        if capped {
            relay.capped.store(true, Ordering::Relaxed);
        }
        if capped || relay.stop.load(Ordering::Relaxed) {
            // SAFETY: `data_in` is valid (checked non-null; HiGHS owns it for this call).
            unsafe { (*data_in).user_interrupt = 1 };
        }
    }
}

/// Installs [`callback`] with `relay` on `model`, for MIP-interrupt checks and improving
/// solutions. The caller keeps `relay` alive until the model is dropped.
pub(crate) fn install(model: &mut highs::Model, relay: &Relay) -> bool {
    // SAFETY: the model's pointer is a live Highs instance; `relay` outlives the solve (the
    // caller borrows it for the whole solve and drops the solved model before it).
    unsafe {
        let ptr = model.as_mut_ptr();
        highs_sys::Highs_setCallback(ptr, Some(callback), relay as *const Relay as *mut c_void)
            == highs_sys::STATUS_OK
            && highs_sys::Highs_startCallback(ptr, highs_sys::kHighsCallbackMipInterrupt)
                == highs_sys::STATUS_OK
            && highs_sys::Highs_startCallback(ptr, highs_sys::kHighsCallbackMipImprovingSolution)
                == highs_sys::STATUS_OK
    }
}
