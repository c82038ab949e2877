//! Request and response bodies, and the OpenAPI schemas of the documents the service exchanges.
//!
//! The graph and plan documents are parsed by the `memplan` library itself ([`memplan::Graph`],
//! [`memplan::Plan`]); [`GraphDoc`] and [`PlanDoc`] only describe them for the OpenAPI document
//! (a test checks that they name every field the library reads and writes). Strategy, order,
//! rewrite, conv algorithm, spill strategy and plan status names come from the library's
//! registries ([`memplan::Strategy::ALL`], [`memplan::OrderMode::ALL`], [`memplan::Rewrite::ALL`],
//! [`memplan::conv_algo::ConvAlgoMode::ALL`], [`memplan::budget::registry`],
//! [`memplan::PlanStatus::ALL`]).
//!
//! The planning options are the pipeline's ([`memplan::PipelineOptions`]): [`PlanOptionsBody`]
//! documents them (with the service's `cache`), [`ResolvedOptions`] holds them resolved.

use memplan::conv_algo::ConvAlgoMode;
use memplan::{OrderMode, PipelineOptions, PlanStatus, Rewrite, Strategy};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
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
        "options": example_resolved_options(),
        "created_unix_ms": 1_767_225_600_000u64,
        "started_unix_ms": 1_767_225_600_120u64,
        "finished_unix_ms": null,
        "attempts": 1,
        "cached": false,
        "progress": {"stage": "heuristics", "best_peak_bytes": 2_775_134_976u64,
                     "lower_bound_bytes": 2_774_744_580u64, "gap": 0.00014, "elapsed_s": 0.13,
                     "status": null},
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

/// What a plan status means (one line, for the documentation).
fn plan_status_about(s: PlanStatus) -> &'static str {
    match s {
        PlanStatus::Optimal => "the peak meets a proven lower bound",
        PlanStatus::Feasible => {
            "the solvers used their whole work budget (`effort`); the gap to the proven bound \
             is in `gap`"
        }
        PlanStatus::TimeLimit => {
            "the wall-clock cap (`time_limit_s`) stopped a stage before its work budget was spent"
        }
        PlanStatus::Cancelled => "the run was cancelled; the best plan found so far",
        PlanStatus::HeuristicOnly => "only the heuristics ran (strategy `heuristic`)",
    }
}

/// A plan status name (`memplan::PlanStatus`): the one status vocabulary of plans, the same
/// in plan stats, job progress, the CLI and the zoo report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PlanStatusName(pub String);

impl PartialSchema for PlanStatusName {
    fn schema() -> RefOr<Schema> {
        name_schema(
            PlanStatus::ALL.map(|s| (s.as_str(), plan_status_about(s))),
            "How good a plan is and why planning stopped",
            "optimal",
        )
    }
}
impl ToSchema for PlanStatusName {}

/// A graph rewrite name (`memplan::Rewrite`), or `all` / `none`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RewriteName(pub String);

/// What a rewrite does (one line, for the documentation).
fn rewrite_about(r: Rewrite) -> &'static str {
    match r {
        Rewrite::Tile => "spatial tiling into H-strips (strips per `tile`)",
        Rewrite::Fuse => {
            "operator fusion (conv → batch_norm → activation, element-wise chains, pad folding)"
        }
        Rewrite::ConvAlgos => "conv algorithm choice (per `conv_algos`)",
    }
}

impl PartialSchema for RewriteName {
    fn schema() -> RefOr<Schema> {
        let names = Rewrite::ALL
            .map(|r| (r.name(), rewrite_about(r)))
            .into_iter()
            .chain([("all", "every rewrite"), ("none", "no rewrite")]);
        name_schema(
            names,
            "A graph rewrite run before planning (default none: the graph is planned as given)",
            "fuse",
        )
    }
}
impl ToSchema for RewriteName {}

/// A conv algorithm mode name (`memplan::conv_algo::ConvAlgoMode`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConvAlgoName(pub String);

