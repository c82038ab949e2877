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
//!   [`memplan::PipelineOptions`] and the solve's [`CancelToken`] in its
//!   [`memplan::Control`]. A watchdog raises that token once the time limit (plus a grace) has
//!   passed; the pipeline then returns its best plan at its next check (its status then says
//!   `time_limit`, not `cancelled`: only a user's cancel is a cancel), and a budget run it
//!   stopped before any plan fitted is answered with the time limit's words, as the CLI's.
//! - **Jobs** are written to SQLite (queued) before the 202 is sent. A runner task per job
//!   waits for a slot, marks the job running (an attempt), re-reads its request from the
//!   database, solves with a progress sink that updates a watch channel (read by
//!   `GET /v1/jobs/{id}` and the event stream), and records the outcome in one transaction.
//! - **Cancellation** flips the job's state under the watch channel's lock (so it races
//!   neither the start nor the end of a run), persists it, and raises the job's token, which
//!   every pipeline stage checks. A cancelled job's plan and progress say `cancelled`.
//! - **Recovery.** On start, queued jobs are queued again and running ones (interrupted by a
//!   crash) start again; a job interrupted [`MAX_ATTEMPTS`] times is marked failed with the
//!   reason instead, since it may be what stops the service.
//! - **Shutdown** stops admission, ends event streams, lets running jobs finish within the
//!   grace period, then stops the rest and puts them back in the queue (attempt refunded) for
//!   the next start.

use crate::config::Config;
use crate::error::{ApiError, Problem};
use crate::metrics::{Gauges, Metrics};
use crate::model::{
    CheckResponse, Health, JobLinks, JobStatus, JobView, PlaceQuery, PlaceRequest, PlaceResponse,
    PlacedBuffer, Progress, ResolvedOptions,
};
use crate::request::{self, Mode, PlanInput};
use crate::store::{Finish, JobRow, NewJob, Store, StoreError};
use axum::body::Bytes;
use axum::response::sse::Event;
use futures_util::Stream;
use memplan::pipeline::{self, Control};
use memplan::{CancelToken, Graph, PlanStatus, ProgressSink};
use memplan_solver::place::{self, PlaceOptions};
use memplan_solver::{csv, Budget, PlacementProblem};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// A job interrupted this many times while running (the service stopped under it) is marked
/// failed instead of being started again.
pub const MAX_ATTEMPTS: u32 = 3;

/// How long shutdown waits for stopped jobs to be persisted after the grace period.
const PERSIST_WAIT: Duration = Duration::from_secs(10);

/// The shared state of the HTTP handlers.
pub type AppState = Arc<Service>;

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

#[derive(Debug, Default)]
struct Counters {
    admitted: AtomicUsize,
    running_solves: AtomicUsize,
    running_jobs: AtomicUsize,
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
struct Running(Arc<Counters>, fn(&Counters) -> &AtomicUsize);

impl Running {
    fn new(c: &Arc<Counters>, which: fn(&Counters) -> &AtomicUsize) -> Self {
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
struct CancelOnDrop(Option<CancelToken>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            t.cancel();
        }
    }
}

/// A job known to this process (queued or running).
#[derive(Debug)]
struct LiveJob {
    id: String,
    key: String,
    cancel: CancelToken,
    /// Stopped by shutdown: goes back to the queue instead of finishing.
    interrupted: AtomicBool,
    /// Its solve has started (a cancelled job's best plan is then on its way).
    solving: AtomicBool,
    state: watch::Sender<JobView>,
}

/// A plan answer: the plan JSON and whether it came from the store.
#[derive(Debug, Clone)]
pub struct PlanAnswer {
    /// memplan-plan/1 JSON.
    pub plan: String,
    /// Answered from a stored plan.
    pub cached: bool,
}

/// A placement answer.
#[derive(Debug, Clone)]
pub struct PlaceAnswer {
    /// The figures and offsets.
    pub response: PlaceResponse,
    /// The placed buffers as minimalloc CSV.
    pub csv: String,
}

/// The body of a `POST /v1/place` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceBody {
    /// minimalloc CSV.
    Csv,
    /// [`PlaceRequest`] JSON.
    Json,
}

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
    shutdown: watch::Sender<bool>,
}

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

fn links(id: &str) -> JobLinks {
    JobLinks {
        this: format!("/v1/jobs/{id}"),
        events: format!("/v1/jobs/{id}/events"),
        plan: format!("/v1/jobs/{id}/plan"),
    }
}

