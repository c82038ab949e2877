//! The symbolic plan resource: `POST /v1/plan/symbolic` plans a symbolic graph once for the
//! whole range of its symbols (`memplan::symbolic::plan_symbolic_with_control`), as
//! `memplan plan` does on such a graph.

use super::admission::CancelOnDrop;
use super::{time_limit_of, Service};
use crate::error::ApiError;
use crate::model::{PeakAt, PieceRange, SymbolicPlanRequest, SymbolicPlanResponse};
use crate::request::{self, Mode, Source};
use axum::body::Bytes;
use memplan::pipeline::Control;
use memplan::symbolic::{
    plan_symbolic_with_control, SymbolicError, SymbolicGraph, SymbolicOptions,
};
use memplan::CancelToken;
use std::time::Instant;

impl Service {
    /// `POST /v1/plan/symbolic`.
    pub async fn plan_symbolic(&self, body: Bytes) -> Result<SymbolicPlanResponse, ApiError> {
        let config = self.config.clone();
        let (graph, options, split) = self
            .light(move || {
                let text = request::text(&body)?;
                let req: SymbolicPlanRequest = request::json(text)?;
                let options = request::resolve(
                    req.options.unwrap_or_default().0,
                    Source::Body,
                    &config,
                    Mode::Sync,
                )?;
                let graph = SymbolicGraph::parse(&req.graph.to_string())
                    .map_err(|e| ApiError::graph(format!("symbolic graph: {e}")))?;
                if graph.is_concrete() {
                    return Err(ApiError::graph(
                        "symbolic graph: the graph declares no `symbols`; plan a concrete graph \
                         with POST /v1/plan",
                    ));
                }
                let corner = graph
                    .instantiate(&graph.max_corner())
                    .map_err(|e| ApiError::graph(format!("symbolic graph: {e}")))?;
                request::check_size(&corner, &config)?;
                let mut split = SymbolicOptions::default();
                if let Some(r) = req.max_ratio {
                    split.max_ratio = r;
                }
                if let Some(n) = req.max_pieces {
                    split.max_pieces = n;
                }
                Ok((graph, options, split))
            })
            .await?;
        let ticket = self.admit()?;
        let permit = self.slot().await?;
        let cancel = CancelToken::new();
        let mut guard = CancelOnDrop(Some(cancel.clone()));
        let limit = time_limit_of(&options, &self.config);
        let pipeline = options.pipeline;
        let control = Control {
            cancel: Some(cancel.clone()),
            progress: None,
        };
        let started = Instant::now();
        let out = self
            .solve("plan_symbolic", permit, ticket, limit, cancel, move || {
                let plan = plan_symbolic_with_control(&graph, &pipeline, &split, &control)?;
                let profile = plan.peak_profile(&graph, &plan.profile_points(), &pipeline)?;
                Ok::<_, SymbolicError>((plan, profile))
            })
            .await?;
        guard.0 = None;
        let (plan, profile) = out.map_err(|e| match &e {
            SymbolicError::Pipeline { source, .. } if !source.is_bad_input() => {
                ApiError::Internal(e.to_string())
            }
            SymbolicError::Options(_) => ApiError::options(e.to_string()),
            _ => ApiError::graph(format!("symbolic graph: {e}")),
        })?;
        let profile = profile
            .points
            .into_iter()
            .map(|p| PeakAt {
                binding: p.binding.0,
                peak_bytes: p.peak_bytes,
                per_binding_bytes: p.per_binding_bytes,
                ratio: p.ratio,
            })
            .collect();
        let pieces = plan
            .pieces()
            .map(|(symbol, ranges)| {
                ranges
                    .into_iter()
                    .map(|r| PieceRange {
                        symbol: symbol.to_string(),
                        min: r.min,
                        max: r.max,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let doc =
            serde_json::to_value(plan.doc()).map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(SymbolicPlanResponse {
            plan: doc,
            pieces,
            profile,
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }
}
