//! **symbolic** (`--only symbolic [--graphs DIR]`; not part of the default run): one plan for a
//! range of batch sizes (issue 17's targets).
//!
//! For every symbolic graph in DIR (default `benchmarks/graphs/symbolic/`: resnet50 and
//! vit_b_16 training with a batch `B` in 1..=64, written by `tools/export_pytorch.py
//! --dynamic-batch`, see `benchmarks/graphs/symbolic/README.md`):
//!
//! 1. `plan_symbolic_with` with the defaults (`PipelineOptions::default()`, pieces up to
//!    `SymbolicOptions::default()`): planning time and pieces;
//! 2. at **every** value of the graph's one symbol: the instantiated plan, replayed by the
//!    validator, its peak against a plan made for that binding alone (the default pipeline on
//!    the instantiated graph); the worst ratio and the values above 1.05;
//! 3. instantiation time at the middle of the range (median, p90 and min of 200);
//! 4. the P99 reservation for two skewed request distributions, geometric with ratios 0.9 and
//!    0.8 over the range (weight `1000·r^(B−1)`): the reserved bytes, the weighted utilisation
//!    when every request runs alone, and with the dynamic batcher
//!    (`memplan::symbolic::batching`, window 16, 10,000 requests, seed 0).

use anyhow::{bail, Context, Result};
use memplan::pipeline::PipelineOptions;
use memplan::symbolic::{
    plan_symbolic_with, reserve, simulate_batching, BatchingOptions, Binding, SymbolicGraph,
    SymbolicOptions,
};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The graphs: `*.json` in `dir`, sorted.
pub fn graphs(dir: Option<&Path>) -> Result<Vec<PathBuf>> {
    let dir = dir
        .map(Path::to_path_buf)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("graphs/symbolic"));
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    out.sort();
    if out.is_empty() {
        bail!("no symbolic graphs (*.json) in {}", dir.display());
    }
    Ok(out)
}

const MIB: f64 = 1024.0 * 1024.0;

/// Runs the table over `graphs`.
pub fn run(graphs: &[PathBuf]) -> Result<()> {
    let opts = PipelineOptions::default();
    let mut all_within = true;
    for path in graphs {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let sg = SymbolicGraph::parse(&text).with_context(|| path.display().to_string())?;
        if sg.symbols.len() != 1 {
            bail!(
                "{}: the table sweeps one symbol; this graph declares {}",
                path.display(),
                sg.symbols.len()
            );
        }
        let (symbol, range) = sg
            .symbols
            .iter()
            .next()
            .map(|(s, r)| (s.clone(), *r))
            .context("no symbol")?;
        let started = Instant::now();
        let sp = plan_symbolic_with(&sg, &opts, &SymbolicOptions::default())?;
        let plan_s = started.elapsed().as_secs_f64();
        let pieces = sp
            .pieces()
            .map(|(_, r)| {
                r.iter()
                    .map(|r| format!("[{}, {}]", r.min, r.max))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| "one".into());
        println!(
            "\n## {} ({} ops, {} tensors, {symbol} in {}..={})\n",
            sg.name,
            sg.workspaces.len(),
            sg.sizes.len(),
            range.min,
            range.max
        );
        println!("planning {plan_s:.2} s; pieces {pieces}\n");

        let points: Vec<Binding> = (range.min..=range.max)
            .map(|v| Binding::new().with(&symbol, v))
            .collect();
        for b in &points {
            let g = sg.instantiate(b)?;
            let p = sp.instantiate(b)?;
            if let Err(v) = memplan::validate(&g, &p, None) {
                bail!("{} at {b}: the instantiated plan is invalid: {v}", sg.name);
            }
        }
        let started = Instant::now();
        let profile = sp.peak_profile(&sg, &points, &opts)?;
        let per_binding_s = started.elapsed().as_secs_f64();
        println!("| {symbol} | instantiated MiB | per-binding MiB | ratio |");
        println!("|---|---|---|---|");
        let mut above = Vec::new();
        for p in &profile.points {
            let v = p.binding.0[&symbol];
            if p.ratio > 1.05 {
                above.push(v);
            }
            if v <= 8 || v % 8 == 0 || p.ratio > 1.03 {
                println!(
                    "| {v} | {:.1} | {:.1} | {:.4} |",
                    p.peak_bytes as f64 / MIB,
                    p.per_binding_bytes as f64 / MIB,
                    p.ratio
                );
            }
        }
        let worst = profile
            .points
            .iter()
            .max_by(|a, b| a.ratio.total_cmp(&b.ratio))
            .context("no points")?;
        println!(
            "\nworst ratio {:.4} at {}; above 1.05: {} of {} values {:?} (per-binding plans: {per_binding_s:.1} s)",
            worst.ratio,
            worst.binding,
            above.len(),
            points.len(),
            above
        );
        all_within &= above.is_empty();

        let mid = Binding::new().with(&symbol, (range.min + range.max) / 2);
        let mut times = Vec::with_capacity(200);
        for _ in 0..200 {
            let t = Instant::now();
            std::hint::black_box(sp.instantiate(&mid)?);
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "instantiate at {mid} ({} instructions): median {:.0} µs, p90 {:.0} µs, min {:.0} µs",
            sp.doc().instructions.len(),
            times[times.len() / 2],
            times[times.len() * 9 / 10],
            times[0]
        );

        for r in [0.9f64, 0.8] {
            let samples: Vec<(Binding, f64)> = (range.min..=range.max)
                .map(|v| {
                    let w = 1000.0 * r.powi((v - range.min) as i32);
                    (Binding::new().with(&symbol, v), w)
                })
                .collect();
            let res = reserve(&sp, &samples, 0.99, Some(&symbol))?;
            let batched =
                simulate_batching(&sp, &samples, &res, &symbol, &BatchingOptions::default())?;
            println!(
                "geometric {r}: P99 at {} reserves {:.1} MiB ({:.2} % of the weight fits); \
                 utilisation alone {:.2} %, with dynamic batching {:.2} % (min {:.2} %, \
                 {symbol}={:.1} and {:.2} requests per run, capacity {})",
                res.quantile_binding,
                res.reserved_bytes as f64 / MIB,
                res.fitting_weight * 100.0,
                res.average_utilisation * 100.0,
                batched.average_utilisation * 100.0,
                batched.min_utilisation * 100.0,
                batched.average_value,
                batched.average_requests_per_run,
                batched.capacity
            );
        }
    }
    println!(
        "\nevery instantiated peak within 1.05 x the per-binding plan: {}",
        if all_within { "yes" } else { "no" }
    );
    Ok(())
}
