//! `memplan instantiate`: a symbolic plan or a symbolic graph at one binding of its symbols
//! (`memplan::symbolic`), written as an ordinary plan or graph.

use crate::args::InstantiateArgs;
use crate::common::{bad, is_symbolic_plan, read};
use crate::output::{check_outputs, write_out};
use anyhow::Result;
use memplan::symbolic::{Binding, SymbolicGraph, SymbolicPlan};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

/// Runs `memplan instantiate`.
pub fn instantiate(a: InstantiateArgs) -> Result<ExitCode> {
    let label = a.input.display().to_string();
    if let Some(path) = &a.output {
        check_outputs(&[("the input file", &a.input)], &[("-o", path)])?;
    }
    refuse_symbols_bound_twice(&a.binding)?;
    let text = read(&a.input)?;
    let binding = Binding::parse(&a.binding.join(","))
        .map_err(|e| bad(format!("binding {:?}: {e}", a.binding.join(" "))))?;
    if !is_symbolic_plan(&text) && !memplan::symbolic::declares_symbols(&text) {
        if let Some(found) = describe_format(&text) {
            return Err(bad(format!(
                "{label}: {found}, not a symbolic plan ({}) or a symbolic graph \
                 (memplan-graph/1 with \"symbols\"): nothing to instantiate",
                memplan::symbolic::SYMBOLIC_PLAN_FORMAT
            )));
        }
    }
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

/// Refuses a symbol given a value twice (`B=3 B=4`), which would otherwise keep the last.
fn refuse_symbols_bound_twice(args: &[String]) -> Result<()> {
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for item in args
        .iter()
        .flat_map(|a| a.split(|c: char| c == ',' || c.is_whitespace()))
        .filter(|s| !s.is_empty())
    {
        let Some((name, _)) = item.split_once('=') else {
            continue; // Binding::parse names the malformed item.
        };
        let name = name.trim();
        if let Some(first) = seen.insert(name, item) {
            return Err(bad(format!(
                "symbol {name} is bound twice ({first} and {item}); give each symbol one value"
            )));
        }
    }
    Ok(())
}

/// What the JSON document `text` is, for a message: its `format` field; `None` when it is
/// not JSON (the parser then reports where).
fn describe_format(text: &str) -> Option<String> {
    let v = serde_json::from_str::<serde_json::Value>(text).ok()?;
    Some(match v.get("format") {
        Some(serde_json::Value::String(f)) if f == memplan::graph::GRAPH_FORMAT => {
            format!("a concrete graph ({f} without \"symbols\")")
        }
        Some(serde_json::Value::String(f)) if f == memplan::plan::PLAN_FORMAT => {
            format!("a concrete plan ({f})")
        }
        Some(serde_json::Value::String(f)) => format!("a document of format {f:?}"),
        Some(_) | None => "a JSON document without a \"format\" field".into(),
    })
}
