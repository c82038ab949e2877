//! The planning pipeline: graph → order problem → candidate orders (listed, and with
//! `--order auto` the order heuristics' best, then with strategy `ilp`/`auto` the order integer
//! program's, warm-started from it) → buffer lifetimes → heuristic placement portfolio per
//! candidate → (strategies `ilp`/`auto`) the exact placement search and the HiGHS placement
//! model on the candidates, best first, within the time limit → plan. The plan with the lowest
//! peak wins (ties keep the listed order). Every emitted plan is replayed by the validator in
//! debug builds.
//!
//! **Time split** under a limit `T` (`--order auto`): the heuristics run first exactly as
//! with strategy `heuristic` (so the solving strategies are never worse); the order program,
//! warm-started from the heuristics' best order, stops by [`ORDER_ILP_SHARE`]`·T` (strategy
//! `ilp`: [`ILP_FOCUS_ILP_SHARE`]`·T`); the exact placement gets the rest.
//!
//! **Bound.** For `--order auto` the reported lower bound holds for every order: the maximum
//! of the order-independent bound tightened by alignment (`order::bound::aligned_order_bound`:
//! aligned offsets lose bytes between buffers alive together) and, when the order program
//! modelled the whole graph, its proven dual bound (not with `--inplace`, which the program
//! does not model). For `--order given` it is the placement's bound for that order (LOAD
//! tightened by alignment, or better).

use crate::graph::{Graph, GraphError};
use crate::plan::{emit, MemberStat, Plan, PlanStatus};
use memplan_solver::order::program::{optimise_order, OrderIlpOptions, OrderIlpOutcome};
use memplan_solver::order::{
    self, lifetimes, LifetimeOptions, OrderLifetimes, OrderProblem, OrderResult,
};
use memplan_solver::placement::step::{self as place, PlaceOutcome};
use memplan_solver::{CancelToken, Limits, PlacementError, ProgressFn, SolveStats, SolveStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Which op orders to consider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderMode {
    /// The listed order (made topological if needed).
    Given,
    /// The listed order and the memory-aware order heuristics; keep the best plan.
    #[default]
    Auto,
}

/// Which solvers to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Heuristics only (fast).
    Heuristic,
    /// Like [`Strategy::Auto`] with most of the time for the order program: it stops by
    /// [`ILP_FOCUS_ILP_SHARE`] of the limit, leaving less to the exact placement.
    Ilp,
    /// Heuristics, then the order program (until [`ORDER_ILP_SHARE`] of the limit) and the
    /// exact placement; the best plan among the listed, heuristic and program orders wins.
    #[default]
    Auto,
}

impl OrderMode {
    /// Every order mode, in the order the CLI and the HTTP service list them.
    pub const ALL: [OrderMode; 2] = [OrderMode::Given, OrderMode::Auto];

