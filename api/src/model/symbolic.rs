//! The bodies of `POST /v1/plan/symbolic`: [`SymbolicPlanRequest`] and
//! [`SymbolicPlanResponse`] (dynamic shapes: one plan for a range of symbol values).

use super::PlanOptionsBody;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use utoipa::ToSchema;

fn example_symbolic_plan_request() -> Value {
    json!({
        "graph": {
            "format": "memplan-graph/1",
            "name": "scale",
            "symbols": {"B": {"min": 1, "max": 64}},
            "tensors": [
                {"name": "x", "size": "4096*B", "kind": "input"},
                {"name": "h", "size": "8192*B", "kind": "activation"},
                {"name": "y", "size": "4096*B", "kind": "output"}
            ],
            "ops": [
                {"name": "f", "type": "relu", "inputs": ["x"], "outputs": ["h"]},
                {"name": "g", "type": "relu", "inputs": ["h"], "outputs": ["y"]}
            ]
        },
        "max_pieces": 4
    })
}

/// Body of `POST /v1/plan/symbolic`: a symbolic graph, the planning options (those of
/// `POST /v1/plan`; `cache` is accepted and ignored: symbolic plans are not stored) and the
/// split switches of `memplan plan` on a symbolic graph. Other fields are refused.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(example_symbolic_plan_request))]
pub struct SymbolicPlanRequest {
    /// A symbolic graph (memplan-graph/1 with `symbols`; sizes, shape entries and workspaces may
    /// be expressions over them, such as `"4096*B"`).
    #[schema(value_type = Object)]
    pub graph: Value,
    /// Planning options (rewrites, budgets, in-place sharing, tiers and several streams are
    /// refused with symbols; an option given twice is refused).
    #[serde(default)]
    #[schema(value_type = Option<PlanOptionsBody>)]
    pub options: Option<memplan::json_path::UniqueMap>,
    /// Split the widest symbol's range into pieces while a piece's instantiated peak exceeds
    /// this many times the per-binding plan's (default 1.05; at least 1).
    #[serde(default)]
    #[schema(minimum = 1.0)]
    pub max_ratio: Option<f64>,
    /// At most this many pieces (default 16; 1 = one plan for the whole range).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_pieces: Option<usize>,
}

/// The instantiated peak at one binding.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"binding": {"B": 64}, "peak_bytes": 4194304, "per_binding_bytes": 4194304, "ratio": 1.0}))]
pub struct PeakAt {
    /// The binding (every declared symbol's value).
    pub binding: BTreeMap<String, u64>,
    /// The instantiated plan's peak there (bytes).
    pub peak_bytes: u64,
    /// The peak of a plan made for that binding alone (bytes).
    pub per_binding_bytes: u64,
    /// `peak_bytes / per_binding_bytes`.
    pub ratio: f64,
}

/// One sub-range of the split symbol.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"symbol": "B", "min": 1, "max": 8}))]
pub struct PieceRange {
    /// The split symbol.
    pub symbol: String,
    /// Smallest value of the piece.
    pub min: u64,
    /// Largest value of the piece.
    pub max: u64,
}

/// Result of `POST /v1/plan/symbolic`: what `memplan plan` writes and prints for a symbolic
/// graph.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"plan": {"format": "memplan-symbolic-plan/1"}, "pieces": [],
    "profile": [{"binding": {"B": 1}, "peak_bytes": 65536, "per_binding_bytes": 65536, "ratio": 1.0},
                {"binding": {"B": 64}, "peak_bytes": 4194304, "per_binding_bytes": 4194304, "ratio": 1.0}],
    "elapsed_ms": 2.5}))]
pub struct SymbolicPlanResponse {
    /// The symbolic plan (memplan-symbolic-plan/1): instantiate it with `POST /v1/instantiate`.
    #[schema(value_type = Object)]
    pub plan: Value,
    /// The pieces of the split symbol's range, in order, when the range was split (the last
    /// one is the top-level template's); empty for a one-piece plan.
    pub pieces: Vec<PieceRange>,
    /// The instantiated peak at the corners and a few points between, each against a plan made
    /// for that binding alone (`memplan plan`'s report).
    pub profile: Vec<PeakAt>,
    /// Time taken to plan (milliseconds).
    pub elapsed_ms: f64,
}
