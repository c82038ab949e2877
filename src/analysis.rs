//! Analyses of a valid plan, below the planner and above the format: [`profile`] recovers
//! the arena over time from a plan's instruction stream (blocks, live bytes per step, free
//! space and fragmentation), and [`fragmentation_at_peak`] is the figure the planner and the
//! tier phase write into `stats.fragmentation_at_peak`; [`walk`] is the instruction-stream
//! walk both the profile and the Chrome trace use. (The replay that checks a plan is
//! [`crate::validate`](mod@crate::validate); the Chrome trace is [`crate::trace`].)

pub mod profile;
pub mod walk;

use crate::graph::Graph;
use crate::plan::Plan;

/// Seed 001 §4.1's fragmentation of the whole arena `[0, peak)` at the step where the most
/// bytes are reserved, for any valid plan of `graph` (`None` when the plan names something
/// the graph lacks).
pub fn fragmentation_at_peak(graph: &Graph, plan: &Plan) -> Option<f64> {
    let prof = profile::profile(graph, plan).ok()?;
    Some(prof.fragmentation_at_peak(0, prof.peak).rate)
}
