//! The joint program: op order, spill and recompute chosen together by one HiGHS integer
//! program per window of steps (MODeL's time-indexed order variables with Checkmate's
//! per-step residency, recompute and spill decisions), warm-started from the best sequential
//! plan and never worse than it.
//!
//! **Model of a window** `[p, q)` of the incumbent's order (`w = q − p` steps; the whole
//! graph when it has at most [`JointOptions::whole_max`] ops):
//! - order: `x[v][k]` (op `v` of the window runs at window step `k`), one op per step and
//!   one step per op, `k` within the op's in-window ASAP/ALAP range, precedence as
//!   cumulative rows `Σ_{k'≤k} x[v][k'] ≤ Σ_{k'<k} x[u][k']` for every in-window edge `u → v`;
//! - residency: `r[t][k] ∈ [0, 1]` for every tensor resident in the window in the incumbent,
//!   touched by a window op, or an input of such a tensor's producer (two levels, for
//!   chains). A read or a write at `k` needs `r[t][k] ≥ x[v][k]`; `r[t][k] ≤ r[t][k−1] +
//!   birth + spill_in + recompute (+ input alloc)` (Checkmate's R/S/F form: the events are
//!   binaries, so `r` is integral wherever it matters);
//! - spill: a `spill_in` at `k` needs an earlier residency (whose end becomes a
//!   `spill_out`); it is *hidden* (cheap) only when no read follows within `L_t` steps, the
//!   steps of average compute that cover `margin ×` its transfer, else *late* (its transfer
//!   time is paid);
//! - recompute: the single producer (that may run twice, [`crate::ops::may_recompute`]) runs
//!   again at `k`, needing each of its inputs resident at `k`, which may itself be a recompute
//!   at `k` (chains, run in topological order within the step);
//! - boundaries: the state before `p` and from `q` on is the incumbent's: a tensor the
//!   incumbent keeps resident across `q` must be resident at the window's last step;
//! - memory: at each step, resident bytes + the op's workspace + the recomputes' workspaces
//!   ≤ the cap (the target, or the incumbent's own live bytes there when higher, so the warm
//!   start is feasible);
//! - objective (µs, the sequential programs' estimate): per hidden spill a share of the link
//!   time both ways ([`LINK_SHARE`], or the incumbent's transfer-to-compute ratio when the
//!   copy streams are the busier, up to all of it), per late spill that plus the transfer in, per recompute the
//!   producer's time, plus a tie-breaker of 10⁻⁹ µs per byte-step resident.
//!
//! **Decomposition.** Graphs over [`JointOptions::whole_max`] ops are solved in three passes
//! of windows, each pass on the incumbent as improved so far, each window chosen among those
//! with the most incumbent spill / recompute cost (at most [`JointOptions::windows`] of them
//! per pass, disjoint, solved in step order):
//! 1. the *fixed-order* pass: windows of [`JointOptions::fixed_window`] steps whose order
//!    columns are fixed at the incumbent's, so only residency is re-decided (which tensors
//!    leave, when they come back, what is recomputed, chains included). With the order fixed
//!    a later spill-in or recompute costs the same and holds memory for less time, so these
//!    events get columns only at the latest useful step before each need (`Window::slots`).
//!    Such a model stays easy at up to `MAX_FIXED_CELLS` tensor × step cells, and so sees
//!    eviction choices that span far more steps than a reordering window. It runs without
//!    presolve (HiGHS 1.x hands back the warm start when presolve solves a model outright)
//!    and under a cap in LP iterations ([`JointOptions::fixed_lp_iterations`]) beside the
//!    node cap, so that where it stops does not depend on the machine;
//! 2. the *order* pass: windows of [`JointOptions::window`] steps, order and residency
//!    together (up to `MAX_CELLS` cells);
//! 3. the order pass again with windows half as long again (half as many; other boundaries).
//!
//! A window model too large for its pass is cut to its later half until it fits. A window's
//! solution with a strictly lower estimated cost is placed, emitted and simulated by the
//! caller and kept only when the simulated overhead drops.
//!
//! **Bound.** For a whole-graph model, HiGHS' dual bound is a proven lower bound on the
//! estimated cost of any plan under the cap (the report's `bound_us`). A window's bound only
//! covers that window, so a decomposed run reports [`eviction_bound`] instead (valid for
//! every plan in every order, and weak), with the final plan's estimated cost for the gap.
//!
//! **Complexity.** A window has `O(w²)` order columns (fewer with the ASAP/ALAP ranges) and
//! `O(w · |T_w|)` residency and event columns for the `|T_w|` tensors it models; HiGHS is
//! bounded by [`JointOptions::limits`] per window.
//!
//! References: Steiner et al., "MODeL: memory optimizations for deep learning" (ICML 2023);
//! Jain et al., "Checkmate: breaking the memory wall with optimal tensor rematerialization"
//! (MLSys 2020); Beaumont et al., POET (ICML 2022) for paging.

use super::program::{run_model_with, Run};
use super::residency::{Residency, Span};
use super::schedule::{Ctx, Start};
use super::sweep::LINK_SHARE;
use crate::graph::{TensorId, TensorKind};
use memplan_solver::mip::{Col, Model};
use memplan_solver::order::bound::order_lower_bound;
use memplan_solver::order::LifetimeOptions;
use memplan_solver::Limits;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Steps per window of a decomposed model.
pub const DEFAULT_WINDOW: usize = 8;
/// Steps per window of the fixed-order residency pass.
pub const DEFAULT_FIXED_WINDOW: usize = 48;
/// Graphs with at most this many ops get one whole-graph model.
pub const DEFAULT_WHOLE_MAX: usize = 40;
/// Windows solved at most per run.
pub const DEFAULT_WINDOWS: usize = 24;
/// Branch-and-bound nodes per window model and unit of effort.
pub const DEFAULT_NODES: u64 = 100;
/// Time limit of one window model without an effort.
pub const DEFAULT_TIME: Duration = Duration::from_millis(500);
/// LP iterations (HiGHS' total over the root, nodes and cuts) of one fixed-order window
/// model per unit of effort. The fixed-order models of the zoo's training graphs under
/// budgets of 40, 60 and 80 % take at most 629 (at most 0.23 s, two cores), so the cap binds
/// only on pathological models; it replaced a clock cap of 1 s, under which what a plan kept
/// could depend on the machine's load.
pub const FIXED_LP_ITERATIONS: u64 = 20_000;