    /// Stable lower-case name (CLI `--order`, HTTP `order`).
    pub fn name(self) -> &'static str {
        match self {
            OrderMode::Given => "given",
            OrderMode::Auto => "auto",
        }
    }

    /// One-line description for help texts and API documentation.
    pub fn about(self) -> &'static str {
        match self {
            OrderMode::Given => "the listed order (made topological if needed)",
            OrderMode::Auto => {
                "the listed order and the memory-aware order heuristics; keep the best plan"
            }
        }
    }

    /// The mode called `name`, if any.
    pub fn from_name(name: &str) -> Option<OrderMode> {
        OrderMode::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl Strategy {
    /// Every strategy, in the order the CLI and the HTTP service list them.
    pub const ALL: [Strategy; 3] = [Strategy::Heuristic, Strategy::Ilp, Strategy::Auto];

    /// Stable lower-case name (CLI `--strategy`, HTTP `strategy`).
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Heuristic => "heuristic",
            Strategy::Ilp => "ilp",
            Strategy::Auto => "auto",
        }
    }

    /// One-line description for help texts and API documentation.
    pub fn about(self) -> &'static str {
        match self {
            Strategy::Heuristic => "heuristics only (fast)",
            Strategy::Ilp => {
                "heuristics, then the order integer program (HiGHS) with most of the time \
                 limit, then exact placement"
            }
            Strategy::Auto => {
                "heuristics, then the order integer program and the exact placement within \
                 the time limit; the best plan wins"
            }
        }
    }

    /// The strategy called `name`, if any.
    pub fn from_name(name: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// One unit of effort ([`PlanOptions::effort`]): exact placement search nodes for the first
/// candidate order refined (the later ones get [`EFFORT_EXACT_NODES_LATER`]). A node costs
/// about 5–15 µs on graphs of 150–2,500 ops (2 cores), so a search that uses them all takes
/// 10–30 s; most stop far earlier, at their order's LOAD or where the bisection closes (the
/// zoo's graphs need at most 62,000 nodes, at most 1.7 s). Chosen on random DAGs (README,
/// "Effort and limits"): 2,000 nodes left 10 of 20 such graphs above what 500,000 reach (five
/// by 2.3–7.5 %), for 7 % more time in all; since the order program's narrow windows (lower
/// LOADs, placed less easily), 500,000 left 7 of 20 others 0.7–3.5 % above what 2,000,000
/// reach.
pub const EFFORT_EXACT_NODES: u64 = 2_000_000;

/// One unit of effort: exact placement search nodes for each candidate order refined after
/// the first ([`EFFORT_EXACT_NODES`] go to the first, the one with the lowest heuristic peak).
/// The later candidates rarely win (on 20 random DAGs, two had a second candidate to refine:
/// with 2,000,000 nodes each it won once, by 0.03 %, and reached the same peak with 500,000),
/// and each full search costs 10–13 s there.
pub const EFFORT_EXACT_NODES_LATER: u64 = 500_000;

/// One unit of effort: exact placement search work for the first candidate order refined
/// (`ExactOptions::work_limit`, on top of [`EFFORT_EXACT_NODES`]; units of what the search
/// visits, 1.5–3.5 ns each on two cores on every graph measured, where a node costs 2 to
/// over 100 µs with the graph's width), in all: half for each of the two search lanes, which
/// two threads run side by side. Without it a 500-op graph whose ops read any of the
/// last 400 tensors ran its 1.66 M nodes in 45 s (the plan in 54 s, so that under load the
/// 60 s cap bound and the plan depended on the machine). The zoo's searches use at most
/// 0.8·10⁹, random DAGs whose ops read the last 60 tensors at most 3.1·10⁹ (README,
/// "Effort and limits").
pub const EFFORT_EXACT_WORK: u64 = 8_000_000_000;

/// One unit of effort: exact placement search work for each later candidate order (a
/// quarter of [`EFFORT_EXACT_WORK`], as [`EFFORT_EXACT_NODES_LATER`] is of the nodes).
pub const EFFORT_EXACT_WORK_LATER: u64 = 2_000_000_000;

/// One unit of effort: HiGHS placement models per candidate order.
pub const EFFORT_PLACEMENT_ILP_MODELS: usize = 2;

/// Branch-and-bound nodes per HiGHS placement model.
pub const EFFORT_PLACEMENT_ILP_NODES: u64 = 200;

/// One unit of effort: branch-and-bound nodes of the order program when it models the whole
/// graph (up to 64 ops; it then proves a bound for every order). Its root LP, not the node
/// count, dominates the time (about 2.5 s on alexnet.64.train, 2 cores).
pub const EFFORT_ORDER_WHOLE_NODES: u64 = 2_000;

/// One unit of effort: work cap of one order-program model, in LP iterations × the model's
/// nonzeros (`OrderIlpOptions::work_per_model`; 4.5–6.5 ns a unit on one core of a 2-core
/// machine, so about 5 s, but up to 13 ns, 14 s, where the cuts HiGHS adds make its iterations
/// dearer than the model's nonzeros say, and an LP in progress finishes past the cap). The
/// node caps do not bound HiGHS' root node: without this cap 23–59-op graphs with wide
/// ASAP/ALAP ranges ran their whole-graph model until the time limit (60 s by default), and the
/// plan depended on the machine's speed.
pub const EFFORT_ORDER_WORK: u64 = 1_000_000_000;

/// One unit of effort: branch-and-bound nodes per window model of the order program.
pub const EFFORT_ORDER_WINDOW_NODES: u64 = 200;

/// One unit of effort: window models of the order program at most (a cap on the model count;
/// [`EFFORT_ORDER_WINDOWS_WORK`] usually stops them first).
pub const EFFORT_ORDER_WINDOWS: usize = 32;

/// One unit of effort: work of the order program's window models in all, in LP iterations ×
/// nonzeros (`OrderIlpOptions::work_total`; each model is also capped at
/// [`EFFORT_ORDER_WORK`]). Windows start 8 steps wide and widen up to 24 where they fail
/// (`OrderIlpOptions::default`). Chosen on 20 random DAGs (README, "Effort and limits").
pub const EFFORT_ORDER_WINDOWS_WORK: u64 = 1_000_000_000;

/// Share of the time limit by which the order program stops (strategy `auto`).
pub const ORDER_ILP_SHARE: f64 = 0.6;

/// Strategy `ilp`: share of the time limit by which the order program stops.
pub const ILP_FOCUS_ILP_SHARE: f64 = 0.85;

/// Planning options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOptions {
    /// Orders to consider.
    pub order: OrderMode,
    /// Solvers to run.
    pub strategy: Strategy,
    /// Time limit for the whole planning (the listed order is always planned). `None`: the
    /// searches stop at their own node caps, so the result is deterministic.
    pub time_limit: Option<Duration>,
    /// Deterministic effort: `Some(k)` gives the exact placement search `k ×`
    /// [`EFFORT_EXACT_NODES`] nodes and `k ×` [`EFFORT_EXACT_WORK`] units of work for the
    /// first candidate order it refines (`k ×` [`EFFORT_EXACT_NODES_LATER`] and `k ×`
    /// [`EFFORT_EXACT_WORK_LATER`] for each later one) and the order program at most `k ×`
    /// [`EFFORT_ORDER_WINDOWS`] window models of `k ×` [`EFFORT_ORDER_WINDOW_NODES`]
    /// branch-and-bound nodes each, `k ×` [`EFFORT_ORDER_WINDOWS_WORK`] LP iterations ×
    /// nonzeros in all (or one whole-graph model of `k ×`
    /// [`EFFORT_ORDER_WHOLE_NODES`]), each model also capped at `k ×` [`EFFORT_ORDER_WORK`]
    /// LP iterations × nonzeros (with `time_limit: None`, the stages stop at these work caps only, so the plan is the
    /// same on any machine; a wall-clock cap is then a [`CancelToken`], see
    /// [`memplan_solver::Deadline`]). `None`: the searches' own default caps when there is no
    /// time limit.
    pub effort: Option<u64>,
    /// Honour in-place hints (plans then use the `inplace_of` alloc extension, which
    /// `tools/check_plan.py` does not know).
    pub inplace: bool,
    /// Stop flag: once raised, every search stops at its next check and the best plan found so
    /// far is returned (the listed order is always planned).
    pub cancel: Option<CancelToken>,
    /// Called after each stage with the best peak so far.
    pub progress: Option<ProgressSink>,
}

