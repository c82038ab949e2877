//! Guarded solves: HiGHS on a thread of its own, so that a solve returns soon after its time
//! limit or its stop flag even where HiGHS does not stop.
//!
//! Why: HiGHS checks its time limit and the interrupt callback at its limit checks, which
//! not every phase reaches. HiGHS 1.16 (the vendored `highs-sys` 1.16.0) was seen to stay
//! minutes past a 2 s limit in the presolve of a RENS sub-MIP
//! (`HPresolve::strengthenInequalities`, whose cover loop checks no clock; the model is the
//! fixture of `tests/highs_overrun.rs`, and `highspy` 1.16.0 overruns on it as well), and
//! sub-MIPs presolve whatever the parent's `presolve`. The upstream reports of time limits not
//! honoured (ERGO-Code/HiGHS #1278, #2226) describe the same family.
//!
//! Idea: the solve hands the model, the options and the warm start to a new thread, which
//! runs HiGHS with a `Relay` on its callback. The calling thread polls every 5 ms (`POLL`) for
//! the answer, forwards its stop flag to the relay and the improving solutions to the progress
//! callback, and gives up on HiGHS [`LIMIT_GRACE`] after HiGHS' own time limit (counted from
//! when HiGHS started) or [`STOP_GRACE`] after the flag: it raises the relay's flag (HiGHS
//! stops at its next check, if it reaches one), and answers with what HiGHS last reported
//! ([`MipSolution::abandoned`]). The abandoned thread keeps its model and a core until HiGHS
//! returns; its answer is dropped. HiGHS runs the same on either thread, so answers do not
//! depend on the guard, and only a solve the clock or the flag caps anyway is ever abandoned.
//!
//! Cost: one thread per guarded solve (tens of µs) and a poll every 5 ms. HiGHS keeps
//! one task scheduler per OS thread, so a guarded solve's `threads` option always takes
//! effect (on the calling thread, only its first solve's does).

use super::solution::{self, MipSolution, MipStatus};
use super::watch::{Relay, Watch};
use super::{MipError, MipOptions, Model};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long after its time limit a guarded solve waits for HiGHS before it answers without it
/// (HiGHS itself can lag around a second at its limit checks on big models).
pub const LIMIT_GRACE: Duration = Duration::from_secs(1);

/// How long after the stop flag a guarded solve waits for HiGHS before it answers without it.
pub const STOP_GRACE: Duration = Duration::from_millis(50);

/// Stack of HiGHS' thread, bytes: a main thread's on Linux (a spawned thread gets 2 MiB),
/// as HiGHS ran on the calling thread before the guard.
const HIGHS_STACK: usize = 8 << 20;

/// How often the calling thread looks at the answer, the flag and the clock.
const POLL: Duration = Duration::from_millis(5);

/// Solves `model` on a thread of its own under `options`, watched by `watch` (module doc).
pub(crate) fn guarded(
    model: Model,
    options: &MipOptions,
    start: &[f64],
    watch: &Watch<'_>,
) -> Result<MipSolution, MipError> {
    let relay = Arc::new(Relay::new(options.max_lp_iterations));
    let (tx, rx) = mpsc::channel();
    let (theirs, opts, warm) = (Arc::clone(&relay), options.clone(), start.to_vec());
    std::thread::Builder::new()
        .name("memplan-highs".into())
        .stack_size(HIGHS_STACK)
        .spawn(move || {
            // The receiver may be gone (an abandoned solve): the answer is dropped then.
            let _ = tx.send(solution::run(model, &opts, &warm, Some(&theirs)));
        })
        .map_err(|e| MipError::Run(format!("starting HiGHS' thread: {e}")))?;
    let mut stopped: Option<Instant> = None;
    loop {
        let answer = rx.recv_timeout(POLL);
        report(&relay, watch);
        match answer {
            Ok(result) => return result,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(MipError::Run(
                    "HiGHS' thread ended without an answer".into(),
                ))
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if stopped.is_none() && watch.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            relay.stop.store(true, Ordering::Relaxed);
            stopped = Some(Instant::now());
        }
        let stop_spent = stopped.is_some_and(|t| t.elapsed() >= STOP_GRACE);
        let limit_spent = match (options.time_limit, relay.started.get()) {
            (Some(limit), Some(started)) => {
                started.elapsed().as_secs_f64() >= limit + LIMIT_GRACE.as_secs_f64()
            }
            _ => false,
        };
        if stop_spent || limit_spent {
            relay.stop.store(true, Ordering::Relaxed);
            return Ok(abandon(&relay, stopped.is_some()));
        }
    }
}

/// Passes the improving solutions HiGHS reported since the last call to the progress
/// callback, on this thread.
fn report(relay: &Relay, watch: &Watch<'_>) {
    let pending = std::mem::take(&mut relay.seen().pending);
    for (primal, dual) in pending {
        watch.report(primal, dual);
    }
}

/// The answer of a solve that gave up on HiGHS: what HiGHS last reported, as stopped by the
/// flag (`cancelled`) or the clock.
fn abandon(relay: &Relay, cancelled: bool) -> MipSolution {
    let seen = relay.seen();
    MipSolution {
        status: if cancelled {
            MipStatus::Interrupt
        } else {
            MipStatus::TimeLimit
        },
        columns: seen.columns.clone(),
        objective: seen.objective,
        dual_bound: seen.dual_bound,
        nodes: seen.nodes,
        lp_iterations: seen.lp_iterations,
        abandoned: true,
    }
}

#[cfg(test)]
#[path = "overrun_tests.rs"]
mod tests;