/// Largest window model, in residency cells (tensors × steps): a larger one is cut to its
/// later half until it fits (the window keeps the costly events at its end).
const MAX_CELLS: usize = 320;
/// Largest window model of the fixed-order pass, in residency cells: without order columns a
/// model is far easier, so it may span far more steps and tensors.
const MAX_FIXED_CELLS: usize = 3000;
/// Tie-breaker cost per byte-step resident (µs): 1 GiB resident for 20 steps costs 0.02 µs.
const RESIDENT_US_PER_BYTE: f64 = 1e-12;
/// Memory rows in KiB keep the coefficients tame.
const UNIT: f64 = 1024.0;

/// The switches and limits of the joint program (module doc).
#[derive(Debug, Clone)]
pub struct JointOptions {
    /// Steps per window.
    pub window: usize,
    /// Steps per window of the fixed-order residency pass (0: no such pass).
    pub fixed_window: usize,
    /// Cap on the LP iterations of one fixed-order model (deterministic, like the node cap
    /// of [`Self::limits`]; `None`: none, as without an effort, where the limits' clock caps
    /// every model).
    pub fixed_lp_iterations: Option<u64>,
    /// Graphs with at most this many ops are solved as one model.
    pub whole_max: usize,
    /// Windows solved at most.
    pub windows: usize,
    /// Limits of one model (time, branch-and-bound nodes, stop flag).
    pub limits: Limits,
}

impl JointOptions {
    /// The defaults with `ctx`'s effort and stop flag: `k ×` [`DEFAULT_NODES`] nodes per
    /// model with an effort `k` (deterministic), else [`DEFAULT_TIME`] per model.
    pub fn for_ctx(ctx: &Ctx) -> Self {
        let fixed_lp_iterations = ctx.effort.map(|k| FIXED_LP_ITERATIONS.saturating_mul(k));
        let limits = match ctx.effort {
            Some(k) => Limits {
                time: None,
                nodes: Some(DEFAULT_NODES.saturating_mul(k)),
                cancel: ctx.cancel.clone(),
            },
            None => Limits {
                time: Some(DEFAULT_TIME),
                nodes: None,
                cancel: ctx.cancel.clone(),
            },
        };
        JointOptions {
            window: DEFAULT_WINDOW,
            fixed_window: DEFAULT_FIXED_WINDOW,
            fixed_lp_iterations,
            whole_max: DEFAULT_WHOLE_MAX,
            windows: DEFAULT_WINDOWS,
            limits,
        }
    }
}

/// What a run of the joint program did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JointReport {
    /// One whole-graph model (else windows).
    pub whole: bool,
    /// Models solved.
    pub models: usize,
    /// Models whose solution replaced the incumbent there.
    pub improved: usize,
    /// Of those, fixed-order models.
    pub improved_fixed: usize,
    /// Fixed-order models stopped by their LP iteration cap
    /// ([`JointOptions::fixed_lp_iterations`]); each keeps the best solution it had found.
    pub iteration_capped: usize,
    /// Estimated cost of the incumbent in the solved windows (µs).
    pub cost_before_us: f64,
    /// Estimated cost there after the program (µs).
    pub cost_after_us: f64,
    /// Proven lower bound on the estimated cost (µs): the whole-graph model's dual bound,
    /// else [`eviction_bound`].
    pub bound_us: Option<f64>,
    /// The final plan's estimated cost with every spill-in counted late (µs; decomposed runs,
    /// for the gap to [`Self::bound_us`]).
    pub plan_cost_us: Option<f64>,
    /// How the last model ended (`optimal`, `node_limit`, `time_limit`, ...).
    pub status: String,
}

impl JointReport {
    /// One line for the plan's stats.
    pub fn note(&self) -> String {
        format!(
            "joint program: {} model{} ({}), {} improved{}{}, estimated cost {:.1} → {:.1} us{}; last {}",
            self.models,
            if self.models == 1 { "" } else { "s" },
            if self.whole { "whole graph" } else { "windows" },
            self.improved,
            if self.whole {
                String::new()
            } else {
                format!(" ({} with the order fixed)", self.improved_fixed)
            },
            if self.iteration_capped > 0 {
                format!(
                    ", {} fixed-order models stopped at their LP iteration cap",
                    self.iteration_capped
                )
            } else {
                String::new()
            },
            self.cost_before_us,
            self.cost_after_us,
            self.bound_us.map_or(String::new(), |b| {
                let cost = self.plan_cost_us.unwrap_or(self.cost_after_us);
                let gap = if cost > 0.0 {
                    (cost - b).max(0.0) / cost * 100.0
                } else {
                    0.0
                };
                match self.plan_cost_us {
                    Some(c) => format!(
                        ", proven bound {b:.1} us on any plan's estimated cost, this plan's \
                         {c:.1} us with every spill-in counted late (gap {gap:.2} %)"
                    ),
                    None => format!(", proven bound {b:.1} us (gap {gap:.2} %)"),
                }
            }),
            if self.status.is_empty() {
                "-"
            } else {
                &self.status
            }
        )
    }
}

/// The joint program's result: the new order (op indices), its residency and the report.
#[derive(Debug, Clone)]
pub struct Joint {
    /// Op indices in execution order.
    pub order: Vec<usize>,
    /// What is resident when, on `order`.
    pub residency: Residency,
    /// What the program did.
    pub report: JointReport,
}

