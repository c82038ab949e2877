//! The plan (memplan-plan/1, docs/FORMATS.md §2) and its emission from an order and a placement.
//!
//! Emission per step `s` (op `k = order[s]`): alloc each output of `k` (in-place outputs name
//! the donor they take bytes from), exec `k` with its workspace offset, then free every tensor
//! whose last use was step `s` — so each free follows its tensor's last use immediately.
//! Graph inputs are allocated before the first exec. `mem_id` is the buffer index of the
//! placement problem: tensors sharing bytes in place share a `mem_id`.

mod stats;

pub use stats::{BudgetStat, StreamCandidate, StreamStat, TierStat, TriedStat};

use crate::graph::{Graph, OrderMapping, TensorKind};
use memplan_solver::order::{BufferOwner, OrderLifetimes};
use memplan_solver::Placement;
use serde::{Deserialize, Serialize};

/// The format string of a plan file.
pub const PLAN_FORMAT: &str = crate::json_path::PLAN;

/// `x` as a finite number: infinities saturate to the largest finite value of their sign and
/// NaN becomes 0. Every figure a plan writes goes through it, so a written plan always reads
/// back (JSON has no infinity; serde_json would write `null`).
pub fn finite_f64(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(f64::MIN, f64::MAX)
    }
}

/// Serialises an `f64` figure as [`finite_f64`] (for `#[serde(serialize_with)]`).
pub fn finite<S: serde::Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(finite_f64(*x))
}

/// Serialises an optional `f64` figure as [`finite_f64`] (for `#[serde(serialize_with)]`).
pub fn finite_opt<S: serde::Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match x {
        Some(x) => s.serialize_some(&finite_f64(*x)),
        None => s.serialize_none(),
    }
}

/// A weight's place in the weights region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightSlot {
    /// Weight tensor name.
    pub tensor: String,
    /// Offset in the weights region (bytes).
    pub offset: u64,
}

/// One instruction of the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Instruction {
    /// Reserve `[offset, offset + size)` for a tensor.
    Alloc {
        /// Tensor name.
        tensor: String,
        /// Arena offset (bytes).
        offset: u64,
        /// Virtual memory id (buffer identity; in-place partners share one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mem_id: Option<u64>,
        /// Extension: the tensor takes these bytes from a dying input of its producer, named
        /// here (an `inplace` hint of the graph). Absent in plans without in-place sharing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        inplace_of: Option<String>,
    },
    /// Run an op.
    Exec {
        /// Op name.
        node: String,
        /// Arena offset of the op's workspace (required iff the op has one).
        workspace_offset: Option<u64>,
        /// Extension: the conv algorithm the op runs (its `attrs.algo`,
        /// [`crate::conv_algo`]). Absent for other ops and in older plans.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        algo: Option<String>,
        /// Extension (parallel plans): the stream the op runs on; absent means stream 0.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u32>,
    },
    /// Release a tensor's range.
    Free {
        /// Tensor name.
        tensor: String,
        /// Extension (parallel plans): the stream the release is ordered on (as
        /// `cudaFreeAsync`); absent means stream 0.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u32>,
    },
    /// Copy a tensor to the host pool and release its arena range.
    SpillOut {
        /// Tensor name.
        tensor: String,
        /// Offset in the host pool (bytes).
        host_offset: u64,
        /// Extension (parallel plans): the (copy) stream the copy runs on; absent means 0.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u32>,
    },
    /// Reserve a range and copy the tensor back from the host pool.
    SpillIn {
        /// Tensor name.
        tensor: String,
        /// Arena offset (bytes).
        offset: u64,
        /// Virtual memory id, when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mem_id: Option<u64>,
        /// Extension (parallel plans): the (copy) stream the copy runs on; absent means 0.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u32>,
    },
    /// Extension (parallel plans): event `event` completes when everything issued on
    /// `stream` so far has completed. Each event is recorded once per plan.
    RecordEvent {
        /// Event id (unique in the plan).
        event: u64,
        /// The stream whose work the event marks.
        stream: u32,
    },
    /// Extension (parallel plans): work issued on `stream` after this instruction starts only
    /// once event `event` (recorded earlier in the stream of instructions) has completed.
    WaitEvent {
        /// Event id.
        event: u64,
        /// The stream that waits.
        stream: u32,
    },
}

