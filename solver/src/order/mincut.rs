//! A min-cut LOAD lower bound valid for every topological order (no spill, no recompute).
//!
//! **Idea.** In any order, the ops run up to and including step `v` form a downward-closed set
//! `S` that holds `v` and all its ancestors and none of its descendants. When `v` runs, every
//! value produced in `S` (graph inputs: before the first step) and still needed outside `S` (a
//! reader not in `S`, or a graph output) is live, and so is everything `v` reads or writes and
//! its workspace. So `max_v min_S cost(S)` bounds the LOAD of every order. Minimising over
//! downward-closed sets is the *closure problem* (Picard 1976), a minimum s-t cut: one node per
//! op, one per value; producer → value with capacity = the value's size; value → each reader and
//! reader → each producer of its inputs with infinite capacity (closure); graph outputs →
//! sink; source → `v` and its ancestors, `v`'s descendants → sink. The source side is `S`. This
//! is the per-step relaxation behind the order bounds of Kayaaslan et al. ("Scheduling
//! series-parallel task graphs to minimize peak memory", TCS 2018) and the memory-aware
//! scheduling models of OLLA (Steiner et al. 2022) and MODeL (Steiner et al. 2023); it
//! dominates [`super::bound`]'s per-node bound, which only counts values whose producer is an
//! ancestor and whose reader is a descendant.
//!
//! **Network of one step.** Ancestors of `v` are forced into `S`, descendants out of it, so only
//! the *free* ops (neither) get nodes: a value produced in `S` and read by a descendant (or a
//! graph output) is a constant; one read by `v` or produced by `v` is live whatever `S` is (a
//! constant, never an edge, so it is not counted twice); one produced by a free op with a
//! forced reader is an edge producer → sink; one with free readers only is producer → reader
//! (one reader) or producer → value node → readers (several). Values of forced-`T` producers
//! never count.
//!
//! **In-place merging** follows [`super::bound`] exactly: values named as the output of a
//! malformed pair are left out, and at `v` the bytes of `v`'s outputs that may take a donor's
//! bytes are subtracted (two values of one in-place group are only live together at the step
//! that merges them, which is the producer of the output).
//!
//! **Which steps.** Any subset of steps gives a valid bound (a max over fewer steps is still a
//! max of valid per-step bounds), and a partial flow is a valid bound for its step (a flow never
//! exceeds a cut). Steps are taken in decreasing order of their live bytes in a reference order
//! (a hint, else the listed topological order), an upper bound on their min cut: once that upper
//! bound is at most the best bound found, no later step can raise it, and the result is exactly
//! `max_v min_S` over all steps. Steps whose min cut is already pinned (upper bound = per-node
//! bound) need no flow.
//!
//! **Complexity.** Per evaluated step: `O(n + e + Σ readers)` to build the network over the
//! free ops and Dinic's max flow, `O(V² E)` worst case, far less on DNN graphs where few ops
//! are free. Effort is a deterministic work budget ([`DEFAULT_WORK`] units: one unit per edge
//! scanned or node visited); when it runs out the bound found so far is returned. A clock
//! ([`min_cut_bound_within`]) is only a cap on top: it is read between steps and every
//! [`CLOCK_EVERY`] work units of a flow, and a stop returns the bound found so far. Iterative
//! throughout (no recursion); integer `u64` capacities; deterministic unless the clock stops it.

use super::bound::Facts;
use super::{LifetimeOptions, OrderProblem};
use crate::limits::{Limits, LimitsClock};

/// Default work budget of [`min_cut_bound`] (edge scans and node visits): at most a fraction
/// of a second; the zoo graphs settle every step with far less (see `memplan-benchmarks --only
/// bound`).
pub const DEFAULT_WORK: u64 = 60_000_000;

/// Work units between two readings of the clock inside one step's max flow.
pub const CLOCK_EVERY: u64 = 1 << 16;

/// What [`min_cut_bound`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MinCutBound {
    /// The bound (bytes): at least `floor`, at most the LOAD of every order.
    pub bytes: u64,
    /// Steps whose max flow was computed (in full or until the budget ran out).
    pub flows: usize,
    /// Steps settled without a flow (pinned by the per-node bound).
    pub pinned: usize,
    /// Work units spent.
    pub work: u64,
    /// Whether every step was settled, so `bytes` is `max_v min_S cost` exactly (or `floor`).
    pub complete: bool,
}

