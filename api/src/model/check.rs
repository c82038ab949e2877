//! The bodies of `POST /v1/check`: [`CheckRequest`] and [`CheckResponse`].

use super::{example_graph, example_plan, CheckedPlanDoc, GraphDoc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

fn example_check_request() -> Value {
    json!({"graph": example_graph(), "plan": example_plan()})
}

/// Body of `POST /v1/check`. Other fields are refused.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(example_check_request))]
pub struct CheckRequest {
    /// The graph (memplan-graph/1).
    pub graph: GraphDoc,
    /// The plan to replay (memplan-plan/1).
    pub plan: CheckedPlanDoc,
    /// Also require the peak to be at most this many bytes.
    pub budget: Option<u64>,
}

/// The first rule a plan breaks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"instruction": 4, "message": "instruction 4: alloc [0, 4096) overlaps reserved tensor \"x\""})))]
pub struct ViolationView {
    /// Index of the offending instruction, when the violation is about one.
    pub instruction: Option<usize>,
    /// What is wrong (the same text as `memplan check`).
    pub message: String,
}

/// Result of `POST /v1/check`: the replay's figures, or the first violation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"valid": true, "peak_bytes": 12800, "max_live_bytes": 12800, "host_peak_bytes": 0, "execs": 2, "spills": 0, "violation": null})))]
pub struct CheckResponse {
    /// Whether the plan replays without violation.
    pub valid: bool,
    /// Largest `offset + size` reserved (bytes; valid plans).
    pub peak_bytes: Option<u64>,
    /// Largest sum of reserved bytes at one time (valid plans).
    pub max_live_bytes: Option<u64>,
    /// Largest host-pool end (valid plans).
    pub host_peak_bytes: Option<u64>,
    /// Exec instructions (valid plans).
    pub execs: Option<usize>,
    /// Spill-out instructions (valid plans).
    pub spills: Option<usize>,
    /// The first violation (invalid plans).
    pub violation: Option<ViolationView>,
}

impl CheckResponse {
    /// The answer for a plan that breaks a rule: `message`, at `instruction` when the rule is
    /// about one.
    pub fn invalid(instruction: Option<usize>, message: String) -> CheckResponse {
        CheckResponse {
            valid: false,
            peak_bytes: None,
            max_live_bytes: None,
            host_peak_bytes: None,
            execs: None,
            spills: None,
            violation: Some(ViolationView {
                instruction,
                message,
            }),
        }
    }
}
