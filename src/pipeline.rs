//! The one planning pipeline behind every front end (CLI, HTTP service, zoo batch,
//! benchmarks): one options type, [`PipelineOptions`], with one [`Default`], and one entry
//! point, [`run`].
//!
//! Stages, in this order, each under the same limits and cancel token:
//! 1. **graph rewrites**, opt-in ([`PipelineOptions::rewrite`]): spatial tiling, operator
//!    fusion, conv algorithm choice. By default the graph is planned **as given**;
//! 2. **planning**: order, placement ([`crate::planner`]), or a tiered plan
//!    ([`crate::tiers`]), or a plan under a memory budget with spills and recomputes
//!    ([`crate::budget`]);
//! 3. **status**: one typed [`PlanStatus`] for the whole run.
//!
//! When a rewrite changed the graph, the plan carries the graph it refers to
//! ([`Plan::rewritten_graph`]), so a plan can always be checked and run against the graph the
//! user gave: [`graph_for_plan`] takes the original graph and the plan and returns the graph to
//! replay, after proving that the carried graph was derived from the original: the same
//! inputs, weights and outputs, and exactly the graph that the plan's recorded rewrites
//! ([`Plan::rewrites`]: each pass's decisions, such as the tiled regions and their strip
//! counts) and the conv algorithms its execs name give when applied to the original again
//! ([`passes::replay`], no search), so an edited carried graph is refused.
//!
//! **Determinism.** Effort is counted in work units ([`PipelineOptions::effort`]: search
//! nodes, iterations, HiGHS branch-and-bound nodes); the wall-clock limit
//! ([`PipelineOptions::time_limit_s`]) is only a cap on top. The same graph and options give
//! the same plan (timing fields aside) unless the cap binds, and then the plan's status says
//! [`PlanStatus::TimeLimit`].

use crate::budget::{self, BudgetError, BudgetOptions, BudgetSpec};
use crate::conv_algo::{self as ca, ConvAlgoError, ConvAlgoMode};
use crate::cost::{CostError, DeviceProfile};
use crate::graph::{Graph, GraphError, TensorKind};
use crate::passes::{self, Pass, PassError, PassReport};
use crate::plan::{Plan, PlanStatus};
use crate::planner::{OrderMode, PlanError, PlanOptions, ProgressSink, Strategy};
use crate::tiers::{TierAlignment, TierError};
use memplan_solver::{CancelToken, Deadline};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use thiserror::Error;

/// A graph rewrite that the pipeline can run before planning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rewrite {
    /// Spatial tiling into H-strips ([`crate::passes::tile`]); strips per
    /// [`PipelineOptions::tile`].
    Tile,
    /// Operator fusion ([`crate::passes::fuse`]).
    Fuse,
    /// Conv algorithm choice ([`crate::conv_algo`]), per [`PipelineOptions::conv_algos`].
    ConvAlgos,
}

/// The names a rewrite list takes, for messages: every rewrite, `all` and `none`.
fn known_rewrites() -> String {
    format!("{}, all, none", Rewrite::ALL.map(Rewrite::name).join(", "))
}

impl Rewrite {
    /// Every rewrite, in the order the pipeline runs them.
    pub const ALL: [Rewrite; 3] = [Rewrite::Tile, Rewrite::Fuse, Rewrite::ConvAlgos];

    /// Stable name (CLI `--rewrite`, HTTP `rewrite`).
    pub fn name(self) -> &'static str {
        match self {
            Rewrite::Tile => "tile",
            Rewrite::Fuse => "fuse",
            Rewrite::ConvAlgos => "conv-algos",
        }
    }

    /// The rewrite called `name`, if any.
    pub fn from_name(name: &str) -> Option<Rewrite> {
        Rewrite::ALL.into_iter().find(|r| r.name() == name)
    }

    /// Parses a comma-separated list: rewrite names, `all` or `none`, spaces allowed around
    /// each (the empty text: none); an empty item (`fuse,,tile`) is refused.
    pub fn parse_list(text: &str) -> Result<Vec<Rewrite>, PipelineError> {
        let mut out = Vec::new();
        if text.is_empty() {
            return Ok(out);
        }
        for item in text.split(',').map(|s| s.trim_matches(' ')) {
            match item {
                "all" => out.extend(Rewrite::ALL),
                "none" => {}
                "" => {
                    return Err(PipelineError::Options(format!(
                        "rewrite: {text:?} has an empty item; list names separated by single \
                         commas (known: {})",
                        known_rewrites()
                    )))
                }
                name => out.push(Rewrite::from_name(name).ok_or_else(|| {
                    PipelineError::Options(format!(
                        "rewrite: unknown rewrite {name:?} (known: {})",
                        known_rewrites()
                    ))
                })?),
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Reads a JSON `rewrite` as every front end takes it: one comma-separated string
    /// ([`Rewrite::parse_list`]) or a list of names (each a rewrite, `all` or `none`).
    pub fn from_json(value: &serde_json::Value) -> Result<Vec<Rewrite>, PipelineError> {
        match value {
            serde_json::Value::String(list) => Rewrite::parse_list(list),
            serde_json::Value::Array(items) => {
                let mut names = Vec::with_capacity(items.len());
                for item in items {
                    match item.as_str() {
                        Some(n) if n == "all" || n == "none" || Rewrite::from_name(n).is_some() => {
                            names.push(n)
                        }
                        _ => {
                            return Err(PipelineError::Options(format!(
                                "rewrite: unknown rewrite {item} (known: {})",
                                known_rewrites()
                            )))
                        }
                    }
                }
                Rewrite::parse_list(&names.join(","))
            }
            other => Err(PipelineError::Options(format!(
                "rewrite: expected a list of rewrite names or one comma-separated string of \
                 them (spaces around names allowed), not {other} (known: {})",
                known_rewrites()
            ))),
        }
    }
}

/// Default wall-clock cap of a pipeline run (seconds). The default effort takes at most about
/// 3 s on the zoo's graphs on 2 idle cores; the cap leaves room for a machine under load, so
/// that it does not bind and plans stay the same.
pub const DEFAULT_TIME_LIMIT_S: f64 = 60.0;

/// Smallest `link_gbps` taken (GB/s: 1 MB/s).
pub const MIN_LINK_GBPS: f64 = 0.001;
/// Largest `link_gbps` taken (GB/s).
pub const MAX_LINK_GBPS: f64 = 1e12;

/// Checks a `link_gbps` against [`MIN_LINK_GBPS`]..=[`MAX_LINK_GBPS`] (NaN refused).
pub fn check_link_gbps(g: f64) -> Result<(), PipelineError> {
    if (MIN_LINK_GBPS..=MAX_LINK_GBPS).contains(&g) {
        Ok(())
    } else {
        Err(PipelineError::Options(format!(
            "link_gbps {g} is outside [{MIN_LINK_GBPS}, {MAX_LINK_GBPS:e}] GB/s"
        )))
    }
}

/// Default effort (work units, see [`PipelineOptions::effort`]).
pub const DEFAULT_EFFORT: u64 = 1;

/// Everything that decides a plan: the graph rewrites, the planner, limits, budget, tiers and
/// the device. Serialised as the HTTP body's `options` (and as query parameters of
/// `POST /plan`); the CLI flags and the zoo batch fill the same type. Unknown fields are
/// refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineOptions {
    /// Graph rewrites to run before planning (default none: the graph is planned as given).
    pub rewrite: Vec<Rewrite>,
    /// With the `conv-algos` rewrite: `auto`, `fastest` or `min-memory`.
    pub conv_algos: ConvAlgoMode,
    /// With the `tile` rewrite: `auto` or a strip count >= 2.
    pub tile: String,
    /// With the `tile` rewrite: the largest modelled overhead tiling may add (percent of the
    /// untiled graph's modelled time).
    pub tile_overhead_pct: f64,
    /// Which op orders to consider.
    pub order: OrderMode,
    /// Which solvers to run.
    pub strategy: Strategy,
    /// Effort in deterministic work units: a multiplier of every solver's default work caps
    /// (search nodes, local-search iterations, HiGHS branch-and-bound nodes). `0`: the
    /// heuristics' own caps only. Plans are byte-identical for the same graph and options
    /// unless the time cap binds.
    pub effort: u64,
    /// Wall-clock cap of the whole run in seconds (a cap on top of `effort`: when it binds,
    /// the status says `time_limit`).
    pub time_limit_s: f64,
    /// Honour the graph's in-place hints (`inplace_of` alloc extension). Not with a budget.
    pub inplace: bool,
    /// Arena budget: bytes (a number, or a string of digits) or a percentage of the
    /// unconstrained plan's peak (`"60%"`). The plan then spills and recomputes.
    pub budget: Option<BudgetSpec>,
    /// With a budget: `best`, `sweep`, `ilp`, `chen` or `spill-all`.
    pub spill_strategy: String,
    /// Memory tiers: activations and temporaries (workspaces) in regions of their own.
    pub tiers: bool,
    /// With tiers: alignment floors, `persistent=256,activations=256,temporaries=512` or one
    /// number for all.
    pub tier_alignment: Option<String>,
    /// Device figures for the cost model (conv algorithm times, tiling overhead, spills);
    /// default the H200's.
    pub device_profile: Option<DeviceProfile>,
    /// Host link bandwidth per direction in GB/s (overrides the profile's).
    pub link_gbps: Option<f64>,
    /// Streams the plan may run on (default 1: one total order). With more, independent
    /// branches run on several streams with the events that keep memory safe
    /// ([`crate::streams`]); ops that name a stream raise it.
    pub streams: u32,
    /// With streams: the most arena bytes the parallel plan may take, as a multiple of the
    /// single-stream plan's peak (default 1.10); a budget caps it instead.
    pub stream_peak_ratio: f64,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            rewrite: Vec::new(),
            conv_algos: ConvAlgoMode::Auto,
            tile: "auto".to_string(),
            tile_overhead_pct: passes::tile::DEFAULT_MAX_OVERHEAD * 100.0,
            order: OrderMode::Auto,
            strategy: Strategy::Auto,
            effort: DEFAULT_EFFORT,
            time_limit_s: DEFAULT_TIME_LIMIT_S,
            inplace: false,
            budget: None,
            spill_strategy: budget::BEST.to_string(),
            tiers: false,
            tier_alignment: None,
            device_profile: None,
            link_gbps: None,
            streams: 1,
            stream_peak_ratio: DEFAULT_STREAM_PEAK_RATIO,
        }
    }
}

