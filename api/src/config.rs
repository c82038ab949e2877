//! Service limits and settings, with the defaults `memplan serve` uses.

use std::path::PathBuf;
use std::time::Duration;

/// Default request body limit: 64 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 64 << 20;
/// Default limit on a graph's ops.
pub const DEFAULT_MAX_OPS: usize = 100_000;
/// Default limit on a graph's tensors.
pub const DEFAULT_MAX_TENSORS: usize = 400_000;
/// Default limit on the buffers of a placement request.
pub const DEFAULT_MAX_BUFFERS: usize = 1_000_000;
/// Default number of requests and jobs that may wait for a solver slot.
pub const DEFAULT_QUEUE: usize = 256;
/// Default time limit of a placement when the request gives none (seconds; a plan's default
/// cap is the pipeline's, [`memplan::pipeline::DEFAULT_TIME_LIMIT_S`]).
pub const DEFAULT_TIME_LIMIT_S: f64 = 1.0;
/// Default cap on the time limit of a synchronous request (seconds).
pub const DEFAULT_SYNC_TIME_LIMIT_CAP_S: f64 = 60.0;
/// Default cap on the time limit of a job (seconds).
pub const DEFAULT_MAX_TIME_LIMIT_S: f64 = 3600.0;
/// Default time SIGTERM leaves running jobs to finish before they are persisted for the next
/// start (seconds).
pub const DEFAULT_SHUTDOWN_GRACE_S: f64 = 30.0;

/// Settings of one service instance.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// SQLite file for jobs and stored plans; `None` keeps them in memory (lost on exit: for
    /// tests and throw-away instances only).
    pub db_path: Option<PathBuf>,
    /// Largest request body (bytes); larger bodies are answered 413.
    pub body_limit: usize,
    /// Largest number of ops in a graph; more is answered 422.
    pub max_ops: usize,
    /// Largest number of tensors in a graph; more is answered 422.
    pub max_tensors: usize,
    /// Largest number of buffers of a placement request; more is answered 422.
    pub max_buffers: usize,
    /// Solves that run at once (each on its own blocking thread).
    pub workers: usize,
    /// Requests and jobs that may wait for a solver beyond the running ones; when all places
    /// are taken new work is answered 503 with Retry-After.
    pub queue: usize,
    /// Time limit of a placement when the request gives none (plans: the pipeline's cap).
    pub default_time_limit: Duration,
    /// Largest time limit of `POST /v1/plan` and `POST /v1/place` (longer work goes to jobs).
    pub sync_time_limit_cap: Duration,
    /// Largest time limit of a job.
    pub max_time_limit: Duration,
    /// On shutdown, how long running jobs may still run before they are stopped and kept
    /// queued for the next start.
    pub shutdown_grace: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            db_path: None,
            body_limit: DEFAULT_BODY_LIMIT,
            max_ops: DEFAULT_MAX_OPS,
            max_tensors: DEFAULT_MAX_TENSORS,
            max_buffers: DEFAULT_MAX_BUFFERS,
            workers: default_workers(),
            queue: DEFAULT_QUEUE,
            default_time_limit: Duration::from_secs_f64(DEFAULT_TIME_LIMIT_S),
            sync_time_limit_cap: Duration::from_secs_f64(DEFAULT_SYNC_TIME_LIMIT_CAP_S),
            max_time_limit: Duration::from_secs_f64(DEFAULT_MAX_TIME_LIMIT_S),
            shutdown_grace: Duration::from_secs_f64(DEFAULT_SHUTDOWN_GRACE_S),
        }
    }
}

/// The default solver concurrency: the number of cores (at least 1).
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
