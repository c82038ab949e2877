//! Hill-climbing local search over op orders, starting from the incumbent.
//!
//! Idea (the neighbourhood of scheduling local search, cf. the re-ordering moves of OLLA /
//! MODeL, here without an integer program): only moves that change a peak step can lower the
//! LOAD, so every round looks at the steps at the current peak and at the values live there,
//! and tries two kinds of *closed block* moves:
//! - **delay**: move the producer of a value live at the peak to just after the peak step,
//!   together with every node between them that depends on it (so the move stays legal);
//! - **hoist**: move the readers of a value live at the peak that run after it to just before
//!   the peak step, together with every node between them that they depend on (so the value can
//!   die earlier); the node running at the peak is also hoisted/delayed the same way.
//!
//! A move is scored on its window only: the live bytes before and after the window are
//! unchanged (exactly so without in-place merging; with it the window simulation is an
//! estimate), so the new profile costs `O(window · degree)`, with an early exit as soon as a
//! step goes over the peak. Objective, lexicographic: (LOAD, number of steps at LOAD, sum of
//! live bytes over steps), so plateaus of equal peak are left through fewer peak steps.
//! Promising moves are re-evaluated exactly ([`ProfileEval`], `O(n + e)`, preallocated
//! buffers) before being accepted; the best accepted move of a round is applied.
//!
//! Termination: every accepted move strictly lowers the objective; the search also stops when
//! the [`Budget`] is spent (one budget tick per scored move) or, whatever the budget, after
//! [`LocalSearch::max_work`] simulated window steps or [`LocalSearch::max_moves`] accepted
//! moves, so it is deterministic and bounded when the budget is unlimited. It never returns an
//! order worse than the incumbent.

use super::{LifetimeOptions, OrderProblem, Orderer};
use crate::budget::Budget;

/// Hill-climbing local search from the incumbent order (see the module doc).
#[derive(Debug, Clone)]
pub struct LocalSearch {
    /// Cap on simulated window steps (the search's unit of work), whatever the budget.
    pub max_work: u64,
    /// Cap on accepted moves, whatever the budget.
    pub max_moves: u64,
    /// Peak steps examined per round (the first ones of the order).
    pub peak_steps: usize,
}

impl Default for LocalSearch {
    fn default() -> Self {
        LocalSearch {
            max_work: 30_000_000,
            max_moves: 20_000,
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
        budget: &Budget,
    ) -> Vec<usize> {
        if problem.check_order(incumbent).is_err() {
            return problem
                .listed_topological_order()
                .unwrap_or_else(|_| incumbent.to_vec());
        }
        let mut search = Search::new(problem, incumbent, *opts);
        search.run(self, budget);
        search.order
    }
}

/// Exact LOAD of orders with reusable buffers: the same rules as [`super::lifetimes`]
/// (births, deaths, in-place merging, workspaces), as a per-step live-bytes profile.
#[derive(Debug, Clone)]
pub(crate) struct ProfileEval {
    /// Position of each node in the last evaluated order.
    pub pos: Vec<usize>,
    /// Live bytes at each step (length `max(n, 1)`).
    pub live: Vec<u64>,
    /// Bytes of the buffers that start at each step (workspaces included).
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
                    let (rv, ov) = (&problem.values[root], &problem.values[out]);
                    let fits = ov.size <= rv.size && ov.alignment <= rv.alignment;
                    let dies_here = self.span[inp].1 == step + 1 && !problem.values[inp].live_at_end;
                    if fits && dies_here && !self.donated[inp] && self.group[out] == out && out != inp {
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
                self.starts[start as usize] = self.starts[start as usize].saturating_add(val.size);
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

/// The lexicographic objective: (LOAD, steps at LOAD, sum of live bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Objective {
    peak: u64,
    count: usize,
    area: u128,
}

/// Kind of block move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Move {
    /// Move the seeds and their descendants in `[first seed, target]` to just after `target`.
    Delay,
    /// Move the seeds and their ancestors in `[target, last seed]` to just before `target`.
    Hoist,
}

/// The search state: the current order, its exact profile and scratch buffers.
struct Search<'a> {
    problem: &'a OrderProblem,
    opts: LifetimeOptions,
    order: Vec<usize>,
    eval: ProfileEval,
    obj: Objective,
    /// Prefix maxima: `pre_max[s]` = max live over steps `< s`.
    pre_max: Vec<u64>,
    /// Suffix maxima: `suf_max[s]` = max live over steps `>= s`.
    suf_max: Vec<u64>,
    /// `pre_cnt[s]` = steps `< s` at the peak.
    pre_cnt: Vec<usize>,
    /// `pre_area[s]` = live bytes summed over steps `< s`.
    pre_area: Vec<u128>,
    // Scratch.
    in_block: Vec<bool>,
    window: Vec<usize>,
    trial: Vec<usize>,
    cnt: Vec<u32>,
    touched: Vec<usize>,
    held_sim: Vec<u64>,
    align_sim: Vec<u64>,
    donated_sim: Vec<bool>,
    merged_sim: Vec<bool>,
    work: u64,
    scratch_eval: ProfileEval,
}

