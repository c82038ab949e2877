//! The residency schedule of a budgeted plan on a fixed op order: for each arena tensor, the
//! steps at which it must be resident (its uses) and, for each gap between two consecutive
//! uses, whether it stays resident (keep, the default), goes to the host (`spill_out` after
//! the first use, `spill_in` at a prefetch step before the next) or is dropped and
//! recomputed (its producer re-executed right before the next use).
//!
//! Within a step, everything that happens (spill_ins, recomputes, the op's allocs, exec,
//! frees, spill_outs) is treated as simultaneous, so a tensor resident at any point of step
//! `s` occupies memory for the whole step: residency intervals are half-open step ranges and
//! can be placed as buffers directly. Live bytes are computed in O(tensors + steps) with a
//! difference array.

use crate::cost::DeviceProfile;
use crate::graph::{Graph, TensorId, TensorKind};
use memplan_solver::CancelToken;
use std::collections::BTreeMap;

/// What happens to a tensor in a gap between two consecutive uses (absent: it stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// `spill_out` after the first use, `spill_in` before step `back` (≤ the next use).
    Spill {
        /// The step whose pre-phase brings it back.
        back: usize,
    },
    /// Freed after the first use; its producer runs again right before the next use.
    Recompute,
}

/// Knobs of the strategies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Transfers are given this much more compute time than they need to be hidden (the
    /// seed's 1.2× safety margin): a spill is "hidden" only when the compute between its
    /// uses covers `margin ×` its transfer times.
    pub margin: f64,
    /// Tensors smaller than this are not spilled or recomputed unless nothing else helps.
    pub min_spill_bytes: u64,
    /// Gaps with fewer idle steps than this are "needed again soon" and left alone unless
    /// nothing else helps.
    pub min_gap_steps: usize,
    /// Whether convs whose `attrs.algo` the model chose may be downgraded to an algorithm
    /// with less workspace (more modelled time) instead of evicting tensors (MONeT-style
    /// joint selection, [`crate::conv_algo`]).
    pub conv_downgrade: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            margin: 1.2,
            min_spill_bytes: 64 * 1024,
            min_gap_steps: 2,
            conv_downgrade: false,
        }
    }
}

/// The fixed facts of one planning problem: the graph, its order, op times and base uses.
#[derive(Debug, Clone)]
pub struct Ctx<'g> {
    /// The graph.
    pub graph: &'g Graph,
    /// Op indices in execution order.
    pub order: Vec<usize>,
    /// Per op index, the algorithms a conv may be downgraded to, with less workspace than
    /// its current one (by workspace descending: the mildest first); empty for other ops
    /// and without [`Params::conv_downgrade`].
    pub downgrades: Vec<Vec<crate::conv_algo::AlgoOption>>,
    /// Step of each op index.
    pub step_of: Vec<usize>,
    /// Modelled time of the op at each step (µs).
    pub step_us: Vec<f64>,
    /// Prefix sums of `step_us` (length steps + 1).
    pub prefix_us: Vec<f64>,
    /// The device.
    pub profile: DeviceProfile,
    /// Strategy knobs.
    pub params: Params,
    /// Steps at which each tensor must be resident (sorted, distinct); empty for weights and
    /// unread graph inputs, which never enter the arena.
    pub uses: Vec<Vec<usize>>,
    /// Stop flag ([`super::BudgetOptions::cancel`]): once raised, every strategy returns its
    /// schedule so far at its next check and the integer program is interrupted.
    pub cancel: Option<CancelToken>,
    /// Deterministic effort ([`super::BudgetOptions::effort`]): with `Some(k)` the integer
    /// program gets `k ×` [`super::program::DEFAULT_NODES`] branch-and-bound nodes per model and
    /// no time limit; `None`: its time limit per model.
    pub effort: Option<u64>,
}

/// Where a residency interval starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The producer's exec (alloc in the main phase).
    Birth,
    /// A graph input allocated before its first read.
    Input,
    /// Brought back from the host.
    SpillIn,
    /// Re-created by re-executing its producer.
    Recompute,
}

/// Where a residency interval ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Freed.
    Free,
    /// Copied to the host.
    SpillOut,
    /// A graph output, resident to the end.
    Stay,
}

/// One residency interval `[start, end)` (steps) of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// The tensor.
    pub tensor: TensorId,
    /// First step resident.
    pub start: usize,
    /// One past the last step resident.
    pub end: usize,
    /// How it starts.
    pub how_start: Start,
    /// How it ends.
    pub how_end: End,
}

