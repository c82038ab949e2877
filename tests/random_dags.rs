//! Property tests over random DAGs (random sizes, fan-in/out, alignments, workspaces and
//! in-place hints): every placement portfolio member's plan, on the listed order and on every
//! order heuristic's order, with in-place sharing off and on, passes the validator and has a
//! peak ≥ the order's LOAD ≥ the order-independent bound.

use memplan::graph::Graph;
use memplan::plan::emit;
use memplan::{plan, validate, OrderMode, PlanOptions, Strategy as Solvers};
use memplan_solver::order::{self, lifetimes, LifetimeOptions};
use memplan_solver::{placement, Budget};
use proptest::prelude::*;
use serde_json::{json, Value};

/// A random DAG: op i reads 0–3 tensors among the graph inputs, the weights and the outputs of
/// ops before it, and writes 1–2 tensors. Listed order = index order, shuffled by `perm` so the
/// listed order is not always topological.
fn arb_graph() -> impl Strategy<Value = Value> {
    (2usize..14, 1usize..3, any::<u64>()).prop_map(|(n_ops, n_inputs, seed)| {
        let mut rng = seed | 1;
        let mut next = move |m: u64| {
            // xorshift64*: deterministic per seed
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            (rng.wrapping_mul(0x2545F4914F6CDD1D) >> 11) % m.max(1)
        };
        let mut tensors = Vec::new();
        let mut readable: Vec<String> = Vec::new();
        for i in 0..n_inputs {
            tensors.push(json!({"name": format!("in{i}"), "size": 1 + next(5000), "kind": "input"}));
            readable.push(format!("in{i}"));
        }
        tensors.push(json!({"name": "w0", "size": 1 + next(300), "kind": "weight"}));
        readable.push("w0".into());
        let mut ops = Vec::new();
        let mut produced: Vec<(String, usize)> = Vec::new();
        for k in 0..n_ops {
            let fan_in = next(4) as usize;
            let mut inputs = Vec::new();
            for _ in 0..fan_in {
                inputs.push(readable[next(readable.len() as u64) as usize].clone());
            }
            let fan_out = 1 + next(2) as usize;
            let mut outputs = Vec::new();
            for j in 0..fan_out {
                let name = format!("t{k}_{j}");
                let align = [1u64, 4, 64, 256, 512][next(5) as usize];
                let mut t = json!({"name": name, "size": 1 + next(8000), "kind": "activation"});
                if next(3) == 0 {
                    t["alignment"] = json!(align);
                }
                tensors.push(t);
                outputs.push(name.clone());
                produced.push((name.clone(), tensors.len() - 1));
                readable.push(name);
            }
            let mut op = json!({"name": format!("op{k}"), "type": "mix", "inputs": inputs, "outputs": outputs});
            if next(3) == 0 {
                op["workspace"] = json!(1 + next(3000));
            }
            if fan_in > 0 && next(2) == 0 {
                op["inplace"] = json!([[next(fan_out as u64), next(fan_in as u64)]]);
            }
            ops.push(op);
        }
        // Some produced tensors become graph outputs, always the last op's first output.
        let last = produced.len() - 1;
        for (i, (_, idx)) in produced.iter().enumerate() {
            if i == last || next(4) == 0 {
                tensors[*idx]["kind"] = json!("output");
            }
        }
        // Shuffle the listed order a little (adjacent swaps): may break topological order.
        for _ in 0..next(3) {
            let i = next(ops.len() as u64 - 1) as usize;
            ops.swap(i, i + 1);
        }
        json!({"format": "memplan-graph/1", "name": "random", "alignment": 64, "tensors": tensors, "ops": ops})
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_portfolio_member_on_every_heuristic_order_yields_a_valid_plan(g in arb_graph()) {
        let graph = Graph::parse(&g.to_string()).unwrap();
        let (problem, mapping) = graph.order_problem_with_mapping();
        for inplace in [false, true] {
            let lopts = LifetimeOptions { inplace };
            let bound = order::bound::order_lower_bound(&problem, &lopts);
            let listed = problem.listed_topological_order().unwrap();
            let mut orders = vec![listed.clone()];
            for o in order::registry() {
                let ord = o.order(&problem, &listed, &lopts, &Budget::UNLIMITED);
                problem.check_order(&ord).unwrap();
                orders.push(ord);
            }
            for ord in &orders {
                let lt = lifetimes(&problem, ord, &lopts);
                let load = lt.problem.load();
                prop_assert!(bound <= load, "bound {} > LOAD {}", bound, load);
                for placer in placement::registry() {
                    let pl = placer.place(&lt.problem, &Budget::UNLIMITED).unwrap();
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
    fn the_ilp_and_auto_strategies_yield_valid_plans_never_worse_than_the_heuristics(g in arb_graph()) {
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