/// Improves the incumbent `inc` on `ctx`'s order under `target` live bytes per step (see the
/// module doc). Each window's solution with a lower estimated cost is scored by `score` (the
/// caller places and simulates it: `None` when it does not fit) and kept only when its score
/// is below the best so far, starting from `inc_score`. `None` when no window improved the
/// incumbent (or the program was stopped first); `report` says what was done either way.
pub fn improve(
    ctx: &Ctx,
    inc: &Residency,
    target: u64,
    opts: &JointOptions,
    report: &mut JointReport,
    score: &mut dyn FnMut(&Ctx, &Residency) -> Option<f64>,
    inc_score: f64,
) -> Option<Joint> {
    let n = ctx.steps();
    if n == 0 {
        return None;
    }
    let mut spans = inc.spans();
    // The incumbent as improved so far: its context (order) and residency.
    let mut cur = Ctx::new(ctx.graph, &ctx.order, ctx.profile.clone(), ctx.params);
    let mut res = inc.clone();
    let mut best = inc_score;
    let link_share = link_share(ctx, inc);
    let whole = n <= opts.whole_max;
    report.whole = whole;
    // The fixed-order pass: long windows of `opts.fixed_window` steps around the incumbent's
    // costliest events, order kept, residency re-decided (which tensors leave, when they come
    // back, what is recomputed). Then the order passes: windows of `opts.window` steps around
    // the costliest events left; then half as many windows, half as long again (other
    // boundaries).
    let mut passes: Vec<(bool, usize, usize)> = Vec::new();
    if whole {
        passes.push((false, n, 1));
    } else {
        if opts.fixed_window > opts.window {
            passes.push((true, opts.fixed_window, opts.windows));
        }
        passes.push((false, opts.window, opts.windows));
        passes.push((
            false,
            opts.window + opts.window / 2,
            opts.windows.div_ceil(2),
        ));
    }
    for (fixed, w, most) in passes {
        let windows: Vec<(usize, usize)> = if whole {
            vec![(0, n)]
        } else {
            pick_windows(&cur, &res, w, most)
        };
        let max_cells = if fixed { MAX_FIXED_CELLS } else { MAX_CELLS };
        for (p, q) in windows {
            if opts.limits.is_cancelled() {
                break;
            }
            let live = res.live(&cur);
            // A window whose model would be too large starts later (fewer steps).
            let mut p = p;
            let win = loop {
                match Window::new(&cur, inc, &spans, (p, q), fixed, link_share) {
                    Some(win) if win.cells() > max_cells && q - p > 2 => p += (q - p) / 2,
                    other => break other,
                }
            };
            let Some(win) = win else {
                continue;
            };
            let caps: Vec<u64> = (p..q).map(|s| live[s].max(target)).collect();
            report.models += 1;
            let out = if fixed {
                // A fixed-order model may span thousands of cells, and its cuts can cost far
                // more than its nodes: the LP iteration cap bounds it where it stops on every
                // machine, and what it found by then is kept.
                let out = win.solve(&caps, &opts.limits, opts.fixed_lp_iterations);
                if out.label == "iteration_limit" {
                    report.iteration_capped += 1;
                }
                out
            } else {
                win.solve(&caps, &opts.limits, None)
            };
            report.status = out.label.to_string();
            report.cost_before_us += out.before;
            if whole {
                report.bound_us = out.bound;
            }
            let mut kept = false;
            if let Some((new_order, new_spans, cost)) = out.solution {
                if cost < out.before * (1.0 - 1e-4) - 1e-6 {
                    let mut cand_order = cur.order.clone();
                    cand_order[p..q].copy_from_slice(&new_order);
                    let mut cand_spans = spans.clone();
                    for (t, s) in new_spans {
                        cand_spans[t.index()] = s;
                    }
                    let cctx = Ctx::new(ctx.graph, &cand_order, ctx.profile.clone(), ctx.params);
                    let cres = Residency::from_spans(
                        &cctx,
                        &cand_spans,
                        inc.workspace.clone(),
                        inc.graph.clone(),
                    );
                    if let Some(sc) = score(&cctx, &cres).filter(|&sc| sc < best - 1e-9) {
                        best = sc;
                        cur = cctx;
                        res = cres;
                        spans = cand_spans;
                        kept = true;
                        report.improved += 1;
                        report.improved_fixed += usize::from(fixed);
                        report.cost_after_us += cost;
                    }
                }
            }
            if !kept {
                report.cost_after_us += out.before;
            }
        }
    }
    if report.improved == 0 {
        return None;
    }
    Some(Joint {
        order: cur.order,
        residency: res,
        report: report.clone(),
    })
}

/// The share of a hidden spill's link time that counts as its cost: [`LINK_SHARE`], or the
/// incumbent's transfer time over its compute time when that is more (at most 1). When the
/// copy streams are busier than the compute stream, every transfer delays the step, hidden
/// or not, and a recompute is then worth more than a well-timed spill.
fn link_share(ctx: &Ctx, inc: &Residency) -> f64 {
    let mut transfer = 0.0;
    for ivs in &inc.intervals {
        for iv in ivs.iter().filter(|iv| iv.how_start == Start::SpillIn) {
            let size = ctx.graph.tensor(iv.tensor).size;
            transfer += ctx.profile.h2d_us(size) + ctx.profile.d2h_us(size);
        }
    }
    let compute = ctx.prefix_us[ctx.steps()];
    if compute <= 0.0 {
        return LINK_SHARE;
    }
    (transfer / compute).clamp(LINK_SHARE, 1.0)
}