pub use crate::graph::MAX_STREAMS;

impl Instruction {
    /// The stream the instruction is ordered on: its `stream` field, 0 when absent, and 0 for
    /// `alloc` (a host-side reservation; its bytes are written by the tensor's writer).
    pub fn stream(&self) -> u32 {
        match self {
            Instruction::Exec { stream, .. }
            | Instruction::Free { stream, .. }
            | Instruction::SpillOut { stream, .. }
            | Instruction::SpillIn { stream, .. } => stream.unwrap_or(0),
            Instruction::RecordEvent { stream, .. } | Instruction::WaitEvent { stream, .. } => {
                *stream
            }
            Instruction::Alloc { .. } => 0,
        }
    }
}

impl Plan {
    /// Whether the plan uses more than one stream or any event (a parallel plan); a plan that
    /// does not is an ordinary single-stream memplan-plan/1 plan.
    pub fn is_parallel(&self) -> bool {
        self.instructions.iter().any(|i| {
            i.stream() != 0
                || matches!(
                    i,
                    Instruction::RecordEvent { .. } | Instruction::WaitEvent { .. }
                )
        })
    }

    /// Number of streams the plan uses (1 + the largest stream id).
    pub fn stream_count(&self) -> u32 {
        self.instructions
            .iter()
            .map(|i| i.stream().saturating_add(1))
            .max()
            .unwrap_or(1)
    }
}

/// A portfolio member's figure in the plan stats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberStat {
    /// Algorithm name.
    pub name: String,
    /// Bytes it reached (peak for placers, LOAD for orderers).
    pub bytes: u64,
    /// Milliseconds it took.
    #[serde(serialize_with = "finite")]
    pub ms: f64,
}

impl MemberStat {
    /// A member's figure from its name, bytes and run time.
    pub fn new(name: &str, bytes: u64, elapsed: std::time::Duration) -> Self {
        MemberStat {
            name: name.to_string(),
            bytes,
            ms: elapsed.as_secs_f64() * 1e3,
        }
    }
}

/// The exact placement search's figures in the plan stats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExactStat {
    /// optimal / feasible / infeasible / timeout.
    pub status: String,
    /// Search nodes entered.
    pub nodes: u64,
    /// Milliseconds it took.
    #[serde(serialize_with = "finite")]
    pub ms: f64,
}

/// The HiGHS placement model's figures in the plan stats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IlpStat {
    /// optimal / heuristic / time_limit.
    pub status: String,
    /// Models solved (one per window).
    pub models: usize,
    /// Models that lowered the peak.
    pub improved: usize,
    /// Milliseconds it took.
    #[serde(serialize_with = "finite")]
    pub ms: f64,
}

/// The order integer program's figures in the plan stats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderIlpStat {
    /// optimal, time_limit, node_limit (a node, work or model-count cap stopped it with
    /// windows still to try) or heuristic (every window was tried, nothing proven).
    pub status: String,
    /// Whether the whole graph was modelled (else windows around the peak).
    pub whole: bool,
    /// Models solved.
    pub models: usize,
    /// Models whose order was kept.
    pub improved: usize,
    /// LOAD of its order (bytes, without in-place merging).
    pub load_bytes: u64,
    /// Its proven bound for every order (bytes; the order-independent bound unless the whole
    /// graph was modelled).
    pub lower_bound_bytes: u64,
    /// Milliseconds it took.
    #[serde(serialize_with = "finite")]
    pub ms: f64,
}