/// A snapshot of a running [`plan`] call.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The stage just finished (`order`, `heuristics`, `exact`, …).
    pub stage: &'static str,
    /// Best peak so far (bytes).
    pub best_peak: u64,
    /// Best proven lower bound so far (bytes).
    pub lower_bound: u64,
    /// Time since the call started.
    pub elapsed: Duration,
}

/// A progress callback shared between threads.
#[derive(Clone)]
pub struct ProgressSink(pub Arc<dyn Fn(&Progress) + Send + Sync>);

impl ProgressSink {
    /// Wraps a callback.
    pub fn new(f: impl Fn(&Progress) + Send + Sync + 'static) -> Self {
        ProgressSink(Arc::new(f))
    }

    /// Reports one snapshot.
    pub fn report(&self, p: &Progress) {
        (self.0)(p)
    }
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressSink(..)")
    }
}

impl PartialEq for ProgressSink {
    /// Sinks are equal when they share one callback.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ProgressSink {}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            order: OrderMode::Auto,
            strategy: Strategy::Auto,
            time_limit: Some(Duration::from_secs(1)),
            effort: None,
            inplace: false,
            cancel: None,
            progress: None,
        }
    }
}

/// Why planning failed.
#[derive(Debug, Error)]
pub enum PlanError {
    /// The graph is malformed.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A placement problem was malformed (an internal error).
    #[error("placement: {0}")]
    Placement(#[from] PlacementError),
    /// An invariant broke (a bug).
    #[error("internal error: {0}")]
    Internal(String),
    /// The emitted plan failed the validator (an internal error).
    #[error("internal error: emitted plan is invalid: {0}")]
    Invalid(#[from] crate::validate::Violation),
}

/// One candidate order with its buffers and current placement.
struct Candidate {
    order: Vec<usize>,
    method: &'static str,
    lt: OrderLifetimes,
    placed: PlaceOutcome,
}

/// The lowest peak among the candidates (0 when there are none).
fn best_peak(cands: &[Candidate]) -> u64 {
    cands
        .iter()
        .map(|c| c.placed.stats.objective)
        .min()
        .unwrap_or(0)
}

/// The clock and options of one `plan` call: what is left of the time limit, and the
/// progress reports.
struct Run<'o> {
    started: Instant,
    opts: &'o PlanOptions,
}

impl Run<'_> {
    /// The budget left (time limit minus elapsed, the cancel token).
    fn remaining(&self) -> Limits {
        Limits {
            time: self
                .opts
                .time_limit
                .map(|t| t.saturating_sub(self.started.elapsed())),
            nodes: None,
            cancel: self.opts.cancel.clone(),
        }
    }

