//! `memplan place`: places the buffers of a minimalloc CSV with the solver crate
//! (heuristics, then the exact search) and writes the CSV with an offset column; exit 1 when
//! `--capacity` is given and the buffers do not fit.

use crate::args::PlaceArgs;
use crate::common::{bad, read, seconds};
use crate::output::{check_outputs, write_out};
use anyhow::Result;
use memplan_solver::exact::ExactStatus;
use memplan_solver::placement::step::{self as place, PlaceOptions};
use memplan_solver::{csv, Limits, PlacementError};
use std::process::ExitCode;
use std::time::Instant;

/// Runs `memplan place`.
pub fn place(a: PlaceArgs) -> Result<ExitCode> {
    let alignment = a.alignment;
    if !alignment.is_power_of_two() {
        return Err(bad(format!(
            "--alignment {alignment} is not a power of two"
        )));
    }
    if let Some(path) = &a.output {
        check_outputs(&[("the buffer CSV", &a.buffers)], &[("-o", path)])?;
    }
    let started = Instant::now();
    let text = read(&a.buffers)?;
    let parsed =
        csv::parse(&text, alignment).map_err(|e| bad(format!("{}: {e}", a.buffers.display())))?;
    let mut problem = parsed.problem;
    problem.capacity = a.capacity;
    // The time limit bounds the whole command: reading the CSV counts.
    let limit = seconds("time-limit", a.time_limit)?;
    let opts = PlaceOptions {
        limits: Limits::with_time(limit.saturating_sub(started.elapsed())),
        exact: !a.heuristic,
    };
    let result = place::place(&problem, &opts).map_err(|e| match e {
        // Sizes and alignments whose offsets cannot be expressed: the input's fault.
        PlacementError::Overflow { index } => {
            let line = parsed.lines.get(index).copied().unwrap_or(0);
            let cause = if has_alignment_column(&text) {
                "the alignment comes from the CSV's alignment column".to_string()
            } else {
                format!("the alignment comes from --alignment {alignment}")
            };
            bad(format!(
                "{}: line {line}, {} ({cause})",
                a.buffers.display(),
                csv::placement_error(&e, &parsed.ids, &problem)
            ))
        }
        e => anyhow::Error::new(e),
    })?;
    let load = problem.load();
    let peak = result.stats.objective;
    // A placement over the capacity asked is no answer: nothing is written (an existing
    // output stays as it was).
    if result.fits {
        write_out(
            &a.output,
            &csv::write_table(&parsed.table, &problem, &result.placement),
        )?;
    }
    let ratio = if load == 0 {
        1.0
    } else {
        peak as f64 / load as f64
    };
    // With a capacity the question is whether it fits: the line says the answer, and the
    // exact search's status reads as what it established about the fit.
    let answer = match a.capacity {
        None => format!(
            "peak {peak} B ({ratio:.4}x LOAD) by {}, lower bound {} B (gap {:.2}%)",
            result.method,
            result.stats.lower_bound,
            result.stats.gap() * 100.0
        ),
        Some(c) if result.fits => format!(
            "peak {peak} B ({ratio:.4}x LOAD) by {}, fits the capacity {c} B, lower bound {} B \
             (gap {:.2}%)",
            result.method,
            result.stats.lower_bound,
            result.stats.gap() * 100.0
        ),
        Some(c) if result.method == place::BELOW_THE_BOUND => format!(
            "the capacity {c} B is below the lower bound {} B ({}): no placement searched",
            result.stats.lower_bound,
            if result.stats.lower_bound > load {
                "LOAD tightened by alignment"
            } else {
                "LOAD"
            }
        ),
        Some(c) => format!(
            "best peak {peak} B ({ratio:.4}x LOAD) by {}, over the capacity {c} B, lower bound \
             {} B",
            result.method, result.stats.lower_bound
        ),
    };
    let exact = result.exact.map(|e| {
        let what = match (a.capacity, e.status) {
            (Some(_), ExactStatus::Optimal) => "found a fit".to_string(),
            (Some(_), ExactStatus::Infeasible) => "proved that nothing fits".to_string(),
            (Some(_), ExactStatus::Timeout) => "stopped at its limit".to_string(),
            (_, status) => status.as_str().to_string(),
        };
        format!(", exact search {what} after {} nodes", e.nodes)
    });
    eprintln!(
        "{} buffers: LOAD {load} B, {answer}, status {}{}{}, {:.1} ms",
        problem.buffers.len(),
        result.stats.status,
        exact.unwrap_or_default(),
        result
            .ilp
            .map(|i| format!(
                ", HiGHS model {} ({} models, {} improved)",
                i.status, i.models, i.improved
            ))
            .unwrap_or_default(),
        started.elapsed().as_secs_f64() * 1e3
    );
    if !result.fits {
        let capacity = a.capacity.unwrap_or(0);
        if result.method == place::BELOW_THE_BOUND {
            eprintln!(
                "does not fit: the capacity {capacity} B is below the lower bound {} B, which \
                 every placement reaches (proven)",
                result.stats.lower_bound
            );
        } else if result.stats.status == memplan_solver::SolveStatus::Infeasible {
            eprintln!("does not fit: no placement fits the capacity {capacity} B (proven)");
        } else if a.heuristic {
            eprintln!(
                "no placement found under the capacity {capacity} B by the heuristics (best \
                 peak {peak} B); not proven impossible: --heuristic runs no exact search (drop \
                 it to search)"
            );
        } else {
            eprintln!(
                "no placement found under the capacity {capacity} B (best peak {peak} B); not \
                 proven impossible: the search stopped at its {} (raise --time-limit){}",
                match result.stats.status {
                    memplan_solver::SolveStatus::NodeLimit => "node limit",
                    _ => "time limit",
                },
                result
                    .exact
                    .and_then(|e| e.trace)
                    .filter(|t| t.deepest > 0)
                    .map(|t| format!(
                        "; it placed at most {} of the {} buffers at once, {:.0} % of its \
                         section-check failures in one section",
                        t.deepest,
                        problem.buffers.len(),
                        100.0 * t.hottest_failures as f64 / t.check_failures.max(1) as f64
                    ))
                    .unwrap_or_default()
            );
        }
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether the CSV header (its first non-empty line) has an `alignment` column.
fn has_alignment_column(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .is_some_and(|h| {
            h.split(',')
                .any(|c| c.trim().eq_ignore_ascii_case("alignment"))
        })
}
