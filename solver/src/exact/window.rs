//! Window search: lowers the peak of a large placement by exact searches over small windows of
//! buffers, the rest staying fixed.
//!
//! Idea (large-neighbourhood search, Shaw 1998, with the exact search as the repair step): for
//! a target peak `T`, the *hot* buffers (top above `T`) must move. Taking them in time order, a
//! window is a time span covering a run of hot buffers; its free buffers are the hot ones there
//! plus the highest others alive in the span, and every other buffer keeps its offset (fixed
//! buffers are obstacles, [`super::sections`]). The search places the free buffers under `T`
//! around the fixed ones; on success they move, otherwise the window grows (twice the free
//! buffers) up to a limit, and then the target is given up. Before a search, each hot buffer
//! must find room under `T` between the fixed buffers alone (a cheap necessary condition).
//! Targets start halfway between the peak and LOAD and halve their step on failure; after
//! [`GIVE_UP`] failed targets in a row the repair stops. Every accepted move keeps the
//! placement valid and under the previous peak, so the result is never worse than the start.
//! Measured on iopddl_S_1 after the canonical dive (1.0018 × LOAD): the peak column is packed
//! too tightly for windows of up to 3072 free buffers to gain anything, so this stops after
//! two targets; it is kept for placements with looser tops. (The portfolio's peak-clique
//! member now packs iopddl_S_1 at LOAD, so no repair is needed there.)
//!
//! Complexity: each window costs `O(n log n + f · k log k)` to set up (`f` free buffers with
//! `k` fixed ones alive alongside) plus its search, bounded by [`WINDOW_NODES`] nodes per free
//! buffer; at most `O(log(peak − LOAD))` targets.

use super::search::RunEnd;
use super::sections::{Instance, Ranges};
use super::{fit, ExactOptions, SearchTrace};
use crate::limits::{Limits, LimitsClock};
use crate::problem::PlacementProblem;

/// Hot buffers gathered into one window at most.
const HOT_PER_WINDOW: usize = 256;

/// Free buffers of a window at first (doubled on failure up to [`MAX_FREE`]).
const FIRST_FREE: usize = 384;

/// Free buffers of a window at most.
const MAX_FREE: usize = 3072;

/// Consecutive targets given up before the window search stops.
const GIVE_UP: u32 = 2;

/// Search nodes per free buffer of a window.
pub(crate) const WINDOW_NODES: u64 = 16;

/// Lowers the peak of the valid placement `offsets` towards `lower_bound`, within the budget
/// of `opts` measured by `clock`; adds the nodes searched to `*nodes`.
pub(crate) fn improve(
    problem: &PlacementProblem,
    offsets: &mut [u64],
    lower_bound: u64,
    opts: &ExactOptions,
    clock: &LimitsClock,
    nodes: &mut u64,
) {
    let mut by_start: Vec<usize> = (0..problem.buffers.len()).collect();
    by_start.sort_unstable_by_key(|&i| (problem.buffers[i].lifetime.start, i));
    let max_len = problem
        .buffers
        .iter()
        .map(|b| b.lifetime.len())
        .max()
        .unwrap_or(0);
    let ctx = Context {
        problem,
        by_start,
        max_len,
        opts,
        clock,
        node_cap: opts.limits.nodes,
    };
    let mut peak = peak_of(problem, offsets);
    let mut step = peak.saturating_sub(lower_bound).div_ceil(2);
    let mut failures = 0;
    while peak > lower_bound && step > 0 && failures < GIVE_UP && ctx.spent(*nodes).is_none() {
        let target = peak.saturating_sub(step).max(lower_bound);
        let reached = ctx.reach(offsets, target, nodes);
        let now = peak_of(problem, offsets);
        if reached || now < peak {
            peak = now;
            failures = 0;
        }
        if !reached {
            step /= 2;
            failures += 1;
        }
    }
}

/// The highest end of a buffer.
fn peak_of(problem: &PlacementProblem, offsets: &[u64]) -> u64 {
    problem
        .buffers
        .iter()
        .zip(offsets)
        .map(|(b, &o)| o.saturating_add(b.size))
        .max()
        .unwrap_or(0)
}

struct Context<'a> {
    problem: &'a PlacementProblem,
    /// Buffer indices by lifetime start.
    by_start: Vec<usize>,
    /// Longest lifetime.
    max_len: u64,
    opts: &'a ExactOptions,
    clock: &'a LimitsClock,
    node_cap: Option<u64>,
}