/// What a conv algorithm mode does (one line, for the documentation).
fn conv_algo_about(m: ConvAlgoMode) -> &'static str {
    match m {
        ConvAlgoMode::Auto => {
            "the fastest algorithm per conv that keeps the planned peak at the min-memory plan's"
        }
        ConvAlgoMode::Fastest => "the fastest algorithm per conv",
        ConvAlgoMode::MinMemory => "the least workspace per conv",
        ConvAlgoMode::Off => {
            "no choice (refused with the `conv-algos` rewrite: leave the rewrite out instead)"
        }
    }
}

impl PartialSchema for ConvAlgoName {
    fn schema() -> RefOr<Schema> {
        name_schema(
            ConvAlgoMode::ALL.map(|m| (m.name(), conv_algo_about(m))),
            "How the `conv-algos` rewrite picks each conv's algorithm (default `auto`)",
            "auto",
        )
    }
}
impl ToSchema for ConvAlgoName {}

/// A spill strategy name (`memplan::budget`): how a plan is brought under a budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SpillStrategyName(pub String);

impl PartialSchema for SpillStrategyName {
    fn schema() -> RefOr<Schema> {
        let registry = memplan::budget::registry();
        let names = std::iter::once((
            memplan::budget::BEST,
            "every strategy; the best fitting plan wins",
        ))
        .chain(registry.iter().map(|s| (s.name(), s.about())));
        name_schema(
            names,
            "How a plan is brought under `budget` (default `best`; other values need a budget)",
            "best",
        )
    }
}
impl ToSchema for SpillStrategyName {}

/// An arena budget: bytes (an integer, or a string of digits) or a percentage of the
/// unconstrained plan's peak (`"60%"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BudgetValue {
    /// Bytes.
    Bytes(u64),
    /// `BYTES` or `PCT%`.
    Text(String),
}

impl PartialSchema for BudgetValue {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1))
                    .description(Some("Bytes")),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(r"^\s*([0-9]+|[0-9]*\.?[0-9]+\s*%)\s*$"))
                    .description(Some(
                        "Bytes as digits, or a percentage in (0, 100] of the unconstrained \
                         plan's peak (`60%`)",
                    )),
            )
            .description(Some(
                "Arena budget the plan must fit, by spilling to host memory and recomputing: \
                 bytes, or a percentage in (0, 100] of the unconstrained plan's peak \
                 (`\"60%\"`). A budget below what any plan can reach is refused with 422 \
                 naming the smallest peak reached.",
            ))
            .examples([json!("60%"), json!(1_073_741_824u64)])
            .into()
    }
}
impl ToSchema for BudgetValue {}

/// Device figures of the cost model (`memplan::cost::DeviceProfile`); every field is optional
/// (missing ones keep the H200's), unknown fields are refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"name": "h100", "half_flops_per_s": 989e12, "fp32_flops_per_s": 67e12,
    "memory_bytes_per_s": 3.35e12, "h2d_bytes_per_s": 55e9, "d2h_bytes_per_s": 55e9})))]
pub struct DeviceProfileDoc {
    /// Name shown in the stats.
    pub name: Option<String>,
    /// Dense 16-bit (bf16/fp16) throughput (FLOP/s).
    #[schema(exclusive_minimum = 0.0)]
    pub half_flops_per_s: Option<f64>,
    /// Dense fp32 throughput (FLOP/s).
    #[schema(exclusive_minimum = 0.0)]
    pub fp32_flops_per_s: Option<f64>,
    /// Device memory bandwidth (bytes/s).
    #[schema(exclusive_minimum = 0.0)]
    pub memory_bytes_per_s: Option<f64>,
    /// Host→device link bandwidth, for spill-ins (bytes/s).
    #[schema(exclusive_minimum = 0.0)]
    pub h2d_bytes_per_s: Option<f64>,
    /// Device→host link bandwidth, for spill-outs (bytes/s).
    #[schema(exclusive_minimum = 0.0)]
    pub d2h_bytes_per_s: Option<f64>,
}

