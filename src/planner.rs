//! The planning pipeline: graph → order problem → candidate orders (listed, and with
//! `--order auto` the order heuristics' best) → buffer lifetimes → placement portfolio →
//! plan. The plan with the lowest peak wins (ties keep the listed order), so `auto` is never
//! worse than `given`. Every emitted plan is replayed by the validator in debug builds.

use crate::graph::{Graph, GraphError, OrderMapping};
use crate::plan::{emit, MemberStat, Plan};
use memplan_solver::order::{self, lifetimes, LifetimeOptions, OrderProblem};
use memplan_solver::placement;
use memplan_solver::{Budget, PlacementError, SolveStats};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Which op orders to consider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OrderMode {
    /// The listed order (made topological if needed).
    Given,
    /// The listed order and the memory-aware order heuristics; keep the best plan.
    #[default]
    Auto,
}

/// Planning options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOptions {
    /// Orders to consider.
    pub order: OrderMode,
    /// Time limit for the order search and placement (the listed order is always planned).
    pub time_limit: Option<Duration>,
    /// Honour in-place hints (plans then use the `inplace_of` alloc extension, which
    /// `tools/check_plan.py` does not know).
    pub inplace: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            order: OrderMode::Auto,
            time_limit: Some(Duration::from_secs(1)),
            inplace: false,
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
    /// The emitted plan failed the validator (an internal error).
    #[error("internal error: emitted plan is invalid: {0}")]
    Invalid(#[from] crate::validate::Violation),
}

/// Plans `graph` (see the module doc).
pub fn plan(graph: &Graph, opts: &PlanOptions) -> Result<Plan, PlanError> {
    let started = Instant::now();
    let (problem, mapping) = graph.order_problem_with_mapping();
    let lopts = LifetimeOptions {
        inplace: opts.inplace,
    };
    let budget = Budget {
        time: opts.time_limit,
        nodes: None,
    };
    let listed = problem
        .listed_topological_order()
        .map_err(|e| graph.order_error(e))?;
    let mut best = plan_order(
        graph, &problem, &mapping, &listed, "listed", &lopts, &budget,
    )?;
    let mut order_stats = None;
    if opts.order == OrderMode::Auto {
        let result = order::best_order(&order::registry(), &problem, &lopts, &budget)
            .map_err(|e| graph.order_error(e))?;
        if result.order != listed {
            let candidate = plan_order(
                graph,
                &problem,
                &mapping,
                &result.order,
                result.method,
                &lopts,
                &budget,
            )?;
            if candidate.stats.peak_bytes < best.stats.peak_bytes {
                best = candidate;
            }
        }
        order_stats = Some(result);
    }
    let load = best.stats.load_bytes.unwrap_or(0);
    let (lower, order_bound) = match &order_stats {
        Some(r) => (r.stats.lower_bound, Some(r.stats.lower_bound)),
        None => (load, None),
    };
    let peak = best.stats.peak_bytes;
    let s = SolveStats::heuristic(peak, lower, started.elapsed());
    best.stats.lower_bound_bytes = lower;
    best.stats.status = Some(s.status.as_str().to_string());
    best.stats.gap = Some(s.gap());
    best.stats.order_lower_bound_bytes = order_bound;
    if let Some(r) = &order_stats {
        best.stats.order_members = r
            .members
            .iter()
            .map(|m| MemberStat::new(m.name, m.load, m.elapsed))
            .collect();
    }
    best.stats.inplace = opts.inplace;
    best.stats.elapsed_ms = ms(started.elapsed());
    if cfg!(debug_assertions) {
        crate::validate::validate(graph, &best, None)?;
    }
    Ok(best)
}

/// Places one order with the portfolio and emits its plan.
fn plan_order(
    graph: &Graph,
    problem: &OrderProblem,
    mapping: &OrderMapping,
    order: &[usize],
    order_method: &str,
    lopts: &LifetimeOptions,
    budget: &Budget,
) -> Result<Plan, PlanError> {
    let lt = lifetimes(problem, order, lopts);
    let result = placement::portfolio(&lt.problem, budget)?;
    let mut plan = emit(graph, order, &lt, &result.placement, mapping);
    plan.stats.method = result.method.to_string();
    plan.stats.load_bytes = Some(lt.problem.load());
    plan.stats.order_method = Some(order_method.to_string());
    plan.stats.members = result
        .members
        .iter()
        .map(|m| MemberStat::new(m.name, m.peak, m.elapsed))
        .collect();
    Ok(plan)
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
    /// Peak lower bound valid for every order (bytes).
    pub order_lower_bound: u64,
}

/// Computes [`GraphStats`].
pub fn graph_stats(graph: &Graph) -> Result<GraphStats, PlanError> {
    let problem = graph.order_problem();
    let lopts = LifetimeOptions::default();
    let listed = problem
        .listed_topological_order()
        .map_err(|e| graph.order_error(e))?;
    let lt = lifetimes(&problem, &listed, &lopts);
    let naive_bytes = lt
        .problem
        .buffers
        .iter()
        .map(|b| memplan_solver::align_up(b.size, b.alignment).unwrap_or(u64::MAX))
        .fold(0u64, u64::saturating_add);
    Ok(GraphStats {
        ops: graph.ops.len(),
        tensors: graph.tensors.len(),
        naive_bytes,
        listed_load: lt.problem.load(),
        weights_bytes: graph.weights_bytes(),
        order_lower_bound: order::bound::order_lower_bound(&problem, &lopts),
    })
}
