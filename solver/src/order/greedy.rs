//! Memory-aware greedy list scheduling.
//!
//! Idea (list scheduling for memory, in the spirit of Sethi–Ullman register-need ordering and
//! the memory-aware list schedulers of the DNN-ordering literature, e.g. the greedy baselines of
//! OLLA / MODeL): build the order one step at a time; among the ready nodes (every producer of
//! their inputs already scheduled) pick the one whose execution keeps memory lowest. Running
//! node `v` when `L` bytes are live needs `peak(v) = L + new outputs + workspace` during the
//! step and leaves `after(v) = L + new outputs − inputs whose last reader is v − unread
//! outputs`. In-place merging is simulated exactly as [`super::lifetimes()`] does it (an output
//! that takes its dying input's buffer adds no bytes). Several scoring [`Rule`]s are run and the
//! order with the lowest exact LOAD is kept; each rule can look one node ahead: each of the
//! `beam` best candidates is re-scored by the best node that could follow it, which favours
//! nodes that unlock frees. Ties: lower one-step score, then the lower listed index.
//!
//! Complexity: `O(n · k · (1 + beam) · deg · log n)` per run, `k` = ready nodes scored per
//! step (all of them on graphs of ordinary size; see [`GreedyList::max_scan`]), plus one exact
//! LOAD evaluation `O(n + e)` per run; 8 runs by default (4 rules, with and without lookahead),
//! ~15 ms on a 1,584-node graph. [`GreedyList::max_scores`] caps the scorings of all runs
//! together, so huge graphs cost about one run (a 1,000,000-node chain or star: ~1 s).
//! Iterative, no recursion.

use super::lifetimes::inplace_fits;
use super::local_search::ProfileEval;
use super::{LifetimeOptions, OrderProblem, Orderer};
use crate::limits::{Limits, LimitsClock};
use std::collections::BTreeSet;

/// How a candidate's `(peak during it, live bytes after it)` is ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Lowest live bytes after the step, then lowest peak during it.
    After,
    /// Lowest running maximum (the order's peak so far including this step), then lowest
    /// live bytes after it.
    RunningPeak,
    /// Lowest peak during the step, then lowest live bytes after it.
    StepPeak,
    /// The listed order, except that nodes that do not grow memory go first (the one leaving
    /// the fewest live bytes): among growing nodes the smallest listed index runs.
    Frugal,
}

/// The memory-aware greedy list scheduler (see the module doc).
#[derive(Debug, Clone)]
pub struct GreedyList {
    /// Scoring rules tried, in order; the order with the lowest LOAD wins (ties: earlier rule).
    pub rules: Vec<Rule>,
    /// Whether each rule is also run with one node of lookahead (doubling the runs).
    pub lookahead: bool,
    /// Candidates per step re-scored with lookahead (the best by one-step score).
    pub beam: usize,
    /// Ready nodes scored per step, smallest listed index first; 0 = adaptive
    /// (`max(32, 2^25 / n)`: every ready node on graphs of ordinary size).
    pub max_scan: usize,
    /// Candidate scorings, all runs together, after which the current run finishes in a
    /// cheap mode (no lookahead, at most 8 ready nodes scored per step) and no further run
    /// starts; bounds the time on huge graphs deterministically. Running out of budget has
    /// the same effect. The first run always completes.
    pub max_scores: u64,
}

impl Default for GreedyList {
    fn default() -> Self {
        GreedyList {
            rules: vec![Rule::Frugal, Rule::After, Rule::RunningPeak, Rule::StepPeak],
            lookahead: true,
            beam: 4,
            max_scan: 0,
            max_scores: 1 << 25,
        }
    }
}

