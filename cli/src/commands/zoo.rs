//! `memplan zoo`: plans every graph of a model zoo through the pipeline (`memplan::zoo`) and
//! writes the results and reports; on a terminal, progress bars on stderr.

use crate::args::ZooArgs;
use crate::common::{bad, mib};
use crate::output::{check_folder, same_file};
use anyhow::Result;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use memplan::budget;
use memplan::pipeline::{PipelineOptions, Rewrite};
use memplan::zoo::{self, ZooError, ZooEvent, ZooOptions};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

/// Runs `memplan zoo`.
pub fn zoo(a: ZooArgs) -> Result<ExitCode> {
    let rewrite = Rewrite::parse_list(&a.rewrite).map_err(|e| bad(format!("--rewrite: {e}")))?;
    let base = PipelineOptions {
        rewrite,
        effort: a.effort,
        time_limit_s: a.time_limit,
        ..PipelineOptions::default()
    };
    let percents = budget_percents(a.budgets.as_deref())?;
    if a.jobs == 0 {
        return Err(bad("--jobs must be at least 1"));
    }
    // The results go to OUT: an input there would be overwritten, or read as a graph next time.
    if let Some(input) = a.inputs.iter().find(|i| same_file(i, &a.out)) {
        return Err(bad(format!(
            "--out {} is also the input {}; choose another folder",
            a.out.display(),
            input.display()
        )));
    }
    // OUT must be able to be a folder before any graph is planned: a file there, or a file on
    // its path, is the user's mistake (the batch creates the folder when it writes).
    check_folder("--out", &a.out)?;
    let opts = ZooOptions {
        pipeline: base,
        jobs: a.jobs,
        budgets: percents,
    };
    let mut progress = Progress::new();
    let summary = zoo::run_zoo(&a.inputs, &a.out, &opts, &mut |ev| progress.event(ev));
    progress.finish();
    let summary = summary.map_err(|e| match e {
        ZooError::Missing(_)
        | ZooError::NoGraphs(_)
        | ZooError::Graph { .. }
        | ZooError::Graphs(_)
        | ZooError::Options(_)
        | ZooError::Results { .. }
        | ZooError::Busy(_) => bad(e.to_string()),
        e => anyhow::Error::new(e),
    })?;
    for line in &summary.dropped {
        eprintln!("zoo: {line}");
    }
    let kept = if summary.kept > 0 {
        format!(", {} earlier kept", summary.kept)
    } else {
        String::new()
    };
    eprintln!(
        "zoo: {} graphs ({} planned, {} skipped{kept}) in {:.1} s; {}/results.json, results.csv, report.md, report.html",
        summary.results.len(),
        summary.planned,
        summary.skipped,
        summary.seconds,
        a.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `--budgets 80,60,40`: percentages of each graph's unconstrained (full pipeline) peak.
fn budget_percents(budgets: Option<&str>) -> Result<Vec<f64>> {
    let mut percents = Vec::new();
    if let Some(list) = budgets {
        for item in list.split(',') {
            // Each item is a percentage as `--budget` writes one (the `%` optional here),
            // spaces around it allowed as around the names of a rewrite list.
            let t = item.trim_matches(' ');
            let text = if t.ends_with('%') {
                t.to_string()
            } else {
                format!("{t}%")
            };
            match budget::BudgetSpec::parse(&text) {
                Ok(budget::BudgetSpec::Percent(p)) => percents.push(p),
                _ => {
                    return Err(bad(format!(
                        "--budgets {list}: {item:?} is not a percentage in (0, 100] as --budget \
                         writes one (digits, at most 100, no sign or exponent; e.g. --budgets \
                         80,60,12.5)"
                    )))
                }
            }
        }
    }
    Ok(percents)
}

/// The progress bars of a zoo run: one for the whole run, a spinner per graph being planned.
/// Only on a terminal: logs and pipes stay clean.
struct Progress {
    /// The bars, when stderr is a terminal.
    multi: Option<MultiProgress>,
    /// The whole run's bar, from the `Begin` event on.
    overall: Option<ProgressBar>,
    /// The spinner of each graph being planned.
    current: BTreeMap<String, ProgressBar>,
}

impl Progress {
    /// Bars on stderr if it is a terminal; none otherwise.
    fn new() -> Self {
        Progress {
            multi: std::io::stderr().is_terminal().then(MultiProgress::new),
            overall: None,
            current: BTreeMap::new(),
        }
    }

    /// Shows one event of the zoo run.
    fn event(&mut self, ev: ZooEvent) {
        let Some(m) = &self.multi else { return };
        match ev {
            ZooEvent::Begin { total, skipped } => {
                let bar = m.add(ProgressBar::new(total as u64));
                bar.set_style(
                    ProgressStyle::with_template(
                        "{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} graphs {msg}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                bar.set_prefix("zoo");
                bar.set_position(skipped as u64);
                if skipped > 0 {
                    bar.set_message(format!("({skipped} already done)"));
                }
                self.overall = Some(bar);
            }
            ZooEvent::Started { graph } => {
                let bar = m.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("  {spinner} {prefix}: {msg} [{elapsed}]")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.set_prefix(graph.clone());
                bar.set_message("starting");
                bar.enable_steady_tick(Duration::from_millis(120));
                self.current.insert(graph, bar);
            }
            ZooEvent::Progress {
                graph,
                phase,
                best_peak,
                lower_bound,
            } => {
                if let Some(bar) = self.current.get(&graph) {
                    bar.set_message(format!(
                        "{phase}: best peak {}, bound {}",
                        mib(best_peak),
                        mib(lower_bound)
                    ));
                }
            }
            ZooEvent::Finished { graph, peak } => {
                if let Some(bar) = self.current.remove(&graph) {
                    bar.finish_and_clear();
                    m.remove(&bar);
                }
                if let Some(o) = &self.overall {
                    o.inc(1);
                    o.set_message(format!("last: {graph} {}", mib(peak)));
                }
            }
        }
    }

    /// Clears the whole run's bar at the end.
    fn finish(&self) {
        if let Some(o) = &self.overall {
            o.finish_and_clear();
        }
    }
}
