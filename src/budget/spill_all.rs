//! Baseline "spill everything eligible": every non-weight tensor of at least the minimum
//! spill size goes to the host in every gap between two uses that leaves an idle step after
//! the prefetch (see [`Ctx::prefetch`]), whatever the target. O(T · U).

use super::schedule::{Ctx, Gap, Sched};
use super::SpillStrategy;
use crate::graph::TensorId;

/// The spill-everything baseline.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpillAll;

impl SpillStrategy for SpillAll {
    fn name(&self) -> &'static str {
        "spill-all"
    }

    fn about(&self) -> &'static str {
        "baseline: spill every eligible tensor in every idle gap"
    }

    fn schedule(&self, ctx: &Ctx, _target: u64) -> Sched {
        let mut sched = Sched::keep_all(ctx);
        for i in 0..sched.uses.len() {
            let size = ctx.graph.tensor(TensorId(i as u32)).size;
            if size < ctx.params.min_spill_bytes {
                continue;
            }
            let uses = sched.uses[i].clone();
            for w in uses.windows(2) {
                let back = ctx.prefetch(w[0], w[1], size);
                if back >= w[0] + 2 {
                    sched.gaps[i].insert(w[0], Gap::Spill { back });
                }
            }
        }
        sched
    }

    fn adapts(&self) -> bool {
        false
    }
}