/// The min-cut bound of `problem` (module doc), never below `floor` (a bound already known,
/// e.g. the per-node bound). `hint`, a topological order (e.g. the best order found), only
/// guides which steps are evaluated first; an invalid hint is ignored. `work` caps the effort.
/// Returns `floor` for a problem with a cycle.
pub fn min_cut_bound(
    problem: &OrderProblem,
    opts: &LifetimeOptions,
    hint: Option<&[usize]>,
    floor: u64,
    work: u64,
) -> MinCutBound {
    min_cut_bound_within(problem, opts, hint, floor, work, &Limits::UNLIMITED)
}

/// [`min_cut_bound`] that also stops when `limits`' time is spent or its stop flag is raised
/// (its node limit is ignored: `work` is the effort), with the bound found so far (`complete`
/// false). Without a time limit or a flag it is [`min_cut_bound`].
pub fn min_cut_bound_within(
    problem: &OrderProblem,
    opts: &LifetimeOptions,
    hint: Option<&[usize]>,
    floor: u64,
    work: u64,
    limits: &Limits,
) -> MinCutBound {
    let facts = Facts::new(problem, opts);
    let clock = limits.start_time_and_flag();
    min_cut_with_facts(problem, &facts, hint, None, floor, (work, &clock))
}

/// [`min_cut_bound`] with the in-place facts already computed; `listed` is the listed
/// topological order when the caller has it; `effort` is the work cap and a clock that may
/// stop the search earlier (see [`Limits::start_time_and_flag`]).
pub(crate) fn min_cut_with_facts(
    problem: &OrderProblem,
    facts: &Facts,
    hint: Option<&[usize]>,
    listed: Option<&[usize]>,
    floor: u64,
    effort: (u64, &LimitsClock),
) -> MinCutBound {
    let (work, clock) = effort;
    let n = problem.nodes.len();
    let mut out = MinCutBound {
        bytes: floor,
        ..MinCutBound::default()
    };
    if n == 0 {
        out.complete = true;
        return out;
    }
    let computed;
    let reference: &[usize] = match (hint, listed) {
        (Some(h), _) if problem.check_order(h).is_ok() => h,
        (_, Some(l)) => l,
        _ => match problem.listed_topological_order() {
            Ok(o) => {
                computed = o;
                &computed
            }
            Err(_) => return out,
        },
    };
    let counted: Vec<bool> = (0..problem.values.len())
        .map(|t| facts.counts(problem, t))
        .collect();
    let upper = reference_loads(problem, facts, &counted, reference);
    // Steps that could raise the bound, by decreasing upper bound, ties by node index.
    let mut steps: Vec<usize> = (0..n).filter(|&v| upper[v] > floor).collect();
    if steps.is_empty() {
        out.complete = true;
        return out;
    }
    steps.sort_by(|&a, &b| upper[b].cmp(&upper[a]).then(a.cmp(&b)));
    let mut step = Stepper::new(problem, facts, counted);
    let mut spent = 0u64;
    out.complete = true;
    for &v in &steps {
        if upper[v] <= out.bytes {
            break;
        }
        if spent >= work || clock.exhausted().is_some() {
            out.complete = false;
            break;
        }
        let left = work - spent;
        let r = step.bound_at(v, upper[v], left, clock);
        spent = spent.saturating_add(r.work);
        if r.flowed {
            out.flows += 1;
        } else {
            out.pinned += 1;
        }
        out.bytes = out.bytes.max(r.bytes);
        if !r.finished {
            out.complete = false;
            break;
        }
    }
    out.work = spent;
    out
}

