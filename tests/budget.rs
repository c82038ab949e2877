//! Budgeted plans (spill to host and recompute): every plan passes the validator with the
//! budget, fits it, and the CPU executor reproduces the reference outputs; budgets below what
//! any plan can reach, zero or unparsable budgets get clear errors. Every budgeted plan also
//! passes `../shared/tools/check_plan.py --budget` (see tests/support/shared.rs without it).

#[path = "support/check_plan.rs"]
mod check_plan;

#[path = "support/graphs.rs"]
mod graphs;

use check_plan::{python_check_within, shared};
use graphs::{arb_graph, CHAIN_WITH_SKIPS};
use memplan::budget::{
    self, plan_under_budget, plan_with_budget, BudgetError, BudgetOptions, BudgetSpec,
};
use memplan::graph::Graph;
use memplan::plan::{Instruction, Plan};
use memplan::zoo::determinism::{without_timing, BusyLoad};
use memplan::{validate, OrderMode, PlanOptions, Strategy as Solvers};
use memplan_executor::{execute, ExecOptions, KernelMode};
use proptest::prelude::*;
use std::cell::Cell;

fn sample() -> Graph {
    Graph::parse(memplan::graph::SAMPLE_JSON).unwrap()
}

fn zoo(name: &str) -> Option<Graph> {
    let p = shared::zoo_path(name)?;
    Some(Graph::parse(&std::fs::read_to_string(p).unwrap()).unwrap())
}

fn fast() -> PlanOptions {
    PlanOptions {
        order: OrderMode::Auto,
        strategy: Solvers::Heuristic,
        time_limit: None,
        ..PlanOptions::default()
    }
}

/// A strategy with deterministic work caps (effort 1): the integer program stops at its node
/// cap, not at a time limit, so comparisons between strategies do not depend on the load.
fn with(strategy: &str) -> BudgetOptions {
    BudgetOptions {
        strategy: strategy.into(),
        effort: Some(1),
        ..BudgetOptions::default()
    }
}

/// Plans `g` at `pct` % of its unconstrained peak; the plan must be valid under the budget
/// and fit it, or (for `best` and `sweep` on the named graphs, where the minimum is known to
/// be reachable) the budget must be below the proven minimum.
fn plan_at(g: &Graph, pct: f64, strategy: &str) -> Option<Plan> {
    let must_reach_min = strategy == "best" || strategy == "sweep";
    plan_at_checked(g, BudgetSpec::Percent(pct), strategy, must_reach_min)
}

/// Plans `g` under `spec` with `strategy`: a plan must be valid under the budget (our
/// validator and check_plan.py) and fit it; without one the error must be the typed
/// `Infeasible`, and below the proven minimum when `must_reach_min`.
fn plan_at_checked(
    g: &Graph,
    spec: BudgetSpec,
    strategy: &str,
    must_reach_min: bool,
) -> Option<Plan> {
    match plan_under_budget(g, spec, &fast(), &with(strategy)) {
        Ok(p) => {
            let b = p.stats.budget.clone().unwrap();
            validate(g, &p, Some(b.budget_bytes))
                .unwrap_or_else(|v| panic!("{} at {spec:?}: invalid: {v}", g.name));
            assert!(p.arena_bytes <= b.budget_bytes);
            assert_eq!(p.stats.peak_bytes, p.arena_bytes);
            match spec {
                BudgetSpec::Percent(pct) => {
                    assert!(b.budget_bytes < b.unconstrained_peak_bytes || pct >= 100.0)
                }
                BudgetSpec::Bytes(bytes) => assert_eq!(b.budget_bytes, bytes),
            }
            python_check_within(g, &p, Some(b.budget_bytes), strategy);
            Some(p)
        }
        Err(BudgetError::Infeasible {
            budget, min_bytes, ..
        }) => {
            assert!(
                budget < min_bytes || !must_reach_min,
                "{} at {spec:?}: {budget} B is above the proven minimum {min_bytes} B but no plan was found",
                g.name
            );
            None
        }
        Err(e) => panic!("{} at {spec:?}: {e}", g.name),
    }
}

