//! Admission and bounded solving: [`Ticket`]s (at most `workers + queue` in the system, 503
//! beyond), solver slots, and [`Service::solve`], which runs work on a blocking thread under a
//! watchdog.

use super::Service;
use crate::error::ApiError;
use memplan::CancelToken;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::OwnedSemaphorePermit;

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) admitted: AtomicUsize,
    pub(super) running_solves: AtomicUsize,
    pub(super) running_jobs: AtomicUsize,
}

/// A place in the system (running or queued); released when dropped.
#[derive(Debug)]
pub struct Ticket(Arc<Counters>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.admitted.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts a running solve or job while alive.
pub(super) struct Running(Arc<Counters>, fn(&Counters) -> &AtomicUsize);

impl Running {
    pub(super) fn new(c: &Arc<Counters>, which: fn(&Counters) -> &AtomicUsize) -> Self {
        which(c).fetch_add(1, Ordering::SeqCst);
        Running(c.clone(), which)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        (self.1)(&self.0).fetch_sub(1, Ordering::SeqCst);
    }
}

/// Raises a token when dropped unless disarmed: a synchronous request whose client goes away
/// stops its solve.
pub(super) struct CancelOnDrop(pub(super) Option<CancelToken>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            t.cancel();
        }
    }
}

impl Service {
    /// Takes a place in the system, or answers why not.
    pub fn admit(&self) -> Result<Ticket, ApiError> {
        if !self.accepting.load(Ordering::SeqCst) {
            return Err(ApiError::ShuttingDown);
        }
        let capacity = self.config.workers + self.config.queue;
        let admitted = &self.counters.admitted;
        let mut current = admitted.load(Ordering::SeqCst);
        loop {
            if current >= capacity {
                return Err(ApiError::Overloaded {
                    capacity,
                    retry_after_s: self.retry_after(current),
                });
            }
            match admitted.compare_exchange_weak(
                current,
                current + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Ok(Ticket(self.counters.clone())),
                Err(now) => current = now,
            }
        }
    }

    /// A place for work that was accepted before (recovered jobs), beyond the capacity if
    /// need be: accepted work is never turned away.
    pub(super) fn admit_anyway(&self) -> Ticket {
        self.counters.admitted.fetch_add(1, Ordering::SeqCst);
        Ticket(self.counters.clone())
    }

    /// Seconds until a place is likely free: the mean solve time times the waiting rounds.
    pub(super) fn retry_after(&self, in_system: usize) -> u64 {
        let mean = self.metrics.mean_solve_seconds().unwrap_or(1.0);
        let rounds = (in_system + 1) as f64 / self.config.workers as f64;
        (mean * rounds).ceil().clamp(1.0, 60.0) as u64
    }

    pub(super) async fn slot(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::ShuttingDown)
    }

    /// Runs `work` on a blocking thread holding `permit` and `ticket` until it returns; raises
    /// `cancel` when `limit` (plus a grace) has passed.
    pub(super) async fn solve<T: Send + 'static>(
        &self,
        kind: &'static str,
        permit: OwnedSemaphorePermit,
        ticket: Ticket,
        limit: Duration,
        cancel: CancelToken,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let running = Running::new(&self.counters, |c| &c.running_solves);
        let started = Instant::now();
        let mut handle = tokio::task::spawn_blocking(move || {
            let _held = (permit, ticket, running);
            work()
        });
        let grace = limit / 10 + Duration::from_millis(500);
        let out = tokio::select! {
            r = &mut handle => r,
            _ = tokio::time::sleep(limit + grace) => {
                cancel.cancel();
                handle.await
            }
        };
        self.metrics.solve(kind, started.elapsed());
        out.map_err(ApiError::from)
    }
}
