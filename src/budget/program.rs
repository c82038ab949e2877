//! The budget integer program (HiGHS, built and solved through [`memplan_solver::mip`]), a
//! compact Checkmate/POET-style model on the fixed
//! order: per tensor and per gap `(a, b)` between consecutive uses (with at least one idle
//! step), binaries `spill` (resident again from the prefetch step of [`Ctx::prefetch`]) and
//! `recompute` (producer re-executed before `b`; no such column when the producer may not
//! run twice, [`crate::ops::may_recompute`]), at most one of them.
//!
//! - Memory: for every step `s` over the target in the keep-everything schedule, the bytes
//!   freed at `s` by the chosen evictions, minus the workspaces of recomputes run at `s`, are
//!   at least the excess (or all that can be freed there, when that is less).
//! - A recompute needs its producer's inputs resident at `b`: each input either is used at
//!   `b` or is kept (neither spilled nor recomputed) in its gap around `b`; inputs dead at `b`
//!   make the recompute unavailable.
//! - Conv algorithms (with [`super::schedule::Params::conv_downgrade`]): a binary per
//!   (conv at an over-target step, algorithm with less workspace, [`Ctx::downgrades`]), at
//!   most one per conv; it frees the workspace difference in that step's memory row and adds
//!   the modelled time difference to the objective (MONeT-style joint selection).
//! - Objective: the modelled cost of the sweep heuristic (unhidden transfer time plus a share
//!   of the link time per spill, the producer's time per recompute).
//!
//! The sweep's schedule is the warm start (where it maps onto the model's gaps) and the
//! fallback: when the model finds no solution within its limits, or its schedule peaks
//! above both the target and the sweep's, the sweep's is returned.
//!
//! **Limits.** With an effort ([`Ctx::effort`] `Some(k)`) each model gets `k ×`
//! [`DEFAULT_NODES`] branch-and-bound nodes (HiGHS `mip_max_nodes`), one thread and no time
//! limit, so the schedule is the same on any machine and under any load; the root phases
//! that only a time limit would bound (feasibility jump, symmetry detection, sub-MIP
//! heuristics) are then off. Without an effort, a time limit per model ([`DEFAULT_TIME`])
//! and HiGHS' default heuristics. Either way a raised [`Ctx::cancel`] interrupts HiGHS at
//! its next limit check ([`memplan_solver::mip::Watch::cancel`]) and the best solution
//! so far is used. The note names the stop: `optimal`, `node_limit`, `time_limit`,
//! `cancelled`. The pipeline also plans
//! with the sweep ([`SpillStrategy::fallback`]) and keeps its plan when its simulated
//! overhead is lower, so `ilp` is never worse than the heuristic.

use super::schedule::{Ctx, Gap, Sched};
use super::sweep::{Sweep, LINK_SHARE};
use super::SpillStrategy;
use crate::cost::is_cheap;
use crate::graph::{TensorId, TensorKind};
use memplan_solver::mip::{self, Col, MipError, MipOptions, MipStatus, Model, Watch};
use memplan_solver::Limits;
use std::sync::Mutex;
use std::time::Duration;

/// Default time limit of one model, without an effort ([`Ctx::effort`] `None`).
pub const DEFAULT_TIME: Duration = Duration::from_secs(1);

/// Branch-and-bound nodes (HiGHS `mip_max_nodes`) of one model per unit of effort
/// ([`Ctx::effort`]). Chosen on the zoo's training graphs at 50–80 % budgets: with 30
/// nodes a budgeted plan takes about as long as with the former 1 s per model on 2 cores,
/// and its simulated overhead is as low or lower in most cases; more nodes took longer
/// without lowering it on average.
pub const DEFAULT_NODES: u64 = 30;

