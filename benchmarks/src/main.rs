//! Benchmark table over the shared model zoo and allocation traces.
//!
//! Run: `cargo run --release -p memplan-benchmarks -- [SHARED_DIR] [--time-limit S]`
//! (SHARED_DIR defaults to `../shared`). Prints a Markdown table with, per graph: ops,
//! tensors, LOAD of the listed order, the order-independent bound, the peak with the listed
//! order (and its ratio to LOAD), the peak with `--order auto` (and its ratio to the bound),
//! and the planning time of each. For each trace CSV: buffers, LOAD, the placement
//! portfolio's peak and ratio to LOAD, the best member and the time.
//! Every zoo plan is replayed by the validator; a failure aborts the run.

use anyhow::{bail, Context, Result};
use memplan::graph::Graph;
use memplan::planner::{graph_stats, plan, OrderMode, PlanOptions};
use memplan_solver::{csv, placement, Budget};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn main() -> Result<()> {
    let mut shared = PathBuf::from("../shared");
    let mut time_limit = 1.0f64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--time-limit" => {
                time_limit = args.next().context("--time-limit needs seconds")?.parse()?;
            }
            "-h" | "--help" => {
                println!("usage: memplan-benchmarks [SHARED_DIR] [--time-limit S]");
                return Ok(());
            }
            other => shared = PathBuf::from(other),
        }
    }
    let tl = Duration::from_secs_f64(time_limit);
    zoo_table(&shared.join("zoo"), tl)?;
    println!();
    trace_table(&shared.join("bench/traces"), tl)?;
    Ok(())
}

fn files(dir: &Path, ext: &str) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    Ok(v)
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn zoo_table(dir: &Path, tl: Duration) -> Result<()> {
    println!("| graph | ops | tensors | LOAD(listed) MiB | order bound MiB | LOAD/bound | peak(listed) MiB | peak/LOAD | peak(auto) MiB | auto/bound | auto order | listed ms | auto ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|");
    let (mut worst_listed, mut worst_name) = (0.0f64, String::new());
    for path in files(dir, "json")? {
        let g = Graph::parse(&std::fs::read_to_string(&path)?)
            .with_context(|| path.display().to_string())?;
        let s = graph_stats(&g)?;
        let run = |order| -> Result<(memplan::Plan, f64)> {
            let t0 = Instant::now();
            let p = plan(
                &g,
                &PlanOptions {
                    order,
                    time_limit: Some(tl),
                    inplace: false,
                },
            )?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            if let Err(v) = memplan::validate(&g, &p, None) {
                bail!("{}: invalid plan: {v}", g.name);
            }
            Ok((p, ms))
        };
        let (given, given_ms) = run(OrderMode::Given)?;
        let (auto, auto_ms) = run(OrderMode::Auto)?;
        let r = ratio(given.stats.peak_bytes, s.listed_load);
        if r > worst_listed {
            worst_listed = r;
            worst_name = g.name.clone();
        }
        println!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.3} | {:.1} | {:.4} | {:.1} | {:.3} | {} | {:.1} | {:.1} |",
            g.name,
            s.ops,
            s.tensors,
            mib(s.listed_load),
            mib(s.order_lower_bound),
            ratio(s.listed_load, s.order_lower_bound),
            mib(given.stats.peak_bytes),
            r,
            mib(auto.stats.peak_bytes),
            ratio(auto.stats.peak_bytes, s.order_lower_bound),
            auto.stats.order_method.as_deref().unwrap_or("-"),
            given_ms,
            auto_ms
        );
    }
    println!("\nworst peak(listed)/LOAD: {worst_listed:.4} ({worst_name})");
    Ok(())
}

fn trace_table(dir: &Path, tl: Duration) -> Result<()> {
    println!("| trace | buffers | LOAD MiB | peak MiB | peak/LOAD | best member | members (peak/LOAD) | ms |");
    println!("|---|---:|---:|---:|---:|---|---|---:|");
    for path in files(dir, "csv")? {
        let parsed = csv::parse(&std::fs::read_to_string(&path)?, 1)
            .with_context(|| path.display().to_string())?;
        let t0 = Instant::now();
        let result = placement::portfolio(&parsed.problem, &Budget::with_time(tl))?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let load = parsed.problem.load();
        let members: Vec<String> = result
            .members
            .iter()
            .map(|m| format!("{} {:.3}", m.name, ratio(m.peak, load)))
            .collect();
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.4} | {} | {} | {:.0} |",
            path.file_stem().unwrap_or_default().to_string_lossy(),
            parsed.problem.buffers.len(),
            mib(load),
            mib(result.stats.objective),
            ratio(result.stats.objective, load),
            result.method,
            members.join(", "),
            ms
        );
    }
    Ok(())
}
