//! The HTTP handlers, each documented for the OpenAPI document with `#[utoipa::path]`.

use crate::auth::Client;
use crate::error::{ApiError, Problem};
use crate::model::{
    CheckRequest, CheckResponse, GraphDoc, Health, InstantiateRequest, InstantiateResponse,
    JobList, JobListQuery, JobView, PlaceQuery, PlaceRequest, PlaceResponse, PlanDoc, PlanQuery,
    PlanRequest, SymbolicPlanRequest, SymbolicPlanResponse,
};
use crate::request::PlanInput;
use crate::service::{AppState, PlaceBody};
use axum::body::Bytes;
use axum::extract::{FromRequest, Path, RawQuery, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};

/// A request body read within the configured limit (413 beyond it).
pub struct Body(pub Bytes);

impl FromRequest<AppState> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let limit = state.config().body_limit;
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        match Bytes::from_request(req, state).await {
            Ok(b) => Ok(Body(b)),
            Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::PayloadTooLarge { limit })
            }
            Err(r) => Err(ApiError::BadRequest(format!(
                "cannot read the request body: {}",
                r.body_text()
            ))),
        }
    }
}

fn media_type(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    Some(v.split(';').next()?.trim().to_ascii_lowercase())
}

fn is_json(m: &str) -> bool {
    m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
}

/// JSON bodies: `application/json` (or `+json`), or no Content-Type at all.
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    match media_type(headers) {
        None => Ok(()),
        Some(m) if is_json(&m) => Ok(()),
        Some(m) => Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type {m} is not accepted here; send application/json"
        ))),
    }
}

/// A response with a JSON body already serialised (callers override the type for CSV) and
/// extra headers.
fn respond(status: StatusCode, text: String, extra: &[(&'static str, String)]) -> Response {
    let mut resp = (status, text).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (name, value) in extra {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(*name, v);
        }
    }
    resp
}

/// The wrapped routes take their options in the body: a query string there is a mistake.
fn no_query(query: Option<&str>, route: &str, bare: &str) -> Result<(), ApiError> {
    match query {
        Some(q) if !q.is_empty() => Err(ApiError::BadRequest(format!(
            "{route} takes its options in the body's `options`; query parameters are for \
             {bare} (the bare graph as the body)"
        ))),
        _ => Ok(()),
    }
}

/// Plan a graph now (`{graph, options}` body).
///
/// Plans a memplan-graph/1 graph with the planning pipeline's options and answers the
/// memplan-plan/1 plan. By default the graph is planned as given; with `rewrite` the plan
/// carries the rewritten graph it refers to (`rewritten_graph`). The time limit is capped by
/// the service's `sync_time_limit_cap` (longer work goes to `POST /v1/jobs`). An identical
/// earlier request (same graph and options) is answered from the stored plan without solving.
/// `POST /plan` is the same with the bare graph as the body and the options as query
/// parameters.
#[utoipa::path(
    post,
    path = "/v1/plan",
    tag = "plans",
    request_body(content = PlanRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The plan", body = PlanDoc,
         headers(("X-Memplan-Cache" = String, description = "`hit` when answered from a stored plan, else `miss`"))),
        (status = 400, description = "The body is not well-formed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "Nothing more of the body came for `client_timeout`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over `body_limit`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid graph or options (an unreachable `budget` included), graph over a size limit, or time limit over the cap", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "All solver and queue places are taken (see Retry-After), or shutting down", body = Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Seconds to wait")))
    )
)]
pub async fn post_plan(
    State(svc): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Body(body): Body,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    no_query(query.as_deref(), "POST /v1/plan", "POST /plan")?;
    plan_response(svc.plan(PlanInput::Wrapped(body)).await?)
}

fn plan_response(a: crate::service::PlanAnswer) -> Result<Response, ApiError> {
    let cache = if a.cached { "hit" } else { "miss" };
    Ok(respond(
        StatusCode::OK,
        a.plan,
        &[("x-memplan-cache", cache.to_string())],
    ))
}

