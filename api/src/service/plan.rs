//! The plan resource: `POST /v1/plan` and `POST /plan`, a synchronous plan (from the store
//! when an identical request was answered).

use super::admission::CancelOnDrop;
use super::{now_ms, time_limit_of, Service};
use crate::error::ApiError;
use crate::request::{self, Mode, PlanInput};
use memplan::pipeline::{self, Control};
use memplan::{CancelToken, Graph, PlanStatus};
use std::sync::Arc;

/// A plan answer: the plan JSON and whether it came from the store.
#[derive(Debug, Clone)]
pub struct PlanAnswer {
    /// memplan-plan/1 JSON.
    pub plan: String,
    /// Answered from a stored plan.
    pub cached: bool,
}

/// A synchronous plan as JSON. While its answer is still wanted only the watchdog raises
/// `control.cancel` (the client gone, nobody reads the answer): a run it stopped is answered as
/// the time limit that stopped it, with the words and status the CLI uses.
fn sync_plan(
    graph: &Graph,
    options: &memplan::PipelineOptions,
    control: &Control,
) -> Result<String, ApiError> {
    let mut plan = pipeline::run(graph, options, control)
        .map_err(|e| request::pipeline_error(e.cancel_as_time_limit(options.time_limit_s)))?
        .plan;
    if plan.stats.status == Some(PlanStatus::Cancelled) {
        plan.stats.status = Some(PlanStatus::TimeLimit);
    }
    serde_json::to_string(&plan).map_err(|e| ApiError::Internal(e.to_string()))
}

impl Service {
    /// `POST /v1/plan` and `POST /plan`: a plan now, from the store when an identical request
    /// was answered.
    pub async fn plan(self: &Arc<Self>, input: PlanInput) -> Result<PlanAnswer, ApiError> {
        let config = self.config.clone();
        let p = self
            .light(move || request::prepare(&input, &config, Mode::Sync))
            .await?;
        if p.options.cache {
            let key = p.key.clone();
            if let Some((_, plan)) = self.db(move |s| s.cached_plan(&key)).await? {
                self.metrics.cache_hit();
                return Ok(PlanAnswer { plan, cached: true });
            }
        }
        let ticket = self.admit()?;
        let permit = self.slot().await?;
        let cancel = CancelToken::new();
        let mut guard = CancelOnDrop(Some(cancel.clone()));
        let limit = time_limit_of(&p.options, &self.config);
        let graph = p.graph;
        let options = p.options.pipeline;
        let control = Control {
            cancel: Some(cancel.clone()),
            progress: None,
        };
        let result = self
            .solve("plan", permit, ticket, limit, cancel, move || {
                sync_plan(&graph, &options, &control)
            })
            .await?;
        guard.0 = None;
        let plan = result?;
        let (key, text) = (p.key, plan.clone());
        if let Err(e) = self.db(move |s| s.put_plan(&key, &text, now_ms())).await {
            // The answer is still right; only the next identical request will solve again.
            eprintln!("memplan serve: could not store a plan: {e}");
        }
        Ok(PlanAnswer {
            plan,
            cached: false,
        })
    }
}

#[cfg(test)]
#[path = "../../tests/common/sample.rs"]
mod sample;

#[cfg(test)]
mod tests {
    use super::sample::sample_graph;
    use super::*;

    #[test]
    fn a_budgeted_plan_the_watchdog_stopped_is_answered_as_the_time_limit_as_the_cli_does() {
        // The watchdog raised the token before the pipeline's own cap (a stage overran it).
        let token = CancelToken::new();
        token.cancel();
        let control = Control {
            cancel: Some(token),
            progress: None,
        };
        let options = memplan::PipelineOptions {
            budget: Some(memplan::budget::BudgetSpec::Bytes(1)),
            time_limit_s: 0.1,
            ..memplan::PipelineOptions::default()
        };
        let e = sync_plan(&sample_graph(), &options, &control).unwrap_err();
        let p = e.problem();
        assert_eq!(p.status, 422);
        assert!(
            p.detail.starts_with(
                "the time limit of 0.1 s bound (raise time_limit_s): planning under the budget of 1 bytes"
            ),
            "{}",
            p.detail
        );
        // Without a budget the best plan so far is answered, its status the time limit.
        let free = memplan::PipelineOptions {
            time_limit_s: 0.1,
            ..memplan::PipelineOptions::default()
        };
        let text = sync_plan(&sample_graph(), &free, &control).unwrap();
        let plan = memplan::Plan::parse(&text).unwrap();
        assert_eq!(plan.stats.status, Some(PlanStatus::TimeLimit));
    }
}
