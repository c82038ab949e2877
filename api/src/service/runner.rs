//! The runner of one job: waits for a solver slot, marks the job running, solves it with a
//! progress sink and records the outcome (or puts it back in the queue at shutdown).

use super::admission::{Running, Ticket};
use super::jobs::{progress_of, LiveJob};
use super::{now_ms, problem_json, time_limit_of, Service};
use crate::error::ApiError;
use crate::model::{JobStatus, Progress, ResolvedOptions};
use crate::request;
use crate::store::Finish;
use memplan::pipeline::{self, Control};
use memplan::{Graph, PlanStatus, ProgressSink};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;

/// What a job's run starts with once it is marked running: its solver slot, the running count
/// it holds until its runner ends, and its request as stored.
struct Started {
    permit: OwnedSemaphorePermit,
    running: Running,
    graph_text: String,
    options_text: String,
}

impl Service {
    /// The runner of one job (see the module doc).
    pub(super) async fn run_job(self: Arc<Self>, live: Arc<LiveJob>, ticket: Ticket) {
        let Some(Started {
            permit,
            running: _running,
            graph_text,
            options_text,
        }) = self.start_run(&live).await
        else {
            return;
        };
        let id = live.id.clone();
        live.solving.store(true, Ordering::SeqCst);
        let options: Result<ResolvedOptions, String> =
            serde_json::from_str(&options_text).map_err(|e| format!("stored options: {e}"));
        let limit = options
            .as_ref()
            .map_or(self.config.default_time_limit, |o| {
                time_limit_of(o, &self.config)
            });
        let sink = progress_sink(&live);
        let cancel = live.cancel.clone();
        let work = job_work(&live, graph_text, options, sink);
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
        let finish = finish_of(&live, outcome, cancelled, finished).await;
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

    /// Waits for a solver slot, marks the job running (in its watch channel, then in the
    /// database) and reads its request back; `None` (the job retired) when it was cancelled
    /// meanwhile, the service is stopping, or the database failed.
    async fn start_run(&self, live: &Arc<LiveJob>) -> Option<Started> {
        let mut shutdown = self.shutdown.subscribe();
        let mut state = live.state.subscribe();
        let permit = tokio::select! {
            p = self.slot() => match p {
                Ok(p) => p,
                Err(_) => return self.retired(live),
            },
            _ = state.wait_for(|v| v.status == JobStatus::Cancelled) => return self.retired(live),
            _ = shutdown.wait_for(|s| *s) => return self.retired(live),
        };
        if !self.accepting.load(Ordering::SeqCst) {
            // Shutting down: the job stays queued in the database for the next start.
            return self.retired(live);
        }
        let started = now_ms();
        // Counted before the status turns running, so that no one sees a running job uncounted.
        let running = Running::new(&self.counters, |c| &c.running_jobs);
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
            return self.retired(live);
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
            Ok(None) => return self.retired(live),
            Err(e) => {
                eprintln!("memplan serve: job {id}: cannot start: {e}");
                return self.retired(live);
            }
        };
        Some(Started {
            permit,
            running,
            graph_text,
            options_text,
        })
    }

    /// Retires `live` (its runner ends before it started solving).
    fn retired(&self, live: &LiveJob) -> Option<Started> {
        self.retire(live);
        None
    }
}

/// The progress sink of a job's solve: every report updates the job's watch channel.
fn progress_sink(live: &Arc<LiveJob>) -> ProgressSink {
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
}

/// The solve of a job (run on a blocking thread): parses the stored request and runs the
/// pipeline with the job's token and `sink`.
fn job_work(
    live: &Arc<LiveJob>,
    graph_text: String,
    options: Result<ResolvedOptions, String>,
    sink: ProgressSink,
) -> impl FnOnce() -> Result<memplan::Plan, ApiError> + Send + 'static {
    let cancel = live.cancel.clone();
    let live = live.clone();
    move || -> Result<memplan::Plan, ApiError> {
        let options = options
            .map_err(|e| ApiError::Internal(format!("the stored job cannot be read: {e}")))?;
        let graph = Graph::parse(&graph_text)
            .map_err(|e| ApiError::Internal(format!("the stored graph cannot be read: {e}")))?;
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
}

/// The record of a job's outcome, finished at `finished`.
async fn finish_of(
    live: &LiveJob,
    outcome: Result<memplan::Plan, ApiError>,
    cancelled: bool,
    finished: u64,
) -> Finish {
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
    match outcome {
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
    }
}