/// A proven lower bound (µs) on the estimated cost of any plan of `ctx.graph` (its
/// algorithms as chosen), in any order, whose live bytes stay within `budget`. The min-cut
/// order bound says that every order has a step with at least `LB` bytes live; less the
/// graph inputs (a plan may bring them in late) and the largest workspace, at least
/// `LB − budget` of those bytes are away at that step under the budget, and each of those
/// tensors is needed later, so it comes back by a spill-in or a recompute. Each byte away
/// costs at least the cheapest rate of any tensor: a hidden spill's [`LINK_SHARE`] of the
/// link time both ways, or its producer's time when it may be recomputed. Valid for every
/// plan, and weak: it sees one step. Its cost is the min-cut bound's (under 1 s on a 1.6k-op
/// graph).
pub fn eviction_bound(ctx: &Ctx, budget: u64) -> f64 {
    let g = ctx.graph;
    let lb = order_lower_bound(&g.order_problem(), &LifetimeOptions::default());
    let inputs: u64 = g
        .tensors
        .iter()
        .filter(|t| t.kind == TensorKind::Input)
        .map(|t| t.size)
        .sum();
    let workspace = g.ops.iter().map(|o| o.workspace).max().unwrap_or(0);
    let deficit = lb
        .saturating_sub(inputs)
        .saturating_sub(workspace)
        .saturating_sub(budget);
    if deficit == 0 {
        return 0.0;
    }
    let mut rate = f64::INFINITY;
    for (i, t) in g.tensors.iter().enumerate() {
        if t.kind == TensorKind::Weight || t.size == 0 {
            continue;
        }
        let size = t.size as f64;
        let link = ctx.profile.h2d_us(t.size) + ctx.profile.d2h_us(t.size);
        rate = rate.min(LINK_SHARE * link / size);
        if let Some(k) = ctx.recompute_producer(TensorId(i as u32)) {
            rate = rate.min(ctx.profile.op_us(g, &g.ops[k]) / size);
        }
    }
    if rate.is_finite() {
        deficit as f64 * rate.max(0.0)
    } else {
        0.0
    }
}

/// The estimated cost (µs) of `res` on `ctx`'s order, every spill-in counted late (its
/// transfer in paid, plus [`LINK_SHARE`] of the link time both ways), every recompute at its
/// producer's time.
pub fn estimated_cost(ctx: &Ctx, res: &Residency) -> f64 {
    event_costs(ctx, res).iter().sum()
}

/// The estimated cost (µs) of each spill-in and recompute start of `inc` by step.
fn event_costs(ctx: &Ctx, inc: &Residency) -> Vec<f64> {
    let mut cost = vec![0.0; ctx.steps()];
    for ivs in &inc.intervals {
        for iv in ivs {
            let size = ctx.graph.tensor(iv.tensor).size;
            let c = match iv.how_start {
                Start::SpillIn => {
                    ctx.profile.h2d_us(size)
                        + LINK_SHARE * (ctx.profile.h2d_us(size) + ctx.profile.d2h_us(size))
                }
                Start::Recompute => ctx
                    .single_producer(iv.tensor)
                    .map_or(0.0, |k| ctx.profile.op_us(&inc.graph, &inc.graph.ops[k])),
                _ => 0.0,
            };
            if let Some(x) = cost.get_mut(iv.start) {
                *x += c;
            }
        }
    }
    cost
}

/// Disjoint windows of `window` steps with the most incumbent event cost, at most `most`,
/// in step order.
fn pick_windows(ctx: &Ctx, inc: &Residency, window: usize, most: usize) -> Vec<(usize, usize)> {
    let n = ctx.steps();
    let w = window.clamp(2, n);
    let cost = event_costs(ctx, inc);
    let mut prefix = vec![0.0; n + 1];
    for s in 0..n {
        prefix[s + 1] = prefix[s] + cost[s];
    }
    // Tiles of the order, and windows ending just after each costly event (room to bring
    // it back earlier, or to recompute it from what is resident).
    let half = (w / 2).max(1);
    let mut starts: BTreeSet<usize> = (0..=n - w).step_by(half).collect();
    starts.insert(n - w);
    for (s, &c) in cost.iter().enumerate() {
        if c > 0.0 {
            starts.insert((s + 2).min(n).saturating_sub(w));
        }
    }
    let mut cands: Vec<(f64, usize)> = starts
        .into_iter()
        .map(|p| (prefix[p + w] - prefix[p], p))
        .filter(|&(c, _)| c > 0.0)
        .collect();
    cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut chosen: Vec<(usize, usize)> = Vec::new();
    for (_, p) in cands {
        let q = (p + w).min(n);
        if chosen.iter().all(|&(a, b)| q <= a || b <= p) {
            chosen.push((p, q));
            if chosen.len() >= most {
                break;
            }
        }
    }
    chosen.sort_unstable();
    chosen
}

/// One modelled tensor of a window.
#[derive(Debug, Clone)]
struct Tensor {
    t: TensorId,
    size: u64,
    /// Resident at step `p − 1` in the incumbent.
    s0: bool,
    /// Resident at some step before `p` in the incumbent.
    born_before: bool,
    /// The window op (index) producing it.
    prod: Option<usize>,
    /// A graph input first allocated in the window.
    input_alloc: bool,
    /// Must be resident at the window's last step.
    end_must: bool,
    /// Window ops (indices) reading it.
    readers: Vec<usize>,
    /// Spill-in events allowed.
    can_spill: bool,
    /// Recompute allowed: the producer op and its inputs (indices into the modelled tensors).
    recompute: Option<(usize, Vec<usize>)>,
    /// Compute (µs, on the current order) that hides its spill: `margin ×` the transfer in,
    /// plus the transfer out when the window itself may have to send it out first.
    need_us: f64,
    /// First use at or after `q` (step).
    next_out: Option<usize>,
}

/// The event columns of one modelled tensor at one window step.
#[derive(Debug, Clone, Copy, Default)]
struct Events {
    hidden: Option<Col>,
    late: Option<Col>,
    recompute: Option<Col>,
    alloc: Option<Col>,
}

/// A window's solution: its op order (op indices), the modelled tensors' new spans and its
/// estimated cost (µs).
type Solution = (Vec<usize>, Vec<(TensorId, Vec<Span>)>, f64);

/// What a window model answered.
struct Outcome {
    label: &'static str,
    /// Estimated cost of the incumbent there (µs).
    before: f64,
    bound: Option<f64>,
    /// The window's new op order, the new spans of the modelled tensors and the cost (µs).
    solution: Option<Solution>,
}

