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

/// A tensor of a memplan-graph/1 document. Other fields are ignored.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"name": "h", "size": 8192, "kind": "activation", "shape": [2, 1024], "dtype": "f32"})))]
pub struct TensorDoc {
    /// Name, unique among the tensors (non-empty).
    #[schema(min_length = 1)]
    pub name: String,
    /// Bytes (> 0). Aligned up to the tensor's alignment it must still fit in u64, and so
    /// must the sum of every aligned tensor size and op workspace.
    #[schema(minimum = 1)]
    pub size: u64,
    /// Role.
    pub kind: TensorKindDoc,
    /// Shape (informative).
    pub shape: Option<Vec<u64>>,
    /// Element type (informative).
    pub dtype: Option<String>,
    /// Offset alignment, a power of two (default: the graph's).
    #[schema(schema_with = super::rules::alignment_or_null)]
    pub alignment: Option<u64>,
}

/// A member of a fused op (the `fused` extension): an op of its own, run inside the fused op.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"name": "bn", "type": "batch_norm", "inputs": ["conv_out"], "outputs": ["bn_out"],
    "tensors": [{"name": "conv_out", "size": 4096}]})))]
pub struct FusedMemberDoc {
    /// Name, unique among the members (non-empty).
    #[schema(min_length = 1)]
    pub name: String,
    /// Free-text type.
    #[serde(rename = "type")]
    #[schema(nullable = false)]
    pub op_type: Option<String>,
    /// Names read: inputs of the fused op, outputs of earlier members or internal tensors.
    #[schema(nullable = false)]
    pub inputs: Option<Vec<String>>,
    /// Names written: outputs of the fused op or internal tensors (at least one).
    #[schema(min_items = 1)]
    pub outputs: Vec<String>,
    /// Work estimate (at most 1e30).
    #[schema(minimum = 0.0, maximum = 1e30)]
    pub flops: Option<f64>,
    /// Measured run time in microseconds (at most 1e15).
    #[schema(minimum = 0.0, maximum = 1e15)]
    pub time_us: Option<f64>,
    /// Scratch bytes (at most the fused op's `workspace`).
    pub workspace: Option<u64>,
    /// Attributes (any JSON value).
    #[schema(schema_with = attrs_schema)]
    pub attrs: Option<Value>,
    /// `[output_index, input_index]` pairs, as an op's.
    #[schema(schema_with = inplace_pairs)]
    pub inplace: Option<Vec<[u64; 2]>>,
    /// Tensors internal to the fused op, written by this member.
    #[schema(nullable = false)]
    pub tensors: Option<Vec<InternalTensorDoc>>,
}

/// A tensor internal to a fused op.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"name": "conv_out", "size": 4096, "shape": [1, 1024], "dtype": "f32"})))]
pub struct InternalTensorDoc {
    /// Name.
    pub name: String,
    /// Bytes.
    pub size: u64,
    /// Shape (informative).
    pub shape: Option<Vec<u64>>,
    /// Element type (informative).
    pub dtype: Option<String>,
}

fn attrs_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    super::rules::any_value(
        "Op attributes (any JSON value; an object by convention).",
        json!({"stride": [2, 2]}),
    )
}

fn meta_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    super::rules::any_value(
        "Free-form metadata (any JSON value; an object by convention).",
        json!({"model": "resnet50"}),
    )
}

fn op_outputs() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
    ArrayBuilder::new()
        .items(ObjectBuilder::new().schema_type(Type::String))
        .min_items(Some(1))
        .unique_items(true)
        .description(Some(
            "Names of the tensors written (at least one, no repeats): each an `activation` or \
             `output` tensor of the graph, written by this op only. Every activation and output \
             is written by exactly one op.",
        ))
        .examples([json!(["h"])])
        .into()
}

fn inplace_pairs() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, SchemaFormat, SchemaType, Type};
    let index = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::Custom("uint64".into())))
        .minimum(Some(0))
        .maximum(Some(u64::MAX as usize));
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .items(
            ArrayBuilder::new()
                .items(index)
                .min_items(Some(2))
                .max_items(Some(2)),
        )
        .description(Some(
            "`[output_index, input_index]` pairs that may share memory when the input dies \
             here (indices into this op's `outputs` and `inputs`).",
        ))
        .examples([json!([[0, 0]])])
        .into()
}

