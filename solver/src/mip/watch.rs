//! HiGHS' callback, installed through `highs-sys` (the `highs` crate exposes none): a stop flag
//! polled at HiGHS' MIP-interrupt checks, and a progress callback on every improving solution.
//! HiGHS polls at its limit checks, so a stop can lag by around a second on big models.

use crate::limits::ProgressFn;
use std::ffi::c_void;
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};

/// What the callback watches during one solve.
#[derive(Clone, Copy)]
pub struct Watch<'a> {
    /// Raised (by any thread): HiGHS stops at its next MIP interrupt check, with status
    /// [`MipStatus::Interrupt`](super::MipStatus::Interrupt) and its best solution so far.
    pub cancel: Option<&'a AtomicBool>,
    /// Called on every improving solution with its primal and dual bounds in bytes (objective
    /// times [`Watch::scale`], truncated; the dual bound capped at the primal one).
    pub progress: Option<&'a ProgressFn>,
    /// Bytes per unit of the objective.
    pub scale: f64,
}

impl Watch<'_> {
    /// Watches nothing: no callback is installed.
    pub const NONE: Watch<'static> = Watch {
        cancel: None,
        progress: None,
        scale: 1.0,
    };

    /// Whether there is anything to watch (else no callback is installed).
    pub(crate) fn is_active(&self) -> bool {
        self.cancel.is_some() || self.progress.is_some()
    }
}

/// The HiGHS callback: asks for an interrupt when the stop flag is raised, and reports
/// improving solutions to the progress callback.
///
/// # Safety
/// `user` must be null or point to a [`Watch`] alive for the whole solve; `data_in` and
/// `data_out` must be null or valid (HiGHS guarantees it for its callbacks).
unsafe extern "C" fn callback(
    kind: c_int,
    _message: *const c_char,
    data_out: *const highs_sys::HighsCallbackDataOut,
    data_in: *mut highs_sys::HighsCallbackDataIn,
    user: *mut c_void,
) {
    if user.is_null() {
        return;
    }
    // SAFETY: per the contract above, `user` is a live `Watch`.
    let watch = unsafe { &*(user as *const Watch<'_>) };
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

/// Installs [`callback`] with `watch` on `model`, starting the MIP-interrupt callback when
/// there is a flag and the improving-solution one when there is a progress callback. The
/// caller keeps `watch` alive (borrowed) until the model is dropped.
pub(crate) fn install(model: &mut highs::Model, watch: &Watch<'_>) -> bool {
    // SAFETY: the model's pointer is a live Highs instance; `watch` outlives the solve (the
    // caller borrows it for the whole solve and drops the solved model before it).
    unsafe {
        let ptr = model.as_mut_ptr();
        highs_sys::Highs_setCallback(
            ptr,
            Some(callback),
            watch as *const Watch<'_> as *mut c_void,
        ) == highs_sys::STATUS_OK
            && (watch.cancel.is_none()
                || highs_sys::Highs_startCallback(ptr, highs_sys::kHighsCallbackMipInterrupt)
                    == highs_sys::STATUS_OK)
            && (watch.progress.is_none()
                || highs_sys::Highs_startCallback(
                    ptr,
                    highs_sys::kHighsCallbackMipImprovingSolution,
                ) == highs_sys::STATUS_OK)
    }
}
