//! Hill-climbing local search over op orders, starting from the incumbent.
//!
//! Idea (the re-ordering neighbourhood of memory-aware scheduling, cf. OLLA / MODeL, here
//! without an integer program): only a move that changes a step at the peak can lower the LOAD,
//! so each round looks at the first steps at the current peak and at the values live there, and
//! tries *closed block* moves across such a step `s`:
//! - **delay**: the producer of a value live at `s` (or the node at `s`) moves to just after `s`
//!   (or after the end of the run of peak steps holding `s`), together with every node in
//!   between that depends on it, so the move stays legal;
//! - **hoist**: the readers of a value live at `s` that run after `s` (or the node at `s`) move
//!   to just before `s` (or the start of its run), together with every node in between that
//!   they depend on, so the value can die before the peak.
//!
//! A move is scored on its window only: live bytes before and after the window do not change
//! (exactly so without in-place merging; with it the window simulation is an estimate), so a
//! move costs `O(window · degree)`, with an early exit as soon as a step goes over the peak.
//! The objective is lexicographic, (LOAD, number of steps at LOAD), so plateaus of equal peak
//! are left through fewer peak steps. Candidates are re-evaluated exactly, best estimate first
//! (an exact profile evaluator, `O(n + e)` with preallocated buffers), and the first exact improvement is
//! applied. The search stops at once if the LOAD meets [`super::bound::order_lower_bound`]
//! (per-node and min-cut, steps ranked by the incumbent; computed for graphs of up to [`BOUND_CHECK_LIMIT`] nodes + values).
//!
//! Termination: every applied move strictly lowers the objective; the search also stops when
//! the [`Limits`] is spent (one budget tick per scored move) and, whatever the budget, after
//! [`LocalSearch::max_work`] units of work (a unit is one node or value visited: window steps
//! simulated, closure scans, exact evaluations) or [`LocalSearch::max_moves`] applied moves,
//! so it is deterministic and bounded when the budget is unlimited. It never returns an order
//! worse than the incumbent.

use super::bound::order_lower_bound_within;
use super::lifetimes::inplace_fits;
use super::{LifetimeOptions, OrderProblem, Orderer};
use crate::limits::{Limits, LimitsClock};

/// Nodes + values up to which the search computes the order bound to stop early when met.
pub const BOUND_CHECK_LIMIT: usize = 100_000;

/// Hill-climbing local search from the incumbent order (see the module doc).
#[derive(Debug, Clone)]
pub struct LocalSearch {
    /// Cap on work units (nodes/values visited), whatever the budget. The default, 2·10⁷,
    /// keeps the search around a few tens of milliseconds.
    pub max_work: u64,
    /// Cap on applied moves, whatever the budget.
    pub max_moves: u64,
    /// Peak steps examined per round (the first ones in the order).
    pub peak_steps: usize,
}

impl Default for LocalSearch {
    fn default() -> Self {
        LocalSearch {
            max_work: 20_000_000,
            max_moves: 10_000,
            peak_steps: 4,
        }
    }
}

impl Orderer for LocalSearch {
    fn name(&self) -> &'static str {
        "local_search"
    }

    fn order(
        &self,
        problem: &OrderProblem,
        incumbent: &[usize],
        opts: &LifetimeOptions,
        limits: &Limits,
    ) -> Vec<usize> {
        if problem.check_order(incumbent).is_err() {
            // Not a valid incumbent: start from the listed order instead.
            return match problem.listed_topological_order() {
                Ok(listed) => self.order(problem, &listed, opts, limits),
                Err(_) => incumbent.to_vec(),
            };
        }
        let mut search = Search::new(problem, incumbent, *opts);
        // The early stop at the bound is worth its price on graphs of ordinary size only.
        let small = problem.nodes.len() + problem.values.len() <= BOUND_CHECK_LIMIT;
        let bound = if small {
            order_lower_bound_within(problem, opts, Some(incumbent), limits)
        } else {
            0
        };
        search.run(self, limits, bound);
        search.order
    }
}