impl Context<'_> {
    /// Whether the overall budget is spent.
    fn spent(&self, nodes: u64) -> Option<()> {
        if self.clock.exhausted().is_some() || self.node_cap.is_some_and(|c| nodes >= c) {
            Some(())
        } else {
            None
        }
    }

    fn top(&self, offsets: &[u64], i: usize) -> u64 {
        offsets[i].saturating_add(self.problem.buffers[i].size)
    }

    /// Buffers alive somewhere in `[t0, t1)`.
    fn alive_in(&self, t0: u64, t1: u64) -> impl Iterator<Item = usize> + '_ {
        let from = self.by_start.partition_point(|&i| {
            self.problem.buffers[i].lifetime.start < t0.saturating_sub(self.max_len)
        });
        let to = self
            .by_start
            .partition_point(|&i| self.problem.buffers[i].lifetime.start < t1);
        self.by_start[from..to]
            .iter()
            .copied()
            .filter(move |&i| self.problem.buffers[i].lifetime.end > t0)
    }

    /// Moves buffers until no buffer ends above `target`; `false` when a window fails or the
    /// budget runs out (the moves made so far are kept: they are valid and under `target`).
    fn reach(&self, offsets: &mut [u64], target: u64, nodes: &mut u64) -> bool {
        loop {
            if self.spent(*nodes).is_some() {
                return false;
            }
            // The first hot buffer in time, and the hot ones that chain onto it.
            let hot: Vec<usize> = self
                .by_start
                .iter()
                .copied()
                .filter(|&i| self.top(offsets, i) > target)
                .collect();
            let Some(&first) = hot.first() else {
                return true;
            };
            let lt = self.problem.buffers[first].lifetime;
            let (t0, mut t1) = (lt.start, lt.end);
            for &h in hot.iter().skip(1).take(HOT_PER_WINDOW - 1) {
                let l = self.problem.buffers[h].lifetime;
                if l.start >= t1 {
                    break;
                }
                t1 = t1.max(l.end);
            }
            // Free: the highest buffers alive in the span (the hot ones first).
            let mut alive: Vec<usize> = self.alive_in(t0, t1).collect();
            alive.sort_unstable_by_key(|&i| (std::cmp::Reverse(self.top(offsets, i)), i));
            let must = alive
                .iter()
                .take_while(|&&i| self.top(offsets, i) > target)
                .count();
            let mut free = FIRST_FREE.max(must);
            let mut moved = false;
            while !moved && free <= MAX_FREE.max(must) {
                let chosen = &alive[..free.min(alive.len())];
                moved = self.repair(offsets, chosen, target, nodes);
                if free >= alive.len() {
                    break;
                }
                free *= 2;
                if self.spent(*nodes).is_some() {
                    return false;
                }
            }
            if !moved {
                return false;
            }
        }
    }

    /// Whether hot buffer `h` has room under `target` between the buffers not in `free`
    /// (a necessary condition for a window, far cheaper than its search).
    fn has_room(&self, offsets: &[u64], free: &[bool], h: usize, target: u64) -> bool {
        let b = self.problem.buffers[h];
        let blocking: Vec<(u64, u64)> = self
            .alive_in(b.lifetime.start, b.lifetime.end)
            .filter(|&j| !free[j])
            .map(|j| (offsets[j], self.top(offsets, j)))
            .collect();
        Ranges::merged(blocking)
            .first_fit(0, b.size, b.alignment)
            .is_some_and(|x| x.saturating_add(b.size) <= target)
    }

    /// Places `chosen` anew under `target` around all other buffers; `true` when it worked.
    fn repair(&self, offsets: &mut [u64], chosen: &[usize], target: u64, nodes: &mut u64) -> bool {
        let mut fixed: Vec<Option<u64>> = offsets.iter().map(|&o| Some(o)).collect();
        for &i in chosen {
            fixed[i] = None;
        }
        let free: Vec<bool> = fixed.iter().map(Option::is_none).collect();
        let hot = chosen
            .iter()
            .take_while(|&&i| self.top(offsets, i) > target);
        for &h in hot {
            if self.clock.exhausted().is_some() || !self.has_room(offsets, &free, h, target) {
                return false;
            }
        }
        let Some(inst) = Instance::within(self.problem, &fixed, target, self.clock) else {
            return false;
        };
        let opts = ExactOptions {
            limits: Limits {
                time: None,
                nodes: Some(WINDOW_NODES.saturating_mul(chosen.len() as u64).max(1024)),
                cancel: self.opts.limits.cancel.clone(),
            },
            // Each window has its node cap only (see `ExactOptions::work_limit`).
            work_limit: None,
            ..self.opts.clone()
        };
        match fit(
            &inst,
            target,
            &opts,
            self.clock,
            nodes,
            &mut SearchTrace::default(),
        ) {
            RunEnd::Found(local) => {
                for (k, &g) in inst.global.iter().enumerate() {
                    offsets[g] = local[k];
                }
                true
            }
            RunEnd::Infeasible | RunEnd::NodeLimit | RunEnd::TimeLimit => false,
        }
    }
}
