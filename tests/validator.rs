//! The validator accepts what the planner emits and catches each kind of broken plan.

use memplan::graph::Graph;
use memplan::plan::{Instruction, Plan};
use memplan::{plan, validate, OrderMode, PlanOptions, ViolationKind};
use serde_json::json;

fn graph(inplace: bool) -> Graph {
    let mut g = json!({
        "format": "memplan-graph/1",
        "name": "v",
        "alignment": 64,
        "tensors": [
            {"name": "x", "size": 1000, "kind": "input"},
            {"name": "w", "size": 64, "kind": "weight"},
            {"name": "a", "size": 1000, "kind": "activation"},
            {"name": "b", "size": 1000, "kind": "activation"},
            {"name": "y", "size": 100, "kind": "output"}
        ],
        "ops": [
            {"name": "conv", "inputs": ["x", "w"], "outputs": ["a"], "workspace": 500},
            {"name": "relu", "inputs": ["a"], "outputs": ["b"]},
            {"name": "head", "inputs": ["b", "x"], "outputs": ["y"]}
        ]
    });
    if inplace {
        g["ops"][1]["inplace"] = json!([[0, 0]]);
    }
    Graph::parse(&g.to_string()).unwrap()
}

fn planned(g: &Graph, inplace: bool) -> Plan {
    plan(
        g,
        &PlanOptions {
            order: OrderMode::Given,
            inplace,
            ..Default::default()
        },
    )
    .unwrap()
}

fn kind_of(g: &Graph, p: &Plan) -> ViolationKind {
    validate(g, p, None)
        .expect_err("plan should be invalid")
        .kind
}

fn position(p: &Plan, f: impl Fn(&Instruction) -> bool) -> usize {
    p.instructions.iter().position(f).unwrap()
}

#[test]
fn the_planners_plan_is_valid_and_its_peak_matches() {
    let g = graph(false);
    let p = planned(&g, false);
    let r = validate(&g, &p, None).unwrap();
    assert_eq!(r.peak, p.stats.peak_bytes);
    assert_eq!(r.execs, 3);
}

