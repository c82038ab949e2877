//! The budget heuristic: an event sweep with selective spill.
//!
//! Steps are swept in order; while the live bytes at step `s` exceed the target, one tensor
//! resident at `s` but idle there (in a kept gap `(a, b)` with `a < s < b`) is evicted for
//! that gap, by the cheaper of
//! - **spill**: `spill_out` after `a`, `spill_in` at the prefetch step `p` ≤ `b` chosen so
//!   that the compute between `p` and `b` covers 1.2× the transfer (the safety margin); and
//! - **recompute**: free after `a`, re-execute its producer before `b` — only for a producer
//!   with a single output that may run a second time ([`crate::ops::may_recompute`]: never
//!   dropout or another random or stateful op) and whose inputs are resident at `b` (they
//!   then stay resident there), of a cheap op type ([`crate::cost::is_cheap`]) or modelled faster than the unhidden
//!   round trip it replaces.
//!
//! Candidates are first filtered strictly — weights never enter the arena; tensors smaller
//! than the minimum spill size, with fewer idle steps than the minimum gap ("needed again
//! soon") or whose spill the compute cannot hide are skipped — and only when no candidate
//! passes are those considered. Among candidates the one with the most benefit per modelled
//! cost (unhidden transfer time plus [`LINK_SHARE`] of the link time, or the producer's
//! time) wins, the benefit being its size times the over-target steps it frees (so long-idle
//! large tensors are preferred, the seed's "canary" principle); ties go to the larger, then
//! to the lower tensor id. A step no eviction can help is left over the target.
//!
//! With [`super::schedule::Params::conv_downgrade`], a conv run at an over-target step may
//! instead be downgraded to an algorithm with less workspace (MONeT-style joint selection,
//! [`crate::conv_algo`]): its benefit is the workspace bytes saved at that step, capped at
//! the step's excess, its cost the modelled time added; it competes with the evictions on
//! the same benefit-per-cost score.
//!
//! Complexity: O(E · (T log U + N)) for E evictions and downgrades, T tensors, U uses, N
//! steps.

use super::schedule::{Ctx, Gap, Sched};
use super::SpillStrategy;
use crate::cost::is_cheap;
use crate::graph::{TensorId, TensorKind};

/// Share of a spill's link time counted as its cost even when compute hides it.
pub const LINK_SHARE: f64 = 0.1;

/// The sweep heuristic.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sweep;

impl SpillStrategy for Sweep {
    fn name(&self) -> &'static str {
        "sweep"
    }

    fn about(&self) -> &'static str {
        "event sweep with selective spill and cheap recompute (the heuristic)"
    }

    fn schedule(&self, ctx: &Ctx, target: u64) -> Sched {
        // Recomputes pin their producers' inputs, which can raise the floor: when the
        // target is missed, a spill-only sweep gets a chance too (the lower peak wins).
        let with = sweep(ctx, target, true);
        let peak = |s: &Sched| s.live(ctx).into_iter().max().unwrap_or(0);
        let p = peak(&with);
        if p <= target || ctx.cancelled() {
            return with;
        }
        let without = sweep(ctx, target, false);
        if peak(&without) < p {
            without
        } else {
            with
        }
    }

    fn adapts(&self) -> bool {
        true
    }
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Spill { back: usize },
    Recompute,
}

#[derive(Debug, Clone, Copy)]
struct Choice {
    t: TensorId,
    a: usize,
    action: Action,
    score: f64,
    size: u64,
}

/// Runs the sweep for `target` live bytes (see the module doc), with or without recompute.
/// Checks [`Ctx::cancel`] before every eviction: once it is raised, the schedule so far is
/// returned (steps not yet swept stay over the target).
pub fn sweep(ctx: &Ctx, target: u64, recompute: bool) -> Sched {
    let mut sched = Sched::keep_all(ctx);
    let n = ctx.steps();
    let mut live = sched.live(ctx);
    let mut s = 0;
    while s < n {
        if ctx.cancelled() {
            break;
        }
        if live[s] <= target {
            s += 1;
            continue;
        }
        let mut over = vec![0usize; n + 1];
        for i in 0..n {
            over[i + 1] = over[i] + usize::from(live[i] > target);
        }
        let choice = candidate(ctx, &sched, s, &over, true, recompute)
            .or_else(|| candidate(ctx, &sched, s, &over, false, recompute));
        let down = downgrade(ctx, &sched, s, live[s] - target);
        match (choice, down) {
            (c, Some(d)) if c.is_none_or(|c| d.score > c.score) => {
                sched.algo.insert(d.op, d.option);
                live = sched.live(ctx);
            }
            (Some(c), _) => {
                apply(ctx, &mut sched, c);
                live = sched.live(ctx);
            }
            _ => s += 1,
        }
    }
    sched
}

/// A conv downgrade at a step over the target.
#[derive(Debug, Clone, Copy)]
struct Downgrade {
    op: usize,
    option: usize,
    score: f64,
}

/// The best downgrade of the conv run at step `s` (module doc): benefit = workspace bytes
/// saved at `s`, capped at the `excess` (more does not help there), cost = modelled time
/// added; ties go to the milder downgrade.
fn downgrade(ctx: &Ctx, sched: &Sched, s: usize, excess: u64) -> Option<Downgrade> {
    let k = ctx.order[s];
    let opts = ctx.downgrades.get(k)?;
    let cur_ws = sched.workspace(ctx, k);
    let cur_us = sched.downgrade(ctx, k).map_or(ctx.step_us[s], |o| o.us);
    let first = sched.algo.get(&k).map_or(0, |&i| i + 1);
    let mut best: Option<Downgrade> = None;
    for (i, o) in opts.iter().enumerate().skip(first) {
        if o.workspace >= cur_ws {
            continue;
        }
        let benefit = (cur_ws - o.workspace).min(excess) as f64;
        let score = benefit / ((o.us - cur_us).max(0.0) + 1.0);
        if best.is_none_or(|b| score > b.score) {
            best = Some(Downgrade {
                op: k,
                option: i,
                score,
            });
        }
    }
    best
}

