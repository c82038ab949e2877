//! Start, recovery of the jobs a previous run left unfinished, and graceful shutdown.

use super::jobs::{view_of, LiveJob};
use super::{now_ms, problem_json, Service};
use crate::config::Config;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::model::{JobStatus, Progress};
use crate::store::{Expired, Finish, Store, StoreError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Semaphore};

/// A job interrupted this many times while running (the service stopped under it without a
/// graceful stop: a crash, a kill) is marked failed instead of being started again. A graceful
/// stop puts the job back in the queue without counting here (its start still counts in the
/// job's `attempts`).
pub const MAX_ATTEMPTS: u32 = 3;

/// How long shutdown waits for stopped jobs to be persisted after the grace period.
const PERSIST_WAIT: Duration = Duration::from_secs(10);

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The database could not be opened or read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A setting is unusable.
    #[error("configuration: {0}")]
    Config(String),
}

impl Service {
    /// Opens the database, resumes the jobs a previous run left unfinished, and returns the
    /// service (call within a Tokio runtime: runners are spawned).
    pub async fn start(config: Config) -> Result<Arc<Service>, StartError> {
        if config.workers == 0 {
            return Err(StartError::Config("workers must be at least 1".into()));
        }
        let patience = config.client_timeout.as_secs_f64();
        if !(patience > 0.0 && patience <= crate::config::MAX_CLIENT_TIMEOUT_S) {
            return Err(StartError::Config(format!(
                "client_timeout {patience} s must be above 0 s and at most {} s",
                crate::config::MAX_CLIENT_TIMEOUT_S
            )));
        }
        let default = config.default_time_limit;
        if default > config.sync_time_limit_cap || default > config.max_time_limit {
            return Err(StartError::Config(format!(
                "the default time limit ({} s) is over sync_time_limit_cap ({} s) or max_time_limit ({} s)",
                default.as_secs_f64(),
                config.sync_time_limit_cap.as_secs_f64(),
                config.max_time_limit.as_secs_f64()
            )));
        }
        let path = config.db_path.clone();
        let store = tokio::task::spawn_blocking(move || Store::open(path.as_deref()))
            .await
            .map_err(|e| StartError::Config(e.to_string()))??;
        let (shutdown, _) = watch::channel(false);
        let light_places = config.workers.saturating_mul(2).max(2);
        let svc = Arc::new(Service {
            slots: Arc::new(Semaphore::new(config.workers)),
            config,
            store: Arc::new(store),
            metrics: Metrics::default(),
            counters: Arc::default(),
            accepting: AtomicBool::new(true),
            live: Mutex::default(),
            clients: Arc::default(),
            light: Arc::new(Semaphore::new(light_places)),
            db_gate: Arc::new(Semaphore::new(super::DB_PLACES)),
            shutdown,
        });
        svc.recover().await?;
        svc.expire()
            .await
            .map_err(|e| StartError::Config(e.to_string()))?;
        tokio::spawn(svc.clone().retention_loop());
        Ok(svc)
    }

    /// Deletes what the retention allows now (see [`crate::store::Store::expire`]).
    pub async fn expire(&self) -> Result<Expired, ApiError> {
        let retention = self.config.retention;
        if retention.max_age.is_none() && retention.max_bytes.is_none() {
            return Ok(Expired::default());
        }
        let out = self.db(move |s| s.expire(now_ms(), &retention)).await?;
        self.metrics.expired(&out);
        Ok(out)
    }