/// Options of `POST /v1/plan` and `POST /v1/jobs` (the body's `options`), and the query
/// parameters of `POST /plan` and `POST /jobs`: every field of the planning pipeline's
/// options (`memplan::PipelineOptions`, the same as the CLI's flags) plus the service's
/// `cache`. Every field is optional; unknown fields are refused (422). Options that cannot be
/// combined are refused with the pipeline's own message (the CLI's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"strategy": "auto", "order": "auto", "time_limit_s": 5.0,
    "rewrite": ["fuse", "conv-algos"], "budget": "60%", "spill_strategy": "best"})))]
pub struct PlanOptionsBody {
    /// Graph rewrites to run before planning, in the pipeline's order (tile, fuse,
    /// conv-algos): a list of names, or one comma-separated string; `all` for every rewrite.
    /// Default none: the graph is planned as given. When a rewrite changed the graph, the plan
    /// carries the graph it refers to (`rewritten_graph`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Vec<RewriteName>>,
    /// With the `conv-algos` rewrite: how each conv's algorithm is chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conv_algos: Option<ConvAlgoName>,
    /// With the `tile` rewrite: `auto` or a strip count >= 2 (default `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(examples("auto", "4"))]
    pub tile: Option<String>,
    /// With the `tile` rewrite: the largest modelled run-time overhead tiling may add
    /// (percent of the untiled graph's modelled time; default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0.0)]
    pub tile_overhead_pct: Option<f64>,
    /// Which op orders are considered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<OrderName>,
    /// Which solvers run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<StrategyName>,
    /// Effort in deterministic work units (a multiplier of every solver's work caps: search
    /// nodes, iterations, HiGHS nodes; default 1, `0` for the heuristics' own caps only). The
    /// same graph and options give the same plan unless the time limit binds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1000)]
    pub effort: Option<u64>,
    /// Wall-clock cap of the whole planning in seconds, on top of `effort` (default: the
    /// pipeline's 60 s, as in the CLI, lowered to the service's cap; at most
    /// `sync_time_limit_cap` for `POST /v1/plan` and `POST /plan`, `max_time_limit` for jobs). When it binds, the plan's status says
    /// `time_limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0.0)]
    pub time_limit_s: Option<f64>,
    /// Honour the graph's in-place hints (plans then use the `inplace_of` alloc extension;
    /// default false). Not with a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inplace: Option<bool>,
    /// Arena budget the plan must fit by spilling and recomputing (bytes, or `"60%"` of the
    /// unconstrained peak). Not with tiers or in-place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetValue>,
    /// With a budget: how the plan is brought under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spill_strategy: Option<SpillStrategyName>,
    /// Memory tiers: activations and temporaries (workspaces) in regions of their own
    /// (default false). Not with a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiers: Option<bool>,
    /// With tiers: alignment floors in bytes, `persistent=256,activations=256,temporaries=512`
    /// or one number for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(examples("persistent=256,activations=256,temporaries=512", "512"))]
    pub tier_alignment: Option<String>,
    /// Device figures for the cost model (conv algorithm times, tiling overhead, spills);
    /// default the H200's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_profile: Option<DeviceProfileDoc>,
    /// Host link bandwidth per direction in GB/s (overrides the device profile's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0.0)]
    pub link_gbps: Option<f64>,
    /// Answer with the stored plan of an identical earlier request (same graph and options)
    /// without solving again (default true). `false` solves again and stores the new plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<bool>,
}

