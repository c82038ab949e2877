//! `memplan check`: replays a plan against its graph with the validator; exit 0 if the plan
//! is valid (within `--budget`), 1 if not.

use crate::args::CheckArgs;
use crate::common::{graph_for_plan, load_graph, load_plan};
use anyhow::Result;
use std::process::ExitCode;

/// Runs `memplan check`.
pub fn check(a: CheckArgs) -> Result<ExitCode> {
    let g = load_graph(&a.graph.to_string_lossy())?;
    let p = load_plan(&a.plan)?;
    let Some(g) = graph_for_plan(g, &p, &a.plan)? else {
        return Ok(ExitCode::from(1));
    };
    match memplan::validate(&g, &p, a.budget) {
        Ok(r) => {
            println!(
                "valid: peak {} B, max live {} B, host peak {} B, {} execs, {} spills",
                r.peak, r.max_live, r.host_peak, r.execs, r.spills
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(v) => {
            eprintln!("invalid: {v}");
            Ok(ExitCode::from(1))
        }
    }
}
