//! **conv-algos** benchmark (`--only conv-algos [--graphs DIR]`): for every
//! `*.inference.json` graph of the zoo (and every `*.json` in DIR, e.g. the 512² / 1024²
//! re-exports of benchmarks/scale_resolution.py), the planned peak and the modelled time
//! (H200 cost model, [`memplan::conv_algo`]) with the conv algorithms `fastest`,
//! `min-memory` and `auto`; then under a budget of 70 % of the fastest plan's peak (strategy
//! `best`, convs starting at their fastest algorithm and downgradable): whether it fits, the
//! modelled time overhead versus the fastest unconstrained plan, the algorithm mix, the
//! downgrades and the bytes spilled. Every plan comes from the pipeline with the `conv-algos`
//! rewrite (heuristic strategy; the budgeted one with `budget` set and the mode `auto`) and is
//! validated against the graph it refers to; a failure aborts the run.

use anyhow::{Context, Result};
use memplan::budget::BudgetSpec;
use memplan::conv_algo::{self, ConvAlgoMode};
use memplan::cost::DeviceProfile;
use memplan::graph::Graph;
use memplan::pipeline::{PipelineOptions, Rewrite};
use memplan::planner::Strategy;
use std::path::{Path, PathBuf};

/// Budget as a share of the fastest plan's peak.
pub const BUDGET_SHARE: f64 = 0.70;
/// The target: modelled overhead under that budget.
pub const TARGET_PCT: f64 = 5.0;

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn json_files(dir: &Path, filter: impl Fn(&str) -> bool) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && p.file_name().is_some_and(|n| filter(&n.to_string_lossy()))
        })
        .collect();
    v.sort();
    Ok(v)
}

/// Runs the benchmark over `zoo` (inference graphs) and `extra` (all graphs), printing a
/// markdown table; returns how many graphs met the target.
pub fn run(zoo: &Path, extra: Option<&Path>, base: &PipelineOptions) -> Result<()> {
    let mut graphs = json_files(zoo, |n| n.ends_with(".inference.json"))?;
    if let Some(dir) = extra {
        graphs.extend(json_files(dir, |_| true)?);
    }
    let profile = DeviceProfile::h200();
    let opts = PipelineOptions {
        strategy: Strategy::Heuristic,
        rewrite: vec![Rewrite::ConvAlgos],
        device_profile: Some(profile.clone()),
        ..base.clone()
    };
    println!(
        "| graph | convs | peak fastest MiB | peak min-mem MiB | peak auto MiB | time fastest us | time min-mem us | time auto us | budget MiB (70 %) | fits | overhead vs fastest % | algorithm mix under budget | downgrades (+us) | spilled MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let (mut met, mut total) = (0, 0);
    for path in &graphs {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let g = Graph::parse(&text).with_context(|| path.display().to_string())?;
        let mut peaks = Vec::new();
        let mut times = Vec::new();
        for mode in [
            ConvAlgoMode::Fastest,
            ConvAlgoMode::MinMemory,
            ConvAlgoMode::Auto,
        ] {
            let o = PipelineOptions {
                conv_algos: mode,
                ..opts.clone()
            };
            let c = crate::plan_checked(&g, &o, None)
                .with_context(|| format!("{} {}", g.name, mode.name()))?;
            peaks.push(c.plan.stats.peak_bytes);
            times.push(conv_algo::total_us(&profile, &c.graph));
        }
        let convs: usize = conv_algo::algo_mix(&g).values().sum();
        let budget_bytes = ((peaks[0] as f64 * BUDGET_SHARE).floor() as u64).max(1);
        // Under a budget the pipeline starts every conv at its fastest algorithm and, with
        // `auto`, lets the spill strategies downgrade them.
        let budgeted = PipelineOptions {
            conv_algos: ConvAlgoMode::Auto,
            budget: Some(BudgetSpec::Bytes(budget_bytes)),
            ..opts.clone()
        };
        let r = memplan::pipeline::run(&g, &budgeted, &memplan::pipeline::Control::default());
        let row = match r {
            Ok(r) => {
                if let Err(v) = memplan::validate(&r.graph, &r.plan, Some(budget_bytes)) {
                    anyhow::bail!("{}: invalid budgeted plan: {v}", g.name);
                }
                let b = r.plan.stats.budget.clone().unwrap_or_default();
                // The budget's base is the fastest graph's op times: overhead vs fastest.
                let pct = (b.step_us - times[0]) / times[0] * 100.0;
                total += 1;
                if pct <= TARGET_PCT {
                    met += 1;
                }
                format!(
                    "yes | {:.2} | {} | {} (+{:.1}) | {:.2}",
                    pct,
                    b.algo_mix
                        .iter()
                        .map(|(a, n)| format!("{a} {n}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    b.algo_downgrades,
                    b.algo_downgrade_us,
                    mib(b.spilled_out_bytes)
                )
            }
            Err(e) => {
                total += 1;
                format!("no ({e}) | - | - | - | -")
            }
        };
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {:.2} | {} |",
            g.name,
            convs,
            mib(peaks[0]),
            mib(peaks[1]),
            mib(peaks[2]),
            times[0],
            times[1],
            times[2],
            mib(budget_bytes),
            row
        );
    }
    println!();
    println!(
        "budget {:.0} % of the fastest peak: overhead <= {TARGET_PCT} % on {met} of {total} graphs",
        BUDGET_SHARE * 100.0
    );
    Ok(())
}
