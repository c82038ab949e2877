//! The body of `GET /healthz`: [`Health`].

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Result of `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"status": "ok", "version": "0.1.0", "database": "ok", "workers": 2, "queue_depth": 0, "running_jobs": 1})))]
pub struct Health {
    /// `ok`, `shutting_down` or `degraded` (database unreachable).
    pub status: String,
    /// Service version.
    pub version: String,
    /// `ok` or the database error.
    pub database: String,
    /// Solver slots.
    pub workers: usize,
    /// Requests and jobs waiting for a slot.
    pub queue_depth: usize,
    /// Jobs running.
    pub running_jobs: usize,
}
