//! The job resource: [`JobStatus`], [`Progress`], [`JobLinks`] and [`JobView`].

use super::options::example_resolved_options;
use super::{PlanStatusName, ResolvedOptions};
use memplan::PlanStatus;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

fn example_job() -> Value {
    json!({
        "id": "5f0c1f8e-3c1a-4d7e-9a53-0e6f5b1e2c44",
        "status": "running",
        "graph": "resnet50.32.train",
        "options": example_resolved_options(),
        "created_unix_ms": 1_767_225_600_000u64,
        "started_unix_ms": 1_767_225_600_120u64,
        "finished_unix_ms": null,
        "attempts": 1,
        "cached": false,
        "progress": {"stage": "heuristics", "best_peak_bytes": 2_775_134_976u64,
                     "lower_bound_bytes": 2_774_744_580u64, "gap": 0.00014, "elapsed_s": 0.13,
                     "status": null},
        "error": null,
        "links": {"self": "/v1/jobs/5f0c1f8e-3c1a-4d7e-9a53-0e6f5b1e2c44",
                  "events": "/v1/jobs/5f0c1f8e-3c1a-4d7e-9a53-0e6f5b1e2c44/events",
                  "plan": "/v1/jobs/5f0c1f8e-3c1a-4d7e-9a53-0e6f5b1e2c44/plan"}
    })
}

/// Status of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(examples("running"))]
pub enum JobStatus {
    /// Accepted, waiting for a solver.
    Queued,
    /// Solving.
    Running,
    /// Finished; the plan is available.
    Done,
    /// Finished without a plan; `error` says why.
    Failed,
    /// Cancelled; the best plan found before, if any, is available.
    Cancelled,
}

impl JobStatus {
    /// The stored and displayed name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Done => "done",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }

    /// The status called `name`.
    pub fn from_name(name: &str) -> Option<JobStatus> {
        [
            JobStatus::Queued,
            JobStatus::Running,
            JobStatus::Done,
            JobStatus::Failed,
            JobStatus::Cancelled,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }

    /// Whether the job will not change any more.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled
        )
    }
}

/// Progress of a job: the best plan so far and the proven bound.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"stage": "exact", "best_peak_bytes": 2775134976u64, "lower_bound_bytes": 2774744580u64, "gap": 0.00014, "elapsed_s": 1.2})))]
pub struct Progress {
    /// Last stage finished (`heuristics`, `exact`, ...); null before the first.
    pub stage: Option<String>,
    /// Peak of the best plan so far (bytes).
    pub best_peak_bytes: Option<u64>,
    /// Best proven lower bound on the peak (bytes).
    pub lower_bound_bytes: Option<u64>,
    /// Relative gap `(best - bound) / best`.
    pub gap: Option<f64>,
    /// Seconds since the job started running (0 while queued).
    pub elapsed_s: f64,
    /// The plan's status once the job has one (the plan's `stats.status`; `cancelled` for a
    /// cancelled job), null while it runs.
    #[serde(default)]
    #[schema(value_type = Option<PlanStatusName>)]
    pub status: Option<PlanStatus>,
}

/// Links of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"self": "/v1/jobs/5f0c", "events": "/v1/jobs/5f0c/events", "plan": "/v1/jobs/5f0c/plan"})))]
pub struct JobLinks {
    /// This job.
    #[serde(rename = "self")]
    pub this: String,
    /// Its server-sent events.
    pub events: String,
    /// Its plan.
    pub plan: String,
}

/// A job: its status, options, progress and links.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(example_job))]
pub struct JobView {
    /// Job id.
    pub id: String,
    /// Status.
    pub status: JobStatus,
    /// Name of the graph.
    pub graph: String,
    /// Options, defaults filled in.
    pub options: ResolvedOptions,
    /// When the job was accepted (Unix milliseconds).
    pub created_unix_ms: u64,
    /// When it last started running.
    pub started_unix_ms: Option<u64>,
    /// When it finished.
    pub finished_unix_ms: Option<u64>,
    /// How many times it started running (a restart during a run starts it again).
    pub attempts: u32,
    /// Whether the plan was the stored plan of an identical earlier request.
    pub cached: bool,
    /// Progress (final figures once finished).
    pub progress: Progress,
    /// Why it failed.
    pub error: Option<crate::error::Problem>,
    /// Related resources.
    pub links: JobLinks,
}
