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

/// Largest page of `GET /v1/jobs`.
pub const MAX_LIST_LIMIT: u32 = 1000;
/// Default page size of `GET /v1/jobs`.
pub const DEFAULT_LIST_LIMIT: u32 = 100;

/// Query of `GET /v1/jobs`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct JobListQuery {
    /// Statuses to list, comma-separated (`queued`, `running`, `done`, `failed`,
    /// `cancelled`); all when absent.
    #[param(
        pattern = r"^(queued|running|done|failed|cancelled)(,(queued|running|done|failed|cancelled))*$",
        example = "queued,running"
    )]
    pub status: Option<String>,
    /// Jobs per page (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// Where to continue: the `cursor` of the previous page's `next` URL.
    #[param(pattern = r"^[0-9]{1,18}$")]
    pub cursor: Option<String>,
}

impl JobListQuery {
    /// Parses a query string (unknown parameters are refused).
    pub fn parse(query: &str) -> Result<JobListQuery, crate::ApiError> {
        crate::request::parse_query(Some(query), |e| {
            crate::ApiError::query(format!("GET /v1/jobs query: {e}"))
        })
    }

    /// The statuses asked for (empty: all).
    pub fn statuses(&self) -> Result<Vec<JobStatus>, crate::ApiError> {
        let Some(list) = &self.status else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for name in list.split(',') {
            let s = JobStatus::from_name(name).ok_or_else(|| {
                crate::ApiError::query(format!(
                    "unknown job status {name:?} in `status` (queued, running, done, failed, \
                     cancelled)"
                ))
            })?;
            if !out.contains(&s) {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// The page size.
    pub fn limit(&self) -> usize {
        self.limit
            .unwrap_or(DEFAULT_LIST_LIMIT)
            .clamp(1, MAX_LIST_LIMIT) as usize
    }

    /// Checks the limit, and reads the cursor.
    pub fn cursor(&self) -> Result<Option<i64>, crate::ApiError> {
        if let Some(l) = self.limit {
            if !(1..=MAX_LIST_LIMIT).contains(&l) {
                return Err(crate::ApiError::query(format!(
                    "`limit` is {l}; it is between 1 and {MAX_LIST_LIMIT}"
                )));
            }
        }
        let Some(c) = &self.cursor else {
            return Ok(None);
        };
        let ok = !c.is_empty() && c.len() <= 18 && c.bytes().all(|b| b.is_ascii_digit());
        match c.parse::<i64>() {
            Ok(v) if ok => Ok(Some(v)),
            _ => Err(crate::ApiError::query(format!(
                "`cursor` {c:?} is not a cursor from a `next` URL"
            ))),
        }
    }

    /// The URL of the page after the job with insertion number `seq`.
    pub fn next_url(&self, seq: i64) -> String {
        let mut url = String::from("/v1/jobs?");
        if let Some(s) = &self.status {
            url.push_str(&format!("status={s}&"));
        }
        url.push_str(&format!("limit={}&cursor={seq}", self.limit()));
        url
    }
}

fn example_job_list() -> Value {
    json!({"jobs": [example_job()], "next": "/v1/jobs?status=running&limit=1&cursor=41"})
}

/// A page of jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(example_job_list))]
pub struct JobList {
    /// The jobs, newest first.
    pub jobs: Vec<JobView>,
    /// The next page's URL; null on the last page.
    pub next: Option<String>,
}