/// Exact LOAD of orders with reusable buffers: the same rules as [`super::lifetimes()`]
/// (births, deaths, in-place merging, workspaces), as a per-step live-bytes profile.
#[derive(Debug, Clone)]
pub(crate) struct ProfileEval {
    /// Position of each node in the last evaluated order.
    pub pos: Vec<usize>,
    /// Live bytes at each step (length `max(n, 1)`).
    pub live: Vec<u64>,
    /// Bytes of the buffers that the node at each step starts (workspace included; graph
    /// inputs, which start at step 0 before any node, excluded).
    pub starts: Vec<u64>,
    /// Size of the buffer holding each value (its in-place group's root), 0 if never reserved.
    pub held: Vec<u64>,
    /// Alignment of the buffer holding each value.
    pub held_align: Vec<u64>,
    /// Step after the last read of each value (0 if unread).
    pub last_read: Vec<usize>,
    span: Vec<(u64, u64)>,
    reserved: Vec<bool>,
    group: Vec<usize>,
    donated: Vec<bool>,
    diff: Vec<i128>,
}

impl ProfileEval {
    /// Buffers for `problem`.
    pub fn new(problem: &OrderProblem) -> Self {
        let (n, m) = (problem.nodes.len(), problem.values.len());
        let steps = n.max(1);
        ProfileEval {
            pos: vec![0; n],
            live: vec![0; steps],
            starts: vec![0; steps],
            held: vec![0; m],
            held_align: vec![1; m],
            last_read: vec![0; m],
            span: vec![(0, 0); m],
            reserved: vec![false; m],
            group: vec![0; m],
            donated: vec![false; m],
            diff: vec![0; steps + 1],
        }
    }

    /// Evaluates a valid topological `order`; returns its LOAD and fills the profile.
    pub fn eval(&mut self, problem: &OrderProblem, order: &[usize], opts: &LifetimeOptions) -> u64 {
        let n = order.len() as u64;
        for (s, &v) in order.iter().enumerate() {
            self.pos[v] = s;
        }
        for (t, val) in problem.values.iter().enumerate() {
            let birth = val.producer.map_or(0, |p| self.pos[p] as u64);
            let mut last = 0usize;
            for &c in &val.consumers {
                last = last.max(self.pos[c] + 1);
            }
            self.last_read[t] = last;
            let last_read = (!val.consumers.is_empty()).then_some(last as u64);
            let end = if val.live_at_end {
                Some(n)
            } else if val.producer.is_none() {
                last_read
            } else {
                Some(last_read.unwrap_or(birth + 1).max(birth + 1))
            };
            self.reserved[t] = end.is_some();
            self.span[t] = (birth, end.unwrap_or(0).max(birth + 1));
            self.group[t] = t;
            self.donated[t] = false;
        }
        if opts.inplace {
            for &node in order {
                let step = self.pos[node] as u64;
                for &(out, inp) in &problem.nodes[node].inplace {
                    if !self.reserved[inp] || !self.reserved[out] {
                        continue;
                    }
                    let root = self.group[inp];
                    let values = &problem.values;
                    let fits = inplace_fits(&values[out], &values[inp], values[root].alignment);
                    let dies_here =
                        self.span[inp].1 == step + 1 && !problem.values[inp].live_at_end;
                    if fits
                        && dies_here
                        && !self.donated[inp]
                        && self.group[out] == out
                        && out != inp
                    {
                        self.donated[inp] = true;
                        self.group[out] = root;
                        let out_end = self.span[out].1;
                        let r = &mut self.span[root].1;
                        *r = (*r).max(out_end);
                    }
                }
            }
        }
        self.diff.fill(0);
        self.starts.fill(0);
        for (t, val) in problem.values.iter().enumerate() {
            if !self.reserved[t] {
                self.held[t] = 0;
                continue;
            }
            let root = self.group[t];
            self.held[t] = problem.values[root].size;
            self.held_align[t] = problem.values[root].alignment;
            if root == t {
                let (start, end) = self.span[t];
                self.diff[start as usize] += val.size as i128;
                self.diff[end as usize] -= val.size as i128;
                if val.producer.is_some() {
                    self.starts[start as usize] =
                        self.starts[start as usize].saturating_add(val.size);
                }
            }
        }
        for &node in order {
            let ws = problem.nodes[node].workspace;
            if ws > 0 {
                let s = self.pos[node];
                self.diff[s] += ws as i128;
                self.diff[s + 1] -= ws as i128;
                self.starts[s] = self.starts[s].saturating_add(ws);
            }
        }
        let mut cur: i128 = 0;
        let mut best = 0u64;
        for s in 0..self.live.len() {
            cur += self.diff[s];
            let l = u64::try_from(cur).unwrap_or(u64::MAX);
            self.live[s] = l;
            best = best.max(l);
        }
        best
    }
}