/// The integer program strategy.
#[derive(Debug, Default)]
pub struct Ilp {
    /// Time limit per model without an effort (`None`: [`DEFAULT_TIME`]).
    pub time: Option<Duration>,
    /// Branch-and-bound nodes per model and unit of effort, with an effort (`None`:
    /// [`DEFAULT_NODES`]).
    pub nodes: Option<u64>,
    note: Mutex<Option<String>>,
}

impl Ilp {
    /// The limits of one model in `ctx`: a node cap scaled by the effort and no time limit
    /// when the context has an effort, else the time limit; the context's stop flag either
    /// way.
    pub fn limits(&self, ctx: &Ctx) -> Limits {
        match ctx.effort {
            Some(k) => Limits {
                time: None,
                nodes: Some(self.nodes.unwrap_or(DEFAULT_NODES).saturating_mul(k)),
                cancel: ctx.cancel.clone(),
            },
            None => Limits {
                time: Some(self.time.unwrap_or(DEFAULT_TIME)),
                nodes: None,
                cancel: ctx.cancel.clone(),
            },
        }
    }
}

impl SpillStrategy for Ilp {
    fn name(&self) -> &'static str {
        "ilp"
    }

    fn about(&self) -> &'static str {
        "integer program (HiGHS) over keep / spill / recompute per gap, warm-started from sweep"
    }

    fn schedule(&self, ctx: &Ctx, target: u64) -> Sched {
        let warm = Sweep.schedule(ctx, target);
        let (sched, note) = solve(ctx, target, &warm, &self.limits(ctx));
        if let Ok(mut n) = self.note.lock() {
            *n = Some(note);
        }
        sched
    }

    fn adapts(&self) -> bool {
        true
    }

    fn note(&self) -> Option<String> {
        self.note.lock().ok().and_then(|n| n.clone())
    }

    fn fallback(&self) -> Option<Box<dyn SpillStrategy>> {
        Some(Box::new(Sweep))
    }
}

/// One gap of the model: its spill (and, when eligible, recompute) option.
#[derive(Debug, Clone, PartialEq)]
pub struct GapOption {
    /// The tensor.
    pub t: TensorId,
    /// The gap's first use.
    pub a: usize,
    /// The gap's next use.
    pub b: usize,
    /// Where a spill comes back.
    pub back: usize,
    /// Modelled cost of the spill (µs).
    pub spill_cost: f64,
    /// The recompute option: producer op, cost (µs), and the options (indices) of its
    /// inputs' gaps around `b`, which must then be kept.
    pub recompute: Option<(usize, f64, Vec<usize>)>,
}

/// The model's options for every gap with an idle step (see the module doc).
pub fn gap_options(ctx: &Ctx) -> Vec<GapOption> {
    let keep = Sched::keep_all(ctx);
    let mut vars: Vec<GapOption> = Vec::new();
    // Gap index by (tensor, first use).
    let mut gap_of: std::collections::BTreeMap<(TensorId, usize), usize> = Default::default();
    for (i, u) in ctx.uses.iter().enumerate() {
        let t = TensorId(i as u32);
        let size = ctx.graph.tensor(t).size;
        for w in u.windows(2) {
            let (a, b) = (w[0], w[1]);
            if b < a + 2 {
                continue;
            }
            let back = ctx.prefetch(a, b, size);
            let (t_in, t_out) = (ctx.profile.h2d_us(size), ctx.profile.d2h_us(size));
            let spill_cost = (t_in - ctx.compute_us(back, b)).max(0.0)
                + (t_out - ctx.compute_us(a + 1, back)).max(0.0)
                + LINK_SHARE * (t_in + t_out);
            gap_of.insert((t, a), vars.len());
            vars.push(GapOption {
                t,
                a,
                b,
                back,
                spill_cost,
                recompute: None,
            });
        }
    }
    for v in &mut vars {
        let (t, b) = (v.t, v.b);
        let Some(k) = ctx.recompute_producer(t) else {
            continue;
        };
        if ctx.graph.tensor(t).kind != TensorKind::Activation {
            continue;
        }
        let cost = ctx.profile.op_us(ctx.graph, &ctx.graph.ops[k]);
        let spill_latest = ctx.profile.h2d_us(ctx.graph.tensor(t).size);
        if !(is_cheap(&ctx.graph.ops[k].op_type) || cost < spill_latest) {
            continue;
        }
        let mut needs = Vec::new();
        let mut ok = true;
        for x in ctx.arena_inputs(k) {
            let u = &ctx.uses[x.index()];
            if u.binary_search(&b).is_ok() {
                continue;
            }
            match keep.gap_at(x, b) {
                Some((a2, _)) => {
                    if let Some(&g2) = gap_of.get(&(x, a2)) {
                        needs.push(g2);
                    }
                }
                None => {
                    let alive_out = ctx.graph.tensor(x).kind == TensorKind::Output
                        && u.first().is_some_and(|&f| f <= b);
                    if !alive_out {
                        ok = false;
                    }
                }
            }
        }
        if ok {
            v.recompute = Some((k, cost, needs));
        }
    }
    vars
}