/// Query parameters of `POST /plan` and `POST /jobs`: the fields of [`PlanOptionsBody`], one
/// parameter each (documentation only; the service parses the query string into a JSON
/// object, then reads it as the body's options, so the rules and messages are the same).
/// Numbers and booleans (`true`/`false`, `1`/`0`, or the bare name for true) are read as
/// such; `rewrite` is a comma-separated list (or repeated); `device_profile` is a
/// JSON-encoded object (URL-encoded). Unknown parameters are refused (422).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PlanQuery {
    /// Graph rewrites: comma-separated names (`tile`, `fuse`, `conv-algos`), `all` or `none`
    /// (default none: the graph is planned as given).
    #[param(example = "fuse,conv-algos")]
    pub rewrite: Option<String>,
    /// With the `conv-algos` rewrite: `auto`, `fastest` or `min-memory` (default `auto`).
    #[param(value_type = Option<ConvAlgoName>)]
    pub conv_algos: Option<String>,
    /// With the `tile` rewrite: `auto` or a strip count >= 2 (default `auto`).
    #[param(example = "auto")]
    pub tile: Option<String>,
    /// With the `tile` rewrite: the largest modelled overhead tiling may add (percent).
    #[param(minimum = 0.0)]
    pub tile_overhead_pct: Option<f64>,
    /// Which op orders are considered (default `auto`).
    #[param(value_type = Option<OrderName>)]
    pub order: Option<String>,
    /// Which solvers run (default `auto`).
    #[param(value_type = Option<StrategyName>)]
    pub strategy: Option<String>,
    /// Effort in deterministic work units (default 1).
    #[param(minimum = 0, maximum = 1000)]
    pub effort: Option<u64>,
    /// Wall-clock cap in seconds (default the pipeline's 60 s, as in the CLI, lowered to the
    /// service's cap; at most `sync_time_limit_cap` for `POST /plan`, `max_time_limit` for
    /// `POST /jobs`).
    #[param(minimum = 0.0)]
    pub time_limit_s: Option<f64>,
    /// Honour the graph's in-place hints (default false).
    pub inplace: Option<bool>,
    /// Arena budget: bytes, or a percentage in (0, 100] of the unconstrained peak (`60%`,
    /// URL-encoded `60%25`).
    #[param(example = "60%")]
    pub budget: Option<String>,
    /// With a budget: the spill strategy (default `best`).
    #[param(value_type = Option<SpillStrategyName>)]
    pub spill_strategy: Option<String>,
    /// Memory tiers (default false).
    pub tiers: Option<bool>,
    /// With tiers: alignment floors, `persistent=256,activations=256,temporaries=512` or one
    /// number.
    pub tier_alignment: Option<String>,
    /// Device figures as a JSON-encoded object (the body's `device_profile`, URL-encoded),
    /// e.g. `{"h2d_bytes_per_s":25e9}`.
    #[param(example = r#"{"h2d_bytes_per_s":25e9,"d2h_bytes_per_s":25e9}"#)]
    pub device_profile: Option<String>,
    /// Host link bandwidth per direction in GB/s.
    pub link_gbps: Option<f64>,
    /// Answer from a stored plan of an identical request (default true).
    pub cache: Option<bool>,
}

/// Option fields that may be null once resolved (the others always have a value).
pub const NULLABLE_OPTIONS: [&str; 4] = ["budget", "tier_alignment", "device_profile", "link_gbps"];

/// The options a job or plan ran with, defaults filled in: the planning pipeline's options
/// (`memplan::PipelineOptions`, serialised with all its fields) and the service's `cache`.
///
/// Stored jobs of earlier versions (fields `order`, `strategy`, `time_limit_s`, `inplace`,
/// `cache`, `budget` in bytes) still read: missing fields take the pipeline's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedOptions {
    /// The pipeline options, normalised (`PipelineOptions::normalised`).
    #[serde(flatten)]
    pub pipeline: PipelineOptions,
    /// Stored plans reused.
    #[serde(default = "yes")]
    pub cache: bool,
}

fn yes() -> bool {
    true
}

impl PartialSchema for ResolvedOptions {
    fn schema() -> RefOr<Schema> {
        let mut s = PlanOptionsBody::schema();
        if let RefOr::T(Schema::Object(o)) = &mut s {
            o.required = o.properties.keys().cloned().collect();
            o.description = Some(
                "The options a plan or job ran with, defaults filled in (every field of \
                 `PlanOptionsBody`; `budget`, `tier_alignment`, `device_profile` and \
                 `link_gbps` are null when not set). `rewrite` is the list of rewrite names, \
                 `budget` bytes or a percentage string."
                    .to_string(),
            );
            o.examples = vec![example_resolved_options()];
        }
        s
    }
}

impl ToSchema for ResolvedOptions {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        <PlanOptionsBody as ToSchema>::schemas(schemas);
    }
}