impl<'g> Ctx<'g> {
    /// Builds the context for `order` (a topological order of op indices).
    pub fn new(graph: &'g Graph, order: &[usize], profile: DeviceProfile, params: Params) -> Self {
        let n = order.len();
        let mut step_of = vec![0; graph.ops.len()];
        for (s, &k) in order.iter().enumerate() {
            step_of[k] = s;
        }
        let step_us: Vec<f64> = order
            .iter()
            .map(|&k| profile.op_us(graph, &graph.ops[k]))
            .collect();
        let mut prefix_us = vec![0.0; n + 1];
        for s in 0..n {
            prefix_us[s + 1] = prefix_us[s] + step_us[s];
        }
        let mut uses = vec![Vec::new(); graph.tensors.len()];
        for (s, &k) in order.iter().enumerate() {
            let op = &graph.ops[k];
            for &t in op.inputs.iter().chain(&op.outputs) {
                if graph.tensor(t).kind != TensorKind::Weight {
                    uses[t.index()].push(s);
                }
            }
        }
        // Graph outputs must be resident at the end: a pseudo-use at the last step lets them
        // spill between their last read and the end.
        for (i, t) in graph.tensors.iter().enumerate() {
            if t.kind == TensorKind::Output && n > 0 && !uses[i].is_empty() {
                uses[i].push(n - 1);
            }
        }
        for u in &mut uses {
            u.sort_unstable();
            u.dedup();
        }
        let downgrades = graph
            .ops
            .iter()
            .map(|op| {
                if !params.conv_downgrade || crate::conv_algo::algo_of(op).is_none() {
                    return Vec::new();
                }
                let mut v: Vec<_> = crate::conv_algo::options(&profile, graph, op)
                    .into_iter()
                    .filter(|o| o.workspace < op.workspace)
                    .collect();
                v.reverse();
                v
            })
            .collect();
        Ctx {
            graph,
            downgrades,
            order: order.to_vec(),
            step_of,
            step_us,
            prefix_us,
            profile,
            params,
            uses,
            cancel: None,
            effort: None,
        }
    }

    /// Whether the stop flag is raised.
    pub fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelToken::is_cancelled)
    }

    /// Number of steps.
    pub fn steps(&self) -> usize {
        self.order.len()
    }

    /// Modelled compute time of steps `[from, to)` (µs).
    pub fn compute_us(&self, from: usize, to: usize) -> f64 {
        if to <= from {
            return 0.0;
        }
        self.prefix_us[to.min(self.steps())] - self.prefix_us[from.min(self.steps())]
    }

    /// The producer op index of `t`, when it is an activation/output with one output only
    /// (re-executing it then rewrites nothing else).
    pub fn single_producer(&self, t: TensorId) -> Option<usize> {
        let p = self.graph.producer[t.index()]?.index();
        (self.graph.ops[p].outputs.len() == 1).then_some(p)
    }

    /// The producer op index of `t` when `t` may be recomputed: a single-output producer
    /// ([`Ctx::single_producer`]) that may run a second time
    /// ([`crate::ops::may_recompute`]: not random, not stateful, not flagged
    /// `"recompute": false`). Every strategy offers a recompute only through this.
    pub fn recompute_producer(&self, t: TensorId) -> Option<usize> {
        self.single_producer(t)
            .filter(|&p| crate::ops::may_recompute(&self.graph.ops[p]))
    }

    /// The non-weight inputs of op `k`, distinct.
    pub fn arena_inputs(&self, k: usize) -> Vec<TensorId> {
        let mut v: Vec<TensorId> = self.graph.ops[k]
            .inputs
            .iter()
            .copied()
            .filter(|&x| self.graph.tensor(x).kind != TensorKind::Weight)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The step at which a tensor of `bytes` spilled after use `a` should come back for its
    /// next use `b`: early enough that compute covers `margin ×` the transfer, but at least
    /// one idle step after `a` (so it returns `b` when the gap is too short to free anything).
    pub fn prefetch(&self, a: usize, b: usize, bytes: u64) -> usize {
        let need = self.params.margin * self.profile.h2d_us(bytes);
        let mut p = b;
        let mut acc = 0.0;
        while p >= a + 3 && acc < need {
            p -= 1;
            acc += self.step_us[p];
        }
        p
    }
}

/// Per-tensor uses and gap decisions.
#[derive(Debug, Clone, PartialEq)]
pub struct Sched {
    /// Steps at which each tensor is resident for sure (base uses plus recompute reads).
    pub uses: Vec<Vec<usize>>,
    /// Gap decisions keyed by the gap's first use.
    pub gaps: Vec<BTreeMap<usize, Gap>>,
    /// Conv downgrades: op index → index into [`Ctx::downgrades`] of that op.
    pub algo: BTreeMap<usize, usize>,
}

impl Sched {
    /// Everything kept resident from birth to last use.
    pub fn keep_all(ctx: &Ctx) -> Self {
        Sched {
            uses: ctx.uses.clone(),
            gaps: vec![BTreeMap::new(); ctx.uses.len()],
            algo: BTreeMap::new(),
        }
    }