/// A scored candidate: the new window (to write over `[a, a + len)`) and its objective.
struct Candidate {
    a: usize,
    window: Vec<usize>,
    obj: Objective,
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
            scratch_eval: eval.clone(),
            eval,
            obj: Objective {
                peak: 0,
                count: 0,
                area: 0,
            },
            pre_max: Vec::new(),
            suf_max: Vec::new(),
            pre_cnt: Vec::new(),
            pre_area: Vec::new(),
            in_block: vec![false; n],
            window: Vec::new(),
            trial: Vec::with_capacity(n),
            cnt: vec![0; m],
            touched: Vec::new(),
            held_sim: vec![0; m],
            align_sim: vec![1; m],
            donated_sim: vec![false; m],
            merged_sim: vec![false; m],
            work: 0,
        };
        s.refresh();
        s
    }

    /// Recomputes the objective and the prefix/suffix arrays from `eval.live`.
    fn refresh(&mut self) {
        self.obj = objective_of(&self.eval.live);
        let live = &self.eval.live;
        let steps = live.len();
        self.pre_max.clear();
        self.pre_cnt.clear();
        self.pre_area.clear();
        self.suf_max.clear();
        self.suf_max.resize(steps + 1, 0);
        let (mut mx, mut c, mut a) = (0u64, 0usize, 0u128);
        for &l in live {
            self.pre_max.push(mx);
            self.pre_cnt.push(c);
            self.pre_area.push(a);
            mx = mx.max(l);
            c += usize::from(l == self.obj.peak);
            a += l as u128;
        }
        self.pre_max.push(mx);
        self.pre_cnt.push(c);
        self.pre_area.push(a);
        for s in (0..steps).rev() {
            self.suf_max[s] = self.suf_max[s + 1].max(live[s]);
        }
    }

    fn run(&mut self, cfg: &LocalSearch, budget: &Budget) {
        let mut clock = budget.start();
        let n = self.problem.nodes.len();
        if n < 2 {
            return;
        }
        let mut moves = 0u64;
        let mut cands: Vec<Candidate> = Vec::new();
        'rounds: while moves < cfg.max_moves && self.work < cfg.max_work {
            if clock.exhausted().is_some() {
                break;
            }
            let peak = self.obj.peak;
            let peaks: Vec<usize> = (0..n)
                .filter(|&s| self.eval.live[s] == peak)
                .take(cfg.peak_steps.max(1))
                .collect();
            let mut accepted = false;
            for &s in &peaks {
                cands.clear();
                for (kind, seed, target) in self.seeds_at(s) {
                    if clock.tick().is_some() || self.work >= cfg.max_work {
                        break 'rounds;
                    }
                    if let Some(c) = self.try_move(kind, &seed, target) {
                        cands.push(c);
                    }
                }
                // Best estimate first; the first exact improvement is applied.
                cands.sort_by(|x, y| x.obj.cmp(&y.obj).then(x.a.cmp(&y.a)));
                for c in &cands {
                    self.trial.clear();
                    self.trial.extend_from_slice(&self.order);
                    self.trial[c.a..c.a + c.window.len()].copy_from_slice(&c.window);
                    self.scratch_eval.eval(self.problem, &self.trial, &self.opts);
                    self.work += n as u64;
                    if objective_of(&self.scratch_eval.live) < self.obj {
                        std::mem::swap(&mut self.order, &mut self.trial);
                        std::mem::swap(&mut self.eval, &mut self.scratch_eval);
                        self.refresh();
                        accepted = true;
                        break;
                    }
                }
                if accepted {
                    break;
                }
            }
            if !accepted {
                break;
            }
            moves += 1;
        }
    }

    /// Candidate moves around peak step `s`: (kind, seeds, step to cross). Delays cross `s`
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
            let end = if val.live_at_end { n } else { self.eval.last_read[t].max(birth + 1) };
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

    /// Builds the block move of `seeds` across step `s` and scores it on its window; returns
    /// it when the estimate beats the current objective.
    fn try_move(&mut self, kind: Move, seeds: &[usize], s: usize) -> Option<Candidate> {
        let p = self.problem;
        let pos = &self.eval.pos;
        let n = p.nodes.len();
        let (a, b) = match kind {
            Move::Delay => {
                let first = seeds.iter().map(|&v| pos[v]).min()?;
                // Target: just after step s (or after the node itself when it is at s).
                let target = if first >= s { s + 1 } else { s };
                if target >= n {
                    return None;
                }
                (first, target)
            }
            Move::Hoist => {
                let last = seeds.iter().map(|&v| pos[v]).max()?;
                let target = if last <= s { s.checked_sub(1)? } else { s };
                (target, last)
            }
        };
        if a >= b {
            return None;
        }
        // Closure of the seeds within [a, b].
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
                        if dep {
                            self.in_block[v] = true;
                        }
                    }
                    block_len += usize::from(self.in_block[v]);
                }
            }
            Move::Hoist => {
                for k in (a..=b).rev() {
                    let v = self.order[k];
                    if self.in_block[v] {
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
        }
        let len = b - a + 1;
        self.window.clear();
        let (first_part, second_part) = match kind {
            Move::Delay => (false, true),
            Move::Hoist => (true, false),
        };
        for part in [first_part, second_part] {
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
        if block_len == 0 || block_len == len || self.window[..] == self.order[a..=b] {
            return None;
        }
        let est = self.simulate(a, b)?;
        (est < self.obj).then(|| Candidate {
            a,
            window: self.window.clone(),
            obj: est,
        })
    }

    /// Live bytes over the window `[a, b]` when it runs `self.window`; returns the estimated
    /// objective, or `None` as soon as a step exceeds the current peak.
    fn simulate(&mut self, a: usize, b: usize) -> Option<Objective> {
        let p = self.problem;
        let e = &self.eval;
        let peak = self.obj.peak;
        let n = p.nodes.len();
        // Readers inside the window.
        self.touched.clear();
        for &v in &self.window {
            for &t in &p.nodes[v].inputs {
                if self.cnt[t] == 0 {
                    self.touched.push(t);
                }
                self.cnt[t] += 1;
            }
        }
        let mut cur = e.live[a].saturating_sub(e.starts[a]) as u128;
        let mut wmax = 0u64;
        let mut wcnt = 0usize;
        let mut warea = 0u128;
        let mut ok = true;
        for (k, &v) in self.window.iter().enumerate() {
            self.work += 1;
            let node = &p.nodes[v];
            let step_bytes_before = cur;
            let mut add = 0u128;
            for &o in &node.outputs {
                self.held_sim[o] = p.values[o].size;
                self.align_sim[o] = p.values[o].alignment;
                self.merged_sim[o] = false;
            }
            if self.opts.inplace {
                for &(o, i) in &node.inplace {
                    if o == i || self.merged_sim[o] || self.donated_sim[i] {
                        continue;
                    }
                    let dies = self.cnt[i] == 1
                        && !p.values[i].live_at_end
                        && e.last_read[i] <= b + 1
                        && node.inputs.contains(&i);
                    let (hs, ha) = self.held_of(i, a);
                    if dies && p.values[o].size <= hs && p.values[o].alignment <= ha && hs > 0 {
                        self.merged_sim[o] = true;
                        self.donated_sim[i] = true;
                        self.held_sim[o] = hs;
                        self.align_sim[o] = ha;
                        self.touched.push(i);
                    }
                }
            }
            for &o in &node.outputs {
                if !self.merged_sim[o] {
                    add += self.held_sim[o] as u128;
                }
            }
            let step_live = step_bytes_before + add + node.workspace as u128;
            let step_live = u64::try_from(step_live).unwrap_or(u64::MAX);
            if step_live > peak {
                ok = false;
                break;
            }
            wmax = wmax.max(step_live);
            wcnt += usize::from(step_live == peak);
            warea += step_live as u128;
            // Frees after the step.
            let mut freed = 0u128;
            for &t in &node.inputs {
                self.cnt[t] -= 1;
                if self.cnt[t] == 0
                    && !p.values[t].live_at_end
                    && e.last_read[t] <= b + 1
                    && !self.donated_sim[t]
                {
                    freed += self.held_of(t, a).0 as u128;
                }
            }
            for &o in &node.outputs {
                let val = &p.values[o];
                if val.consumers.is_empty() && !val.live_at_end {
                    freed += self.held_sim[o] as u128;
                }
            }
            cur = (step_bytes_before + add).saturating_sub(freed);
            let _ = k;
        }
        // Reset scratch.
        for &t in &self.touched {
            self.cnt[t] = 0;
            self.donated_sim[t] = false;
        }
        for &v in &self.window {
            for &o in &p.nodes[v].outputs {
                self.merged_sim[o] = false;
            }
        }
        if !ok {
            // Counters of inputs not yet decremented were reset above.
            return None;
        }
        let _ = n;
        let outside_max = self.pre_max[a].max(self.suf_max[b + 1]);
        let new_peak = outside_max.max(wmax);
        if new_peak < peak {
            return Some(Objective {
                peak: new_peak,
                count: 0,
                area: 0,
            });
        }
        let outside_cnt = self.pre_cnt[a] + (self.obj.count - self.pre_cnt[b + 1]);
        let outside_area = self.pre_area[a] + (self.pre_area[self.eval.live.len()] - self.pre_area[b + 1]);
        Some(Objective {
            peak,
            count: outside_cnt + wcnt,
            area: outside_area + warea,
        })
    }

    /// Buffer size and alignment a value counts for during the window simulation: values born
    /// in the window use the simulated figure, others the exact one.
    fn held_of(&self, t: usize, a: usize) -> (u64, u64) {
        let born_in_window = self.problem.values[t]
            .producer
            .is_some_and(|q| self.eval.pos[q] >= a);
        if born_in_window {
            (self.held_sim[t], self.align_sim[t])
        } else {
            (self.eval.held[t], self.eval.held_align[t])
        }
    }
}

/// Objective of a live-bytes profile.
fn objective_of(live: &[u64]) -> Objective {
    let peak = live.iter().copied().max().unwrap_or(0);
    Objective {
        peak,
        count: live.iter().filter(|&&l| l == peak).count(),
        area: live.iter().map(|&l| l as u128).sum(),
    }
}