/// A window `[p, q)` of the current order and what it models.
struct Window<'a, 'g> {
    ctx: &'a Ctx<'g>,
    spans: &'a [Vec<Span>],
    p: usize,
    q: usize,
    /// Op indices at the window's steps (the incumbent's order).
    ops: Vec<usize>,
    /// ASAP / ALAP step of each window op.
    lo: Vec<usize>,
    hi: Vec<usize>,
    /// In-window edges `(u, v)` (window op indices).
    edges: Vec<(usize, usize)>,
    /// The order is fixed at the incumbent's (the fixed-order pass): spill-ins and
    /// recomputes then get columns only at the steps where they can pay off ([`Self::slots`]).
    fixed: bool,
    tensors: Vec<Tensor>,
    /// Bytes of the frozen tensors resident across the window.
    frozen_bytes: u64,
    /// The share of a hidden spill's link time that it costs ([`link_share`]).
    link_share: f64,
    /// Op time (µs) and workspace (bytes) of every op under the incumbent's algorithms.
    op_us: Vec<f64>,
    workspace: Vec<u64>,
}

/// Adds a column (binary when `int`) with objective `cost`, warm-started at `v0`.
fn col(pb: &mut Model, start: &mut Vec<f64>, cost: f64, int: bool, v0: f64) -> Col {
    let c = if int {
        pb.add_integer_column(cost, 0.0..=1.0)
    } else {
        pb.add_column(cost, 0.0..=1.0)
    };
    start.push(v0);
    c
}

/// The span of `spans` covering step `s`.
fn resident(spans: &[Span], s: usize) -> Option<&Span> {
    spans.iter().find(|r| r.start <= s && s < r.end)
}

impl<'a, 'g> Window<'a, 'g> {
    fn new(
        ctx: &'a Ctx<'g>,
        inc: &Residency,
        spans: &'a [Vec<Span>],
        (p, q): (usize, usize),
        fixed: bool,
        link_share: f64,
    ) -> Option<Self> {
        let g = ctx.graph;
        let n = ctx.steps();
        let w = q.checked_sub(p).filter(|&w| w > 0)?;
        let ops: Vec<usize> = ctx.order[p..q].to_vec();
        let pos: BTreeMap<usize, usize> = ops.iter().enumerate().map(|(i, &k)| (k, i)).collect();
        let mut edges = BTreeSet::new();
        for (i, &k) in ops.iter().enumerate() {
            for &t in &g.ops[k].inputs {
                if let Some(u) = g.producer[t.index()] {
                    if let Some(&j) = pos.get(&u.index()) {
                        if j != i {
                            edges.insert((j, i));
                        }
                    }
                }
            }
        }
        let edges: Vec<(usize, usize)> = edges.into_iter().collect();
        // Edges go forward in the incumbent's (topological) order.
        let mut lo = vec![0usize; w];
        for v in 0..w {
            for &(u, _) in edges.iter().filter(|e| e.1 == v) {
                lo[v] = lo[v].max(lo[u] + 1);
            }
        }
        let mut hi = vec![w - 1; w];
        for u in (0..w).rev() {
            for &(_, v) in edges.iter().filter(|e| e.0 == u) {
                hi[u] = hi[u].min(hi[v].saturating_sub(1));
            }
        }
        if fixed {
            // Every op keeps its step: the order columns are fixed at the incumbent's.
            lo = (0..w).collect();
            hi = (0..w).collect();
        }
        // Modelled tensors: those window ops touch and those whose residency the incumbent
        // changes inside the window; the others are frozen (resident across the whole window,
        // or absent), their bytes a constant of the memory rows.
        let mut set: BTreeSet<usize> = BTreeSet::new();
        for (i, sp) in spans.iter().enumerate() {
            if sp
                .iter()
                .any(|r| (p..q).contains(&r.start) || (p < r.end && r.end < q))
            {
                set.insert(i);
            }
        }
        for &k in &ops {
            for &t in g.ops[k].inputs.iter().chain(&g.ops[k].outputs) {
                if g.tensor(t).kind != TensorKind::Weight {
                    set.insert(t.index());
                }
            }
        }
        let across = |i: usize| spans[i].iter().any(|r| r.start < p && r.end >= q);
        let born = |i: usize| {
            spans[i].iter().any(|r| r.start < p)
                || g.producer[i].is_some_and(|u| pos.contains_key(&u.index()))
        };
        // Inputs of recomputable producers, two levels deep, so that chains can be
        // recomputed (a frozen resident input needs no columns).
        for _ in 0..2 {
            let mut more = Vec::new();
            for &i in &set {
                if let Some(k) = ctx.recompute_producer(TensorId(i as u32)) {
                    for u in ctx.arena_inputs(k) {
                        let u = u.index();
                        if !set.contains(&u) && !across(u) && born(u) {
                            more.push(u);
                        }
                    }
                }
            }
            set.extend(more);
        }
        let frozen_bytes: u64 = (0..spans.len())
            .filter(|&i| !set.contains(&i) && across(i))
            .map(|i| g.tensors[i].size)
            .sum();
        let index: BTreeMap<usize, usize> = set.iter().enumerate().map(|(j, &i)| (i, j)).collect();
        let mut tensors = Vec::with_capacity(set.len());
        for &i in &set {
            let t = TensorId(i as u32);
            let tensor = g.tensor(t);
            let sp = &spans[i];
            let event_here = sp.iter().any(|r| {
                (p..q).contains(&r.start) && matches!(r.how, Start::SpillIn | Start::Recompute)
            });
            let born_before = sp.iter().any(|r| r.start < p);
            let prod = g.producer[i].and_then(|u| pos.get(&u.index()).copied());
            let input_alloc = tensor.kind == TensorKind::Input && !born_before;
            let end_must = if q < n {
                resident(sp, q).is_some_and(|r| r.start < q)
            } else {
                tensor.kind == TensorKind::Output
            };
            let readers: Vec<usize> = ops
                .iter()
                .enumerate()
                .filter(|(_, &k)| g.ops[k].inputs.contains(&t))
                .map(|(j, _)| j)
                .collect();
            let can_evict = tensor.size >= ctx.params.min_spill_bytes || event_here;
            let recompute = ctx
                .recompute_producer(t)
                .filter(|_| {
                    can_evict && matches!(tensor.kind, TensorKind::Activation | TensorKind::Output)
                })
                .and_then(|k| {
                    // Modelled inputs get a row; frozen resident ones need none; an input
                    // absent throughout the window rules the recompute out.
                    let mut ins = Vec::new();
                    for u in ctx.arena_inputs(k) {
                        match index.get(&u.index()) {
                            Some(&j) => ins.push(j),
                            None if across(u.index()) => {}
                            None => return None,
                        }
                    }
                    Some((k, ins))
                });
            let s0 = p > 0 && resident(sp, p - 1).is_some();
            let mut transfer = ctx.profile.h2d_us(tensor.size);
            if s0 || prod.is_some() || input_alloc {
                transfer += ctx.profile.d2h_us(tensor.size);
            }
            let uses = &ctx.uses[i];
            let next_out = uses.get(uses.partition_point(|&s| s < q)).copied();
            tensors.push(Tensor {
                t,
                size: tensor.size,
                s0,
                born_before,
                prod,
                input_alloc,
                end_must,
                readers,
                can_spill: can_evict && (born_before || prod.is_some() || input_alloc),
                recompute,
                need_us: ctx.params.margin * transfer,
                next_out,
            });
        }
        let op_us = inc
            .graph
            .ops
            .iter()
            .map(|op| ctx.profile.op_us(&inc.graph, op))
            .collect();
        Some(Window {
            ctx,
            spans,
            p,
            q,
            ops,
            lo,
            hi,
            edges,
            fixed,
            tensors,
            frozen_bytes,
            link_share,
            op_us,
            workspace: inc.workspace.clone(),
        })
    }