impl Orderer for GreedyList {
    fn name(&self) -> &'static str {
        "greedy"
    }

    fn order(
        &self,
        problem: &OrderProblem,
        incumbent: &[usize],
        opts: &LifetimeOptions,
        limits: &Limits,
    ) -> Vec<usize> {
        let n = problem.nodes.len();
        let clock = limits.start();
        let scan = if self.max_scan == 0 {
            ((1usize << 25) / n.max(1)).max(32)
        } else {
            self.max_scan
        };
        let mut eval = ProfileEval::new(problem);
        let mut best: Option<(u64, Vec<usize>)> = None;
        let depths: &[bool] = if self.lookahead {
            &[false, true]
        } else {
            &[false]
        };
        let mut state = State::new(problem, *opts);
        let mut scores = 0u64;
        for &look in depths {
            for &rule in &self.rules {
                // Always produce at least one order; later runs only while the limits last.
                if best.is_some() && (clock.exhausted().is_some() || scores >= self.max_scores) {
                    break;
                }
                state.reset();
                let limits = RunLimits {
                    beam: self.beam.max(1),
                    scan: scan.max(1),
                    max_scores: self.max_scores.saturating_sub(scores),
                };
                let (order, used) = state.run(rule, look, &limits, &clock);
                scores = scores.saturating_add(used);
                let Some(order) = order else {
                    continue;
                };
                let load = eval.eval(problem, &order, opts);
                if best.as_ref().is_none_or(|(b, _)| load < *b) {
                    best = Some((load, order));
                }
            }
        }
        best.map(|(_, o)| o).unwrap_or_else(|| incumbent.to_vec())
    }
}

/// Per-run limits.
struct RunLimits {
    beam: usize,
    scan: usize,
    max_scores: u64,
}

/// One-step figures of a candidate: bytes live during its step and after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Step {
    peak: u128,
    after: u128,
}

/// A ranking key: smaller is better.
type Key = (u128, u128);

/// Ranking key of a candidate under a rule.
fn key(rule: Rule, running: u128, live: u128, v: usize, s: Step) -> Key {
    match rule {
        Rule::Frugal if s.after <= live => (0, s.after),
        Rule::Frugal => (1, v as u128),
        Rule::After => (s.after, s.peak),
        Rule::RunningPeak => (s.peak.max(running), s.after),
        Rule::StepPeak => (s.peak, s.after),
    }
}

/// The construction state, reusable across runs.
struct State<'a> {
    p: &'a OrderProblem,
    opts: LifetimeOptions,
    succ: Vec<Vec<usize>>,
    indeg0: Vec<u32>,
    // Mutable state.
    indeg: Vec<u32>,
    /// Readers not yet scheduled, per value.
    rc: Vec<u32>,
    /// Size / alignment of the buffer a value lives in (its in-place root's).
    held: Vec<u64>,
    held_align: Vec<u64>,
    donated: Vec<bool>,
    ready: BTreeSet<usize>,
    live: u128,
    running: u128,
    // Scratch.
    merges: Vec<(usize, usize)>,
    undo_merges: Vec<(usize, usize)>,
    undo_ready: Vec<usize>,
}

impl<'a> State<'a> {
    fn new(p: &'a OrderProblem, opts: LifetimeOptions) -> Self {
        let preds = p.predecessors();
        let succ = p.successors();
        let indeg0: Vec<u32> = preds.iter().map(|x| x.len() as u32).collect();
        let m = p.values.len();
        State {
            p,
            opts,
            succ,
            indeg: indeg0.clone(),
            indeg0,
            rc: vec![0; m],
            held: vec![0; m],
            held_align: vec![1; m],
            donated: vec![false; m],
            ready: BTreeSet::new(),
            live: 0,
            running: 0,
            merges: Vec::new(),
            undo_merges: Vec::new(),
            undo_ready: Vec::new(),
        }
    }

    fn reset(&mut self) {
        let p = self.p;
        self.indeg.copy_from_slice(&self.indeg0);
        self.live = 0;
        for (t, val) in p.values.iter().enumerate() {
            self.rc[t] = 0;
            self.held[t] = val.size;
            self.held_align[t] = val.alignment;
            self.donated[t] = false;
            if val.producer.is_none() && (val.live_at_end || !val.consumers.is_empty()) {
                self.live += val.size as u128;
            }
        }
        for node in &p.nodes {
            for &t in &node.inputs {
                self.rc[t] += 1;
            }
        }
        self.running = self.live;
        self.ready.clear();
        for (v, &d) in self.indeg.iter().enumerate() {
            if d == 0 {
                self.ready.insert(v);
            }
        }
    }

