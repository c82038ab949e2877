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

/// Two random DAGs whose order program HiGHS cannot finish at the default effort (each op
/// reads 1–4 of the last 1–15 tensors, so ops have wide ranges of steps): a 26-op graph whose
/// whole-graph model spends its root and hundreds of slow nodes on the cuts, and a 59-op one
/// whose whole-graph model (7,193 rows, 293,832 nonzeros) takes seconds for its first LP.
/// HiGHS' node cap bounds neither: both ran until the time limit (60 s at the defaults,
/// status `time_limit`), so their plans depended on the machine. The model's work cap in LP
/// iterations stops the first at the same point everywhere, and sends the second to windows.
#[test]
fn small_wide_graphs_plan_identically_at_idle_and_under_load_within_the_work_cap() {
    let options = PipelineOptions::default();
    for (name, whole) in [("wide-26", true), ("wide-59", false)] {
        let path = format!("{}/tests/data/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let g = Graph::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let c = plan_idle_and_loaded(&g, &options, BUSY_THREADS).unwrap();
        eprintln!(
            "{name}: idle {:.0} ms, loaded {:.0} ms",
            c.idle_ms, c.loaded_ms
        );
        for p in [&c.idle.plan, &c.loaded.plan] {
            assert_ne!(p.stats.status, Some(PlanStatus::TimeLimit), "{name}");
            let ilp = p.stats.order_ilp.as_ref().expect("the order program ran");
            assert_eq!(ilp.whole, whole, "{name}: {ilp:?}");
            assert_ne!(ilp.status, "time_limit", "{name}: {ilp:?}");
        }
        assert!(c.identical, "{name}: the plans differ");
        memplan::validate(&c.idle.graph, &c.idle.plan, None).unwrap();
    }
}

/// A 150-op random DAG whose ops read any of the last 60 tensors, planned in its listed order
/// with the default effort: the exact placement search (then the placement model) reaches the order's bound (within
/// 0.1 %) with the same plan at idle and under load. With 2,000 search nodes per order (the
/// default before) the plan ended 3.2 % above it, with the heuristics' placement.
#[test]
fn the_default_effort_places_a_wide_random_graph_at_its_bound_identically_under_load() {
    let options = PipelineOptions {
        order: memplan::OrderMode::Given,
        ..PipelineOptions::default()
    };
    let path = format!("{}/tests/data/wide-150.json", env!("CARGO_MANIFEST_DIR"));
    let g = Graph::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let c = plan_idle_and_loaded(&g, &options, BUSY_THREADS).unwrap();
    eprintln!(
        "wide-150: idle {:.0} ms, loaded {:.0} ms",
        c.idle_ms, c.loaded_ms
    );
    let s = &c.idle.plan.stats;
    assert_ne!(s.status, Some(PlanStatus::TimeLimit));
    assert!(
        s.peak_bytes as f64 <= s.lower_bound_bytes as f64 * 1.001,
        "peak {} against the bound {}",
        s.peak_bytes,
        s.lower_bound_bytes
    );
    assert!(c.identical, "the plans differ");
    memplan::validate(&c.idle.graph, &c.idle.plan, None).unwrap();
}

/// Budgeted plans (60 % of the unconstrained peak, the default spill strategy, which ends with
/// the joint program) of four zoo training graphs whose joint program improves a window with
/// the order fixed: the same plan at idle and under load. Each fixed-order model used to be
/// capped at 1 s of wall clock and dropped when the cap bound, so what a plan kept could
/// depend on the machine; its cap is now in LP iterations.
#[test]
fn budgeted_plans_are_identical_at_idle_and_under_load() {
    let Some(zoo) = shared::shared_path("zoo") else {
        return;
    };
    let options = PipelineOptions {
        budget: Some(memplan::budget::BudgetSpec::Percent(60.0)),
        ..PipelineOptions::default()
    };
    for name in [
        "squeezenet1_0.32.train",
        "vgg16.16.train",
        "resnet50.32.train",
        "mobilenet_v2.32.train",
    ] {
        let path = zoo.join(format!("{name}.json"));
        let g = Graph::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let c = plan_idle_and_loaded(&g, &options, BUSY_THREADS).unwrap();
        let budget = c.idle.plan.stats.budget.as_ref().expect("a budgeted plan");
        let note = budget.solver.clone().unwrap_or_default();
        eprintln!(
            "{name}: idle {:.0} ms, loaded {:.0} ms, {} ({note})",
            c.idle_ms, c.loaded_ms, budget.strategy
        );
        assert!(
            note.contains("with the order fixed"),
            "{name}: the joint program ran no fixed-order pass: {note}"
        );
        for p in [&c.idle.plan, &c.loaded.plan] {
            assert_ne!(p.stats.status, Some(PlanStatus::TimeLimit), "{name}");
        }
        assert!(c.identical, "{name}: the plans differ");
        memplan::validate(&c.idle.graph, &c.idle.plan, None).unwrap();
    }
}