/// Plan a graph now (bare graph body, options as query parameters).
///
/// The design card's call: the body is the memplan-graph/1 graph itself, the options are query
/// parameters (e.g. `/plan?budget=60%25&strategy=auto&rewrite=fuse,conv-algos&time_limit_s=2`),
/// one per option of `PlanOptionsBody`, read with the same rules and messages as the wrapped
/// form's `options`: numbers and booleans as such, `rewrite` as a comma list, `device_profile`
/// as a JSON-encoded object. Unknown parameters are refused (422). Otherwise as
/// `POST /v1/plan`: equal options give the same stored plan either way.
#[utoipa::path(
    post,
    path = "/plan",
    tag = "plans",
    params(PlanQuery),
    request_body(content = GraphDoc, content_type = "application/json"),
    responses(
        (status = 200, description = "The plan", body = PlanDoc,
         headers(("X-Memplan-Cache" = String, description = "`hit` when answered from a stored plan, else `miss`"))),
        (status = 400, description = "The body is not well-formed JSON, or the query string is malformed", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "Nothing more of the body came for `client_timeout`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over `body_limit`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid graph, unknown query parameter or invalid option (an unreachable `budget` included), graph over a size limit, or time limit over the cap", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "All solver and queue places are taken (see Retry-After), or shutting down", body = Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Seconds to wait")))
    )
)]
pub async fn post_plan_bare(
    State(svc): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Body(body): Body,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    plan_response(svc.plan(PlanInput::Bare { query, body }).await?)
}

/// Submit a planning job (`{graph, options}` body).
///
/// Stores the job durably and answers 202 with its `Location`; the job then waits for a solver
/// slot. Follow it with `GET /v1/jobs/{id}` or its event stream. An identical earlier request
/// makes the job `done` at once, answered from the stored plan. `POST /jobs` is the same with
/// the bare graph as the body and the options as query parameters.
#[utoipa::path(
    post,
    path = "/v1/jobs",
    tag = "jobs",
    request_body(content = PlanRequest, content_type = "application/json"),
    responses(
        (status = 202, description = "Accepted", body = JobView,
         headers(("Location" = String, description = "The job's URL")),
         links(
            ("GetJob" = (operation_id = "get_job", parameters(("id" = "$response.body#/id")),
                description = "The job's status and progress")),
            ("JobEvents" = (operation_id = "job_events", parameters(("id" = "$response.body#/id")),
                description = "The job's progress as server-sent events")),
            ("JobPlan" = (operation_id = "job_plan", parameters(("id" = "$response.body#/id")),
                description = "The job's plan, once it has one")),
            ("CancelJob" = (operation_id = "delete_job", parameters(("id" = "$response.body#/id")),
                description = "Cancel the job"))
         )),
        (status = 400, description = "The body is not well-formed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "Nothing more of the body came for `client_timeout`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over `body_limit`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid graph or options, graph over a size limit, time limit over `max_time_limit`, or an unsupported option", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The client already has `max_jobs_per_client` queued or running jobs (see Retry-After)", body = Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "The queue is full (see Retry-After), or shutting down", body = Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Seconds to wait")))
    )
)]
pub async fn post_job(
    State(svc): State<AppState>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Body(body): Body,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    no_query(query.as_deref(), "POST /v1/jobs", "POST /jobs")?;
    job_response(svc.submit(PlanInput::Wrapped(body), &client).await?)
}

/// Submit a planning job (bare graph body, options as query parameters).
///
/// As `POST /v1/jobs`, with the memplan-graph/1 graph itself as the body and the options as
/// query parameters (as `POST /plan`). The job's URLs are under `/v1/jobs/{id}`.
#[utoipa::path(
    post,
    path = "/jobs",
    tag = "jobs",
    params(PlanQuery),
    request_body(content = GraphDoc, content_type = "application/json"),
    responses(
        (status = 202, description = "Accepted", body = JobView,
         headers(("Location" = String, description = "The job's URL")),
         links(
            ("GetJob" = (operation_id = "get_job", parameters(("id" = "$response.body#/id")),
                description = "The job's status and progress")),
            ("JobEvents" = (operation_id = "job_events", parameters(("id" = "$response.body#/id")),
                description = "The job's progress as server-sent events")),
            ("JobPlan" = (operation_id = "job_plan", parameters(("id" = "$response.body#/id")),
                description = "The job's plan, once it has one")),
            ("CancelJob" = (operation_id = "delete_job", parameters(("id" = "$response.body#/id")),
                description = "Cancel the job"))
         )),
        (status = 400, description = "The body is not well-formed JSON, or the query string is malformed", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "Nothing more of the body came for `client_timeout`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over `body_limit`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid graph, unknown query parameter or invalid option, graph over a size limit, or time limit over `max_time_limit`", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The client already has `max_jobs_per_client` queued or running jobs (see Retry-After)", body = Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "The queue is full (see Retry-After), or shutting down", body = Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Seconds to wait")))
    )
)]
pub async fn post_job_bare(
    State(svc): State<AppState>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Body(body): Body,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    job_response(svc.submit(PlanInput::Bare { query, body }, &client).await?)
}

