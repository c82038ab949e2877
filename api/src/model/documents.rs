//! The memplan-graph/1 and memplan-plan/1 documents as OpenAPI schemas ([`GraphDoc`],
//! [`PlanDoc`]), with the example graph and plan of the OpenAPI document.

use super::PlanStatusName;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

/// The example graph of the OpenAPI document (a valid memplan-graph/1 document).
pub fn example_graph() -> Value {
    json!({
        "format": "memplan-graph/1",
        "name": "tiny",
        "alignment": 256,
        "tensors": [
            {"name": "x", "size": 4096, "kind": "input", "shape": [1, 1024], "dtype": "f32"},
            {"name": "w", "size": 1024, "kind": "weight"},
            {"name": "h", "size": 8192, "kind": "activation"},
            {"name": "y", "size": 4096, "kind": "output"}
        ],
        "ops": [
            {"name": "fc", "type": "matmul", "inputs": ["x", "w"], "outputs": ["h"], "workspace": 512},
            {"name": "relu", "type": "relu", "inputs": ["h"], "outputs": ["y"]}
        ]
    })
}

/// The example plan of the OpenAPI document (a valid plan of [`example_graph`]).
pub fn example_plan() -> Value {
    json!({
        "format": "memplan-plan/1",
        "graph": "tiny",
        "arena_bytes": 12800,
        "weights_bytes": 1024,
        "host_bytes": 0,
        "weights": [{"tensor": "w", "offset": 0}],
        "instructions": [
            {"op": "alloc", "tensor": "x", "offset": 0, "mem_id": 0},
            {"op": "alloc", "tensor": "h", "offset": 4096, "mem_id": 1},
            {"op": "exec", "node": "fc", "workspace_offset": 12288},
            {"op": "free", "tensor": "x"},
            {"op": "alloc", "tensor": "y", "offset": 0, "mem_id": 2},
            {"op": "exec", "node": "relu", "workspace_offset": null},
            {"op": "free", "tensor": "h"}
        ],
        "stats": {"peak_bytes": 12800, "lower_bound_bytes": 12800, "method": "greedy-size",
                  "status": "optimal", "gap": 0.0, "elapsed_ms": 0.4}
    })
}

/// A tensor role (memplan-graph/1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(examples("activation"))]
pub enum TensorKindDoc {
    /// Graph input: valid before the first op.
    Input,
    /// Parameter or constant: valid all run, in the weights region.
    Weight,
    /// Produced by exactly one op.
    Activation,
    /// Produced by exactly one op and still valid at the end.
    Output,
}

/// A tensor of a memplan-graph/1 document.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"name": "h", "size": 8192, "kind": "activation", "shape": [2, 1024], "dtype": "f32"})))]
pub struct TensorDoc {
    /// Unique name.
    pub name: String,
    /// Bytes (> 0).
    #[schema(minimum = 1)]
    pub size: u64,
    /// Role.
    pub kind: TensorKindDoc,
    /// Shape (informative).
    pub shape: Option<Vec<u64>>,
    /// Element type (informative).
    pub dtype: Option<String>,
    /// Offset alignment, a power of two (default: the graph's).
    pub alignment: Option<u64>,
}

/// An op of a memplan-graph/1 document.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"name": "fc", "type": "matmul", "inputs": ["x", "w"], "outputs": ["h"], "workspace": 512})))]
pub struct OpDoc {
    /// Unique name.
    pub name: String,
    /// Free-text type (`conv2d`, `relu`, an ATen name, ...).
    #[serde(rename = "type")]
    pub op_type: Option<String>,
    /// Tensor names read (may repeat).
    pub inputs: Option<Vec<String>>,
    /// Tensor names written (at least one).
    pub outputs: Vec<String>,
    /// Work estimate.
    pub flops: Option<f64>,
    /// Measured run time (microseconds).
    pub time_us: Option<f64>,
    /// Scratch bytes needed only while the op runs.
    pub workspace: Option<u64>,
    /// Op attributes.
    #[schema(value_type = Option<Object>)]
    pub attrs: Option<Value>,
    /// `[output_index, input_index]` pairs that may share memory when the input dies here.
    pub inplace: Option<Vec<[u64; 2]>>,
}

/// A computation graph (memplan-graph/1, docs/FORMATS.md §1). Every rule of the format is checked;
/// a graph that breaks one is answered 422 naming the tensor or op and the rule.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(example_graph))]
pub struct GraphDoc {
    /// Always `memplan-graph/1`.
    pub format: String,
    /// Graph name.
    pub name: Option<String>,
    /// Default tensor alignment, a power of two (default 256).
    pub alignment: Option<u64>,
    /// Free-form metadata.
    #[schema(value_type = Option<Object>)]
    pub meta: Option<Value>,
    /// Tensors.
    pub tensors: Vec<TensorDoc>,
    /// Ops, in the listed order.
    pub ops: Vec<OpDoc>,
}

/// An instruction kind of a memplan-plan/1 stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(examples("alloc"))]
pub enum InstructionOp {
    /// Reserve `[offset, offset + size)` for `tensor`.
    Alloc,
    /// Run op `node` (with `workspace_offset` when it has a workspace).
    Exec,
    /// Release `tensor`.
    Free,
    /// Copy `tensor` to the host pool at `host_offset` and release its range.
    SpillOut,
    /// Reserve `offset` for `tensor` and copy it back from the host pool.
    SpillIn,
}

