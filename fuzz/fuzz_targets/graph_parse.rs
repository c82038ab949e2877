//! Fuzzes the memplan-graph/1 reader, `memplan::Graph::parse`, on arbitrary text.
//!
//! Invariants checked: parsing never panics (bad input is a typed `GraphError`); a graph that
//! parses survives the round trip `Graph::parse(&g.to_json()) == g`; its order problem is
//! consistent (one value per arena tensor, the listed topological order exists and passes
//! `check_order`); the buffers of that order (with and without in-place merging) form a valid
//! placement problem, and greedy-by-size places them without overlap (or reports a typed
//! overflow).
#![no_main]

use libfuzzer_sys::fuzz_target;
use memplan::graph::TensorKind;
use memplan::Graph;
use memplan_solver::order::{lifetimes, LifetimeOptions};
use memplan_solver::placement::greedy_by_size::GreedyBySize;
use memplan_solver::placement::Placer;
use memplan_solver::problem::PlacementError;
use memplan_solver::Limits;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(g) = Graph::parse(text) else {
        return;
    };

    let json = g.to_json();
    match Graph::parse(&json) {
        Ok(back) => assert_eq!(back, g, "to_json round trip changed the graph:\n{json}"),
        Err(e) => panic!("to_json of a parsed graph does not parse again: {e}\n{json}"),
    }

    let (problem, mapping) = g.order_problem_with_mapping();
    let arena = g
        .tensors
        .iter()
        .filter(|t| t.kind != TensorKind::Weight)
        .count();
    assert_eq!(problem.values.len(), arena);
    assert_eq!(mapping.value_tensor.len(), arena);
    assert_eq!(problem.nodes.len(), g.ops.len());
    let order = problem
        .listed_topological_order()
        .expect("a parsed graph has no cycle");
    problem
        .check_order(&order)
        .expect("the listed topological order is topological");

    for inplace in [false, true] {
        let lt = lifetimes(&problem, &order, &LifetimeOptions { inplace });
        lt.problem
            .validate()
            .expect("the lifetimes of a valid order are a valid placement problem");
        match GreedyBySize.place(&lt.problem, &Limits::UNLIMITED) {
            Ok(placement) => {
                lt.problem
                    .check(&placement)
                    .expect("greedy-by-size placed buffers that overlap");
            }
            Err(PlacementError::Overflow { .. }) => {}
            Err(e) => panic!("greedy-by-size failed with {e}"),
        }
    }
});
