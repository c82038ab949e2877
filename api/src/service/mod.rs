//! The service core: admission, bounded solving, jobs, recovery and shutdown.
//!
//! - **Admission.** Work that needs a solver (a synchronous plan or placement, a job) takes a
//!   [`Ticket`]; at most `workers + queue` tickets exist, beyond that the request is answered
//!   503 with a Retry-After estimated from the mean solve time. Answers from stored plans need
//!   no ticket.
//! - **Solving.** A ticket holder waits (FIFO) for one of `workers` semaphore permits, then
//!   solves on a blocking thread (`spawn_blocking`) that owns the permit and the ticket, so a
//!   client that goes away never frees a slot that is still busy. Plans are made by the one
//!   planning pipeline ([`memplan::pipeline::run`]) with the request's
//!   [`memplan::PipelineOptions`] and the solve's [`CancelToken`](memplan::CancelToken) in its
//!   [`memplan::Control`]. A watchdog raises that token once the time limit (plus a grace) has
//!   passed; the pipeline then returns its best plan at its next check (its status then says
//!   `time_limit`, not `cancelled`: only a user's cancel is a cancel), and a budget run it
//!   stopped before any plan fitted is answered with the time limit's words, as the CLI's.
//! - **Jobs** are written to SQLite (queued) before the 202 is sent. A runner task per job
//!   waits for a slot, marks the job running (an attempt), re-reads its request from the
//!   database, solves with a progress sink that updates a watch channel (read by
//!   `GET /v1/jobs/{id}` and the event stream), and records the outcome in one transaction.
//! - **Per-client limits.** A client (its token's name, else its address; see
//!   [`crate::auth`]) has at most `max_jobs_per_client` queued and running jobs; beyond that a
//!   job is answered 429 with Retry-After.
//! - **Retention.** Every `retention_sweep`, finished jobs and stored plans older than the
//!   retention age go, then the oldest while the stored bytes are over the retention size.
//! - **Cancellation** flips the job's state under the watch channel's lock (so it races
//!   neither the start nor the end of a run), persists it, and raises the job's token, which
//!   every pipeline stage checks. A cancelled job's plan and progress say `cancelled`.
//! - **Recovery.** On start, queued jobs are queued again and running ones (interrupted by a
//!   crash) start again; a job interrupted [`MAX_ATTEMPTS`] times is marked failed with the
//!   reason instead, since it may be what stops the service.
//! - **Shutdown** stops admission, lets running jobs finish within the grace period, then
//!   stops the rest and puts them back in the queue for the next start (their start still
//!   counts in `attempts`, not as one of the [`MAX_ATTEMPTS`] crashes); the event streams of
//!   the jobs it lets go of end with a `queued` event.
//!
//! One file per resource, this one holding the [`Service`] state and what they share:
//! `plan.rs` (`POST /v1/plan`), `jobs.rs` (submit, read, cancel a job, its plan), `runner.rs`
//! (a job's run), `events.rs` (a job's event stream), `check.rs` (`POST /v1/check`),
//! `place.rs` (`POST /v1/place`), `health.rs` (health and metrics figures), `admission.rs`
//! (tickets, solver slots, the watchdog), `clients.rs` (per-client job limits) and
//! `lifecycle.rs` (start, recovery, retention, shutdown).

use crate::config::Config;
use crate::error::ApiError;
use crate::metrics::{Gauges, Metrics};
use crate::model::ResolvedOptions;
use crate::store::{Store, StoreError};
use admission::Counters;
use jobs::LiveJob;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{watch, Semaphore};

mod admission;
mod check;
mod clients;
mod events;
mod health;
mod instantiate;
mod jobs;
mod lifecycle;
mod place;
mod plan;
mod runner;
mod symbolic;

pub use admission::Ticket;
pub use lifecycle::{StartError, MAX_ATTEMPTS};
pub use place::{PlaceAnswer, PlaceBody};
pub use plan::PlanAnswer;

/// The shared state of the HTTP handlers.
pub type AppState = Arc<Service>;

/// One service instance (see the module doc).
#[derive(Debug)]
pub struct Service {
    config: Config,
    store: Arc<Store>,
    metrics: Metrics,
    slots: Arc<Semaphore>,
    counters: Arc<Counters>,
    accepting: AtomicBool,
    live: Mutex<BTreeMap<String, Arc<LiveJob>>>,
    clients: Arc<clients::ClientCounts>,
    /// Places for parsing and checking (blocking work outside the solver slots).
    light: Arc<Semaphore>,
    /// Places for database calls (one connection: more would only wait for its lock).
    db_gate: Arc<Semaphore>,
    shutdown: watch::Sender<bool>,
}

/// Database calls that may wait on blocking threads at once.
const DB_PLACES: usize = 4;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The message of a failed blocking task.
pub fn join_error_message(e: &tokio::task::JoinError) -> String {
    if e.is_panic() {
        "the solver panicked (a bug; please report the input)".to_string()
    } else {
        "the solver task was cancelled".to_string()
    }
}

/// The stored form of a job's error: its problem document as JSON.
fn problem_json(e: &ApiError) -> String {
    serde_json::to_string(&e.problem()).unwrap_or_default()
}

/// The wall-clock limit of a solve with `options` (for the watchdog).
fn time_limit_of(options: &ResolvedOptions, config: &Config) -> Duration {
    Duration::try_from_secs_f64(options.pipeline.time_limit_s).unwrap_or(config.default_time_limit)
}

impl Service {
    /// The settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The current gauges.
    pub fn gauges(&self) -> Gauges {
        let admitted = self.counters.admitted.load(Ordering::SeqCst);
        let running = self.counters.running_solves.load(Ordering::SeqCst);
        // Waiting means not yet holding a solver slot: a job holds its slot from the moment it
        // is marked running, a little before its solve starts.
        let holding = self
            .config
            .workers
            .saturating_sub(self.slots.available_permits());
        Gauges {
            queue_depth: admitted.saturating_sub(holding.max(running)),
            running_solves: running,
            running_jobs: self.counters.running_jobs.load(Ordering::SeqCst),
            workers: self.config.workers,
            queue_capacity: self.config.queue,
        }
    }

    /// Runs `f` (parsing, hashing, checking) on a blocking thread once one of the light places
    /// (twice the workers) is free: under load, requests wait here in turn instead of each
    /// holding a thread and its parsed documents at once.
    async fn light<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let permit = self
            .light
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::ShuttingDown)?;
        tokio::task::spawn_blocking(move || {
            let _held = permit;
            f()
        })
        .await?
    }

    /// Runs `f` on the store on a blocking thread (at most [`DB_PLACES`] at once).
    async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let store = self.store.clone();
        let permit = self
            .db_gate
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::ShuttingDown)?;
        tokio::task::spawn_blocking(move || {
            let _held = permit;
            f(&store)
        })
        .await
        .map_err(|e| ApiError::Internal(format!("database task failed: {e}")))?
        .map_err(ApiError::from)
    }
}