fn graph_format() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    super::rules::constant("memplan-graph/1", "Always `memplan-graph/1`.")
}

fn plan_format() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    super::rules::constant("memplan-plan/1", "Always `memplan-plan/1`.")
}

/// An op of a memplan-graph/1 document. Other fields are ignored.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"name": "fc", "type": "matmul", "inputs": ["x", "w"], "outputs": ["h"], "workspace": 512})))]
pub struct OpDoc {
    /// Name, unique among the ops (non-empty).
    #[schema(min_length = 1)]
    pub name: String,
    /// Free-text type (`conv2d`, `relu`, an ATen name, ...; default empty).
    #[serde(rename = "type")]
    #[schema(nullable = false)]
    pub op_type: Option<String>,
    /// Names of the tensors read (may repeat, may be empty; default empty). Each names a
    /// tensor of the graph, and the ops form a DAG.
    #[schema(nullable = false)]
    pub inputs: Option<Vec<String>>,
    /// Names of the tensors written (at least one, no repeats): each an `activation` or
    /// `output` tensor of the graph, written by this op only. Every activation and output is
    /// written by exactly one op.
    #[schema(schema_with = op_outputs)]
    pub outputs: Vec<String>,
    /// Work estimate (at most 1e30).
    #[schema(minimum = 0.0, maximum = 1e30)]
    pub flops: Option<f64>,
    /// Measured run time in microseconds (at most 1e15).
    #[schema(minimum = 0.0, maximum = 1e15)]
    pub time_us: Option<f64>,
    /// Scratch bytes needed only while the op runs (aligned up to the graph's alignment it
    /// must fit in u64).
    pub workspace: Option<u64>,
    /// Op attributes.
    #[schema(schema_with = attrs_schema)]
    pub attrs: Option<Value>,
    /// `[output_index, input_index]` pairs that may share memory when the input dies here
    /// (indices into this op's `outputs` and `inputs`).
    #[schema(schema_with = inplace_pairs)]
    pub inplace: Option<Vec<[u64; 2]>>,
    /// Extension: the members a fused op runs, in order (docs/FORMATS.md extensions, the
    /// `fuse` rewrite writes them); at least one.
    #[schema(min_items = 1)]
    pub fused: Option<Vec<FusedMemberDoc>>,
    /// Extension: whether a plan may execute this op a second time (a recompute under a
    /// budget). `false` forbids it (spills or residency instead); `true` allows it; absent:
    /// allowed unless the type is random or stateful (dropout, rand/randn/bernoulli/...,
    /// ONNX RandomNormal/RandomUniform(Like)/Bernoulli/Multinomial, ATen names ending in one
    /// `_` such as `add_`). Any other value than a boolean (null included) is refused.
    #[schema(nullable = false)]
    pub recompute: Option<bool>,
    /// Extension (parallel plans): the stream the op must run on (0 to 63); absent leaves
    /// it to the planner's `streams` option.
    #[schema(maximum = 63)]
    pub stream: Option<u32>,
}

/// A computation graph (memplan-graph/1, docs/FORMATS.md §1). Every rule of the format is
/// checked; a graph that breaks one is answered 422 naming the tensor or op and the rule. The
/// rules across fields (unique names, ops naming existing tensors, one producer per
/// activation and output and none for inputs and weights, in-place indices in range, no
/// cycle, sizes summing within u64, fused members' references) are not expressible here and
/// are stated in the fields' descriptions. Other fields are ignored.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(example_graph))]
pub struct GraphDoc {
    /// Always `memplan-graph/1`.
    #[schema(schema_with = graph_format)]
    pub format: String,
    /// Graph name (default empty).
    #[schema(nullable = false)]
    pub name: Option<String>,
    /// Default tensor alignment, a power of two (default 256).
    #[schema(schema_with = super::rules::graph_alignment)]
    pub alignment: Option<u64>,
    /// Free-form metadata.
    #[schema(schema_with = meta_schema)]
    pub meta: Option<Value>,
    /// Tensors (at most the service's `max_tensors`).
    pub tensors: Vec<TensorDoc>,
    /// Ops, in the listed order (at most the service's `max_ops`).
    pub ops: Vec<OpDoc>,
}