    /// In-place merges node `v` would make now, into `self.merges` as (output, donor).
    fn find_merges(&mut self, v: usize) {
        self.merges.clear();
        if !self.opts.inplace {
            return;
        }
        let p = self.p;
        let node = &p.nodes[v];
        for &(o, i) in &node.inplace {
            if o == i || self.donated[i] || self.rc[i] != 1 || p.values[i].live_at_end {
                continue;
            }
            if p.values[o].producer != Some(v) || !node.inputs.contains(&i) {
                continue;
            }
            if self.merges.iter().any(|&(mo, mi)| mo == o || mi == i) {
                continue;
            }
            if inplace_fits(&p.values[o], &p.values[i], self.held_align[i]) {
                self.merges.push((o, i));
            }
        }
    }

    /// One-step figures of running ready node `v` now.
    fn score(&mut self, v: usize) -> Step {
        self.find_merges(v);
        let p = self.p;
        let node = &p.nodes[v];
        let mut add = 0u128;
        let mut free = 0u128;
        for &o in &node.outputs {
            let val = &p.values[o];
            let merged = self.merges.iter().find(|&&(mo, _)| mo == o);
            let bytes = match merged {
                Some(&(_, i)) => self.held[i] as u128,
                None => {
                    add += val.size as u128;
                    val.size as u128
                }
            };
            if val.consumers.is_empty() && !val.live_at_end {
                free += bytes;
            }
        }
        for &i in &node.inputs {
            if self.rc[i] == 1
                && !p.values[i].live_at_end
                && !self.merges.iter().any(|&(_, mi)| mi == i)
            {
                free += self.held[i] as u128;
            }
        }
        let during = self.live + add;
        Step {
            peak: during + node.workspace as u128,
            after: during.saturating_sub(free),
        }
    }

    /// Runs ready node `v` (its figures `s` from [`State::score`] just before).
    fn apply(&mut self, v: usize, s: Step) {
        self.find_merges(v);
        self.undo_merges.clear();
        for k in 0..self.merges.len() {
            let (o, i) = self.merges[k];
            self.donated[i] = true;
            self.held[o] = self.held[i];
            self.held_align[o] = self.held_align[i];
            self.undo_merges.push((o, i));
        }
        for &i in &self.p.nodes[v].inputs {
            self.rc[i] -= 1;
        }
        self.live = s.after;
        self.running = self.running.max(s.peak);
        self.ready.remove(&v);
        self.undo_ready.clear();
        for &w in &self.succ[v] {
            self.indeg[w] -= 1;
            if self.indeg[w] == 0 {
                self.ready.insert(w);
                self.undo_ready.push(w);
            }
        }
    }

    /// Reverts [`State::apply`] of `v` (the last one applied), restoring `live` and `running`.
    fn undo(&mut self, v: usize, live: u128, running: u128) {
        let p = self.p;
        for k in 0..self.undo_merges.len() {
            let (o, i) = self.undo_merges[k];
            self.donated[i] = false;
            self.held[o] = p.values[o].size;
            self.held_align[o] = p.values[o].alignment;
        }
        for &i in &p.nodes[v].inputs {
            self.rc[i] += 1;
        }
        for &w in &self.succ[v] {
            self.indeg[w] += 1;
        }
        for k in 0..self.undo_ready.len() {
            let w = self.undo_ready[k];
            self.ready.remove(&w);
        }
        self.ready.insert(v);
        self.live = live;
        self.running = running;
    }

    /// The ready nodes scored this step (the `scan` smallest indices).
    fn candidates(&self, scan: usize, out: &mut Vec<usize>) {
        out.clear();
        out.extend(self.ready.iter().take(scan).copied());
    }

