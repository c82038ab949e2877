//! Fitting a memory budget on a fixed op order: spill to host and recompute.
//!
//! A [`SpillStrategy`] turns a target (live bytes per step) into a residency [`Sched`]: per
//! tensor and per gap between consecutive uses, keep / spill (`spill_out` after the use,
//! `spill_in` at a prefetch step before the next, possibly at another offset) / recompute
//! (re-execute a single-output producer right before the next use). The pipeline
//! ([`plan_with_budget`]) then makes every residency interval, workspace and recompute
//! workspace a buffer, places them with the placement portfolio (so a tensor may come back at
//! a different offset), places the host copies in a host pool the same way (`host_bytes`),
//! emits the instruction stream and replays it with the validator under the budget.
//! Placement adds fragmentation on top of live bytes, so adaptive strategies are re-run with
//! a lower target until the placed peak fits (at most [`MAX_ATTEMPTS`] times), then bisect
//! between that target and the failing one above it ([`TARGET_BISECTIONS`] attempts): the
//! first cut lowers the target by the placement's whole excess and often overshoots. A
//! schedule whose heuristic placement misses the budget while its aligned LOAD does not gets
//! the exact search, asked to fit the budget ([`FIT_NODES_PER_BUFFER`], [`FIT_WORK`]).
//! Measured (2026-12-06, `best`, effort 1) on random DAGs of 80–300 ops at 75 % and 60 % of
//! their peak: the simulated overhead falls by up to half (README, *Fitting a memory budget*).
//!
//! The modelled step time comes from [`simulate`]: one compute stream and one copy stream per
//! direction; a copy or an exec waits for the memory it reserves to be released (the readers
//! of the previous occupant done, or its spill_out copied), an exec waits for its inputs'
//! spill_ins. Overhead is the step time minus the sum of the ops' times.
//!
//! Strategies ([`registry`]): `sweep` (the heuristic, [`sweep`]), `ilp` (the HiGHS integer
//! program warm-started from it, [`program`]), `chen` (√n checkpointing, [`chen`]) and
//! `spill-all` ([`spill_all`]), all on the fixed order; `best` runs them all, then the joint
//! program ([`joint`], also by the name `joint`), which may also move ops, from the best of
//! them, and keeps the fitting plan with the lowest simulated overhead (so it is never worse
//! than any of them). Every strategy's choice becomes a [`Residency`] that is placed and
//! emitted the same way.
//!
//! **Limits.** With [`BudgetOptions::effort`] `Some(k)` every stage stops at deterministic
//! work caps (the integer program at `k ×` [`program::DEFAULT_NODES`] branch-and-bound nodes per
//! model, the placements at the heuristics' own caps and `k ×` [`fit_nodes`] exact search
//! nodes), so the same graph, order and options
//! give the same plan on any machine and under any load. [`BudgetOptions::cancel`] is the
//! only time cap: it is checked before every strategy and attempt, inside the sweep and the
//! √n schedule, by the placements and by HiGHS; once raised, the best fitting plan so far is
//! returned, or [`BudgetError::Cancelled`] when none fitted yet.

pub mod chen;
pub mod joint;
pub mod program;
pub mod residency;
pub mod schedule;
pub mod spill_all;
pub mod sweep;

use crate::cost::DeviceProfile;
use crate::graph::{Graph, TensorId, TensorKind};
/// The budget figures of a plan's stats, defined with the plan format.
pub use crate::plan::{BudgetStat, TriedStat};
use crate::plan::{Instruction, Plan, PlanStats};
use memplan_solver::placement::step as place;
use memplan_solver::{Buffer, Lifetime, Limits, PlacementError, PlacementProblem};
use residency::Residency;
use schedule::{Ctx, End, Params, Sched, Start};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How many targets an adaptive strategy tries before giving up.
pub const MAX_ATTEMPTS: usize = 12;

/// A way to decide keep / spill / recompute for a target of live bytes.
pub trait SpillStrategy {
    /// Stable name (CLI `--spill-strategy`).
    fn name(&self) -> &'static str;
    /// One-line description.
    fn about(&self) -> &'static str;
    /// The schedule for `target` live bytes per step (best effort: steps it cannot bring
    /// under the target stay over it).
    fn schedule(&self, ctx: &Ctx, target: u64) -> Sched;
    /// Whether a lower target gives a lower peak (so the pipeline may retry with one).
    fn adapts(&self) -> bool;
    /// What the last [`SpillStrategy::schedule`] call's solver reported (status, bound).
    fn note(&self) -> Option<String> {
        None
    }
    /// A strategy this one refines: its plan is kept when it is better, so this one is never
    /// worse than it.
    fn fallback(&self) -> Option<Box<dyn SpillStrategy>> {
        None
    }
}

/// Every strategy, in the order `best` tries them (earlier wins ties).
pub fn registry() -> Vec<Box<dyn SpillStrategy>> {
    vec![
        Box::new(sweep::Sweep),
        Box::new(program::Ilp::default()),
        Box::new(chen::Chen),
        Box::new(spill_all::SpillAll),
    ]
}

/// The name that runs every strategy and keeps the best fitting plan, then lets the joint
/// program ([`joint`]) improve it.
pub const BEST: &str = "best";

/// The name of the joint order + spill + recompute program ([`joint`]): every sequential
/// strategy, then the joint program warm-started from the best of them (as [`BEST`]; kept
/// as a name of its own so that a user can ask for it explicitly).
pub const JOINT: &str = "joint";

/// What [`BEST`] does, in one line.
pub const BEST_ABOUT: &str = "every strategy, then the joint program from the best of them; the \
     fitting plan with the lowest simulated overhead wins";

/// What [`JOINT`] does, in one line.
pub const JOINT_ABOUT: &str = "integer programs (HiGHS) over the op order, spill and recompute \
     (with chains) per window of steps, warm-started from the best sequential plan, never worse";

/// Names accepted for the strategy: [`BEST`], the registry's and [`JOINT`].
pub fn strategy_names() -> Vec<&'static str> {
    let mut v = vec![BEST];
    v.extend(registry().iter().map(|s| s.name()));
    v.push(JOINT);
    v
}