    /// Steps from window step `k` whose compute (on the current order) covers `t`'s
    /// [`Tensor::need_us`]: a spill-in at `k` is hidden when nothing reads it sooner.
    fn lead(&self, t: &Tensor, k: usize) -> usize {
        let pre = &self.ctx.prefix_us;
        let from = self.p + k;
        let goal = pre[from] + t.need_us;
        let end = pre.partition_point(|&x| x < goal);
        end.saturating_sub(from).max(1)
    }

    /// Whether a spill-in of `t` at window step `k` may be hidden: its next use after the
    /// window is beyond the lead (`far`, which allows a hidden column at all), and, with the
    /// window ops at their incumbent steps, no window op reads it within the lead (`hidden`).
    fn hidden_at(&self, t: &Tensor, k: usize) -> (bool, bool) {
        let lead = self.lead(t, k);
        let far = t.next_out.is_none_or(|o| o >= self.p + k + lead);
        let hidden = far && !t.readers.iter().any(|v| (k..k + lead).contains(v));
        (far, hidden)
    }

    /// Residency cells of the model (modelled tensors × steps), a measure of its size.
    fn cells(&self) -> usize {
        self.tensors.len() * (self.q - self.p)
    }

    /// The window steps at which each modelled tensor may be spilled in, and recomputed
    /// (`[tensor][step]`). All of them when the order is free. With the order fixed, a later
    /// event keeps the tensor resident for less time at the same cost, so only the latest
    /// useful step before each need is kept:
    /// - recompute: at each read and at the window's last step (when it must be resident
    ///   after the window), while its producer's inputs are still there (where one is read,
    ///   the last step of each of their incumbent residencies), and (chains) wherever a tensor
    ///   recomputed from it may be recomputed;
    /// - spill-in: at each step where it must be resident (its reads, the window's last
    ///   step when it must be resident after the window, the steps where a tensor recomputed
    ///   from it may be recomputed) as a late spill, and at the latest step before each of
    ///   them whose transfer is hidden by then;
    /// - and wherever the incumbent has that event, so that the warm start stays feasible.
    fn slots(&self) -> (Vec<Vec<bool>>, Vec<Vec<bool>>) {
        let w = self.q - self.p;
        let n = self.tensors.len();
        if !self.fixed {
            return (vec![vec![true; w]; n], vec![vec![true; w]; n]);
        }
        let incumbent = |j: usize, how: Start| -> Vec<usize> {
            let t = &self.tensors[j];
            (0..w)
                .filter(|&k| {
                    let s = self.p + k;
                    resident(&self.spans[t.t.index()], s)
                        .is_some_and(|r| r.start == s && r.how == how)
                })
                .collect()
        };
        // Steps where each tensor must be resident in any plan: its reads, and the last
        // step when it must be resident after the window.
        let mut needs: Vec<BTreeSet<usize>> = self
            .tensors
            .iter()
            .map(|t| {
                let mut at: BTreeSet<usize> = t.readers.iter().copied().collect();
                if t.end_must {
                    at.insert(w - 1);
                }
                at
            })
            .collect();
        let mut rc = vec![vec![false; w]; n];
        for (j, t) in self.tensors.iter().enumerate() {
            let Some((_, ins)) = &t.recompute else {
                continue;
            };
            let mut at: Vec<usize> = needs[j].iter().copied().collect();
            at.extend(incumbent(j, Start::Recompute));
            for &u in ins {
                let input = &self.tensors[u];
                at.extend(&input.readers);
                at.extend(
                    self.spans[input.t.index()]
                        .iter()
                        .filter(|r| r.end > self.p && r.end <= self.q)
                        .map(|r| r.end - 1 - self.p),
                );
            }
            for k in at {
                rc[j][k] = true;
            }
        }
        // Chains: an input may be recomputed wherever a tensor recomputed from it may be
        // (two levels, as modelled), and must then be resident there.
        for _ in 0..2 {
            for c in 0..n {
                if let Some((_, ins)) = &self.tensors[c].recompute {
                    let from: Vec<usize> = (0..w).filter(|&k| rc[c][k]).collect();
                    for &u in ins {
                        for &k in &from {
                            needs[u].insert(k);
                            if self.tensors[u].recompute.is_some() {
                                rc[u][k] = true;
                            }
                        }
                    }
                }
            }
        }
        let mut spill = vec![vec![false; w]; n];
        for (j, t) in self.tensors.iter().enumerate() {
            for &u in &needs[j] {
                spill[j][u] = true;
                // The latest step before `u` whose spill-in is hidden by `u` (nothing reads
                // it within its lead).
                if let Some(k) = (0..u)
                    .rev()
                    .find(|&k| k + self.lead(t, k) <= u && self.hidden_at(t, k).1)
                {
                    spill[j][k] = true;
                }
            }
            for k in incumbent(j, Start::SpillIn) {
                spill[j][k] = true;
            }
        }
        (spill, rc)
    }

