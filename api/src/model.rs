//! Request and response bodies, and the OpenAPI schemas of the documents the service exchanges.
//!
//! The graph and plan documents are parsed by the `memplan` library itself ([`memplan::Graph`],
//! [`memplan::Plan`]); [`GraphDoc`] and [`PlanDoc`] only describe them for the OpenAPI document
//! (a test checks that they name every field the library reads and writes). Strategy and order
//! names come from the library's registries ([`memplan::Strategy::ALL`],
//! [`memplan::OrderMode::ALL`]).

use memplan::{OrderMode, Strategy};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, PartialSchema, ToSchema};

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

fn example_plan_request() -> Value {
    json!({"graph": example_graph(), "options": {"strategy": "heuristic", "order": "auto", "time_limit_s": 1.0}})
}

fn example_check_request() -> Value {
    json!({"graph": example_graph(), "plan": example_plan()})
}

fn example_job() -> Value {
    json!({
        "id": "5f0c1f8e-3c1a-4d7e-9a53-0e6f5b1e2c44",
        "status": "running",
        "graph": "resnet50.32.train",
        "options": {"order": "auto", "strategy": "auto", "time_limit_s": 60.0, "inplace": false, "cache": true},
        "created_unix_ms": 1_767_225_600_000u64,
        "started_unix_ms": 1_767_225_600_120u64,
        "finished_unix_ms": null,
        "attempts": 1,
        "cached": false,
        "progress": {"stage": "heuristics", "best_peak_bytes": 2_775_134_976u64,
                     "lower_bound_bytes": 2_774_744_580u64, "gap": 0.00014, "elapsed_s": 0.13},
        "error": null,
        "links": {"self": "/v1/jobs/5f0c1f8e-3c1a-4d7e-9a53-0e6f5b1e2c44",
                  "events": "/v1/jobs/5f0c1f8e-3c1a-4d7e-9a53-0e6f5b1e2c44/events",
                  "plan": "/v1/jobs/5f0c1f8e-3c1a-4d7e-9a53-0e6f5b1e2c44/plan"}
    })
}

fn name_schema(
    names: impl IntoIterator<Item = (&'static str, &'static str)>,
    what: &str,
    example: &str,
) -> RefOr<Schema> {
    let names: Vec<_> = names.into_iter().collect();
    let about: Vec<String> = names.iter().map(|(n, a)| format!("`{n}`: {a}")).collect();
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(names.iter().map(|(n, _)| *n)))
        .description(Some(format!("{what}. {}.", about.join("; "))))
        .examples([json!(example)])
        .into()
}

/// A strategy name (`memplan::Strategy`): which solvers run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StrategyName(pub String);

impl PartialSchema for StrategyName {
    fn schema() -> RefOr<Schema> {
        name_schema(
            Strategy::ALL.map(|s| (s.name(), s.about())),
            "Which solvers run (default `auto`)",
            "heuristic",
        )
    }
}
impl ToSchema for StrategyName {}

/// An order mode name (`memplan::OrderMode`): which op orders are considered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OrderName(pub String);

impl PartialSchema for OrderName {
    fn schema() -> RefOr<Schema> {
        name_schema(
            OrderMode::ALL.map(|m| (m.name(), m.about())),
            "Which op orders are considered (default `auto`)",
            "auto",
        )
    }
}
impl ToSchema for OrderName {}

/// Options of `POST /v1/plan` and `POST /v1/jobs`; every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"strategy": "auto", "order": "auto", "time_limit_s": 5.0})))]
pub struct PlanOptionsBody {
    /// Device memory budget in bytes that the plan's arena must fit, by spilling to host
    /// memory and recomputing (the `best` spill strategy, H200 cost model). A budget below
    /// what any plan can reach is refused with 422 naming the smallest peak reached.
    #[schema(minimum = 1)]
    pub budget: Option<u64>,
    /// Time limit of the whole planning in seconds (default 1; at most the service's cap:
    /// `sync_time_limit_cap` for `POST /v1/plan`, `max_time_limit` for jobs).
    #[schema(minimum = 0.0)]
    pub time_limit_s: Option<f64>,
    /// Which solvers run.
    pub strategy: Option<StrategyName>,
    /// Which op orders are considered.
    pub order: Option<OrderName>,
    /// Honour the graph's in-place hints (plans then use the `inplace_of` alloc extension;
    /// default false).
    pub inplace: Option<bool>,
    /// Answer with the stored plan of an identical earlier request (same graph and options)
    /// without solving again (default true). `false` solves again and stores the new plan.
    pub cache: Option<bool>,
}