#[test]
fn moving_a_tensor_onto_a_live_one_is_an_overlap_naming_both() {
    let g = graph(false);
    let mut p = planned(&g, false);
    let i = position(
        &p,
        |ins| matches!(ins, Instruction::Alloc { tensor, .. } if tensor == "a"),
    );
    if let Instruction::Alloc { offset, .. } = &mut p.instructions[i] {
        *offset = 0; // x lives at the arena's start all run
    }
    let x_off = p.instructions.iter().find_map(|ins| match ins {
        Instruction::Alloc { tensor, offset, .. } if tensor == "x" => Some(*offset),
        _ => None,
    });
    assert_eq!(x_off, Some(0), "test assumes x at offset 0");
    match kind_of(&g, &p) {
        ViolationKind::Overlap { what, other, .. } => {
            assert!(what.contains("\"a\""));
            assert_eq!(other, "x");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn freeing_before_the_last_use_is_a_read_of_an_unreserved_tensor() {
    let g = graph(false);
    let mut p = planned(&g, false);
    let free_a = position(
        &p,
        |ins| matches!(ins, Instruction::Free { tensor, .. } if tensor == "a"),
    );
    let exec_relu = position(
        &p,
        |ins| matches!(ins, Instruction::Exec { node, .. } if node == "relu"),
    );
    let ins = p.instructions.remove(free_a);
    p.instructions.insert(exec_relu, ins);
    assert_eq!(
        kind_of(&g, &p),
        ViolationKind::OperandNotReserved {
            op: "relu".into(),
            tensor: "a".into()
        }
    );
}

#[test]
fn a_missing_workspace_offset_names_the_op() {
    let g = graph(false);
    let mut p = planned(&g, false);
    let i = position(
        &p,
        |ins| matches!(ins, Instruction::Exec { node, .. } if node == "conv"),
    );
    p.instructions[i] = Instruction::Exec {
        stream: None,
        node: "conv".into(),
        workspace_offset: None,
        algo: None,
    };
    assert!(matches!(kind_of(&g, &p), ViolationKind::Workspace { op, .. } if op == "conv"));
}

#[test]
fn a_misaligned_offset_is_reported() {
    let g = graph(false);
    let mut p = planned(&g, false);
    if let Instruction::Alloc { offset, .. } = &mut p.instructions[0] {
        *offset += 8;
    }
    assert!(matches!(
        kind_of(&g, &p),
        ViolationKind::Misaligned { alignment: 64, .. }
    ));
}

#[test]
fn a_skipped_op_is_reported_by_name() {
    let g = graph(false);
    let mut p = planned(&g, false);
    // Drop the final exec: y is then never valid and "head" never runs.
    let i = position(
        &p,
        |ins| matches!(ins, Instruction::Exec { node, .. } if node == "head"),
    );
    p.instructions.remove(i);
    assert_eq!(kind_of(&g, &p), ViolationKind::NotExecuted("head".into()));
}

#[test]
fn a_wrong_peak_in_the_stats_is_reported() {
    let g = graph(false);
    let mut p = planned(&g, false);
    p.stats.peak_bytes += 1;
    assert!(matches!(kind_of(&g, &p), ViolationKind::Stats(_)));
}

#[test]
fn a_wrong_arena_or_peak_names_the_instruction_that_reached_the_peak() {
    let g = graph(false);
    let p = planned(&g, false);
    let peak = p.stats.peak_bytes;
    // The instruction whose reservation first reaches the peak, as the message must name it.
    let v = validate(&g, &p, None).unwrap();
    assert_eq!(v.peak, peak);
    let mut small = p.clone();
    small.arena_bytes = peak - 1;
    let ViolationKind::Stats(m) = kind_of(&g, &small) else {
        panic!("not a stats violation")
    };
    assert!(
        m.contains(&format!("replayed peak {peak}, reached at instruction ")),
        "{m}"
    );
    let at: usize = m
        .split("reached at instruction ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    // Replaying the plan up to that instruction reaches the peak; up to the one before, not.
    let upto = |n: usize| -> u64 {
        let mut q = p.clone();
        q.instructions.truncate(n);
        let mut live = std::collections::HashMap::new();
        let mut top = 0;
        for ins in &q.instructions {
            if let memplan::Instruction::Alloc { tensor, offset, .. } = ins {
                let size = g.tensor(g.tensor_by_name(tensor).unwrap()).size;
                live.insert(tensor.clone(), offset + size);
                top = top.max(offset + size);
            }
            if let memplan::Instruction::Exec {
                node,
                workspace_offset: Some(w),
                ..
            } = ins
            {
                let op = g.ops.iter().find(|o| &o.name == node).unwrap();
                top = top.max(w + op.workspace);
            }
        }
        top
    };
    assert_eq!(upto(at + 1), peak, "{m}");
    assert!(upto(at) < peak, "{m}");
    let mut wrong = p.clone();
    wrong.stats.peak_bytes += 1;
    let ViolationKind::Stats(m) = kind_of(&g, &wrong) else {
        panic!("not a stats violation")
    };
    assert!(m.contains(&format!("reached at instruction {at} ")), "{m}");
}

#[test]
fn a_weight_entry_naming_no_tensor_is_named_by_its_index() {
    let g = graph(false);
    let mut p = planned(&g, false);
    p.weights[0].tensor = "nonexistent".into();
    let ViolationKind::Weights(m) = kind_of(&g, &p) else {
        panic!("not a weights violation")
    };
    assert!(
        m.contains("weights[0]") && m.contains("\"nonexistent\""),
        "{m}"
    );
}

#[test]
fn a_budget_below_the_peak_is_reported() {
    let g = graph(false);
    let p = planned(&g, false);
    let v = validate(&g, &p, Some(p.stats.peak_bytes - 1)).unwrap_err();
    assert!(matches!(v.kind, ViolationKind::OverBudget { .. }));
}

#[test]
fn an_unplaced_weight_is_reported() {
    let g = graph(false);
    let mut p = planned(&g, false);
    p.weights.clear();
    assert!(matches!(kind_of(&g, &p), ViolationKind::Weights(m) if m.contains("\"w\"")));
}

#[test]
fn spilling_and_reloading_at_another_offset_is_valid() {
    let g = graph(false);
    let mut p = planned(&g, false);
    // Spill x after conv, bring it back before head at a fresh offset above everything.
    let after_conv = position(
        &p,
        |ins| matches!(ins, Instruction::Exec { node, .. } if node == "conv"),
    ) + 1;
    p.instructions.insert(
        after_conv,
        Instruction::SpillOut {
            stream: None,
            tensor: "x".into(),
            host_offset: 0,
        },
    );
    let before_head = position(
        &p,
        |ins| matches!(ins, Instruction::Alloc { tensor, .. } if tensor == "y"),
    );
    let top = p.arena_bytes.div_ceil(64) * 64;
    p.instructions.insert(
        before_head,
        Instruction::SpillIn {
            stream: None,
            tensor: "x".into(),
            offset: top,
            mem_id: None,
        },
    );
    p.arena_bytes = top + 1000;
    p.stats.peak_bytes = top + 1000;
    p.host_bytes = 1000;
    let r = validate(&g, &p, None).unwrap();
    assert_eq!((r.spills, r.host_peak), (1, 1000));
    p.host_bytes = 999;
    assert!(matches!(kind_of(&g, &p), ViolationKind::Stats(_)));
}

#[test]
fn reading_a_spilled_tensor_is_reported() {
    let g = graph(false);
    let mut p = planned(&g, false);
    let after_conv = position(
        &p,
        |ins| matches!(ins, Instruction::Exec { node, .. } if node == "conv"),
    ) + 1;
    p.instructions.insert(
        after_conv,
        Instruction::SpillOut {
            stream: None,
            tensor: "x".into(),
            host_offset: 0,
        },
    );
    p.host_bytes = 1000;
    assert!(
        matches!(kind_of(&g, &p), ViolationKind::OperandNotReserved { op, tensor } if op == "head" && tensor == "x")
    );
}

#[test]
fn inplace_plans_share_bytes_and_pass() {
    let g = graph(true);
    let p = planned(&g, true);
    let alloc_b = p
        .instructions
        .iter()
        .find_map(|ins| match ins {
            Instruction::Alloc {
                tensor, inplace_of, ..
            } if tensor == "b" => Some(inplace_of.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(alloc_b.as_deref(), Some("a"));
    validate(&g, &p, None).unwrap();
    assert!(p.stats.peak_bytes < planned(&g, false).stats.peak_bytes);
}

#[test]
fn inplace_without_the_graphs_permission_is_refused() {
    let g_no = graph(false);
    let p = planned(&graph(true), true);
    assert!(
        matches!(kind_of(&g_no, &p), ViolationKind::BadInplace { tensor, donor, .. } if tensor == "b" && donor == "a")
    );
}

#[test]
fn a_donor_that_outlives_its_inplace_op_is_reported() {
    let text = json!({
        "format": "memplan-graph/1",
        "alignment": 64,
        "tensors": [
            {"name": "x", "size": 64, "kind": "input"},
            {"name": "a", "size": 64, "kind": "activation"},
            {"name": "b", "size": 64, "kind": "activation"},
            {"name": "y", "size": 64, "kind": "output"}
        ],
        "ops": [
            {"name": "p", "inputs": ["x"], "outputs": ["a"]},
            {"name": "q", "inputs": ["a"], "outputs": ["b"], "inplace": [[0, 0]]},
            {"name": "r", "inputs": ["a", "b"], "outputs": ["y"]}
        ]
    });
    let g = Graph::parse(&text.to_string()).unwrap();
    let p: Plan = serde_json::from_value(json!({
        "format": "memplan-plan/1", "graph": "", "arena_bytes": 192,
        "instructions": [
            {"op": "alloc", "tensor": "x", "offset": 0},
            {"op": "alloc", "tensor": "a", "offset": 64},
            {"op": "exec", "node": "p", "workspace_offset": null},
            {"op": "alloc", "tensor": "b", "offset": 64, "inplace_of": "a"},
            {"op": "exec", "node": "q", "workspace_offset": null},
            {"op": "alloc", "tensor": "y", "offset": 128},
            {"op": "exec", "node": "r", "workspace_offset": null}
        ],
        "stats": {"peak_bytes": 192}
    }))
    .unwrap();
    assert_eq!(
        validate(&g, &p, None).unwrap_err().to_string(),
        "instruction 6: tensor \"b\" cannot take the bytes of \"a\" in place: the donor is \
         still reserved when op \"r\" runs; a donor must die at the in-place op \"q\" (freed \
         before the next exec)"
    );
}

/// x → p → a → q (in place) → b → r → y, with `a` twice as large as `b` when `wide`.
fn inplace_chain(wide: bool) -> Graph {
    let a = if wide { 128 } else { 64 };
    Graph::parse(
        &json!({
            "format": "memplan-graph/1",
            "name": "chain",
            "alignment": 64,
            "tensors": [
                {"name": "x", "size": 64, "kind": "input"},
                {"name": "a", "size": a, "kind": "activation"},
                {"name": "b", "size": 64, "kind": "activation"},
                {"name": "y", "size": 64, "kind": "output"}
            ],
            "ops": [
                {"name": "p", "inputs": ["x"], "outputs": ["a"]},
                {"name": "q", "inputs": ["a"], "outputs": ["b"], "inplace": [[0, 0]]},
                {"name": "r", "inputs": ["b"], "outputs": ["y"]}
            ]
        })
        .to_string(),
    )
    .unwrap()
}

fn chain_plan(arena: u64, instructions: Vec<serde_json::Value>) -> Plan {
    serde_json::from_value(json!({
        "format": "memplan-plan/1", "graph": "chain", "arena_bytes": arena,
        "instructions": instructions,
        "stats": {"peak_bytes": arena}
    }))
    .unwrap()
}

/// The valid in-place stream of [`inplace_chain`]: `b` takes `a`'s bytes at `b_offset`, and
/// `a` is freed right after `q`.
fn chain_steps(b_offset: u64) -> Vec<serde_json::Value> {
    vec![
        json!({"op": "alloc", "tensor": "x", "offset": 0}),
        json!({"op": "alloc", "tensor": "a", "offset": 64}),
        json!({"op": "exec", "node": "p"}),
        json!({"op": "free", "tensor": "x"}),
        json!({"op": "alloc", "tensor": "b", "offset": b_offset, "inplace_of": "a"}),
        json!({"op": "exec", "node": "q"}),
        json!({"op": "free", "tensor": "a"}),
        json!({"op": "alloc", "tensor": "y", "offset": 0}),
        json!({"op": "exec", "node": "r"}),
        json!({"op": "free", "tensor": "b"}),
    ]
}

#[test]
fn an_inplace_chain_whose_donor_dies_at_the_op_is_valid_and_counts_shared_bytes_once() {
    let g = inplace_chain(false);
    let r = validate(&g, &chain_plan(128, chain_steps(64)), None).unwrap();
    assert_eq!(r.peak, 128);
    assert_eq!(r.max_live, 128, "a and b share 64 bytes, counted once");
}

#[test]
fn recomputing_a_donor_while_its_taker_holds_the_bytes_is_refused() {
    // The issue's case: `alloc b inplace_of a; exec q; exec p` re-runs a's producer, which
    // overwrites the bytes b now holds; the frees come after.
    let g = inplace_chain(false);
    let mut steps = chain_steps(64);
    let free_x = steps.remove(3);
    steps.insert(5, json!({"op": "exec", "node": "p"}));
    steps.insert(7, free_x);
    let v = validate(&g, &chain_plan(128, steps), None).unwrap_err();
    assert_eq!(v.instruction, Some(5));
    assert!(
        matches!(&v.kind, ViolationKind::BadInplace { tensor, donor, reason }
            if tensor == "b" && donor == "a" && reason.contains("still reserved when op \"p\" runs")),
        "{v}"
    );
}

#[test]
fn an_inplace_taker_must_start_at_its_donors_offset() {
    let g = inplace_chain(true);
    let v = validate(&g, &chain_plan(192, chain_steps(128)), None).unwrap_err();
    assert_eq!(v.instruction, Some(4));
    assert!(
        matches!(&v.kind, ViolationKind::BadInplace { reason, .. } if reason.contains("not the donor's offset 64")),
        "{v}"
    );
}

#[test]
fn a_freed_graph_input_allocated_again_holds_no_data() {
    let g = inplace_chain(false);
    let mut steps = chain_steps(64);
    steps.insert(1, json!({"op": "free", "tensor": "x"}));
    steps.insert(2, json!({"op": "alloc", "tensor": "x", "offset": 0}));
    let v = validate(&g, &chain_plan(128, steps), None).unwrap_err();
    assert_eq!(v.instruction, Some(4));
    assert_eq!(
        v.kind,
        ViolationKind::InputNotValid {
            op: "p".into(),
            tensor: "x".into()
        }
    );
}

#[test]
fn a_plan_for_another_graph_is_refused() {
    let g = graph(false);
    let mut p = planned(&g, false);
    p.graph = "something else".into();
    assert_eq!(
        kind_of(&g, &p),
        ViolationKind::GraphName {
            plan: "something else".into(),
            graph: "v".into()
        }
    );
}

#[test]
fn a_plan_without_stats_is_a_parse_error_naming_the_field() {
    let g = graph(false);
    let mut doc = serde_json::to_value(planned(&g, false)).unwrap();
    doc.as_object_mut().unwrap().remove("stats");
    let e = Plan::parse(&doc.to_string()).unwrap_err();
    assert!(e.message.contains("missing field `stats`"), "{e}");
    let mut doc = serde_json::to_value(planned(&g, false)).unwrap();
    doc["stats"].as_object_mut().unwrap().remove("peak_bytes");
    let e = Plan::parse(&doc.to_string()).unwrap_err();
    assert!(e.message.contains("missing field `peak_bytes`"), "{e}");
}

#[test]
fn a_hand_edited_plan_that_runs_a_dropout_twice_is_rejected_naming_the_op() {
    let mut v = graph(false).to_value();
    v["ops"][1]["type"] = json!("dropout");
    let g = Graph::parse(&v.to_string()).unwrap();
    let mut p = planned(&g, false);
    validate(&g, &p, None).unwrap();
    let i = position(
        &p,
        |i| matches!(i, Instruction::Exec { node, .. } if node == "relu"),
    );
    let again = p.instructions[i].clone();
    p.instructions.insert(i + 1, again);
    let kind = kind_of(&g, &p);
    assert_eq!(
        kind,
        ViolationKind::ForbiddenRecompute {
            op: "relu".into(),
            op_type: "dropout".into()
        }
    );
    assert!(kind.to_string().contains("\"relu\""), "{kind}");
    // The same second exec of a ReLU is an ordinary recompute.
    let relu = graph(false);
    validate(&relu, &p, None).unwrap();
}
