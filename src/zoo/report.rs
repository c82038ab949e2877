//! `report.md` and `report.html` for a batch: the zoo table, a bar chart of heuristic vs
//! optimal vs bound (as % of the listed order's peak, so graphs of any size compare), and per
//! graph a memory timeline (live bytes per step, listed order against the optimised order)
//! and the optimised plan's arena layout. The HTML is self-contained: inline CSS and SVG,
//! no script, no external reference, so it opens offline.
//!
//! The plans are read back from the output folder and validated again, so a report never
//! draws a plan that a later edit broke.

use super::batch::{write_atomic, GraphResult};
use super::profile::profile;
use super::svg::{self, esc, mib, Series};
use super::ZooError;
use crate::graph::Graph;
use crate::plan::Plan;
use std::fmt::Write;
use std::path::Path;

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn load_plan(out: &Path, rel: &str, graph: &Graph) -> Result<Plan, ZooError> {
    let path = out.join(rel);
    let text = std::fs::read_to_string(&path).map_err(|e| ZooError::io(&path, e))?;
    let plan = Plan::parse(&text).map_err(|e| ZooError::Results {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    crate::validate(graph, &plan, None).map_err(|v| ZooError::Results {
        path: path.display().to_string(),
        message: format!("plan is invalid for {}: {v}", graph.name),
    })?;
    Ok(plan)
}

/// The zoo table's column headers.
const COLUMNS: [&str; 16] = [
    "graph",
    "ops",
    "naive",
    "LOAD listed",
    "listed peak",
    "heuristic",
    "optimal",
    "bound",
    "gap",
    "status",
    "seconds (heur/opt)",
    "vs naive",
    "vs listed",
    "fragmentation",
    "waste",
    "PyTorch reserved",
];

fn row(r: &GraphResult) -> [String; 16] {
    [
        r.graph.clone(),
        r.ops.to_string(),
        mib(r.naive_bytes),
        mib(r.listed_load_bytes),
        mib(r.listed_peak_bytes),
        mib(r.heuristic_peak_bytes),
        mib(r.optimal_peak_bytes),
        mib(r.lower_bound_bytes),
        pct(r.gap),
        r.optimal_status.clone(),
        format!("{:.2} / {:.2}", r.heuristic_seconds, r.optimal_seconds),
        pct(r.savings_vs_naive),
        pct(r.savings_vs_listed),
        pct(r.fragmentation),
        pct(r.waste),
        mib(r.pytorch_reserved_bytes),
    ]
}

const LEGEND: &str = "naive: every arena buffer of the listed order without reuse. LOAD: most bytes live at once in the listed order (no placement can do better for that order). listed peak: the listed order placed by the heuristics. heuristic: `--strategy heuristic --order auto`. optimal: `--strategy auto --order auto` within the time limit (status `optimal` when it meets the bound). bound: proven lower bound for every order; gap = (optimal − bound) / optimal. vs naive / vs listed: savings of the optimal plan. fragmentation: seed 001 §4.1's rate 1 − largest free block / total free memory over the arena [0, peak), averaged over the steps of the optimal plan. waste: 1 − LOAD / peak of the optimal plan. PyTorch reserved: simulated PyTorch CUDA caching allocator replaying the listed order (512 B rounding, 2 MiB small / 20 MiB large segments, best-fit with splitting, no cross-segment merging, segments cached).";

/// The cells of one budget row (report.md and report.html).
fn budget_cells(b: &super::batch::BudgetRow) -> Vec<String> {
    let m = |x: u64| format!("{:.1}", x as f64 / (1u64 << 20) as f64);
    vec![
        format!("{}%", b.percent),
        m(b.budget_bytes),
        b.strategy.clone(),
        if b.fits { "yes" } else { "no" }.to_string(),
        if b.fits {
            m(b.peak_bytes)
        } else {
            format!("({})", m(b.peak_bytes))
        },
        if b.fits {
            m(b.spilled_bytes)
        } else {
            "-".into()
        },
        if b.fits {
            b.recomputed_ops.to_string()
        } else {
            "-".into()
        },
        if b.fits {
            format!("{:.1}%", b.overhead_pct)
        } else {
            "-".into()
        },
        format!("{:.2}", b.seconds),
    ]
}

/// Writes `report.md` and `report.html` into `out` for the graphs and their results.
pub fn write_reports(out: &Path, items: &[(&Graph, &GraphResult)]) -> Result<(), ZooError> {
    let mut md = String::from("# memplan zoo report\n\n");
    if let Some((_, r)) = items.first() {
        let _ = writeln!(md, "Options: `{}`\n", r.options);
    }
    md.push_str(LEGEND);
    md.push_str("\n\n| ");
    md.push_str(&COLUMNS.join(" | "));
    md.push_str(" |\n|");
    md.push_str(&"---|".repeat(COLUMNS.len()));
    md.push('\n');
    for (_, r) in items {
        let _ = writeln!(md, "| {} |", row(r).join(" | "));
    }
    md.push_str("\nPer-graph timelines and arena layouts are in `report.html`.\n\n");
    for (_, r) in items {
        let _ = writeln!(
            md,
            "## {}\n\n- file: `{}` (hash {})\n- PyTorch eager would reserve {}; memplan's optimal arena is {} ({} less)\n- plans: [listed]({}), [heuristic]({}), [optimal]({})\n",
            r.graph,
            r.file,
            r.hash,
            mib(r.pytorch_reserved_bytes),
            mib(r.optimal_peak_bytes),
            pct(1.0 - r.optimal_peak_bytes as f64 / r.pytorch_reserved_bytes.max(1) as f64),
            r.plans.listed,
            r.plans.heuristic,
            r.plans.optimal
        );
        if !r.budgets.is_empty() {
            md.push_str("| budget | MiB | strategy | fits | peak MiB | spilled MiB | recomputed ops | overhead | s |\n|---|---:|---|---|---:|---:|---:|---:|---:|\n");
            for b in &r.budgets {
                let _ = writeln!(md, "| {} |", budget_cells(b).join(" | "));
            }
            md.push('\n');
        }
    }
    write_atomic(&out.join("report.md"), &md)?;

    let mut html = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>memplan zoo report</title><style>\
body{font-family:sans-serif;margin:1.5em;max-width:1200px}table{border-collapse:collapse;font-size:12px}\
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}td:first-child,th:first-child{text-align:left}\
th{background:#eee}section{margin-top:2em}.legend{font-size:12px;color:#444}</style></head><body>\n<h1>memplan zoo report</h1>\n",
    );
    if let Some((_, r)) = items.first() {
        let _ = writeln!(html, "<p>Options: <code>{}</code></p>", esc(&r.options));
    }
    let _ = writeln!(html, "<p class=\"legend\">{}</p>\n<table><tr>", esc(LEGEND));
    for c in COLUMNS {
        let _ = write!(html, "<th>{}</th>", esc(c));
    }
    html.push_str("</tr>\n");
    for (n, (_, r)) in items.iter().enumerate() {
        html.push_str("<tr>");
        for (k, cell) in row(r).iter().enumerate() {
            if k == 0 {
                let _ = write!(html, "<td><a href=\"#g{n}\">{}</a></td>", esc(cell));
            } else {
                let _ = write!(html, "<td>{}</td>", esc(cell));
            }
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    let series = [
        Series {
            name: "heuristic",
            color: "#e8a33d",
        },
        Series {
            name: "optimal",
            color: "#3d7be8",
        },
        Series {
            name: "lower bound",
            color: "#59b36b",
        },
    ];
    let bars: Vec<(String, Vec<f64>)> = items
        .iter()
        .map(|(_, r)| {
            let base = r.listed_peak_bytes.max(1) as f64;
            (
                r.graph.clone(),
                vec![
                    100.0 * r.heuristic_peak_bytes as f64 / base,
                    100.0 * r.optimal_peak_bytes as f64 / base,
                    100.0 * r.lower_bound_bytes as f64 / base,
                ],
            )
        })
        .collect();
    let _ = writeln!(
        html,
        "<h2>Peaks as % of the listed order's peak</h2>\n{}",
        svg::bar_chart("heuristic vs optimal vs bound", &series, &bars)
    );
    for (n, (g, r)) in items.iter().enumerate() {
        let listed = load_plan(out, &r.plans.listed, g)?;
        let optimal = load_plan(out, &r.plans.optimal, g)?;
        let pl = profile(g, &listed).map_err(|e| ZooError::Internal(e.to_string()))?;
        let po = profile(g, &optimal).map_err(|e| ZooError::Internal(e.to_string()))?;
        let _ = writeln!(
            html,
            "<section id=\"g{n}\"><h2>{}</h2><p>{} ops, {} tensors. Optimal peak {} ({}, gap {}), heuristic {}, listed order {}, bound {}. PyTorch eager would reserve {}.</p>",
            esc(&r.graph),
            r.ops,
            r.tensors,
            mib(r.optimal_peak_bytes),
            esc(&r.optimal_status),
            pct(r.gap),
            mib(r.heuristic_peak_bytes),
            mib(r.listed_peak_bytes),
            mib(r.lower_bound_bytes),
            mib(r.pytorch_reserved_bytes),
        );
        if !r.budgets.is_empty() {
            html.push_str("<h3>Budgets: overhead per budget and spill strategy</h3>\n<table><tr>");
            for c in [
                "budget",
                "MiB",
                "strategy",
                "fits",
                "peak MiB",
                "spilled MiB",
                "recomputed ops",
                "overhead",
                "s",
            ] {
                let _ = write!(html, "<th>{c}</th>");
            }
            html.push_str("</tr>\n");
            for b in &r.budgets {
                html.push_str("<tr>");
                for cell in budget_cells(b) {
                    let _ = write!(html, "<td>{}</td>", esc(&cell));
                }
                html.push_str("</tr>\n");
            }
            html.push_str("</table>\n");
        }
        let _ = writeln!(
            html,
            "<h3>Memory timeline (live bytes per step)</h3>\n{}",
            svg::timeline(
                &format!("{}: live bytes per step", r.graph),
                &[
                    ("listed order", "#999999", &pl.live),
                    ("optimized order", "#3d7be8", &po.live),
                ],
            )
        );
        let _ = writeln!(
            html,
            "<h3>Arena layout of the optimal plan</h3>\n{}\n</section>",
            svg::layout(
                &format!("{}: arena layout", r.graph),
                &po.blocks,
                po.steps,
                po.peak
            )
        );
    }
    html.push_str("</body></html>\n");
    write_atomic(&out.join("report.html"), &html)
}