/// The objective: (LOAD, number of steps at LOAD), smaller is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Objective {
    peak: u64,
    count: usize,
}

/// Objective of a live-bytes profile.
fn objective_of(live: &[u64]) -> Objective {
    let peak = live.iter().copied().max().unwrap_or(0);
    Objective {
        peak,
        count: live.iter().filter(|&&l| l == peak).count(),
    }
}

/// Kind of block move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Move {
    /// Move the seeds and their descendants in `[first seed, target]` to just after `target`.
    Delay,
    /// Move the seeds and their ancestors in `[target, last seed]` to just before `target`.
    Hoist,
}

/// A scored move: the new contents of the window starting at step `a`, and its estimate.
struct Candidate {
    a: usize,
    window: Vec<usize>,
    obj: Objective,
}

/// The search state: the current order, its exact profile and scratch buffers.
struct Search<'a> {
    problem: &'a OrderProblem,
    opts: LifetimeOptions,
    order: Vec<usize>,
    eval: ProfileEval,
    obj: Objective,
    /// `pre_max[s]`: max live bytes over steps `< s`.
    pre_max: Vec<u64>,
    /// `suf_max[s]`: max live bytes over steps `>= s`.
    suf_max: Vec<u64>,
    /// `pre_cnt[s]`: steps `< s` at the peak.
    pre_cnt: Vec<usize>,
    work: u64,
    // Scratch.
    in_block: Vec<bool>,
    window: Vec<usize>,
    trial: Vec<usize>,
    trial_eval: ProfileEval,
    /// Readers of each value left in the simulated window.
    left: Vec<u32>,
    touched: Vec<usize>,
    held_sim: Vec<u64>,
    align_sim: Vec<u64>,
    donated_sim: Vec<bool>,
    merged_sim: Vec<bool>,
}

impl<'a> Search<'a> {
    fn new(problem: &'a OrderProblem, incumbent: &[usize], opts: LifetimeOptions) -> Self {
        let (n, m) = (problem.nodes.len(), problem.values.len());
        let mut eval = ProfileEval::new(problem);
        eval.eval(problem, incumbent, &opts);
        let mut s = Search {
            problem,
            opts,
            order: incumbent.to_vec(),
            trial_eval: eval.clone(),
            eval,
            obj: Objective { peak: 0, count: 0 },
            pre_max: Vec::with_capacity(n + 1),
            suf_max: Vec::with_capacity(n + 1),
            pre_cnt: Vec::with_capacity(n + 1),
            work: (n + m) as u64,
            in_block: vec![false; n],
            window: Vec::new(),
            trial: Vec::with_capacity(n),
            left: vec![0; m],
            touched: Vec::new(),
            held_sim: vec![0; m],
            align_sim: vec![1; m],
            donated_sim: vec![false; m],
            merged_sim: vec![false; m],
        };
        s.refresh();
        s
    }

    /// Recomputes the objective and the prefix/suffix arrays from `eval.live`.
    fn refresh(&mut self) {
        self.obj = objective_of(&self.eval.live);
        let live = &self.eval.live;
        self.pre_max.clear();
        self.pre_cnt.clear();
        let (mut mx, mut c) = (0u64, 0usize);
        for &l in live {
            self.pre_max.push(mx);
            self.pre_cnt.push(c);
            mx = mx.max(l);
            c += usize::from(l == self.obj.peak);
        }
        self.pre_max.push(mx);
        self.pre_cnt.push(c);
        self.suf_max.clear();
        self.suf_max.resize(live.len() + 1, 0);
        for s in (0..live.len()).rev() {
            self.suf_max[s] = self.suf_max[s + 1].max(live[s]);
        }
    }

    fn run(&mut self, cfg: &LocalSearch, limits: &Limits, bound: u64) {
        let mut clock = limits.start();
        if self.problem.nodes.len() >= 2 {
            self.climb(cfg, &mut clock, bound);
        }
    }