    /// Builds one order (`None` if the graph has a cycle) and counts the scorings it made.
    fn run(
        &mut self,
        rule: Rule,
        look: bool,
        limits: &RunLimits,
        clock: &LimitsClock,
    ) -> (Option<Vec<usize>>, u64) {
        let n = self.p.nodes.len();
        let mut order = Vec::with_capacity(n);
        let mut cands = Vec::new();
        let mut follow = Vec::new();
        let beam = limits.beam;
        let (mut look, mut scan) = (look, limits.scan);
        let mut scores = 0u64;
        // (one-step key, node, step figures), best first, at most `beam` long.
        let mut top: Vec<(Key, usize, Step)> = Vec::with_capacity(beam + 1);
        while order.len() < n {
            if scores > limits.max_scores
                || (order.len() % 256 == 255 && clock.exhausted().is_some())
            {
                // Cheap mode for the rest of the run.
                look = false;
                scan = scan.min(8);
            }
            self.candidates(scan, &mut cands);
            if cands.is_empty() {
                return (None, scores);
            }
            scores += cands.len() as u64 * if look { 1 + beam as u64 } else { 1 };
            top.clear();
            let limit = if look { beam } else { 1 };
            for &v in &cands {
                let s = self.score(v);
                let k = key(rule, self.running, self.live, v, s);
                let at = top.partition_point(|&(tk, tv, _)| (tk, tv) <= (k, v));
                if at < limit {
                    top.insert(at, (k, v, s));
                    top.truncate(limit);
                }
            }
            let (mut pick, mut pick_step) = (top[0].1, top[0].2);
            if look && top.len() > 1 {
                let (live, running) = (self.live, self.running);
                let mut best: Option<(Key, Key, usize, Step)> = None;
                for &(k1, v, s) in &top {
                    self.apply(v, s);
                    self.candidates(scan, &mut follow);
                    let mut best2: Option<Key> = None;
                    for &u in &follow {
                        let s2 = self.score(u);
                        let two = Step {
                            peak: s.peak.max(s2.peak),
                            after: s2.after,
                        };
                        let k2 = key(rule, running, live, u, two);
                        if best2.is_none_or(|b| k2 < b) {
                            best2 = Some(k2);
                        }
                    }
                    self.undo(v, live, running);
                    let k2 = best2.unwrap_or(k1);
                    if best.is_none_or(|(bk2, bk1, bv, _)| (k2, k1, v) < (bk2, bk1, bv)) {
                        best = Some((k2, k1, v, s));
                    }
                }
                if let Some((_, _, v, s)) = best {
                    pick = v;
                    pick_step = s;
                }
            }
            // Scores were computed in a different state for lookahead; recompute to be exact.
            let s = if look { self.score(pick) } else { pick_step };
            self.apply(pick, s);
            order.push(pick);
        }
        (Some(order), scores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::local_search::tests::{
        all_orders, chain, random_problem, two_branches, value,
    };
    use crate::order::Node;

    fn best_load(p: &OrderProblem, opts: &LifetimeOptions) -> u64 {
        all_orders(p)
            .iter()
            .map(|o| p.load(o, opts))
            .min()
            .unwrap_or(0)
    }

    fn greedy(p: &OrderProblem, opts: &LifetimeOptions) -> Vec<usize> {
        let listed = p.listed_topological_order().unwrap();
        let order = GreedyList::default().order(p, &listed, opts, &Limits::UNLIMITED);
        p.check_order(&order).unwrap();
        order
    }

    #[test]
    fn greedy_finishes_the_branch_holding_a_big_value_first() {
        let p = two_branches();
        let opts = LifetimeOptions::default();
        assert_eq!(p.load(&greedy(&p, &opts), &opts), 111);
        assert_eq!(best_load(&p, &opts), 111);
    }

    #[test]
    fn greedy_delays_a_node_whose_big_output_lives_to_the_end() {
        // in(10) -> w -> grad(100, graph output); in -> a -> x(50) -> b -> y(50) -> c -> out(1).
        let p = OrderProblem {
            nodes: vec![
                Node {
                    inputs: vec![0],
                    outputs: vec![1],
                    ..Node::default()
                },
                Node {
                    inputs: vec![0],
                    outputs: vec![2],
                    ..Node::default()
                },
                Node {
                    inputs: vec![2],
                    outputs: vec![3],
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
                value(100, Some(0), vec![], true),
                value(50, Some(1), vec![2], false),
                value(50, Some(2), vec![3], false),
                value(1, Some(3), vec![], true),
            ],
            workspace_alignment: 1,
        };
        let opts = LifetimeOptions::default();
        let order = greedy(&p, &opts);
        assert_eq!(order.last(), Some(&0));
        assert_eq!(p.load(&order, &opts), best_load(&p, &opts));
    }

    #[test]
    fn greedy_with_inplace_lets_the_other_reader_run_first_so_the_input_can_be_reused() {
        // in(100) is read by relu (in place) and by x (-> 1 byte). Running x first lets relu
        // take in's bytes.
        let p = OrderProblem {
            nodes: vec![
                Node {
                    inputs: vec![0],
                    outputs: vec![1],
                    workspace: 0,
                    inplace: vec![(1, 0)],
                },
                Node {
                    inputs: vec![0],
                    outputs: vec![2],
                    ..Node::default()
                },
            ],
            values: vec![
                value(100, None, vec![0, 1], false),
                value(100, Some(0), vec![], true),
                value(1, Some(1), vec![], true),
            ],
            workspace_alignment: 1,
        };
        let opts = LifetimeOptions { inplace: true };
        let order = greedy(&p, &opts);
        assert_eq!(order, vec![1, 0]);
        assert_eq!(p.load(&order, &opts), 101);
    }

    #[test]
    fn every_rule_with_and_without_lookahead_yields_a_topological_order() {
        let rules = [Rule::Frugal, Rule::After, Rule::RunningPeak, Rule::StepPeak];
        for seed in 0..50 {
            let p = random_problem(seed, 8);
            let listed = p.listed_topological_order().unwrap();
            for rule in rules {
                for lookahead in [false, true] {
                    let g = GreedyList {
                        rules: vec![rule],
                        lookahead,
                        beam: 3,
                        max_scan: 2,
                        max_scores: 20,
                    };
                    let order =
                        g.order(&p, &listed, &LifetimeOptions::default(), &Limits::UNLIMITED);
                    p.check_order(&order).unwrap();
                }
            }
        }
    }

    #[test]
    fn greedy_without_rules_returns_the_incumbent() {
        let p = two_branches();
        let listed = p.listed_topological_order().unwrap();
        let g = GreedyList {
            rules: vec![],
            ..GreedyList::default()
        };
        assert_eq!(
            g.order(&p, &listed, &LifetimeOptions::default(), &Limits::UNLIMITED),
            listed
        );
    }

    #[test]
    fn a_run_past_its_score_cap_or_budget_still_yields_a_topological_order() {
        let p = random_problem(11, 5000);
        let listed = p.listed_topological_order().unwrap();
        let opts = LifetimeOptions { inplace: true };
        let capped = GreedyList {
            max_scores: 100,
            ..GreedyList::default()
        };
        let order = capped.order(&p, &listed, &opts, &Limits::UNLIMITED);
        p.check_order(&order).unwrap();
        let spent = Limits {
            time: None,
            nodes: Some(0),
            ..Limits::UNLIMITED
        };
        let order = GreedyList::default().order(&p, &listed, &opts, &spent);
        p.check_order(&order).unwrap();
    }

    #[test]
    fn greedy_orders_a_million_node_chain_within_seconds() {
        let n = 1_000_000;
        let p = chain(n);
        let listed: Vec<usize> = (0..n).collect();
        let started = std::time::Instant::now();
        let order = GreedyList::default().order(
            &p,
            &listed,
            &LifetimeOptions::default(),
            &Limits::UNLIMITED,
        );
        assert_eq!(order, listed);
        assert!(
            started.elapsed().as_secs_f64() < 10.0,
            "{:?}",
            started.elapsed()
        );
    }
}