/// One instruction of a memplan-plan/1 stream, by `op`; other fields are ignored. Tensor
/// and op names refer to the graph; a plan that breaks a replay rule is a valid answer of
/// `POST /v1/check` (`valid: false`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
#[schema(examples(json!({"op": "alloc", "tensor": "h", "offset": 4096, "mem_id": 1})))]
pub enum InstructionDoc {
    /// Reserve `[offset, offset + size)` for `tensor`.
    Alloc {
        /// Tensor.
        tensor: String,
        /// Arena offset.
        offset: u64,
        /// Virtual memory id.
        mem_id: Option<u64>,
        /// Extension: the tensor takes the bytes of this dying input in place.
        inplace_of: Option<String>,
    },
    /// Run op `node`.
    Exec {
        /// Op name.
        node: String,
        /// Workspace arena offset (required iff the op has a workspace; else null or absent).
        workspace_offset: Option<u64>,
        /// Extension: the conv algorithm the op runs (after the `conv-algos` rewrite).
        algo: Option<String>,
        /// Extension (parallel plans): the stream it runs on (absent or null: 0).
        stream: Option<u32>,
    },
    /// Release `tensor`.
    Free {
        /// Tensor.
        tensor: String,
        /// Extension (parallel plans): the stream the release is ordered on (absent or null: 0).
        stream: Option<u32>,
    },
    /// Copy `tensor` to the host pool at `host_offset` and release its range.
    SpillOut {
        /// Tensor.
        tensor: String,
        /// Host pool offset.
        host_offset: u64,
        /// Extension (parallel plans): the copy's stream (absent or null: 0).
        stream: Option<u32>,
    },
    /// Reserve `offset` for `tensor` and copy it back from the host pool.
    SpillIn {
        /// Tensor.
        tensor: String,
        /// Arena offset.
        offset: u64,
        /// Virtual memory id.
        mem_id: Option<u64>,
        /// Extension (parallel plans): the copy's stream (absent or null: 0).
        stream: Option<u32>,
    },
    /// Extension (parallel plans): `event` completes when everything issued on `stream` so
    /// far has completed (recorded once per plan).
    RecordEvent {
        /// Event id.
        event: u64,
        /// Stream.
        stream: u32,
    },
    /// Extension (parallel plans): later work on `stream` waits for `event` (recorded
    /// earlier in the stream of instructions).
    WaitEvent {
        /// Event id.
        event: u64,
        /// Stream.
        stream: u32,
    },
}

/// A parallel plan's figures: streams, modelled makespans, the candidates weighed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"streams": 2, "makespan_us": 159.0, "serial_makespan_us": 214.5,
    "serial_peak_bytes": 11064065, "peak_cap_bytes": 11064065, "events": 67,
    "candidate": "repaired-by-time",
    "candidates": [{"name": "serial-placement", "peak_bytes": 11064065, "makespan_us": 212.8},
                   {"name": "repaired-by-time", "peak_bytes": 11064065, "makespan_us": 159.0}]})))]
pub struct StreamStatDoc {
    /// Streams used.
    pub streams: u32,
    /// Modelled makespan of the plan (µs, one queue per stream).
    pub makespan_us: f64,
    /// Modelled makespan of the single-stream plan (µs).
    pub serial_makespan_us: f64,
    /// Peak of the single-stream plan (bytes).
    pub serial_peak_bytes: u64,
    /// The arena cap the plan had to meet (bytes).
    pub peak_cap_bytes: u64,
    /// Events recorded.
    pub events: u64,
    /// The candidate kept (`single-stream`, `serial-placement`, `repaired-by-time`, ...).
    pub candidate: String,
    /// Every candidate weighed.
    pub candidates: Vec<StreamCandidateDoc>,
}

/// One candidate a parallel plan was chosen from.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"name": "repaired-by-time", "peak_bytes": 11064065, "makespan_us": 159.0})))]
pub struct StreamCandidateDoc {
    /// Its name.
    pub name: String,
    /// Its peak (bytes).
    pub peak_bytes: u64,
    /// Its modelled makespan (µs).
    pub makespan_us: f64,
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

/// A heuristic's figure in the plan stats.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"name": "greedy-size", "bytes": 12800, "ms": 0.1})))]
pub struct MemberStatDoc {
    /// Algorithm name.
    pub name: String,
    /// Its peak or LOAD (bytes).
    pub bytes: u64,
    /// Time taken (milliseconds).
    pub ms: f64,
}

/// What the exact placement search did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"status": "optimal", "nodes": 12, "ms": 0.3})))]
pub struct ExactStatDoc {
    /// How it ended.
    pub status: String,
    /// Nodes searched.
    pub nodes: u64,
    /// Time taken (milliseconds).
    pub ms: f64,
}

/// What the HiGHS placement model did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"status": "optimal", "models": 1, "improved": 0, "ms": 4.0})))]
pub struct IlpStatDoc {
    /// How it ended.
    pub status: String,
    /// Models solved.
    pub models: u64,
    /// Models that improved the plan.
    pub improved: u64,
    /// Time taken (milliseconds).
    pub ms: f64,
}

/// What the order integer program did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"status": "optimal", "whole": true, "models": 1, "improved": 0,
    "load_bytes": 12800, "lower_bound_bytes": 12800, "ms": 3.0})))]