/// Options of a budgeted plan.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetOptions {
    /// Arena budget (bytes, > 0).
    pub budget: u64,
    /// Strategy name ([`strategy_names`]).
    pub strategy: String,
    /// The device's figures.
    pub profile: DeviceProfile,
    /// Strategy knobs.
    pub params: Params,
    /// Time limit per placement run (`None`: the heuristics' own caps, deterministic).
    /// Ignored with an `effort`, which asks for deterministic caps only.
    pub placement_time: Option<Duration>,
    /// Stop flag (a user's cancel, or the pipeline's wall-clock cap as a
    /// [`memplan_solver::Deadline`]): every strategy, attempt and integer program stops at
    /// its next check and the best fitting plan so far is returned.
    pub cancel: Option<memplan_solver::CancelToken>,
    /// Deterministic effort (a multiplier of the strategies' work caps, e.g. the integer
    /// program's branch-and-bound nodes); `None`: their default time-based limits.
    pub effort: Option<u64>,
    /// Extra attempts of an adaptive strategy between the target it first fitted at and the
    /// failing target above it (`refine_target`; 0: none): default [`TARGET_BISECTIONS`].
    pub target_bisections: usize,
    /// Exact search work, per device buffer and unit of effort (node limits of its runs, as
    /// [`memplan_solver::placement::step::RefineWork::exact_nodes`]), for a schedule whose
    /// heuristic placement misses the budget though its aligned LOAD is under it (`fit_budget`;
    /// 0: heuristics only): default [`FIT_NODES_PER_BUFFER`].
    pub fit_nodes_per_buffer: u64,
}

impl Default for BudgetOptions {
    fn default() -> Self {
        BudgetOptions {
            budget: 0,
            strategy: BEST.into(),
            profile: DeviceProfile::h200(),
            params: Params::default(),
            placement_time: None,
            cancel: None,
            effort: None,
            target_bisections: TARGET_BISECTIONS,
            fit_nodes_per_buffer: FIT_NODES_PER_BUFFER,
        }
    }
}

/// Why no plan fits.
#[derive(Debug, Error)]
pub enum BudgetError {
    /// A zero budget.
    #[error("the budget must be more than 0 bytes")]
    Zero,
    /// An unknown strategy name.
    #[error("unknown spill strategy {0:?} (known: {1})")]
    UnknownStrategy(String, String),
    /// The order is not a permutation of the ops.
    #[error("the order does not list every op once")]
    BadOrder,
    /// No strategy reaches the budget.
    #[error(
        "budget of {budget} bytes cannot be met: the smallest peak reached is {reached} bytes \
         (strategy {strategy}); no plan can go below {min_bytes} bytes ({why})"
    )]
    Infeasible {
        /// The budget asked.
        budget: u64,
        /// The smallest peak reached.
        reached: u64,
        /// The strategy that reached it.
        strategy: String,
        /// The per-op lower bound.
        min_bytes: u64,
        /// What sets it.
        why: String,
    },
    /// A placement problem was malformed (internal).
    #[error("placement: {0}")]
    Placement(#[from] PlacementError),
    /// A `--budget` argument (or HTTP `budget`) that is neither bytes nor a percentage in
    /// (0, 100].
    #[error(
        "budget {0:?} is not BYTES (a positive integer of 1 to 19 digits, no leading zero) or \
         PCT% (a percentage in (0, 100] such as 60% or 12.5%), written without spaces"
    )]
    Parse(String),
    /// A percentage (a number, as the zoo batch's `--budgets` gives them) that is not finite,
    /// not more than 0 or over 100.
    #[error(
        "budget {0} is not a percentage in (0, 100]: a percentage must be finite, more than 0 \
         and at most 100 (e.g. 60%)"
    )]
    Percent(String),
    /// The unconstrained planning failed.
    #[error(transparent)]
    Plan(#[from] crate::planner::PlanError),
    /// The emitted plan failed the validator (internal).
    #[error("internal error: budgeted plan is invalid: {0}")]
    Invalid(#[from] crate::validate::Violation),
    /// The stop flag ([`BudgetOptions::cancel`]: a user's cancel, or the pipeline's
    /// wall-clock cap) was raised before any plan fitted the budget.
    #[error(
        "planning under the budget of {budget} bytes was stopped (cancelled or out of time) \
         before any plan fitted it{}",
        reached_note(*.reached)
    )]
    Cancelled {
        /// The budget asked (bytes).
        budget: u64,
        /// The smallest peak reached before the stop (bytes), if any plan was built.
        reached: Option<u64>,
    },
}

fn reached_note(reached: Option<u64>) -> String {
    reached.map_or(String::new(), |r| {
        format!("; the smallest peak reached was {r} bytes")
    })
}

/// A budget as given: bytes, or a percentage of the unconstrained plan's peak.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BudgetSpec {
    /// Bytes.
    Bytes(u64),
    /// Percent of the unconstrained peak.
    Percent(f64),
}

/// Checks a budget percentage: finite, more than 0 and at most 100 (more than 100 % of the
/// unconstrained peak is no budget, and a huge one would saturate the bytes).
pub fn check_percent(p: f64) -> Result<f64, BudgetError> {
    if p.is_finite() && p > 0.0 && p <= 100.0 {
        Ok(p)
    } else {
        Err(BudgetError::Percent(format!("{}%", percent_text(p))))
    }
}

/// `p` for a message: plain, or in exponent form when plain would be unreadably long.
fn percent_text(p: f64) -> String {
    if p.is_finite() && p != 0.0 && !(1e-6..1e16).contains(&p.abs()) {
        format!("{p:e}")
    } else {
        format!("{p}")
    }
}

/// The grammar of a budget given as text, as the OpenAPI document states it: bytes (1 to 19
/// digits, no leading zero) or a percentage in (0, 100] (`60%`, `12.5%`, `.5%`, `100%`), no
/// spaces. [`BudgetSpec::parse`] accepts exactly these (and says why `0` is refused), but for
/// a percentage so small that it reads as 0 (hundreds of zeros after the point).
pub const BUDGET_TEXT_PATTERN: &str =
    r"^(?:[1-9][0-9]{0,18}|(?:[1-9][0-9]?(?:\.[0-9]+)?|0?\.[0-9]*[1-9][0-9]*|100(?:\.0+)?)%)$";

/// Whether `p` (a budget's text without its `%`) is a percentage as [`BUDGET_TEXT_PATTERN`]
/// writes it.
fn percent_text_ok(p: &str) -> bool {
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if let Some(zeros) = p.strip_prefix("100") {
        return zeros.is_empty()
            || zeros
                .strip_prefix('.')
                .is_some_and(|z| !z.is_empty() && z.bytes().all(|b| b == b'0'));
    }
    let (whole, frac) = match p.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (p, None),
    };
    match frac {
        Some(f) if whole.is_empty() || whole == "0" => digits(f) && f.bytes().any(|b| b != b'0'),
        _ => {
            digits(whole) && whole.len() <= 2 && !whole.starts_with('0') && frac.is_none_or(digits)
        }
    }
}