fn progress_of(stats: &memplan::plan::PlanStats, stage: &str) -> Progress {
    let (peak, lower) = (
        stats.peak_bytes,
        stats.lower_bound_bytes.min(stats.peak_bytes),
    );
    Progress {
        stage: Some(stage.to_string()),
        best_peak_bytes: Some(peak),
        lower_bound_bytes: Some(lower),
        gap: Some(if peak == 0 {
            0.0
        } else {
            (peak - lower) as f64 / peak as f64
        }),
        elapsed_s: stats.elapsed_ms / 1e3,
        status: stats.status,
    }
}

/// Progress figures of a stored plan document.
fn progress_of_text(plan: &str) -> Progress {
    #[derive(serde::Deserialize)]
    struct StatsOnly {
        #[serde(default)]
        stats: memplan::plan::PlanStats,
    }
    match serde_json::from_str::<StatsOnly>(plan) {
        Ok(s) => progress_of(&s.stats, "done"),
        Err(_) => Progress::default(),
    }
}

fn problem_json(e: &ApiError) -> String {
    serde_json::to_string(&e.problem()).unwrap_or_default()
}

/// A job's view from its stored row.
fn view_of(row: &JobRow) -> JobView {
    // Unreadable stored options (another version's) show as the defaults; running such a job
    // fails naming the reason.
    let options = serde_json::from_str(&row.options).unwrap_or(ResolvedOptions {
        pipeline: memplan::PipelineOptions::default(),
        cache: false,
    });
    JobView {
        id: row.id.clone(),
        status: row.status,
        graph: row.graph_name.clone(),
        options,
        created_unix_ms: row.created_ms,
        started_unix_ms: row.started_ms,
        finished_unix_ms: row.finished_ms,
        attempts: row.attempts,
        cached: row.cached,
        progress: row.progress.clone(),
        error: row
            .error
            .as_deref()
            .and_then(|e| serde_json::from_str::<Problem>(e).ok()),
        links: links(&row.id),
    }
}

/// The wall-clock limit of a solve with `options` (for the watchdog).
fn time_limit_of(options: &ResolvedOptions, config: &Config) -> Duration {
    Duration::try_from_secs_f64(options.pipeline.time_limit_s).unwrap_or(config.default_time_limit)
}

/// A synchronous plan as JSON. While its answer is still wanted only the watchdog raises
/// `control.cancel` (the client gone, nobody reads the answer): a run it stopped is answered as
/// the time limit that stopped it, with the words and status the CLI uses.
fn sync_plan(
    graph: &Graph,
    options: &memplan::PipelineOptions,
    control: &Control,
) -> Result<String, ApiError> {
    let mut plan = pipeline::run(graph, options, control)
        .map_err(|e| request::pipeline_error(e.cancel_as_time_limit(options.time_limit_s)))?
        .plan;
    if plan.stats.status == Some(PlanStatus::Cancelled) {
        plan.stats.status = Some(PlanStatus::TimeLimit);
    }
    serde_json::to_string(&plan).map_err(|e| ApiError::Internal(e.to_string()))
}

/// The server-sent event for a job state.
fn event(view: &JobView, seq: u64) -> Event {
    let name = if view.status.is_terminal() {
        view.status.as_str()
    } else {
        "progress"
    };
    Event::default()
        .event(name)
        .id(seq.to_string())
        .data(serde_json::to_string(view).unwrap_or_default())
}

