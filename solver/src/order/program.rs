//! Op order by integer programming (OLLA / MODeL style), solved by HiGHS through
//! [`crate::mip`], whole for small graphs and by windows around the peak for large ones. The
//! model of one window is built, solved and decoded in `super::model`; here the loop over
//! windows.
//!
//! **Model** over a window of steps `[a, b)` of the current order (the whole graph when it has
//! at most [`OrderIlpOptions::global_nodes`] nodes); nodes outside keep their steps.
//! - `x[v,t] ∈ {0,1}`: movable node `v` runs at step `t`, only inside its ASAP/ALAP range within
//!   the window (`a + ancestors in the window`, `b − 1 − descendants in the window`);
//!   `Σ_t x[v,t] = 1` and `Σ_v x[v,t] = 1` (one node per step: no relaxation).
//! - Dependencies in cumulative form, tighter than position differences: for each edge
//!   `u → c` between movable nodes, `Σ_{t'≤t} x[c,t'] ≤ Σ_{t'<t} x[u,t']`.
//! - Liveness, the same rule as [`lifetimes()`](super::lifetimes()): a value is reserved at
//!   step `t` when its producer ran at or before `t` (`S(t)`; graph inputs: always) and some
//!   reader runs at or after `t` (graph outputs: always; a value nobody reads: its producer).
//!   For a reader `c`, `live[e,t] ≥ S(t) − D_c(t)` with `D_c(t) = Σ_{t'<t} x[c,t']`;
//!   `live ∈ [0,1]` is continuous (minimisation drives it to the indicator). Where `S` or every
//!   reader is fixed the term is a constant.
//! - Memory: `Σ_e size_e·live[e,t] + Σ_v workspace_v·x[v,t] + fixed bytes ≤ P` for every
//!   step of the window; minimise `P`. Sizes are divided by a power of two (exact in `f64`).
//!
//! **Not modelled:** in-place merging (the model's LOAD ignores it, so with in-place on its
//! bound is not used and its orders are re-evaluated exactly); spills and recomputation.
//!
//! **Size** for `w` movable nodes: at most `w²` binaries, one continuous `live` per value and
//! step where it is undecided, `w` + `w` assignment rows, `Σ_edges w` dependency rows and one
//! memory row per step.
//!
//! **Windows.** Each round centres a window of [`OrderIlpOptions::window`] steps on the first
//! peak step of the current order and minimises that window's peak; a new order is kept when
//! its LOAD (exact, recomputed) is no higher and the window's peak fell, which removes that
//! peak step. A window that cannot improve is remembered and the next peak step, then a
//! shifted and finally a wider window (×1.5, up to [`OrderIlpOptions::max_window`]) are
//! tried; after a kept order the width starts again from [`OrderIlpOptions::window`]. A
//! model's cost grows steeply with its width (on a 250-op graph whose ops read any of the last
//! 40 tensors: 8 steps 0.1 s, 12 steps 0.1–1.5 s, 18 steps 0.5–6.6 s, 27 steps 17 s), so many
//! narrow windows first find most of what the wide ones find at a fraction of the time, and
//! [`OrderIlpOptions::work_total`] bounds the windows in all.
//!
//! **Work.** HiGHS' node cap does not bound the root node, where a large model spends its
//! time in the first LP and in cut rounds (a 59-op graph with wide ASAP/ALAP ranges: 7,193
//! rows, 293,832 nonzeros, 20 s in the root without a node). So each model gets a
//! deterministic work cap ([`OrderIlpOptions::work_per_model`], in LP iterations × model
//! nonzeros, about the time of one simplex iteration per nonzero): HiGHS stops at its first
//! check past `work / nonzeros` LP iterations ([`crate::mip::MipOptions::max_lp_iterations`]),
//! and a model whose first LP alone would exceed it (estimated as rows × nonzeros: the simplex
//! takes about one iteration per row) is not solved at all: the whole graph then goes to
//! windows, a window counts as one that did not improve (and against
//! [`OrderIlpOptions::max_models`]). A window model is not solved either when what the
//! windows' total leaves allows fewer than [`MIN_ITERATIONS_PER_ROW`] iterations per row: the
//! checks come between LP solves and nodes, and such a model ran up to 6.9 times past its cap
//! (13.6 s), rarely improving the order. The same model stops at the same point on any
//! machine; the clock stays a cap.
//!
//! **Bound.** Only a model of the whole graph bounds every order: its proven dual bound
//! (`mip_dual_bound`, read through [`crate::mip`]) is reported, never below the caller's
//! order-independent bound; window proofs only bound orders that move the window.
//!
//! **Progress and cancellation** go through HiGHS' callback: improving solutions are reported
//! to [`OrderIlpOptions::progress`] (on the calling thread), and a raised [`Limits::cancel`]
//! interrupts the solve (within [`STOP_GRACE`](crate::mip::overrun::STOP_GRACE), whether HiGHS
//! polls it or not; [`crate::mip::overrun`]).
//!
//! **Guarantees.** Warm-started from the incumbent order (a full start: every `x`, `live` and
//! `P`), so HiGHS starts with it as its incumbent; every order it returns is checked
//! ([`OrderProblem::check_order`]) and its LOAD recomputed, so the result is never worse than
//! the start. One thread by default; with node limits and no time limit runs are
//! deterministic.
//!
//! References: Steiner et al., "OLLA" (2022); Steiner et al., "MODeL: Memory Optimizations for
//! Deep Learning" (ICML 2023); HiGHS.