impl BudgetSpec {
    /// Parses `BYTES` or `PCT%` as [`BUDGET_TEXT_PATTERN`] writes them, the one grammar of
    /// every front end: zero is refused ([`BudgetError::Zero`]), and so is anything else the
    /// pattern does not match (spaces, signs, leading zeros, exponents, more than 100 %).
    pub fn parse(text: &str) -> Result<Self, BudgetError> {
        let bad = || BudgetError::Parse(text.to_string());
        if let Some(p) = text.strip_suffix('%') {
            if !percent_text_ok(p) {
                return Err(bad());
            }
            let v: f64 = p.parse().map_err(|_| bad())?;
            check_percent(v).map_err(|_| bad())?;
            return Ok(BudgetSpec::Percent(v));
        }
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        if text.bytes().all(|b| b == b'0') {
            return Err(BudgetError::Zero);
        }
        if text.starts_with('0') || text.len() > 19 {
            return Err(bad());
        }
        text.parse().map(BudgetSpec::Bytes).map_err(|_| bad())
    }
}

/// JSON form: a number of bytes, or a string `BYTES` / `PCT%` ([`BudgetSpec::parse`]).
impl Serialize for BudgetSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BudgetSpec::Bytes(b) => s.serialize_u64(*b),
            BudgetSpec::Percent(p) => s.serialize_str(&format!("{p}%")),
        }
    }
}

impl<'de> Deserialize<'de> for BudgetSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Negative(i64),
            Text(String),
            Float(f64),
        }
        match Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "budget: expected a number of bytes or a string BYTES or PCT% (e.g. \"60%\")",
            )
        })? {
            Raw::Bytes(0) => Err(serde::de::Error::custom(
                "budget: the budget must be more than 0 bytes",
            )),
            Raw::Bytes(b) => Ok(BudgetSpec::Bytes(b)),
            // An integer below zero is the text's error, not a float's.
            Raw::Negative(n) => Err(serde::de::Error::custom(BudgetError::Parse(n.to_string()))),
            Raw::Text(t) => BudgetSpec::parse(&t).map_err(serde::de::Error::custom),
            // Byte counts are integers (docs/FORMATS.md): `164.0` is refused as such.
            Raw::Float(x) => Err(serde::de::Error::custom(format!(
                "budget: invalid type: floating point `{x:?}`, expected u64 (a number of bytes \
                 is an integer; or a string BYTES or PCT%)"
            ))),
        }
    }
}

impl std::fmt::Display for BudgetSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BudgetSpec::Bytes(b) => write!(f, "{b}"),
            BudgetSpec::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl BudgetSpec {
    /// The budget in bytes for an unconstrained peak of `peak` (a percentage rounds down,
    /// to at least 1 byte).
    pub fn bytes(self, peak: u64) -> u64 {
        match self {
            BudgetSpec::Bytes(b) => b,
            BudgetSpec::Percent(p) => ((peak as f64 * p / 100.0).floor() as u64).max(1),
        }
    }
}

/// The op order of a plan: op indices by first exec.
pub fn order_of_plan(graph: &Graph, plan: &Plan) -> Vec<usize> {
    let ids = graph.op_indices();
    let mut seen = vec![false; graph.ops.len()];
    let mut order = Vec::with_capacity(graph.ops.len());
    for ins in &plan.instructions {
        if let Instruction::Exec { node, .. } = ins {
            if let Some(&k) = ids.get(node.as_str()) {
                if !std::mem::replace(&mut seen[k], true) {
                    order.push(k);
                }
            }
        }
    }
    order
}

/// Plans `graph` without a budget (`plan_opts`), then under `spec` on that plan's order
/// (in-place sharing is not used under a budget). The stats record the unconstrained peak.
/// A raised [`BudgetOptions::cancel`] stops both phases (module doc); pass the same token in
/// `plan_opts.cancel`.
pub fn plan_under_budget(
    graph: &Graph,
    spec: BudgetSpec,
    plan_opts: &crate::planner::PlanOptions,
    opts: &BudgetOptions,
) -> Result<Plan, BudgetError> {
    let free = crate::planner::plan(
        graph,
        &crate::planner::PlanOptions {
            inplace: false,
            ..plan_opts.clone()
        },
    )?;
    let budget = spec.bytes(free.stats.peak_bytes);
    let order = order_of_plan(graph, &free);
    let mut plan = plan_with_budget(
        graph,
        &order,
        &BudgetOptions {
            budget,
            ..opts.clone()
        },
    )?;
    if let Some(b) = plan.stats.budget.as_mut() {
        b.unconstrained_peak_bytes = free.stats.peak_bytes;
    }
    // The joint program may move ops: the method then names both steps.
    let moved = order_of_plan(graph, &plan) != order;
    plan.stats.order_method =
        free.stats
            .order_method
            .clone()
            .map(|m| if moved { format!("{m} + {JOINT}") } else { m });
    Ok(plan)
}

/// The least peak of buffers resident at once, alignment padding included
/// ([`memplan_solver::packed_bytes`]). Without it a bound misses the padding every placement
/// pays (vgg16.16.train at 40 %: the reached peak was 96 bytes over the bound, exactly the
/// padding of two outputs).
pub use memplan_solver::packed_bytes;

/// The least peak of `ts` (deduplicated by the caller) and a workspace of `workspace` bytes
/// resident at once ([`packed_bytes`]).
fn packed_tensors(graph: &Graph, ts: &[TensorId], workspace: u64) -> u64 {
    packed_bytes(
        ts.iter()
            .map(|&t| (graph.tensor(t).size, graph.tensor(t).alignment))
            .chain(std::iter::once((workspace, graph.alignment))),
    )
}

/// A lower bound on the peak of any plan on `order` and what sets it: the larger of the bytes
/// one op needs at once (inputs, outputs, workspace) and, at the last step, all graph outputs
/// (which must be resident at the end) plus the last op's other operands and workspace. Both
/// count the alignment padding any placement of those buffers pays ([`packed_bytes`]).
pub fn min_bytes(graph: &Graph, order: &[usize]) -> (u64, String) {
    let (op_bytes, op) = op_min_bytes(graph);
    let mut ts: Vec<TensorId> = graph
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| t.kind == TensorKind::Output)
        .map(|(i, _)| TensorId(i as u32))
        .collect();
    let outputs: u64 = ts.iter().map(|&t| graph.tensor(t).size).sum();
    let mut last_name = String::new();
    let mut workspace = 0;
    if let Some(&k) = order.last() {
        let last = &graph.ops[k];
        ts.extend(
            last.inputs
                .iter()
                .chain(&last.outputs)
                .copied()
                .filter(|&t| graph.tensor(t).kind != TensorKind::Weight),
        );
        workspace = last.workspace;
        last_name = last.name.clone();
    }
    ts.sort_unstable();
    ts.dedup();
    let end = packed_tensors(graph, &ts, workspace);
    if end > op_bytes {
        (
            end,
            format!(
                "at the last step, op {last_name:?}, every graph output must be resident \
                 besides its operands: {outputs} bytes of outputs + {} bytes of its other \
                 operands, workspace and alignment padding",
                end.saturating_sub(outputs)
            ),
        )
    } else {
        (
            op_bytes,
            format!("what op {op:?} alone needs: inputs + outputs + workspace"),
        )
    }
}

