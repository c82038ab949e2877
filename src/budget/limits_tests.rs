//! Budgeted plans stay within their limits: modelled times stay finite (a written plan always
//! reads back), and the timing of a plan takes linear time (it runs after the time cap).

use super::*;
use crate::graph::{MAX_OP_FLOPS, MAX_OP_TIME_US};
use std::time::Instant;

/// `n` relu-like ops in a chain, from input `x` to output `c{n-1}`, each `extra` added to
/// every op as JSON fields.
fn chain_json(n: usize, size: u64, extra: &str) -> String {
    let mut tensors = vec![format!(
        r#"{{"name": "x", "size": {size}, "kind": "input"}}"#
    )];
    let mut ops = Vec::new();
    for i in 0..n {
        let kind = if i + 1 == n { "output" } else { "activation" };
        tensors.push(format!(
            r#"{{"name": "c{i}", "size": {size}, "kind": "{kind}"}}"#
        ));
        let input = if i == 0 {
            "x".to_string()
        } else {
            format!("c{}", i - 1)
        };
        ops.push(format!(
            r#"{{"name": "op{i}", "type": "relu", "inputs": ["{input}"], "outputs": ["c{i}"]{extra}}}"#
        ));
    }
    format!(
        r#"{{"format": "memplan-graph/1", "name": "chain", "alignment": 1, "tensors": [{}], "ops": [{}]}}"#,
        tensors.join(","),
        ops.join(",")
    )
}

#[test]
fn simulating_the_plan_of_a_long_chain_takes_linear_time() {
    let n = 60_000;
    let g = Graph::parse(&chain_json(n, 64, "")).unwrap();
    let order: Vec<usize> = (0..n).collect();
    let name = |i: usize| g.tensors[i].name.clone();
    // x, c0, ... at alternating offsets: alloc the output, run, free the input.
    let mut ins = vec![Instruction::Alloc {
        tensor: name(0),
        offset: 0,
        mem_id: None,
        inplace_of: None,
    }];
    for k in 0..n {
        ins.push(Instruction::Alloc {
            tensor: name(k + 1),
            offset: if k % 2 == 0 { 64 } else { 0 },
            mem_id: None,
            inplace_of: None,
        });
        ins.push(Instruction::Exec {
            stream: None,
            node: g.ops[k].name.clone(),
            workspace_offset: None,
            algo: None,
        });
        ins.push(Instruction::Free {
            stream: None,
            tensor: name(k),
        });
    }
    let plan = Plan::new(&g, ins, 128, 0);
    crate::validate::validate(&g, &plan, Some(128)).unwrap();
    let ctx = Ctx::new(&g, &order, DeviceProfile::h200(), Params::default());
    let started = Instant::now();
    let t = simulate(&g, &ctx, &plan);
    let took = started.elapsed();
    // A scan of the tensors per instruction took about 13 s here.
    assert!(took.as_secs_f64() < 2.0, "simulate took {took:?}");
    assert!(t.step_us > 0.0 && t.step_us.is_finite());
}

#[test]
fn op_figures_too_large_to_sum_are_refused_naming_the_op_and_field() {
    for (field, value) in [
        ("time_us", "1e308"),
        ("flops", "1e308"),
        ("time_us", "1e16"),
    ] {
        let e = Graph::parse(&chain_json(3, 64, &format!(r#", "{field}": {value}"#)))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("op \"op0\" {field}: ")) && e.contains("largest accepted"),
            "{e}"
        );
    }
    Graph::parse(&chain_json(
        3,
        64,
        &format!(r#", "time_us": {MAX_OP_TIME_US}"#),
    ))
    .unwrap();
    Graph::parse(&chain_json(3, 64, &format!(r#", "flops": {MAX_OP_FLOPS}"#))).unwrap();
}

#[test]
fn a_budgeted_plan_of_the_largest_accepted_figures_writes_finite_stats_that_read_back() {
    // The largest figures a graph may give, on the slowest device accepted.
    for extra in [
        format!(r#", "time_us": {MAX_OP_TIME_US}"#),
        format!(r#", "flops": {MAX_OP_FLOPS}"#),
    ] {
        let g = Graph::parse(&chain_json(12, 1 << 20, &extra)).unwrap();
        let mut profile = DeviceProfile::h200();
        for rate in [
            &mut profile.fp32_flops_per_s,
            &mut profile.half_flops_per_s,
            &mut profile.memory_bytes_per_s,
            &mut profile.h2d_bytes_per_s,
            &mut profile.d2h_bytes_per_s,
        ] {
            *rate = 1.0;
        }
        let order: Vec<usize> = (0..g.ops.len()).collect();
        let opts = BudgetOptions {
            budget: 3 << 20,
            profile,
            ..BudgetOptions::default()
        };
        let plan = plan_with_budget(&g, &order, &opts).unwrap();
        let b = plan.stats.budget.as_ref().unwrap();
        for (what, x) in [
            ("base_step_us", b.base_step_us),
            ("step_us", b.step_us),
            ("overhead_us", b.overhead_us),
            ("overhead_pct", b.overhead_pct),
            ("recompute_us", b.recompute_us),
            ("recompute_flops", b.recompute_flops),
        ] {
            assert!(x.is_finite(), "{what} = {x}");
        }
        let back = Plan::parse(&plan.to_json()).unwrap();
        crate::validate::validate(&g, &back, Some(3 << 20)).unwrap();
    }
}

#[test]
fn a_plan_never_writes_a_figure_json_cannot_read() {
    let g = Graph::parse(&chain_json(2, 64, "")).unwrap();
    let order = [0, 1];
    let mut plan = plan_with_budget(
        &g,
        &order,
        &BudgetOptions {
            budget: 1 << 20,
            ..BudgetOptions::default()
        },
    )
    .unwrap();
    plan.stats.elapsed_ms = f64::INFINITY;
    plan.stats.gap = Some(f64::NAN);
    if let Some(b) = plan.stats.budget.as_mut() {
        b.step_us = f64::INFINITY;
        b.overhead_pct = f64::NEG_INFINITY;
    }
    let text = plan.to_json();
    let back = Plan::parse(&text).unwrap();
    assert_eq!(back.stats.elapsed_ms, f64::MAX);
    assert_eq!(back.stats.gap, Some(0.0));
    let b = back.stats.budget.unwrap();
    assert_eq!((b.step_us, b.overhead_pct), (f64::MAX, f64::MIN));
}
