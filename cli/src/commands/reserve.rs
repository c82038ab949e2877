//! `memplan reserve`: the P99 reservation of a symbolic plan for a distribution of bindings
//! (`memplan::symbolic::reserve_report`): a table on stdout, the JSON report with `-o`; with
//! `--batching`, the dynamic batcher's utilisation; with `--graph`, the budgeted fallback plans
//! above the quantile (written to `--fallback-dir`).

use crate::args::ReserveArgs;
use crate::common::{bad, mib, read, write_out};
use anyhow::Result;
use memplan::symbolic::{
    parse_histogram, reserve_report, BatchingOptions, SymbolicGraph, SymbolicPlan,
};
use std::process::ExitCode;

/// Runs `memplan reserve`.
pub fn reserve(a: ReserveArgs) -> Result<ExitCode> {
    let plan_label = a.plan.display().to_string();
    let hist_label = a.histogram.display().to_string();
    let plan =
        SymbolicPlan::parse(&read(&a.plan)?).map_err(|e| bad(format!("{plan_label}: {e}")))?;
    let samples =
        parse_histogram(&read(&a.histogram)?).map_err(|e| bad(format!("{hist_label}: {e}")))?;
    let graph = match &a.graph {
        None => None,
        Some(path) => Some(
            SymbolicGraph::parse(&read(path)?)
                .map_err(|e| bad(format!("{}: {e}", path.display())))?,
        ),
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
        std::fs::create_dir_all(dir)
            .map_err(|e| bad(format!("cannot create {}: {e}", dir.display())))?;
    }
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
            write_out(
                &Some(dir.join(format!("{stem}.graph.json"))),
                &format!("{}\n", g.to_json()),
            )?;
            write_out(
                &Some(dir.join(format!("{stem}.plan.json"))),
                &format!("{}\n", p.to_json()),
            )?;
        }
    }
    if a.output.is_some() {
        let json = serde_json::to_string_pretty(&report)?;
        write_out(&a.output, &format!("{json}\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}
