//! `report.md` and `report.html` for a batch: the zoo table, a bar chart of heuristic vs
//! full pipeline vs bound (as % of the listed order's peak, so graphs of any size compare),
//! and per graph a memory timeline (live bytes per step, listed order against the full
//! pipeline's order) and the full plan's arena layout. The HTML is self-contained: inline CSS
//! and SVG, no script, no external reference, so it opens offline.
//!
//! The full pipeline's column holds the peak of the batch's base options, whatever its
//! status; the status column says what that peak is (`optimal` only when it meets the proven
//! bound), and the bound and gap columns say how far it may be from the optimum.
//!
//! The plans are read back from the output folder and validated again against the graph as
//! given ([`super::batch::check_against_original`]), so a report never draws a plan that a
//! later edit broke.

use super::batch::{check_against_original, write_atomic, GraphResult};
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

/// A saved plan and the graph it refers to (the carried rewritten graph, or `graph`), checked
/// against `graph` as given.
fn load_plan(out: &Path, rel: &str, graph: &Graph) -> Result<(Graph, Plan), ZooError> {
    let path = out.join(rel);
    let text = std::fs::read_to_string(&path).map_err(|e| ZooError::io(&path, e))?;
    let plan = Plan::parse(&text).map_err(|e| ZooError::Results {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    let bad = |m: String| ZooError::Results {
        path: path.display().to_string(),
        message: format!("plan is invalid for {}: {m}", graph.name),
    };
    check_against_original(graph, &plan, None).map_err(bad)?;
    let replay =
        crate::pipeline::graph_for_plan(graph.clone(), &plan).map_err(|e| bad(e.to_string()))?;
    Ok((replay, plan))
}

/// The zoo table's column headers.
const COLUMNS: [&str; 16] = [
    "graph",
    "ops",
    "naive",
    "LOAD listed",
    "listed peak",
    "heuristic",
    "full pipeline",
    "bound",
    "gap",
    "full pipeline status",
    "seconds (heur/full)",
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
        mib(r.full_peak_bytes),
        mib(r.lower_bound_bytes),
        pct(r.gap),
        r.full_status.to_string(),
        format!("{:.2} / {:.2}", r.heuristic_seconds, r.full_seconds),
        pct(r.savings_vs_naive),
        pct(r.savings_vs_listed),
        pct(r.fragmentation),
        pct(r.waste),
        mib(r.pytorch_reserved_bytes),
    ]
}

const LEGEND: &str = "Every plan comes from the planning pipeline (`memplan::pipeline`) with the options above. naive: every arena buffer of the listed order without reuse. LOAD: most bytes live at once in the listed order of the graph the listed plan refers to, rewritten or not (no placement can do better for that order). listed peak: the listed order placed by the heuristics (order given, strategy heuristic). heuristic: order auto, strategy heuristic. full pipeline: the peak with the batch's pipeline options as they are (by default order auto, strategy auto, effort in deterministic work units, the time limit as a cap); its status says what it is: `optimal` when the peak meets the proven bound, `feasible` when the work limit was reached with a gap, `time_limit` when the wall-clock cap bound, `heuristic_only` for the heuristic strategy. bound: proven lower bound for every order; gap = (full − bound) / full. vs naive / vs listed: savings of the full plan. fragmentation: the fragmentation rate 1 − largest free block / total free memory over the arena [0, peak), averaged over the steps of the full plan. waste: 1 − LOAD / peak of the full plan. PyTorch reserved: simulated PyTorch CUDA caching allocator replaying the listed order (512 B rounding, 2 MiB small / 20 MiB large segments, best-fit with splitting, no cross-segment merging, segments cached).";

/// The cells of one budget row (report.md and report.html).
fn budget_cells(b: &super::batch::BudgetRow) -> Vec<String> {
    let m = |x: u64| format!("{:.1}", x as f64 / (1u64 << 20) as f64);
    vec![
        format!("{}%", b.percent),
        m(b.budget_bytes),
        b.strategy.clone(),
        match (b.fits, b.status) {
            (true, _) => "yes".to_string(),
            (false, Some(s)) => format!("no ({s})"),
            (false, None) => "no".to_string(),
        },
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

/// `text` as Markdown text that stays in its table cell or heading: `\`, `|` and the HTML
/// specials escaped, line breaks as spaces (a graph's name is any string; emphasis marks are
/// left alone, so `mobilenet_v2` reads as written).
fn md_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' | '|' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// `text` for a Markdown code span: backticks and line breaks cannot appear in one, so they
/// become `'` and spaces.
fn md_code(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '`' => '\'',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
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
        let cells: Vec<String> = row(r).iter().map(|c| md_text(c)).collect();
        let _ = writeln!(md, "| {} |", cells.join(" | "));
    }
    md.push_str("\nPer-graph timelines and arena layouts are in `report.html`.\n\n");
    for (_, r) in items {
        let _ = writeln!(
            md,
            "## {}\n\n- file: `{}` (hash {})\n- PyTorch eager would reserve {}; memplan's full-pipeline arena is {} ({} less; status {})\n- plans: [listed]({}), [heuristic]({}), [full pipeline]({}){}\n",
            md_text(&r.graph),
            md_code(&r.file),
            r.hash,
            mib(r.pytorch_reserved_bytes),
            mib(r.full_peak_bytes),
            pct(1.0 - r.full_peak_bytes as f64 / r.pytorch_reserved_bytes.max(1) as f64),
            r.full_status,
            r.plans.listed,
            r.plans.heuristic,
            r.plans.full,
            if r.rewritten {
                " (the plans carry the rewritten graph they refer to)"
            } else {
                ""
            }
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
            name: "full pipeline",
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
                    100.0 * r.full_peak_bytes as f64 / base,
                    100.0 * r.lower_bound_bytes as f64 / base,
                ],
            )
        })
        .collect();
    let _ = writeln!(
        html,
        "<h2>Peaks as % of the listed order's peak</h2>\n{}",
        svg::bar_chart("heuristic vs full pipeline vs bound", &series, &bars)
    );
    for (n, (g, r)) in items.iter().enumerate() {
        let (lg, listed) = load_plan(out, &r.plans.listed, g)?;
        let (fg, full) = load_plan(out, &r.plans.full, g)?;
        let pl = profile(&lg, &listed).map_err(|e| ZooError::Internal(e.to_string()))?;
        let po = profile(&fg, &full).map_err(|e| ZooError::Internal(e.to_string()))?;
        let _ = writeln!(
            html,
            "<section id=\"g{n}\"><h2>{}</h2><p>{} ops, {} tensors. Full pipeline peak {} (status {}, gap {} to the bound), heuristic {}, listed order {}, bound {}. PyTorch eager would reserve {}.</p>",
            esc(&r.graph),
            r.ops,
            r.tensors,
            mib(r.full_peak_bytes),
            esc(r.full_status.as_str()),
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
                    ("full pipeline order", "#3d7be8", &po.live),
                ],
            )
        );
        let _ = writeln!(
            html,
            "<h3>Arena layout of the full pipeline plan</h3>\n{}\n</section>",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graph_name_stays_in_its_markdown_cell_whatever_it_holds() {
        assert_eq!(
            md_text("a|b\nc<script>&_x_"),
            "a\\|b c&lt;script&gt;&amp;_x_"
        );
        assert_eq!(md_text("resnet18.1.inference"), "resnet18.1.inference");
        assert_eq!(md_code("dir/`x`\n.json"), "dir/'x' .json");
    }
}