    /// The workspace of op `k` under this schedule's conv downgrades.
    pub fn workspace(&self, ctx: &Ctx, k: usize) -> u64 {
        self.downgrade(ctx, k)
            .map_or(ctx.graph.ops[k].workspace, |o| o.workspace)
    }

    /// The algorithm op `k` is downgraded to, if any.
    pub fn downgrade(&self, ctx: &Ctx, k: usize) -> Option<crate::conv_algo::AlgoOption> {
        let i = *self.algo.get(&k)?;
        ctx.downgrades.get(k)?.get(i).copied()
    }

    /// The graph this schedule runs: the context's with the downgrades written in.
    pub fn graph(&self, ctx: &Ctx) -> Graph {
        let choice: BTreeMap<usize, crate::conv_algo::AlgoOption> = self
            .algo
            .keys()
            .filter_map(|&k| Some((k, self.downgrade(ctx, k)?)))
            .collect();
        if choice.is_empty() {
            ctx.graph.clone()
        } else {
            crate::conv_algo::with_choice(ctx.graph, &choice)
        }
    }

    /// The use after `a` of `t`, if any.
    pub fn next_use(&self, t: TensorId, a: usize) -> Option<usize> {
        let u = &self.uses[t.index()];
        let i = u.partition_point(|&x| x <= a);
        u.get(i).copied()
    }

    /// The gap `(a, b)` of `t` with `a < s < b`, if `s` falls strictly inside one.
    pub fn gap_at(&self, t: TensorId, s: usize) -> Option<(usize, usize)> {
        let u = &self.uses[t.index()];
        let i = u.partition_point(|&x| x <= s);
        if i == 0 || i == u.len() || u[i - 1] == s {
            return None;
        }
        Some((u[i - 1], u[i]))
    }

    /// Whether `t` occupies arena memory at step `s`.
    pub fn resident(&self, ctx: &Ctx, t: TensorId, s: usize) -> bool {
        let u = &self.uses[t.index()];
        let (Some(&first), Some(&last)) = (u.first(), u.last()) else {
            return false;
        };
        if s < first {
            return false;
        }
        if s >= last {
            return s == last || ctx.graph.tensor(t).kind == TensorKind::Output;
        }
        match self.gap_at(t, s) {
            None => true,
            Some((a, _)) => match self.gaps[t.index()].get(&a) {
                None => true,
                Some(Gap::Spill { back }) => s >= *back,
                Some(Gap::Recompute) => false,
            },
        }
    }

    /// Makes `c` a use of `t`: a gap around `c` is split; the part before `c` keeps its
    /// decision (a spill returns by `c`), the part after stays resident unless a spill's
    /// prefetch still leaves idle steps.
    pub fn add_use(&mut self, t: TensorId, c: usize) {
        let Some((a, _)) = self.gap_at(t, c) else {
            let u = &mut self.uses[t.index()];
            if let Err(i) = u.binary_search(&c) {
                u.insert(i, c);
            }
            return;
        };
        let g = &mut self.gaps[t.index()];
        match g.remove(&a) {
            Some(Gap::Spill { back }) => {
                let first = back.min(c);
                if first >= a + 2 {
                    g.insert(a, Gap::Spill { back: first });
                }
                if back >= c + 2 {
                    g.insert(c, Gap::Spill { back });
                }
            }
            Some(Gap::Recompute) if c >= a + 2 => {
                g.insert(a, Gap::Recompute);
            }
            _ => {}
        }
        let u = &mut self.uses[t.index()];
        if let Err(i) = u.binary_search(&c) {
            u.insert(i, c);
        }
    }

    /// The residency intervals of `t`, in step order.
    pub fn intervals(&self, ctx: &Ctx, t: TensorId) -> Vec<Interval> {
        let u = &self.uses[t.index()];
        let Some(&first) = u.first() else {
            return Vec::new();
        };
        let kind = ctx.graph.tensor(t).kind;
        let mut out = Vec::new();
        let mut start = first;
        let mut how = if kind == TensorKind::Input {
            Start::Input
        } else {
            Start::Birth
        };
        for w in u.windows(2) {
            let (a, b) = (w[0], w[1]);
            match self.gaps[t.index()].get(&a) {
                None => {}
                Some(Gap::Spill { back }) => {
                    out.push(Interval {
                        tensor: t,
                        start,
                        end: a + 1,
                        how_start: how,
                        how_end: End::SpillOut,
                    });
                    start = *back;
                    how = Start::SpillIn;
                }
                Some(Gap::Recompute) => {
                    out.push(Interval {
                        tensor: t,
                        start,
                        end: a + 1,
                        how_start: how,
                        how_end: End::Free,
                    });
                    start = b;
                    how = Start::Recompute;
                }
            }
        }
        let last = u[u.len() - 1];
        let (end, how_end) = if kind == TensorKind::Output {
            (ctx.steps(), End::Stay)
        } else {
            (last + 1, End::Free)
        };
        out.push(Interval {
            tensor: t,
            start,
            end,
            how_start: how,
            how_end,
        });
        out
    }