/// The schedule of a choice per option (0 keep, 1 spill, 2 recompute).
pub fn schedule_of(ctx: &Ctx, options: &[GapOption], choice: &[u8]) -> Sched {
    let mut sched = Sched::keep_all(ctx);
    for (v, &c) in options.iter().zip(choice) {
        if c == 1 && v.back >= v.a + 2 {
            sched.gaps[v.t.index()].insert(v.a, Gap::Spill { back: v.back });
        }
    }
    for (v, &c) in options.iter().zip(choice) {
        if let (2, Some((k, _, _))) = (c, &v.recompute) {
            for x in ctx.arena_inputs(*k) {
                sched.add_use(x, v.b);
            }
            sched.gaps[v.t.index()].insert(v.a, Gap::Recompute);
        }
    }
    sched
}

/// Bytes each step could free at most: every gap's tensor evicted over its widest option.
pub fn freeable(ctx: &Ctx, options: &[GapOption]) -> Vec<u64> {
    let mut free = vec![0u64; ctx.steps()];
    for o in options {
        let end = if o.recompute.is_some() { o.b } else { o.back };
        for f in free.iter_mut().take(end).skip(o.a + 1) {
            *f += ctx.graph.tensor(o.t).size;
        }
    }
    free
}

/// The spill and recompute columns of one gap.
struct GapVar {
    spill: Col,
    recompute: Option<Col>,
}

/// The model of [`build`]: its gap columns, conv-downgrade columns `(op, algorithm, column)`
/// and warm start.
struct Built {
    model: Model,
    vars: Vec<GapVar>,
    down: Vec<(usize, usize, Col)>,
    start: Vec<f64>,
}

/// Solves the model for `target` within `limits` (see the module doc: a time limit, a
/// branch-and-bound node cap and a stop flag, each optional): the schedule and a note
/// (status, bound on the estimated cost).
pub fn solve(ctx: &Ctx, target: u64, warm: &Sched, limits: &Limits) -> (Sched, String) {
    let keep = Sched::keep_all(ctx);
    let live = keep.live(ctx);
    if live.iter().all(|&l| l <= target) {
        return (keep, "optimal (nothing to evict)".into());
    }
    if limits.is_cancelled() {
        return (warm.clone(), "cancelled before solving (sweep kept)".into());
    }
    let options = gap_options(ctx);
    let built = build(ctx, target, warm, &live, &options);
    let (vars, down) = (built.vars, built.down);
    let answer = match run_model(built.model, built.start, limits) {
        Run::Answer(a) => a,
        Run::Failed(what) => return (warm.clone(), format!("error {what} (sweep kept)")),
    };
    let note = format!(
        "{} after {} nodes, bound {} us of estimated cost",
        answer.label,
        answer.nodes.map_or("-".to_string(), |n| n.to_string()),
        answer.bound.map_or("-".to_string(), |b| format!("{b:.1}"))
    );
    let Some(cols) = answer.columns else {
        return (warm.clone(), format!("{note} (sweep kept)"));
    };
    decode(ctx, target, warm, &options, &vars, &down, &cols, note)
}