/// The options a job or plan ran with, defaults filled in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"order": "auto", "strategy": "auto", "time_limit_s": 1.0, "inplace": false, "cache": true})))]
pub struct ResolvedOptions {
    /// Order mode name.
    pub order: String,
    /// Strategy name.
    pub strategy: String,
    /// Time limit in seconds.
    pub time_limit_s: f64,
    /// In-place hints honoured.
    pub inplace: bool,
    /// Stored plans reused.
    pub cache: bool,
    /// Arena budget in bytes, when the plan must fit one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u64>,
}

/// Body of `POST /v1/plan` and `POST /v1/jobs`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(example_plan_request))]
pub struct PlanRequest {
    /// The graph (memplan-graph/1).
    pub graph: GraphDoc,
    /// Planning options.
    #[serde(default)]
    pub options: Option<PlanOptionsBody>,
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

/// A computation graph (memplan-graph/1, FORMATS.md §1). Every rule of the format is checked;
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
    /// `optimal` when the peak meets the bound, else `heuristic`.
    pub status: Option<String>,
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

/// A memory plan (memplan-plan/1, FORMATS.md §2): an instruction stream over one arena.
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
}

/// Status of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(examples("running"))]
pub enum JobStatus {
    /// Accepted, waiting for a solver.
    Queued,
    /// Solving.
    Running,
    /// Finished; the plan is available.
    Done,
    /// Finished without a plan; `error` says why.
    Failed,
    /// Cancelled; the best plan found before, if any, is available.
    Cancelled,
}

impl JobStatus {
    /// The stored and displayed name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Done => "done",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }

    /// The status called `name`.
    pub fn from_name(name: &str) -> Option<JobStatus> {
        [
            JobStatus::Queued,
            JobStatus::Running,
            JobStatus::Done,
            JobStatus::Failed,
            JobStatus::Cancelled,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }

    /// Whether the job will not change any more.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled
        )
    }
}

/// Progress of a job: the best plan so far and the proven bound.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"stage": "exact", "best_peak_bytes": 2775134976u64, "lower_bound_bytes": 2774744580u64, "gap": 0.00014, "elapsed_s": 1.2})))]
pub struct Progress {
    /// Last stage finished (`heuristics`, `exact`, ...); null before the first.
    pub stage: Option<String>,
    /// Peak of the best plan so far (bytes).
    pub best_peak_bytes: Option<u64>,
    /// Best proven lower bound on the peak (bytes).
    pub lower_bound_bytes: Option<u64>,
    /// Relative gap `(best - bound) / best`.
    pub gap: Option<f64>,
    /// Seconds since the job started running (0 while queued).
    pub elapsed_s: f64,
}

/// Links of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"self": "/v1/jobs/5f0c", "events": "/v1/jobs/5f0c/events", "plan": "/v1/jobs/5f0c/plan"})))]
pub struct JobLinks {
    /// This job.
    #[serde(rename = "self")]
    pub this: String,
    /// Its server-sent events.
    pub events: String,
    /// Its plan.
    pub plan: String,
}

/// A job: its status, options, progress and links.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(example_job))]
pub struct JobView {
    /// Job id.
    pub id: String,
    /// Status.
    pub status: JobStatus,
    /// Name of the graph.
    pub graph: String,
    /// Options, defaults filled in.
    pub options: ResolvedOptions,
    /// When the job was accepted (Unix milliseconds).
    pub created_unix_ms: u64,
    /// When it last started running.
    pub started_unix_ms: Option<u64>,
    /// When it finished.
    pub finished_unix_ms: Option<u64>,
    /// How many times it started running (a restart during a run starts it again).
    pub attempts: u32,
    /// Whether the plan was the stored plan of an identical earlier request.
    pub cached: bool,
    /// Progress (final figures once finished).
    pub progress: Progress,
    /// Why it failed.
    pub error: Option<crate::error::Problem>,
    /// Related resources.
    pub links: JobLinks,
}

