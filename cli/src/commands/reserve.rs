//! `memplan reserve`: the P99 reservation of a symbolic plan for a histogram of bindings
//! (`memplan::symbolic::reserve`): a table on stdout, the JSON reservation with `-o`.

use crate::args::ReserveArgs;
use crate::common::{bad, mib, read, write_out};
use anyhow::Result;
use memplan::symbolic::{parse_histogram, reserve as reserve_for, SymbolicPlan};
use std::process::ExitCode;

/// Runs `memplan reserve`.
pub fn reserve(a: ReserveArgs) -> Result<ExitCode> {
    let plan_label = a.plan.display().to_string();
    let hist_label = a.histogram.display().to_string();
    let plan =
        SymbolicPlan::parse(&read(&a.plan)?).map_err(|e| bad(format!("{plan_label}: {e}")))?;
    let samples =
        parse_histogram(&read(&a.histogram)?).map_err(|e| bad(format!("{hist_label}: {e}")))?;
    let r = reserve_for(&plan, &samples, a.quantile, a.split.as_deref())
        .map_err(|e| bad(format!("{hist_label}: {e}")))?;
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
    if a.output.is_some() {
        let json = serde_json::to_string_pretty(&r)?;
        write_out(&a.output, &format!("{json}\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}