/// Builds the model (module doc) over `options` for `target`, `live` being the bytes per step
/// of the keep-everything schedule, warm-started from `warm` where it maps onto the gaps.
fn build(ctx: &Ctx, target: u64, warm: &Sched, live: &[u64], options: &[GapOption]) -> Built {
    let n = ctx.steps();
    let mut pb = Model::new();
    let mut vars: Vec<GapVar> = options
        .iter()
        .map(|o| GapVar {
            spill: pb.add_integer_column(o.spill_cost, 0.0..=1.0),
            recompute: None,
        })
        .collect();
    let mut rows: Vec<(Col, Col)> = Vec::new();
    for (gi, o) in options.iter().enumerate() {
        if let Some((_, cost, needs)) = &o.recompute {
            let col = pb.add_integer_column(*cost, 0.0..=1.0);
            vars[gi].recompute = Some(col);
            for &g2 in needs {
                rows.push((col, vars[g2].spill));
            }
        }
    }
    for v in &vars {
        if let Some(r) = v.recompute {
            pb.add_row(..=1.0, [(v.spill, 1.0), (r, 1.0)]);
        }
    }
    // The input must be kept: recompute + spill(x) + recompute(x) ≤ 1.
    for (col, xspill) in &rows {
        let mut terms = vec![(*col, 1.0), (*xspill, 1.0)];
        if let Some(g2) = vars.iter().position(|v| v.spill == *xspill) {
            if let Some(r2) = vars[g2].recompute {
                terms.push((r2, 1.0));
            }
        }
        pb.add_row(..=1.0, terms);
    }
    // Memory rows, in MiB-ish units to keep coefficients tame.
    let unit = 1024.0;
    let mut terms: Vec<Vec<(Col, f64)>> = vec![Vec::new(); n];
    for (v, o) in vars.iter().zip(options) {
        let size = ctx.graph.tensor(o.t).size as f64 / unit;
        for s in (o.a + 1)..o.back {
            if live[s] > target {
                terms[s].push((v.spill, size));
            }
        }
        if let (Some(r), Some((k, _, _))) = (v.recompute, &o.recompute) {
            let (k, v) = (*k, o);
            for s in (v.a + 1)..v.b {
                if live[s] > target {
                    terms[s].push((r, size));
                }
            }
            let ws = ctx.graph.ops[k].workspace;
            if ws > 0 && v.b < n && live[v.b] > target {
                terms[v.b].push((r, -(ws as f64) / unit));
            }
        }
    }
    let mut free = freeable(ctx, options);
    // Conv downgrades (joint algorithm selection): a binary per (conv at an over-target
    // step, algorithm with less workspace), at most one per conv; it frees the workspace
    // difference at that step and costs the modelled time it adds.
    let mut down: Vec<(usize, usize, Col)> = Vec::new();
    for s in 0..n {
        let k = ctx.order[s];
        if live[s] <= target || ctx.downgrades[k].is_empty() {
            continue;
        }
        let ws = ctx.graph.ops[k].workspace;
        let mut cols = Vec::new();
        for (i, o) in ctx.downgrades[k].iter().enumerate() {
            let col = pb.add_integer_column((o.us - ctx.step_us[s]).max(0.0), 0.0..=1.0);
            terms[s].push((col, (ws - o.workspace) as f64 / unit));
            cols.push((col, 1.0));
            down.push((k, i, col));
        }
        pb.add_row(..=1.0, cols);
        free[s] += ws
            - ctx.downgrades[k]
                .iter()
                .map(|o| o.workspace)
                .min()
                .unwrap_or(ws);
    }
    for s in 0..n {
        if live[s] > target {
            // Best effort, as the sweep: a step no eviction set can bring under the target
            // asks only for what can be freed there.
            let row = std::mem::take(&mut terms[s]);
            let excess = ((live[s] - target).min(free[s])) as f64 / unit;
            if excess > 0.0 {
                pb.add_row(excess.., row);
            }
        }
    }
    // Warm start from the sweep where it maps onto the model's gaps.
    let ncols = vars.len() + vars.iter().filter(|v| v.recompute.is_some()).count() + down.len();
    let mut start = vec![0.0; ncols];
    for (v, o) in vars.iter().zip(options) {
        match warm.gaps[o.t.index()].get(&o.a) {
            Some(Gap::Spill { .. }) if warm.next_use(o.t, o.a) == Some(o.b) => {
                start[v.spill.index()] = 1.0
            }
            Some(Gap::Recompute) => {
                if let Some(r) = v.recompute {
                    start[r.index()] = 1.0;
                }
            }
            _ => {}
        }
    }
    for &(k, i, col) in &down {
        if warm.algo.get(&k) == Some(&i) {
            start[col.index()] = 1.0;
        }
    }
    Built {
        model: pb,
        vars,
        down,
        start,
    }
}