impl Service {
    /// Opens the database, resumes the jobs a previous run left unfinished, and returns the
    /// service (call within a Tokio runtime: runners are spawned).
    pub async fn start(config: Config) -> Result<Arc<Service>, StartError> {
        if config.workers == 0 {
            return Err(StartError::Config("workers must be at least 1".into()));
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
        let svc = Arc::new(Service {
            slots: Arc::new(Semaphore::new(config.workers)),
            config,
            store: Arc::new(store),
            metrics: Metrics::default(),
            counters: Arc::default(),
            accepting: AtomicBool::new(true),
            live: Mutex::default(),
            shutdown,
        });
        svc.recover().await?;
        Ok(svc)
    }

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

    async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| ApiError::Internal(format!("database task failed: {e}")))?
            .map_err(ApiError::from)
    }

    fn live_job(&self, id: &str) -> Option<Arc<LiveJob>> {
        self.live.lock().ok()?.get(id).cloned()
    }

    fn register(&self, view: JobView, key: String) -> Arc<LiveJob> {
        let id = view.id.clone();
        let (state, _) = watch::channel(view);
        let live = Arc::new(LiveJob {
            id,
            key,
            cancel: CancelToken::new(),
            interrupted: AtomicBool::new(false),
            solving: AtomicBool::new(false),
            state,
        });
        if let Ok(mut map) = self.live.lock() {
            map.insert(live.id.clone(), live.clone());
        }
        live
    }

    fn retire(&self, live: &LiveJob) {
        if let Ok(mut map) = self.live.lock() {
            map.remove(&live.id);
        }
    }

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
    fn admit_anyway(&self) -> Ticket {
        self.counters.admitted.fetch_add(1, Ordering::SeqCst);
        Ticket(self.counters.clone())
    }

    /// Seconds until a place is likely free: the mean solve time times the waiting rounds.
    fn retry_after(&self, in_system: usize) -> u64 {
        let mean = self.metrics.mean_solve_seconds().unwrap_or(1.0);
        let rounds = (in_system + 1) as f64 / self.config.workers as f64;
        (mean * rounds).ceil().clamp(1.0, 60.0) as u64
    }

    async fn slot(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::ShuttingDown)
    }

    /// Runs `work` on a blocking thread holding `permit` and `ticket` until it returns; raises
    /// `cancel` when `limit` (plus a grace) has passed.
    async fn solve<T: Send + 'static>(
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

    /// `POST /v1/plan` and `POST /plan`: a plan now, from the store when an identical request
    /// was answered.
    pub async fn plan(self: &Arc<Self>, input: PlanInput) -> Result<PlanAnswer, ApiError> {
        let config = self.config.clone();
        let p = tokio::task::spawn_blocking(move || request::prepare(&input, &config, Mode::Sync))
            .await??;
        if p.options.cache {
            let key = p.key.clone();
            if let Some((_, plan)) = self.db(move |s| s.cached_plan(&key)).await? {
                self.metrics.cache_hit();
                return Ok(PlanAnswer { plan, cached: true });
            }
        }
        let ticket = self.admit()?;
        let permit = self.slot().await?;
        let cancel = CancelToken::new();
        let mut guard = CancelOnDrop(Some(cancel.clone()));
        let limit = time_limit_of(&p.options, &self.config);
        let graph = p.graph;
        let options = p.options.pipeline;
        let control = Control {
            cancel: Some(cancel.clone()),
            progress: None,
        };
        let result = self
            .solve("plan", permit, ticket, limit, cancel, move || {
                sync_plan(&graph, &options, &control)
            })
            .await?;
        guard.0 = None;
        let plan = result?;
        let (key, text) = (p.key, plan.clone());
        if let Err(e) = self.db(move |s| s.put_plan(&key, &text, now_ms())).await {
            // The answer is still right; only the next identical request will solve again.
            eprintln!("memplan serve: could not store a plan: {e}");
        }
        Ok(PlanAnswer {
            plan,
            cached: false,
        })
    }

    /// `POST /v1/jobs` and `POST /jobs`: accepts a job (durably) and starts its runner; a job
    /// answered from a stored plan is done at once.
    pub async fn submit(self: &Arc<Self>, input: PlanInput) -> Result<JobView, ApiError> {
        let config = self.config.clone();
        let p = tokio::task::spawn_blocking(move || request::prepare(&input, &config, Mode::Job))
            .await??;
        let id = uuid::Uuid::new_v4().to_string();
        let options =
            serde_json::to_string(&p.options).map_err(|e| ApiError::Internal(e.to_string()))?;
        let graph_name = p.graph.name.clone();
        let created = now_ms();
        let cached = if p.options.cache {
            let key = p.key.clone();
            self.db(move |s| s.cached_plan(&key)).await?
        } else {
            None
        };
        let ticket = match cached {
            Some(_) => None,
            None => Some(self.admit()?),
        };
        let status = if cached.is_some() {
            JobStatus::Done
        } else {
            JobStatus::Queued
        };
        let cached_plan = cached.map(|(plan_id, text)| (plan_id, progress_of_text(&text)));
        let row = {
            let (id, key, graph_json) = (id.clone(), p.key.clone(), p.graph_json);
            let graph_name = graph_name.clone();
            self.db(move |s| {
                s.insert_job(&NewJob {
                    id: &id,
                    key: &key,
                    status,
                    graph_name: &graph_name,
                    graph: &graph_json,
                    options: &options,
                    created_ms: created,
                    cached_plan,
                })?;
                s.job(&id)
            })
            .await?
            .ok_or_else(|| ApiError::Internal("job vanished after insertion".into()))?
        };
        let view = view_of(&row);
        if let Some(ticket) = ticket {
            let live = self.register(view.clone(), p.key);
            tokio::spawn(self.clone().run_job(live, ticket));
        } else {
            self.metrics.cache_hit();
            self.metrics.job_finished("done");
        }
        Ok(view)
    }

    /// The runner of one job (see the module doc).
    async fn run_job(self: Arc<Self>, live: Arc<LiveJob>, ticket: Ticket) {
        let mut shutdown = self.shutdown.subscribe();
        let mut state = live.state.subscribe();
        let permit = tokio::select! {
            p = self.slot() => match p {
                Ok(p) => p,
                Err(_) => return self.retire(&live),
            },
            _ = state.wait_for(|v| v.status == JobStatus::Cancelled) => return self.retire(&live),
            _ = shutdown.wait_for(|s| *s) => return self.retire(&live),
        };
        if !self.accepting.load(Ordering::SeqCst) {
            // Shutting down: the job stays queued in the database for the next start.
            return self.retire(&live);
        }
        let started = now_ms();
        // Counted before the status turns running, so that no one sees a running job uncounted.
        let _running = Running::new(&self.counters, |c| &c.running_jobs);
        let moved = live.state.send_if_modified(|v| {
            if v.status != JobStatus::Queued {
                return false;
            }
            v.status = JobStatus::Running;
            v.started_unix_ms = Some(started);
            v.attempts += 1;
            v.progress = Progress::default();
            true
        });
        if !moved {
            return self.retire(&live);
        }
        let id = live.id.clone();
        let marked = {
            let id = id.clone();
            self.db(move |s| {
                if !s.mark_running(&id, started)? {
                    return Ok(None);
                }
                s.job_request(&id)
            })
            .await
        };
        let (graph_text, options_text) = match marked {
            Ok(Some(req)) => req,
            // No longer queued in the database: cancelled meanwhile.
            Ok(None) => return self.retire(&live),
            Err(e) => {
                eprintln!("memplan serve: job {id}: cannot start: {e}");
                return self.retire(&live);
            }
        };
        live.solving.store(true, Ordering::SeqCst);
        let options: Result<ResolvedOptions, String> =
            serde_json::from_str(&options_text).map_err(|e| format!("stored options: {e}"));
        let limit = options
            .as_ref()
            .map_or(self.config.default_time_limit, |o| {
                time_limit_of(o, &self.config)
            });
        let sink = {
            let live = live.clone();
            ProgressSink::new(move |p| {
                live.state.send_modify(|v| {
                    let lower = p.lower_bound.min(p.best_peak);
                    v.progress = Progress {
                        stage: Some(p.stage.to_string()),
                        best_peak_bytes: Some(p.best_peak),
                        lower_bound_bytes: Some(lower),
                        gap: Some(if p.best_peak == 0 {
                            0.0
                        } else {
                            (p.best_peak - lower) as f64 / p.best_peak as f64
                        }),
                        elapsed_s: p.elapsed.as_secs_f64(),
                        // A cancelled job says so at once; a running one has no status yet.
                        status: v.progress.status.filter(|s| *s == PlanStatus::Cancelled),
                    }
                })
            })
        };
        let cancel = live.cancel.clone();
        let work = {
            let cancel = cancel.clone();
            let live = live.clone();
            move || -> Result<memplan::Plan, ApiError> {
                let options = options.map_err(|e| {
                    ApiError::Internal(format!("the stored job cannot be read: {e}"))
                })?;
                let graph = Graph::parse(&graph_text).map_err(|e| {
                    ApiError::Internal(format!("the stored graph cannot be read: {e}"))
                })?;
                let control = Control {
                    cancel: Some(cancel),
                    progress: Some(sink),
                };
                pipeline::run(&graph, &options.pipeline, &control)
                    .map(|r| r.plan)
                    .map_err(|e| {
                        // A user's cancel marks the job cancelled before it raises the token;
                        // else the watchdog raised it: the time limit stopped the run.
                        let by_user = live.state.borrow().status == JobStatus::Cancelled;
                        let e = if by_user {
                            e
                        } else {
                            e.cancel_as_time_limit(options.pipeline.time_limit_s)
                        };
                        request::pipeline_error(e)
                    })
            }
        };
        let outcome = self
            .solve("job", permit, ticket, limit, cancel, work)
            .await
            .and_then(|r| r);
        let cancelled = live.state.borrow().status == JobStatus::Cancelled;
        if live.interrupted.load(Ordering::SeqCst) && !cancelled {
            let key = id.clone();
            if let Err(e) = self.db(move |s| s.requeue(&key, true)).await {
                eprintln!("memplan serve: job {id}: cannot put back in the queue: {e}");
            }
            return self.retire(&live);
        }
        let finished = now_ms();
        let mut last = live.state.borrow().progress.clone();
        if cancelled {
            last.status = Some(PlanStatus::Cancelled);
        }
        // The plan's status: `cancelled` when the job was (whenever the cancel came), else
        // what the pipeline said, the watchdog's stop being the time limit.
        let outcome = match outcome {
            Ok(mut plan) => {
                plan.stats.status = match plan.stats.status {
                    _ if cancelled => Some(PlanStatus::Cancelled),
                    Some(PlanStatus::Cancelled) => Some(PlanStatus::TimeLimit),
                    other => other,
                };
                let progress = progress_of(&plan.stats, "done");
                tokio::task::spawn_blocking(move || serde_json::to_string(&plan))
                    .await
                    .map_err(ApiError::from)
                    .and_then(|r| r.map_err(|e| ApiError::Internal(e.to_string())))
                    .map(|text| (text, progress))
            }
            Err(e) => Err(e),
        };
        let finish = match outcome {
            Ok((text, progress)) => Finish {
                status: if cancelled {
                    JobStatus::Cancelled
                } else {
                    JobStatus::Done
                },
                finished_ms: finished,
                progress,
                // A cancelled job's plan is its best so far: kept for it, never reused.
                plan: Some(((!cancelled).then(|| live.key.clone()), text)),
                error: None,
            },
            Err(e) => Finish {
                status: if cancelled {
                    JobStatus::Cancelled
                } else {
                    JobStatus::Failed
                },
                finished_ms: finished,
                progress: last,
                plan: None,
                error: Some(problem_json(&e)),
            },
        };
        let stored = {
            let (id, finish) = (id.clone(), finish.clone());
            self.db(move |s| s.finish(&id, &finish)).await
        };
        if let Err(e) = stored {
            // The job stays `running` in the database and runs again after a restart.
            eprintln!("memplan serve: job {id}: cannot record its outcome: {e}");
            return self.retire(&live);
        }
        live.state.send_modify(|v| {
            v.status = finish.status;
            v.finished_unix_ms = Some(finished);
            v.progress = finish.progress.clone();
            v.error = finish
                .error
                .as_deref()
                .and_then(|e| serde_json::from_str(e).ok());
        });
        self.metrics.job_finished(finish.status.as_str());
        self.retire(&live);
    }

    /// `GET /v1/jobs/{id}`.
    pub async fn job(&self, id: &str) -> Result<JobView, ApiError> {
        if let Some(live) = self.live_job(id) {
            let mut view = live.state.borrow().clone();
            if let (JobStatus::Running, Some(started)) = (view.status, view.started_unix_ms) {
                // Elapsed time now, not at the last progress report.
                view.progress.elapsed_s = now_ms().saturating_sub(started) as f64 / 1e3;
            }
            return Ok(view);
        }
        let key = id.to_string();
        match self.db(move |s| s.job(&key)).await? {
            Some(row) => Ok(view_of(&row)),
            None => Err(ApiError::NotFound(format!("no job {id:?}"))),
        }
    }

    /// `DELETE /v1/jobs/{id}`: cancels a queued or running job.
    pub async fn cancel(&self, id: &str) -> Result<JobView, ApiError> {
        let now = now_ms();
        if let Some(live) = self.live_job(id) {
            let mut was = None;
            live.state.send_if_modified(|v| match v.status {
                JobStatus::Queued | JobStatus::Running => {
                    was = Some(v.status);
                    v.status = JobStatus::Cancelled;
                    v.finished_unix_ms = Some(now);
                    v.progress.status = Some(PlanStatus::Cancelled);
                    true
                }
                _ => false,
            });
            if was.is_some() {
                live.cancel.cancel();
                let view = live.state.borrow().clone();
                self.persist_cancel(id, &view.progress, now).await?;
                if was == Some(JobStatus::Queued) {
                    self.metrics.job_finished("cancelled");
                }
                return Ok(view);
            }
        }
        let key = id.to_string();
        let row = self
            .db(move |s| s.job(&key))
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("no job {id:?}")))?;
        match row.status {
            JobStatus::Cancelled => Ok(view_of(&row)),
            JobStatus::Done | JobStatus::Failed => Err(ApiError::Conflict(format!(
                "job {id} is already {}; only queued or running jobs can be cancelled",
                row.status.as_str()
            ))),
            JobStatus::Queued | JobStatus::Running => {
                // Known to the database only (the service is stopping): cancel it there.
                let mut view = view_of(&row);
                view.progress.status = Some(PlanStatus::Cancelled);
                self.persist_cancel(id, &view.progress, now).await?;
                view.status = JobStatus::Cancelled;
                view.finished_unix_ms = Some(now);
                Ok(view)
            }
        }
    }

    async fn persist_cancel(
        &self,
        id: &str,
        progress: &Progress,
        now: u64,
    ) -> Result<(), ApiError> {
        let finish = Finish {
            status: JobStatus::Cancelled,
            finished_ms: now,
            progress: progress.clone(),
            plan: None,
            error: None,
        };
        let id = id.to_string();
        self.db(move |s| s.finish(&id, &finish)).await
    }

    /// `GET /v1/jobs/{id}/plan`: (plan JSON, status).
    pub async fn job_plan(&self, id: &str) -> Result<(String, JobStatus), ApiError> {
        let key = id.to_string();
        let (row, plan) = self
            .db(move |s| {
                let row = s.job(&key)?;
                let plan = match &row {
                    Some(r) if r.has_plan => s.job_plan(&key)?,
                    _ => None,
                };
                Ok((row, plan))
            })
            .await?;
        let row = row.ok_or_else(|| ApiError::NotFound(format!("no job {id:?}")))?;
        match (row.status, plan) {
            (JobStatus::Done | JobStatus::Cancelled, Some(plan)) => Ok((plan, row.status)),
            (JobStatus::Cancelled, None)
                if self
                    .live_job(id)
                    .is_some_and(|l| l.solving.load(Ordering::SeqCst)) =>
            {
                Err(ApiError::Conflict(format!(
                    "job {id} is being cancelled; its best plan so far is stored in a moment"
                )))
            }
            (JobStatus::Cancelled, None) => Err(ApiError::Conflict(format!(
                "job {id} was cancelled before it produced a plan"
            ))),
            (JobStatus::Failed, _) => Err(ApiError::Conflict(format!(
                "job {id} failed: {}",
                view_of(&row).error.map_or_else(String::new, |p| p.detail)
            ))),
            (status, _) => Err(ApiError::Conflict(format!(
                "job {id} is {}; its plan is not ready (follow /v1/jobs/{id}/events)",
                status.as_str()
            ))),
        }
    }

    /// `GET /v1/jobs/{id}/events`: the job's state now and after every change, until it ends
    /// (or the service stops).
    pub async fn events(
        &self,
        id: &str,
    ) -> Result<impl Stream<Item = Result<Event, Infallible>> + Send + 'static, ApiError> {
        struct St {
            rx: Option<watch::Receiver<JobView>>,
            last: Option<JobView>,
            shutdown: watch::Receiver<bool>,
            seq: u64,
            done: bool,
        }
        let (rx, last) = match self.live_job(id) {
            Some(live) => (Some(live.state.subscribe()), None),
            None => (None, Some(self.job(id).await?)),
        };
        let st = St {
            rx,
            last,
            shutdown: self.shutdown.subscribe(),
            seq: 0,
            done: false,
        };
        Ok(futures_util::stream::unfold(st, |mut st| async move {
            if st.done {
                return None;
            }
            let view = match (&mut st.rx, st.last.take()) {
                (_, Some(view)) => {
                    st.done = true;
                    view
                }
                (None, None) => return None,
                (Some(rx), None) => {
                    if st.seq > 0 {
                        tokio::select! {
                            r = rx.changed() => if r.is_err() { st.done = true },
                            _ = st.shutdown.wait_for(|s| *s) => return None,
                        }
                    }
                    rx.borrow_and_update().clone()
                }
            };
            if view.status.is_terminal() {
                st.done = true;
            }
            st.seq += 1;
            Some((Ok(event(&view, st.seq)), st))
        }))
    }

    /// `POST /v1/check`.
    pub async fn check(&self, body: Bytes) -> Result<CheckResponse, ApiError> {
        let config = self.config.clone();
        tokio::task::spawn_blocking(move || {
            let (graph, plan, budget) = request::prepare_check(&body, &config)?;
            // A plan carrying a rewritten graph replays against it, once it is proven derived
            // from the request's graph; a carried graph that is not is an invalid plan.
            let graph = match request::graph_for_check(graph, &plan, &config)? {
                Ok(g) => g,
                Err(why) => return Ok(CheckResponse::invalid(None, why)),
            };
            Ok(match memplan::validate(&graph, &plan, budget) {
                Ok(r) => CheckResponse {
                    valid: true,
                    peak_bytes: Some(r.peak),
                    max_live_bytes: Some(r.max_live),
                    host_peak_bytes: Some(r.host_peak),
                    execs: Some(r.execs),
                    spills: Some(r.spills),
                    violation: None,
                },
                Err(v) => CheckResponse::invalid(v.instruction, v.to_string()),
            })
        })
        .await?
    }

    /// `POST /v1/place`.
    pub async fn place(
        &self,
        kind: PlaceBody,
        query: PlaceQuery,
        body: Bytes,
    ) -> Result<PlaceAnswer, ApiError> {
        let config = self.config.clone();
        let (ids, problem, opts) =
            tokio::task::spawn_blocking(move || parse_place(kind, query, &body, &config)).await??;
        let ticket = self.admit()?;
        let permit = self.slot().await?;
        let cancel = CancelToken::new();
        let mut guard = CancelOnDrop(Some(cancel.clone()));
        let limit = opts.budget.time.unwrap_or(self.config.default_time_limit);
        let opts = PlaceOptions {
            budget: Budget {
                cancel: Some(cancel.clone()),
                ..opts.budget
            },
            ..opts
        };
        let started = Instant::now();
        let out = self
            .solve("place", permit, ticket, limit, cancel, move || {
                place::place(&problem, &opts).map(|r| (r, problem))
            })
            .await?;
        guard.0 = None;
        let (r, problem) = out.map_err(|e| ApiError::buffers(e.to_string()))?;
        let csv = csv::write(&ids, &problem, &r.placement);
        let response = PlaceResponse {
            fits: r.fits,
            peak_bytes: r.stats.objective,
            lower_bound_bytes: r.stats.lower_bound,
            gap: r.stats.gap(),
            load_bytes: problem.load(),
            status: r.stats.status.as_str().to_string(),
            method: r.method.clone(),
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
            buffers: ids
                .into_iter()
                .zip(&r.placement.offsets)
                .map(|(id, &offset)| PlacedBuffer { id, offset })
                .collect(),
        };
        Ok(PlaceAnswer { response, csv })
    }

    /// `GET /healthz`: (healthy, figures).
    pub async fn health(&self) -> (bool, Health) {
        let db = self.db(|s| s.ping()).await;
        let g = self.gauges();
        let accepting = self.accepting.load(Ordering::SeqCst);
        let status = match (&db, accepting) {
            (Err(_), _) => "degraded",
            (Ok(()), false) => "shutting_down",
            (Ok(()), true) => "ok",
        };
        (
            status == "ok",
            Health {
                status: status.to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                database: db.err().map_or_else(|| "ok".to_string(), |e| e.to_string()),
                workers: g.workers,
                queue_depth: g.queue_depth,
                running_jobs: g.running_jobs,
            },
        )
    }

    /// `GET /metrics`: the exposition text, with the stored jobs per status.
    pub async fn metrics_text(&self) -> String {
        let mut text = self.metrics.render(self.gauges());
        if let Ok(counts) = self.db(|s| s.status_counts()).await {
            text.push_str(
                "# HELP memplan_jobs Stored jobs by status.\n# TYPE memplan_jobs gauge\n",
            );
            for (status, n) in counts {
                text.push_str(&format!("memplan_jobs{{status=\"{status}\"}} {n}\n"));
            }
        }
        text
    }

    async fn recover(self: &Arc<Self>) -> Result<(), StartError> {
        let store = self.store.clone();
        let rows = tokio::task::spawn_blocking(move || store.unfinished())
            .await
            .map_err(|e| StartError::Config(e.to_string()))??;
        let (mut resumed, mut failed) = (0, 0);
        for row in rows {
            let id = row.id.clone();
            if row.status == JobStatus::Running && row.attempts >= MAX_ATTEMPTS {
                let e = ApiError::Internal(format!(
                    "the service stopped {} times while this job was running; it is not \
                     started again (it may be what stops the service)",
                    row.attempts
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
            let live = self.register(view, row.key.clone());
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

    /// Stops admission and ends event streams (new work is answered 503).
    pub fn begin_shutdown(&self) {
        self.accepting.store(false, Ordering::SeqCst);
        self.shutdown.send_replace(true);
    }

    /// Shuts down: [`Service::begin_shutdown`], then lets running jobs finish within the grace
    /// period, then stops the others and waits until they are back in the queue on disk.
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        let running = || self.counters.running_jobs.load(Ordering::SeqCst);
        let deadline = Instant::now() + self.config.shutdown_grace;
        while running() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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
        while running() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Parses a placement request into ids, problem and options.
fn parse_place(
    kind: PlaceBody,
    query: PlaceQuery,
    body: &[u8],
    config: &Config,
) -> Result<(Vec<String>, PlacementProblem, PlaceOptions), ApiError> {
    let text = request::text(body)?;
    let (ids, mut problem, capacity, time_limit_s, heuristic) = match kind {
        PlaceBody::Csv => {
            let alignment = query.alignment.unwrap_or(1);
            if !alignment.is_power_of_two() {
                return Err(ApiError::options(format!(
                    "alignment {alignment} is not a power of two"
                )));
            }
            let parsed =
                csv::parse(text, alignment).map_err(|e| ApiError::buffers(e.to_string()))?;
            (
                parsed.ids,
                parsed.problem,
                query.capacity,
                query.time_limit_s,
                query.heuristic.unwrap_or(false),
            )
        }
        PlaceBody::Json => {
            if query != PlaceQuery::default() {
                return Err(ApiError::BadRequest(
                    "with a JSON body the options go in the body, not the query string".into(),
                ));
            }
            let req: PlaceRequest = request::json(text)?;
            let alignment = req.alignment.unwrap_or(1);
            if !alignment.is_power_of_two() {
                return Err(ApiError::options(format!(
                    "alignment {alignment} is not a power of two"
                )));
            }
            let mut seen = BTreeMap::new();
            let mut ids = Vec::with_capacity(req.buffers.len());
            let mut buffers = Vec::with_capacity(req.buffers.len());
            for (i, b) in req.buffers.iter().enumerate() {
                let id = b.id.text();
                let buffer =
                    csv::check_buffer(b.lower, b.upper, b.size, b.alignment.unwrap_or(alignment))
                        .map_err(|rule| {
                        ApiError::buffers(format!("buffers[{i}] (buffer `{id}`): {rule}"))
                    })?;
                if let Some(first) = seen.insert(id.clone(), i) {
                    return Err(ApiError::buffers(format!(
                        "buffers[{i}] (buffer `{id}`): id already used by buffers[{first}]"
                    )));
                }
                ids.push(id);
                buffers.push(buffer);
            }
            (
                ids,
                PlacementProblem::new(buffers),
                req.capacity,
                req.time_limit_s,
                req.heuristic.unwrap_or(false),
            )
        }
    };
    if ids.len() > config.max_buffers {
        return Err(ApiError::LimitExceeded {
            limit: "max_buffers",
            detail: format!(
                "{} buffers, over the limit of {} buffers (max_buffers)",
                ids.len(),
                config.max_buffers
            ),
        });
    }
    let time = request::time_limit(time_limit_s, config, Mode::Sync, "time_limit_s")?;
    problem.capacity = capacity;
    Ok((
        ids,
        problem,
        PlaceOptions {
            budget: Budget::with_time(time),
            exact: !heuristic,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Graph {
        Graph::parse(include_str!("../../samples/resnet_block.train.json")).unwrap()
    }

    #[test]
    fn a_budgeted_plan_the_watchdog_stopped_is_answered_as_the_time_limit_as_the_cli_does() {
        // The watchdog raised the token before the pipeline's own cap (a stage overran it).
        let token = CancelToken::new();
        token.cancel();
        let control = Control {
            cancel: Some(token),
            progress: None,
        };
        let options = memplan::PipelineOptions {
            budget: Some(memplan::budget::BudgetSpec::Bytes(1)),
            time_limit_s: 0.1,
            ..memplan::PipelineOptions::default()
        };
        let e = sync_plan(&sample(), &options, &control).unwrap_err();
        let p = e.problem();
        assert_eq!(p.status, 422);
        assert!(
            p.detail.starts_with(
                "the time limit of 0.1 s bound (raise time_limit_s): planning under the budget of 1 bytes"
            ),
            "{}",
            p.detail
        );
        // Without a budget the best plan so far is answered, its status the time limit.
        let free = memplan::PipelineOptions {
            time_limit_s: 0.1,
            ..memplan::PipelineOptions::default()
        };
        let text = sync_plan(&sample(), &free, &control).unwrap();
        let plan = memplan::Plan::parse(&text).unwrap();
        assert_eq!(plan.stats.status, Some(PlanStatus::TimeLimit));
    }
}
