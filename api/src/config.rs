//! Service limits and settings, with the defaults `memplan serve` uses.

use crate::auth::Tokens;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// Default request body limit: 64 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 64 << 20;
/// Default time the service waits for a client (seconds): for a request's head to arrive in
/// full, and for each next piece of its body.
pub const DEFAULT_CLIENT_TIMEOUT_S: f64 = 30.0;
/// The longest client timeout the service takes (seconds: one day).
pub const MAX_CLIENT_TIMEOUT_S: f64 = 86_400.0;
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
/// Default limit on the queued and running jobs of one client.
pub const DEFAULT_MAX_JOBS_PER_CLIENT: usize = 64;
/// Default retention of finished jobs and stored plans (the `--retention` value).
pub const DEFAULT_RETENTION: &str = "30d,1GiB";
/// How often expired jobs and plans are deleted (seconds).
pub const DEFAULT_RETENTION_SWEEP_S: f64 = 10.0;
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
    /// How long the service waits for a client: a connection that has not sent a request's
    /// head in full this long after it opened or after its last answer is closed, a body from
    /// which nothing more came for this long is answered 408 (and the connection closed). A
    /// client that stalls can then neither hold a connection nor keep the service from
    /// shutting down.
    pub client_timeout: Duration,
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
    /// Bearer tokens; `None` serves without access control (see [`crate::auth`]).
    pub tokens: Option<Arc<Tokens>>,
    /// Largest number of queued and running jobs of one client (more is answered 429).
    pub max_jobs_per_client: usize,
    /// How long finished jobs and stored plans are kept, and how many bytes they may take.
    pub retention: Retention,
    /// How often the retention sweep runs.
    pub retention_sweep: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            db_path: None,
            body_limit: DEFAULT_BODY_LIMIT,
            client_timeout: Duration::from_secs_f64(DEFAULT_CLIENT_TIMEOUT_S),
            max_ops: DEFAULT_MAX_OPS,
            max_tensors: DEFAULT_MAX_TENSORS,
            max_buffers: DEFAULT_MAX_BUFFERS,
            workers: default_workers(),
            queue: DEFAULT_QUEUE,
            default_time_limit: Duration::from_secs_f64(DEFAULT_TIME_LIMIT_S),
            sync_time_limit_cap: Duration::from_secs_f64(DEFAULT_SYNC_TIME_LIMIT_CAP_S),
            max_time_limit: Duration::from_secs_f64(DEFAULT_MAX_TIME_LIMIT_S),
            shutdown_grace: Duration::from_secs_f64(DEFAULT_SHUTDOWN_GRACE_S),
            tokens: None,
            max_jobs_per_client: DEFAULT_MAX_JOBS_PER_CLIENT,
            retention: Retention::default(),
            retention_sweep: Duration::from_secs_f64(DEFAULT_RETENTION_SWEEP_S),
        }
    }
}

/// The default solver concurrency: the number of cores (at least 1).
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How long finished jobs and stored plans are kept (by age) and how much they may take (by
/// bytes); the oldest go first. Queued and running jobs are never removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Finished jobs and plans older than this are deleted; `None`: no age limit.
    pub max_age: Option<Duration>,
    /// Beyond this many stored bytes (graphs, options, errors and plans), the oldest finished
    /// jobs and plans are deleted; `None`: no size limit.
    pub max_bytes: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        // The default text parses; the fallback is never taken.
        Retention::parse(DEFAULT_RETENTION).unwrap_or(Retention {
            max_age: None,
            max_bytes: None,
        })
    }
}

/// A `--retention` value that cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "retention {value:?}: {reason} (expected an age like 30d, 12h, 45m or 90s, a size like \
     1GiB, 500MB or 1048576B, both separated by a comma, or `none`)"
)]
pub struct RetentionError {
    /// The offending item.
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Retention {
    /// Parses `AGE`, `SIZE`, `AGE,SIZE` or `none`: ages in `s`, `m`, `h`, `d`; sizes in `B`,
    /// `kB`, `MB`, `GB`, `TB` (powers of 1000) or `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024).
    pub fn parse(text: &str) -> Result<Retention, RetentionError> {
        let mut r = Retention {
            max_age: None,
            max_bytes: None,
        };
        let err = |value: &str, reason: &str| RetentionError {
            value: value.to_string(),
            reason: reason.to_string(),
        };
        let text = text.trim();
        if text.eq_ignore_ascii_case("none") {
            return Ok(r);
        }
        for item in text.split(',').map(str::trim) {
            let split = item
                .find(|c: char| !c.is_ascii_digit())
                .ok_or_else(|| err(item, "a number needs a unit"))?;
            let (digits, unit) = item.split_at(split);
            let n: u64 = digits
                .parse()
                .map_err(|_| err(item, "it does not start with a whole number"))?;
            if n == 0 {
                return Err(err(item, "a limit of zero would delete everything at once"));
            }
            let age = match unit {
                "s" => Some(1),
                "m" => Some(60),
                "h" => Some(3600),
                "d" => Some(86_400),
                _ => None,
            };
            let size = match unit {
                "B" => Some(1u64),
                "kB" | "KB" => Some(1_000),
                "MB" => Some(1_000_000),
                "GB" => Some(1_000_000_000),
                "TB" => Some(1_000_000_000_000),
                "KiB" => Some(1 << 10),
                "MiB" => Some(1 << 20),
                "GiB" => Some(1 << 30),
                "TiB" => Some(1 << 40),
                _ => None,
            };
            match (age, size) {
                (Some(k), _) => {
                    if r.max_age.is_some() {
                        return Err(err(item, "two ages"));
                    }
                    let secs = n
                        .checked_mul(k)
                        .ok_or_else(|| err(item, "the age is too large"))?;
                    r.max_age = Some(Duration::from_secs(secs));
                }
                (None, Some(k)) => {
                    if r.max_bytes.is_some() {
                        return Err(err(item, "two sizes"));
                    }
                    r.max_bytes = Some(
                        n.checked_mul(k)
                            .ok_or_else(|| err(item, "the size is too large"))?,
                    );
                }
                (None, None) => return Err(err(item, &format!("unknown unit {unit:?}"))),
            }
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_reads_ages_sizes_both_and_none() {
        let day = Duration::from_secs(86_400);
        assert_eq!(
            Retention::parse("30d,1GiB").unwrap(),
            Retention {
                max_age: Some(day * 30),
                max_bytes: Some(1 << 30)
            }
        );
        assert_eq!(
            Retention::parse(" 500MB , 12h").unwrap(),
            Retention {
                max_age: Some(Duration::from_secs(12 * 3600)),
                max_bytes: Some(500_000_000)
            }
        );
        assert_eq!(Retention::parse("90s").unwrap().max_bytes, None);
        assert_eq!(
            Retention::parse("none").unwrap(),
            Retention {
                max_age: None,
                max_bytes: None
            }
        );
        assert_eq!(
            Retention::default(),
            Retention::parse(DEFAULT_RETENTION).unwrap()
        );
    }

    #[test]
    fn retention_refuses_unknown_units_zero_and_repeats_naming_the_item() {
        for bad in [
            "7w",
            "0d",
            "1d,2d",
            "1GiB,1MB",
            "d",
            "",
            "1.5d",
            "99999999999999999999d",
        ] {
            let e = Retention::parse(bad).unwrap_err();
            assert!(e.to_string().contains("retention"), "{bad}: {e}");
        }
        let e = Retention::parse("7d,3weeks").unwrap_err();
        assert_eq!(e.value, "3weeks");
    }
}
