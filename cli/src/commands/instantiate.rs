//! `memplan instantiate`: a symbolic plan or a symbolic graph at one binding of its symbols
//! (`memplan::symbolic`), written as an ordinary plan or graph.

use crate::args::InstantiateArgs;
use crate::common::{bad, is_symbolic_plan, read, write_out};
use anyhow::Result;
use memplan::symbolic::{Binding, SymbolicGraph, SymbolicPlan};
use std::process::ExitCode;
use std::time::Instant;

/// Runs `memplan instantiate`.
pub fn instantiate(a: InstantiateArgs) -> Result<ExitCode> {
    let label = a.input.display().to_string();
    let text = read(&a.input)?;
    let binding = Binding::parse(&a.binding.join(","))
        .map_err(|e| bad(format!("binding {:?}: {e}", a.binding.join(" "))))?;
    let out = if is_symbolic_plan(&text) {
        let plan = SymbolicPlan::parse(&text).map_err(|e| bad(format!("{label}: {e}")))?;
        let started = Instant::now();
        let concrete = plan
            .instantiate(&binding)
            .map_err(|e| bad(format!("{label}: {e}")))?;
        eprintln!(
            "{}: plan at {binding}: peak {} B, arena {} B, LOAD of the order {} B (instantiated in {:.3} ms)",
            concrete.graph,
            concrete.stats.peak_bytes,
            concrete.arena_bytes,
            concrete.stats.load_bytes.unwrap_or(0),
            started.elapsed().as_secs_f64() * 1e3
        );
        concrete.to_json()
    } else {
        let graph = SymbolicGraph::parse(&text).map_err(|e| bad(format!("{label}: {e}")))?;
        let concrete = graph
            .instantiate(&binding)
            .map_err(|e| bad(format!("{label}: {e}")))?;
        eprintln!(
            "{}: graph at {binding}: {} tensors, {} ops",
            concrete.name,
            concrete.tensors.len(),
            concrete.ops.len()
        );
        concrete.to_json()
    };
    write_out(&a.output, &format!("{out}\n"))?;
    Ok(ExitCode::SUCCESS)
}