    /// Recomputes as `(step, producer op index, tensor)`, sorted by step then the producer's
    /// step (a topological order within the step).
    pub fn recomputes(&self, ctx: &Ctx) -> Vec<(usize, usize, TensorId)> {
        let mut v = Vec::new();
        for (i, g) in self.gaps.iter().enumerate() {
            let t = TensorId(i as u32);
            for (&a, d) in g {
                if *d == Gap::Recompute {
                    if let (Some(b), Some(p)) = (self.next_use(t, a), ctx.single_producer(t)) {
                        v.push((b, p, t));
                    }
                }
            }
        }
        v.sort_by_key(|&(b, p, t)| (b, ctx.step_of[p], t));
        v
    }

    /// Live arena bytes at each step: resident tensors plus the workspaces of the op and of
    /// the recomputes at that step.
    pub fn live(&self, ctx: &Ctx) -> Vec<u64> {
        let intervals = (0..self.uses.len()).flat_map(|i| self.intervals(ctx, TensorId(i as u32)));
        live_bytes(ctx, intervals, &self.recomputes(ctx), |k| {
            self.workspace(ctx, k)
        })
    }
}

/// Live arena bytes at each step of `ctx`'s order: the sizes of `intervals` where they are
/// resident, plus each step's op workspace and the workspaces of the `recomputes` (`(step,
/// producer, tensor)`) there, `workspace` giving an op's (bytes). O(intervals + steps), by a
/// difference array.
pub fn live_bytes(
    ctx: &Ctx,
    intervals: impl IntoIterator<Item = Interval>,
    recomputes: &[(usize, usize, TensorId)],
    workspace: impl Fn(usize) -> u64,
) -> Vec<u64> {
    let n = ctx.steps();
    let mut diff = vec![0i128; n + 1];
    for iv in intervals {
        let size = ctx.graph.tensor(iv.tensor).size as i128;
        diff[iv.start.min(n)] += size;
        diff[iv.end.min(n)] -= size;
    }
    let mut live = Vec::with_capacity(n);
    let mut acc = 0i128;
    for (s, &k) in ctx.order.iter().enumerate() {
        acc += diff[s];
        live.push(acc.max(0) as u64 + workspace(k));
    }
    for &(b, p, _) in recomputes {
        if b < n {
            live[b] += workspace(p);
        }
    }
    live
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> Graph {
        // x -> a -> b -> c -> d -> y, and y also reads a (a long gap for a).
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
                  {"name": "pb", "inputs": ["a"], "outputs": ["b"]},
                  {"name": "pc", "inputs": ["b"], "outputs": ["c"]},
                  {"name": "pd", "inputs": ["c"], "outputs": ["d"]},
                  {"name": "py", "inputs": ["d", "a"], "outputs": ["y"]}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn a_spill_frees_the_idle_steps_between_two_uses() {
        let g = chain();
        let ctx = Ctx::new(
            &g,
            &[0, 1, 2, 3, 4],
            DeviceProfile::h200(),
            Params::default(),
        );
        let mut s = Sched::keep_all(&ctx);
        let a = TensorId(1);
        assert_eq!(s.live(&ctx), vec![110, 110, 120, 120, 120]);
        s.gaps[1].insert(1, Gap::Spill { back: 4 });
        assert_eq!(s.live(&ctx), vec![110, 110, 20, 20, 120]);
        assert!(!s.resident(&ctx, a, 2) && s.resident(&ctx, a, 4));
        let iv = s.intervals(&ctx, a);
        assert_eq!((iv[0].end, iv[1].start), (2, 4));
        assert_eq!(iv[1].how_start, Start::SpillIn);
    }

    #[test]
    fn a_new_use_inside_a_spill_gap_brings_the_tensor_back_by_then() {
        let g = chain();
        let ctx = Ctx::new(
            &g,
            &[0, 1, 2, 3, 4],
            DeviceProfile::h200(),
            Params::default(),
        );
        let mut s = Sched::keep_all(&ctx);
        s.gaps[1].insert(1, Gap::Spill { back: 4 });
        s.add_use(TensorId(1), 2);
        assert!(s.resident(&ctx, TensorId(1), 2));
        assert!(!s.resident(&ctx, TensorId(1), 3));
        assert_eq!(s.gaps[1].get(&2), Some(&Gap::Spill { back: 4 }));
    }
}