/// For each node, the bound's cost of `S` = the ops run up to it in `order` (a topological
/// order): the counted values live at its step, plus workspace, minus savings. An upper
/// bound on the node's min cut. `O(n + Σ readers)`.
pub(crate) fn reference_loads(
    problem: &OrderProblem,
    facts: &Facts,
    counted: &[bool],
    order: &[usize],
) -> Vec<u64> {
    let n = order.len();
    let mut pos = vec![0usize; n];
    for (s, &u) in order.iter().enumerate() {
        pos[u] = s;
    }
    // Difference array over steps.
    let mut diff = vec![0i128; n + 1];
    for (t, val) in problem.values.iter().enumerate() {
        if !counted[t] {
            continue;
        }
        let birth = match val.producer {
            Some(p) if p < n => pos[p],
            Some(_) => continue,
            None => 0,
        };
        let last = if val.live_at_end {
            n - 1
        } else {
            val.consumers
                .iter()
                .filter(|&&c| c < n)
                .map(|&c| pos[c])
                .max()
                .unwrap_or(birth)
                .max(birth)
        };
        diff[birth] += i128::from(val.size);
        diff[last + 1] -= i128::from(val.size);
    }
    let mut at_step = vec![0u64; n];
    let mut acc = 0i128;
    for (s, d) in diff.iter().take(n).enumerate() {
        acc += d;
        at_step[s] = u64::try_from(acc.max(0)).unwrap_or(u64::MAX);
    }
    (0..n)
        .map(|v| adjust(problem, facts, v, at_step[pos[v]]))
        .collect()
}

/// Bytes of `v`'s workspace plus `live`, minus `v`'s in-place savings.
fn adjust(problem: &OrderProblem, facts: &Facts, v: usize, live: u64) -> u64 {
    live.saturating_add(problem.nodes[v].workspace)
        .saturating_sub(facts.saving[v])
}

/// Outcome of one step.
struct StepBound {
    /// Valid bound at the step (bytes).
    bytes: u64,
    /// Work spent.
    work: u64,
    /// Whether a max flow ran.
    flowed: bool,
    /// Whether the step's min cut was reached (else `bytes` holds a partial flow).
    finished: bool,
}

/// Where an op stands relative to the evaluated step.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// `v` itself.
    Step,
    /// An ancestor of `v`: in `S` in every order.
    Before,
    /// A descendant of `v`: outside `S` in every order.
    After,
    /// Neither: a node of the network.
    Free,
}

/// Reusable per-step state: the graph's adjacency and scratch arrays.
struct Stepper<'a> {
    problem: &'a OrderProblem,
    facts: &'a Facts,
    preds: Vec<Vec<usize>>,
    succ: Vec<Vec<usize>>,
    /// Values that count (not excluded, ever reserved).
    counted: Vec<bool>,
    /// Stamps: `anc[u] == epoch` marks an ancestor, `desc[u] == epoch` a descendant,
    /// `reads[t] == epoch` a value read by the step.
    anc: Vec<u32>,
    desc: Vec<u32>,
    reads: Vec<u32>,
    epoch: u32,
    /// Network node of each free op (valid when `local_at[u] == epoch`).
    local: Vec<u32>,
    local_at: Vec<u32>,
    stack: Vec<usize>,
    net: Network,
}

impl<'a> Stepper<'a> {
    fn new(problem: &'a OrderProblem, facts: &'a Facts, counted: Vec<bool>) -> Self {
        let (n, m) = (problem.nodes.len(), problem.values.len());
        Stepper {
            problem,
            facts,
            preds: problem.predecessors(),
            succ: problem.successors(),
            counted,
            anc: vec![0; n],
            desc: vec![0; n],
            reads: vec![0; m],
            epoch: 0,
            local: vec![0; n],
            local_at: vec![0; n],
            stack: Vec::new(),
            net: Network::default(),
        }
    }

    fn adjust(&self, v: usize, live: u64) -> u64 {
        adjust(self.problem, self.facts, v, live)
    }

    /// Marks the ancestors (`up`) or descendants of `v` with the current epoch. Returns the
    /// work done.
    fn mark(&mut self, v: usize, up: bool) -> u64 {
        let epoch = self.epoch;
        let (adj, stamp) = if up {
            (&self.preds, &mut self.anc)
        } else {
            (&self.succ, &mut self.desc)
        };
        let mut work = 0u64;
        self.stack.clear();
        self.stack.push(v);
        while let Some(u) = self.stack.pop() {
            for &w in &adj[u] {
                work += 1;
                if stamp[w] != epoch {
                    stamp[w] = epoch;
                    self.stack.push(w);
                }
            }
        }
        work
    }