/// One instruction of a memplan-plan/1 stream; which fields appear depends on `op`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"op": "alloc", "tensor": "h", "offset": 4096, "mem_id": 1})))]
pub struct InstructionDoc {
    /// Instruction kind.
    pub op: InstructionOp,
    /// Tensor (alloc, free, spill_out, spill_in).
    pub tensor: Option<String>,
    /// Arena offset (alloc, spill_in).
    pub offset: Option<u64>,
    /// Virtual memory id (alloc, spill_in).
    pub mem_id: Option<u64>,
    /// Extension: the tensor takes the bytes of this dying input in place (alloc).
    pub inplace_of: Option<String>,
    /// Op name (exec).
    pub node: Option<String>,
    /// Workspace arena offset (exec; null when the op has none).
    pub workspace_offset: Option<u64>,
    /// Extension: the conv algorithm the op runs (exec, after the `conv-algos` rewrite).
    pub algo: Option<String>,
    /// Host pool offset (spill_out).
    pub host_offset: Option<u64>,
}

/// A weight's place in the weights region.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"tensor": "w", "offset": 0})))]
pub struct WeightSlotDoc {
    /// Weight tensor.
    pub tensor: String,
    /// Offset in the weights region.
    pub offset: u64,
}

/// Plan statistics (informative; only `peak_bytes` is checked by a replay).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"peak_bytes": 12800, "lower_bound_bytes": 12800, "method": "skyline",
                          "status": "optimal", "gap": 0.0, "elapsed_ms": 0.4})))]
pub struct PlanStatsDoc {
    /// Largest `offset + size` ever reserved (bytes).
    pub peak_bytes: u64,
    /// Proven lower bound on the peak (bytes).
    pub lower_bound_bytes: Option<u64>,
    /// Placement algorithm of the plan.
    pub method: Option<String>,
    /// How good the plan is and why planning stopped.
    pub status: Option<PlanStatusName>,
    /// Relative gap `(peak - bound) / peak`.
    pub gap: Option<f64>,
    /// LOAD of the chosen order (bytes).
    pub load_bytes: Option<u64>,
    /// Order-independent lower bound (bytes).
    pub order_lower_bound_bytes: Option<u64>,
    /// Order heuristic of the chosen order.
    pub order_method: Option<String>,
    /// Each order heuristic's LOAD (`name`, `bytes`, `ms`).
    #[schema(value_type = Option<Vec<Object>>)]
    pub order_members: Option<Vec<Value>>,
    /// Each placement heuristic's peak (`name`, `bytes`, `ms`).
    #[schema(value_type = Option<Vec<Object>>)]
    pub members: Option<Vec<Value>>,
    /// Status of the placement step.
    pub placement_status: Option<String>,
    /// The exact search's figures (`status`, `nodes`, `ms`).
    #[schema(value_type = Option<Object>)]
    pub exact: Option<Value>,
    /// Whether in-place hints were honoured.
    pub inplace: Option<bool>,
    /// What the HiGHS placement model did (`status`, `models`, `improved`, `ms`).
    #[schema(value_type = Option<Object>)]
    pub ilp: Option<Value>,
    /// What the order integer program did (`status`, `whole`, `models`, `improved`,
    /// `load_bytes`, `lower_bound_bytes`, `ms`).
    #[schema(value_type = Option<Object>)]
    pub order_ilp: Option<Value>,
    /// Budget figures of a plan made under a memory budget (`budget_bytes`,
    /// `unconstrained_peak_bytes`, spills, recomputes, modelled times, ...).
    #[schema(value_type = Option<Object>)]
    pub budget: Option<Value>,
    /// Planning time (milliseconds).
    pub elapsed_ms: Option<f64>,
    /// Seed 001 §4.1's fragmentation `1 − largest free block / total free` of the arena at
    /// the step with the most bytes reserved.
    pub fragmentation_at_peak: Option<f64>,
    /// Tier regions of a tiered plan (`tier`, `region`, `offset`, `bytes`, `alignment`,
    /// `peak_bytes`, `free_bytes_at_peak`, `fragmentation_at_peak`).
    #[schema(value_type = Option<Vec<Object>>)]
    pub tiers: Option<Vec<Value>>,
}

/// A memory plan (memplan-plan/1, docs/FORMATS.md §2): an instruction stream over one arena.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(example_plan))]
pub struct PlanDoc {
    /// Always `memplan-plan/1`.
    pub format: String,
    /// Name of the graph planned.
    pub graph: String,
    /// Arena size (bytes).
    pub arena_bytes: u64,
    /// Weights region size (bytes).
    pub weights_bytes: u64,
    /// Host pool size for spills (bytes).
    pub host_bytes: u64,
    /// Weight offsets.
    pub weights: Vec<WeightSlotDoc>,
    /// The instruction stream.
    pub instructions: Vec<InstructionDoc>,
    /// Statistics.
    pub stats: PlanStatsDoc,
    /// Extension: the memplan-graph/1 graph the plan refers to, when graph rewrites (option
    /// `rewrite`) changed the graph that was planned; absent when the plan refers to the
    /// graph as given. `POST /v1/check` with the original graph replays the plan against it
    /// after proving it was derived from the original (same inputs, weights and outputs).
    pub rewritten_graph: Option<GraphDoc>,
}
