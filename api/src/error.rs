//! Errors as RFC 9457 problem documents (`application/problem+json`): every error names its
//! culprit in `detail` with the same wording as the CLI, and carries a stable `type` URN that
//! clients can match on.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The media type of error bodies.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({
    "type": "urn:memplan:problem:invalid-graph",
    "title": "Invalid graph",
    "status": 422,
    "detail": "op \"relu\" reads unknown tensor \"conv_out\""
})))]
pub struct Problem {
    /// Stable problem kind, `urn:memplan:problem:<slug>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Short summary of the kind.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What is wrong, naming the culprit.
    pub detail: String,
    /// The configured limit that was exceeded, for `limit-exceeded`, `payload-too-large`,
    /// `request-timeout` and `too-many-jobs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// Seconds to wait before retrying, for `overloaded`, `shutting-down` and `too-many-jobs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
}

/// What went wrong with a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// The body is not well-formed JSON (or a query string is malformed).
    #[error("{0}")]
    BadRequest(String),
    /// The body has a media type the endpoint does not take.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The body is larger than the configured limit.
    #[error("request body is over the limit of {limit} bytes (body_limit)")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The client sent nothing more of its request body for the configured time.
    #[error(
        "no more of the request body came for {seconds} s (client_timeout); the body was not \
         read in full and nothing was done"
    )]
    RequestTimeout {
        /// The configured wait (seconds).
        seconds: f64,
    },
    /// Well-formed input that breaks a rule (graph or plan format, buffer rules, options).
    #[error("{detail}")]
    Invalid {
        /// Problem slug (`invalid-graph`, `invalid-plan`, `invalid-buffers`, `invalid-options`,
        /// `invalid-request`, `invalid-query`).
        slug: &'static str,
        /// Title of the slug.
        title: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// Input over a configured size limit.
    #[error("{detail}")]
    LimitExceeded {
        /// The limit's name (`max_ops`, `max_tensors`, `max_buffers`, `sync_time_limit_cap`, ...).
        limit: &'static str,
        /// What is over it.
        detail: String,
    },
    /// A feature the planner does not have yet.
    #[error("{0}")]
    Unsupported(String),
    /// No such job or route.
    #[error("{0}")]
    NotFound(String),
    /// The method is not served on this path.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The request conflicts with the job's state.
    #[error("{0}")]
    Conflict(String),
    /// All solver slots and queue places are taken.
    #[error("all {capacity} solver and queue places are taken; retry in {retry_after_s} s")]
    Overloaded {
        /// Workers plus queue places.
        capacity: usize,
        /// Suggested wait.
        retry_after_s: u64,
    },
    /// The service is shutting down.
    #[error("the service is shutting down")]
    ShuttingDown,
    /// No valid bearer token (the service has a token file).
    #[error("{0}")]
    Unauthorized(String),
    /// The client already has as many unfinished jobs as it may.
    #[error(
        "client {client} already has {limit} queued or running jobs (max_jobs_per_client); \
         wait for one to finish or cancel one"
    )]
    TooManyJobs {
        /// The client (token name or address).
        client: String,
        /// The limit.
        limit: usize,
        /// Suggested wait.
        retry_after_s: u64,
    },
    /// A bug or an environment failure (database, panicked solver).
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// An invalid graph, with the graph's own message.
    pub fn graph(detail: impl Into<String>) -> Self {
        ApiError::Invalid {
            slug: "invalid-graph",
            title: "Invalid graph",
            detail: detail.into(),
        }
    }

    /// An invalid plan document.
    pub fn plan(detail: impl Into<String>) -> Self {
        ApiError::Invalid {
            slug: "invalid-plan",
            title: "Invalid plan document",
            detail: detail.into(),
        }
    }

    /// Invalid buffers of a placement request.
    pub fn buffers(detail: impl Into<String>) -> Self {
        ApiError::Invalid {
            slug: "invalid-buffers",
            title: "Invalid buffers",
            detail: detail.into(),
        }
    }

    /// An invalid option value.
    pub fn options(detail: impl Into<String>) -> Self {
        ApiError::Invalid {
            slug: "invalid-options",
            title: "Invalid options",
            detail: detail.into(),
        }
    }

    /// A well-formed body of the wrong structure (unknown or missing fields, wrong types).
    pub fn request(detail: impl Into<String>) -> Self {
        ApiError::Invalid {
            slug: "invalid-request",
            title: "Invalid request body",
            detail: detail.into(),
        }
    }

    /// A query string of the right encoding whose parameters break a rule (an unknown
    /// parameter or status, a limit out of range, a malformed cursor).
    pub fn query(detail: impl Into<String>) -> Self {
        ApiError::Invalid {
            slug: "invalid-query",
            title: "Invalid query parameters",
            detail: detail.into(),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::Invalid { .. }
            | ApiError::LimitExceeded { .. }
            | ApiError::Unsupported(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Overloaded { .. } | ApiError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::TooManyJobs { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn slug_title(&self) -> (&'static str, &'static str) {
        match self {
            ApiError::BadRequest(_) => ("bad-request", "Malformed request"),
            ApiError::UnsupportedMediaType(_) => {
                ("unsupported-media-type", "Unsupported media type")
            }
            ApiError::PayloadTooLarge { .. } => ("payload-too-large", "Request body too large"),
            ApiError::RequestTimeout { .. } => ("request-timeout", "Request body too slow"),
            ApiError::Invalid { slug, title, .. } => (slug, title),
            ApiError::LimitExceeded { .. } => ("limit-exceeded", "Input over a configured limit"),
            ApiError::Unsupported(_) => ("unsupported", "Not supported yet"),
            ApiError::NotFound(_) => ("not-found", "Not found"),
            ApiError::MethodNotAllowed(_) => ("method-not-allowed", "Method not allowed"),
            ApiError::Conflict(_) => ("conflict", "Conflicts with the job's state"),
            ApiError::Overloaded { .. } => ("overloaded", "Service overloaded"),
            ApiError::ShuttingDown => ("shutting-down", "Service shutting down"),
            ApiError::Unauthorized(_) => ("unauthorized", "Bearer token missing or not valid"),
            ApiError::TooManyJobs { .. } => ("too-many-jobs", "Too many unfinished jobs"),
            ApiError::Internal(_) => ("internal", "Internal error"),
        }
    }

    /// The problem document.
    pub fn problem(&self) -> Problem {
        let (slug, title) = self.slug_title();
        Problem {
            kind: format!("urn:memplan:problem:{slug}"),
            title: title.to_string(),
            status: self.status().as_u16(),
            detail: self.to_string(),
            limit: match self {
                ApiError::LimitExceeded { limit, .. } => Some(limit.to_string()),
                ApiError::PayloadTooLarge { .. } => Some("body_limit".to_string()),
                ApiError::RequestTimeout { .. } => Some("client_timeout".to_string()),
                ApiError::TooManyJobs { .. } => Some("max_jobs_per_client".to_string()),
                _ => None,
            },
            retry_after_s: match self {
                ApiError::Overloaded { retry_after_s, .. } => Some(*retry_after_s),
                ApiError::ShuttingDown => Some(1),
                ApiError::TooManyJobs { retry_after_s, .. } => Some(*retry_after_s),
                _ => None,
            },
        }
    }
}

/// Serialises a problem with its media type (and Retry-After when it has one).
pub fn problem_response(problem: &Problem) -> Response {
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = serde_json::to_string(problem).unwrap_or_default();
    let mut resp = (status, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    if let Some(s) = problem.retry_after_s {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"memplan\""),
        );
    }
    resp
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        problem_response(&self.problem())
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        ApiError::Internal(e.to_string())
    }
}

impl From<tokio::task::JoinError> for ApiError {
    fn from(e: tokio::task::JoinError) -> Self {
        ApiError::Internal(crate::service::join_error_message(&e))
    }
}
