//! The bodies of `POST /v1/instantiate`: [`InstantiateRequest`] and [`InstantiateResponse`].

use super::{GraphDoc, PlanDoc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use utoipa::ToSchema;

fn example_symbolic_graph() -> Value {
    json!({
        "format": "memplan-graph/1",
        "name": "scale",
        "symbols": {"B": {"min": 1, "max": 64}},
        "tensors": [
            {"name": "x", "size": "4096*B", "kind": "input"},
            {"name": "y", "size": "4096*B", "kind": "output"}
        ],
        "ops": [{"name": "f", "type": "relu", "inputs": ["x"], "outputs": ["y"]}]
    })
}

fn example_instantiate_request() -> Value {
    json!({"graph": example_symbolic_graph(), "binding": {"B": 17}})
}

/// Body of `POST /v1/instantiate`: a symbolic plan (what `memplan plan` writes for a graph
/// with `symbols`), a symbolic graph, or both, and a value for every declared symbol. Other
/// fields are refused.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(example_instantiate_request))]
pub struct InstantiateRequest {
    /// A symbolic plan (memplan-symbolic-plan/1).
    #[schema(value_type = Option<Object>)]
    pub plan: Option<Value>,
    /// A symbolic graph (memplan-graph/1 with `symbols`; sizes, shape entries and workspaces may
    /// be expressions over them, such as `"4096*B"`).
    #[schema(value_type = Option<Object>)]
    pub graph: Option<Value>,
    /// The value of every declared symbol, within its range (e.g. `{"B": 17}`).
    pub binding: BTreeMap<String, u64>,
}

/// Result of `POST /v1/instantiate`: the ordinary plan and graph at the binding.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"graph": null, "plan": null, "peak_bytes": null, "elapsed_ms": 0.05})))]
pub struct InstantiateResponse {
    /// The plan at the binding (memplan-plan/1), when a plan was given.
    #[schema(value_type = Option<PlanDoc>)]
    pub plan: Option<Value>,
    /// The graph at the binding (memplan-graph/1), when a graph was given.
    #[schema(value_type = Option<GraphDoc>)]
    pub graph: Option<Value>,
    /// The plan's peak at the binding (bytes), when a plan was given.
    pub peak_bytes: Option<u64>,
    /// Time taken to instantiate (milliseconds).
    pub elapsed_ms: f64,
}