pub struct OrderIlpStatDoc {
    /// How it ended: optimal, time_limit, node_limit (an effort cap stopped it with windows
    /// still to try) or heuristic (every window was tried, nothing proven).
    pub status: String,
    /// Whether it modelled the whole graph.
    pub whole: bool,
    /// Models solved.
    pub models: u64,
    /// Models that improved the order.
    pub improved: u64,
    /// LOAD of its order (bytes).
    pub load_bytes: u64,
    /// Its lower bound (bytes).
    pub lower_bound_bytes: u64,
    /// Time taken (milliseconds).
    pub ms: f64,
}

/// One spill strategy tried under a budget.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"name": "greedy", "peak_bytes": 4096, "overhead_pct": 3.5, "fits": true})))]
pub struct TriedStatDoc {
    /// Strategy.
    pub name: String,
    /// Peak it reached (bytes).
    pub peak_bytes: u64,
    /// Modelled run-time overhead (percent).
    pub overhead_pct: f64,
    /// Whether it fit the budget.
    pub fits: bool,
    /// Solver behind it.
    pub solver: Option<String>,
}

/// Budget figures of a plan made under a memory budget.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"budget_bytes": 4096, "unconstrained_peak_bytes": 12800, "strategy": "greedy",
    "target_bytes": 4096, "attempts": 1, "device": "h200", "spilled_out_bytes": 0, "spilled_in_bytes": 0,
    "spills": 0, "recomputed_ops": 0, "recompute_flops": 0.0, "recompute_us": 0.0, "base_step_us": 1.0,
    "step_us": 1.0, "overhead_us": 0.0, "overhead_pct": 0.0, "min_bytes": 4096})))]
pub struct BudgetStatDoc {
    /// Budget (bytes).
    pub budget_bytes: u64,
    /// Peak without a budget (bytes; default 0).
    #[schema(nullable = false)]
    pub unconstrained_peak_bytes: Option<u64>,
    /// Strategy of the plan.
    pub strategy: String,
    /// Target peak (bytes).
    pub target_bytes: u64,
    /// Attempts made.
    pub attempts: u64,
    /// Device profile name.
    pub device: String,
    /// Bytes spilled out.
    pub spilled_out_bytes: u64,
    /// Bytes spilled in.
    pub spilled_in_bytes: u64,
    /// Spill-outs.
    pub spills: u64,
    /// Ops recomputed.
    pub recomputed_ops: u64,
    /// Recomputed work.
    pub recompute_flops: f64,
    /// Modelled recompute time (microseconds).
    pub recompute_us: f64,
    /// Modelled step time without a budget (microseconds).
    pub base_step_us: f64,
    /// Modelled step time (microseconds).
    pub step_us: f64,
    /// Modelled overhead (microseconds).
    pub overhead_us: f64,
    /// Modelled overhead (percent).
    pub overhead_pct: f64,
    /// Smallest peak reached (bytes).
    pub min_bytes: u64,
    /// Conv algorithms used, by name (default none).
    #[schema(nullable = false)]
    pub algo_mix: Option<std::collections::BTreeMap<String, u64>>,
    /// Conv algorithms downgraded (default 0).
    #[schema(nullable = false)]
    pub algo_downgrades: Option<u64>,
    /// Modelled time the downgrades cost (microseconds; default 0).
    #[schema(nullable = false)]
    pub algo_downgrade_us: Option<f64>,
    /// Solver behind the plan.
    pub solver: Option<String>,
    /// Every strategy tried (default none).
    #[schema(nullable = false)]
    pub tried: Option<Vec<TriedStatDoc>>,
}