    /// Budget that ends at `share` of the time limit.
    fn until(&self, share: f64) -> Limits {
        Limits {
            time: self
                .opts
                .time_limit
                .map(|t| t.mul_f64(share).saturating_sub(self.started.elapsed())),
            ..self.remaining()
        }
    }

    /// Reports a stage's progress to the sink, if any.
    fn report(&self, stage: &'static str, best_peak: u64, lower_bound: u64) {
        if let Some(sink) = &self.opts.progress {
            sink.report(&Progress {
                stage,
                best_peak,
                lower_bound,
                elapsed: self.started.elapsed(),
            });
        }
    }
}

/// Plans `graph` (see the module doc).
pub fn plan(graph: &Graph, opts: &PlanOptions) -> Result<Plan, PlanError> {
    let run = Run {
        started: Instant::now(),
        opts,
    };
    let (problem, mapping) = graph.order_problem_with_mapping();
    let lopts = LifetimeOptions {
        inplace: opts.inplace,
    };
    let listed = problem
        .listed_topological_order()
        .map_err(|e| graph.order_error(e))?;
    // Ops listed out of dependency order run in the nearest topological order; the plan's
    // `order_method` says so instead of claiming the listing.
    let listed_name = if listed.iter().enumerate().all(|(i, &n)| i == n) {
        "listed"
    } else {
        "listed-topological"
    };
    let mut orders = vec![(listed, listed_name)];
    let mut order_result = None;
    // The bound of every order's peak (`--order auto`), see the module doc.
    let mut order_bound = None;
    let mut ilp_result = None;
    let solving = opts.strategy != Strategy::Heuristic;
    // The heuristic stages run exactly as with strategy `heuristic` (same budget), so the
    // solving strategies only add candidates and refine them: never worse than `heuristic`.
    if opts.order == OrderMode::Auto {
        let r = order::best_order(&order::registry(), &problem, &lopts, &run.remaining())
            .map_err(|e| graph.order_error(e))?;
        run.report("order", r.stats.objective, r.stats.lower_bound);
        if r.order != orders[0].0 {
            orders.push((r.order.clone(), r.method));
        }
        order_bound = Some(order::bound::aligned_order_bound(
            &problem,
            &lopts,
            Some(&r.order),
            r.stats.lower_bound,
            &run.remaining(),
        ));
        order_result = Some(r);
    }
    let mut candidates = place_candidates(&problem, orders, &lopts, &run.remaining())?;
    if let (true, Some(r), Some(bound)) = (solving, &order_result, order_bound) {
        ilp_result = Some(order_ilp_candidate(
            &run,
            &problem,
            &lopts,
            (r, bound),
            &mut candidates,
        )?);
    }
    // Best first; a stable sort keeps the listed order ahead on ties.
    candidates.sort_by_key(|c| c.placed.stats.objective);
    let bound_now = |cands: &[Candidate]| match order_bound {
        Some(b) => b,
        None => cands.first().map_or(0, |c| c.placed.stats.lower_bound),
    };
    run.report("heuristics", best_peak(&candidates), bound_now(&candidates));
    if solving {
        refine_candidates(&run, &mut candidates, bound_now)?;
    }
    let best = candidates
        .into_iter()
        .enumerate()
        .min_by_key(|(i, c)| (c.placed.stats.objective, *i))
        .map(|(_, c)| c)
        .ok_or_else(|| PlanError::Internal("no candidate order".into()))?;
    let mut plan = emit(
        graph,
        &best.order,
        &best.lt,
        &best.placed.placement,
        &mapping,
    );
    write_stats(
        &run,
        graph,
        &mut plan,
        &best,
        order_result.as_ref().zip(order_bound),
        ilp_result.as_ref(),
    );
    if cfg!(debug_assertions) {
        crate::validate::validate(graph, &plan, None)?;
    }
    Ok(plan)
}