fn job_response(view: JobView) -> Result<Response, ApiError> {
    let mut resp = (StatusCode::ACCEPTED, Json(&view)).into_response();
    if let Ok(v) = HeaderValue::from_str(&view.links.this) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    Ok(resp)
}

/// List jobs, newest first.
///
/// Jobs with one of the given statuses (all when `status` is absent), newest first, `limit`
/// per page; `next` is the URL of the following page (null on the last). Live jobs show their
/// current state. Finished jobs are listed until retention deletes them.
#[utoipa::path(
    get,
    path = "/v1/jobs",
    tag = "jobs",
    params(JobListQuery),
    responses(
        (status = 200, description = "A page of jobs", body = JobList),
        (status = 400, description = "The query string is malformed", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An unknown status, a limit out of range, a malformed cursor or an unknown parameter", body = Problem, content_type = "application/problem+json")
    )
)]
pub async fn list_jobs(
    State(svc): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Json<JobList>, ApiError> {
    let q = JobListQuery::parse(query.as_deref().unwrap_or(""))?;
    let (jobs, next) = svc.list(q.statuses()?, q.limit(), q.cursor()?).await?;
    let next = next.map(|seq| q.next_url(seq));
    Ok(Json(JobList { jobs, next }))
}

/// A job's status and progress.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, description = "The job", body = JobView),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json")
    )
)]
pub async fn get_job(
    State(svc): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    Ok(Json(svc.job(&id).await?))
}

/// Cancel a job.
///
/// A queued job is cancelled at once; a running one is stopped at the solvers' next check
/// (the best plan found so far stays available at `/v1/jobs/{id}/plan`). Cancelling a
/// cancelled job is a no-op.
#[utoipa::path(
    delete,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, description = "The job, now cancelled", body = JobView),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The job is already done or failed", body = Problem, content_type = "application/problem+json")
    )
)]
pub async fn delete_job(
    State(svc): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    Ok(Json(svc.cancel(&id).await?))
}

/// A job's progress as server-sent events.
///
/// One event with the job's state now, then one per change (`event: progress`), ending with an
/// event named after the final status (`done`, `failed`, `cancelled`). When the service stops
/// before the job ends, the last event is `queued`: the job is back in the queue (as
/// `GET /v1/jobs/{id}` then says) and runs again at the next start. Each event's data is the
/// job (as `GET /v1/jobs/{id}`).
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/events",
    tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, description = "Event stream: each event (schema `JobEvent`) is named `progress`, `done`, `failed`, `cancelled` or `queued` (the service stopped before the job ended), has an increasing `id` and a JSON `JobView` as its data", body = JobView, content_type = "text/event-stream"),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json")
    )
)]
pub async fn job_events(
    State(svc): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let stream = svc.events(&id).await?;
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// A job's plan.
///
/// The plan of a `done` job, or the best plan a `cancelled` job found before it stopped
/// (header `X-Memplan-Job-Status` says which).
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/plan",
    tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, description = "The plan", body = PlanDoc,
         headers(("X-Memplan-Job-Status" = String, description = "`done` or `cancelled`"))),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The job is queued, running or failed, or was cancelled before it had a plan", body = Problem, content_type = "application/problem+json")
    )
)]
pub async fn job_plan(
    State(svc): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (plan, status) = svc.job_plan(&id).await?;
    Ok(respond(
        StatusCode::OK,
        plan,
        &[("x-memplan-job-status", status.as_str().to_string())],
    ))
}

