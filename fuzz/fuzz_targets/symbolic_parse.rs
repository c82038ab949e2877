//! Fuzzes the symbolic graph reader (`memplan::symbolic::SymbolicGraph::parse`: size
//! expressions over declared symbols) and, for small graphs, symbolic planning.
//!
//! Invariants checked: parsing never panics (bad input is a typed `SymbolicError`); a graph that
//! parses instantiates at its min and max corners into graphs `Graph::parse` accepts again
//! from their JSON, with every tensor's size at the min corner at most its size at the max
//! corner (sizes are monotone polynomials); for graphs of at most 40 ops, `plan_symbolic`
//! either refuses with a typed error or gives a plan that the range check
//! (`check_symbolic`: corners, quartiles, seeded samples through the validator) accepts and
//! `prove_layout` proves valid at every binding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memplan::symbolic::{check_symbolic, plan_symbolic, prove_layout, Proof, SymbolicGraph};
use memplan::{Graph, PipelineOptions};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(sg) = SymbolicGraph::parse(text) else {
        return;
    };
    let lo = sg
        .instantiate(&sg.min_corner())
        .expect("a parsed symbolic graph instantiates at its min corner");
    let hi = sg
        .instantiate(&sg.max_corner())
        .expect("a parsed symbolic graph instantiates at its max corner");
    for g in [&lo, &hi] {
        let back = Graph::parse(&g.to_json()).expect("an instantiated graph parses again");
        assert_eq!(&back, g);
    }
    for (a, b) in lo.tensors.iter().zip(&hi.tensors) {
        assert!(a.size <= b.size, "tensor {} shrinks: {} > {}", a.name, a.size, b.size);
    }
    if sg.workspaces.len() > 40 {
        return;
    }
    let opts = PipelineOptions {
        effort: 0,
        time_limit_s: 1.0,
        ..PipelineOptions::default()
    };
    let Ok(sp) = plan_symbolic(&sg, &opts) else {
        return;
    };
    if let Err(e) = check_symbolic(&sg, &sp, 4, 0) {
        panic!("the planner's symbolic plan fails the range check: {e}");
    }
    let proof = prove_layout(&sg, &sp).expect("the min corner instantiates");
    assert!(matches!(proof, Proof::Proved { .. }), "{proof:?}");
});