    /// Hill-climbs until no move improves, the bound is met or a limit (budget, work, moves)
    /// is reached.
    fn climb(&mut self, cfg: &LocalSearch, clock: &mut LimitsClock, bound: u64) {
        let mut moves = 0u64;
        let (n, m) = (self.problem.nodes.len(), self.problem.values.len());
        let mut cands: Vec<Candidate> = Vec::new();
        while self.obj.peak > bound {
            if moves >= cfg.max_moves {
                return;
            }
            let peak = self.obj.peak;
            let peaks: Vec<usize> = (0..n)
                .filter(|&s| self.eval.live[s] == peak)
                .take(cfg.peak_steps.max(1))
                .collect();
            self.work += n as u64;
            let mut applied = false;
            for &s in &peaks {
                cands.clear();
                let seeds = self.seeds_at(s);
                self.work += m as u64;
                for (kind, seed, target) in seeds {
                    if clock.tick().is_some() || self.work >= cfg.max_work {
                        return;
                    }
                    if let Some(c) = self.try_move(kind, &seed, target) {
                        cands.push(c);
                    }
                }
                // Best estimate first; the first exact improvement is applied.
                cands.sort_by(|x, y| x.obj.cmp(&y.obj).then(x.a.cmp(&y.a)));
                for c in &cands {
                    if clock.exhausted().is_some() || self.work >= cfg.max_work {
                        return;
                    }
                    self.trial.clear();
                    self.trial.extend_from_slice(&self.order);
                    self.trial[c.a..c.a + c.window.len()].copy_from_slice(&c.window);
                    self.trial_eval.eval(self.problem, &self.trial, &self.opts);
                    self.work += (n + m) as u64;
                    if objective_of(&self.trial_eval.live) < self.obj {
                        std::mem::swap(&mut self.order, &mut self.trial);
                        std::mem::swap(&mut self.eval, &mut self.trial_eval);
                        self.refresh();
                        applied = true;
                        break;
                    }
                }
                if applied {
                    break;
                }
            }
            if !applied {
                return;
            }
            moves += 1;
        }
    }

    /// Candidate moves across peak step `s`: (kind, seeds, step to cross). Delays cross `s`
    /// and the end of the run of peak steps holding `s`; hoists cross `s` and its run's start.
    fn seeds_at(&self, s: usize) -> Vec<(Move, Vec<usize>, usize)> {
        let p = self.problem;
        let n = p.nodes.len();
        let live = &self.eval.live;
        let peak = live[s];
        let mut run_end = s;
        while run_end + 1 < n && live[run_end + 1] == peak {
            run_end += 1;
        }
        let mut run_start = s;
        while run_start > 0 && live[run_start - 1] == peak {
            run_start -= 1;
        }
        let mut out = Vec::new();
        let mut push = |kind: Move, seeds: Vec<usize>| {
            let far = match kind {
                Move::Delay => run_end,
                Move::Hoist => run_start,
            };
            if far != s {
                out.push((kind, seeds.clone(), far));
            }
            out.push((kind, seeds, s));
        };
        let step_node = self.order[s];
        push(Move::Delay, vec![step_node]);
        push(Move::Hoist, vec![step_node]);
        for (t, val) in p.values.iter().enumerate() {
            if self.eval.held[t] == 0 {
                continue;
            }
            let birth = val.producer.map_or(0, |q| self.eval.pos[q]);
            let end = if val.live_at_end {
                n
            } else {
                self.eval.last_read[t].max(birth + 1)
            };
            if !(birth <= s && s < end) {
                continue;
            }
            if let Some(q) = val.producer {
                if self.eval.pos[q] < s {
                    push(Move::Delay, vec![q]);
                }
            }
            if !val.live_at_end && end > s + 1 {
                let readers: Vec<usize> = val
                    .consumers
                    .iter()
                    .copied()
                    .filter(|&c| self.eval.pos[c] > s)
                    .collect();
                if !readers.is_empty() {
                    push(Move::Hoist, readers);
                }
            }
        }
        out
    }