/// Check a plan against its graph.
///
/// Replays the plan (as `memplan check`) and answers its figures, or the first violation. A plan
/// carrying a rewritten graph (`rewritten_graph`) is replayed against it once it is proven
/// derived from the given graph (same inputs, weights and outputs, and exactly the graph its
/// recorded `rewrites` and conv algorithms give when applied to the given graph again); one
/// that is not is invalid, naming the first difference. An invalid plan is a valid answer (200,
/// `valid: false`); an unreadable one (or an unreadable carried graph) is 422.
#[utoipa::path(
    post,
    path = "/v1/check",
    tag = "tools",
    request_body(content = CheckRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The replay's result", body = CheckResponse),
        (status = 400, description = "The body is not well-formed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "Nothing more of the body came for `client_timeout`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over `body_limit`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid graph, unreadable plan document, or graph over a size limit", body = Problem, content_type = "application/problem+json")
    )
)]
pub async fn post_check(
    State(svc): State<AppState>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Json<CheckResponse>, ApiError> {
    require_json(&headers)?;
    Ok(Json(svc.check(body).await?))
}

/// Instantiate a symbolic plan or graph.
///
/// Dynamic shapes: a symbolic plan (memplan-symbolic-plan/1, what `memplan plan` writes for a
/// graph whose sizes are expressions over declared symbols) and/or the symbolic graph, with a
/// value for every symbol, give the ordinary plan (memplan-plan/1, offsets computed in one pass
/// over the plan's stacking order) and graph at that binding, as `memplan instantiate`. A binding
/// out of a symbol's range, missing a symbol or naming an undeclared one is a 422 naming it.
#[utoipa::path(
    post,
    path = "/v1/instantiate",
    tag = "tools",
    request_body(content = InstantiateRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The plan and/or graph at the binding", body = InstantiateResponse),
        (status = 400, description = "The body is not well-formed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "Nothing more of the body came for `client_timeout`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over `body_limit`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Unreadable symbolic plan or graph, a bad binding, or a graph over a size limit at the binding", body = Problem, content_type = "application/problem+json")
    )
)]
pub async fn post_instantiate(
    State(svc): State<AppState>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Json<InstantiateResponse>, ApiError> {
    require_json(&headers)?;
    Ok(Json(svc.instantiate(body).await?))
}

/// Plan a symbolic graph for the whole range of its symbols.
///
/// Dynamic shapes: a graph whose sizes are expressions over declared symbols (`"4096*B"`,
/// `"symbols": {"B": {"min": 1, "max": 64}}`) gets one plan for every binding in range, as
/// `memplan plan` writes for it: the order and a stacking order from which
/// `POST /v1/instantiate` computes the offsets for any binding. The widest symbol's range is
/// split into pieces while a piece is over `max_ratio` × the per-binding plan, up to
/// `max_pieces`. The options are `POST /v1/plan`'s; the time limit bounds each planning run and
/// the whole call (splitting stops when it is reached). A concrete graph is a 422 naming
/// `POST /v1/plan`.
#[utoipa::path(
    post,
    path = "/v1/plan/symbolic",
    tag = "plans",
    request_body(content = SymbolicPlanRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The symbolic plan, its pieces and its peak at a few bindings", body = SymbolicPlanResponse),
        (status = 400, description = "The body is not well-formed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "Nothing more of the body came for `client_timeout`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over `body_limit`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a symbolic graph, an invalid one, options symbolic planning refuses, a bad split switch, a graph over a size limit at its max corner, or a time limit over the cap", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "All solver and queue places are taken (see Retry-After), or shutting down", body = Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Seconds to wait")))
    )
)]
pub async fn post_plan_symbolic(
    State(svc): State<AppState>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Json<SymbolicPlanResponse>, ApiError> {
    require_json(&headers)?;
    Ok(Json(svc.plan_symbolic(body).await?))
}

/// Place buffers.
///
/// Places buffers with given lifetimes at offsets (the heuristics, then the exact search within
/// the time limit): minimises the peak, or fits `capacity`. The body is a minimalloc CSV
/// (`text/csv`, options as query parameters) or JSON (`application/json`, options in the
/// body). The answer is JSON, or with `Accept: text/csv` the CSV with an `offset` column.
#[utoipa::path(
    post,
    path = "/v1/place",
    tag = "tools",
    params(PlaceQuery),
    request_body(content(
        (PlaceRequest = "application/json"),
        (String = "text/csv", example = "id,lower,upper,size\na,0,2,1024\nb,1,3,512\nc,2,4,1024\n")
    )),
    responses(
        (status = 200, description = "The placement", content(
            (PlaceResponse = "application/json"),
            (String = "text/csv", example = "id,lower,upper,size,offset\na,0,2,1024,0\nb,1,3,512,1024\nc,2,4,1024,0\n")
        ), headers(
            ("X-Memplan-Peak-Bytes" = u64, description = "Peak of the placement"),
            ("X-Memplan-Fits" = bool, description = "Whether it fits the capacity"),
            ("X-Memplan-Status" = String, description = "optimal / heuristic / time_limit / node_limit / infeasible")
        )),
        (status = 400, description = "Malformed JSON or query string", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "Nothing more of the body came for `client_timeout`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over `body_limit`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Neither CSV nor JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A buffer breaks a rule, too many buffers, or a bad option", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "All solver and queue places are taken (see Retry-After)", body = Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Seconds to wait")))
    )
)]
pub async fn post_place(
    State(svc): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let kind = match media_type(&headers).as_deref() {
        Some("text/csv") => PlaceBody::Csv,
        None => PlaceBody::Json,
        Some(m) if is_json(m) => PlaceBody::Json,
        Some(m) => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "Content-Type {m} is not accepted here; send text/csv (minimalloc CSV) or application/json"
            )))
        }
    };
    let query: PlaceQuery = crate::request::parse_query(query.as_deref(), |e| {
        ApiError::BadRequest(format!("query string: {e}"))
    })?;
    let a = svc.place(kind, query, body).await?;
    let r = &a.response;
    let figures = [
        ("x-memplan-peak-bytes", r.peak_bytes.to_string()),
        ("x-memplan-fits", r.fits.to_string()),
        ("x-memplan-status", r.status.clone()),
    ];
    let wants_csv = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/csv"));
    if wants_csv {
        let mut resp = respond(StatusCode::OK, a.csv, &figures);
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/csv; charset=utf-8"),
        );
        Ok(resp)
    } else {
        let text =
            serde_json::to_string(&a.response).map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(respond(StatusCode::OK, text, &figures))
    }
}

