//! Property tests over random DAGs (random sizes, fan-in/out, alignments, workspaces and
//! in-place hints): every placement portfolio member's plan, on the listed order and on every
//! order heuristic's order, with in-place sharing off and on, passes the validator and has a
//! peak ≥ the order's LOAD ≥ the order-independent bound.

#[path = "support/graphs.rs"]
mod graphs;

use graphs::{arb_graph, ANY_READS};
use memplan::graph::Graph;
use memplan::plan::emit;
use memplan::{plan, validate, OrderMode, PlanOptions, Strategy as Solvers};
use memplan_solver::order::{self, lifetimes, LifetimeOptions};
use memplan_solver::{placement, Limits};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_portfolio_member_on_every_heuristic_order_yields_a_valid_plan(g in arb_graph(ANY_READS)) {
        let graph = Graph::parse(&g.to_string()).unwrap();
        let (problem, mapping) = graph.order_problem_with_mapping();
        for inplace in [false, true] {
            let lopts = LifetimeOptions { inplace };
            let bound = order::bound::order_lower_bound(&problem, &lopts);
            let listed = problem.listed_topological_order().unwrap();
            let mut orders = vec![listed.clone()];
            for o in order::registry() {
                let ord = o.order(&problem, &listed, &lopts, &Limits::UNLIMITED);
                problem.check_order(&ord).unwrap();
                orders.push(ord);
            }
            for ord in &orders {
                let lt = lifetimes(&problem, ord, &lopts);
                let load = lt.problem.load();
                prop_assert!(bound <= load, "bound {} > LOAD {}", bound, load);
                for placer in placement::registry() {
                    let pl = placer.place(&lt.problem, &Limits::UNLIMITED).unwrap();
                    let mut p = emit(&graph, ord, &lt, &pl, &mapping);
                    p.stats.peak_bytes = p.arena_bytes;
                    let r = validate(&graph, &p, None);
                    prop_assert!(r.is_ok(), "{} (inplace {}): {}", placer.name(), inplace, r.unwrap_err());
                    prop_assert!(p.stats.peak_bytes >= load, "{} peak below LOAD", placer.name());
                }
            }
            // Heuristics only: `auto` is never worse than `given` by construction.
            let heuristic = |order| PlanOptions { order, strategy: Solvers::Heuristic, inplace, time_limit: None, ..PlanOptions::default() };
            let full = plan(&graph, &heuristic(OrderMode::Auto)).unwrap();
            prop_assert!(validate(&graph, &full, None).is_ok());
            let given = plan(&graph, &heuristic(OrderMode::Given)).unwrap();
            prop_assert!(full.stats.peak_bytes <= given.stats.peak_bytes);
            // Deterministic: no time limit, same input, same plan.
            let again = plan(&graph, &heuristic(OrderMode::Auto)).unwrap();
            prop_assert_eq!(&full.instructions, &again.instructions);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn the_ilp_and_auto_strategies_yield_valid_plans_never_worse_than_the_heuristics(g in arb_graph(ANY_READS)) {
        let graph = Graph::parse(&g.to_string()).unwrap();
        for inplace in [false, true] {
            for order in [OrderMode::Given, OrderMode::Auto] {
                // Work caps (effort 1), no wall clock: the comparison does not depend on load.
                let opts = |strategy| PlanOptions {
                    order,
                    strategy,
                    inplace,
                    time_limit: None,
                    effort: Some(1),
                    ..PlanOptions::default() };
                let heur = plan(&graph, &opts(Solvers::Heuristic)).unwrap();
                for strategy in [Solvers::Ilp, Solvers::Auto] {
                    let exact = plan(&graph, &opts(strategy)).unwrap();
                    let r = validate(&graph, &exact, None);
                    prop_assert!(r.is_ok(), "{}", r.unwrap_err());
                    prop_assert!(exact.stats.peak_bytes <= heur.stats.peak_bytes, "{:?}", strategy);
                    prop_assert!(exact.stats.lower_bound_bytes <= exact.stats.peak_bytes);
                }
            }
        }
    }
}