/// A tier region of a tiered plan.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"tier": "activations", "region": "arena", "offset": 0, "bytes": 8192,
    "alignment": 256, "peak_bytes": 8192, "free_bytes_at_peak": 0, "fragmentation_at_peak": 0.0})))]
pub struct TierStatDoc {
    /// Tier.
    pub tier: String,
    /// Region.
    pub region: String,
    /// Offset of the region (bytes).
    pub offset: u64,
    /// Size of the region (bytes).
    pub bytes: u64,
    /// Alignment (bytes).
    pub alignment: u64,
    /// Peak within the region (bytes).
    pub peak_bytes: u64,
    /// Free bytes at the peak.
    pub free_bytes_at_peak: u64,
    /// Fragmentation at the peak.
    pub fragmentation_at_peak: f64,
}

/// Plan statistics (informative; only `peak_bytes` is checked by a replay). Other fields are
/// ignored.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"peak_bytes": 12800, "lower_bound_bytes": 12800, "method": "skyline",
                          "status": "optimal", "gap": 0.0, "elapsed_ms": 0.4})))]
pub struct PlanStatsDoc {
    /// Largest `offset + size` ever reserved (bytes).
    pub peak_bytes: u64,
    /// Proven lower bound on the peak (bytes; default 0).
    #[schema(nullable = false)]
    pub lower_bound_bytes: Option<u64>,
    /// Placement algorithm of the plan (default empty).
    #[schema(nullable = false)]
    pub method: Option<String>,
    /// How good the plan is and why planning stopped.
    pub status: Option<PlanStatusName>,
    /// Relative gap `(peak - bound) / peak`.
    pub gap: Option<f64>,
    /// LOAD of the chosen order (bytes).
    pub load_bytes: Option<u64>,
    /// Order-independent lower bound (bytes).
    pub order_lower_bound_bytes: Option<u64>,
    /// Order heuristic of the chosen order (`listed`, `listed-topological` where the graph
    /// lists ops before their inputs' producers, or a heuristic's name).
    pub order_method: Option<String>,
    /// Each order heuristic's LOAD (default none).
    #[schema(nullable = false)]
    pub order_members: Option<Vec<MemberStatDoc>>,
    /// Each placement heuristic's peak (default none).
    #[schema(nullable = false)]
    pub members: Option<Vec<MemberStatDoc>>,
    /// Status of the placement step for the chosen order: `optimal`, `node_limit` /
    /// `time_limit` (a search stopped at its node cap / the time limit with a gap left),
    /// `heuristic` (no search ran) or `infeasible`.
    pub placement_status: Option<String>,
    /// The exact search's figures.
    pub exact: Option<ExactStatDoc>,
    /// Whether in-place hints were honoured (default false).
    #[schema(nullable = false)]
    pub inplace: Option<bool>,
    /// What the HiGHS placement model did.
    pub ilp: Option<IlpStatDoc>,
    /// What the order integer program did.
    pub order_ilp: Option<OrderIlpStatDoc>,
    /// Budget figures of a plan made under a memory budget.
    pub budget: Option<BudgetStatDoc>,
    /// Planning time (milliseconds; default 0).
    #[schema(nullable = false)]
    pub elapsed_ms: Option<f64>,
    /// Seed 001 §4.1's fragmentation `1 − largest free block / total free` of the arena at
    /// the step with the most bytes reserved.
    pub fragmentation_at_peak: Option<f64>,
    /// Tier regions of a tiered plan (default none).
    #[schema(nullable = false)]
    pub tiers: Option<Vec<TierStatDoc>>,
    /// Parallel plans: streams and modelled makespans.
    pub streams: Option<StreamStatDoc>,
}

/// Statistics of a plan `POST /v1/check` replays: `peak_bytes`, which the replay checks. The
/// other fields ([`PlanStatsDoc`]: what memplan writes) are informative and take any value (a
/// value of another shape, as from another planner, is read as absent).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"peak_bytes": 12800, "status": "optimal"})))]
pub struct CheckedPlanStatsDoc {
    /// Largest `offset + size` ever reserved (bytes).
    pub peak_bytes: u64,
}

