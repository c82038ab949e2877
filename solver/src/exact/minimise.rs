//! placeholder
use super::*;
/// Outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinimiseOutcome {
    /// The best placement.
    pub placement: Placement,
    /// Its peak.
    pub peak: u64,
    /// Proven lower bound.
    pub lower_bound: u64,
    /// Status.
    pub status: ExactStatus,
    /// Nodes.
    pub nodes: u64,
    /// Time.
    pub elapsed: Duration,
}
/// Minimise.
pub fn minimise(
    problem: &PlacementProblem,
    start: &Placement,
    opts: &ExactOptions,
) -> MinimiseOutcome {
    let _ = (problem, opts);
    MinimiseOutcome {
        placement: start.clone(),
        peak: 0,
        lower_bound: 0,
        status: ExactStatus::Timeout,
        nodes: 0,
        elapsed: Duration::ZERO,
    }
}