    /// Builds the block move of `seeds` across step `s` into `self.window` and scores it on
    /// its window; returns it when the estimate beats the current objective.
    fn try_move(&mut self, kind: Move, seeds: &[usize], s: usize) -> Option<Candidate> {
        let n = self.problem.nodes.len();
        let (a, b) = match kind {
            Move::Delay => {
                let first = seeds.iter().map(|&v| self.eval.pos[v]).min()?;
                // Cross step s (or the node's own step when the seed is at or after s).
                let target = if first >= s { first + 1 } else { s };
                if target >= n {
                    return None;
                }
                (first, target)
            }
            Move::Hoist => {
                let last = seeds.iter().map(|&v| self.eval.pos[v]).max()?;
                let target = if last <= s { last.checked_sub(1)? } else { s };
                (target, last)
            }
        };
        if a >= b || !self.build_window(kind, seeds, a, b) {
            return None;
        }
        let est = self.simulate(a, b)?;
        (est < self.obj).then(|| Candidate {
            a,
            window: self.window.clone(),
            obj: est,
        })
    }

    /// Writes into `self.window` the new contents of `[a, b]` when `seeds` (in the window)
    /// move to its end (delay) or start (hoist) with their dependents / dependencies in it.
    /// Positions are read from `self.eval.pos`. Returns false when the move changes nothing.
    fn build_window(&mut self, kind: Move, seeds: &[usize], a: usize, b: usize) -> bool {
        let p = self.problem;
        self.work += (b - a + 1) as u64;
        for &v in seeds {
            self.in_block[v] = true;
        }
        let mut block_len = 0usize;
        match kind {
            Move::Delay => {
                for k in a..=b {
                    let v = self.order[k];
                    if !self.in_block[v] {
                        let dep = p.nodes[v]
                            .inputs
                            .iter()
                            .any(|&t| p.values[t].producer.is_some_and(|q| self.in_block[q]));
                        self.in_block[v] = dep;
                    }
                    block_len += usize::from(self.in_block[v]);
                }
            }
            Move::Hoist => {
                for k in (a..=b).rev() {
                    let v = self.order[k];
                    if !self.in_block[v] {
                        continue;
                    }
                    block_len += 1;
                    for &t in &p.nodes[v].inputs {
                        if let Some(q) = p.values[t].producer {
                            let pq = self.eval.pos[q];
                            if pq >= a && pq < k {
                                self.in_block[q] = true;
                            }
                        }
                    }
                }
            }
        }
        // New window: the rest then the block (delay), or the block then the rest (hoist).
        self.window.clear();
        let block_first = kind == Move::Hoist;
        for part in [block_first, !block_first] {
            for k in a..=b {
                let v = self.order[k];
                if self.in_block[v] == part {
                    self.window.push(v);
                }
            }
        }
        for k in a..=b {
            let v = self.order[k];
            self.in_block[v] = false;
        }
        block_len != 0 && block_len != b - a + 1
    }

