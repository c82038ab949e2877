//! **fusion** (`--only fusion`): the fusion pass on every `*.inference.json` of the zoo (and
//! every `*.json` in `--graphs DIR`, e.g. re-exported high-resolution models): ops before and
//! after, fused ops, arena tensor bytes the pass removes, and the planned peak without and
//! with fusion (heuristic strategy, `--order auto`, the run's `--time-limit` as the cap), with
//! the change in percent. Both plans come from the pipeline: without rewrites, and with the
//! `fuse` rewrite (whose pass report gives the op and byte counts). Every plan is replayed by
//! the validator against the graph it refers to; a failure aborts the run.

use anyhow::{bail, Context, Result};
use memplan::graph::Graph;
use memplan::pipeline::{PipelineOptions, Rewrite};
use memplan::planner::{OrderMode, Strategy};
use std::path::{Path, PathBuf};

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// Prints the fusion table for `graphs`.
pub fn run(graphs: &[PathBuf], base: &PipelineOptions) -> Result<()> {
    println!(
        "| graph | ops before | ops after | fused ops | arena tensor MiB removed | peak MiB unfused | peak MiB fused | change % |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let unfused = PipelineOptions {
        order: OrderMode::Auto,
        strategy: Strategy::Heuristic,
        rewrite: Vec::new(),
        ..base.clone()
    };
    let fused = PipelineOptions {
        rewrite: vec![Rewrite::Fuse],
        ..unfused.clone()
    };
    for path in graphs {
        let g = Graph::parse(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| path.display().to_string())?;
        let plain = crate::plan_checked(&g, &unfused, None)?;
        let out = crate::plan_checked(&g, &fused, None)?;
        let f = &out.graph;
        let peaks = [plain.plan.stats.peak_bytes, out.plan.stats.peak_bytes];
        let Some(r) = out.passes.iter().find(|r| r.pass == "fuse") else {
            bail!("{}: the pipeline ran no fuse pass", g.name);
        };
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:+.1} |",
            g.name,
            r.ops_before,
            r.ops_after,
            f.ops.iter().filter(|o| o.fused.is_some()).count(),
            mib(r
                .arena_tensor_bytes_before
                .saturating_sub(r.arena_tensor_bytes_after)),
            mib(peaks[0]),
            mib(peaks[1]),
            if peaks[0] == 0 {
                0.0
            } else {
                (peaks[1] as f64 - peaks[0] as f64) / peaks[0] as f64 * 100.0
            }
        );
    }
    Ok(())
}

/// The zoo's inference graphs plus every graph in `extra`, sorted within each directory.
pub fn graphs(zoo: &Path, extra: Option<&Path>) -> Result<Vec<PathBuf>> {
    let list = |dir: &Path, suffix: &str| -> Result<Vec<PathBuf>> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.to_string_lossy().ends_with(suffix))
            .collect();
        v.sort();
        Ok(v)
    };
    let mut v = list(zoo, ".inference.json")?;
    if let Some(d) = extra {
        v.extend(list(d, ".json")?);
    }
    Ok(v)
}
