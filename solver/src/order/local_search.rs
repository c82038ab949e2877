//! Local search over orders (work in progress).

use super::{LifetimeOptions, OrderProblem, Orderer};
use crate::budget::Budget;

/// Hill-climbing local search.
#[derive(Debug, Clone, Default)]
pub struct LocalSearch;

impl Orderer for LocalSearch {
    fn name(&self) -> &'static str {
        "local_search"
    }

    fn order(&self, _: &OrderProblem, incumbent: &[usize], _: &LifetimeOptions, _: &Budget) -> Vec<usize> {
        incumbent.to_vec()
    }
}