/// A plan as `POST /v1/check` reads it: the fields of a memory plan ([`PlanDoc`]), of which
/// only what the replay checks is constrained: `format` is any string (another than
/// `memplan-plan/1` is answered `valid: false`, as `memplan check` answers it) and the stats
/// are read for `peak_bytes` alone. Other fields are ignored.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(example_plan))]
pub struct CheckedPlanDoc {
    /// `memplan-plan/1` (another value is answered `valid: false`).
    pub format: String,
    /// Name of the graph planned.
    pub graph: String,
    /// Arena size (bytes).
    pub arena_bytes: u64,
    /// Weights region size (bytes; default 0).
    #[schema(nullable = false)]
    pub weights_bytes: Option<u64>,
    /// Host pool size for spills (bytes; default 0).
    #[schema(nullable = false)]
    pub host_bytes: Option<u64>,
    /// Weight offsets (default none).
    #[schema(nullable = false)]
    pub weights: Option<Vec<WeightSlotDoc>>,
    /// The instruction stream.
    pub instructions: Vec<InstructionDoc>,
    /// Statistics (`peak_bytes` read, the rest informative).
    pub stats: CheckedPlanStatsDoc,
    /// Extension: the graph the plan refers to when rewrites changed it ([`PlanDoc`]).
    pub rewritten_graph: Option<GraphDoc>,
    /// Extension: how `rewritten_graph` was derived ([`PlanDoc`]); applied to the given graph
    /// again, they and the execs' conv algorithms must give exactly the carried graph.
    #[schema(nullable = false)]
    pub rewrites: Option<Vec<RewriteStepDoc>>,
}

/// A memory plan (memplan-plan/1, docs/FORMATS.md §2): an instruction stream over one arena.
/// Other fields are ignored.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(example_plan))]
pub struct PlanDoc {
    /// Always `memplan-plan/1`.
    #[schema(schema_with = plan_format)]
    pub format: String,
    /// Name of the graph planned.
    pub graph: String,
    /// Arena size (bytes).
    pub arena_bytes: u64,
    /// Weights region size (bytes; default 0).
    #[schema(nullable = false)]
    pub weights_bytes: Option<u64>,
    /// Host pool size for spills (bytes; default 0).
    #[schema(nullable = false)]
    pub host_bytes: Option<u64>,
    /// Weight offsets (default none).
    #[schema(nullable = false)]
    pub weights: Option<Vec<WeightSlotDoc>>,
    /// The instruction stream.
    pub instructions: Vec<InstructionDoc>,
    /// Statistics.
    pub stats: PlanStatsDoc,
    /// Extension: the memplan-graph/1 graph the plan refers to, when graph rewrites (option
    /// `rewrite`) changed the graph that was planned; absent when the plan refers to the
    /// graph as given. `POST /v1/check` with the original graph replays the plan against it
    /// after proving it was derived from the original: the same inputs, weights and outputs,
    /// and exactly the graph that `rewrites` and the execs' conv algorithms give when applied
    /// to the original again.
    pub rewritten_graph: Option<GraphDoc>,
    /// Extension: the rewrites that derived `rewritten_graph` from the graph given, in the
    /// order they ran, each with its decisions (absent when nothing was rewritten, or only
    /// conv algorithms were chosen: the execs name those).
    #[schema(nullable = false)]
    pub rewrites: Option<Vec<RewriteStepDoc>>,
}

/// One graph rewrite a plan records (`rewrites`), by `pass`: what it decided, enough to apply
/// it to the original graph again without searching.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(tag = "pass", rename_all = "snake_case")]
#[schema(examples(json!({"pass": "tile", "regions": [
    {"first_op": "conv1", "last_op": "relu2", "strips": 4}]})))]
pub enum RewriteStepDoc {
    /// Spatial tiling: the regions cut into strips, in graph order.
    Tile {
        /// The tiled regions.
        regions: Vec<TileRegionStepDoc>,
    },
    /// Operator fusion with its two rule switches.
    Fuse {
        /// Constant-zero pads folded into the following conv.
        fold_pad: bool,
        /// `[conv] [batch_norm] elementwise*` chains fused.
        chains: bool,
    },
}

/// One tiled region: the ops from `first_op` to `last_op` (names in the graph the pass read,
/// listed order) cut into `strips` horizontal strips.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"first_op": "conv1", "last_op": "relu2", "strips": 4})))]
pub struct TileRegionStepDoc {
    /// The region's first op.
    pub first_op: String,
    /// The region's last op.
    pub last_op: String,
    /// Strips cut (a count below 2, or above the output's rows, makes the plan invalid).
    pub strips: u64,
}