/// Plan statistics. Only `peak_bytes` is checked by the replay; the rest is informative.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PlanStats {
    /// Largest `offset + size` ever reserved (bytes).
    pub peak_bytes: u64,
    /// A proven lower bound on the peak (bytes): LOAD of the order tightened by alignment (or
    /// better) for `--order given`, the order-independent bound tightened by alignment for
    /// `--order auto`.
    #[serde(default, deserialize_with = "informative")]
    pub lower_bound_bytes: u64,
    /// Algorithm that produced the placement.
    #[serde(default, deserialize_with = "informative")]
    pub method: String,
    /// How good the plan is and why planning stopped ([`PlanStatus`]).
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Option::is_none"
    )]
    pub status: Option<PlanStatus>,
    /// Relative gap `(peak - lower bound) / peak`.
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Option::is_none"
    )]
    #[serde(serialize_with = "finite_opt")]
    pub gap: Option<f64>,
    /// LOAD of the chosen order (bytes).
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Option::is_none"
    )]
    pub load_bytes: Option<u64>,
    /// Order-independent lower bound (bytes): the larger of the per-node bound and the min-cut
    /// bound (`memplan_solver::order::bound::order_lower_bound_hinted`).
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Option::is_none"
    )]
    pub order_lower_bound_bytes: Option<u64>,
    /// Order heuristic that produced the order (`listed`, or `listed-topological` when the
    /// graph lists ops before their inputs' producers; `… + joint` when, under a budget, the
    /// joint program then moved ops).
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Option::is_none"
    )]
    pub order_method: Option<String>,
    /// Each order heuristic's LOAD.
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub order_members: Vec<MemberStat>,
    /// Each placement heuristic's peak on the chosen order.
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub members: Vec<MemberStat>,
    /// Status of the placement step for the chosen order: `optimal` (the peak is proven
    /// minimal for this order), `node_limit` / `time_limit` (the exact search or the placement
    /// model stopped at its node cap / the time limit with a gap left), `heuristic` (no search
    /// ran, e.g. strategy `heuristic`, or a negligible gap's one question went unanswered),
    /// `infeasible` (a capacity no placement meets).
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Option::is_none"
    )]
    pub placement_status: Option<String>,
    /// What the exact placement search did, when it ran.
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Option::is_none"
    )]
    pub exact: Option<ExactStat>,
    /// What the HiGHS placement model did, when it ran.
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Option::is_none"
    )]
    pub ilp: Option<IlpStat>,
    /// What the order integer program did, when it ran.
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Option::is_none"
    )]
    pub order_ilp: Option<OrderIlpStat>,
    /// Whether in-place hints were honoured.
    #[serde(default, deserialize_with = "informative")]
    pub inplace: bool,
    /// Budget figures, for plans made under a memory budget.
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Option::is_none"
    )]
    pub budget: Option<BudgetStat>,
    /// Planning time in milliseconds.
    #[serde(default, deserialize_with = "informative")]
    #[serde(serialize_with = "finite")]
    pub elapsed_ms: f64,
    /// Seed 001 §4.1's fragmentation `1 − largest free block / total free` of the arena
    /// `[0, peak)` at the step with the most bytes reserved (see [`crate::tiers`]).
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Option::is_none"
    )]
    #[serde(serialize_with = "finite_opt")]
    pub fragmentation_at_peak: Option<f64>,
    /// Parallel plans: streams, modelled makespans and the candidates weighed
    /// (`crate::streams`).
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Option::is_none"
    )]
    pub streams: Option<Box<StreamStat>>,
    /// The tier regions of a tiered plan (`memplan plan --tiers`); empty otherwise.
    #[serde(
        default,
        deserialize_with = "informative",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tiers: Vec<TierStat>,
}

/// Reads an informative stats field as its type, or as absent (the type's default) where the
/// value has another shape: docs/FORMATS.md fixes only `stats.peak_bytes`, which the replay
/// checks, so a plan from another planner whose `status` says `heuristic`, or whose
/// `lower_bound_bytes` is null, is still read and checked.
fn informative<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    let value = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(value).unwrap_or_default())
}

impl PlanStats {
    /// The relative gap `(peak - lower bound) / peak` of [`PlanStats::gap`] (0 for a zero
    /// peak; a bound above the peak counts as the peak).
    pub fn gap_of(peak: u64, lower_bound: u64) -> f64 {
        if peak == 0 {
            0.0
        } else {
            peak.saturating_sub(lower_bound) as f64 / peak as f64
        }
    }
}

