//! `memplan reserve`: the P99 reservation of a symbolic plan for a distribution of bindings
//! (`memplan::symbolic::reserve_report`): a table on stdout, the JSON report with `-o`; with
//! `--batching`, the dynamic batcher's utilisation; with `--graph`, the budgeted fallback plans
//! above the quantile (written to `--fallback-dir`).

use crate::args::ReserveArgs;
use crate::common::{bad, mib, read};
use crate::output::{check_folder, check_outputs, write_files};
use anyhow::Result;
use memplan::symbolic::{
    parse_histogram, reserve_report, BatchingOptions, SymbolicGraph, SymbolicPlan,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Runs `memplan reserve`.
pub fn reserve(a: ReserveArgs) -> Result<ExitCode> {
    let plan_label = a.plan.display().to_string();
    let hist_label = a.histogram.display().to_string();
    let mut inputs: Vec<(&str, &Path)> =
        vec![("the plan", &a.plan), ("the histogram", &a.histogram)];
    if let Some(g) = &a.graph {
        inputs.push(("the --graph", g));
    }
    if let Some(path) = &a.output {
        check_outputs(&inputs, &[("-o", path)])?;
    }
    // The folder of the fallbacks before any work: a file there is the user's mistake (the
    // folder itself is created when the fallbacks are written).
    if let Some(dir) = &a.fallback_dir {
        check_folder("--fallback-dir", dir)?;
    }
    let plan =
        SymbolicPlan::parse(&read(&a.plan)?).map_err(|e| bad(format!("{plan_label}: {e}")))?;
    let samples =
        parse_histogram(&read(&a.histogram)?).map_err(|e| bad(format!("{hist_label}: {e}")))?;
    let graph = match &a.graph {
        None => None,
        Some(path) => {
            let g = SymbolicGraph::parse(&read(path)?)
                .map_err(|e| bad(format!("{}: {e}", path.display())))?;
            if g.symbols.is_empty() {
                return Err(bad(format!(
                    "--graph {}: not a symbolic graph (no \"symbols\"); give the symbolic graph \
                     the plan {plan_label} was made for",
                    path.display()
                )));
            }
            memplan::symbolic::check_plan_graph(&plan, &g)
                .map_err(|e| bad(format!("--graph {}: {e}", path.display())))?;
            Some(g)
        }
    };
    let batching = a.batching.then_some(BatchingOptions {
        window: a.window,
        requests: a.requests,
        seed: a.seed,
    });
    let (report, pairs) = reserve_report(
        &plan,
        &samples,
        a.quantile,
        a.split.as_deref(),
        batching.as_ref(),
        graph.as_ref(),
        &memplan::PipelineOptions::default(),
    )
    .map_err(|e| bad(format!("{hist_label}: {e}")))?;
    let r = &report.reservation;
    println!(
        "{}: reserve {} B ({}) for quantile {} (binding {}); {:.1} % of the weight fits, \
         average utilisation {:.2} %",
        plan.doc().graph,
        r.reserved_bytes,
        mib(r.reserved_bytes),
        r.quantile,
        r.quantile_binding,
        r.fitting_weight * 100.0,
        r.average_utilisation * 100.0
    );
    println!(
        "{:<16} {:>10} {:>14} {:>12}  fallback",
        "binding", "weight", "peak (B)", "utilisation"
    );
    for b in &r.bindings {
        let fallback = match &b.fallback {
            None => "fits".to_string(),
            Some(f) => match &f.split {
                Some(s) => format!("split {s}; or a budgeted plan at {} B", f.budget_bytes),
                None => format!("a budgeted plan at {} B", f.budget_bytes),
            },
        };
        println!(
            "{:<16} {:>10} {:>14} {:>11.2}%  {fallback}",
            b.binding.to_string(),
            b.weight,
            b.peak_bytes,
            b.utilisation * 100.0
        );
    }
    if let (Some(rep), Some(symbol)) = (&report.batching, &a.split) {
        println!(
            "dynamic batching (window {}, {} requests, seed {}): {symbol} up to {} per run; \
             {} runs, {:.2} requests and {symbol}={:.2} per run on average, {} requests split; \
             average utilisation {:.2} % (min {:.2} %)",
            rep.window,
            rep.requests,
            rep.seed,
            rep.capacity,
            rep.runs,
            rep.average_requests_per_run,
            rep.average_value,
            rep.split_requests,
            rep.average_utilisation * 100.0,
            rep.min_utilisation * 100.0
        );
    }
    if let Some(dir) = &a.fallback_dir {
        std::fs::create_dir_all(dir).map_err(|e| {
            bad(format!(
                "--fallback-dir {}: cannot create the folder: {e}",
                dir.display()
            ))
        })?;
    }
    // The fallbacks and the report, written together once all are known.
    let mut files: Vec<(&str, PathBuf, String)> = Vec::new();
    for (f, pair) in report.fallback_plans.iter().flatten().zip(&pairs) {
        match (&f.reason, f.peak_bytes) {
            (Some(why), _) => println!("fallback at {}: no plan fits: {why}", f.binding),
            (None, Some(peak)) => println!(
                "fallback at {}: {} ({} B, {} B spilled, {} ops recomputed, modelled overhead \
                 {:.1} %)",
                f.binding,
                if f.fits { "fits" } else { "does not fit" },
                peak,
                f.spilled_out_bytes,
                f.recomputed_ops,
                f.overhead_pct
            ),
            (None, None) => {}
        }
        if let (Some(dir), Some((g, p)), true) = (&a.fallback_dir, pair, f.fits) {
            let stem = f.binding.to_string();
            files.push((
                "--fallback-dir file",
                dir.join(format!("{stem}.graph.json")),
                format!("{}\n", g.to_json()),
            ));
            files.push((
                "--fallback-dir file",
                dir.join(format!("{stem}.plan.json")),
                format!("{}\n", p.to_json()),
            ));
        }
    }
    if let Some(path) = &a.output {
        let json = serde_json::to_string_pretty(&report)?;
        files.push(("-o", path.clone(), format!("{json}\n")));
    }
    let outputs: Vec<(&str, &Path)> = files.iter().map(|(r, p, _)| (*r, p.as_path())).collect();
    check_outputs(&inputs, &outputs)?;
    let bytes: Vec<(&Path, &[u8])> = files
        .iter()
        .map(|(_, p, t)| (p.as_path(), t.as_bytes()))
        .collect();
    write_files(&bytes)?;
    Ok(ExitCode::SUCCESS)
}
