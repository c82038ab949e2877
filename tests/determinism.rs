//! Issue 13, "deterministic by default": every zoo graph planned twice with
//! `PipelineOptions::default()`, the second time while two busy threads spin on both cores,
//! gives byte-identical plans (timing fields aside), and no plan's status is `time_limit`
//! (effort is counted in work units; the wall-clock cap must not bind at the defaults).

use memplan::pipeline::PipelineOptions;
use memplan::zoo::determinism::{plan_idle_and_loaded, without_timing};
use memplan::{Graph, PlanStatus};
use std::time::Instant;

#[path = "support/shared.rs"]
mod shared;

/// Spinning threads of the loaded run: both cores of the CI machine.
const BUSY_THREADS: usize = 2;

#[test]
fn every_zoo_graph_plans_identically_at_idle_and_under_load() {
    let Some(zoo) = shared::shared_path("zoo") else {
        return;
    };
    let mut paths: Vec<_> = std::fs::read_dir(&zoo)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no graphs in {}", zoo.display());
    let options = PipelineOptions::default();
    let started = Instant::now();
    let mut failures = Vec::new();
    for path in &paths {
        let g = Graph::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
        let c = plan_idle_and_loaded(&g, &options, BUSY_THREADS)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (si, sl) = (c.idle.plan.stats.status, c.loaded.plan.stats.status);
        eprintln!(
            "{:32} {:5} ops  idle {:7.0} ms  loaded {:7.0} ms  {:?}/{:?}  identical {}",
            g.name,
            g.ops.len(),
            c.idle_ms,
            c.loaded_ms,
            si,
            sl,
            c.identical
        );
        for (s, when) in [(si, "idle"), (sl, "loaded")] {
            if s.is_none() || s == Some(PlanStatus::TimeLimit) {
                failures.push(format!(
                    "{}: status {s:?} at {when}: the {} s wall-clock cap bound before the \
                     default effort was spent (idle {:.0} ms, loaded {:.0} ms)",
                    g.name, options.time_limit_s, c.idle_ms, c.loaded_ms
                ));
            }
        }
        if !c.identical {
            let (a, b) = (without_timing(&c.idle.plan), without_timing(&c.loaded.plan));
            let at = a
                .bytes()
                .zip(b.bytes())
                .position(|(x, y)| x != y)
                .unwrap_or(a.len().min(b.len()));
            let from = at.saturating_sub(80);
            failures.push(format!(
                "{}: plans differ at byte {at}: idle …{}… loaded …{}…",
                g.name,
                a.get(from..(at + 80).min(a.len())).unwrap_or("(not ASCII)"),
                b.get(from..(at + 80).min(b.len())).unwrap_or("(not ASCII)")
            ));
        }
        memplan::validate(&c.idle.graph, &c.idle.plan, None).unwrap();
    }
    eprintln!(
        "{} graphs in {:.1} s",
        paths.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
