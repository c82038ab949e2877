//! `memplan stats`: a graph's figures (ops, tensors, naive bytes, LOAD of the listed order,
//! weights, the order-independent lower bound of LOAD and of the arena peak) on stdout.

use crate::args::StatsArgs;
use crate::common::{load_graph, mib};
use anyhow::Result;
use std::process::ExitCode;

/// Runs `memplan stats`.
pub fn stats(a: StatsArgs) -> Result<ExitCode> {
    let g = load_graph(&a.graph)?;
    let s = memplan::planner::graph_stats(&g)?;
    println!("graph            {}", g.name);
    println!("ops              {}", s.ops);
    println!("tensors          {}", s.tensors);
    println!(
        "naive bytes      {} ({})",
        s.naive_bytes,
        mib(s.naive_bytes)
    );
    println!(
        "LOAD (listed)    {} ({})",
        s.listed_load,
        mib(s.listed_load)
    );
    println!(
        "weights bytes    {} ({})",
        s.weights_bytes,
        mib(s.weights_bytes)
    );
    println!(
        "order bound      {} ({})",
        s.order_lower_bound,
        mib(s.order_lower_bound)
    );
    println!(
        "peak bound       {} ({}; the order bound with alignment padding)",
        s.peak_lower_bound,
        mib(s.peak_lower_bound)
    );
    Ok(ExitCode::SUCCESS)
}