/// Under a budget, the share of the time limit the unconstrained plan (the one that fixes the
/// op order) may take; planning under the budget has the rest.
pub const BUDGET_ORDER_SHARE: f64 = 0.5;

/// Default `stream_peak_ratio`: a parallel plan may take 10 % more arena than the
/// single-stream plan.
pub const DEFAULT_STREAM_PEAK_RATIO: f64 = 1.10;

/// What a run can be told while it runs: stop, and report progress.
#[derive(Debug, Clone, Default)]
pub struct Control {
    /// Raised by another thread (HTTP `DELETE`, Ctrl-C): every stage stops at its next check
    /// and the best plan so far is returned with status `cancelled`.
    pub cancel: Option<CancelToken>,
    /// Called after each planner stage.
    pub progress: Option<ProgressSink>,
}

/// Why the pipeline could not give a plan.
#[derive(Debug, Error)]
pub enum PipelineError {
    /// An option is out of range, unknown, or cannot be combined with another (bad input).
    #[error("{0}")]
    Options(String),
    /// The graph is malformed (bad input).
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A rewrite failed.
    #[error(transparent)]
    Pass(#[from] PassError),
    /// Planning failed (internal).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// No plan fits the budget, or planning under it failed.
    #[error(transparent)]
    Budget(#[from] BudgetError),
    /// Tiered planning failed.
    #[error(transparent)]
    Tiers(#[from] TierError),
    /// Conv algorithm choice failed.
    #[error(transparent)]
    ConvAlgo(#[from] ConvAlgoError),
    /// The run was stopped (cancelled, or the wall-clock cap bound) before any plan fitted
    /// the budget; `why` says which.
    #[error("{why}: {source}")]
    Stopped {
        /// `cancelled` or `time_limit`.
        status: PlanStatus,
        /// What stopped it, for a person.
        why: String,
        /// The budget phase's report.
        source: BudgetError,
    },
}

impl PipelineError {
    /// A budget run that the wall-clock cap of `time_limit_s` seconds stopped before any plan
    /// fitted (`source`).
    pub fn time_limit(time_limit_s: f64, source: BudgetError) -> PipelineError {
        PipelineError::Stopped {
            status: PlanStatus::TimeLimit,
            why: format!("the time limit of {time_limit_s} s bound (raise time_limit_s)"),
            source,
        }
    }

    /// This error with a cancel read as the wall-clock cap of `time_limit_s` seconds: for
    /// front ends whose watchdog raises the cancel token once the time limit has passed (a
    /// stage that overran the cap), so that they answer as the CLI does.
    pub fn cancel_as_time_limit(self, time_limit_s: f64) -> PipelineError {
        match self {
            PipelineError::Stopped {
                status: PlanStatus::Cancelled,
                source,
                ..
            } => PipelineError::time_limit(time_limit_s, source),
            e => e,
        }
    }

    /// Whether the error is the caller's (options, graph, an unreachable budget) rather than
    /// an internal failure: the CLI exits 2, the HTTP service answers 4xx.
    pub fn is_bad_input(&self) -> bool {
        match self {
            PipelineError::Options(_) | PipelineError::Graph(_) => true,
            PipelineError::Stopped { .. } => true,
            PipelineError::Pass(PassError::Unsupported { .. }) => true,
            PipelineError::Plan(PlanError::Graph(_)) => true,
            PipelineError::Budget(
                BudgetError::Infeasible { .. }
                | BudgetError::Zero
                | BudgetError::Parse(_)
                | BudgetError::Percent(_)
                | BudgetError::UnknownStrategy(..)
                | BudgetError::Plan(PlanError::Graph(_)),
            ) => true,
            PipelineError::Tiers(TierError::Plan(_)) => false,
            PipelineError::Tiers(_) => true,
            _ => false,
        }
    }
}

/// What conv algorithm choice did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConvAlgoReport {
    /// The mode.
    pub mode: ConvAlgoMode,
    /// Convs per algorithm in the planned graph.
    pub mix: BTreeMap<String, usize>,
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub struct PipelineResult {
    /// The plan; `stats.status` is set, and `rewritten_graph` carries [`Self::graph`] when a
    /// rewrite changed it.
    pub plan: Plan,
    /// The graph the plan refers to (the input graph when no rewrite changed it).
    pub graph: Graph,
    /// Whether the rewrites changed the graph.
    pub rewritten: bool,
    /// One report per graph pass run (tiling, fusion).
    pub passes: Vec<PassReport>,
    /// Conv algorithm choice, when that rewrite ran.
    pub conv_algos: Option<ConvAlgoReport>,
}

impl PipelineOptions {
    /// Checks every option and every combination; the one error every front end shows.
    pub fn check(&self) -> Result<(), PipelineError> {
        let bad = |m: String| Err(PipelineError::Options(m));
        if !(self.time_limit_s.is_finite() && self.time_limit_s >= 0.0) {
            return bad(format!(
                "time_limit_s {} is not a finite non-negative number of seconds",
                self.time_limit_s
            ));
        }
        if self.effort > MAX_EFFORT {
            return bad(format!(
                "effort {} is over the largest effort {MAX_EFFORT}",
                self.effort
            ));
        }
        if self.rewrite.contains(&Rewrite::ConvAlgos) && self.conv_algos == ConvAlgoMode::Off {
            return bad(
                "conv_algos: `off` is the absence of the conv-algos rewrite; choose auto, \
                 fastest or min-memory, or leave conv-algos out of rewrite"
                    .into(),
            );
        }
        if self.rewrite.contains(&Rewrite::Tile) {
            passes::tile::TileSpec::parse(&self.tile)
                .map_err(PipelineError::Options)
                .and_then(|s| {
                    s.ok_or_else(|| {
                        PipelineError::Options(
                            "tile: `off` is the absence of the tile rewrite; choose auto or a \
                             strip count >= 2"
                                .into(),
                        )
                    })
                })?;
        }
        if !(self.tile_overhead_pct.is_finite() && self.tile_overhead_pct >= 0.0) {
            return bad(format!(
                "tile_overhead_pct {} is not a non-negative percentage",
                self.tile_overhead_pct
            ));
        }
        // A switch of another option's step given without that step would do nothing: said,
        // as for `spill_strategy` and `tier_alignment`.
        let defaults = PipelineOptions::default();
        if self.tile_overhead_pct != defaults.tile_overhead_pct
            && !self.rewrite.contains(&Rewrite::Tile)
        {
            return bad(format!(
                "tile_overhead_pct {} needs the tile rewrite (tile, or tile in rewrite)",
                self.tile_overhead_pct
            ));
        }
        if let Some(b) = self.budget {
            match b {
                BudgetSpec::Bytes(0) => {
                    return bad("budget: the budget must be more than 0 bytes".into())
                }
                BudgetSpec::Percent(p) => {
                    budget::check_percent(p).map_err(|e| PipelineError::Options(e.to_string()))?;
                }
                _ => {}
            }
            if self.tiers {
                return bad(
                    "tiers and budget cannot be combined: a tiered plan keeps workspaces in a \
                     region of their own, which the spill and recompute strategies do not model; \
                     drop one of them"
                        .into(),
                );
            }
            if self.inplace {
                return bad(
                    "inplace and budget cannot be combined: plans under a budget do not share \
                     bytes in place; drop one of them"
                        .into(),
                );
            }
        }
        if !budget::strategy_names().contains(&self.spill_strategy.as_str()) {
            return bad(format!(
                "spill_strategy: unknown spill strategy {:?} (known: {})",
                self.spill_strategy,
                budget::strategy_names().join(", ")
            ));
        }
        if self.spill_strategy != budget::BEST && self.budget.is_none() {
            return bad(format!(
                "spill_strategy {:?} needs a budget",
                self.spill_strategy
            ));
        }
        if self.streams == 0 || self.streams > crate::plan::MAX_STREAMS {
            return bad(format!(
                "streams {} is out of range: 1 to {}",
                self.streams,
                crate::plan::MAX_STREAMS
            ));
        }
        if !(self.stream_peak_ratio.is_finite() && self.stream_peak_ratio >= 1.0) {
            return bad(format!(
                "stream_peak_ratio {} is not a number >= 1",
                self.stream_peak_ratio
            ));
        }
        if self.stream_peak_ratio != defaults.stream_peak_ratio && self.streams == 1 {
            return bad(format!(
                "stream_peak_ratio {} needs streams > 1",
                self.stream_peak_ratio
            ));
        }
        if self.streams > 1 && self.tiers {
            return bad(
                "streams and tiers cannot be combined: a tiered plan keeps regions of its own, \
                 which the parallel planner does not model; drop one of them"
                    .into(),
            );
        }
        if let Some(spec) = &self.tier_alignment {
            if !self.tiers {
                return bad("tier_alignment needs tiers".into());
            }
            TierAlignment::parse(spec)
                .map_err(|e| PipelineError::Options(format!("tier_alignment {spec:?}: {e}")))?;
        }
        if let Some(g) = self.link_gbps {
            check_link_gbps(g)?;
        }
        self.profile()?;
        Ok(())
    }

    /// The device profile: the given one (default H200) with `link_gbps` applied, checked.
    pub fn profile(&self) -> Result<DeviceProfile, PipelineError> {
        let mut p = self
            .device_profile
            .clone()
            .unwrap_or_else(DeviceProfile::h200);
        p.check()
            .map_err(|e: CostError| PipelineError::Options(format!("device_profile: {e}")))?;
        if let Some(gbps) = self.link_gbps {
            p.h2d_bytes_per_s = gbps * 1e9;
            p.d2h_bytes_per_s = gbps * 1e9;
            p.check()
                .map_err(|e| PipelineError::Options(format!("link_gbps {gbps}: {e}")))?;
        }
        // Rates under 1 per second would make modelled times overflow to infinity (which no
        // plan can write); no device is that slow.
        for (field, value) in [
            ("half_flops_per_s", p.half_flops_per_s),
            ("fp32_flops_per_s", p.fp32_flops_per_s),
            ("memory_bytes_per_s", p.memory_bytes_per_s),
            ("h2d_bytes_per_s", p.h2d_bytes_per_s),
            ("d2h_bytes_per_s", p.d2h_bytes_per_s),
        ] {
            if value < 1.0 {
                let link = field.starts_with("h2d") || field.starts_with("d2h");
                let from = match self.link_gbps {
                    Some(gbps) if link => format!("link_gbps {gbps}"),
                    _ => "device_profile".to_string(),
                };
                return Err(PipelineError::Options(format!(
                    "{from}: {field} is {value}, below the smallest accepted rate of 1 per second"
                )));
            }
        }
        Ok(p)
    }

    /// Pipeline options from a JSON options object as the library front ends receive it (the
    /// C API's `options_json`, Python's keyword arguments; the HTTP service reads its richer
    /// requests the same way in `memplan_api::request::resolve`): nulls read as absent,
    /// `rewrite` may be the CLI's comma list (`fuse,tile`, `all`, `none`), `tile` a strip count
    /// as an integer, a given `conv_algos` or `tile` adds its rewrite ([`Self::apply_given_modes`]).
    /// Anything but an object is refused. Values are not checked: [`Self::check`] does that
    /// (and [`run`] calls it).
    pub fn from_json(value: serde_json::Value) -> Result<PipelineOptions, PipelineError> {
        let bad = |m: String| PipelineError::Options(m);
        let mut obj = match value {
            serde_json::Value::Object(obj) => obj,
            other => {
                let kind = match other {
                    serde_json::Value::Null => "null",
                    serde_json::Value::Bool(_) => "a boolean",
                    serde_json::Value::Number(_) => "a number",
                    serde_json::Value::String(_) => "a string",
                    serde_json::Value::Array(_) => "an array",
                    serde_json::Value::Object(_) => "an object",
                };
                return Err(bad(format!(
                    "expected a JSON object of options, got {kind}"
                )));
            }
        };
        obj.retain(|_, v| !v.is_null());
        if let Some(given) = obj.get("rewrite") {
            let names = Rewrite::from_json(given)?
                .into_iter()
                .map(|r| serde_json::Value::from(r.name()))
                .collect();
            obj.insert("rewrite".into(), serde_json::Value::Array(names));
        }
        if let Some(n) = obj.get("tile").and_then(serde_json::Value::as_u64) {
            obj.insert("tile".into(), serde_json::Value::from(n.to_string()));
        }
        let given = (obj.contains_key("conv_algos"), obj.contains_key("tile"));
        // A wrong value is named by its field (`effort: invalid value: ...`).
        let mut opts: PipelineOptions =
            crate::json_path::from_value(&serde_json::Value::Object(obj)).map_err(bad)?;
        opts.apply_given_modes(given.0, given.1);
        Ok(opts)
    }

    /// Reads `conv_algos` and `tile` as the CLI reads `--conv-algos` and `--tile`, for the
    /// front ends: where a request named the option (`conv_algos`, `tile`: whether it did), a
    /// mode other than `off` adds its rewrite and `off` takes the rewrite out (the field back
    /// at its default), so that a mode a user gives never goes without effect. The CLI, the
    /// HTTP service and the Python module call it with what their request named; a `tile`
    /// that does not parse adds the rewrite, so that [`Self::check`] names it.
    pub fn apply_given_modes(&mut self, conv_algos: bool, tile: bool) {
        let defaults = PipelineOptions::default();
        if conv_algos {
            self.rewrite.retain(|r| *r != Rewrite::ConvAlgos);
            if self.conv_algos == ConvAlgoMode::Off {
                self.conv_algos = defaults.conv_algos;
            } else {
                self.rewrite.push(Rewrite::ConvAlgos);
            }
        }
        if tile {
            self.rewrite.retain(|r| *r != Rewrite::Tile);
            if matches!(passes::tile::TileSpec::parse(&self.tile), Ok(None)) {
                self.tile = defaults.tile;
            } else {
                self.rewrite.push(Rewrite::Tile);
            }
        }
        self.rewrite.sort();
        self.rewrite.dedup();
    }

    /// The options in canonical form (rewrites sorted, without repeats), as hashed by caches.
    pub fn normalised(&self) -> PipelineOptions {
        let mut o = self.clone();
        o.rewrite.sort();
        o.rewrite.dedup();
        o
    }

    /// Canonical JSON of [`Self::normalised`] (fields in declaration order, no whitespace):
    /// equal options give equal text.
    pub fn canonical_json(&self) -> String {
        serde_json::to_string(&self.normalised()).unwrap_or_default()
    }

    /// The options as every front end shows them (the HTTP service's jobs and plans, the zoo's
    /// `results.json`): [`Self::normalised`], with `conv_algos` `off` when `rewrite` lacks
    /// `conv-algos` and `tile` `off` when it lacks `tile`. A mode other than `off` given
    /// adds its rewrite ([`Self::apply_given_modes`]), so these options, sent back to any
    /// front end, plan the same; the modes of rewrites not asked for would add them.
    pub fn echoed(&self) -> PipelineOptions {
        let mut o = self.normalised();
        if !o.rewrite.contains(&Rewrite::ConvAlgos) {
            o.conv_algos = ConvAlgoMode::Off;
        }
        if !o.rewrite.contains(&Rewrite::Tile) {
            o.tile = passes::tile::OFF.to_string();
        }
        o
    }

    /// The conv algorithm mode that applies: `off` unless the conv-algos rewrite is asked.
    pub fn conv_mode(&self) -> ConvAlgoMode {
        if self.rewrite.contains(&Rewrite::ConvAlgos) {
            self.conv_algos
        } else {
            ConvAlgoMode::Off
        }
    }

    /// The planner options for these pipeline options: effort in work units and no time
    /// limit of its own; the wall-clock cap reaches the planner as the `stop` token (a
    /// [`Deadline`]'s).
    pub fn plan_options(&self, stop: &CancelToken, progress: Option<ProgressSink>) -> PlanOptions {
        PlanOptions {
            order: self.order,
            strategy: self.strategy,
            time_limit: None,
            effort: Some(self.effort),
            inplace: self.inplace,
            cancel: Some(stop.clone()),
            progress,
        }
    }
}

/// The largest effort accepted.
pub const MAX_EFFORT: u64 = 1000;

/// Runs the pipeline on `graph` (module doc).
pub fn run(
    graph: &Graph,
    options: &PipelineOptions,
    control: &Control,
) -> Result<PipelineResult, PipelineError> {
    let started = Instant::now();
    options.check()?;
    let profile = options.profile()?;
    let cancel = control.cancel.clone().unwrap_or_default();
    // The wall-clock cap and the user's cancel, as one stop flag for every stage (a cap past
    // what a `Duration` holds, some 585 billion years, is none).
    let deadline = Deadline::start(
        Duration::try_from_secs_f64(options.time_limit_s).ok(),
        Some(cancel.clone()),
    );
    let stop = deadline.token();
    // 1. Graph passes: tiling, then fusion.
    let mut list: Vec<Box<dyn Pass>> = Vec::new();
    if options.rewrite.contains(&Rewrite::Tile) {
        if let Some(spec) =
            passes::tile::TileSpec::parse(&options.tile).map_err(PipelineError::Options)?
        {
            let mut t = passes::tile::Tile::new(spec);
            t.max_overhead = options.tile_overhead_pct / 100.0;
            t.profile = profile.clone();
            t.cancel = Some(stop.clone());
            list.push(Box::new(t));
        }
    }
    if options.rewrite.contains(&Rewrite::Fuse) {
        list.push(Box::new(passes::fuse::Fuse::default()));
    }
    let refs: Vec<&dyn Pass> = list.iter().map(|p| p.as_ref()).collect();
    let passes::PipelineOutcome {
        graph: g,
        reports,
        steps,
    } = passes::run_pipeline(graph, &refs)?;
    // 2. Planning, with conv algorithm choice where asked.
    let mode = options.conv_mode();
    let popts = options.plan_options(&stop, control.progress.clone());
    // Whether a stage's own share of the clock bound (the whole cap: `deadline.hit()`).
    let mut share_bound = false;
    let (planned, mut plan) = if let Some(spec) = options.budget {
        // Under a budget the convs start at their fastest (min-memory: least workspace)
        // algorithm; `auto` lets the budget strategies downgrade them.
        let start = match mode {
            ConvAlgoMode::Off => g.clone(),
            _ => ca::with_choice(&g, &ca::pick(&profile, &g, mode != ConvAlgoMode::MinMemory)),
        };
        let params = budget::schedule::Params {
            conv_downgrade: mode == ConvAlgoMode::Auto,
            ..Default::default()
        };
        let bopts = BudgetOptions {
            strategy: options.spill_strategy.clone(),
            profile: profile.clone(),
            params,
            cancel: Some(stop.clone()),
            effort: Some(options.effort),
            ..BudgetOptions::default()
        };
        // The unconstrained plan, which fixes the order, gets at most
        // [`BUDGET_ORDER_SHARE`] of the time limit, so that planning under the budget keeps
        // the rest (before, a random 300-op graph whose unconstrained plan ran to the 60 s
        // limit left the budget no time: no plan at all).
        let order_deadline = Deadline::start(
            Duration::try_from_secs_f64(options.time_limit_s * BUDGET_ORDER_SHARE).ok(),
            Some(stop.clone()),
        );
        let order_opts = options.plan_options(&order_deadline.token(), control.progress.clone());
        let planned = budget::plan_under_budget(&start, spec, &order_opts, &bopts);
        share_bound = order_deadline.hit();
        let plan = match planned {
            Ok(p) => p,
            Err(source @ BudgetError::Cancelled { .. }) => {
                return Err(if cancel.is_cancelled() {
                    PipelineError::Stopped {
                        status: PlanStatus::Cancelled,
                        why: "cancelled".to_string(),
                        source,
                    }
                } else {
                    PipelineError::time_limit(options.time_limit_s, source)
                });
            }
            Err(e) => return Err(e.into()),
        };
        let chosen = ca::graph_for_plan(&profile, &start, &plan)?;
        (chosen, plan)
    } else if options.tiers {
        let align = match &options.tier_alignment {
            Some(spec) => TierAlignment::parse(spec)
                .map_err(|e| PipelineError::Options(format!("tier_alignment {spec:?}: {e}")))?,
            None => TierAlignment::default(),
        };
        // Workspaces live in their own region, so the choice cannot use the activations'
        // gaps: `auto` takes each conv's fastest algorithm whose workspace fits the
        // min-memory choice's temporaries region.
        let chosen = match mode {
            ConvAlgoMode::Off => g.clone(),
            _ => ca::with_choice(&g, &ca::pick_for_tiers(&profile, &g, mode)),
        };
        let plan = crate::tiers::plan_tiered(&chosen, &popts, &align)?;
        (chosen, plan)
    } else {
        let choice = ca::choose_and_plan(&g, mode, &profile, &popts)?;
        (choice.graph, choice.plan)
    };
    // 3. Streams: the plan spread over several streams, with events.
    let pinned = planned.ops.iter().any(|o| o.stream.is_some());
    if options.streams > 1 || pinned {
        let serial_peak = plan.stats.peak_bytes;
        let peak_cap = match &plan.stats.budget {
            Some(b) => b.budget_bytes,
            None => (serial_peak as f64 * options.stream_peak_ratio).floor() as u64,
        };
        let sopts = crate::streams::StreamOptions {
            streams: options.streams,
            peak_cap,
            stop: Some(stop.clone()),
        };
        let (p, stat) = crate::streams::parallelise(&planned, &plan, &profile, &sopts)
            .map_err(|e| PipelineError::Options(e.to_string()))?;
        plan = p;
        plan.stats.streams = stat.map(Box::new);
    }
    // 4. One status for the whole run.
    plan.stats.status = Some(final_status(
        &plan,
        options,
        &cancel,
        deadline.hit() || share_bound,
    ));
    plan.stats.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    let rewritten = planned != *graph;
    if rewritten {
        plan.rewritten_graph = Some(planned.to_value());
        plan.rewrites = steps;
    }
    let conv_algos = (mode != ConvAlgoMode::Off).then(|| ConvAlgoReport {
        mode,
        mix: ca::algo_mix(&planned),
    });
    Ok(PipelineResult {
        plan,
        graph: planned,
        rewritten,
        passes: reports,
        conv_algos,
    })
}

/// The status of a finished run: `cancelled` when the token was raised, `time_limit` when the
/// wall-clock cap bound (here or in a stage), `optimal` when the peak meets the proven bound,
/// `heuristic_only` for the heuristic strategy, else `feasible` (the work limit was reached
/// with the gap the stats report).
fn final_status(
    plan: &Plan,
    options: &PipelineOptions,
    cancel: &CancelToken,
    cap_bound: bool,
) -> PlanStatus {
    if cancel.is_cancelled() {
        PlanStatus::Cancelled
    } else if cap_bound {
        PlanStatus::TimeLimit
    } else if plan.stats.peak_bytes <= plan.stats.lower_bound_bytes {
        PlanStatus::Optimal
    } else if options.strategy == Strategy::Heuristic {
        PlanStatus::HeuristicOnly
    } else {
        PlanStatus::Feasible
    }
}

/// Why a plan cannot be checked or run against a graph.
#[derive(Debug, Error)]
pub enum PlanGraphError {
    /// The plan's carried graph is not a valid memplan-graph/1 document.
    #[error("the plan's rewritten_graph is invalid: {0}")]
    Carried(GraphError),
    /// The carried graph was not derived from the given graph.
    #[error("the plan's rewritten_graph was not derived from graph {graph:?}: {why}")]
    NotDerived {
        /// The given graph's name.
        graph: String,
        /// The first difference.
        why: String,
    },
    /// The plan names conv algorithms the graph cannot take.
    #[error(transparent)]
    ConvAlgo(#[from] ConvAlgoError),
}

impl PlanGraphError {
    /// Whether the error is the plan's fault (`check` answers "invalid", exit 1): a carried
    /// graph not derived from the given one, or conv algorithms that are unknown, do not apply
    /// to the op, or differ between execs of one op. A carried graph that is not a valid
    /// graph document is unreadable input instead.
    pub fn makes_plan_invalid(&self) -> bool {
        match self {
            PlanGraphError::Carried(_) => false,
            PlanGraphError::NotDerived { .. } => true,
            PlanGraphError::ConvAlgo(e) => !matches!(e, ConvAlgoError::Plan(_)),
        }
    }
}

/// The graph to replay `plan` against, given the graph the user planned (`original`): the
/// plan's carried `rewritten_graph` when it has one, after proving it was derived from
/// `original` (the same graph inputs, weights and outputs, by name and size, and exactly the
/// graph that the plan's recorded `rewrites` and the conv algorithms its execs name give
/// when applied to `original` again), else `original` with the conv algorithms the plan
/// names written in. A plan that records rewrites but carries no graph is not derived.
pub fn graph_for_plan(original: Graph, plan: &Plan) -> Result<Graph, PlanGraphError> {
    let not_derived = |why: String| PlanGraphError::NotDerived {
        graph: original.name.clone(),
        why,
    };
    let first_difference = |a: &Graph, b: &Graph| {
        crate::json_path::first_difference(&a.to_value(), &b.to_value())
            .unwrap_or_else(|| "a field the format does not write".to_string())
    };
    if let Some(doc) = &plan.rewritten_graph {
        let carried = Graph::from_value(doc).map_err(PlanGraphError::Carried)?;
        let h200 = DeviceProfile::h200();
        if carried != original {
            derived_from(&original, &carried).map_err(|why| {
                not_derived(if plan.graph == original.name {
                    why
                } else {
                    format!("the plan is for graph {:?}; {why}", plan.graph)
                })
            })?;
            let replayed = passes::replay(&original, &plan.rewrites)
                .map_err(|e| not_derived(format!("its recorded rewrites do not apply: {e}")))?;
            let derived = ca::graph_for_plan(&h200, &replayed, plan)?;
            if derived != carried {
                return Err(not_derived(format!(
                    "it is not the graph its recorded rewrites ({}) and conv algorithms give: \
                     {}",
                    rewrite_names(&plan.rewrites),
                    first_difference(&derived, &carried)
                )));
            }
            return Ok(carried);
        }
        // Checked against its own carried graph (`--graph-out`): the records name the
        // original's ops and cannot be applied to it, but the conv algorithms the execs name
        // must be the graph's, and records that would rewrite the given graph further
        // contradict a carried graph equal to it.
        let with_algos = ca::graph_for_plan(&h200, &carried, plan)?;
        if with_algos != carried {
            return Err(not_derived(format!(
                "the conv algorithms its execs name are not the carried graph's: {}",
                first_difference(&carried, &with_algos)
            )));
        }
        if let Ok(further) = passes::replay(&original, &plan.rewrites) {
            if further != original {
                return Err(not_derived(format!(
                    "its recorded rewrites ({}) rewrite the graph given, yet the carried graph \
                     is that graph unchanged: {}",
                    rewrite_names(&plan.rewrites),
                    first_difference(&original, &further)
                )));
            }
        }
        return Ok(carried);
    }
    if !plan.rewrites.is_empty() {
        return Err(not_derived(format!(
            "the plan records rewrites ({}) but carries no rewritten_graph",
            rewrite_names(&plan.rewrites)
        )));
    }
    let names_algos = plan
        .instructions
        .iter()
        .any(|i| matches!(i, crate::Instruction::Exec { algo: Some(_), .. }));
    if !names_algos {
        return Ok(original);
    }
    Ok(ca::graph_for_plan(&DeviceProfile::h200(), &original, plan)?)
}

/// The recorded rewrites' pass names, comma-separated (`none` for none).
fn rewrite_names(steps: &[passes::RewriteStep]) -> String {
    if steps.is_empty() {
        return "none".to_string();
    }
    let names: Vec<&str> = steps.iter().map(passes::step_pass).collect();
    names.join(", ")
}

/// Whether `rewritten` keeps `original`'s interface: the same graph inputs, weights and
/// outputs (names, sizes). The first difference otherwise.
pub fn derived_from(original: &Graph, rewritten: &Graph) -> Result<(), String> {
    let interface = |g: &Graph, kind: TensorKind| -> BTreeMap<String, u64> {
        g.tensors
            .iter()
            .filter(|t| t.kind == kind)
            .map(|t| (t.name.clone(), t.size))
            .collect()
    };
    for (kind, what) in [
        (TensorKind::Input, "inputs"),
        (TensorKind::Weight, "weights"),
        (TensorKind::Output, "outputs"),
    ] {
        let (a, b) = (interface(original, kind), interface(rewritten, kind));
        if a == b {
            continue;
        }
        if let Some((n, s)) = a.iter().find(|(n, s)| b.get(*n) != Some(s)) {
            return Err(match b.get(n) {
                None => format!("graph {what}: {n:?} ({s} bytes) is missing"),
                Some(t) => format!("graph {what}: {n:?} has {t} bytes, not {s}"),
            });
        }
        if let Some((n, _)) = b.iter().find(|(n, _)| !a.contains_key(*n)) {
            return Err(format!("graph {what}: {n:?} is not in the original graph"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Graph {
        Graph::parse(crate::graph::SAMPLE_JSON).unwrap()
    }

    #[test]
    fn default_options_plan_the_graph_as_given() {
        let g = sample();
        let r = run(&g, &PipelineOptions::default(), &Control::default()).unwrap();
        assert!(!r.rewritten);
        assert_eq!(r.graph, g);
        assert!(r.plan.rewritten_graph.is_none());
        crate::validate::validate(&g, &r.plan, None).unwrap();
    }

    #[test]
    fn a_rewritten_plan_carries_its_graph_and_checks_against_the_original() {
        let g = sample();
        let opts = PipelineOptions {
            rewrite: vec![Rewrite::Fuse, Rewrite::ConvAlgos],
            ..PipelineOptions::default()
        };
        let r = run(&g, &opts, &Control::default()).unwrap();
        assert!(r.rewritten);
        let text = r.plan.to_json();
        let back = Plan::parse(&text).unwrap();
        let replay = graph_for_plan(g.clone(), &back).unwrap();
        assert_eq!(replay, r.graph);
        crate::validate::validate(&replay, &back, None).unwrap();
    }

    #[test]
    fn a_carried_graph_with_another_interface_is_refused() {
        let g = sample();
        let opts = PipelineOptions {
            rewrite: vec![Rewrite::Fuse],
            ..PipelineOptions::default()
        };
        let r = run(&g, &opts, &Control::default()).unwrap();
        let mut other = g.clone();
        let i = other
            .tensors
            .iter()
            .position(|t| t.kind == TensorKind::Output)
            .unwrap();
        other.tensors[i].size += 256;
        let err = graph_for_plan(other, &r.plan).unwrap_err();
        assert!(err.to_string().contains("outputs"), "{err}");
    }

    #[test]
    fn a_broken_carried_graph_is_named_by_its_path_not_a_position_in_re_serialised_text() {
        let g = sample();
        let opts = PipelineOptions {
            rewrite: vec![Rewrite::Fuse],
            ..PipelineOptions::default()
        };
        let mut plan = run(&g, &opts, &Control::default()).unwrap().plan;
        let doc = plan.rewritten_graph.as_mut().unwrap();
        let name = doc["tensors"][1]["name"].as_str().unwrap().to_string();
        doc["tensors"][1]["size"] = serde_json::json!("big");
        let err = graph_for_plan(g, &plan).unwrap_err().to_string();
        assert!(
            err.contains(&format!("rewritten_graph is invalid: graph JSON error: tensors[1] ({name:?}).size: invalid type: string \"big\"")),
            "{err}"
        );
        assert!(!err.contains("at line"), "{err}");
    }

    #[test]
    fn a_cancelled_run_returns_a_valid_plan_whose_status_says_cancelled() {
        let g = sample();
        let token = CancelToken::new();
        token.cancel();
        let control = Control {
            cancel: Some(token),
            progress: None,
        };
        let r = run(&g, &PipelineOptions::default(), &control).unwrap();
        assert_eq!(r.plan.stats.status, Some(PlanStatus::Cancelled));
        crate::validate::validate(&g, &r.plan, None).unwrap();
    }

    #[test]
    fn a_binding_time_cap_is_reported_as_time_limit() {
        let g = sample();
        let opts = PipelineOptions {
            time_limit_s: 0.0,
            ..PipelineOptions::default()
        };
        let r = run(&g, &opts, &Control::default()).unwrap();
        assert_eq!(r.plan.stats.status, Some(PlanStatus::TimeLimit));
        crate::validate::validate(&g, &r.plan, None).unwrap();
    }

    #[test]
    fn the_same_graph_and_options_give_the_same_plan() {
        let g = sample();
        let opts = PipelineOptions {
            rewrite: Rewrite::ALL.to_vec(),
            ..PipelineOptions::default()
        };
        let a = run(&g, &opts, &Control::default()).unwrap().plan;
        let b = run(&g, &opts, &Control::default()).unwrap().plan;
        assert_ne!(a.stats.status, Some(PlanStatus::TimeLimit));
        assert_eq!(a.instructions, b.instructions);
        assert_eq!(a.rewritten_graph, b.rewritten_graph);
        assert_eq!(a.stats.peak_bytes, b.stats.peak_bytes);
        assert_eq!(a.stats.lower_bound_bytes, b.stats.lower_bound_bytes);
    }

    #[test]
    fn tiers_with_a_budget_is_one_clear_error() {
        let opts = PipelineOptions {
            tiers: true,
            budget: Some(BudgetSpec::Percent(60.0)),
            ..PipelineOptions::default()
        };
        let err = run(&sample(), &opts, &Control::default()).unwrap_err();
        assert!(err.is_bad_input());
        assert!(err.to_string().contains("tiers and budget"), "{err}");
    }

    #[test]
    fn a_switch_given_without_the_step_it_tunes_is_refused_not_ignored() {
        let refused = |opts: PipelineOptions| opts.check().unwrap_err().to_string();
        let e = refused(PipelineOptions {
            stream_peak_ratio: 1.5,
            ..PipelineOptions::default()
        });
        assert_eq!(e, "stream_peak_ratio 1.5 needs streams > 1");
        let e = refused(PipelineOptions {
            tile_overhead_pct: 5.0,
            ..PipelineOptions::default()
        });
        assert!(
            e.starts_with("tile_overhead_pct 5 needs the tile rewrite"),
            "{e}"
        );
        // With their steps, or at their defaults, they are fine.
        for opts in [
            PipelineOptions {
                stream_peak_ratio: 1.5,
                streams: 2,
                ..PipelineOptions::default()
            },
            PipelineOptions {
                tile_overhead_pct: 5.0,
                rewrite: vec![Rewrite::Tile],
                ..PipelineOptions::default()
            },
            PipelineOptions {
                stream_peak_ratio: DEFAULT_STREAM_PEAK_RATIO,
                ..PipelineOptions::default()
            },
        ] {
            opts.check().unwrap();
        }
    }

    #[test]
    fn a_time_limit_past_what_a_duration_holds_plans_without_a_cap() {
        let opts = PipelineOptions {
            time_limit_s: 1e300,
            strategy: Strategy::Heuristic,
            ..PipelineOptions::default()
        };
        let r = run(&sample(), &opts, &Control::default()).unwrap();
        crate::validate::validate(&sample(), &r.plan, None).unwrap();
    }

    #[test]
    fn options_from_json_read_lists_integers_and_nulls_as_every_front_end_does() {
        let read = |text: &str| PipelineOptions::from_json(serde_json::from_str(text).unwrap());
        let listed = read(r#"{"rewrite": ["fuse", "tile"], "tile": "4"}"#).unwrap();
        assert_eq!(
            read(r#"{"rewrite": "fuse,tile", "tile": 4}"#).unwrap(),
            listed
        );
        assert_eq!(read(r#"{"rewrite": "fuse", "tile": 4}"#).unwrap(), listed);
        assert_eq!(
            read(r#"{"budget": null, "conv_algos": null}"#).unwrap(),
            PipelineOptions::default()
        );
        let fastest = read(r#"{"conv_algos": "fastest"}"#).unwrap();
        assert_eq!(fastest.rewrite, [Rewrite::ConvAlgos]);
        for (text, says) in [
            ("[]", "got an array"),
            ("null", "got null"),
            (r#"[["fuse"]]"#, "got an array"),
            (r#"{"rewrite": "fuse,spin"}"#, "spin"),
            (r#"{"effort": -1}"#, "effort: invalid value: integer `-1`"),
            (r#"{"budget": 0}"#, "budget: the budget must be"),
            (
                r#"{"device_profile": {"h2d_bytes_per_s": "x"}}"#,
                "device_profile.h2d_bytes_per_s: ",
            ),
            (r#"{"spin": 1}"#, "spin"),
        ] {
            let e = read(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
            assert!(!e.contains("budget: budget"), "{text}: {e}");
        }
    }

    #[test]
    fn a_given_mode_adds_its_rewrite_and_off_takes_it_out() {
        let given = |json: &str, conv: bool, tile: bool| {
            let mut o: PipelineOptions = serde_json::from_str(json).unwrap();
            o.apply_given_modes(conv, tile);
            o
        };
        let o = given(r#"{"conv_algos": "fastest", "tile": "4"}"#, true, true);
        assert_eq!(o.rewrite, [Rewrite::Tile, Rewrite::ConvAlgos]);
        assert_eq!(
            (o.conv_algos, o.tile.as_str()),
            (ConvAlgoMode::Fastest, "4")
        );
        // `off` takes the rewrite out, even from `all`, and leaves the field at its default.
        let o = given(
            r#"{"rewrite": ["tile", "fuse", "conv-algos"], "conv_algos": "off", "tile": "off"}"#,
            true,
            true,
        );
        assert_eq!(o.rewrite, [Rewrite::Fuse]);
        assert_eq!(o, given(r#"{"rewrite": ["fuse"]}"#, false, false));
        o.check().unwrap();
        // Not named: nothing changes (the struct's defaults alone add no rewrite).
        assert!(given("{}", false, false).rewrite.is_empty());
        // A tile that does not parse adds the rewrite, so that `check` names it.
        let e = given(r#"{"tile": "1"}"#, false, true).check().unwrap_err();
        assert!(
            e.to_string()
                .contains("tile: expected auto, off or a strip count"),
            "{e}"
        );
    }

    #[test]
    fn rewrite_lists_parse_names_all_and_none() {
        assert_eq!(Rewrite::parse_list("all").unwrap(), Rewrite::ALL.to_vec());
        assert_eq!(Rewrite::parse_list("none").unwrap(), vec![]);
        assert_eq!(
            Rewrite::parse_list("fuse,tile,fuse").unwrap(),
            vec![Rewrite::Tile, Rewrite::Fuse]
        );
        assert!(Rewrite::parse_list("fusion").is_err());
    }

    #[test]
    fn options_survive_a_json_round_trip_and_unknown_fields_are_refused() {
        let o = PipelineOptions {
            rewrite: vec![Rewrite::ConvAlgos],
            budget: Some(BudgetSpec::Percent(60.0)),
            ..PipelineOptions::default()
        };
        let text = serde_json::to_string(&o).unwrap();
        let back: PipelineOptions = serde_json::from_str(&text).unwrap();
        assert_eq!(back, o);
        assert!(serde_json::from_str::<PipelineOptions>(r#"{"fuse": true}"#).is_err());
        let b: PipelineOptions = serde_json::from_str(r#"{"budget": 4096}"#).unwrap();
        assert_eq!(b.budget, Some(BudgetSpec::Bytes(4096)));
        let b: PipelineOptions = serde_json::from_str(r#"{"budget": "60%"}"#).unwrap();
        assert_eq!(b.budget, Some(BudgetSpec::Percent(60.0)));
    }

    #[test]
    fn a_percentage_outside_0_to_100_is_refused_with_one_message_wherever_it_comes_from() {
        for text in ["1e308%", "150%", "100.5%", "0%", "-5%", "inf%", "NaN%"] {
            // The CLI's --budget and the HTTP option read the same text the same way.
            let e = BudgetSpec::parse(text).unwrap_err().to_string();
            assert_eq!(e, budget::BudgetError::Parse(text.into()).to_string());
            assert!(
                e.starts_with(&format!("budget {text:?} is not BYTES")),
                "{e}"
            );
            let json = format!(r#"{{"budget": "{text}"}}"#);
            let e = serde_json::from_str::<PipelineOptions>(&json).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("budget {text:?} is not BYTES")),
                "{text}: {e}"
            );
        }
        assert_eq!(
            BudgetSpec::parse("100%").unwrap(),
            BudgetSpec::Percent(100.0)
        );
        // Options built in code (the zoo batch, benchmarks) are checked the same way.
        let opts = PipelineOptions {
            budget: Some(BudgetSpec::Percent(1e308)),
            ..PipelineOptions::default()
        };
        let e = run(&sample(), &opts, &Control::default()).unwrap_err();
        assert!(e.is_bad_input());
        assert_eq!(
            e.to_string(),
            budget::check_percent(1e308).unwrap_err().to_string()
        );
        assert!(e.to_string().contains("budget 1e308%"), "{e}");
    }

    #[test]
    fn a_device_rate_under_1_per_second_is_refused_naming_it() {
        let mut profile = DeviceProfile::h200();
        profile.fp32_flops_per_s = 1e-300;
        let opts = PipelineOptions {
            device_profile: Some(profile),
            ..PipelineOptions::default()
        };
        let e = opts.check().unwrap_err().to_string();
        assert!(
            e.contains("fp32_flops_per_s") && e.contains("device_profile"),
            "{e}"
        );
        let opts = PipelineOptions {
            link_gbps: Some(1e-12),
            ..PipelineOptions::default()
        };
        let e = opts.check().unwrap_err().to_string();
        assert_eq!(
            e, "link_gbps 0.000000000001 is outside [0.001, 1e12] GB/s",
            "the range every front end states"
        );
    }

    #[test]
    fn option_texts_follow_one_grammar_the_openapi_patterns_state() {
        // Budgets: what the CLI used to trim or read loosely is refused as the HTTP service
        // refuses it, with the library's one message.
        for bad in [
            "60 %",
            " 60%",
            "060%",
            "+60%",
            "1e1%",
            "5.%",
            "007",
            "1e3",
            "12345678901234567890",
        ] {
            let e = BudgetSpec::parse(bad).unwrap_err();
            assert!(matches!(e, budget::BudgetError::Parse(_)), "{bad}: {e}");
        }
        assert!(matches!(
            BudgetSpec::parse("0"),
            Err(budget::BudgetError::Zero)
        ));
        for (good, spec) in [
            ("60%", BudgetSpec::Percent(60.0)),
            (".5%", BudgetSpec::Percent(0.5)),
            ("100.00%", BudgetSpec::Percent(100.0)),
            ("4096", BudgetSpec::Bytes(4096)),
        ] {
            assert_eq!(BudgetSpec::parse(good).unwrap(), spec, "{good}");
        }
        // Rewrite lists: spaces around names, no empty item.
        assert_eq!(
            Rewrite::parse_list(" fuse , tile").unwrap(),
            vec![Rewrite::Tile, Rewrite::Fuse]
        );
        assert!(Rewrite::parse_list("").unwrap().is_empty());
        let e = Rewrite::parse_list("fuse,,tile").unwrap_err().to_string();
        assert!(e.contains("empty item"), "{e}");
        // A list of names takes `all` and `none` as the comma list does.
        let all = Rewrite::from_json(&serde_json::json!(["all"])).unwrap();
        assert_eq!(all, Rewrite::ALL.to_vec());
        assert!(Rewrite::from_json(&serde_json::json!(["none"]))
            .unwrap()
            .is_empty());
        assert!(Rewrite::from_json(&serde_json::json!(["fuse", 3])).is_err());
        // Tile: a strip count of at most nine digits, no leading zero.
        for bad in ["1000000000", "02", "+4", " 4", "1"] {
            assert!(passes::tile::TileSpec::parse(bad).is_err(), "{bad}");
        }
        // link_gbps: the documented range, before the device profile is built.
        for g in [0.0, 0.0001, 1e13, f64::NAN] {
            let opts = PipelineOptions {
                link_gbps: Some(g),
                ..PipelineOptions::default()
            };
            let e = opts.check().unwrap_err().to_string();
            assert!(e.starts_with(&format!("link_gbps {g} is outside")), "{e}");
        }
    }

    #[test]
    fn a_cancel_read_as_the_time_limit_gives_the_time_limits_words() {
        let token = CancelToken::new();
        token.cancel();
        let control = Control {
            cancel: Some(token),
            progress: None,
        };
        let opts = PipelineOptions {
            budget: Some(BudgetSpec::Bytes(1)),
            time_limit_s: 0.25,
            ..PipelineOptions::default()
        };
        let e = run(&sample(), &opts, &control).unwrap_err();
        assert!(
            matches!(
                &e,
                PipelineError::Stopped {
                    status: PlanStatus::Cancelled,
                    ..
                }
            ),
            "{e}"
        );
        let e = e.cancel_as_time_limit(0.25);
        assert!(
            matches!(
                &e,
                PipelineError::Stopped {
                    status: PlanStatus::TimeLimit,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("the time limit of 0.25 s bound (raise time_limit_s): "),
            "{e}"
        );
    }
}