/// The largest bytes one op needs at once (with the alignment padding, [`packed_bytes`]) and
/// that op's name.
pub fn op_min_bytes(graph: &Graph) -> (u64, String) {
    let mut best = (0, String::new());
    for op in &graph.ops {
        let mut ts: Vec<TensorId> = op
            .inputs
            .iter()
            .chain(&op.outputs)
            .copied()
            .filter(|&t| graph.tensor(t).kind != TensorKind::Weight)
            .collect();
        ts.sort_unstable();
        ts.dedup();
        let b = packed_tensors(graph, &ts, op.workspace);
        if b > best.0 {
            best = (b, op.name.clone());
        }
    }
    best
}

/// A placed, emitted plan of one schedule.
#[derive(Clone)]
struct Built {
    plan: Plan,
    peak: u64,
    /// The heuristic portfolio's peak for the same buffers (above `peak` when the exact search
    /// fitted the budget, [`fit_budget`]).
    heuristic_peak: u64,
    /// What was placed; its graph is the one the plan refers to (the context's with the
    /// schedule's conv downgrades).
    residency: Residency,
}

/// The modelled times of a built plan, its base being the context graph's ops (so conv
/// downgrades count as overhead).
fn timing(ctx: &Ctx, built: &Built) -> Timing {
    Timing {
        base_us: ctx.prefix_us[ctx.steps()],
        step_us: simulate(&built.residency.graph, ctx, &built.plan).step_us,
    }
}