    /// The cost of a hidden and of a late spill of `t` (µs).
    fn spill_costs(&self, t: &Tensor) -> (f64, f64) {
        let (i, o) = (
            self.ctx.profile.h2d_us(t.size),
            self.ctx.profile.d2h_us(t.size),
        );
        let hidden = self.link_share * (i + o);
        (hidden, hidden + i)
    }

    /// Builds and solves the model under `caps` (bytes per window step), within `limits`
    /// and at most `lp_cap` LP iterations.
    fn solve(&self, caps: &[u64], limits: &Limits, lp_cap: Option<u64>) -> Outcome {
        let w = self.q - self.p;
        let mut pb = Model::new();
        let mut start: Vec<f64> = Vec::new();
        // Order columns, warm-started at the incumbent's positions.
        let x: Vec<Vec<Col>> = (0..w)
            .map(|i| {
                (self.lo[i]..=self.hi[i].max(self.lo[i]))
                    .map(|k| col(&mut pb, &mut start, 0.0, true, f64::from(u8::from(k == i))))
                    .collect()
            })
            .collect();
        let xa = |i: usize, k: usize| -> Option<Col> {
            (k >= self.lo[i] && k <= self.hi[i]).then(|| x[i][k - self.lo[i]])
        };
        for xs in &x {
            pb.add_row(1.0..=1.0, xs.iter().map(|&c| (c, 1.0)));
        }
        for k in 0..w {
            let row: Vec<(Col, f64)> = (0..w).filter_map(|i| xa(i, k)).map(|c| (c, 1.0)).collect();
            pb.add_row(1.0..=1.0, row);
        }
        for &(u, v) in &self.edges {
            for k in self.lo[v]..=self.hi[v] {
                let mut row: Vec<(Col, f64)> = (self.lo[v]..=k)
                    .filter_map(|kk| xa(v, kk))
                    .map(|c| (c, 1.0))
                    .collect();
                row.extend((0..k).filter_map(|kk| xa(u, kk)).map(|c| (c, -1.0)));
                pb.add_row(..=0.0, row);
            }
        }
        // Residency and events, warm-started from the incumbent.
        let (spill_at, recompute_at) = self.slots();
        let mut r: Vec<Vec<Col>> = Vec::with_capacity(self.tensors.len());
        let mut ev: Vec<Vec<Events>> = Vec::with_capacity(self.tensors.len());
        let mut before = 0.0;
        for (j, t) in self.tensors.iter().enumerate() {
            let sp = &self.spans[t.t.index()];
            let (hidden_cost, late_cost) = self.spill_costs(t);
            let rc_cost = t.recompute.as_ref().map_or(0.0, |(k, _)| self.op_us[*k]);
            let mut rs = Vec::with_capacity(w);
            let mut es = Vec::with_capacity(w);
            for k in 0..w {
                let s = self.p + k;
                let here = resident(sp, s);
                let on = here.is_some();
                rs.push(col(
                    &mut pb,
                    &mut start,
                    RESIDENT_US_PER_BYTE * t.size as f64,
                    false,
                    f64::from(u8::from(on)),
                ));
                let starts = here.filter(|r| r.start == s).map(|r| r.how);
                let first_ok = k > 0 || t.born_before;
                let mut e = Events::default();
                // An event binary warm-started at `on`; the incumbent pays its cost then.
                let mut event = |cost: f64, on: bool| {
                    if on {
                        before += cost;
                    }
                    col(&mut pb, &mut start, cost, true, f64::from(u8::from(on)))
                };
                if t.can_spill && first_ok && spill_at[j][k] {
                    // The warm start has window op `v` at step `v`.
                    let (far, hidden_ok) = self.hidden_at(t, k);
                    let want = starts == Some(Start::SpillIn);
                    if far {
                        e.hidden = Some(event(hidden_cost, want && hidden_ok));
                    }
                    e.late = Some(event(late_cost, want && !hidden_ok));
                }
                if t.recompute.is_some() && first_ok && recompute_at[j][k] {
                    e.recompute = Some(event(rc_cost, starts == Some(Start::Recompute)));
                }
                if t.input_alloc {
                    let v0 = starts == Some(Start::Input);
                    e.alloc = Some(col(&mut pb, &mut start, 0.0, true, f64::from(u8::from(v0))));
                }
                es.push(e);
            }
            r.push(rs);
            ev.push(es);
        }
        // Rows per tensor.
        for (j, t) in self.tensors.iter().enumerate() {
            for &v in t.readers.iter().chain(t.prod.iter()) {
                for (k, &c) in x[v].iter().enumerate() {
                    pb.add_row(0.0.., [(r[j][self.lo[v] + k], 1.0), (c, -1.0)]);
                }
            }
            for k in 0..w {
                let e = ev[j][k];
                let events: Vec<Col> = [e.hidden, e.late, e.recompute, e.alloc]
                    .into_iter()
                    .flatten()
                    .collect();
                let mut row = vec![(r[j][k], 1.0)];
                if k > 0 {
                    row.push((r[j][k - 1], -1.0));
                }
                if let Some(c) = t.prod.and_then(|v| xa(v, k)) {
                    row.push((c, -1.0));
                }
                row.extend(events.iter().map(|&c| (c, -1.0)));
                let s0 = if k == 0 {
                    f64::from(u8::from(t.s0))
                } else {
                    0.0
                };
                pb.add_row(..=s0, row);
                // Spill-ins and recomputes only after the first residency.
                let again: Vec<Col> = [e.hidden, e.late, e.recompute]
                    .into_iter()
                    .flatten()
                    .collect();
                if !again.is_empty() && !t.born_before {
                    let mut row: Vec<(Col, f64)> = again.iter().map(|&c| (c, 1.0)).collect();
                    if let Some(v) = t.prod {
                        row.extend((0..k).filter_map(|kk| xa(v, kk)).map(|c| (c, -1.0)));
                    } else {
                        row.extend((0..k).filter_map(|kk| ev[j][kk].alloc).map(|c| (c, -1.0)));
                    }
                    pb.add_row(..=0.0, row);
                }
                // A recompute needs its producer's inputs resident.
                if let (Some(c), Some((_, ins))) = (e.recompute, &t.recompute) {
                    for &u in ins {
                        pb.add_row(0.0.., [(r[u][k], 1.0), (c, -1.0)]);
                    }
                }
                // A hidden spill-in is not read within its lead.
                if let Some(c) = e.hidden {
                    for &v in &t.readers {
                        let mut row = vec![(c, 1.0)];
                        let lead = self.lead(t, k);
                        row.extend(
                            (k..(k + lead).min(w))
                                .filter_map(|kk| xa(v, kk))
                                .map(|x| (x, 1.0)),
                        );
                        if row.len() > 1 {
                            pb.add_row(..=1.0, row);
                        }
                    }
                }
            }
            let allocs: Vec<(Col, f64)> = ev[j]
                .iter()
                .filter_map(|e| e.alloc)
                .map(|c| (c, 1.0))
                .collect();
            if !allocs.is_empty() {
                pb.add_row(..=1.0, allocs);
            }
            if t.end_must {
                pb.add_row(1.0.., [(r[j][w - 1], 1.0)]);
            }
        }
        // Memory.
        for k in 0..w {
            let mut row: Vec<(Col, f64)> = Vec::new();
            for (j, t) in self.tensors.iter().enumerate() {
                row.push((r[j][k], t.size as f64 / UNIT));
                if let (Some(c), Some((pk, _))) = (ev[j][k].recompute, &t.recompute) {
                    let ws = self.workspace[*pk];
                    if ws > 0 {
                        row.push((c, ws as f64 / UNIT));
                    }
                }
            }
            for i in 0..w {
                let ws = self.workspace[self.ops[i]];
                if let (Some(c), true) = (xa(i, k), ws > 0) {
                    row.push((c, ws as f64 / UNIT));
                }
            }
            pb.add_row(
                ..=caps[k].saturating_sub(self.frozen_bytes) as f64 / UNIT,
                row,
            );
        }
        // Presolve off with the order fixed: HiGHS 1.x hands back the warm start's values
        // when presolve solves a model outright, which the slimmer fixed-order models invite.
        let answer = match run_model_with(pb, start, limits, !self.fixed, lp_cap) {
            Run::Answer(a) => a,
            Run::Failed(_) => {
                return Outcome {
                    label: "error",
                    before,
                    bound: None,
                    solution: None,
                }
            }
        };
        let solution = answer
            .columns
            .as_deref()
            .and_then(|cols| self.decode(cols, &x, &r, &ev));
        Outcome {
            label: answer.label,
            before,
            bound: answer.bound,
            solution,
        }
    }

