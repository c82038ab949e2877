//! The instantiate resource: `POST /v1/instantiate` turns a symbolic plan or graph into the
//! ordinary plan or graph at one binding of its symbols (`memplan::symbolic`).

use super::Service;
use crate::error::ApiError;
use crate::model::{InstantiateRequest, InstantiateResponse};
use crate::request;
use axum::body::Bytes;
use memplan::symbolic::{Binding, SymbolicGraph, SymbolicPlan};
use std::time::Instant;

impl Service {
    /// `POST /v1/instantiate`.
    pub async fn instantiate(&self, body: Bytes) -> Result<InstantiateResponse, ApiError> {
        let config = self.config.clone();
        self.light(move || {
            let text = request::text(&body)?;
            let req: InstantiateRequest = request::json(text)?;
            if req.plan.is_none() && req.graph.is_none() {
                return Err(ApiError::request(
                    "give `plan` (a symbolic plan), `graph` (a symbolic graph) or both",
                ));
            }
            let binding = Binding(req.binding);
            let started = Instant::now();
            let mut out = InstantiateResponse {
                plan: None,
                graph: None,
                peak_bytes: None,
                elapsed_ms: 0.0,
            };
            if let Some(doc) = req.plan {
                let plan = memplan::json_path::from_value(&doc)
                    .map_err(|e| ApiError::plan(format!("symbolic plan: {e}")))
                    .and_then(|d| {
                        SymbolicPlan::from_doc(d)
                            .map_err(|e| ApiError::plan(format!("symbolic plan: {e}")))
                    })?;
                let concrete = plan
                    .instantiate(&binding)
                    .map_err(|e| ApiError::request(format!("binding: {e}")))?;
                out.peak_bytes = Some(concrete.stats.peak_bytes);
                out.plan = Some(
                    serde_json::to_value(&concrete)
                        .map_err(|e| ApiError::Internal(e.to_string()))?,
                );
            }
            if let Some(doc) = req.graph {
                let graph = SymbolicGraph::parse(&doc.to_string())
                    .map_err(|e| ApiError::graph(format!("symbolic graph: {e}")))?;
                let concrete = graph
                    .instantiate(&binding)
                    .map_err(|e| ApiError::request(format!("binding: {e}")))?;
                request::check_size(&concrete, &config)?;
                out.graph = Some(
                    serde_json::from_str(&concrete.to_json())
                        .map_err(|e| ApiError::Internal(e.to_string()))?,
                );
            }
            out.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
            Ok(out)
        })
        .await
    }
}