fn assert_reproduces(g: &Graph, p: &Plan, kernels: KernelMode) {
    let r = execute(
        g,
        p,
        &ExecOptions {
            kernels,
            seed: 3,
            ..ExecOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{}: {e}", g.name));
    assert!(
        r.outputs_equal,
        "{}: outputs differ: {:?}",
        g.name, r.first_mismatch
    );
}

fn count(p: &Plan, f: impl Fn(&Instruction) -> bool) -> usize {
    p.instructions.iter().filter(|i| f(i)).count()
}

#[test]
fn the_sample_fits_80_and_60_percent_with_every_strategy_that_fits_and_runs_equal() {
    let g = sample();
    for pct in [80.0, 60.0, 50.0] {
        for s in budget::strategy_names() {
            if let Some(p) = plan_at(&g, pct, s) {
                assert_reproduces(&g, &p, KernelMode::Real);
            } else {
                assert!(s != "best" && s != "sweep", "{s} at {pct}% did not fit");
            }
        }
    }
}

#[test]
fn the_sample_at_60_percent_spills_or_recomputes_and_sizes_the_host_pool() {
    let g = sample();
    let p = plan_at(&g, 60.0, "sweep").unwrap();
    let b = p.stats.budget.clone().unwrap();
    let spills = count(&p, |i| matches!(i, Instruction::SpillOut { .. }));
    assert_eq!(spills, b.spills);
    assert!(b.spills + b.recomputed_ops > 0, "{b:?}");
    if b.spills > 0 {
        assert!(p.host_bytes > 0 && b.spilled_out_bytes == b.spilled_in_bytes);
    }
    assert!(b.step_us >= b.base_step_us && b.overhead_pct >= 0.0);
}

#[test]
fn the_sample_at_40_percent_is_below_what_any_plan_needs_and_says_so() {
    let g = sample();
    let e = plan_under_budget(&g, BudgetSpec::Percent(40.0), &fast(), &with("best")).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("cannot be met") && msg.contains("no plan can go below"),
        "{msg}"
    );
    assert!(matches!(e, BudgetError::Infeasible { .. }));
}

#[test]
fn zero_unparsable_and_unknown_budgets_are_clear_errors() {
    assert!(matches!(BudgetSpec::parse("0"), Err(BudgetError::Zero)));
    for bad in ["", "abc", "-5", "0%", "-3%", "nan%", "12 MB", "1.5"] {
        let e = BudgetSpec::parse(bad).unwrap_err();
        assert!(e.to_string().contains("BYTES"), "{bad}: {e}");
    }
    assert_eq!(BudgetSpec::parse("60%").unwrap(), BudgetSpec::Percent(60.0));
    assert_eq!(BudgetSpec::parse("4096").unwrap(), BudgetSpec::Bytes(4096));
    assert_eq!(BudgetSpec::Percent(50.0).bytes(1001), 500);
    let g = sample();
    let order: Vec<usize> = (0..g.ops.len()).collect();
    let e = plan_with_budget(&g, &order, &BudgetOptions::default()).unwrap_err();
    assert!(matches!(e, BudgetError::Zero));
    let e = plan_with_budget(
        &g,
        &order[1..],
        &BudgetOptions {
            budget: 1 << 30,
            ..BudgetOptions::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, BudgetError::BadOrder));
}

#[test]
fn zoo_training_graphs_fit_80_60_and_40_percent_or_are_proven_impossible() {
    for name in [
        "resnet50.32.train",
        "mobilenet_v2.32.train",
        "vgg16.16.train",
        "alexnet.64.train",
    ] {
        let Some(g) = zoo(name) else {
            continue;
        };
        let mut fitted = 0;
        for pct in [80.0, 60.0, 40.0] {
            fitted += usize::from(plan_at(&g, pct, "best").is_some());
        }
        if name != "alexnet.64.train" {
            // alexnet's weight gradients alone exceed 80 % of its peak.
            assert!(fitted >= 2, "{name}: only {fitted} budgets fitted");
        }
    }
}

#[test]
fn a_budgeted_zoo_training_plan_reproduces_the_reference_in_mix_mode() {
    let Some(g) = zoo("squeezenet1_0.32.train") else {
        return;
    };
    let p = plan_at(&g, 60.0, "best").expect("squeezenet fits 60 %");
    let b = p.stats.budget.clone().unwrap();
    assert!(b.spills + b.recomputed_ops > 0, "{b:?}");
    assert_reproduces(&g, &p, KernelMode::Mix);
}

/// Random cases of the property test below.
const RANDOM_CASES: u32 = 48;

#[test]
fn budgeted_plans_of_random_dags_are_valid_under_the_budget_and_run_equal() {
    let mut config = ProptestConfig::with_cases(RANDOM_CASES);
    config.source_file = Some(file!());
    config.test_name =
        Some("budgeted_plans_of_random_dags_are_valid_under_the_budget_and_run_equal");
    let cases = config.cases as usize;
    let mut runner = proptest::test_runner::TestRunner::new(config);
    // A case whose budget no plan of that strategy meets passes only as a typed `Infeasible`
    // (checked in `plan_at_checked`); they are counted, and most cases must fit.
    let (fitted, infeasible) = (Cell::new(0usize), Cell::new(0usize));
    runner
        .run(
            &(
                arb_graph(CHAIN_WITH_SKIPS),
                0u64..100,
                0usize..budget::strategy_names().len(),
            ),
            |(v, share, strategy)| {
                let g = Graph::parse(&v.to_string()).unwrap();
                let s = budget::strategy_names()[strategy];
                // A budget `share` % of the way from the smallest peak any strategy reaches
                // (asked for the proven minimum, which is only a bound on random DAGs:
                // fragmentation, outputs at the end) to the unconstrained peak. A percentage
                // of the peak alone is mostly below what any plan reaches on graphs this
                // small, and then tests nothing.
                let free = memplan::plan(&g, &fast()).unwrap();
                let peak = free.stats.peak_bytes;
                let (min, _) = budget::min_bytes(&g, &budget::order_of_plan(&g, &free));
                let spec = BudgetSpec::Bytes(min.max(1));
                let reached = match plan_under_budget(&g, spec, &fast(), &with("best")) {
                    Ok(p) => p.stats.peak_bytes,
                    Err(BudgetError::Infeasible { reached, .. }) => reached,
                    Err(e) => panic!("{e}"),
                };
                let bytes = reached + peak.saturating_sub(reached) * share / 100;
                match plan_at_checked(&g, BudgetSpec::Bytes(bytes), s, false) {
                    Some(p) => {
                        assert_reproduces(&g, &p, KernelMode::Mix);
                        fitted.set(fitted.get() + 1);
                    }
                    None => {
                        // `best` reached `reached` bytes: it fits anything above.
                        assert_ne!(s, "best", "{bytes} B, reached {reached} B before");
                        infeasible.set(infeasible.get() + 1)
                    }
                }
                Ok(())
            },
        )
        .unwrap();
    let (fitted, infeasible) = (fitted.get(), infeasible.get());
    assert_eq!(fitted + infeasible, cases);
    assert!(
        fitted * 2 >= cases,
        "only {fitted} of {cases} random cases fitted their budget ({infeasible} infeasible)"
    );
}

/// The sweep (effort 1) with the target bisection and the budget fit switched as given.
fn sweep_with(bisections: usize, fit_nodes_per_buffer: u64) -> BudgetOptions {
    BudgetOptions {
        target_bisections: bisections,
        fit_nodes_per_buffer,
        ..with("sweep")
    }
}

/// A 120-op random DAG (each op reading 1–4 of the last 30 tensors, weights, workspaces):
/// the sweep's placements there miss the budget by a few per cent.
fn random_120() -> Graph {
    let path = format!("{}/tests/data/random-120.json", env!("CARGO_MANIFEST_DIR"));
    Graph::parse(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The simulated overhead of the sweep's plan of `g` at `pct` % with the switches given; the
/// plan must be valid under the budget.
fn sweep_overhead(g: &Graph, pct: f64, bisections: usize, fit: u64) -> f64 {
    let p = plan_under_budget(
        g,
        BudgetSpec::Percent(pct),
        &fast(),
        &sweep_with(bisections, fit),
    )
    .unwrap_or_else(|e| panic!("{pct} %, bisections {bisections}, fit {fit}: {e}"));
    let b = p.stats.budget.clone().unwrap();
    validate(g, &p, Some(b.budget_bytes)).unwrap();
    b.overhead_pct
}

#[test]
fn the_budget_fit_and_the_target_bisection_cut_the_sweeps_overhead_on_a_random_dag() {
    let g = random_120();
    let d = BudgetOptions::default();
    let (b, f) = (d.target_bisections, d.fit_nodes_per_buffer);
    assert!(b > 0 && f > 0, "both on by default");
    // At 85 %: the heuristic placement of the first schedule misses the budget; the exact
    // search fits it, so no lower target (more spills) is needed. Measured: 38.8 % without
    // either, 35.9 % with the bisection alone, 13.1 % with the fit.
    let none = sweep_overhead(&g, 85.0, 0, 0);
    let bisected = sweep_overhead(&g, 85.0, b, 0);
    let both = sweep_overhead(&g, 85.0, b, f);
    assert!(bisected < none, "85 %: bisection {bisected} vs none {none}");
    assert!(
        both < bisected * 0.6,
        "85 %: both {both} vs bisection {bisected}"
    );
    // At 75 % neither alone helps (97.6 %); together, the bisection's targets are the ones
    // the exact fit can reach (45.3 %).
    let none = sweep_overhead(&g, 75.0, 0, 0);
    let fit = sweep_overhead(&g, 75.0, 0, f);
    let both = sweep_overhead(&g, 75.0, b, f);
    assert!(
        both < none.min(fit) * 0.7,
        "75 %: both {both}, none {none}, fit alone {fit}"
    );
}

#[test]
fn the_target_bisection_never_raises_the_sweeps_overhead_on_random_dags() {
    let mut config = ProptestConfig::with_cases(24);
    config.source_file = Some(file!());
    config.test_name = Some("the_target_bisection_never_raises_the_sweeps_overhead_on_random_dags");
    let mut runner = proptest::test_runner::TestRunner::new(config);
    // Cases where the bisection made attempts (the first fit was below the budget).
    let bisected = Cell::new(0usize);
    // Longer chains with aligned activations: placements fragment, first fits fall below
    // the budget.
    let longer = graphs::DagShape {
        ops: 20..60,
        align: graphs::Align::DrawnFirst(&[1, 64, 256, 4096]),
        ..CHAIN_WITH_SKIPS
    };
    runner
        .run(&(arb_graph(longer.clone()), 0u64..100), |(v, share)| {
            let g = Graph::parse(&v.to_string()).unwrap();
            let free = memplan::plan(&g, &fast()).unwrap();
            let peak = free.stats.peak_bytes;
            let (min, _) = budget::min_bytes(&g, &budget::order_of_plan(&g, &free));
            let bytes = min + peak.saturating_sub(min) * share / 100;
            let spec = BudgetSpec::Bytes(bytes.max(1));
            let fit = BudgetOptions::default().fit_nodes_per_buffer;
            let run =
                |bisections| plan_under_budget(&g, spec, &fast(), &sweep_with(bisections, fit));
            match (run(0), run(BudgetOptions::default().target_bisections)) {
                (Ok(a), Ok(b)) => {
                    validate(&g, &b, Some(bytes)).unwrap();
                    let (a, b) = (a.stats.budget.unwrap(), b.stats.budget.unwrap());
                    prop_assert!(b.overhead_pct <= a.overhead_pct + 1e-9, "{a:?} vs {b:?}");
                    prop_assert!(b.attempts >= a.attempts);
                    if b.attempts > a.attempts {
                        bisected.set(bisected.get() + 1);
                    }
                }
                (Err(BudgetError::Infeasible { .. }), Err(BudgetError::Infeasible { .. })) => {}
                (a, b) => prop_assert!(false, "fits differ: {:?} vs {:?}", a.err(), b.err()),
            }
            Ok(())
        })
        .unwrap();
    eprintln!(
        "the bisection made attempts in {} of 24 cases",
        bisected.get()
    );
    assert!(bisected.get() > 0, "no case exercised the bisection");
}

#[test]
fn best_is_never_worse_than_the_sweep_or_the_integer_program() {
    let mut graphs = vec![sample()];
    graphs.extend(zoo("resnet50.32.train"));
    for g in &graphs {
        for pct in [80.0, 60.0] {
            let Some(best) = plan_at(g, pct, "best") else {
                continue;
            };
            let b = best.stats.budget.clone().unwrap();
            assert!(b.tried.iter().any(|t| t.name == "ilp"), "{:?}", b.tried);
            for s in ["sweep", "ilp"] {
                if let Some(p) = plan_at(g, pct, s) {
                    let o = p.stats.budget.unwrap().overhead_pct;
                    assert!(
                        b.overhead_pct <= o + 1e-9,
                        "{} at {pct}%: best {} vs {s} {o}",
                        g.name,
                        b.overhead_pct
                    );
                }
            }
        }
    }
}

#[test]
fn the_joint_program_is_never_worse_than_any_sequential_strategy_and_wins_on_vgg16_at_60_percent() {
    let Some(vgg) = zoo("vgg16.16.train") else {
        return;
    };
    let mut cases: Vec<(Graph, f64)> = vec![(sample(), 80.0), (sample(), 60.0)];
    cases.push((vgg, 60.0));
    cases.extend(zoo("resnet50.32.train").map(|g| (g, 60.0)));
    for (g, pct) in &cases {
        // The listed order, as the budget benchmark plans it.
        let order: Vec<usize> = (0..g.ops.len()).collect();
        let free = memplan::plan(g, &fast()).unwrap();
        let bytes = (free.stats.peak_bytes as f64 * pct / 100.0) as u64;
        let at = |s: &str| {
            let p = budget::plan_with_budget(
                g,
                &order,
                &BudgetOptions {
                    budget: bytes,
                    ..with(s)
                },
            )
            .ok()?;
            memplan::validate(g, &p, Some(bytes)).unwrap();
            Some(p.stats.budget.unwrap().overhead_pct)
        };
        let sequential = ["sweep", "ilp", "chen", "spill-all"]
            .iter()
            .filter_map(|s| at(s))
            .fold(f64::INFINITY, f64::min);
        let Some(joint) = at("joint") else {
            assert!(
                sequential.is_infinite(),
                "{}: joint failed where a strategy fits",
                g.name
            );
            continue;
        };
        assert!(
            joint <= sequential + 1e-9,
            "{} at {pct}%: joint {joint} vs {sequential}",
            g.name
        );
        if g.name == "vgg16.16.train" {
            // Measured: 104.5 % → 44.2 %: the program brings spilled tensors back earlier
            // and reorders the backward ops around them.
            assert!(
                joint < sequential - 10.0,
                "joint {joint} vs sequential {sequential}"
            );
        }
    }
}

#[test]
fn the_fixed_order_pass_re_decides_evictions_over_long_spans_and_wins_on_alexnet_at_80_percent() {
    let Some(g) = zoo("alexnet.64.train") else {
        return;
    };
    // The listed order, as the budget benchmark plans it: 80 % of its LOAD.
    let order: Vec<usize> = (0..g.ops.len()).collect();
    let bytes = memplan::planner::graph_stats(&g).unwrap().listed_load * 80 / 100;
    let at = |s: &str| {
        let p = budget::plan_with_budget(
            &g,
            &order,
            &BudgetOptions {
                budget: bytes,
                ..with(s)
            },
        )
        .unwrap();
        memplan::validate(&g, &p, Some(bytes)).unwrap();
        p.stats.budget.unwrap()
    };
    let sequential = ["sweep", "ilp"]
        .iter()
        .map(|s| at(s).overhead_pct)
        .fold(f64::INFINITY, f64::min);
    let joint = at("joint");
    // Measured: 79.2 % → 28.6 %. The windows that reorder see 8–12 steps; which activation
    // to send out, and when, is decided over the whole forward-to-backward span.
    assert!(
        joint.overhead_pct < sequential / 2.0,
        "joint {} vs sequential {sequential}: {:?}",
        joint.overhead_pct,
        joint.tried
    );
    let note = joint.solver.unwrap_or_default();
    assert!(
        note.contains("with the order fixed") && !note.contains("(0 with the order fixed)"),
        "{note}"
    );
}

/// Measurement aid (not a check): `MEMPLAN_MEASURE="resnet50.32.train:60 vgg16.16.train:60"
/// cargo test --release --test budget -- --ignored --nocapture measure` prints, per graph,
/// budget and strategy, the budget phase's time, peak, overhead and solver report.
#[test]
#[ignore]
fn measure_the_budget_phase_on_zoo_graphs() {
    let spec = std::env::var("MEMPLAN_MEASURE").unwrap_or_default();
    let strategies = std::env::var("MEMPLAN_MEASURE_STRATEGIES").unwrap_or("best".into());
    let effort = std::env::var("MEMPLAN_MEASURE_EFFORT")
        .ok()
        .and_then(|e| e.parse::<u64>().ok());
    for item in spec.split_whitespace() {
        let (name, pct) = item.split_once(':').unwrap();
        let Some(g) = zoo(name) else { continue };
        let free = memplan::plan(&g, &fast()).unwrap();
        let order = budget::order_of_plan(&g, &free);
        let pct: f64 = pct.parse().unwrap();
        let bytes = BudgetSpec::Percent(pct).bytes(free.stats.peak_bytes);
        for s in strategies.split(',') {
            let t0 = std::time::Instant::now();
            let r = plan_with_budget(
                &g,
                &order,
                &BudgetOptions {
                    budget: bytes,
                    strategy: s.into(),
                    effort,
                    ..BudgetOptions::default()
                },
            );
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            match r {
                Ok(p) => {
                    let b = p.stats.budget.unwrap();
                    println!(
                        "MEASURE {name} {pct}% {s} effort {effort:?}: {ms:.0} ms, budget {} peak {} \
                         overhead {:.3}% ({} us) by {} after {} attempts; solver {:?}; tried {:?}",
                        b.budget_bytes,
                        p.stats.peak_bytes,
                        b.overhead_pct,
                        b.overhead_us,
                        b.strategy,
                        b.attempts,
                        b.solver,
                        b.tried
                            .iter()
                            .map(|t| format!(
                                "{} {} {:.3}% {:?}",
                                t.name, t.peak_bytes, t.overhead_pct, t.solver
                            ))
                            .collect::<Vec<_>>()
                    );
                }
                Err(e) => println!("MEASURE {name} {pct}% {s} effort {effort:?}: {ms:.0} ms, {e}"),
            }
        }
    }
}

/// Planner options with deterministic caps (the pipeline's: no time limit, effort 1).
fn deterministic() -> PlanOptions {
    PlanOptions {
        time_limit: None,
        effort: Some(1),
        ..fast()
    }
}

#[test]
fn two_budgeted_plans_with_effort_1_are_identical_even_under_load() {
    let mut graphs = vec![(sample(), 60.0)];
    graphs.extend(zoo("resnet50.32.train").map(|g| (g, 50.0)));
    for (g, pct) in &graphs {
        let bopts = with("best");
        let spec = BudgetSpec::Percent(*pct);
        let first = plan_under_budget(g, spec, &deterministic(), &bopts).unwrap();
        let budget_bytes = first.stats.budget.as_ref().unwrap().budget_bytes;
        validate(g, &first, Some(budget_bytes)).unwrap();
        python_check_within(g, &first, Some(budget_bytes), "effort-1");
        // The second time with every core kept busy (the load stops by itself after 120 s).
        let busy = BusyLoad::all_cores(std::time::Duration::from_secs(120));
        let second = plan_under_budget(g, spec, &deterministic(), &bopts);
        busy.stop();
        let second = second.unwrap();
        assert_eq!(
            without_timing(&first),
            without_timing(&second),
            "{} at {pct}%",
            g.name
        );
    }
}

#[test]
fn the_budget_program_with_effort_1_stops_by_its_node_cap_and_says_so() {
    let Some(g) = zoo("resnet50.32.train") else {
        return;
    };
    let p = plan_under_budget(
        &g,
        BudgetSpec::Percent(50.0),
        &deterministic(),
        &with("ilp"),
    )
    .unwrap();
    let b = p.stats.budget.clone().unwrap();
    validate(&g, &p, Some(b.budget_bytes)).unwrap();
    python_check_within(&g, &p, Some(b.budget_bytes), "ilp-effort-1");
    let solver = b.solver.unwrap_or_default();
    assert!(solver.contains("node_limit"), "{solver}");
}

/// Raises a token `after` the start of a budgeted plan of `g` on `order` and returns how long
/// the plan took to return once the token was raised, with its result.
fn stopped_after(
    g: &Graph,
    order: &[usize],
    budget: u64,
    strategy: &str,
    after: std::time::Duration,
) -> (std::time::Duration, Result<Plan, BudgetError>) {
    let token = memplan_solver::CancelToken::new();
    let raised = std::sync::Arc::new(std::sync::Mutex::new(None));
    let raiser = {
        let (token, raised) = (token.clone(), raised.clone());
        std::thread::spawn(move || {
            std::thread::sleep(after);
            *raised.lock().unwrap() = Some(std::time::Instant::now());
            token.cancel();
        })
    };
    let r = plan_with_budget(
        g,
        order,
        &BudgetOptions {
            budget,
            cancel: Some(token),
            effort: Some(1),
            ..with(strategy)
        },
    );
    let done = std::time::Instant::now();
    raiser.join().unwrap();
    let at = raised.lock().unwrap().unwrap_or(done);
    (done.saturating_duration_since(at), r)
}

#[test]
fn a_budgeted_plan_with_a_raised_token_returns_within_1_s() {
    let Some(g) = zoo("resnet50.32.train") else {
        return;
    };
    let free = memplan::plan(&g, &deterministic()).unwrap();
    let order = budget::order_of_plan(&g, &free);
    let bytes = BudgetSpec::Percent(50.0).bytes(free.stats.peak_bytes);
    for strategy in ["ilp", "best"] {
        for ms in [0, 300, 1000, 2000] {
            let (lag, r) = stopped_after(
                &g,
                &order,
                bytes,
                strategy,
                std::time::Duration::from_millis(ms),
            );
            assert!(
                lag < std::time::Duration::from_secs(1),
                "{strategy}, raised after {ms} ms: returned {lag:?} later"
            );
            match r {
                // The best fitting plan so far, with its stats.
                Ok(p) => {
                    let b = p.stats.budget.clone().unwrap();
                    assert!(p.arena_bytes <= bytes && b.budget_bytes == bytes);
                    validate(&g, &p, Some(bytes)).unwrap();
                    python_check_within(&g, &p, Some(bytes), &format!("{strategy}-{ms}ms"));
                }
                Err(e) => assert!(
                    matches!(e, BudgetError::Cancelled { budget, .. } if budget == bytes),
                    "{strategy} after {ms} ms: {e}"
                ),
            }
        }
    }
}

/// `g` with a `dropout` op after every `relu` (a training graph with dropout): the relu's
/// output `r` feeds the dropout, whose output `r:drop` (same size and shape) replaces `r` in
/// every consumer but the relu's backward (`threshold_backward` reads `r`), so the forward's
/// next op and its backward read the dropped-out tensor. `flag` is written as the dropouts'
/// `"recompute"` when given.
fn with_dropout(g: &Graph, flag: Option<bool>) -> Graph {
    let mut v = g.to_value();
    let relus: Vec<String> = v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["type"] == "relu")
        .map(|o| o["outputs"][0].as_str().unwrap().to_string())
        .collect();
    let mut tensors = Vec::new();
    for t in v["tensors"].as_array().unwrap() {
        tensors.push(t.clone());
        if relus.iter().any(|r| t["name"] == r.as_str()) {
            let mut d = t.clone();
            d["name"] = serde_json::json!(format!("{}:drop", t["name"].as_str().unwrap()));
            if d["kind"] == "output" {
                d["kind"] = serde_json::json!("activation");
            }
            tensors.push(d);
        }
    }
    let mut ops = Vec::new();
    for o in v["ops"].as_array().unwrap() {
        let mut o = o.clone();
        if o["type"] != "threshold_backward" {
            for x in o["inputs"].as_array_mut().unwrap() {
                if relus.iter().any(|r| x == r.as_str()) {
                    *x = serde_json::json!(format!("{}:drop", x.as_str().unwrap()));
                }
            }
        }
        let relu_out = (o["type"] == "relu").then(|| o["outputs"][0].clone());
        ops.push(o);
        if let Some(r) = relu_out {
            let r = r.as_str().unwrap();
            let mut d = serde_json::json!({"name": format!("{r}:dropout"), "type": "dropout",
                "inputs": [r], "outputs": [format!("{r}:drop")], "attrs": {"p": 0.1}});
            if let Some(f) = flag {
                d["recompute"] = serde_json::json!(f);
            }
            ops.push(d);
        }
    }
    v["tensors"] = serde_json::Value::Array(tensors);
    v["ops"] = serde_json::Value::Array(ops);
    Graph::parse(&v.to_string()).unwrap()
}

/// How many times each op of `g` runs in `p`, by op index.
fn exec_counts(g: &Graph, p: &Plan) -> Vec<usize> {
    let ids = g.op_indices();
    let mut n = vec![0; g.ops.len()];
    for i in &p.instructions {
        if let Instruction::Exec { node, .. } = i {
            n[ids[node.as_str()]] += 1;
        }
    }
    n
}

/// Plans `g` at each `pct` with every strategy; every plan must be valid under its budget and
/// execute each op that [`memplan::ops::may_recompute`] forbids exactly once. Returns the
/// recomputes (op names, all strategies) and how many plans fitted.
fn plans_recompute_no_forbidden_op(g: &Graph, pcts: &[f64]) -> (Vec<String>, usize) {
    let (mut recomputed, mut fitted) = (Vec::new(), 0);
    for &pct in pcts {
        for s in budget::strategy_names() {
            let p = match plan_under_budget(g, BudgetSpec::Percent(pct), &fast(), &with(s)) {
                Ok(p) => p,
                Err(BudgetError::Infeasible { .. }) => continue,
                Err(e) => panic!("{} {s} at {pct}%: {e}", g.name),
            };
            let b = p.stats.budget.clone().unwrap();
            validate(g, &p, Some(b.budget_bytes))
                .unwrap_or_else(|v| panic!("{} {s} at {pct}%: invalid: {v}", g.name));
            fitted += 1;
            for (k, &n) in exec_counts(g, &p).iter().enumerate() {
                let op = &g.ops[k];
                assert!(
                    n == 1 || memplan::ops::may_recompute(op),
                    "{} {s} at {pct}%: op {:?} ({}) runs {n} times",
                    g.name,
                    op.name,
                    op.op_type
                );
                if n > 1 {
                    recomputed.push(op.op_type.clone());
                }
            }
        }
    }
    (recomputed, fitted)
}

#[test]
fn a_training_graph_with_dropout_gets_plans_from_every_strategy_that_recompute_no_random_op() {
    let g = sample();
    // With the dropouts flagged `"recompute": true` the strategies do recompute them (cheap,
    // their input stays for the relu's backward): the test bites because of that.
    let allowed = with_dropout(&g, Some(true));
    let (before, _) = plans_recompute_no_forbidden_op(&allowed, &[60.0, 50.0]);
    assert!(before.iter().any(|t| t == "dropout"), "{before:?}");
    let d = with_dropout(&g, None);
    assert_eq!(d.ops.iter().filter(|o| o.op_type == "dropout").count(), 4);
    let (after, fitted) = plans_recompute_no_forbidden_op(&d, &[60.0, 50.0]);
    assert!(fitted >= 2, "best and sweep fit: {fitted}");
    assert!(!after.iter().any(|t| t == "dropout"), "{after:?}");
}

#[test]
fn an_op_flagged_recompute_false_is_never_recomputed_by_any_strategy() {
    let g = sample();
    let (before, _) = plans_recompute_no_forbidden_op(&g, &[60.0, 50.0]);
    // Flag every op type some strategy recomputed in the unflagged graph.
    let mut v = g.to_value();
    for op in v["ops"].as_array_mut().unwrap() {
        if before.iter().any(|t| op["type"] == t.as_str()) {
            op["recompute"] = serde_json::json!(false);
        }
    }
    let flagged = Graph::parse(&v.to_string()).unwrap();
    let (after, fitted) = plans_recompute_no_forbidden_op(&flagged, &[60.0, 50.0]);
    assert!(fitted >= 2 && after.is_empty(), "{fitted} {after:?}");
}

#[test]
fn zoo_training_graphs_with_dropout_at_60_and_45_percent_recompute_no_random_op() {
    // squeezenet and vgg16 carry the bernoulli masks of their classifier dropouts; a dropout
    // follows every ReLU too.
    for name in ["squeezenet1_0.32.train", "vgg16.16.train"] {
        let Some(g) = zoo(name) else { continue };
        let d = with_dropout(&g, None);
        let (after, fitted) = plans_recompute_no_forbidden_op(&d, &[60.0, 45.0]);
        assert!(fitted > 0, "{name}");
        assert!(
            !after.iter().any(|t| t == "dropout" || t == "bernoulli"),
            "{name}: {after:?}"
        );
    }
}

#[test]
fn the_validator_rejects_a_plan_that_recomputes_a_dropout() {
    // A plan of the graph whose dropouts are flagged recomputable that recomputes one is,
    // against the same graph without the flag, a plan that recomputes a dropout.
    let allowed = with_dropout(&sample(), Some(true));
    let p = ["sweep", "chen", "best"]
        .iter()
        .filter_map(|s| {
            plan_under_budget(&allowed, BudgetSpec::Percent(60.0), &fast(), &with(s)).ok()
        })
        .find(|p| {
            exec_counts(&allowed, p)
                .iter()
                .enumerate()
                .any(|(k, &n)| n > 1 && allowed.ops[k].op_type == "dropout")
        })
        .expect("a plan that recomputes a dropout");
    validate(&allowed, &p, None).unwrap();
    let d = with_dropout(&sample(), None);
    let v = validate(&d, &p, None).unwrap_err();
    assert!(
        matches!(&v.kind, memplan::ViolationKind::ForbiddenRecompute { op_type, .. } if op_type == "dropout"),
        "{v}"
    );
    let msg = v.to_string();
    assert!(
        msg.contains("second time") && msg.contains(":dropout\""),
        "{msg}"
    );
}

#[test]
fn a_budget_gets_a_plan_when_the_unconstrained_plan_alone_would_use_up_the_time_limit() {
    // wide-150's unconstrained plan takes about 35 s by its default work caps. With a 6 s
    // limit it used to take all 6 s, leaving the budget none ("stopped before any plan
    // fitted it"); it now gets half, and planning under the budget the other half.
    let text = std::fs::read_to_string(format!(
        "{}/tests/data/wide-150.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let g = Graph::parse(&text).unwrap();
    let opts = memplan::PipelineOptions {
        budget: Some(BudgetSpec::Percent(80.0)),
        time_limit_s: 6.0,
        ..memplan::PipelineOptions::default()
    };
    let r = memplan::pipeline::run(&g, &opts, &memplan::pipeline::Control::default())
        .unwrap_or_else(|e| panic!("no plan under the budget: {e}"));
    let b = r.plan.stats.budget.clone().expect("budget stats");
    assert!(r.plan.stats.peak_bytes <= b.budget_bytes);
    assert_eq!(r.plan.stats.status, Some(memplan::PlanStatus::TimeLimit));
    validate(&g, &r.plan, Some(b.budget_bytes)).unwrap();
}
