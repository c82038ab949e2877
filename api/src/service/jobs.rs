//! The job resource: submitting a job (`POST /v1/jobs`, `POST /jobs`), reading it
//! (`GET /v1/jobs/{id}`), cancelling it (`DELETE /v1/jobs/{id}`) and reading its plan
//! (`GET /v1/jobs/{id}/plan`); the jobs live in this process and their views.

use super::clients::ClientSlot;
use super::{now_ms, Service};
use crate::auth::Client;
use crate::error::{ApiError, Problem};
use crate::model::{JobLinks, JobStatus, JobView, Progress, ResolvedOptions};
use crate::request::{self, Mode, PlanInput};
use crate::store::{Finish, JobPage, JobRow, NewJob};
use memplan::{CancelToken, PlanStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

/// A job known to this process (queued or running).
#[derive(Debug)]
pub(super) struct LiveJob {
    pub(super) id: String,
    pub(super) key: String,
    pub(super) cancel: CancelToken,
    /// Stopped by shutdown: goes back to the queue instead of finishing.
    pub(super) interrupted: AtomicBool,
    /// Its solve has started (a cancelled job's best plan is then on its way).
    pub(super) solving: AtomicBool,
    pub(super) state: watch::Sender<JobView>,
    /// Its client's place (per-client limit), given back when the job is dropped.
    _slot: Option<ClientSlot>,
}

fn links(id: &str) -> JobLinks {
    JobLinks {
        this: format!("/v1/jobs/{id}"),
        events: format!("/v1/jobs/{id}/events"),
        plan: format!("/v1/jobs/{id}/plan"),
    }
}

pub(super) fn progress_of(stats: &memplan::plan::PlanStats, stage: &str) -> Progress {
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
pub(super) fn progress_of_text(plan: &str) -> Progress {
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

/// A job's view from its stored row.
pub(super) fn view_of(row: &JobRow) -> JobView {
    // Unreadable stored options (another version's) show as the defaults; running such a job
    // fails naming the reason. They show as they read back (`ResolvedOptions::echoed`).
    let options = serde_json::from_str(&row.options)
        .unwrap_or(ResolvedOptions {
            pipeline: memplan::PipelineOptions::default(),
            cache: false,
        })
        .echoed();
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

impl Service {
    pub(super) fn live_job(&self, id: &str) -> Option<Arc<LiveJob>> {
        self.live.lock().ok()?.get(id).cloned()
    }

    pub(super) fn register(
        &self,
        view: JobView,
        key: String,
        slot: Option<ClientSlot>,
    ) -> Arc<LiveJob> {
        let id = view.id.clone();
        let (state, _) = watch::channel(view);
        let live = Arc::new(LiveJob {
            id,
            key,
            cancel: CancelToken::new(),
            interrupted: AtomicBool::new(false),
            solving: AtomicBool::new(false),
            state,
            _slot: slot,
        });
        if let Ok(mut map) = self.live.lock() {
            map.insert(live.id.clone(), live.clone());
        }
        live
    }

    pub(super) fn retire(&self, live: &LiveJob) {
        if let Ok(mut map) = self.live.lock() {
            map.remove(&live.id);
        }
    }

    /// `POST /v1/jobs` and `POST /jobs`: accepts a job of `client` (durably) and starts its
    /// runner; a job answered from a stored plan is done at once.
    pub async fn submit(
        self: &Arc<Self>,
        input: PlanInput,
        client: &Client,
    ) -> Result<JobView, ApiError> {
        let config = self.config.clone();
        let p = self
            .light(move || request::prepare(&input, &config, Mode::Job))
            .await?;
        let id = uuid::Uuid::new_v4().to_string();
        let options =
            serde_json::to_string(&p.options).map_err(|e| ApiError::Internal(e.to_string()))?;
        let graph_name = p.graph.name.clone();
        let created = now_ms();
        let (key, graph_json) = (p.key.clone(), Arc::new(p.graph_json));
        let (graph_name, client_name) = (Arc::new(graph_name), Arc::new(client.0.clone()));
        let options = Arc::new(options);
        let insert = |status: JobStatus| {
            let (id, key, graph_json) = (id.clone(), key.clone(), graph_json.clone());
            let (graph_name, client_name, options) =
                (graph_name.clone(), client_name.clone(), options.clone());
            move |s: &crate::store::Store, cached: bool| {
                let job = NewJob {
                    id: &id,
                    key: &key,
                    status,
                    graph_name: &graph_name,
                    graph: &graph_json,
                    options: &options,
                    created_ms: created,
                    cached_plan: None,
                    client: &client_name,
                };
                if cached {
                    return s.insert_cached_job(&job, progress_of_text);
                }
                s.insert_job(&job)?;
                s.job(&id)
            }
        };
        // A stored plan answers at once (looked up and pointed at in one step).
        let hit = if p.options.cache {
            let f = insert(JobStatus::Done);
            self.db(move |s| f(s, true)).await?
        } else {
            None
        };
        let (row, ticket, slot) = match hit {
            Some(row) => (row, None, None),
            None => {
                let slot = self.client_slot(client)?;
                let ticket = self.admit()?;
                let f = insert(JobStatus::Queued);
                let row = self
                    .db(move |s| f(s, false))
                    .await?
                    .ok_or_else(|| ApiError::Internal("job vanished after insertion".into()))?;
                (row, Some(ticket), Some(slot))
            }
        };
        let view = view_of(&row);
        if let Some(ticket) = ticket {
            let live = self.register(view.clone(), p.key, slot);
            tokio::spawn(self.clone().run_job(live, ticket));
        } else {
            self.metrics.cache_hit();
            self.metrics.job_finished("done");
        }
        Ok(view)
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

    /// `GET /v1/jobs`: jobs with one of `statuses` (all when empty), newest first, `limit` per
    /// page, continuing below the `before` cursor; live jobs show their current state.
    pub async fn list(
        &self,
        statuses: Vec<JobStatus>,
        limit: usize,
        before: Option<i64>,
    ) -> Result<(Vec<JobView>, Option<i64>), ApiError> {
        let JobPage { jobs, next } = self
            .db(move |s| s.list_jobs(&statuses, limit, before))
            .await?;
        let views = jobs
            .iter()
            .map(|row| match self.live_job(&row.id) {
                Some(live) => live.state.borrow().clone(),
                None => view_of(row),
            })
            .collect();
        Ok((views, next))
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
}