/// The schedule of HiGHS' solution `cols` (with its `note`), or the sweep's `warm` when it
/// peaks above both the target and the sweep.
#[allow(clippy::too_many_arguments)]
fn decode(
    ctx: &Ctx,
    target: u64,
    warm: &Sched,
    options: &[GapOption],
    vars: &[GapVar],
    down: &[(usize, usize, Col)],
    cols: &[f64],
    note: String,
) -> (Sched, String) {
    let on = |c: Col| cols.get(c.index()).is_some_and(|&x| x > 0.5);
    let choice: Vec<u8> = vars
        .iter()
        .map(|v| match (on(v.spill), v.recompute.is_some_and(on)) {
            (_, true) => 2,
            (true, false) => 1,
            _ => 0,
        })
        .collect();
    let mut sched = schedule_of(ctx, options, &choice);
    for &(k, i, col) in down {
        if on(col) {
            sched.algo.insert(k, i);
        }
    }
    let peak = |s: &Sched| s.live(ctx).into_iter().max().unwrap_or(0);
    if peak(&sched) > target.max(peak(warm)) {
        return (
            warm.clone(),
            format!("{note} (missed the target; sweep kept)"),
        );
    }
    (sched, note)
}

/// What HiGHS answered, as plain data.
pub(crate) struct Answer {
    /// `optimal`, `node_limit`, `iteration_limit`, `time_limit`, `cancelled`, `infeasible`
    /// or `stopped`.
    pub(crate) label: &'static str,
    /// Branch-and-bound nodes explored.
    pub(crate) nodes: Option<u64>,
    /// The dual bound (µs of estimated cost).
    pub(crate) bound: Option<f64>,
    /// The column values of its solution, when it has a feasible one.
    pub(crate) columns: Option<Vec<f64>>,
}