/// Places every candidate order with the heuristic portfolio. The candidates are
/// independent: each is placed on a thread of its own (each result is deterministic, so the
/// plan does not depend on the scheduling).
fn place_candidates(
    problem: &OrderProblem,
    orders: Vec<(Vec<usize>, &'static str)>,
    lopts: &LifetimeOptions,
    limits: &Limits,
) -> Result<Vec<Candidate>, PlanError> {
    let placed: Vec<Result<Candidate, PlanError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = orders
            .into_iter()
            .map(|(order, method)| {
                scope.spawn(move || -> Result<Candidate, PlanError> {
                    let lt = lifetimes(problem, &order, lopts);
                    let placed = place::heuristics(&lt.problem, limits)?;
                    Ok(Candidate {
                        order,
                        method,
                        lt,
                        placed,
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(PlanError::Internal("a placement thread panicked".into()))
                })
            })
            .collect()
    });
    placed.into_iter().collect()
}

/// The order integer program, warm-started from the order heuristics' best order `r`
/// (strategies `ilp` / `auto`); its order joins the candidates (placed with the heuristics)
/// when it is new. Its progress reports `peak_bound` (the bound of every order's peak).
/// Returns the program's outcome.
fn order_ilp_candidate(
    run: &Run<'_>,
    problem: &OrderProblem,
    lopts: &LifetimeOptions,
    (r, peak_bound): (&OrderResult, u64),
    candidates: &mut Vec<Candidate>,
) -> Result<OrderIlpOutcome, PlanError> {
    let opts = run.opts;
    let started = run.started;
    let ilp_share = match opts.strategy {
        Strategy::Ilp => ILP_FOCUS_ILP_SHARE,
        _ => ORDER_ILP_SHARE,
    };
    // HiGHS' improving solutions, as progress (a window's peak is not the plan's: report
    // the best of it and the heuristic plan so far).
    let progress = opts.progress.clone().map(|sink| {
        let best = best_peak(candidates);
        let bound = peak_bound;
        ProgressFn::new(move |peak, _| {
            sink.report(&Progress {
                stage: "order_ilp",
                best_peak: best.min(peak.max(bound)),
                lower_bound: bound,
                elapsed: started.elapsed(),
            })
        })
    });
    let defaults = OrderIlpOptions::default();
    let whole = problem.nodes.len() <= defaults.global_nodes;
    let iopts = OrderIlpOptions {
        limits: Limits {
            nodes: opts.effort.map(|e| {
                if whole {
                    EFFORT_ORDER_WHOLE_NODES
                } else {
                    EFFORT_ORDER_WINDOW_NODES
                }
                .saturating_mul(e)
            }),
            ..run.until(ilp_share)
        },
        max_models: match opts.effort {
            Some(e) => usize::try_from(e)
                .unwrap_or(usize::MAX)
                .saturating_mul(EFFORT_ORDER_WINDOWS),
            None => defaults.max_models,
        },
        work_per_model: opts.effort.map(|e| EFFORT_ORDER_WORK.saturating_mul(e)),
        work_total: opts
            .effort
            .map(|e| EFFORT_ORDER_WINDOWS_WORK.saturating_mul(e)),
        progress,
        known_bound: if opts.inplace { 0 } else { r.stats.lower_bound },
        ..OrderIlpOptions::default()
    };
    let out = optimise_order(problem, &r.order, &iopts)
        .map_err(|e| PlanError::Internal(format!("order program: {e}")))?;
    run.report("order_ilp", out.stats.objective, out.stats.lower_bound);
    if candidates.iter().all(|c| c.order != out.order) {
        let lt = lifetimes(problem, &out.order, lopts);
        let placed = place::heuristics(&lt.problem, &run.remaining())?;
        candidates.push(Candidate {
            order: out.order.clone(),
            method: "ilp",
            lt,
            placed,
        });
    }
    Ok(out)
}

/// The exact placement search and the placement model on the candidates (best first), where
/// they could beat the best plan so far, splitting what is left of the time evenly over the
/// candidates still to refine. `bound_now` gives the lower bound to report.
fn refine_candidates(
    run: &Run<'_>,
    candidates: &mut [Candidate],
    bound_now: impl Fn(&[Candidate]) -> u64,
) -> Result<(), PlanError> {
    let opts = run.opts;
    let count = candidates.len() as u32;
    // The first candidate refined (the best heuristic peak) gets the larger node cap.
    let mut first = true;
    for k in 0..candidates.len() {
        let best = best_peak(candidates);
        let c = &candidates[k];
        // Only worth it where the exact search could beat the best plan so far.
        if c.placed.stats.objective <= c.placed.stats.lower_bound
            || c.placed.stats.lower_bound >= best
        {
            continue;
        }
        // Split what is left evenly over the candidates still to refine.
        let left = run.remaining();
        let share = Limits {
            time: left.time.map(|t| t / (count - k as u32).max(1)),
            ..left
        };
        let (nodes, exact_work) = if first {
            (EFFORT_EXACT_NODES, EFFORT_EXACT_WORK)
        } else {
            (EFFORT_EXACT_NODES_LATER, EFFORT_EXACT_WORK_LATER)
        };
        first = false;
        let work = opts.effort.map(|e| place::RefineWork {
            exact_nodes: nodes.saturating_mul(e),
            ilp_models: usize::try_from(e)
                .unwrap_or(usize::MAX)
                .saturating_mul(EFFORT_PLACEMENT_ILP_MODELS),
            ilp_nodes_per_model: EFFORT_PLACEMENT_ILP_NODES,
            exact_work: Some(exact_work.saturating_mul(e)),
        });
        let c = &mut candidates[k];
        c.placed = place::refine_with(&c.lt.problem, &c.placed, &share, work)?;
        run.report("exact", best_peak(candidates), bound_now(candidates));
    }
    Ok(())
}

/// Fills the plan's stats: the winning candidate's placement figures, the lower bound (see
/// the module doc), the status, the order searches' figures, fragmentation and time.
fn write_stats(
    run: &Run<'_>,
    graph: &Graph,
    plan: &mut Plan,
    best: &Candidate,
    order_result: Option<(&OrderResult, u64)>,
    ilp_result: Option<&OrderIlpOutcome>,
) {
    let (opts, started) = (run.opts, run.started);
    let load = best.lt.problem.load();
    let s = &best.placed;
    plan.stats.method = s.method.clone();
    plan.stats.load_bytes = Some(load);
    plan.stats.order_method = Some(best.method.to_string());
    plan.stats.members = s
        .members
        .iter()
        .map(|m| MemberStat::new(m.name, m.peak, m.elapsed))
        .collect();
    plan.stats.placement_status = Some(s.stats.status.as_str().to_string());
    if let Some(e) = &s.exact {
        plan.stats.exact = Some(crate::plan::ExactStat {
            status: e.status.as_str().to_string(),
            nodes: e.nodes,
            ms: ms(e.elapsed),
        });
    }
    if let Some(i) = &s.ilp {
        plan.stats.ilp = Some(crate::plan::IlpStat {
            status: i.status.as_str().to_string(),
            models: i.models,
            improved: i.improved,
            ms: ms(i.elapsed),
        });
    }
    // The bound: for `given`, the placement's proven bound for that order (the aligned LOAD or
    // better); for `auto`, the order-independent bound (other orders could go lower).
    let peak = plan.stats.peak_bytes;
    let ilp_bound = ilp_result
        .filter(|o| o.whole && !opts.inplace)
        .map_or(0, |o| o.stats.lower_bound);
    let lower = match order_result {
        Some((_, bound)) => bound.max(ilp_bound).min(plan.stats.peak_bytes),
        None => s.stats.lower_bound,
    };
    let solve = SolveStats::heuristic(peak, lower, started.elapsed());
    plan.stats.lower_bound_bytes = lower;
    let timed_out = ilp_result.is_some_and(|o| o.stats.status == SolveStatus::TimeLimit)
        || s.stats.status == SolveStatus::TimeLimit
        || opts.time_limit.is_some_and(|t| started.elapsed() >= t);
    let cancelled = opts.cancel.as_ref().is_some_and(CancelToken::is_cancelled);
    plan.stats.status = Some(if solve.status == SolveStatus::Optimal {
        PlanStatus::Optimal
    } else if cancelled {
        PlanStatus::Cancelled
    } else if timed_out {
        PlanStatus::TimeLimit
    } else if opts.strategy == Strategy::Heuristic {
        PlanStatus::HeuristicOnly
    } else {
        PlanStatus::Feasible
    });
    plan.stats.gap = Some(solve.gap());
    if let Some(o) = ilp_result {
        plan.stats.order_ilp = Some(crate::plan::OrderIlpStat {
            status: o.stats.status.as_str().to_string(),
            whole: o.whole,
            models: o.models,
            improved: o.improved,
            load_bytes: o.stats.objective,
            lower_bound_bytes: o.stats.lower_bound,
            ms: ms(o.stats.elapsed),
        });
    }
    if let Some((r, _)) = order_result {
        plan.stats.order_lower_bound_bytes = Some(r.stats.lower_bound);
        plan.stats.order_members = r
            .members
            .iter()
            .map(|m| MemberStat::new(m.name, m.load, m.elapsed))
            .collect();
    }
    plan.stats.inplace = opts.inplace;
    plan.stats.fragmentation_at_peak = crate::analysis::fragmentation_at_peak(graph, plan);
    plan.stats.elapsed_ms = ms(started.elapsed());
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Size figures of a graph (what `memplan stats` prints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphStats {
    /// Number of ops.
    pub ops: usize,
    /// Number of tensors.
    pub tensors: usize,
    /// Bytes without any reuse: every arena buffer of the listed order (workspaces included),
    /// each rounded up to its alignment.
    pub naive_bytes: u64,
    /// LOAD of the listed order (bytes).
    pub listed_load: u64,
    /// Weights region size (bytes).
    pub weights_bytes: u64,
    /// Peak lower bound valid for every order (bytes): a bound of their LOAD.
    pub order_lower_bound: u64,
    /// The same tightened by alignment (bytes, at least `order_lower_bound`): what `--order
    /// auto` plans report as their lower bound before the order program's
    /// (`order::bound::aligned_order_bound`).
    pub peak_lower_bound: u64,
}

/// The lifetimes of `graph`'s arena buffers in its listed order, with the order problem.
fn listed_lifetimes(
    graph: &Graph,
    lopts: &LifetimeOptions,
) -> Result<(OrderProblem, OrderLifetimes), PlanError> {
    let problem = graph.order_problem();
    let listed = problem
        .listed_topological_order()
        .map_err(|e| graph.order_error(e))?;
    let lt = lifetimes(&problem, &listed, lopts);
    Ok((problem, lt))
}

/// LOAD of `graph`'s listed order (bytes): [`GraphStats::listed_load`] alone.
pub fn listed_load(graph: &Graph) -> Result<u64, PlanError> {
    Ok(listed_lifetimes(graph, &LifetimeOptions::default())?
        .1
        .problem
        .load())
}

/// Computes [`GraphStats`].
pub fn graph_stats(graph: &Graph) -> Result<GraphStats, PlanError> {
    let lopts = LifetimeOptions::default();
    let (problem, lt) = listed_lifetimes(graph, &lopts)?;
    let naive_bytes = lt
        .problem
        .buffers
        .iter()
        .map(|b| memplan_solver::align_up(b.size, b.alignment).unwrap_or(u64::MAX))
        .fold(0u64, u64::saturating_add);
    let order_lower_bound = order::bound::order_lower_bound(&problem, &lopts);
    Ok(GraphStats {
        ops: graph.ops.len(),
        tensors: graph.tensors.len(),
        naive_bytes,
        listed_load: lt.problem.load(),
        weights_bytes: graph.weights_bytes(),
        order_lower_bound,
        peak_lower_bound: order::bound::aligned_order_bound(
            &problem,
            &lopts,
            None,
            order_lower_bound,
            &Limits::UNLIMITED,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn sample() -> Graph {
        Graph::parse(crate::graph::SAMPLE_JSON).unwrap()
    }

    #[test]
    fn every_strategy_and_order_mode_is_found_by_its_name() {
        for s in Strategy::ALL {
            assert_eq!(Strategy::from_name(s.name()), Some(s));
        }
        for m in OrderMode::ALL {
            assert_eq!(OrderMode::from_name(m.name()), Some(m));
        }
        assert_eq!(Strategy::from_name("fastest"), None);
    }

    #[test]
    fn the_given_order_is_named_listed_only_when_the_listing_is_topological() {
        let given = PlanOptions {
            order: OrderMode::Given,
            strategy: Strategy::Heuristic,
            ..PlanOptions::default()
        };
        let g = sample();
        let p = plan(&g, &given).unwrap();
        assert_eq!(p.stats.order_method.as_deref(), Some("listed"));
        // The same ops listed last-first: a valid graph whose listing is not an order.
        let mut doc: serde_json::Value = serde_json::from_str(crate::graph::SAMPLE_JSON).unwrap();
        doc["ops"].as_array_mut().unwrap().reverse();
        let reversed = Graph::parse(&doc.to_string()).unwrap();
        let p = plan(&reversed, &given).unwrap();
        crate::validate::validate(&reversed, &p, None).unwrap();
        assert_eq!(p.stats.order_method.as_deref(), Some("listed-topological"));
    }

    #[test]
    fn a_cancelled_plan_still_returns_a_valid_plan_and_reports_progress() {
        let g = sample();
        let token = CancelToken::new();
        token.cancel();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = {
            let seen = seen.clone();
            ProgressSink::new(move |p| seen.lock().unwrap().push(p.clone()))
        };
        let opts = PlanOptions {
            time_limit: None,
            cancel: Some(token),
            progress: Some(sink),
            ..PlanOptions::default()
        };
        let plan = plan(&g, &opts).unwrap();
        crate::validate::validate(&g, &plan, None).unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.first().map(|p| p.stage), Some("order"));
        assert!(seen.iter().all(|p| p.lower_bound <= p.best_peak));
        assert!(seen.last().unwrap().best_peak >= plan.stats.peak_bytes);
    }
}