/// The example resolved options of the OpenAPI document.
fn example_resolved_options() -> Value {
    let mut v = serde_json::to_value(ResolvedOptions {
        pipeline: PipelineOptions {
            time_limit_s: 60.0,
            ..PipelineOptions::default()
        },
        cache: true,
    })
    .unwrap_or(Value::Null);
    v["rewrite"] = json!(["fuse"]);
    v
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
    /// Extension: the memplan-graph/1 graph the plan refers to, when graph rewrites (option
    /// `rewrite`) changed the graph that was planned; absent when the plan refers to the
    /// graph as given. `POST /v1/check` with the original graph replays the plan against it
    /// after proving it was derived from the original (same inputs, weights and outputs).
    pub rewritten_graph: Option<GraphDoc>,
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
    /// The plan's status once the job has one (the plan's `stats.status`; `cancelled` for a
    /// cancelled job), null while it runs.
    #[serde(default)]
    #[schema(value_type = Option<PlanStatusName>)]
    pub status: Option<PlanStatus>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn properties(schema: RefOr<Schema>) -> BTreeSet<String> {
        match schema {
            RefOr::T(Schema::Object(o)) => o.properties.keys().cloned().collect(),
            _ => panic!("not an object schema"),
        }
    }

    fn keys(v: Value) -> BTreeSet<String> {
        v.as_object().expect("an object").keys().cloned().collect()
    }

    #[test]
    fn the_documented_options_name_every_pipeline_option_and_cache() {
        let mut expected = keys(serde_json::to_value(PipelineOptions::default()).unwrap());
        expected.insert("cache".into());
        assert_eq!(properties(PlanOptionsBody::schema()), expected);
        assert_eq!(properties(ResolvedOptions::schema()), expected);
        // What the service reports is what it documents.
        let resolved = ResolvedOptions {
            pipeline: PipelineOptions::default(),
            cache: true,
        };
        assert_eq!(keys(serde_json::to_value(&resolved).unwrap()), expected);
        let documented: BTreeSet<String> = PlanQuery::into_params(|| None)
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(documented, expected);
    }

    #[test]
    fn the_documented_device_profile_names_every_field() {
        let expected = keys(serde_json::to_value(memplan::cost::DeviceProfile::h200()).unwrap());
        assert_eq!(properties(DeviceProfileDoc::schema()), expected);
    }

    #[test]
    fn resolved_options_of_an_earlier_version_still_read() {
        let old: ResolvedOptions = serde_json::from_str(
            r#"{"order": "given", "strategy": "heuristic", "time_limit_s": 0.5,
                "inplace": true, "cache": false, "budget": 4096}"#,
        )
        .unwrap();
        assert_eq!(old.pipeline.order, OrderMode::Given);
        assert_eq!(old.pipeline.strategy, Strategy::Heuristic);
        assert_eq!(old.pipeline.time_limit_s, 0.5);
        assert!(old.pipeline.inplace && !old.cache);
        assert_eq!(
            old.pipeline.budget,
            Some(memplan::budget::BudgetSpec::Bytes(4096))
        );
        assert!(
            old.pipeline.rewrite.is_empty(),
            "old jobs planned the graph as given"
        );
        // And the current form survives a round trip.
        let now = ResolvedOptions {
            pipeline: PipelineOptions {
                rewrite: vec![Rewrite::Fuse],
                budget: Some(memplan::budget::BudgetSpec::Percent(60.0)),
                ..PipelineOptions::default()
            },
            cache: true,
        };
        let back: ResolvedOptions =
            serde_json::from_str(&serde_json::to_string(&now).unwrap()).unwrap();
        assert_eq!(back, now);
    }

    #[test]
    fn every_plan_status_is_documented_by_its_json_name() {
        let names: Vec<Value> = PlanStatus::ALL
            .iter()
            .map(|s| serde_json::to_value(s).unwrap())
            .collect();
        match PlanStatusName::schema() {
            RefOr::T(Schema::Object(o)) => assert_eq!(o.enum_values, Some(names)),
            _ => panic!("not an object schema"),
        }
    }
}
