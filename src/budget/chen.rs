//! Baseline: Chen et al.'s √n checkpointing ("Training Deep Nets with Sublinear Memory
//! Cost", 2016). The order is cut into segments of ⌈√n⌉ steps. A tensor is *stashed* when it
//! has a gap longer than one segment (a forward activation kept for the backward pass); per
//! segment, the stashed tensor born last is its checkpoint and stays resident. Every other
//! stashed tensor with a single-output producer is dropped after its last use before the gap
//! and recomputed right before the next one, recomputing in turn the dropped inputs of its
//! producer from the segment's checkpoint (a recomputed tensor then stays until its next
//! use, so a segment is recomputed once). A tensor whose chain reaches something neither
//! resident nor recomputable is kept; so is one whose producer may not run twice
//! ([`crate::ops::may_recompute`]: dropout and other random or stateful ops). The target is
//! ignored.

use super::schedule::{Ctx, Gap, Sched};
use super::SpillStrategy;
use crate::graph::{TensorId, TensorKind};
use std::collections::BTreeMap;

/// The √n checkpointing baseline.
#[derive(Debug, Clone, Copy, Default)]
pub struct Chen;

impl SpillStrategy for Chen {
    fn name(&self) -> &'static str {
        "chen"
    }

    fn about(&self) -> &'static str {
        "baseline: Chen et al.'s sqrt(n) checkpointing (recompute forward segments)"
    }

    fn schedule(&self, ctx: &Ctx, _target: u64) -> Sched {
        chen(ctx)
    }

    fn adapts(&self) -> bool {
        false
    }
}

/// The first long gap `(a, b)` of each stashed tensor, by tensor.
fn stashed(ctx: &Ctx, seg: usize) -> BTreeMap<TensorId, (usize, usize)> {
    let mut out = BTreeMap::new();
    for (i, u) in ctx.uses.iter().enumerate() {
        let t = TensorId(i as u32);
        if ctx.graph.tensor(t).kind != TensorKind::Activation {
            continue;
        }
        if let Some(w) = u.windows(2).find(|w| w[1] - w[0] > seg) {
            out.insert(t, (w[0], w[1]));
        }
    }
    out
}

/// Builds the √n schedule (see the module doc); once [`Ctx::cancel`] is raised, the tensors
/// not yet dropped stay resident.
pub fn chen(ctx: &Ctx) -> Sched {
    let n = ctx.steps().max(1);
    let seg = ((n as f64).sqrt().ceil() as usize).max(1);
    let stash = stashed(ctx, seg);
    // Checkpoint per segment: the stashed tensor born last.
    let mut checkpoint: BTreeMap<usize, (usize, TensorId)> = BTreeMap::new();
    for &t in stash.keys() {
        let birth = ctx.uses[t.index()][0];
        let e = checkpoint.entry(birth / seg).or_insert((birth, t));
        if birth > e.0 {
            *e = (birth, t);
        }
    }
    let keep: Vec<TensorId> = checkpoint.values().map(|&(_, t)| t).collect();
    let mut sched = Sched::keep_all(ctx);
    for (&t, &(a, _)) in &stash {
        if ctx.cancelled() {
            break;
        }
        if keep.contains(&t) || ctx.recompute_producer(t).is_none() {
            continue;
        }
        let mut trial = sched.clone();
        let Some(b) = trial.next_use(t, a) else {
            continue;
        };
        if trial.gaps[t.index()].contains_key(&a) {
            continue;
        }
        trial.gaps[t.index()].insert(a, Gap::Recompute);
        if make_inputs_resident(ctx, &mut trial, t, b) {
            sched = trial;
        }
    }
    sched
}

/// Makes the inputs of `t`'s producer resident at `b`, recomputing dropped ones there in
/// turn; false when one is neither resident nor recomputable.
fn make_inputs_resident(ctx: &Ctx, sched: &mut Sched, t: TensorId, b: usize) -> bool {
    let mut work = vec![t];
    let mut guard = 0usize;
    while let Some(t) = work.pop() {
        guard += 1;
        if guard > ctx.graph.tensors.len() * 4 + 16 {
            return false;
        }
        let Some(p) = ctx.recompute_producer(t) else {
            return false;
        };
        for x in ctx.arena_inputs(p) {
            if sched.resident(ctx, x, b) {
                sched.add_use(x, b);
                continue;
            }
            let Some((a, _)) = sched.gap_at(x, b) else {
                return false; // dead (or not yet born) at b: extending it is not Chen's plan
            };
            if sched.gaps[x.index()].get(&a) != Some(&Gap::Recompute)
                || ctx.recompute_producer(x).is_none()
            {
                return false;
            }
            sched.add_use(x, b);
            work.push(x);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use crate::budget::tests::{training_chain, unbudgeted_peak};
    use crate::budget::{plan_with_budget, BudgetOptions};

    #[test]
    fn sqrt_n_checkpointing_fits_26_of_the_64_layer_training_chain_s_mib_by_recomputing() {
        const MIB: u64 = 1 << 20;
        let g = training_chain(64, MIB);
        let order: Vec<usize> = (0..g.ops.len()).collect();
        // Every activation is alive at the loss: over 64 MiB. √n checkpointing (129 steps,
        // segments of 12) keeps at most 11 checkpoints plus one recomputed segment (12), the
        // input and two gradients: at most 26 MiB (it needs 17).
        assert!(unbudgeted_peak(&g) >= 64 * MIB);
        let budget = 26 * MIB;
        let p = plan_with_budget(
            &g,
            &order,
            &BudgetOptions {
                budget,
                strategy: "chen".into(),
                ..BudgetOptions::default()
            },
        )
        .unwrap();
        let st = p.stats.budget.clone().unwrap();
        assert_eq!(st.strategy, "chen");
        assert!(st.recomputed_ops > 0, "{st:?}");
        assert_eq!(
            st.spills, 0,
            "checkpointing recomputes, it does not spill: {st:?}"
        );
        assert!(p.arena_bytes <= budget);
        crate::validate::validate(&g, &p, Some(budget)).unwrap();
    }
}
