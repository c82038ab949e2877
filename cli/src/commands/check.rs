//! `memplan check`: replays a plan against its graph with the validator; exit 0 if the plan
//! is valid (within `--budget`), 1 if not.

use crate::args::{CheckArgs, MAX_SAMPLES};
use crate::common::{bad, graph_for_plan, is_symbolic_plan, load_graph, read};
use anyhow::Result;
use memplan::plan::Plan;
use memplan::symbolic::{SymbolicCheckError, SymbolicGraph, SymbolicPlan};
use std::process::ExitCode;

/// Runs `memplan check`.
pub fn check(a: CheckArgs) -> Result<ExitCode> {
    if a.samples > MAX_SAMPLES {
        return Err(bad(format!(
            "--samples {} is over the maximum of {MAX_SAMPLES}",
            a.samples
        )));
    }
    let plan_text = read(&a.plan)?;
    if is_symbolic_plan(&plan_text) {
        return check_symbolic(&a, &plan_text);
    }
    let g = load_graph(&a.graph.to_string_lossy())?;
    let p = Plan::parse(&plan_text).map_err(|e| bad(format!("{}: {e}", a.plan.display())))?;
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

/// `memplan check` on a symbolic graph and plan: the plan at every binding
/// [`memplan::symbolic::check_points`] lists, replayed by the validator.
fn check_symbolic(a: &CheckArgs, plan_text: &str) -> Result<ExitCode> {
    let graph = SymbolicGraph::parse(&read(&a.graph)?)
        .map_err(|e| bad(format!("{}: {e}", a.graph.display())))?;
    let plan =
        SymbolicPlan::parse(plan_text).map_err(|e| bad(format!("{}: {e}", a.plan.display())))?;
    match memplan::symbolic::check_symbolic(&graph, &plan, a.samples, 1) {
        Ok(r) => {
            if let Some(budget) = a.budget {
                if r.worst_peak.0 > budget {
                    eprintln!(
                        "invalid: at {}: peak {} B is over the budget of {budget} B",
                        r.worst_peak.1, r.worst_peak.0
                    );
                    return Ok(ExitCode::from(1));
                }
            }
            println!(
                "valid at {} bindings: largest peak {} B (at {})",
                r.bindings, r.worst_peak.0, r.worst_peak.1
            );
            match &r.proof {
                memplan::symbolic::Proof::Proved { templates, pairs } => println!(
                    "proved valid at every binding in range: {templates} template(s), {pairs} \
                     overlapping buffer pairs ordered by the stacking DAG, sizes equal to the \
                     graph's expressions"
                ),
                memplan::symbolic::Proof::NotProved(why) => println!(
                    "not proved for the whole range ({why}): checked at the bindings above only"
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(SymbolicCheckError::Invalid { binding, violation }) => {
            eprintln!("invalid: at {binding}: {violation}");
            Ok(ExitCode::from(1))
        }
        Err(e @ SymbolicCheckError::Instantiate { .. }) => Err(bad(format!(
            "{} / {}: {e}",
            a.graph.display(),
            a.plan.display()
        ))),
    }
}