    /// Runs the retention sweep every `retention_sweep` until shutdown.
    async fn retention_loop(self: Arc<Self>) {
        let mut stop = self.shutdown.subscribe();
        let period = self.config.retention_sweep.max(Duration::from_millis(10));
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if let Err(e) = self.expire().await {
                eprintln!("memplan serve: retention sweep failed: {e}");
            }
        }
    }

    async fn recover(self: &Arc<Self>) -> Result<(), StartError> {
        let store = self.store.clone();
        let rows = tokio::task::spawn_blocking(move || store.unfinished())
            .await
            .map_err(|e| StartError::Config(e.to_string()))??;
        let (mut resumed, mut failed) = (0, 0);
        for row in rows {
            let id = row.id.clone();
            if row.status == JobStatus::Running && row.crashed_runs >= MAX_ATTEMPTS {
                let e = ApiError::Internal(format!(
                    "the service stopped {} times while this job was running; it is not \
                     started again (it may be what stops the service)",
                    row.crashed_runs
                ));
                let finish = Finish {
                    status: JobStatus::Failed,
                    finished_ms: now_ms(),
                    progress: row.progress.clone(),
                    plan: None,
                    error: Some(problem_json(&e)),
                };
                let store = self.store.clone();
                tokio::task::spawn_blocking(move || store.finish(&id, &finish))
                    .await
                    .map_err(|e| StartError::Config(e.to_string()))??;
                failed += 1;
                continue;
            }
            if row.status == JobStatus::Running {
                let store = self.store.clone();
                let id = id.clone();
                tokio::task::spawn_blocking(move || store.requeue(&id, false))
                    .await
                    .map_err(|e| StartError::Config(e.to_string()))??;
            }
            let mut view = view_of(&row);
            view.status = JobStatus::Queued;
            view.progress = Progress::default();
            let slot = self.client_slot_anyway(row.client.as_deref().unwrap_or("local"));
            let live = self.register(view, row.key.clone(), slot);
            let ticket = self.admit_anyway();
            tokio::spawn(self.clone().run_job(live, ticket));
            resumed += 1;
        }
        if resumed + failed > 0 {
            eprintln!(
                "memplan serve: recovered {resumed} unfinished job(s); {failed} marked failed after {MAX_ATTEMPTS} interrupted runs"
            );
        }
        Ok(())
    }

    /// Stops admission (new work is answered 503) and ends the event streams of the jobs
    /// waiting in the queue (those of running jobs end with their run).
    pub fn begin_shutdown(&self) {
        self.accepting.store(false, Ordering::SeqCst);
        self.shutdown.send_replace(true);
    }

    /// Completes once [`Service::begin_shutdown`] has been called (at once if it has).
    pub async fn shutdown_begun(&self) {
        let mut rx = self.shutdown.subscribe();
        if rx.wait_for(|begun| *begun).await.is_err() {
            // The sender lives as long as the service: not reached.
            std::future::pending::<()>().await;
        }
    }

    /// Shuts down: [`Service::begin_shutdown`], then lets running jobs finish within the grace
    /// period ([`Service::drain`]), then stops the others and waits until they are back in the
    /// queue on disk ([`Service::interrupt_running`]).
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        self.drain().await;
        self.interrupt_running().await;
    }

    /// Waits until no job runs or the grace period has passed. [`crate::serve`] waits here
    /// while it still listens, so that `/healthz` answers 503 and new work is refused with
    /// 503 during the grace period instead of connections being refused.
    pub async fn drain(&self) {
        // A grace too long for the clock has no end.
        let deadline = Instant::now().checked_add(self.config.shutdown_grace);
        while self.running_jobs() > 0 && deadline.is_none_or(|d| Instant::now() < d) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the jobs still running (after [`Service::drain`]) and waits until they are back
    /// in the queue on disk.
    pub async fn interrupt_running(&self) {
        let live: Vec<Arc<LiveJob>> = match self.live.lock() {
            Ok(map) => map.values().cloned().collect(),
            Err(_) => Vec::new(),
        };
        for job in live {
            if job.state.borrow().status == JobStatus::Running {
                job.interrupted.store(true, Ordering::SeqCst);
                job.cancel.cancel();
            }
        }
        let deadline = Instant::now() + PERSIST_WAIT;
        while self.running_jobs() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Jobs running now.
    fn running_jobs(&self) -> usize {
        self.counters.running_jobs.load(Ordering::SeqCst)
    }
}
