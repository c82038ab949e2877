//! The check resource: `POST /v1/check` replays a plan against its graph.

use super::Service;
use crate::error::ApiError;
use crate::model::CheckResponse;
use crate::request;
use axum::body::Bytes;

impl Service {
    /// `POST /v1/check`.
    pub async fn check(&self, body: Bytes) -> Result<CheckResponse, ApiError> {
        let config = self.config.clone();
        self.light(move || {
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
        .await
    }
}