/// The outcome of [`run_model`].
pub(crate) enum Run {
    Answer(Answer),
    /// HiGHS failed (what failed).
    Failed(&'static str),
}

/// Solves `pb` warm-started from `start` under `limits`. The solver's HiGHS layer guards the
/// solve (`memplan_solver::mip::overrun`): a raised stop flag returns within its
/// `STOP_GRACE` even while HiGHS is in a phase that does not poll it, with the best solution
/// HiGHS had reported.
pub(crate) fn run_model(pb: Model, start: Vec<f64>, limits: &Limits) -> Run {
    run_model_with(pb, start, limits, false, None)
}

/// [`run_model`] with HiGHS' presolve on or off. On, a model that presolve solves outright
/// may hand back the warm start's columns (HiGHS 1.x), which a caller must treat as "no
/// better solution". The options are the module doc's; an option or warm start HiGHS refuses
/// is skipped (the sweep is the fallback anyway).
///
/// `lp_cap` caps HiGHS' LP iterations in all (deterministic, like the node cap; see
/// [`MipOptions::max_lp_iterations`]); a model it stops ends `iteration_limit`.
pub(crate) fn run_model_with(
    pb: Model,
    start: Vec<f64>,
    limits: &Limits,
    presolve: bool,
    lp_cap: Option<u64>,
) -> Run {
    let nodes = limits.nodes;
    let options = MipOptions {
        // One thread and no time limit: with a node cap only, HiGHS is deterministic.
        threads: 1,
        mip_rel_gap: 1e-6,
        // With presolve on, a model presolve solves outright hands back the warm start's
        // column values (HiGHS 1.x), losing the solution.
        presolve,
        time_limit: limits.time.map(|t| t.as_secs_f64().max(0.01)),
        max_nodes: nodes,
        max_lp_iterations: lp_cap,
        switched_off: if nodes.is_some() || lp_cap.is_some() {
            memplan_solver::mip::NODE_CAPPED_OFF.to_vec()
        } else {
            Vec::new()
        },
        lenient: true,
    };
    let watch = Watch {
        cancel: limits.cancel.as_ref().map(|c| c.flag()),
        ..Watch::NONE
    };
    let solution = match mip::solve(pb, &options, &start, &watch) {
        Ok(solution) => solution,
        Err(MipError::Build(_)) => return Run::Failed("building the model"),
        Err(_) => return Run::Failed("solving"),
    };
    let label = match solution.status {
        MipStatus::Optimal => "optimal",
        MipStatus::TimeLimit => "time_limit",
        // HiGHS reports its node cap (`mip_max_nodes`) as a solution limit.
        MipStatus::SolutionLimit => "node_limit",
        MipStatus::IterationLimit => "iteration_limit",
        MipStatus::Interrupt => "cancelled",
        MipStatus::Infeasible => "infeasible",
        _ => "stopped",
    };
    Run::Answer(Answer {
        label,
        nodes: solution.nodes,
        bound: solution.dual_bound,
        columns: solution.columns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::schedule::Params;
    use crate::cost::DeviceProfile;
    use crate::graph::Graph;
    use serde_json::json;

    fn graph() -> Graph {
        // a = relu(x) is read again at the end, while x stays resident (py reads it).
        Graph::parse(
            r#"{"format": "memplan-graph/1", "name": "g", "alignment": 1,
                "tensors": [
                  {"name": "x", "size": 10, "kind": "input"},
                  {"name": "a", "size": 100, "kind": "activation"},
                  {"name": "b", "size": 10, "kind": "activation"},
                  {"name": "c", "size": 10, "kind": "activation"},
                  {"name": "d", "size": 10, "kind": "activation"},
                  {"name": "y", "size": 10, "kind": "output"}],
                "ops": [
                  {"name": "pa", "type": "relu", "inputs": ["x"], "outputs": ["a"]},
                  {"name": "pb", "inputs": ["a"], "outputs": ["b"], "time_us": 1000},
                  {"name": "pc", "inputs": ["b"], "outputs": ["c"], "time_us": 1000},
                  {"name": "pd", "inputs": ["c"], "outputs": ["d"], "time_us": 1000},
                  {"name": "py", "inputs": ["d", "a", "x"], "outputs": ["y"]}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn the_program_meets_a_reachable_target_at_the_cheapest_modelled_cost() {
        let g = graph();
        let ctx = Ctx::new(
            &g,
            &[0, 1, 2, 3, 4],
            DeviceProfile::h200(),
            Params::default(),
        );
        let warm = Sched::keep_all(&ctx);
        let (s, note) = solve(&ctx, 40, &warm, &Limits::with_time(Duration::from_secs(5)));
        assert!(note.starts_with("optimal"), "{note}");
        assert!(
            s.live(&ctx)[2..4].iter().all(|&l| l <= 40),
            "{:?}",
            s.live(&ctx)
        );
        // Re-running the relu is cheaper than a round trip over the link.
        assert_eq!(s.gaps[1].get(&1), Some(&Gap::Recompute));
    }

    #[test]
    fn an_unreachable_target_gets_a_best_effort_schedule_no_worse_than_the_warm_start() {
        let g = graph();
        let ctx = Ctx::new(
            &g,
            &[0, 1, 2, 3, 4],
            DeviceProfile::h200(),
            Params::default(),
        );
        let warm = Sched::keep_all(&ctx);
        let (s, _) = solve(&ctx, 5, &warm, &Limits::with_time(Duration::from_secs(5)));
        let peak = |s: &Sched| s.live(&ctx).into_iter().max().unwrap();
        // Best effort: never a higher peak than the warm start.
        assert!(peak(&s) <= peak(&warm));
    }

    #[test]
    fn a_node_capped_program_says_it_stopped_at_its_node_cap() {
        let g = graph();
        let ctx = Ctx::new(
            &g,
            &[0, 1, 2, 3, 4],
            DeviceProfile::h200(),
            Params::default(),
        );
        let warm = Sched::keep_all(&ctx);
        let capped = Limits {
            nodes: Some(0),
            ..Limits::UNLIMITED
        };
        let (_, note) = solve(&ctx, 40, &warm, &capped);
        assert!(note.starts_with("node_limit"), "{note}");
    }

    #[test]
    fn a_raised_token_keeps_the_warm_start_without_solving() {
        let g = graph();
        let ctx = Ctx::new(
            &g,
            &[0, 1, 2, 3, 4],
            DeviceProfile::h200(),
            Params::default(),
        );
        let warm = Sched::keep_all(&ctx);
        let token = memplan_solver::CancelToken::new();
        token.cancel();
        let stopped = Limits {
            cancel: Some(token),
            ..Limits::UNLIMITED
        };
        let (s, note) = solve(&ctx, 40, &warm, &stopped);
        assert!(note.starts_with("cancelled"), "{note}");
        assert_eq!(s.live(&ctx), warm.live(&ctx));
    }

    #[test]
    fn an_effort_turns_the_time_limit_into_a_node_cap() {
        let g = graph();
        let mut ctx = Ctx::new(
            &g,
            &[0, 1, 2, 3, 4],
            DeviceProfile::h200(),
            Params::default(),
        );
        let ilp = Ilp::default();
        assert_eq!(ilp.limits(&ctx).time, Some(DEFAULT_TIME));
        assert_eq!(ilp.limits(&ctx).nodes, None);
        ctx.effort = Some(3);
        assert_eq!(ilp.limits(&ctx).time, None);
        assert_eq!(ilp.limits(&ctx).nodes, Some(3 * DEFAULT_NODES));
    }

    /// A tiny random training-like graph: a forward chain whose activations are read again
    /// in reverse order, some ops cheap (relu), times and workspaces random.
    fn tiny(seed: u64) -> Graph {
        let mut rng = seed | 1;
        let mut next = move |m: u64| {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            (rng.wrapping_mul(0x2545F4914F6CDD1D) >> 11) % m.max(1)
        };
        let f = 2 + next(3) as usize;
        let mut tensors = vec![json!({"name": "x", "size": 1 + next(100), "kind": "input"})];
        let mut ops = Vec::new();
        let mut prev = "x".to_string();
        for i in 0..f {
            let name = format!("f{i}");
            tensors.push(json!({"name": name, "size": 1 + next(100), "kind": "activation"}));
            let ty = if next(2) == 0 { "relu" } else { "conv2d" };
            let mut op = json!({"name": name, "type": ty, "inputs": [prev], "outputs": [name],
                                "time_us": next(20)});
            if next(3) == 0 {
                op["workspace"] = json!(1 + next(50));
            }
            ops.push(op);
            prev = name;
        }
        for i in (0..f).rev() {
            let name = format!("g{i}");
            let kind = if i == 0 { "output" } else { "activation" };
            tensors.push(json!({"name": name, "size": 1 + next(100), "kind": kind}));
            ops.push(
                json!({"name": name, "type": "backward", "inputs": [prev, format!("f{i}")],
                            "outputs": [name], "time_us": next(20)}),
            );
            prev = name;
        }
        let g = json!({"format": "memplan-graph/1", "name": "tiny", "alignment": 1,
                       "tensors": tensors, "ops": ops});
        Graph::parse(&g.to_string()).unwrap()
    }

    #[test]
    fn the_program_finds_the_brute_force_optimum_on_tiny_graphs() {
        let mut checked = 0;
        for seed in 0..40u64 {
            let g = tiny(seed);
            let order: Vec<usize> = (0..g.ops.len()).collect();
            let ctx = Ctx::new(&g, &order, DeviceProfile::h200(), Params::default());
            let options = gap_options(&ctx);
            let keep = Sched::keep_all(&ctx).live(&ctx);
            let peak = *keep.iter().max().unwrap();
            let free = freeable(&ctx, &options);
            for pct in [50u64, 70, 90] {
                let target = peak * pct / 100;
                // Brute force over keep / spill / recompute per option.
                let m = options.len();
                let mut best: Option<f64> = None;
                let mut choice = vec![0u8; m];
                'all: loop {
                    let ok_needs = options.iter().zip(&choice).all(|(o, &c)| {
                        c != 2
                            || o.recompute
                                .as_ref()
                                .is_some_and(|(_, _, needs)| needs.iter().all(|&n| choice[n] == 0))
                    });
                    if ok_needs {
                        let live = schedule_of(&ctx, &options, &choice).live(&ctx);
                        let fits = (0..keep.len()).all(|s| {
                            keep[s] <= target
                                || keep[s] - live[s].min(keep[s]) >= (keep[s] - target).min(free[s])
                        });
                        if fits {
                            let cost: f64 = options
                                .iter()
                                .zip(&choice)
                                .map(|(o, &c)| match c {
                                    1 => o.spill_cost,
                                    2 => o.recompute.as_ref().map_or(0.0, |r| r.1),
                                    _ => 0.0,
                                })
                                .sum();
                            if best.is_none_or(|b| cost < b) {
                                best = Some(cost);
                            }
                        }
                    }
                    // Next choice vector (mixed radix: 3 where recompute exists, else 2).
                    let mut i = 0;
                    loop {
                        if i == m {
                            break 'all;
                        }
                        let radix = if options[i].recompute.is_some() { 3 } else { 2 };
                        choice[i] += 1;
                        if choice[i] < radix {
                            break;
                        }
                        choice[i] = 0;
                        i += 1;
                    }
                }
                let Some(best) = best else { continue };
                let warm = Sched::keep_all(&ctx);
                let (sched, note) = solve(
                    &ctx,
                    target,
                    &warm,
                    &Limits::with_time(Duration::from_secs(10)),
                );
                if peak <= target {
                    continue;
                }
                assert!(note.starts_with("optimal"), "seed {seed} {pct}%: {note}");
                let got: f64 = options
                    .iter()
                    .map(|o| match sched.gaps[o.t.index()].get(&o.a) {
                        Some(Gap::Spill { .. }) => o.spill_cost,
                        Some(Gap::Recompute) => o.recompute.as_ref().map_or(0.0, |r| r.1),
                        None => 0.0,
                    })
                    .sum();
                assert!(
                    (got - best).abs() <= 1e-6 + 1e-5 * best.abs(),
                    "seed {seed} {pct}%: program {got} vs brute force {best}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 20, "only {checked} cases checked");
    }
}