    fn side(&self, v: usize, u: usize) -> Side {
        if u == v {
            Side::Step
        } else if self.anc[u] == self.epoch {
            Side::Before
        } else if self.desc[u] == self.epoch {
            Side::After
        } else {
            Side::Free
        }
    }

    /// The network node of free op `u`, created on first use.
    fn node_of(&mut self, u: usize) -> u32 {
        if self.local_at[u] != self.epoch {
            self.local_at[u] = self.epoch;
            self.local[u] = self.net.add_node();
        }
        self.local[u]
    }

    /// The bound at step `v` (module doc); `upper` is an upper bound on it, `budget` the work
    /// allowed, `clock` a cap on top.
    fn bound_at(&mut self, v: usize, upper: u64, budget: u64, clock: &LimitsClock) -> StepBound {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // Stamps wrapped: clear them so no stale mark matches.
            self.anc.fill(0);
            self.desc.fill(0);
            self.reads.fill(0);
            self.local_at.fill(0);
            self.epoch = 1;
        }
        let problem = self.problem;
        let n = problem.nodes.len();
        let mut work = self.mark(v, true) + self.mark(v, false);
        for &t in &problem.nodes[v].inputs {
            if t < self.reads.len() {
                self.reads[t] = self.epoch;
            }
        }
        self.net.clear();
        let mut constant = 0u64;
        let mut free_readers: Vec<u32> = Vec::new();
        for (t, val) in problem.values.iter().enumerate() {
            if !self.counted[t] {
                continue;
            }
            work += 1 + val.consumers.len() as u64;
            let from = match val.producer {
                None => Side::Before,
                Some(p) if p < n => self.side(v, p),
                Some(_) => continue,
            };
            if from == Side::Step || self.reads[t] == self.epoch {
                constant = constant.saturating_add(val.size);
                continue;
            }
            if from == Side::After {
                continue;
            }
            let mut forced = val.live_at_end;
            free_readers.clear();
            for &c in val.consumers.iter().filter(|&&c| c < n) {
                match self.side(v, c) {
                    Side::After => forced = true,
                    Side::Free => free_readers.push(c as u32),
                    Side::Before | Side::Step => {}
                }
            }
            if forced && from == Side::Before {
                constant = constant.saturating_add(val.size);
                continue;
            }
            if !forced && free_readers.is_empty() {
                continue;
            }
            let tail = match (from, val.producer) {
                (Side::Free, Some(p)) => self.node_of(p),
                _ => Network::SOURCE,
            };
            if forced {
                self.net.add_edge(tail, Network::SINK, val.size);
            } else if free_readers.len() == 1 {
                let head = self.node_of(free_readers[0] as usize);
                self.net.add_edge(tail, head, val.size);
            } else {
                let mid = self.net.add_node();
                self.net.add_edge(tail, mid, val.size);
                for &c in &free_readers {
                    let head = self.node_of(c as usize);
                    self.net.add_edge(mid, head, INF);
                }
            }
        }
        let lower = self.adjust(v, constant);
        if lower >= upper || self.net.to.is_empty() {
            return StepBound {
                bytes: lower,
                work,
                flowed: false,
                finished: true,
            };
        }
        // Closure: a free op in S needs its free predecessors in S (ancestors of `v` are in S
        // anyway; no predecessor of a free op is a descendant of `v`). Every free op gets a
        // node so the closure stays transitive through ops that carry no cost.
        for u in 0..n {
            if self.side(v, u) != Side::Free {
                continue;
            }
            for i in 0..self.preds[u].len() {
                let p = self.preds[u][i];
                work += 1;
                if self.side(v, p) == Side::Free {
                    let (a, b) = (self.node_of(u), self.node_of(p));
                    self.net.add_edge(a, b, INF);
                }
            }
        }
        let (flow, flow_work, finished) = self.net.max_flow(
            Network::SOURCE,
            Network::SINK,
            budget.saturating_sub(work),
            clock,
        );
        work += flow_work;
        StepBound {
            bytes: self.adjust(v, constant.saturating_add(flow)),
            work,
            flowed: true,
            finished,
        }
    }
}