/// The one status of a plan, the same in plan stats, the CLI summary, the HTTP service, job
/// progress and the zoo report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    /// The peak meets a proven lower bound.
    Optimal,
    /// The solvers used their whole work budget; the gap to the proven bound is in `gap`.
    Feasible,
    /// The wall-clock cap stopped a stage before its work budget was spent (the plan may
    /// differ between runs).
    TimeLimit,
    /// The run was cancelled; the best plan found so far.
    Cancelled,
    /// Only the heuristics ran (strategy `heuristic`) and the gap is not closed.
    HeuristicOnly,
}

impl PlanStatus {
    /// Every status.
    pub const ALL: [PlanStatus; 5] = [
        PlanStatus::Optimal,
        PlanStatus::Feasible,
        PlanStatus::TimeLimit,
        PlanStatus::Cancelled,
        PlanStatus::HeuristicOnly,
    ];

    /// Stable snake_case name (JSON, CLI, reports).
    pub fn as_str(self) -> &'static str {
        match self {
            PlanStatus::Optimal => "optimal",
            PlanStatus::Feasible => "feasible",
            PlanStatus::TimeLimit => "time_limit",
            PlanStatus::Cancelled => "cancelled",
            PlanStatus::HeuristicOnly => "heuristic_only",
        }
    }
}

impl std::fmt::Display for PlanStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A memplan-plan/1 document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Must be [`PLAN_FORMAT`].
    pub format: String,
    /// Name of the graph planned.
    pub graph: String,
    /// Arena size (bytes).
    pub arena_bytes: u64,
    /// Weights region size (bytes).
    #[serde(default)]
    pub weights_bytes: u64,
    /// Host pool size for spills (bytes).
    #[serde(default)]
    pub host_bytes: u64,
    /// Weight offsets in the weights region.
    #[serde(default)]
    pub weights: Vec<WeightSlot>,
    /// The instruction stream.
    pub instructions: Vec<Instruction>,
    /// Statistics (`stats.peak_bytes` is required).
    pub stats: PlanStats,
    /// Extension: the memplan-graph/1 document the plan refers to, when graph rewrites
    /// (fusion, tiling, conv algorithms) changed the graph that was planned. Absent when the
    /// plan refers to the input graph as given. `memplan check ORIGINAL PLAN` replays the plan
    /// against it after proving it was derived from ORIGINAL (`rewrites`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewritten_graph: Option<serde_json::Value>,
    /// Extension: how `rewritten_graph` was derived from the graph the user gave, the passes
    /// in the order they ran, each with the decisions it took (empty when nothing was
    /// rewritten; the conv algorithms are the execs' `algo` fields). `memplan check ORIGINAL
    /// PLAN` applies them to ORIGINAL again and accepts the carried graph only when it is
    /// the graph they give.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewrites: Vec<RewriteStep>,
}

/// One graph rewrite a plan records (the `rewrites` extension): a pass and what it decided,
/// enough to apply it again to the original graph without searching.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "pass", rename_all = "snake_case")]
pub enum RewriteStep {
    /// Spatial tiling (`crate::passes::tile`): the regions cut into strips, in graph order.
    Tile {
        /// The tiled regions.
        regions: Vec<TileRegionStep>,
    },
    /// Operator fusion (`crate::passes::fuse`) with its two rule switches; it decides
    /// nothing else, so applying it again gives the same graph.
    Fuse {
        /// Constant-zero pads folded into the following conv.
        fold_pad: bool,
        /// `[conv] [batch_norm] elementwise*` chains fused.
        chains: bool,
    },
}

/// One tiled region of a [`RewriteStep::Tile`]: the ops from `first_op` to `last_op` (names
/// in the graph the pass read, listed order) cut into `strips` horizontal strips.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileRegionStep {
    /// The region's first op.
    pub first_op: String,
    /// The region's last op.
    pub last_op: String,
    /// Strips cut (≥ 2).
    pub strips: usize,
}

