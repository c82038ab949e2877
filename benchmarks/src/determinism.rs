//! **determinism** (`--only determinism`) and **latency** (`--only latency`).
//!
//! `cargo run --release -p memplan-benchmarks -- ../shared --only determinism`: every
//! `SHARED_DIR/zoo/*.json` planned twice with the pipeline's options (by default
//! `PipelineOptions::default()`: effort in deterministic work units, the time limit only a
//! cap), the second time while one spinning thread per core keeps every core busy
//! ([`memplan::zoo::determinism::BusyLoad`], bounded: the threads stop by themselves). Per
//! graph: ops, peak, status, idle and loaded ms, and whether the two plans are byte-identical
//! once the timing fields are blanked ([`memplan::zoo::determinism::without_timing`]); then a
//! summary (identical graphs, statuses, total time). Every plan is validated.
//!
//! `cargo run --release -p memplan-benchmarks -- ../shared --only latency`: the heuristic
//! strategy on densenet121.16.train with `--order auto` and with `--order given` (median, min
//! and max of 10 runs, ms; the target is under 100 ms with `--order auto`), then the
//! default pipeline's time per zoo graph (one run each, with its peak and status).

use anyhow::{bail, Context, Result};
use memplan::graph::Graph;
use memplan::pipeline::PipelineOptions;
use memplan::planner::{OrderMode, Strategy};
use memplan::zoo::determinism::{cores, plan_idle_and_loaded};
use memplan::PlanStatus;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The graph of the latency target.
const LATENCY_GRAPH: &str = "densenet121.16.train";
/// Runs per latency figure.
const LATENCY_RUNS: usize = 10;

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn zoo_graphs(zoo: &Path) -> Result<Vec<(PathBuf, Graph)>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(zoo)
        .with_context(|| format!("reading {}", zoo.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
            let g = Graph::parse(&text).with_context(|| p.display().to_string())?;
            Ok((p, g))
        })
        .collect()
}

/// The determinism table (module doc).
pub fn determinism(zoo: &Path, options: &PipelineOptions) -> Result<()> {
    let graphs = zoo_graphs(zoo)?;
    let cores = cores();
    println!(
        "## Determinism: {} graphs, options {}, loaded runs with {cores} spinning threads\n",
        graphs.len(),
        options.canonical_json()
    );
    println!("| graph | ops | peak MiB | status | idle ms | loaded ms | identical |");
    println!("|---|---:|---:|---|---:|---:|---|");
    let started = Instant::now();
    let (mut same, mut total) = (0usize, 0usize);
    let mut statuses: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut differing = Vec::new();
    let (mut idle_total, mut loaded_total) = (0.0f64, 0.0f64);
    for (path, g) in &graphs {
        let c = plan_idle_and_loaded(g, options, cores)
            .with_context(|| format!("planning {}", path.display()))?;
        for (r, when) in [(&c.idle, "idle"), (&c.loaded, "loaded")] {
            if let Err(v) = memplan::validate(&r.graph, &r.plan, None) {
                bail!("{} ({when}): invalid plan: {v}", g.name);
            }
        }
        let status = |r: &memplan::PipelineResult| {
            r.plan
                .stats
                .status
                .map_or("-".to_string(), |s| s.to_string())
        };
        let (si, sl) = (status(&c.idle), status(&c.loaded));
        total += 1;
        if c.identical {
            same += 1;
        } else {
            differing.push(g.name.clone());
        }
        for s in [c.idle.plan.stats.status, c.loaded.plan.stats.status]
            .into_iter()
            .flatten()
        {
            *statuses.entry(s.as_str()).or_default() += 1;
        }
        idle_total += c.idle_ms;
        loaded_total += c.loaded_ms;
        println!(
            "| {} | {} | {:.2} | {} | {:.0} | {:.0} | {} |",
            g.name,
            g.ops.len(),
            mib(c.idle.plan.stats.peak_bytes),
            if si == sl {
                si
            } else {
                format!("{si} / {sl} (loaded)")
            },
            c.idle_ms,
            c.loaded_ms,
            if c.identical { "yes" } else { "NO" }
        );
    }
    println!();
    println!(
        "identical at idle and under load: {same} of {total} graphs{}",
        if differing.is_empty() {
            String::new()
        } else {
            format!(" (differing: {})", differing.join(", "))
        }
    );
    let st: Vec<String> = statuses.iter().map(|(s, n)| format!("{s} {n}")).collect();
    println!("statuses over both runs: {}", st.join(", "));
    println!(
        "pipeline time: idle {:.1} s, loaded {:.1} s; benchmark {:.1} s",
        idle_total / 1e3,
        loaded_total / 1e3,
        started.elapsed().as_secs_f64()
    );
    if statuses.contains_key(PlanStatus::TimeLimit.as_str()) {
        println!("note: a time_limit status means the wall-clock cap bound; such plans may differ");
    }
    Ok(())
}

/// Median, min and max of `runs` timed pipeline runs (ms), and the last run's peak.
fn timed(g: &Graph, options: &PipelineOptions, runs: usize) -> Result<(f64, f64, f64, u64)> {
    let mut ms = Vec::with_capacity(runs);
    let mut peak = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let r = crate::plan_checked(g, options, None)?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        peak = r.plan.stats.peak_bytes;
    }
    ms.sort_by(f64::total_cmp);
    let median = if ms.is_empty() {
        0.0
    } else if ms.len() % 2 == 1 {
        ms[ms.len() / 2]
    } else {
        (ms[ms.len() / 2 - 1] + ms[ms.len() / 2]) / 2.0
    };
    Ok((
        median,
        ms.first().copied().unwrap_or(0.0),
        ms.last().copied().unwrap_or(0.0),
        peak,
    ))
}

/// The latency figures (module doc).
pub fn latency(zoo: &Path, options: &PipelineOptions) -> Result<()> {
    let path = zoo.join(format!("{LATENCY_GRAPH}.json"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let g = Graph::parse(&text).with_context(|| path.display().to_string())?;
    println!(
        "## Latency: {} ({} ops), heuristic strategy, {LATENCY_RUNS} runs\n",
        g.name,
        g.ops.len()
    );
    println!("| order | median ms | min ms | max ms | peak MiB |");
    println!("|---|---:|---:|---:|---:|");
    for (order, name) in [(OrderMode::Auto, "auto"), (OrderMode::Given, "given")] {
        let o = PipelineOptions {
            order,
            strategy: Strategy::Heuristic,
            ..options.clone()
        };
        let (median, min, max, peak) = timed(&g, &o, LATENCY_RUNS)?;
        println!(
            "| {name} | {median:.1} | {min:.1} | {max:.1} | {:.2} |",
            mib(peak)
        );
    }
    println!("\n## Default pipeline time per zoo graph (one run each)\n");
    println!("| graph | ops | ms | peak MiB | status |");
    println!("|---|---:|---:|---:|---|");
    let mut total = 0.0;
    for (_, g) in zoo_graphs(zoo)? {
        let t = Instant::now();
        let r = crate::plan_checked(&g, options, None)?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        total += ms;
        println!(
            "| {} | {} | {ms:.0} | {:.2} | {} |",
            g.name,
            g.ops.len(),
            mib(r.plan.stats.peak_bytes),
            r.plan
                .stats
                .status
                .map_or("-".to_string(), |s| s.to_string())
        );
    }
    println!("\ntotal: {:.1} s", total / 1e3);
    Ok(())
}