/// "Infinite" capacity: above any sum of value sizes that can be pushed (flows are bounded by
/// finite edges, which every source–sink path holds).
const INF: u64 = u64::MAX / 4;

/// A flow network (arrays of edges; edge `e`'s reverse is `e ^ 1`) with Dinic's algorithm.
#[derive(Default)]
struct Network {
    /// First edge out of each node (`NONE` if none).
    first: Vec<u32>,
    /// Per edge: head node, next edge out of the same tail, residual capacity.
    to: Vec<u32>,
    next: Vec<u32>,
    cap: Vec<u64>,
    level: Vec<u32>,
    iter: Vec<u32>,
    queue: Vec<u32>,
    path: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl Network {
    const SOURCE: u32 = 0;
    const SINK: u32 = 1;

    /// Empties the network, keeping the source and the sink.
    fn clear(&mut self) {
        self.first.clear();
        self.first.extend([NONE, NONE]);
        self.to.clear();
        self.next.clear();
        self.cap.clear();
    }

    fn add_node(&mut self) -> u32 {
        self.first.push(NONE);
        (self.first.len() - 1) as u32
    }

    fn add_edge(&mut self, a: u32, b: u32, cap: u64) {
        if a == b || cap == 0 {
            return;
        }
        for (tail, head, c) in [(a, b, cap), (b, a, 0)] {
            self.to.push(head);
            self.next.push(self.first[tail as usize]);
            self.cap.push(c);
            self.first[tail as usize] = (self.to.len() - 1) as u32;
        }
    }

    /// Dinic's max flow from `s` to `t`, stopping after about `budget` work units or when
    /// `clock` says so (read every [`CLOCK_EVERY`] units). Returns the flow pushed (a lower
    /// bound on the min cut in any case), the work spent and whether the flow is maximum.
    fn max_flow(&mut self, s: u32, t: u32, budget: u64, clock: &LimitsClock) -> (u64, u64, bool) {
        let nodes = self.first.len();
        let mut flow = 0u64;
        let mut work = 0u64;
        // The work at which the clock is read next.
        let mut read_at = CLOCK_EVERY;
        let mut budget = budget;
        let mut stopped = |work: u64, budget: &mut u64| {
            if work >= read_at {
                read_at = work.saturating_add(CLOCK_EVERY);
                if clock.exhausted().is_some() {
                    *budget = 0;
                }
            }
            work >= *budget
        };
        loop {
            // BFS levels on the residual graph.
            self.level.clear();
            self.level.resize(nodes, NONE);
            self.queue.clear();
            self.level[s as usize] = 0;
            self.queue.push(s);
            let mut head = 0;
            while head < self.queue.len() {
                let u = self.queue[head];
                head += 1;
                let mut e = self.first[u as usize];
                while e != NONE {
                    work += 1;
                    let w = self.to[e as usize];
                    if self.cap[e as usize] > 0 && self.level[w as usize] == NONE {
                        self.level[w as usize] = self.level[u as usize] + 1;
                        self.queue.push(w);
                    }
                    e = self.next[e as usize];
                }
            }
            if self.level[t as usize] == NONE {
                return (flow, work, true);
            }
            if stopped(work, &mut budget) {
                return (flow, work, false);
            }
            // Blocking flow by iterative DFS with current-edge pointers.
            self.iter.clear();
            self.iter.extend_from_slice(&self.first);
            self.path.clear();
            let mut u = s;
            loop {
                if stopped(work, &mut budget) {
                    return (flow, work, false);
                }
                if u == t {
                    let mut push = u64::MAX;
                    for &e in &self.path {
                        push = push.min(self.cap[e as usize]);
                    }
                    let mut cut_at = self.path.len();
                    for (i, &e) in self.path.iter().enumerate() {
                        self.cap[e as usize] -= push;
                        self.cap[(e ^ 1) as usize] =
                            self.cap[(e ^ 1) as usize].saturating_add(push);
                        if self.cap[e as usize] == 0 && cut_at == self.path.len() {
                            cut_at = i;
                        }
                    }
                    flow = flow.saturating_add(push);
                    // Resume from the tail of the first saturated edge.
                    self.path.truncate(cut_at);
                    u = match self.path.last() {
                        Some(&e) => self.to[e as usize],
                        None => s,
                    };
                    continue;
                }
                let mut advanced = false;
                let mut e = self.iter[u as usize];
                while e != NONE {
                    work += 1;
                    let w = self.to[e as usize];
                    if self.cap[e as usize] > 0
                        && self.level[w as usize] == self.level[u as usize].wrapping_add(1)
                    {
                        advanced = true;
                        break;
                    }
                    e = self.next[e as usize];
                }
                self.iter[u as usize] = e;
                if advanced {
                    self.path.push(e);
                    u = self.to[e as usize];
                    continue;
                }
                // Dead end: retreat.
                self.level[u as usize] = NONE;
                match self.path.pop() {
                    None => break,
                    Some(back) => {
                        u = self.to[(back ^ 1) as usize];
                        let it = self.iter[u as usize];
                        self.iter[u as usize] = self.next[it as usize];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::bound::{order_lower_bound, per_node_bound};
    use crate::order::local_search::tests::{all_orders, chain, random_problem, value};
    use crate::order::Node;

    fn best_load(p: &OrderProblem, opts: &LifetimeOptions) -> u64 {
        all_orders(p)
            .iter()
            .map(|o| p.load(o, opts))
            .min()
            .unwrap_or(0)
    }

    fn unlimited(p: &OrderProblem, opts: &LifetimeOptions) -> MinCutBound {
        min_cut_bound(p, opts, None, 0, u64::MAX)
    }

    /// `max_v min_order` (live bytes at `v`'s step), by brute force over every order.
    fn brute_force(p: &OrderProblem, opts: &LifetimeOptions) -> u64 {
        let facts = Facts::new(p, opts);
        let counted: Vec<bool> = (0..p.values.len()).map(|t| facts.counts(p, t)).collect();
        let per_order: Vec<Vec<u64>> = all_orders(p)
            .iter()
            .map(|o| reference_loads(p, &facts, &counted, o))
            .collect();
        (0..p.nodes.len())
            .map(|v| per_order.iter().map(|l| l[v]).min().unwrap_or(0))
            .max()
            .unwrap_or(0)
    }

    /// a → X(100), W(10); v reads W → V(10); f reads X → F(100); z reads V, F → out(1).
    /// Whether f runs before or after v, 100 bytes (F or X) are live at v's step besides W
    /// and V; the per-node bound sees neither.
    fn waiting_value() -> OrderProblem {
        OrderProblem {
            nodes: vec![
                Node {
                    inputs: vec![],
                    outputs: vec![0, 1],
                    ..Node::default()
                },
                Node {
                    inputs: vec![1],
                    outputs: vec![2],
                    ..Node::default()
                },
                Node {
                    inputs: vec![0],
                    outputs: vec![3],
                    ..Node::default()
                },
                Node {
                    inputs: vec![2, 3],
                    outputs: vec![4],
                    ..Node::default()
                },
            ],
            values: vec![
                value(100, Some(0), vec![2], false),
                value(10, Some(0), vec![1], false),
                value(10, Some(1), vec![3], false),
                value(100, Some(2), vec![3], false),
                value(1, Some(3), vec![], true),
            ],
            workspace_alignment: 1,
        }
    }

    #[test]
    fn a_value_waiting_for_an_unordered_op_lifts_the_bound_to_the_best_load() {
        let p = waiting_value();
        let opts = LifetimeOptions::default();
        assert_eq!(per_node_bound(&p, &opts), 200);
        assert_eq!(unlimited(&p, &opts).bytes, 210);
        assert_eq!(best_load(&p, &opts), 210);
        assert_eq!(order_lower_bound(&p, &opts), 210);
    }

    #[test]
    fn the_min_cut_of_every_step_matches_brute_force_over_all_orders() {
        for seed in 0..300 {
            let p = random_problem(seed, 7);
            for inplace in [false, true] {
                let opts = LifetimeOptions { inplace };
                let r = unlimited(&p, &opts);
                assert!(r.complete, "seed {seed}");
                assert_eq!(
                    r.bytes,
                    brute_force(&p, &opts),
                    "seed {seed} inplace {inplace}"
                );
            }
        }
    }

    #[test]
    fn the_bound_lies_between_the_per_node_bound_and_the_best_load_of_random_dags() {
        for seed in 0..400 {
            let p = random_problem(1000 + seed, 7);
            for inplace in [false, true] {
                let opts = LifetimeOptions { inplace };
                let old = per_node_bound(&p, &opts);
                let new = order_lower_bound(&p, &opts);
                let best = best_load(&p, &opts);
                assert!(old <= new, "seed {seed} inplace {inplace}: {old} > {new}");
                assert!(new <= best, "seed {seed} inplace {inplace}: {new} > {best}");
            }
        }
    }

    #[test]
    fn any_work_budget_and_any_hint_give_a_bound_no_higher_than_the_full_one() {
        for seed in 0..100 {
            let p = random_problem(5000 + seed, 7);
            let opts = LifetimeOptions {
                inplace: seed % 2 == 0,
            };
            let full = unlimited(&p, &opts).bytes;
            let orders = all_orders(&p);
            for work in [0, 1, 5, 20, 100, u64::MAX] {
                for hint in [
                    None,
                    orders.first().map(Vec::as_slice),
                    orders.last().map(Vec::as_slice),
                ] {
                    let r = min_cut_bound(&p, &opts, hint, 0, work);
                    assert!(r.bytes <= full, "seed {seed} work {work}");
                    if work == u64::MAX {
                        assert_eq!(
                            r.bytes, full,
                            "seed {seed}: the hint changes only the effort"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_spent_time_or_a_raised_flag_returns_the_floor_and_an_open_limit_the_full_bound() {
        let raised = crate::limits::CancelToken::new();
        raised.cancel();
        let spent = [
            Limits::with_time(std::time::Duration::ZERO),
            Limits {
                cancel: Some(raised),
                ..Limits::UNLIMITED
            },
        ];
        let open = [
            Limits::with_time(std::time::Duration::from_secs(3600)),
            Limits {
                cancel: Some(crate::limits::CancelToken::new()),
                ..Limits::UNLIMITED
            },
        ];
        let mut stopped = 0;
        for seed in 0..50 {
            let p = random_problem(7000 + seed, 7);
            let opts = LifetimeOptions::default();
            let full = unlimited(&p, &opts);
            let floor = per_node_bound(&p, &opts);
            for limits in &spent {
                let r = min_cut_bound_within(&p, &opts, None, floor, u64::MAX, limits);
                assert_eq!(r.bytes, floor, "seed {seed}");
                assert_eq!(r.work, 0, "seed {seed}: no step is started");
                if full.bytes > floor {
                    assert!(!r.complete, "seed {seed}");
                    stopped += 1;
                }
            }
            for limits in &open {
                let r = min_cut_bound_within(&p, &opts, None, 0, u64::MAX, limits);
                assert_eq!(r, full, "seed {seed}");
            }
        }
        assert!(
            stopped > 0,
            "some problem has a min cut above its per-node bound"
        );
    }

    #[test]
    fn a_long_chain_is_bounded_by_its_only_order_without_any_flow() {
        let p = chain(20_000);
        let order: Vec<usize> = (0..20_000).collect();
        for inplace in [false, true] {
            let opts = LifetimeOptions { inplace };
            let r = min_cut_bound(&p, &opts, None, 0, DEFAULT_WORK);
            assert_eq!(r.bytes, p.load(&order, &opts));
            assert_eq!(r.flows, 0);
        }
    }

    #[test]
    fn the_empty_problem_and_a_cycle_keep_the_floor() {
        let opts = LifetimeOptions::default();
        assert_eq!(
            min_cut_bound(&OrderProblem::default(), &opts, None, 7, 10).bytes,
            7
        );
        let mut p = waiting_value();
        p.nodes[0].inputs = vec![4];
        p.values[4].consumers = vec![0];
        assert_eq!(min_cut_bound(&p, &opts, None, 3, u64::MAX).bytes, 3);
    }
}