    /// The window's order, the modelled tensors' new spans and the estimated cost of a
    /// solution `cols`; `None` when it does not decode into a consistent plan.
    fn decode(
        &self,
        cols: &[f64],
        x: &[Vec<Col>],
        r: &[Vec<Col>],
        ev: &[Vec<Events>],
    ) -> Option<Solution> {
        let on = |c: Col| cols.get(c.index()).is_some_and(|&v| v > 0.5);
        let w = self.q - self.p;
        let mut at = vec![usize::MAX; w];
        for (i, xs) in x.iter().enumerate() {
            let k = xs.iter().position(|&c| on(c))? + self.lo[i];
            if at[k] != usize::MAX {
                return None;
            }
            at[k] = i;
        }
        let order: Vec<usize> = at
            .iter()
            .map(|&i| self.ops.get(i).copied())
            .collect::<Option<_>>()?;
        let mut cost = 0.0;
        let mut out = Vec::with_capacity(self.tensors.len());
        for (j, t) in self.tensors.iter().enumerate() {
            let (hidden_cost, late_cost) = self.spill_costs(t);
            let mut pieces: Vec<Span> = Vec::new();
            for s in &self.spans[t.t.index()] {
                if s.start < self.p {
                    pieces.push(Span {
                        end: s.end.min(self.p),
                        ..*s
                    });
                }
                if s.end > self.q {
                    pieces.push(Span {
                        start: s.start.max(self.q),
                        ..*s
                    });
                }
            }
            let mut k = 0;
            while k < w {
                if !on(r[j][k]) {
                    k += 1;
                    continue;
                }
                let e = ev[j][k];
                let born_here = t.prod.is_some_and(|v| at[k] == v);
                let how = if born_here {
                    Start::Birth
                } else if e.alloc.is_some_and(on) {
                    Start::Input
                } else if e.recompute.is_some_and(on) {
                    cost += t.recompute.as_ref().map_or(0.0, |(pk, _)| self.op_us[*pk]);
                    Start::Recompute
                } else if e.hidden.is_some_and(on) {
                    cost += hidden_cost;
                    Start::SpillIn
                } else if e.late.is_some_and(on) {
                    cost += late_cost;
                    Start::SpillIn
                } else if k == 0 && t.s0 {
                    Start::Birth // a continuation: merged below
                } else {
                    return None;
                };
                let from = k;
                while k < w && on(r[j][k]) {
                    k += 1;
                }
                pieces.push(Span {
                    start: self.p + from,
                    end: self.p + k,
                    how,
                });
            }
            pieces.sort_by_key(|s| s.start);
            let mut merged: Vec<Span> = Vec::with_capacity(pieces.len());
            for s in pieces {
                match merged.last_mut() {
                    Some(last) if last.end == s.start => last.end = s.end,
                    Some(last) if last.end > s.start => return None,
                    _ => {
                        if s.how == Start::Birth && s.start == self.p && t.s0 {
                            return None; // a continuation with nothing before it
                        }
                        merged.push(s)
                    }
                }
            }
            // What must be resident after the window still is.
            if t.end_must && !merged.iter().any(|s| s.start < self.q && s.end >= self.q) {
                return None;
            }
            out.push((t.t, merged));
        }
        Some((order, out, cost))
    }
}
