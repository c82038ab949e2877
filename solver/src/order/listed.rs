//! The listed order: the framework's eager order, made topological if it is not (Kahn's
//! algorithm preferring the smallest listed index). `O((n + e) log n)`.

use super::{LifetimeOptions, OrderProblem, Orderer};
use crate::limits::Limits;

/// The listed (eager) order.
#[derive(Debug, Clone, Copy, Default)]
pub struct Listed;

impl Orderer for Listed {
    fn name(&self) -> &'static str {
        "listed"
    }

    fn order(
        &self,
        problem: &OrderProblem,
        incumbent: &[usize],
        _: &LifetimeOptions,
        _: &Limits,
    ) -> Vec<usize> {
        // The problem is validated before ordering, so a cycle cannot occur here; fall back to
        // the incumbent (already a valid order) rather than panic.
        problem
            .listed_topological_order()
            .unwrap_or_else(|_| incumbent.to_vec())
    }
}