fn apply(ctx: &Ctx, sched: &mut Sched, c: Choice) {
    match c.action {
        Action::Spill { back } => {
            sched.gaps[c.t.index()].insert(c.a, Gap::Spill { back });
        }
        Action::Recompute => {
            let Some(b) = sched.next_use(c.t, c.a) else {
                return;
            };
            if let Some(p) = ctx.single_producer(c.t) {
                for x in ctx.arena_inputs(p) {
                    sched.add_use(x, b);
                }
            }
            sched.gaps[c.t.index()].insert(c.a, Gap::Recompute);
        }
    }
}

/// The best eviction at step `s` (strict: with the filters of the module doc).
fn candidate(
    ctx: &Ctx,
    sched: &Sched,
    s: usize,
    over: &[usize],
    strict: bool,
    recompute: bool,
) -> Option<Choice> {
    let p = ctx.params;
    let mut best: Option<Choice> = None;
    for i in 0..sched.uses.len() {
        let t = TensorId(i as u32);
        let Some((a, b)) = sched.gap_at(t, s) else {
            continue;
        };
        let size = ctx.graph.tensor(t).size;
        let freed = |from: usize, to: usize| (over[to] - over[from]) as f64 * size as f64;
        let t_out = ctx.profile.d2h_us(size);
        let t_in = ctx.profile.h2d_us(size);
        let spill_cost = |back: usize| {
            // The unhidden part, plus a tenth of the link time: hidden copies still occupy
            // the shared link (and the host), so a free recompute wins a tie.
            (t_in - ctx.compute_us(back, b)).max(0.0)
                + (t_out - ctx.compute_us(a + 1, back)).max(0.0)
                + LINK_SHARE * (t_in + t_out)
        };
        let mut options: Vec<(Action, f64, f64)> = Vec::new();
        match sched.gaps[i].get(&a) {
            Some(Gap::Recompute) => continue,
            Some(Gap::Spill { back }) => {
                // Spilled, but s is in its prefetch window: bring it back later.
                if *back <= s && (!strict || size >= p.min_spill_bytes) {
                    let extra = spill_cost(s + 1) - spill_cost(*back);
                    options.push((Action::Spill { back: s + 1 }, extra, freed(*back, s + 1)));
                }
            }
            None => {
                if strict && (size < p.min_spill_bytes || b - a - 1 < p.min_gap_steps) {
                    continue;
                }
                let mut back = ctx.prefetch(a, b, size);
                let hidden = back > s
                    && ctx.compute_us(back, b) >= p.margin * t_in
                    && ctx.compute_us(a + 1, back) >= p.margin * t_out;
                if !strict && back <= s {
                    back = s + 1;
                }
                if back > s && (hidden || !strict) {
                    options.push((Action::Spill { back }, spill_cost(back), freed(a + 1, back)));
                }
                if recompute {
                    let spill_us = spill_cost(b);
                    recompute_option(ctx, sched, t, (a, b), spill_us, &freed, &mut options);
                }
            }
        }
        for (action, cost, benefit) in options {
            let score = benefit / (cost + 1.0);
            let better = match &best {
                None => true,
                Some(c) => {
                    score > c.score
                        || (score == c.score && (size > c.size || (size == c.size && t < c.t)))
                }
            };
            if better {
                best = Some(Choice {
                    t,
                    a,
                    action,
                    score,
                    size,
                });
            }
        }
    }
    best
}

/// Adds the recompute option for gap `(a, b)` of `t`, when its producer qualifies.
fn recompute_option(
    ctx: &Ctx,
    sched: &Sched,
    t: TensorId,
    (a, b): (usize, usize),
    spill_us: f64,
    freed: &dyn Fn(usize, usize) -> f64,
    options: &mut Vec<(Action, f64, f64)>,
) {
    let Some(k) = ctx.recompute_producer(t) else {
        return;
    };
    let cost = ctx.profile.op_us(ctx.graph, &ctx.graph.ops[k]);
    if ctx.graph.tensor(t).kind == TensorKind::Activation
        && (is_cheap(&ctx.graph.ops[k].op_type) || cost < spill_us)
        && ctx
            .arena_inputs(k)
            .iter()
            .all(|&x| x != t && sched.resident(ctx, x, b))
    {
        options.push((Action::Recompute, cost, freed(a + 1, b)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::schedule::Params;
    use crate::cost::DeviceProfile;
    use crate::graph::Graph;

    #[test]
    fn the_sweep_brings_every_step_under_a_reachable_target() {
        let g = Graph::parse(
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
                  {"name": "py", "inputs": ["d", "a"], "outputs": ["y"]}]}"#,
        )
        .unwrap();
        let ctx = Ctx::new(
            &g,
            &[0, 1, 2, 3, 4],
            DeviceProfile::h200(),
            Params::default(),
        );
        let s = sweep(&ctx, 60, true);
        assert!(s.live(&ctx).iter().all(|&l| l <= 120));
        assert_eq!(s.live(&ctx)[2], 20);
        assert!(s.gaps[1].contains_key(&1));
    }
}
