//! Memory-aware greedy list scheduling (work in progress).

use super::{LifetimeOptions, OrderProblem, Orderer};
use crate::budget::Budget;

/// Memory-aware greedy list scheduler.
#[derive(Debug, Clone, Default)]
pub struct GreedyList;

impl Orderer for GreedyList {
    fn name(&self) -> &'static str {
        "greedy"
    }

    fn order(&self, _: &OrderProblem, incumbent: &[usize], _: &LifetimeOptions, _: &Budget) -> Vec<usize> {
        incumbent.to_vec()
    }
}