/// An error reading a plan file.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("plan JSON error at line {line}, column {column}: {message}")]
pub struct PlanParseError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What the parser expected.
    pub message: String,
}

impl Plan {
    /// A memplan-plan/1 plan of `graph` with `instructions`: the weights region laid out by
    /// [`Graph::weight_layout`], `arena_bytes` (also the stats' peak) and `host_bytes` as
    /// given, other stats empty.
    pub fn new(
        graph: &crate::graph::Graph,
        instructions: Vec<Instruction>,
        arena_bytes: u64,
        host_bytes: u64,
    ) -> Plan {
        let (weights, weights_bytes) = graph.weight_layout();
        Plan {
            format: PLAN_FORMAT.to_string(),
            graph: graph.name.clone(),
            arena_bytes,
            weights_bytes,
            host_bytes,
            weights: weights
                .into_iter()
                .map(|(t, offset)| WeightSlot {
                    tensor: graph.tensor(t).name.clone(),
                    offset,
                })
                .collect(),
            instructions,
            stats: PlanStats {
                peak_bytes: arena_bytes,
                ..PlanStats::default()
            },
            rewritten_graph: None,
            rewrites: Vec::new(),
        }
    }

    /// Parses a plan document (syntax and structure only; [`crate::validate`](fn@crate::validate) checks meaning).
    pub fn parse(text: &str) -> Result<Plan, PlanParseError> {
        crate::json_path::from_str(text).map_err(|e| {
            // A document of another kind is named as such, not by its first missing field.
            match crate::json_path::declared_format(text).filter(|f| f != PLAN_FORMAT) {
                Some(found) => PlanParseError {
                    line: 1,
                    column: 1,
                    message: format!(
                        "format is {found:?}, expected \"{PLAN_FORMAT}\"{}",
                        crate::json_path::kind_hint(&found)
                    ),
                },
                None => PlanParseError {
                    line: e.line,
                    column: e.column,
                    message: e.message,
                },
            }
        })
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        // Serialising these plain types cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// The conv algorithm an op's `attrs.algo` names, for the exec's `algo` field.
pub fn algo_attr(op: &crate::graph::Op) -> Option<String> {
    crate::ops::algo_attr(op)
}

/// Emits the instruction stream for `order` (op indices) with buffers `lt` placed at
/// `placement`; `mapping` relates order-problem values to tensors.
pub fn emit(
    graph: &Graph,
    order: &[usize],
    lt: &OrderLifetimes,
    placement: &Placement,
    mapping: &OrderMapping,
) -> Plan {
    let value_tensor = &mapping.value_tensor;
    let name = |v: usize| graph.tensor(value_tensor[v]).name.clone();
    let buffer_of = |v: usize| lt.value_buffer[v];
    let mut ins = Vec::new();
    // Who donates bytes to whom: each member of a shared buffer takes them from the previous.
    let mut donor = vec![None; value_tensor.len()];
    for owner in &lt.owners {
        if let BufferOwner::Values(vals) = owner {
            for w in vals.windows(2) {
                donor[w[1]] = Some(w[0]);
            }
        }
    }
    let alloc = |v: usize, ins: &mut Vec<Instruction>| {
        if let Some(b) = buffer_of(v) {
            ins.push(Instruction::Alloc {
                tensor: name(v),
                offset: placement.offsets[b],
                mem_id: Some(b as u64),
                inplace_of: donor[v].map(name),
            });
        }
    };
    // Graph inputs that are read are reserved from step 0.
    for (v, &t) in value_tensor.iter().enumerate() {
        if graph.tensor(t).kind == TensorKind::Input {
            alloc(v, &mut ins);
        }
    }
    // The step after which each value is freed: its last read, or its birth when unread.
    let mut last_use: Vec<Option<usize>> = vec![None; value_tensor.len()];
    for (k, op) in graph.ops.iter().enumerate() {
        let s = lt.step_of[k];
        for t in op.inputs.iter().chain(&op.outputs) {
            if let Some(v) = mapping.tensor_value[t.index()] {
                last_use[v] = Some(last_use[v].map_or(s, |x: usize| x.max(s)));
            }
        }
    }
    let n = order.len();
    let mut dies_at: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (v, &t) in value_tensor.iter().enumerate() {
        if graph.tensor(t).kind == TensorKind::Output || buffer_of(v).is_none() {
            continue;
        }
        if let Some(s) = last_use[v] {
            dies_at[s].push(v);
        }
    }
    for (s, &k) in order.iter().enumerate() {
        let op = &graph.ops[k];
        for &t in &op.outputs {
            if let Some(v) = mapping.tensor_value[t.index()] {
                alloc(v, &mut ins);
            }
        }
        ins.push(Instruction::Exec {
            stream: None,
            node: op.name.clone(),
            workspace_offset: lt.workspace_buffer[k].map(|b| placement.offsets[b]),
            algo: algo_attr(op),
        });
        dies_at[s].sort_unstable();
        for &v in &dies_at[s] {
            ins.push(Instruction::Free {
                stream: None,
                tensor: name(v),
            });
        }
    }
    let peak = lt
        .problem
        .buffers
        .iter()
        .zip(&placement.offsets)
        .map(|(b, &o)| o.saturating_add(b.size))
        .max()
        .unwrap_or(0);
    Plan::new(graph, ins, peak, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Graph;
    use memplan_solver::order::{lifetimes, LifetimeOptions};
    use memplan_solver::placement;
    use memplan_solver::Limits;

    fn graph() -> Graph {
        Graph::parse(
            r#"{"format": "memplan-graph/1", "name": "g", "alignment": 64,
                "tensors": [
                  {"name": "x", "size": 100, "kind": "input"},
                  {"name": "unused", "size": 100, "kind": "input"},
                  {"name": "w", "size": 10, "kind": "weight"},
                  {"name": "w2", "size": 10, "kind": "weight"},
                  {"name": "a", "size": 100, "kind": "activation"},
                  {"name": "dead", "size": 50, "kind": "activation"},
                  {"name": "y", "size": 10, "kind": "output"}],
                "ops": [
                  {"name": "p", "inputs": ["x", "w"], "outputs": ["a", "dead"], "workspace": 30},
                  {"name": "q", "inputs": ["a", "x", "w2"], "outputs": ["y"]}]}"#,
        )
        .unwrap()
    }

    fn stream(g: &Graph) -> Vec<String> {
        let (problem, mapping) = g.order_problem_with_mapping();
        let order = vec![0, 1];
        let lt = lifetimes(&problem, &order, &LifetimeOptions::default());
        let pl = placement::portfolio(&lt.problem, &Limits::UNLIMITED)
            .unwrap()
            .placement;
        emit(g, &order, &lt, &pl, &mapping)
            .instructions
            .iter()
            .map(|i| match i {
                Instruction::Alloc { tensor, .. } => format!("alloc {tensor}"),
                Instruction::Exec {
                    node,
                    workspace_offset,
                    ..
                } => {
                    format!(
                        "exec {node}{}",
                        if workspace_offset.is_some() {
                            " +ws"
                        } else {
                            ""
                        }
                    )
                }
                Instruction::Free { tensor, .. } => format!("free {tensor}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn each_free_follows_the_last_use_and_outputs_stay_to_the_end() {
        assert_eq!(
            stream(&graph()),
            vec![
                "alloc x",
                "alloc a",
                "alloc dead",
                "exec p +ws",
                "free dead",
                "alloc y",
                "exec q",
                "free x",
                "free a"
            ]
        );
    }

    /// The test graph planned in its listed order by the placement portfolio.
    fn planned() -> Plan {
        let g = graph();
        let (problem, mapping) = g.order_problem_with_mapping();
        let lt = lifetimes(&problem, &[0, 1], &LifetimeOptions::default());
        let pl = placement::portfolio(&lt.problem, &Limits::UNLIMITED)
            .unwrap()
            .placement;
        emit(&g, &[0, 1], &lt, &pl, &mapping)
    }

    #[test]
    fn weights_are_packed_aligned_in_their_own_region() {
        let p = planned();
        assert_eq!(p.weights_bytes, 74);
        assert_eq!(
            p.weights,
            vec![
                WeightSlot {
                    tensor: "w".into(),
                    offset: 0
                },
                WeightSlot {
                    tensor: "w2".into(),
                    offset: 64
                }
            ]
        );
        assert_eq!(p.arena_bytes, p.stats.peak_bytes);
    }

    #[test]
    fn plans_round_trip_through_json() {
        let p = planned();
        let back = Plan::parse(&p.to_json()).unwrap();
        assert_eq!(back, p);
        assert!(p.to_json().contains("\"workspace_offset\": null"));
    }

    #[test]
    fn stats_other_planners_write_differently_are_read_as_absent_but_the_peak_must_be_an_integer() {
        let mut doc: serde_json::Value = serde_json::from_str(&planned().to_json()).unwrap();
        let peak = doc["stats"]["peak_bytes"].clone();
        doc["stats"] = serde_json::json!({
            "peak_bytes": peak,
            "status": "heuristic",
            "method": null,
            "lower_bound_bytes": null,
            "gap": "0.3%",
            "budget": 1000,
            "streams": "2",
            "inplace": "yes"
        });
        let p = Plan::parse(&doc.to_string()).unwrap();
        assert_eq!(p.stats.status, None);
        assert_eq!(p.stats.method, "");
        assert_eq!((p.stats.lower_bound_bytes, p.stats.gap), (0, None));
        assert!(p.stats.budget.is_none() && p.stats.streams.is_none() && !p.stats.inplace);
        assert!(crate::validate::validate(&graph(), &p, None).is_ok());
        // `stats.peak_bytes` is what the replay checks: an integer, required.
        doc["stats"]["peak_bytes"] = serde_json::json!(peak.as_f64().unwrap());
        let e = Plan::parse(&doc.to_string()).unwrap_err();
        assert!(e.message.contains("stats.peak_bytes"), "{e}");
    }

    #[test]
    fn a_wrong_instruction_is_named_by_its_index_op_and_tensor_on_a_plan_of_one_line() {
        let mut doc: serde_json::Value = serde_json::from_str(&planned().to_json()).unwrap();
        let (i, tensor) = doc["instructions"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .find_map(|(i, ins)| {
                (ins["op"] == "alloc").then(|| (i, ins["tensor"].as_str().unwrap().to_string()))
            })
            .unwrap();
        doc["instructions"][i]["offset"] = serde_json::json!(-64);
        let e = Plan::parse(&doc.to_string()).unwrap_err();
        assert_eq!(e.line, 1);
        // An instruction is read by its `op` first (an internally tagged enum), so serde's
        // path stops at the instruction; the field is the one holding the value refused.
        assert!(
            e.message.starts_with(&format!(
                "instructions[{i}] (alloc {tensor:?}).offset: invalid value: integer `-64`"
            )),
            "{e}"
        );
        // The position is given once.
        assert_eq!(e.to_string().matches("column").count(), 1, "{e}");
    }

    #[test]
    fn the_gap_is_relative_to_the_peak_and_zero_without_one() {
        assert_eq!(PlanStats::gap_of(200, 150), 0.25);
        assert_eq!(PlanStats::gap_of(200, 200), 0.0);
        assert_eq!(PlanStats::gap_of(200, 300), 0.0);
        assert_eq!(PlanStats::gap_of(0, 0), 0.0);
    }

    #[test]
    fn floats_in_plans_survive_write_parse_write_exactly() {
        let mut p = planned();
        // Values whose shortest decimal form a non-exact parser reads back one ulp off.
        let mut x = 0.03713f64;
        for i in 0..2000 {
            p.stats.gap = Some(x);
            p.stats.elapsed_ms = x * 1e3 + i as f64;
            p.stats.fragmentation_at_peak = Some(1.0 / (i as f64 + 3.0));
            let text = p.to_json();
            let back = Plan::parse(&text).unwrap();
            assert_eq!(back, p, "{x}");
            assert_eq!(back.to_json(), text);
            x = (x * 1.618_033_988_75 + 1e-7).fract();
        }
    }
}
