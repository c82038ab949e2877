//! The plan stats written by the budget and tier phases (`stats.budget`, `stats.tiers`):
//! part of the memplan-plan/1 format, so they live with [`crate::plan`]; the phases that
//! fill them re-export them ([`crate::budget::BudgetStat`], [`crate::tiers::TierStat`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Budget figures in the plan stats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct BudgetStat {
    /// The budget (bytes).
    pub budget_bytes: u64,
    /// Peak of the plan without a budget, when known (bytes).
    #[serde(default)]
    pub unconstrained_peak_bytes: u64,
    /// Strategy that produced the plan.
    pub strategy: String,
    /// Live-bytes target of the attempt that fitted (bytes).
    pub target_bytes: u64,
    /// Attempts (targets tried) of that strategy.
    pub attempts: usize,
    /// Device profile name.
    pub device: String,
    /// Bytes copied device→host.
    pub spilled_out_bytes: u64,
    /// Bytes copied host→device.
    pub spilled_in_bytes: u64,
    /// Number of spill_out instructions.
    pub spills: usize,
    /// Number of re-executed ops.
    pub recomputed_ops: usize,
    /// Flops of the re-executed ops.
    #[serde(serialize_with = "crate::plan::finite")]
    pub recompute_flops: f64,
    /// Modelled time of the re-executed ops (µs).
    #[serde(serialize_with = "crate::plan::finite")]
    pub recompute_us: f64,
    /// Modelled step time without any spill or recompute: the ops' times summed, convs at
    /// their starting algorithm (µs; conv downgrades count as overhead).
    #[serde(serialize_with = "crate::plan::finite")]
    pub base_step_us: f64,
    /// Modelled step time of this plan (µs).
    #[serde(serialize_with = "crate::plan::finite")]
    pub step_us: f64,
    /// `step_us - base_step_us` (µs).
    #[serde(serialize_with = "crate::plan::finite")]
    pub overhead_us: f64,
    /// Overhead as a percentage of `base_step_us`.
    #[serde(serialize_with = "crate::plan::finite")]
    pub overhead_pct: f64,
    /// A lower bound on any plan's peak ([`crate::budget::min_bytes`]): no plan fits a smaller budget.
    pub min_bytes: u64,
    /// Convs per algorithm in the plan's graph (`attrs.algo`; `given`: a graph-given
    /// workspace; `none`: outside the model), [`crate::conv_algo::algo_mix`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub algo_mix: BTreeMap<String, usize>,
    /// Convs downgraded to an algorithm with less workspace to fit the budget.
    #[serde(default)]
    pub algo_downgrades: usize,
    /// Modelled time those downgrades add (µs; part of `overhead_us`).
    #[serde(default)]
    #[serde(serialize_with = "crate::plan::finite")]
    pub algo_downgrade_us: f64,
    /// The chosen strategy's solver report (the integer program: status, bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solver: Option<String>,
    /// Every strategy tried (`best`): name, peak reached, overhead %, fitted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tried: Vec<TriedStat>,
}

/// One strategy's outcome under `best`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriedStat {
    /// Strategy name.
    pub name: String,
    /// Lowest peak it reached (bytes).
    pub peak_bytes: u64,
    /// Its modelled overhead (% of the base step time).
    #[serde(serialize_with = "crate::plan::finite")]
    pub overhead_pct: f64,
    /// Whether it fitted the budget.
    pub fits: bool,
    /// Its solver's report (the integer program: status and bound), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solver: Option<String>,
}

/// One tier's region in a plan's stats (`stats.tiers`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierStat {
    /// `persistent`, `activations` or `temporaries`.
    pub tier: String,
    /// `weights` (the weights region) or `arena`.
    pub region: String,
    /// Start of the tier's range in its region (bytes).
    pub offset: u64,
    /// Size of the tier's range (bytes).
    pub bytes: u64,
    /// The tier's configured alignment (bytes; a floor under each tensor's own).
    pub alignment: u64,
    /// Most bytes reserved inside the range at one step.
    pub peak_bytes: u64,
    /// Free bytes of the range at its peak step (alignment padding included): the scale
    /// of [`TierStat::fragmentation_at_peak`], which is a ratio.
    pub free_bytes_at_peak: u64,
    /// Seed 001 §4.1's fragmentation `1 − largest free block / total free` of the range at
    /// its peak step (0 when nothing is free).
    pub fragmentation_at_peak: f64,
}

/// A parallel plan's figures (plan stats `streams`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamStat {
    /// Streams used.
    pub streams: u32,
    /// Modelled makespan of the parallel plan (µs, one queue per stream).
    #[serde(serialize_with = "super::finite")]
    pub makespan_us: f64,
    /// Modelled makespan of the single-stream plan (µs: the sum of op times).
    #[serde(serialize_with = "super::finite")]
    pub serial_makespan_us: f64,
    /// Peak of the single-stream plan (bytes).
    pub serial_peak_bytes: u64,
    /// The arena cap the parallel plan had to meet (bytes).
    pub peak_cap_bytes: u64,
    /// Events recorded.
    pub events: usize,
    /// Which candidate won: `serial-placement` (reuse events) or `conflict-placement`.
    pub candidate: String,
    /// Every candidate weighed.
    pub candidates: Vec<StreamCandidate>,
}

/// One candidate a parallel plan was chosen from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamCandidate {
    /// Its name (`serial-placement`, `repaired-by-time`, `conflict-placement`, ...).
    pub name: String,
    /// Its peak (bytes).
    pub peak_bytes: u64,
    /// Its modelled makespan (µs).
    #[serde(serialize_with = "crate::plan::finite")]
    pub makespan_us: f64,
}
