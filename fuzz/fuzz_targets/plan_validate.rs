//! Fuzzes the memplan-plan/1 reader and the validator: `memplan::Plan::parse`, then
//! `memplan::validate` and `memplan::pipeline::graph_for_plan` (the `memplan check` path,
//! which reads a plan's carried `rewritten_graph` and conv algorithms) against one of a few
//! bundled graphs. The first input byte picks the graph (the bundled sample
//! `memplan::graph::SAMPLE_JSON`, `graphs/kinds.json`: workspace, weights, in-place hints,
//! `graphs/fused.json`: a fused op); the rest is the plan's JSON.
//!
//! Invariants checked: nothing panics (bad plans are a typed `PlanParseError` or
//! `Violation`); a parsed plan survives `Plan::parse(&p.to_json()) == p`; the validator is
//! deterministic, and for a valid plan with peak P the budget P passes and P - 1 fails with
//! `OverBudget`; the memory profile and the Chrome trace of a valid plan are built without
//! error and the profile's peak is the replay's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memplan::analysis::profile::profile;
use memplan::pipeline::graph_for_plan;
use memplan::trace::chrome_trace;
use memplan::{validate, Graph, Plan, ViolationKind};
use std::sync::OnceLock;

const GRAPHS: [&str; 3] = [
    memplan::graph::SAMPLE_JSON,
    include_str!("../graphs/kinds.json"),
    include_str!("../graphs/fused.json"),
];

fn graphs() -> &'static [Graph] {
    static PARSED: OnceLock<Vec<Graph>> = OnceLock::new();
    PARSED.get_or_init(|| {
        GRAPHS
            .iter()
            .map(|g| Graph::parse(g).expect("a bundled graph parses"))
            .collect()
    })
}

fn check(graph: &Graph, plan: &Plan) {
    let first = validate(graph, plan, None);
    assert_eq!(
        validate(graph, plan, None),
        first,
        "the validator is not deterministic"
    );
    let Ok(r) = first else {
        return;
    };
    assert_eq!(validate(graph, plan, Some(r.peak)), Ok(r));
    if r.peak > 0 {
        let over = validate(graph, plan, Some(r.peak - 1)).expect_err("a budget below the peak");
        assert!(
            matches!(over.kind, ViolationKind::OverBudget { .. }),
            "a budget below the peak fails with {over}"
        );
    }
    let prof = profile(graph, plan).expect("a valid plan has a profile");
    assert_eq!(prof.peak, r.peak, "profile and replay disagree on the peak");
    chrome_trace(graph, plan).expect("a valid plan has a Chrome trace");
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let Ok(plan) = Plan::parse(text) else {
        return;
    };
    let json = plan.to_json();
    match Plan::parse(&json) {
        Ok(back) => assert_eq!(back, plan, "to_json round trip changed the plan:\n{json}"),
        Err(e) => panic!("to_json of a parsed plan does not parse again: {e}\n{json}"),
    }
    let all = graphs();
    let graph = &all[pick as usize % all.len()];
    check(graph, &plan);
    // `memplan check GRAPH PLAN`: the graph the plan refers to (its carried rewritten graph
    // after the derivation proof, or the conv algorithms it names written in).
    if plan.rewritten_graph.is_some() || plan.instructions.iter().any(has_algo) {
        if let Ok(g) = graph_for_plan(graph.clone(), &plan) {
            check(&g, &plan);
        }
    }
});

fn has_algo(i: &memplan::Instruction) -> bool {
    matches!(i, memplan::Instruction::Exec { algo: Some(_), .. })
}