/// Body of `POST /v1/check`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(examples(example_check_request))]
pub struct CheckRequest {
    /// The graph (memplan-graph/1).
    pub graph: GraphDoc,
    /// The plan to replay (memplan-plan/1).
    pub plan: PlanDoc,
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

/// A buffer id: text or a non-negative integer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
#[schema(examples("conv1.out"))]
pub enum BufferId {
    /// Text id.
    Text(String),
    /// Numeric id.
    Number(u64),
}

impl BufferId {
    /// The id as text (as in a CSV).
    pub fn text(&self) -> String {
        match self {
            BufferId::Text(s) => s.clone(),
            BufferId::Number(n) => n.to_string(),
        }
    }
}

/// A buffer to place: lifetime `[lower, upper)` and size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"id": "a", "lower": 0, "upper": 3, "size": 1024})))]
pub struct BufferBody {
    /// Unique id.
    pub id: BufferId,
    /// First step of the lifetime.
    pub lower: u64,
    /// End of the lifetime (exclusive, > lower).
    pub upper: u64,
    /// Bytes (> 0).
    pub size: u64,
    /// Offset alignment, a power of two (default: the request's `alignment`).
    pub alignment: Option<u64>,
}

/// JSON body of `POST /v1/place` (a minimalloc CSV body with `Content-Type: text/csv` takes
/// the same options as query parameters).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"buffers": [
    {"id": "a", "lower": 0, "upper": 2, "size": 1024},
    {"id": "b", "lower": 1, "upper": 3, "size": 512},
    {"id": "c", "lower": 2, "upper": 4, "size": 1024}], "time_limit_s": 1.0})))]
pub struct PlaceRequest {
    /// The buffers.
    pub buffers: Vec<BufferBody>,
    /// Arena capacity to fit (bytes); without it the peak is minimised.
    pub capacity: Option<u64>,
    /// Time limit in seconds (default 1, at most `sync_time_limit_cap`).
    pub time_limit_s: Option<f64>,
    /// Alignment of buffers that give none (default 1).
    pub alignment: Option<u64>,
    /// Heuristics only, no exact search (default false).
    pub heuristic: Option<bool>,
}

/// Options of `POST /v1/place` with a CSV body.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PlaceQuery {
    /// Arena capacity to fit (bytes); without it the peak is minimised.
    pub capacity: Option<u64>,
    /// Time limit in seconds (default 1, at most `sync_time_limit_cap`).
    pub time_limit_s: Option<f64>,
    /// Alignment when the CSV has no `alignment` column (default 1).
    pub alignment: Option<u64>,
    /// Heuristics only, no exact search (default false).
    pub heuristic: Option<bool>,
}

/// A placed buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"id": "a", "offset": 0})))]
pub struct PlacedBuffer {
    /// Buffer id (as text).
    pub id: String,
    /// Offset (bytes).
    pub offset: u64,
}

/// Result of `POST /v1/place` as JSON (with `Accept: text/csv`, the CSV with an `offset`
/// column instead, the figures in `X-Memplan-*` headers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"fits": true, "peak_bytes": 2048, "lower_bound_bytes": 2048, "gap": 0.0,
    "load_bytes": 2048, "status": "optimal", "method": "greedy-size", "elapsed_ms": 0.2,
    "buffers": [{"id": "a", "offset": 0}, {"id": "b", "offset": 1024}, {"id": "c", "offset": 0}]})))]
pub struct PlaceResponse {
    /// Whether the peak fits the capacity (true without one).
    pub fits: bool,
    /// Peak of the placement (bytes).
    pub peak_bytes: u64,
    /// Proven lower bound on the peak (bytes; above the capacity when infeasibility is proven).
    pub lower_bound_bytes: u64,
    /// Relative gap.
    pub gap: f64,
    /// LOAD: the most bytes alive at one step.
    pub load_bytes: u64,
    /// optimal / heuristic / time_limit / node_limit / infeasible.
    pub status: String,
    /// Algorithm of the placement.
    pub method: String,
    /// Time taken (milliseconds).
    pub elapsed_ms: f64,
    /// Offsets, in request order.
    pub buffers: Vec<PlacedBuffer>,
}

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