/// Liveness and readiness.
///
/// 200 while the service accepts work and its database answers; 503 while it shuts down or
/// when the database fails.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "service",
    responses(
        (status = 200, description = "Healthy", body = Health),
        (status = 503, description = "Shutting down or database failing", body = Health)
    )
)]
pub async fn healthz(State(svc): State<AppState>) -> Response {
    let (ok, health) = svc.health().await;
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(health)).into_response()
}

/// Prometheus metrics.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "service",
    responses(
        (status = 200, description = "Prometheus text exposition format", body = String, content_type = "text/plain",
         example = "# TYPE memplan_queue_depth gauge\nmemplan_queue_depth 0\n")
    )
)]
pub async fn metrics(State(svc): State<AppState>) -> Response {
    let mut resp = svc.metrics_text().await.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

/// This OpenAPI document.
///
/// The document of this instance: the limits it states (time-limit caps, graph and buffer
/// counts) are the ones the service was started with.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "service",
    responses((status = 200, description = "The OpenAPI 3.1 document (the Swagger UI at /docs reads it)", body = Object, content_type = "application/json"))
)]
pub async fn openapi_json(State(svc): State<AppState>) -> Response {
    respond(StatusCode::OK, crate::openapi_json_for(svc.config()), &[])
}

/// Unknown paths.
pub async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {method} {}", uri.path()))
}

/// Known paths, other methods.
pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not served on {}", uri.path()))
}

/// A handler that panicked (a bug): 500 with a problem document.
pub fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    ApiError::Internal("the request handler panicked (a bug)".into()).into_response()
}
