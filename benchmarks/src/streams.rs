//! `--only streams`: parallel plans. For googlenet and inception_v3 inference and a training
//! graph (googlenet.8.train), plans with K = 1, 2 and 4 streams (default options: the peak
//! may grow to 1.10 × the single-stream peak) and with a budget equal to the single-stream
//! peak; validates every plan and prints the peak, the modelled makespan (cost model, one
//! queue per stream), the speed-up over one stream, the events and the candidate kept.

use anyhow::{Context, Result};
use memplan::budget::BudgetSpec;
use memplan::graph::Graph;
use memplan::pipeline::{self, Control, PipelineOptions};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The graphs: the committed googlenet inference export, then the zoo's.
pub fn graphs(shared: &Path) -> Vec<PathBuf> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("graphs/streams");
    let mut v = vec![here.join("googlenet.1.inference.json")];
    for name in ["inception_v3.1.inference.json", "googlenet.8.train.json"] {
        let p = shared.join("zoo").join(name);
        if p.is_file() {
            v.push(p);
        }
    }
    v
}

/// Prints the table.
pub fn run(graphs: &[PathBuf], base: &PipelineOptions) -> Result<()> {
    println!("| graph | streams | cap | peak (B) | peak / 1-stream | makespan (us) | speed-up | events | candidate | planning (ms) |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for path in graphs {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let g = Graph::parse(&text).with_context(|| path.display().to_string())?;
        let single = pipeline::run(&g, base, &Control::default())?.plan;
        let p1 = single.stats.peak_bytes;
        for (k, budget) in [(1, false), (2, false), (4, false), (2, true), (4, true)] {
            let o = PipelineOptions {
                streams: k,
                budget: budget.then_some(BudgetSpec::Bytes(p1)),
                ..base.clone()
            };
            let t = Instant::now();
            let plan = pipeline::run(&g, &o, &Control::default())?.plan;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            memplan::validate(&g, &plan, budget.then_some(p1))
                .map_err(|v| anyhow::anyhow!("{}: {k} streams: {v}", g.name))?;
            let (makespan, serial, events, cand) = match &plan.stats.streams {
                Some(s) => (
                    s.makespan_us,
                    s.serial_makespan_us,
                    s.events,
                    s.candidate.clone(),
                ),
                None => {
                    let m = memplan::streams::makespan_us(&g, &plan, &o.profile()?);
                    (m, m, 0, "single-stream".into())
                }
            };
            println!(
                "| {} | {k} | {} | {} | {:.4} | {:.1} | {:.2}x | {events} | {cand} | {ms:.0} |",
                g.name,
                if budget {
                    "budget = 1-stream peak"
                } else {
                    "1.10 x"
                },
                plan.stats.peak_bytes,
                plan.stats.peak_bytes as f64 / p1 as f64,
                makespan,
                serial / makespan.max(1e-9),
            );
        }
    }
    Ok(())
}