    /// Live bytes over the window `[a, b]` when it runs `self.window`; returns the estimated
    /// objective, or `None` as soon as a step exceeds the current peak.
    fn simulate(&mut self, a: usize, b: usize) -> Option<Objective> {
        let p = self.problem;
        let e = &self.eval;
        let peak = self.obj.peak;
        self.touched.clear();
        for &v in &self.window {
            for &t in &p.nodes[v].inputs {
                if self.left[t] == 0 {
                    self.touched.push(t);
                }
                self.left[t] += 1;
            }
        }
        // A value dies in the window when its last window reader runs and no reader follows
        // the window.
        let no_reader_after = |t: usize| e.last_read[t] <= b + 1 && !p.values[t].live_at_end;
        // Bytes live across the step boundary before `a` (graph inputs included).
        let mut cur = e.live[a].saturating_sub(e.starts[a]) as u128;
        let mut wmax = 0u64;
        let mut wcnt = 0usize;
        let mut over = false;
        for &v in &self.window {
            self.work += 1;
            let node = &p.nodes[v];
            for &o in &node.outputs {
                self.held_sim[o] = p.values[o].size;
                self.align_sim[o] = p.values[o].alignment;
            }
            if self.opts.inplace {
                for &(o, i) in &node.inplace {
                    if o == i || self.merged_sim[o] || self.donated_sim[i] {
                        continue;
                    }
                    if self.left[i] != 1 || !no_reader_after(i) || !node.inputs.contains(&i) {
                        continue;
                    }
                    let born_here = p.values[i].producer.is_some_and(|q| e.pos[q] >= a);
                    let (hs, ha) = if born_here {
                        (self.held_sim[i], self.align_sim[i])
                    } else {
                        (e.held[i], e.held_align[i])
                    };
                    let fits = inplace_fits(&p.values[o], &p.values[i], ha);
                    if hs > 0 && fits {
                        self.merged_sim[o] = true;
                        self.donated_sim[i] = true;
                        self.held_sim[o] = hs;
                        self.align_sim[o] = ha;
                    }
                }
            }
            let mut add = 0u128;
            for &o in &node.outputs {
                if !self.merged_sim[o] {
                    add += self.held_sim[o] as u128;
                }
            }
            let during = cur + add;
            let step_live = u64::try_from(during + node.workspace as u128).unwrap_or(u64::MAX);
            if step_live > peak {
                over = true;
                break;
            }
            wmax = wmax.max(step_live);
            wcnt += usize::from(step_live == peak);
            let mut freed = 0u128;
            for &t in &node.inputs {
                self.left[t] -= 1;
                if self.left[t] == 0 && no_reader_after(t) && !self.donated_sim[t] {
                    let born_here = p.values[t].producer.is_some_and(|q| e.pos[q] >= a);
                    freed += if born_here {
                        self.held_sim[t]
                    } else {
                        e.held[t]
                    } as u128;
                }
            }
            for &o in &node.outputs {
                let val = &p.values[o];
                if val.consumers.is_empty() && !val.live_at_end {
                    freed += self.held_sim[o] as u128;
                }
            }
            cur = during.saturating_sub(freed);
        }
        for &t in &self.touched {
            self.left[t] = 0;
            self.donated_sim[t] = false;
        }
        for &v in &self.window {
            for &o in &p.nodes[v].outputs {
                self.merged_sim[o] = false;
            }
        }
        if over {
            return None;
        }
        let outside_max = self.pre_max[a].max(self.suf_max[b + 1]);
        let new_peak = outside_max.max(wmax);
        if new_peak < peak {
            // The count at the new level is unknown; a lower peak wins anyway.
            return Some(Objective {
                peak: new_peak,
                count: 0,
            });
        }
        let outside_cnt = self.pre_cnt[a] + (self.obj.count - self.pre_cnt[b + 1]);
        Some(Objective {
            peak,
            count: outside_cnt + wcnt,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::order::bound::order_lower_bound;
    use crate::order::greedy::GreedyList;
    use crate::order::{Node, Value};
    use proptest::prelude::*;

    /// A small deterministic generator (splitmix64, `below` by remainder).
    struct Rng(crate::generate::SplitMix64);

    impl Rng {
        fn below(&mut self, k: u64) -> u64 {
            self.0.next_u64() % k
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    /// A random DAG of `n` nodes: graph inputs, 1–2 outputs per node, fan-in up to 3 among
    /// earlier values, random sizes / alignments / workspaces / graph outputs / in-place pairs,
    /// and node indices shuffled so the listed order is usually not topological.
    pub(crate) fn random_problem(seed: u64, n: usize) -> OrderProblem {
        let mut rng = Rng(crate::generate::SplitMix64::new(seed));
        let mut values: Vec<Value> = Vec::new();
        let new_value = |rng: &mut Rng, producer: Option<usize>| Value {
            // Often one of a few sizes, so in-place chains of equal or shrinking sizes occur.
            size: if rng.chance(50) {
                16 << rng.below(3)
            } else {
                1 + rng.below(100)
            },
            alignment: 1 << rng.below(3),
            producer,
            consumers: Vec::new(),
            live_at_end: rng.chance(15),
        };
        for _ in 0..rng.below(3) {
            let v = new_value(&mut rng, None);
            values.push(v);
        }
        let mut nodes: Vec<Node> = Vec::new();
        for k in 0..n {
            let mut inputs = Vec::new();
            if !values.is_empty() {
                for _ in 0..rng.below(4) {
                    let t = rng.below(values.len() as u64) as usize;
                    if !inputs.contains(&t) {
                        inputs.push(t);
                    }
                }
            }
            let mut outputs = Vec::new();
            for _ in 0..1 + rng.below(2) {
                outputs.push(values.len());
                let v = new_value(&mut rng, Some(k));
                values.push(v);
            }
            let mut inplace = Vec::new();
            for &o in &outputs {
                if !inputs.is_empty() && rng.chance(50) {
                    let i = inputs[rng.below(inputs.len() as u64) as usize];
                    inplace.push((o, i));
                }
            }
            let workspace = if rng.chance(30) { 1 + rng.below(50) } else { 0 };
            nodes.push(Node {
                inputs,
                outputs,
                workspace,
                inplace,
            });
        }
        // Shuffle node indices (Fisher–Yates).
        let mut perm: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            perm.swap(i, j);
        }
        let mut shuffled = vec![Node::default(); n];
        for (old, node) in nodes.into_iter().enumerate() {
            shuffled[perm[old]] = node;
        }
        for v in &mut values {
            v.producer = v.producer.map(|p| perm[p]);
        }
        for (k, node) in shuffled.iter().enumerate() {
            for &t in &node.inputs {
                values[t].consumers.push(k);
            }
        }
        for v in &mut values {
            v.consumers.sort_unstable();
        }
        OrderProblem {
            nodes: shuffled,
            values,
            workspace_alignment: 1,
        }
    }

    /// Every topological order, by iterative backtracking.
    pub(crate) fn all_orders(p: &OrderProblem) -> Vec<Vec<usize>> {
        let n = p.nodes.len();
        let preds = p.predecessors();
        let succ = p.successors();
        let mut indeg: Vec<usize> = preds.iter().map(Vec::len).collect();
        let mut used = vec![false; n];
        let mut order: Vec<usize> = Vec::new();
        // next[d]: the next node index to try at depth d.
        let mut next = vec![0usize; n + 1];
        let mut out = Vec::new();
        loop {
            let d = order.len();
            if d == n {
                out.push(order.clone());
            }
            let mut advanced = false;
            if d < n {
                while next[d] < n {
                    let v = next[d];
                    next[d] += 1;
                    if !used[v] && indeg[v] == 0 {
                        used[v] = true;
                        for &s in &succ[v] {
                            indeg[s] -= 1;
                        }
                        order.push(v);
                        next[d + 1] = 0;
                        advanced = true;
                        break;
                    }
                }
            }
            if advanced {
                continue;
            }
            // Backtrack.
            let Some(v) = order.pop() else {
                return out;
            };
            used[v] = false;
            for &s in &succ[v] {
                indeg[s] += 1;
            }
        }
    }

    pub(crate) fn value(
        size: u64,
        producer: Option<usize>,
        consumers: Vec<usize>,
        live_at_end: bool,
    ) -> Value {
        Value {
            size,
            alignment: 1,
            producer,
            consumers,
            live_at_end,
        }
    }

    /// Two independent branches from one input; the listed order runs the branch that holds a
    /// big value first, and interleaves badly.
    pub(crate) fn two_branches() -> OrderProblem {
        // in(0) -> a0 -> big(1) -> a1 -> small(2)
        // in(0) -> b0 -> mid(3) -> b1 -> out(4) ; a1's small(2) and b1's out are graph outputs.
        OrderProblem {
            nodes: vec![
                Node {
                    inputs: vec![0],
                    outputs: vec![1],
                    ..Node::default()
                },
                Node {
                    inputs: vec![0],
                    outputs: vec![3],
                    ..Node::default()
                },
                Node {
                    inputs: vec![1],
                    outputs: vec![2],
                    ..Node::default()
                },
                Node {
                    inputs: vec![3],
                    outputs: vec![4],
                    ..Node::default()
                },
            ],
            values: vec![
                value(10, None, vec![0, 1], false),
                value(100, Some(0), vec![2], false),
                value(1, Some(2), vec![], true),
                value(50, Some(1), vec![3], false),
                value(1, Some(3), vec![], true),
            ],
            workspace_alignment: 1,
        }
    }

    #[test]
    fn profile_eval_matches_the_lifetimes_load_on_every_order() {
        for seed in 0..400 {
            for inplace in [false, true] {
                let p = random_problem(seed, 7);
                let opts = LifetimeOptions { inplace };
                let mut eval = ProfileEval::new(&p);
                for order in all_orders(&p).iter().take(50) {
                    assert_eq!(
                        eval.eval(&p, order, &opts),
                        p.load(order, &opts),
                        "seed {seed}"
                    );
                }
            }
        }
    }

    #[test]
    fn local_search_finds_the_order_that_finishes_the_big_branch_first() {
        let p = two_branches();
        let opts = LifetimeOptions::default();
        let listed = p.listed_topological_order().unwrap();
        // Listed: a0, b0, a1, b1: input, big and mid live together at b0.
        assert_eq!(p.load(&listed, &opts), 160);
        let order = LocalSearch::default().order(&p, &listed, &opts, &Limits::UNLIMITED);
        p.check_order(&order).unwrap();
        let best = all_orders(&p)
            .iter()
            .map(|o| p.load(o, &opts))
            .min()
            .unwrap();
        assert_eq!(p.load(&order, &opts), best);
        assert_eq!(best, 111);
    }

    #[test]
    fn local_search_with_a_spent_budget_returns_the_incumbent() {
        let p = two_branches();
        let opts = LifetimeOptions::default();
        let listed = p.listed_topological_order().unwrap();
        let limits = Limits {
            time: None,
            nodes: Some(0),
            ..Limits::UNLIMITED
        };
        let order = LocalSearch::default().order(&p, &listed, &opts, &limits);
        assert_eq!(order, listed);
    }

    #[test]
    fn local_search_handles_empty_and_single_node_problems() {
        let opts = LifetimeOptions::default();
        let empty = OrderProblem::default();
        assert!(LocalSearch::default()
            .order(&empty, &[], &opts, &Limits::UNLIMITED)
            .is_empty());
        let one = random_problem(7, 1);
        assert_eq!(
            LocalSearch::default().order(&one, &[0], &opts, &Limits::UNLIMITED),
            vec![0]
        );
    }

    #[test]
    fn local_search_replaces_an_invalid_incumbent_by_a_valid_order() {
        let p = two_branches();
        let opts = LifetimeOptions::default();
        let order = LocalSearch::default().order(&p, &[3, 2, 1, 0], &opts, &Limits::UNLIMITED);
        p.check_order(&order).unwrap();
    }

    #[test]
    fn local_search_on_a_million_node_chain_respects_its_work_cap() {
        let n = 1_000_000;
        let p = chain(n);
        let listed: Vec<usize> = (0..n).collect();
        let opts = LifetimeOptions::default();
        let started = std::time::Instant::now();
        let order = LocalSearch::default().order(&p, &listed, &opts, &Limits::UNLIMITED);
        assert_eq!(order, listed);
        assert!(started.elapsed().as_secs_f64() < 10.0);
    }

    /// A chain of `n` nodes: input -> v0 -> v1 -> ... -> output.
    pub(crate) fn chain(n: usize) -> OrderProblem {
        let mut values = vec![value(8, None, vec![0], false)];
        let mut nodes = Vec::with_capacity(n);
        for k in 0..n {
            values.push(value(8 + (k as u64 % 5), Some(k), vec![], k + 1 == n));
            if k + 1 < n {
                values[k + 1].consumers.push(k + 1);
            }
            nodes.push(Node {
                inputs: vec![k],
                outputs: vec![k + 1],
                workspace: k as u64 % 3,
                inplace: vec![(k + 1, k)],
            });
        }
        OrderProblem {
            nodes,
            values,
            workspace_alignment: 1,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// (a) the bound is at most the best LOAD over all orders; (b) greedy and local search
        /// return topological orders no better than that best; (c) local search never returns
        /// worse than its incumbent.
        #[test]
        fn bound_greedy_and_local_search_agree_with_brute_force(
            seed in any::<u64>(),
            n in 1usize..=8,
            inplace in any::<bool>(),
        ) {
            let p = random_problem(seed, n);
            let opts = LifetimeOptions { inplace };
            let best = all_orders(&p).iter().map(|o| p.load(o, &opts)).min().unwrap_or(0);
            let bound = order_lower_bound(&p, &opts);
            prop_assert!(bound <= best, "bound {} > best LOAD {}", bound, best);

            let listed = p.listed_topological_order().unwrap();
            let greedy = GreedyList::default().order(&p, &listed, &opts, &Limits::UNLIMITED);
            prop_assert!(p.check_order(&greedy).is_ok());
            prop_assert!(p.load(&greedy, &opts) >= best);

            for incumbent in [&listed, &greedy] {
                let before = p.load(incumbent, &opts);
                let ls = LocalSearch::default().order(&p, incumbent, &opts, &Limits::UNLIMITED);
                prop_assert!(p.check_order(&ls).is_ok());
                let after = p.load(&ls, &opts);
                prop_assert!(after >= best);
                prop_assert!(after <= before, "local search {} worse than incumbent {}", after, before);
            }
        }
    }
}