use super::model::solve_window;
use super::{LifetimeOptions, OrderProblem};
use crate::limits::{Limits, LimitsClock, SolveStats, SolveStatus};
use std::time::Instant;
use thiserror::Error;

/// Why the order program could not be built or solved.
#[derive(Debug, Error)]
pub enum OrderIlpError {
    /// The start is not a topological order of the problem.
    #[error("start order: {0}")]
    Start(#[from] super::OrderError),
    /// HiGHS failed.
    #[error("HiGHS: {0}")]
    Solver(String),
}

/// Settings of [`optimise_order`].
#[derive(Debug, Clone, PartialEq)]
pub struct OrderIlpOptions {
    /// Limits for the whole run; `nodes` caps HiGHS branch-and-bound nodes per model and the
    /// number of models. Without any limit each model gets [`DEFAULT_NODES_PER_MODEL`].
    pub limits: Limits,
    /// HiGHS threads (1 = deterministic).
    pub threads: u32,
    /// HiGHS `mip_rel_gap` (0 = prove optimality).
    pub mip_rel_gap: f64,
    /// Graphs with at most this many nodes are modelled whole (the bound then holds for every
    /// order).
    pub global_nodes: usize,
    /// Steps in a first window.
    pub window: usize,
    /// Widest window tried.
    pub max_window: usize,
    /// Largest number of models solved (windows over the work cap count too).
    pub max_models: usize,
    /// Work cap of one model, in LP iterations × the model's nonzeros (module doc, *Work*);
    /// `None`: none, unless the limits have neither time nor nodes, when each model gets
    /// [`DEFAULT_WORK_PER_MODEL`].
    pub work_per_model: Option<u64>,
    /// Work cap of the windows in all (the sum over their models of LP iterations × nonzeros,
    /// as HiGHS reports them): each window model gets at most what is left, and the windows
    /// stop when nothing is left. `None`: only [`Self::work_per_model`] and
    /// [`Self::max_models`] bound them. The whole-graph model ignores it.
    pub work_total: Option<u64>,
    /// A lower bound valid for every order (e.g. the order-independent bound), used to cut the
    /// search (it stops at the bound, and a whole-graph model's peak column starts at it) and
    /// reported when the model proves less.
    pub known_bound: u64,
    /// Called, on the calling thread, on every improving solution of a model with its peak and
    /// proven bound (bytes; for a window, of the window's steps).
    pub progress: Option<crate::limits::ProgressFn>,
}

/// HiGHS branch-and-bound nodes per model when the caller gives no limit.
pub const DEFAULT_NODES_PER_MODEL: u64 = 5_000;

/// Work cap per model (LP iterations × nonzeros) when the caller gives no limit: about 10 s
/// of HiGHS on one core of a 2-core machine (4.5–6.5 ns a unit measured, with the sub-MIP
/// heuristics off as a work cap switches them; up to 13 ns where the cuts HiGHS adds make its
/// iterations dearer).
pub const DEFAULT_WORK_PER_MODEL: u64 = 2_000_000_000;

/// Least LP iterations per model row that what [`OrderIlpOptions::work_total`] leaves must
/// allow before a window model is solved (in work: rows × nonzeros × this); below it the
/// window counts as one over the work cap. HiGHS checks the iteration cap only between LP
/// solves and nodes, so a model started with less ran on regardless: the last, widest window
/// models of the default plans of 40 random DAGs (60–400 ops) were started with 1.2–30
/// iterations per row left, ran to 1.0–6.9 times that (up to 13.6 s, 28 % of the order
/// program's time in all) and one of those 21 improved the order (started with 8.0 per row);
/// the other 101 windows that improved an order had at least 41 per row left and used at most
/// 41.
pub const MIN_ITERATIONS_PER_ROW: u64 = 8;

impl Default for OrderIlpOptions {
    fn default() -> Self {
        OrderIlpOptions {
            limits: Limits::UNLIMITED,
            threads: 1,
            mip_rel_gap: 0.0,
            global_nodes: 64,
            window: 8,
            max_window: 24,
            max_models: 64,
            work_per_model: None,
            work_total: None,
            known_bound: 0,
            progress: None,
        }
    }
}

/// What [`optimise_order`] found.
#[derive(Debug, Clone)]
pub struct OrderIlpOutcome {
    /// Best order (topological; LOAD never above the start's).
    pub order: Vec<usize>,
    /// Objective = LOAD of `order` (without in-place merging); lower bound = the whole-graph
    /// model's dual bound when it ran, else `known_bound`; status optimal, time_limit,
    /// node_limit (a node, work or model cap stopped it with windows still to try), or
    /// heuristic (every window was tried).
    pub stats: SolveStats,
    /// Whether the whole graph was modelled (the bound then comes from HiGHS).
    pub whole: bool,
    /// Models solved.
    pub models: usize,
    /// Models whose order was kept.
    pub improved: usize,
}

/// Live bytes per step of `order` (no in-place merging) and its LOAD.
fn profile(problem: &OrderProblem, order: &[usize]) -> Vec<u64> {
    let lt = super::lifetimes(problem, order, &LifetimeOptions::default());
    let n = order.len();
    let mut diff = vec![0i128; n + 1];
    for b in &lt.problem.buffers {
        let (s, e) = (b.lifetime.start as usize, (b.lifetime.end as usize).min(n));
        if s < e {
            diff[s] += i128::from(b.size);
            diff[e] -= i128::from(b.size);
        }
    }
    let mut cur = 0i128;
    diff[..n]
        .iter()
        .map(|d| {
            cur += d;
            u64::try_from(cur).unwrap_or(u64::MAX)
        })
        .collect()
}

/// Improves `start` (a topological order of `problem`) with the order program (module doc).
pub fn optimise_order(
    problem: &OrderProblem,
    start: &[usize],
    opts: &OrderIlpOptions,
) -> Result<OrderIlpOutcome, OrderIlpError> {
    let started = Instant::now();
    problem.check_order(start)?;
    let n = start.len();
    let mut order = start.to_vec();
    let mut prof = profile(problem, &order);
    let mut load = prof.iter().copied().max().unwrap_or(0);
    let mut lower = opts.known_bound.min(load);
    let mut clock: LimitsClock = opts.limits.start();
    let mut stop: Option<SolveStatus> = None;
    let (mut models, mut improved) = (0usize, 0usize);
    let mut whole = n <= opts.global_nodes;
    if whole {
        if let Some(s) = clock.exhausted() {
            stop = Some(s);
        } else if load > lower && n > 1 {
            match solve_window(problem, &order, &prof, (0, n), opts, None, &clock)? {
                Some(w) => {
                    models = 1;
                    if let Some(o) = w.order {
                        problem.check_order(&o)?;
                        let p = profile(problem, &o);
                        let l = p.iter().copied().max().unwrap_or(0);
                        if l < load {
                            (order, load) = (o, l);
                            improved = 1;
                        }
                    }
                    // Proven optimal: the bound is the optimum itself, which the dual bound
                    // only meets up to HiGHS' tolerances.
                    lower = if w.optimal {
                        load
                    } else {
                        lower.max(w.bound).min(load)
                    };
                    stop = w.stopped;
                }
                // Over the work cap before its first LP: windows instead.
                None => whole = false,
            }
        }
    }
    if !whole && stop.is_none() {
        // Windows already tried without success, by (start, end) at the current order.
        let mut failed: Vec<(usize, usize)> = Vec::new();
        let mut width = opts.window.clamp(2, n);
        // Windows over the work cap before their first LP count against `max_models` too, so
        // that a graph of many peak steps does not build models without end.
        let mut skipped = 0usize;
        // A window skipped at the current order (over a work cap): not every window was tried.
        let mut skipped_here = false;
        // What the windows may still spend (`work_total`).
        let mut work_left = opts.work_total;
        while load > lower && models + skipped < opts.max_models {
            if let Some(s) = clock.exhausted() {
                stop = Some(s);
                break;
            }
            if work_left == Some(0) {
                stop = Some(SolveStatus::NodeLimit);
                break;
            }
            let Some((a, b)) = next_window(&prof, load, width, &failed) else {
                if width >= opts.max_window.min(n) {
                    break;
                }
                width = (width * 3 / 2).min(opts.max_window.min(n)).max(width + 1);
                continue;
            };
            let solved = solve_window(problem, &order, &prof, (a, b), opts, work_left, &clock)?;
            let Some(w) = solved else {
                // Over the work cap before its first LP.
                failed.push((a, b));
                skipped += 1;
                skipped_here = true;
                continue;
            };
            models += 1;
            clock.tick();
            work_left = work_left.map(|left| left.saturating_sub(w.work));
            let old_peak = prof[a..b].iter().copied().max().unwrap_or(0);
            let mut kept = false;
            if let Some(o) = w.order {
                problem.check_order(&o)?;
                let p = profile(problem, &o);
                let l = p.iter().copied().max().unwrap_or(0);
                let new_peak = p[a..b].iter().copied().max().unwrap_or(0);
                if l <= load && new_peak < old_peak {
                    (order, prof, load) = (o, p, l);
                    improved += 1;
                    kept = true;
                    failed.clear();
                    skipped_here = false;
                    // The new peak starts again from the narrowest, cheapest windows.
                    width = opts.window.clamp(2, n);
                }
            }
            if !kept {
                failed.push((a, b));
            }
            if w.stopped.is_some() && clock.exhausted().is_some() {
                stop = w.stopped;
                break;
            }
        }
        // Stopped by the model count with windows still to try, or windows left untried over a
        // work cap: effort caps, as the work in all.
        if stop.is_none() && load > lower && (models + skipped >= opts.max_models || skipped_here) {
            stop = Some(SolveStatus::NodeLimit);
        }
    }
    let lower = lower.min(load);
    let status = if load <= lower {
        SolveStatus::Optimal
    } else {
        stop.unwrap_or(SolveStatus::Heuristic)
    };
    Ok(OrderIlpOutcome {
        order,
        stats: SolveStats {
            status,
            elapsed: started.elapsed(),
            objective: load,
            lower_bound: lower,
        },
        whole,
        models,
        improved,
    })
}

/// The next window `[a, b)` of `width` steps to try: centred on, then ending at, then
/// starting at each peak step in turn, skipping `failed` ones.
fn next_window(
    prof: &[u64],
    load: u64,
    width: usize,
    failed: &[(usize, usize)],
) -> Option<(usize, usize)> {
    let n = prof.len();
    for (t, _) in prof.iter().enumerate().filter(|&(_, &m)| m == load) {
        for a in [
            t.saturating_sub(width / 2),
            (t + 1).saturating_sub(width),
            t,
        ] {
            let a = a.min(n - width);
            let w = (a, a + width);
            if !failed.contains(&w) {
                return Some(w);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::local_search::tests::random_problem;
    use crate::order::model::model_size;
    use crate::order::Value;

    /// Every topological order's LOAD, minimum (brute force over permutations).
    fn brute_force(p: &OrderProblem) -> u64 {
        let n = p.nodes.len();
        let preds = p.predecessors();
        let mut best = u64::MAX;
        let mut order = Vec::new();
        let mut used = vec![false; n];
        fn rec(
            p: &OrderProblem,
            preds: &[Vec<usize>],
            order: &mut Vec<usize>,
            used: &mut [bool],
            best: &mut u64,
        ) {
            let n = used.len();
            if order.len() == n {
                *best = (*best).min(p.load(order, &LifetimeOptions::default()));
                return;
            }
            for v in 0..n {
                if !used[v] && preds[v].iter().all(|&q| used[q]) {
                    used[v] = true;
                    order.push(v);
                    rec(p, preds, order, used, best);
                    order.pop();
                    used[v] = false;
                }
            }
        }
        rec(p, &preds, &mut order, &mut used, &mut best);
        best
    }

    /// Two independent branches `0 → 1 → 2` (big, shrinking) and `3 → 4 → 5`, joined by 6:
    /// the listed order keeps branch one's outputs alive through branch two.
    fn two_branches() -> OrderProblem {
        let val = |size, producer: Option<usize>, consumers: Vec<usize>| Value {
            size,
            alignment: 1,
            producer,
            consumers,
            live_at_end: false,
        };
        let node = |inputs: Vec<usize>, outputs: Vec<usize>| crate::order::Node {
            inputs,
            outputs,
            ..Default::default()
        };
        let mut values = vec![
            val(10, Some(0), vec![1]),
            val(10, Some(1), vec![2]),
            val(1, Some(2), vec![6]),
            val(10, Some(3), vec![4]),
            val(10, Some(4), vec![5]),
            val(1, Some(5), vec![6]),
            val(1, Some(6), vec![]),
        ];
        values[6].live_at_end = true;
        OrderProblem {
            nodes: vec![
                node(vec![], vec![0]),
                node(vec![0], vec![1]),
                node(vec![1], vec![2]),
                node(vec![], vec![3]),
                node(vec![3], vec![4]),
                node(vec![4], vec![5]),
                node(vec![2, 5], vec![6]),
            ],
            values,
            workspace_alignment: 1,
        }
    }

    #[test]
    fn the_whole_model_reaches_and_proves_the_brute_force_optimum() {
        let p = two_branches();
        // Interleaved start: 0 3 1 4 2 5 6 keeps two big values live at once.
        let start = vec![0, 3, 1, 4, 2, 5, 6];
        let start_load = p.load(&start, &LifetimeOptions::default());
        let opt = brute_force(&p);
        assert!(opt < start_load);
        let out = optimise_order(&p, &start, &OrderIlpOptions::default()).unwrap();
        assert!(out.whole);
        assert_eq!(out.stats.objective, opt);
        assert_eq!(out.stats.lower_bound, opt);
        assert_eq!(out.stats.status, SolveStatus::Optimal);
        assert_eq!(p.load(&out.order, &LifetimeOptions::default()), opt);
    }

    #[test]
    fn windows_improve_a_bad_start_without_ever_raising_load() {
        let p = random_problem(7, 120);
        let listed = p.listed_topological_order().unwrap();
        let start_load = p.load(&listed, &LifetimeOptions::default());
        let opts = OrderIlpOptions {
            global_nodes: 10,
            window: 12,
            max_window: 24,
            max_models: 12,
            ..OrderIlpOptions::default()
        };
        let out = optimise_order(&p, &listed, &opts).unwrap();
        p.check_order(&out.order).unwrap();
        let load = p.load(&out.order, &LifetimeOptions::default());
        assert_eq!(load, out.stats.objective);
        assert!(load <= start_load);
        assert!(!out.whole);
        assert!(out.models > 0);
        // Node limits only: the same run gives the same order.
        let again = optimise_order(&p, &listed, &opts).unwrap();
        assert_eq!(out.order, again.order);
        // One model where more windows were left to try: the model count stopped it.
        let one = OrderIlpOptions {
            max_models: 1,
            ..opts.clone()
        };
        let out = optimise_order(&p, &listed, &one).unwrap();
        assert_eq!(out.models, 1);
        assert!(out.stats.objective > out.stats.lower_bound);
        assert_eq!(out.stats.status, SolveStatus::NodeLimit);
    }

    #[test]
    fn the_windows_stop_when_their_work_in_all_is_spent_at_the_same_point_every_time() {
        const WORK_TOTAL_IN_TEST: u64 = 2_000_000;
        let p = random_problem(7, 120);
        let listed = p.listed_topological_order().unwrap();
        let start_load = p.load(&listed, &LifetimeOptions::default());
        let opts = OrderIlpOptions {
            global_nodes: 10,
            window: 8,
            max_window: 16,
            max_models: 24,
            ..OrderIlpOptions::default()
        };
        let free = optimise_order(&p, &listed, &opts).unwrap();
        assert!(free.models >= 4, "{} models", free.models);
        // A small total: fewer models, an order no worse than the start, the work cap named.
        let capped_opts = OrderIlpOptions {
            work_total: Some(WORK_TOTAL_IN_TEST),
            ..opts.clone()
        };
        let capped = optimise_order(&p, &listed, &capped_opts).unwrap();
        assert!(
            (1..free.models).contains(&capped.models),
            "{} models capped, {} free",
            capped.models,
            free.models
        );
        assert!(capped.stats.objective <= start_load);
        assert_eq!(capped.stats.status, SolveStatus::NodeLimit);
        let again = optimise_order(&p, &listed, &capped_opts).unwrap();
        assert_eq!((capped.order, capped.models), (again.order, again.models));
    }

    #[test]
    fn improving_solutions_are_reported_through_the_highs_callback() {
        use std::sync::{Arc, Mutex};
        let p = two_branches();
        let start = vec![0, 3, 1, 4, 2, 5, 6];
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = {
            let seen = seen.clone();
            crate::limits::ProgressFn::new(move |peak, bound| {
                seen.lock().unwrap().push((peak, bound))
            })
        };
        let opts = OrderIlpOptions {
            progress: Some(sink),
            ..OrderIlpOptions::default()
        };
        let out = optimise_order(&p, &start, &opts).unwrap();
        let seen = seen.lock().unwrap();
        assert!(!seen.is_empty(), "no progress reported");
        assert!(seen.iter().all(|&(peak, bound)| bound <= peak));
        assert_eq!(seen.last().unwrap().0, out.stats.objective);
    }

    #[test]
    fn a_raised_cancel_token_returns_the_start_without_solving() {
        let p = two_branches();
        let start = vec![0, 3, 1, 4, 2, 5, 6];
        let token = crate::limits::CancelToken::new();
        token.cancel();
        let opts = OrderIlpOptions {
            limits: Limits {
                cancel: Some(token),
                ..Limits::UNLIMITED
            },
            ..OrderIlpOptions::default()
        };
        let out = optimise_order(&p, &start, &opts).unwrap();
        assert_eq!(out.order, start);
        assert_eq!(out.models, 0);
        assert_eq!(out.stats.status, SolveStatus::TimeLimit);
    }

    #[test]
    fn a_work_capped_model_stops_at_the_same_point_every_time() {
        // 20 random ops modelled whole: unbounded, HiGHS proves the optimum after about 150,000
        // LP iterations; capped at 2·10⁷ units (about 1,500 iterations) it stops in the root.
        let p = random_problem(1, 20);
        let listed = p.listed_topological_order().unwrap();
        let start_load = p.load(&listed, &LifetimeOptions::default());
        let opts = OrderIlpOptions {
            work_per_model: Some(20_000_000),
            ..OrderIlpOptions::default()
        };
        let runs: Vec<_> = (0..2)
            .map(|_| optimise_order(&p, &listed, &opts).unwrap())
            .collect();
        assert!(runs[0].whole);
        assert_eq!(runs[0].models, 1);
        assert_eq!(runs[0].stats.status, SolveStatus::NodeLimit);
        assert!(runs[0].stats.objective <= start_load);
        assert!(runs[0].stats.lower_bound < runs[0].stats.objective);
        assert_eq!(runs[0].order, runs[1].order);
        assert_eq!(
            (runs[0].stats.objective, runs[0].stats.lower_bound),
            (runs[1].stats.objective, runs[1].stats.lower_bound)
        );
    }

    #[test]
    fn a_whole_model_over_the_work_cap_gives_way_to_windows() {
        // 40 random ops: the whole model has about 6·10⁸ rows × nonzeros, a 24-step window's
        // about 5·10⁷.
        let p = random_problem(1, 40);
        let listed = p.listed_topological_order().unwrap();
        let start_load = p.load(&listed, &LifetimeOptions::default());
        let opts = OrderIlpOptions {
            work_per_model: Some(100_000_000),
            max_models: 2,
            ..OrderIlpOptions::default()
        };
        let out = optimise_order(&p, &listed, &opts).unwrap();
        assert!(!out.whole);
        assert!(out.models >= 1);
        assert!(out.stats.objective <= start_load);
        assert_eq!(
            p.load(&out.order, &LifetimeOptions::default()),
            out.stats.objective
        );
        // With no model under the cap nothing is solved, and the start comes back; the work
        // cap, not the windows, ended it.
        let none = OrderIlpOptions {
            work_per_model: Some(1),
            ..OrderIlpOptions::default()
        };
        let out = optimise_order(&p, &listed, &none).unwrap();
        assert_eq!((out.whole, out.models), (false, 0));
        assert_eq!(out.order, listed);
        assert_eq!(out.stats.status, SolveStatus::NodeLimit);
    }

    #[test]
    fn a_window_model_is_not_solved_when_the_work_left_allows_too_few_iterations_per_row() {
        let p = random_problem(7, 120);
        let listed = p.listed_topological_order().unwrap();
        let prof = profile(&p, &listed);
        let opts = OrderIlpOptions::default();
        let window = (40, 56);
        let (rows, nonzeros) = model_size(&p, &listed, &prof, window, &opts);
        assert!(
            rows > 10 && nonzeros > rows,
            "{rows} rows, {nonzeros} nonzeros"
        );
        let enough = rows * nonzeros * MIN_ITERATIONS_PER_ROW;
        let clock = opts.limits.start();
        let solve = |left: u64| solve_window(&p, &listed, &prof, window, &opts, Some(left), &clock);
        // Room for the first LP (one iteration per row) but not for the few per row HiGHS
        // needs before its first check: not solved.
        assert!(solve(enough - 1).unwrap().is_none());
        assert!(solve(rows * nonzeros).unwrap().is_none());
        let solved = solve(enough)
            .unwrap()
            .expect("solved with enough work left");
        assert!(solved.work > 0);
    }

    #[test]
    fn a_start_that_is_not_topological_is_refused() {
        let p = two_branches();
        let bad = vec![6, 0, 1, 2, 3, 4, 5];
        assert!(matches!(
            optimise_order(&p, &bad, &OrderIlpOptions::default()),
            Err(OrderIlpError::Start(_))
        ));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// On random DAGs of at most 9 nodes the model's optimum equals the brute-force minimum
        /// over every topological order, and its bound never exceeds it.
        #[test]
        fn the_optimum_matches_brute_force_on_small_random_dags(n in 2usize..=9, seed in 0u64..100_000) {
            let p = random_problem(seed, n);
            let listed = p.listed_topological_order().unwrap();
            let opt = brute_force(&p);
            let out = optimise_order(&p, &listed, &OrderIlpOptions::default()).unwrap();
            proptest::prop_assert!(out.stats.lower_bound <= opt);
            proptest::prop_assert_eq!(out.stats.status, SolveStatus::Optimal);
            proptest::prop_assert_eq!(out.stats.objective, opt);
            proptest::prop_assert_eq!(p.load(&out.order, &LifetimeOptions::default()), opt);
        }
    }
}