/// Plans `graph` on `order` (op indices, topological) under `opts.budget` (see the module
/// doc). The plan passes [`crate::validate`](fn@crate::validate) with the budget. Once [`BudgetOptions::cancel`]
/// is raised, no further strategy or attempt starts and the best fitting plan so far is
/// returned ([`BudgetError::Cancelled`] when none fitted).
pub fn plan_with_budget(
    graph: &Graph,
    order: &[usize],
    opts: &BudgetOptions,
) -> Result<Plan, BudgetError> {
    let started = Instant::now();
    if opts.budget == 0 {
        return Err(BudgetError::Zero);
    }
    let mut seen = vec![false; graph.ops.len()];
    if order.len() != graph.ops.len() || order.iter().any(|&k| k >= seen.len()) {
        return Err(BudgetError::BadOrder);
    }
    for &k in order {
        if std::mem::replace(&mut seen[k], true) {
            return Err(BudgetError::BadOrder);
        }
    }
    let all = registry();
    let with_joint = opts.strategy == BEST || opts.strategy == JOINT;
    let chosen: Vec<&dyn SpillStrategy> = if with_joint {
        all.iter().map(|s| s.as_ref()).collect()
    } else {
        match all.iter().find(|s| s.name() == opts.strategy) {
            Some(s) => vec![s.as_ref()],
            None => {
                return Err(BudgetError::UnknownStrategy(
                    opts.strategy.clone(),
                    strategy_names().join(", "),
                ))
            }
        }
    };
    let mut ctx = Ctx::new(graph, order, opts.profile.clone(), opts.params);
    ctx.cancel = opts.cancel.clone();
    ctx.effort = opts.effort;
    // With conv downgrades the floor is that of every conv at its least workspace.
    let mut floor = Sched::keep_all(&ctx);
    for (k, d) in ctx.downgrades.iter().enumerate() {
        if !d.is_empty() {
            floor.algo.insert(k, d.len() - 1);
        }
    }
    let (min, why) = if floor.algo.is_empty() {
        min_bytes(graph, order)
    } else {
        min_bytes(&floor.graph(&ctx), order)
    };
    let mut tried = Vec::new();
    let mut best: Option<(Built, f64, &'static str, u64, usize)> = None;
    let mut reached: Option<(u64, &'static str)> = None;
    let mut note = None;
    // Each strategy's outcome, so a fallback already run (the sweep under `best`) is not
    // run again.
    let mut outcomes: BTreeMap<&'static str, Outcome> = BTreeMap::new();
    for strategy in chosen {
        if ctx.cancelled() {
            break;
        }
        let (mut fitted, mut lowest, attempts) = match outcomes.get(strategy.name()) {
            Some(o) => o.clone(),
            None => run_strategy(&ctx, strategy, opts)?,
        };
        if attempts == 0 {
            break; // stopped before its first attempt
        }
        outcomes.insert(strategy.name(), (fitted.clone(), lowest, attempts));
        let mut solver = strategy.note();
        let mut overhead = fitted.as_ref().map(|(b, _)| timing(&ctx, b).overhead_pct());
        // A strategy that refines another (the integer program, the sweep) is never worse
        // than it: the other's plan is kept when it fits with a lower simulated overhead.
        if let Some(base) = strategy.fallback().filter(|_| !ctx.cancelled()) {
            let (f, l, a) = match outcomes.get(base.name()) {
                Some(o) => o.clone(),
                None => run_strategy(&ctx, base.as_ref(), opts)?,
            };
            outcomes.insert(base.name(), (f.clone(), l, a));
            lowest = lowest.min(l);
            if let Some((b, t)) = f {
                let o = timing(&ctx, &b).overhead_pct();
                if overhead.is_none_or(|mine| o < mine) {
                    fitted = Some((b, t));
                    overhead = Some(o);
                    solver = Some(format!(
                        "{}; {}'s plan kept (lower simulated overhead)",
                        solver.unwrap_or_default(),
                        base.name()
                    ));
                }
            }
        }
        if reached.is_none_or(|(r, _)| lowest < r) {
            reached = Some((lowest, strategy.name()));
        }
        match (fitted, overhead) {
            (Some((built, target)), Some(overhead)) => {
                tried.push(TriedStat {
                    name: strategy.name().into(),
                    peak_bytes: built.peak,
                    overhead_pct: overhead,
                    fits: true,
                    solver: solver.clone(),
                });
                if best.as_ref().is_none_or(|b| overhead < b.1) {
                    best = Some((built, overhead, strategy.name(), target, attempts));
                    note = solver;
                }
            }
            _ => tried.push(TriedStat {
                name: strategy.name().into(),
                peak_bytes: lowest,
                overhead_pct: f64::NAN,
                fits: false,
                solver,
            }),
        }
    }
    if with_joint && !ctx.cancelled() {
        if let Some((inc, inc_over, _, target, _)) = best.as_ref() {
            let (joint, stat) = run_joint(&ctx, inc, *target, *inc_over, opts)?;
            if let Some((built, over)) = joint {
                note = stat.solver.clone();
                best = Some((built, over, JOINT, *target, 1));
            }
            tried.push(stat);
        }
    }
    let Some((built, _, name, target, attempts)) = best else {
        if ctx.cancelled() {
            return Err(BudgetError::Cancelled {
                budget: opts.budget,
                reached: reached.map(|r| r.0).filter(|&r| r < u64::MAX),
            });
        }
        let (reached, strategy) = reached.unwrap_or((u64::MAX, "none"));
        return Err(BudgetError::Infeasible {
            budget: opts.budget,
            reached,
            strategy: strategy.into(),
            min_bytes: min,
            why,
        });
    };
    let timing = timing(&ctx, &built);
    let mut plan = built.plan;
    let chosen = built.residency.graph;
    crate::validate::validate(&chosen, &plan, Some(opts.budget))?;
    let mut stat = BudgetStat {
        budget_bytes: opts.budget,
        strategy: name.into(),
        target_bytes: target,
        attempts,
        device: opts.profile.name.clone(),
        base_step_us: timing.base_us,
        step_us: timing.step_us,
        overhead_us: timing.step_us - timing.base_us,
        overhead_pct: timing.overhead_pct(),
        min_bytes: min,
        algo_mix: crate::conv_algo::algo_mix(&chosen),
        solver: note,
        tried: if with_joint {
            tried
                .into_iter()
                .map(|t| TriedStat {
                    overhead_pct: if t.overhead_pct.is_finite() {
                        t.overhead_pct
                    } else {
                        -1.0
                    },
                    ..t
                })
                .collect()
        } else {
            Vec::new()
        },
        ..BudgetStat::default()
    };
    for (k, (a, b)) in graph.ops.iter().zip(&chosen.ops).enumerate() {
        if a.workspace != b.workspace {
            stat.algo_downgrades += 1;
            stat.algo_downgrade_us += opts.profile.op_us(&chosen, b) - ctx.step_us[ctx.step_of[k]];
        }
    }
    let mut execs = vec![0usize; graph.ops.len()];
    let op_ids = graph.op_indices();
    let tensor_ids = graph.tensor_ids();
    for ins in &plan.instructions {
        match ins {
            Instruction::SpillOut { tensor, .. } => {
                stat.spills += 1;
                stat.spilled_out_bytes += size_of(graph, &tensor_ids, tensor);
            }
            Instruction::SpillIn { tensor, .. } => {
                stat.spilled_in_bytes += size_of(graph, &tensor_ids, tensor)
            }
            Instruction::Exec { node, .. } => {
                if let Some(&k) = op_ids.get(node.as_str()) {
                    execs[k] += 1;
                    if execs[k] > 1 {
                        stat.recomputed_ops += 1;
                        stat.recompute_flops += graph.ops[k].flops.unwrap_or(0.0);
                        stat.recompute_us += opts.profile.op_us(&chosen, &chosen.ops[k]);
                    }
                }
            }
            _ => {}
        }
    }
    plan.stats.method = format!("budget:{name}");
    plan.stats.budget = Some(stat);
    plan.stats.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(plan)
}

/// Runs the joint program ([`joint`]) from the incumbent `inc` (fitted at `target`, with
/// `inc_over` % simulated overhead). Every window solution is placed, emitted and simulated
/// here; one is kept only when it fits the budget with a strictly lower simulated overhead.
/// Returns the final plan and its overhead when it also passes the validator, and the line
/// for `stats.budget.tried`.
fn run_joint(
    ctx: &Ctx,
    inc: &Built,
    target: u64,
    inc_over: f64,
    opts: &BudgetOptions,
) -> Result<(Option<(Built, f64)>, TriedStat), BudgetError> {
    let jopts = joint::JointOptions::for_ctx(ctx);
    let mut report = joint::JointReport::default();
    let mut reached = inc.peak;
    let mut kept: Option<(Built, f64)> = None;
    let mut score = |jctx: &Ctx, res: &Residency| -> Option<f64> {
        let built = build(jctx, res, opts).ok()?;
        reached = reached.min(built.peak);
        if built.peak > opts.budget {
            return None;
        }
        let over = timing(jctx, &built).overhead_pct();
        if kept.as_ref().is_none_or(|k| over < k.1) {
            kept = Some((built, over));
        }
        Some(over)
    };
    let improved = joint::improve(
        ctx,
        &inc.residency,
        target,
        &jopts,
        &mut report,
        &mut score,
        inc_over,
    );
    if !report.whole {
        // Decomposed: the eviction bound over every order, against the final plan's cost.
        report.plan_cost_us = Some(match &improved {
            Some(j) => {
                let jctx = Ctx::new(ctx.graph, &j.order, ctx.profile.clone(), ctx.params);
                joint::estimated_cost(&jctx, &j.residency)
            }
            None => joint::estimated_cost(ctx, &inc.residency),
        });
        report.bound_us = Some(joint::eviction_bound(ctx, opts.budget));
    }
    let mut solver = report.note();
    let out = match (improved, kept) {
        (Some(_), Some((b, over))) if over < inc_over => {
            match crate::validate::validate(&b.residency.graph, &b.plan, Some(opts.budget)) {
                Ok(_) => Some((b, over)),
                Err(v) => {
                    solver.push_str(&format!(
                        " (its plan failed the validator, {v}; incumbent kept)"
                    ));
                    None
                }
            }
        }
        _ => {
            solver.push_str(" (incumbent kept)");
            None
        }
    };
    let stat_over = out.as_ref().map_or(inc_over, |o| o.1);
    Ok((
        out,
        TriedStat {
            name: JOINT.into(),
            peak_bytes: reached,
            overhead_pct: stat_over,
            fits: true,
            solver: Some(solver),
        },
    ))
}

/// The size of the tensor called `name` (0 when there is none), by the name index `ids`
/// ([`Graph::tensor_ids`]: a lookup per instruction must not scan the tensors).
fn size_of(graph: &Graph, ids: &HashMap<&str, TensorId>, name: &str) -> u64 {
    ids.get(name).map_or(0, |&t| graph.tensor(t).size)
}

/// Places the device buffers of one schedule (returns the placement and the heuristics'
/// peak): the heuristic portfolio, then, when its peak
/// is over the budget but the buffers' aligned LOAD is not, the exact search asked to fit the
/// budget within [`fit_nodes`] `×` effort nodes (the stop flag on top). A fit found there
/// saves the strategy an attempt at a lower target (more spills and recomputes), and lets the
/// joint program keep a window whose heuristic placement misses the budget by a few bytes.
fn fit_budget(
    device: &PlacementProblem,
    opts: &BudgetOptions,
    limits: &Limits,
) -> Result<(memplan_solver::Placement, u64), BudgetError> {
    let heur = place::heuristics(device, limits)?;
    let peak = heur.stats.objective;
    if peak <= opts.budget || opts.fit_nodes_per_buffer == 0 || device.aligned_load() > opts.budget
    {
        return Ok((heur.placement, peak));
    }
    let capped = PlacementProblem {
        capacity: Some(opts.budget),
        ..device.clone()
    };
    let work = place::RefineWork {
        exact_nodes: fit_nodes(opts.fit_nodes_per_buffer, device.buffers.len())
            .saturating_mul(opts.effort.unwrap_or(1).max(1)),
        ilp_models: 0,
        ilp_nodes_per_model: 0,
        exact_work: None,
    };
    let out = place::refine_with(&capped, &heur, limits, Some(work))?;
    Ok((
        if out.fits {
            out.placement
        } else {
            heur.placement
        },
        peak,
    ))
}

/// Exact search nodes (the sum of its runs' node limits, [`memplan_solver::exact::solve`])
/// per device buffer and unit of effort that `fit_budget` gives a schedule whose heuristic
/// placement misses the budget, up to [`FIT_WORK`] `/` buffers. On random DAGs of 200–300
/// ops at 60 % the fits that succeed take 1,600–850,000 nodes (5–1,700 per buffer).
pub const FIT_NODES_PER_BUFFER: u64 = 2048;

/// Cap on nodes `×` buffers of one budget fit ([`fit_nodes`]): a node costs about as many
/// buffers' work, so a 2,700-buffer schedule (densenet121 training at 60 %) gets 49,000
/// nodes (seconds) where 2,048 per buffer would take a minute to fail.
pub const FIT_WORK: u64 = 1 << 27;

/// The exact search nodes of one budget fit of `buffers` buffers at `per_buffer` nodes per
/// buffer (effort 1): `min(per_buffer × buffers, FIT_WORK / buffers)`.
pub fn fit_nodes(per_buffer: u64, buffers: usize) -> u64 {
    let n = buffers.max(1) as u64;
    per_buffer.saturating_mul(n).min(FIT_WORK / n)
}

/// What a buffer of the device placement problem is.
#[derive(Debug, Clone, Copy)]
enum Role {
    Resident(schedule::Interval),
    Workspace { step: usize },
    RecomputeWorkspace { step: usize, tensor: TensorId },
}

/// What one strategy reached: its fitting plan and target (if any), the lowest peak it
/// reached (bytes; `u64::MAX` when it built nothing) and the attempts made.
type Outcome = (Option<(Built, u64)>, u64, usize);

/// Runs one strategy with adaptive targets ([`Outcome`]). Stops before the next attempt
/// once [`Ctx::cancel`] is raised.
fn run_strategy(
    ctx: &Ctx,
    strategy: &dyn SpillStrategy,
    opts: &BudgetOptions,
) -> Result<Outcome, BudgetError> {
    let mut target = opts.budget;
    let mut lowest = u64::MAX;
    let mut attempts = 0;
    let mut tried_zero = false;
    let mut last_over = opts.budget;
    while attempts < MAX_ATTEMPTS {
        if ctx.cancelled() {
            break;
        }
        attempts += 1;
        let built = attempt(ctx, strategy, opts, target)?;
        lowest = lowest.min(built.peak);
        if built.peak <= opts.budget {
            let over_target = (target < opts.budget).then_some(last_over);
            let fit = (built, target);
            return refine_target(ctx, strategy, opts, fit, over_target, lowest, attempts);
        }
        last_over = target;
        if !strategy.adapts() || tried_zero {
            break;
        }
        target = target.saturating_sub(cut(built.peak, opts.budget));
        if target == 0 || attempts + 1 == MAX_ATTEMPTS {
            // The last try evicts everything the strategy can: the smallest it reaches.
            target = 0;
            tried_zero = true;
        }
    }
    Ok((None, lowest, attempts))
}

/// Once an adaptive strategy fitted at target `fit.1`: where the exact search made the fit
/// (the heuristics' placement missed the budget), one attempt at the target the heuristics
/// alone would have tried next; then, where a target `over` above `fit.1` did not fit,
/// bisection between the two for at most [`BudgetOptions::target_bisections`] more attempts
/// (stopping once they are within 0.5 % of the budget): a higher target spills less, and the
/// first cut may have overshot (it lowers the target by the placement's whole excess). Keeps
/// the fitting plan with the lowest simulated overhead.
fn refine_target(
    ctx: &Ctx,
    strategy: &dyn SpillStrategy,
    opts: &BudgetOptions,
    fit: (Built, u64),
    over: Option<u64>,
    mut lowest: u64,
    mut attempts: usize,
) -> Result<Outcome, BudgetError> {
    if !strategy.adapts() {
        return Ok((Some(fit), lowest, attempts));
    }
    let mut lo = fit.1;
    // The exact search fitted what the heuristics' placement missed: the heuristics alone
    // would have gone on at a lower target, which may spill more but cost less (a strategy's
    // overhead is not monotone in its target); that attempt is made too.
    let below = lo.saturating_sub(cut(fit.0.heuristic_peak, opts.budget));
    let probe = fit.0.heuristic_peak > opts.budget && below > 0 && !ctx.cancelled();
    let over_fit = timing(ctx, &fit.0).overhead_pct();
    let mut best = (fit.0, fit.1, over_fit);
    if probe {
        attempts += 1;
        try_target(ctx, strategy, opts, below, &mut best, &mut lowest)?;
    }
    if let Some(mut hi) = over {
        for _ in 0..opts.target_bisections {
            if ctx.cancelled() || hi - lo <= (opts.budget / 200).max(1) {
                break;
            }
            let mid = lo + (hi - lo) / 2;
            attempts += 1;
            if try_target(ctx, strategy, opts, mid, &mut best, &mut lowest)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    Ok((Some((best.0, best.1)), lowest, attempts))
}

/// One attempt of `strategy` at `target`: its schedule, placed and emitted.
fn attempt(
    ctx: &Ctx,
    strategy: &dyn SpillStrategy,
    opts: &BudgetOptions,
    target: u64,
) -> Result<Built, BudgetError> {
    build(
        ctx,
        &Residency::of_sched(ctx, &strategy.schedule(ctx, target)),
        opts,
    )
}

/// An [`attempt`] at `target` for [`refine_target`]: whether its plan fits the budget; a
/// fitting plan replaces `best` (plan, target, simulated overhead %) when it is cheaper.
fn try_target(
    ctx: &Ctx,
    strategy: &dyn SpillStrategy,
    opts: &BudgetOptions,
    target: u64,
    best: &mut (Built, u64, f64),
    lowest: &mut u64,
) -> Result<bool, BudgetError> {
    let built = attempt(ctx, strategy, opts, target)?;
    *lowest = (*lowest).min(built.peak);
    if built.peak > opts.budget {
        return Ok(false);
    }
    let over = timing(ctx, &built).overhead_pct();
    if over < best.2 {
        *best = (built, target, over);
    }
    Ok(true)
}

/// Most extra attempts `refine_target` makes between a fitting target and the failing one
/// above it.
pub const TARGET_BISECTIONS: usize = 3;

/// How far an adaptive strategy lowers its target after a placement peaked at `peak` over
/// `budget`: the excess, at least 2 % of the budget (and a byte).
fn cut(peak: u64, budget: u64) -> u64 {
    peak.saturating_sub(budget).max(budget / 50).max(1)
}

/// Places a residency's buffers and host copies and emits the plan on `ctx`'s order.
fn build(ctx: &Ctx, res: &Residency, opts: &BudgetOptions) -> Result<Built, BudgetError> {
    let chosen = &res.graph;
    let graph = ctx.graph;
    let n = ctx.steps();
    let mut roles = Vec::new();
    let mut buffers = Vec::new();
    let lifetime = |a: usize, b: usize| Lifetime::new(a as u64, b.max(a + 1) as u64);
    let mut host = Vec::new(); // (tensor, spill step a, back step)
    let mut host_buffers = Vec::new();
    for i in 0..graph.tensors.len() {
        let t = TensorId(i as u32);
        let tensor = graph.tensor(t);
        let ivs = &res.intervals[i];
        for w in ivs.windows(2) {
            if w[0].how_end == End::SpillOut {
                host.push((t, w[0].end - 1));
                host_buffers.push(Buffer {
                    lifetime: lifetime(w[0].end, w[1].start + 1),
                    size: tensor.size,
                    alignment: tensor.alignment,
                });
            }
        }
        for &iv in ivs {
            roles.push(Role::Resident(iv));
            buffers.push(Buffer {
                lifetime: lifetime(iv.start, iv.end),
                size: tensor.size,
                alignment: tensor.alignment,
            });
        }
    }
    for (s, &k) in ctx.order.iter().enumerate() {
        let w = res.workspace[k];
        if w > 0 {
            roles.push(Role::Workspace { step: s });
            buffers.push(Buffer {
                lifetime: lifetime(s, s + 1),
                size: w,
                alignment: graph.alignment,
            });
        }
    }
    let recomputes = &res.recomputes;
    for &(b, p, t) in recomputes {
        let w = res.workspace[p];
        if w > 0 {
            roles.push(Role::RecomputeWorkspace { step: b, tensor: t });
            buffers.push(Buffer {
                lifetime: lifetime(b, b + 1),
                size: w,
                alignment: graph.alignment,
            });
        }
    }
    // With an effort, the heuristics' own (deterministic) caps only; the stop flag either
    // way (a stopped placement is still valid, only its peak may be higher).
    let budget = Limits {
        time: opts.placement_time.filter(|_| opts.effort.is_none()),
        nodes: None,
        cancel: opts.cancel.clone(),
    };
    let device = PlacementProblem::new(buffers.clone());
    let (placed, heuristic_peak) = fit_budget(&device, opts, &budget)?;
    let host_problem = PlacementProblem::new(host_buffers.clone());
    let host_placed = if host_buffers.is_empty() {
        Default::default()
    } else {
        place::heuristics(&host_problem, &budget)?.placement
    };
    let host_bytes = host_buffers
        .iter()
        .zip(&host_placed.offsets)
        .map(|(b, &o)| o + b.size)
        .max()
        .unwrap_or(0);
    let host_at: BTreeMap<(TensorId, usize), u64> = host
        .iter()
        .zip(&host_placed.offsets)
        .map(|(&k, &o)| (k, o))
        .collect();

    // Per-step instruction groups.
    let mut pre_in: Vec<Vec<Instruction>> = vec![Vec::new(); n];
    let mut births: Vec<BTreeMap<TensorId, u64>> = vec![BTreeMap::new(); n];
    let mut rc_at: BTreeMap<(usize, TensorId), u64> = BTreeMap::new();
    let mut post: Vec<Vec<Instruction>> = vec![Vec::new(); n];
    let mut ws_at = vec![None; n];
    let mut rc_ws: BTreeMap<(usize, TensorId), u64> = BTreeMap::new();
    let mut peak = 0u64;
    for ((role, buf), &off) in roles.iter().zip(&buffers).zip(&placed.offsets) {
        peak = peak.max(off + buf.size);
        match *role {
            Role::Workspace { step } => ws_at[step] = Some(off),
            Role::RecomputeWorkspace { step, tensor } => {
                rc_ws.insert((step, tensor), off);
            }
            Role::Resident(iv) => {
                let name = graph.tensor(iv.tensor).name.clone();
                match iv.how_start {
                    Start::Birth => {
                        births[iv.start].insert(iv.tensor, off);
                    }
                    Start::Input => pre_in[iv.start].push(Instruction::Alloc {
                        tensor: name.clone(),
                        offset: off,
                        mem_id: None,
                        inplace_of: None,
                    }),
                    Start::SpillIn => pre_in[iv.start].push(Instruction::SpillIn {
                        stream: None,
                        tensor: name.clone(),
                        offset: off,
                        mem_id: None,
                    }),
                    Start::Recompute => {
                        rc_at.insert((iv.start, iv.tensor), off);
                    }
                }
                let last = iv.end - 1;
                match iv.how_end {
                    End::Stay => {}
                    End::Free => post[last].push(Instruction::Free {
                        stream: None,
                        tensor: name,
                    }),
                    End::SpillOut => post[last].push(Instruction::SpillOut {
                        stream: None,
                        tensor: name,
                        host_offset: host_at.get(&(iv.tensor, last)).copied().unwrap_or(0),
                    }),
                }
            }
        }
    }
    let mut ins = Vec::new();
    let mut rc = recomputes.iter().peekable();
    for (s, &k) in ctx.order.iter().enumerate() {
        ins.append(&mut pre_in[s]);
        while let Some(&&(b, p, t)) = rc.peek() {
            if b != s {
                break;
            }
            rc.next();
            ins.push(Instruction::Alloc {
                tensor: graph.tensor(t).name.clone(),
                offset: rc_at.get(&(b, t)).copied().unwrap_or(0),
                mem_id: None,
                inplace_of: None,
            });
            ins.push(Instruction::Exec {
                stream: None,
                node: graph.ops[p].name.clone(),
                workspace_offset: rc_ws.get(&(b, t)).copied(),
                algo: crate::plan::algo_attr(&chosen.ops[p]),
            });
        }
        let op = &graph.ops[k];
        for &t in &op.outputs {
            if let Some(&off) = births[s].get(&t) {
                ins.push(Instruction::Alloc {
                    tensor: graph.tensor(t).name.clone(),
                    offset: off,
                    mem_id: None,
                    inplace_of: None,
                });
            }
        }
        ins.push(Instruction::Exec {
            stream: None,
            node: op.name.clone(),
            workspace_offset: ws_at[s],
            algo: crate::plan::algo_attr(&chosen.ops[k]),
        });
        ins.append(&mut post[s]);
    }
    let mut plan = Plan::new(graph, ins, peak, host_bytes);
    let load = res.live(ctx).into_iter().max().unwrap_or(0);
    plan.stats.lower_bound_bytes = load;
    plan.stats.load_bytes = Some(load);
    // LOAD of the spilled schedule bounds every placement of it (workspaces included), so the
    // gap is that of the placement, as for an unbudgeted plan.
    plan.stats.gap = Some(PlanStats::gap_of(peak, load));
    Ok(Built {
        plan,
        peak,
        heuristic_peak,
        residency: res.clone(),
    })
}

/// Modelled times of a plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// The ops' times summed, each op once (µs).
    pub base_us: f64,
    /// When the compute stream finishes (µs).
    pub step_us: f64,
}

impl Timing {
    /// Overhead as a percentage of the base time.
    pub fn overhead_pct(&self) -> f64 {
        if self.base_us > 0.0 {
            (self.step_us - self.base_us) / self.base_us * 100.0
        } else {
            0.0
        }
    }
}

/// Simulates the plan's compute stream and its two copy streams (see the module doc).
pub fn simulate(graph: &Graph, ctx: &Ctx, plan: &Plan) -> Timing {
    let op_ids = graph.op_indices();
    // By name through an index: a scan of the tensors per instruction made this quadratic
    // (seconds on a 20,000-op chain, after the time cap had stopped the search).
    let tensor_ids = graph.tensor_ids();
    let nt = graph.tensors.len();
    let mut range: Vec<Option<(u64, u64)>> = vec![None; nt];
    let mut ready = vec![0f64; nt];
    let mut touched = vec![0f64; nt];
    let mut on_host = vec![0f64; nt];
    // Ranges released and when they become reusable.
    let mut released: Vec<(u64, u64, f64)> = Vec::new();
    let wait = |released: &mut Vec<(u64, u64, f64)>, lo: u64, hi: u64| -> f64 {
        let mut w = 0f64;
        released.retain(|&(a, b, t)| {
            if a < hi && lo < b {
                w = w.max(t);
            }
            !(lo <= a && b <= hi)
        });
        w
    };
    let (mut tc, mut d2h, mut h2d, mut gate) = (0f64, 0f64, 0f64, 0f64);
    let mut base = 0f64;
    let mut ran = vec![false; graph.ops.len()];
    for ins in &plan.instructions {
        match ins {
            // Single-stream timing: events order nothing here.
            Instruction::RecordEvent { .. } | Instruction::WaitEvent { .. } => {}
            Instruction::Alloc { tensor, offset, .. } => {
                if let Some(&t) = tensor_ids.get(tensor.as_str()) {
                    let hi = offset + graph.tensor(t).size;
                    let w = wait(&mut released, *offset, hi);
                    gate = gate.max(w);
                    range[t.index()] = Some((*offset, hi));
                    ready[t.index()] = w;
                }
            }
            Instruction::Free { tensor, .. } => {
                if let Some(&t) = tensor_ids.get(tensor.as_str()) {
                    if let Some((lo, hi)) = range[t.index()].take() {
                        released.push((lo, hi, touched[t.index()]));
                    }
                }
            }
            Instruction::SpillOut { tensor, .. } => {
                if let Some(&t) = tensor_ids.get(tensor.as_str()) {
                    let i = t.index();
                    let start = d2h.max(ready[i]);
                    d2h = start + ctx.profile.d2h_us(graph.tensor(t).size);
                    on_host[i] = d2h;
                    if let Some((lo, hi)) = range[i].take() {
                        released.push((lo, hi, d2h.max(touched[i])));
                    }
                }
            }
            Instruction::SpillIn { tensor, offset, .. } => {
                if let Some(&t) = tensor_ids.get(tensor.as_str()) {
                    let i = t.index();
                    let hi = offset + graph.tensor(t).size;
                    let start = h2d.max(on_host[i]).max(wait(&mut released, *offset, hi));
                    h2d = start + ctx.profile.h2d_us(graph.tensor(t).size);
                    range[i] = Some((*offset, hi));
                    ready[i] = h2d;
                    touched[i] = h2d;
                }
            }
            Instruction::Exec {
                node,
                workspace_offset,
                ..
            } => {
                let Some(&k) = op_ids.get(node.as_str()) else {
                    continue;
                };
                let op = &graph.ops[k];
                let us = ctx.profile.op_us(graph, op);
                if !std::mem::replace(&mut ran[k], true) {
                    base += us;
                }
                let mut start = tc.max(gate);
                for &t in &op.inputs {
                    start = start.max(ready[t.index()]);
                }
                let ws = workspace_offset.map(|w| (w, w + op.workspace));
                if let Some((lo, hi)) = ws {
                    start = start.max(wait(&mut released, lo, hi));
                }
                let end = start + us;
                tc = end;
                gate = 0.0;
                for &t in op.inputs.iter().chain(&op.outputs) {
                    touched[t.index()] = end;
                }
                for &t in &op.outputs {
                    ready[t.index()] = end;
                }
                if let Some((lo, hi)) = ws {
                    released.push((lo, hi, end));
                }
            }
        }
    }
    let _ = h2d;
    Timing {
        base_us: base,
        step_us: tc,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod limits_tests;
