//! Every validator error kind, each from a hand-corrupted plan of a tiny graph
//! (`support/kinds.rs`): the validator reports exactly that kind and check_plan.py rejects the
//! plan too (except the project's own rules: the graph name, an undeclared in-place pair).
//! `cli/tests/check_kinds.rs` runs the same plans through `memplan check`.
//!
//! Regressions of validator findings: a donor's producer re-run while its in-place taker
//! lives in the donor's bytes (rejected; the executor shows the corruption), in-place donors
//! that do not die at the op, a graph input freed and allocated again; and the cases where
//! the validator disagreed with check_plan.py or the executor.

#[path = "support/kinds.rs"]
mod kinds;
#[path = "support/mutate.rs"]
mod mutate;
#[path = "support/shared.rs"]
mod shared;

use memplan::graph::Graph;
use memplan::pipeline::{self, Control, PipelineOptions};
use memplan::plan::{Instruction, Plan};
use memplan::{validate, OrderMode, Strategy, ViolationKind};
use memplan_executor::{execute, ExecOptions, KernelMode};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn mix() -> ExecOptions {
    ExecOptions {
        kernels: KernelMode::Mix,
        seed: 5,
        ..ExecOptions::default()
    }
}

/// check_plan.py in one process, with `g` written to a temporary file; `None` (after a note)
/// without ../shared or python3.
fn python(g: &Graph) -> Option<(mutate::PyChecker, tempfile::TempDir, PathBuf)> {
    let script = shared::check_plan_py()?;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("graph.json");
    std::fs::write(&path, g.to_json()).unwrap();
    let py = mutate::PyChecker::start(script.parent().unwrap()).unwrap();
    Some((py, dir, path))
}

#[test]
fn the_hand_written_plans_are_valid_and_run_equal_to_the_reference() {
    let g = kinds::graph();
    for (name, p) in [
        ("plain", kinds::plain()),
        ("inplace", kinds::inplace()),
        ("spilled twice", kinds::spilled_twice()),
        ("on two streams", kinds::parallel()),
    ] {
        if name != "spilled twice" {
            let r = validate(&g, &p, None).unwrap_or_else(|v| panic!("{name}: {v}"));
            assert_eq!(r.peak, p.stats.peak_bytes, "{name}");
        }
        let run = execute(&g, &p, &mix()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(run.outputs_equal, "{name}: {:?}", run.first_mismatch);
    }
    if let Some((mut py, _dir, path)) = python(&g) {
        let v = py.check(&path, &kinds::plain(), None).unwrap();
        assert!(v.valid, "{}", v.error);
    }
}

#[test]
fn every_corrupted_plan_gives_exactly_its_violation_kind() {
    let g = kinds::graph();
    for c in kinds::cases() {
        let v = validate(&g, &c.plan, c.budget)
            .expect_err(&format!("{}: the validator accepts it", c.name));
        assert_eq!(kinds::variant(&v.kind), c.kind, "{}: reported {v}", c.name);
    }
}

#[test]
fn every_violation_kind_has_a_corrupted_plan() {
    let covered: BTreeSet<&str> = kinds::cases().iter().map(|c| c.kind).collect();
    let all: BTreeSet<&str> = kinds::VARIANTS.into_iter().collect();
    assert_eq!(covered, all);
}

#[test]
fn check_plan_py_rejects_every_corrupted_plan_but_those_of_the_projects_own_rules() {
    let g = kinds::graph();
    let Some((mut py, _dir, path)) = python(&g) else {
        return;
    };
    for c in kinds::cases() {
        let v = py.check(&path, &c.plan, c.budget).unwrap();
        assert!(!v.crash, "{}: check_plan.py crashed: {}", c.name, v.error);
        assert_eq!(
            !v.valid,
            c.python_rejects,
            "{}: check_plan.py says {}",
            c.name,
            if v.valid { "valid" } else { &v.error }
        );
    }
}

/// The first in-place alloc `T inplace_of D` of `p` rewritten so that D's producer P runs
/// again right after T's producer, with every free of P's operands between P's run and the
/// next exec moved after the rerun (so that everything P touches is still reserved): P
/// overwrites D's bytes — which now hold T.
fn rerun_donor_producer(g: &Graph, p: &Plan) -> Option<(Plan, String)> {
    fn exec_of(name: &str) -> impl Fn(&Instruction) -> bool + '_ {
        move |i| matches!(i, Instruction::Exec { node, .. } if node == name)
    }
    for (a, ins) in p.instructions.iter().enumerate() {
        let Instruction::Alloc {
            tensor,
            inplace_of: Some(d),
            ..
        } = ins
        else {
            continue;
        };
        let producer = |name: &str| {
            let t = g.tensor_by_name(name)?;
            Some(&g.ops[g.producer[t.index()]?.index()])
        };
        let (Some(pp), Some(r)) = (producer(d), producer(tensor)) else {
            continue;
        };
        let e_r = a + p.instructions[a..].iter().position(exec_of(&r.name))?;
        let e_p = p.instructions[..a].iter().rposition(exec_of(&pp.name))?;
        let next = p.instructions[e_r + 1..]
            .iter()
            .position(|i| matches!(i, Instruction::Exec { .. }))
            .map_or(p.instructions.len(), |k| e_r + 1 + k);
        let operand = |i: &Instruction| match i {
            Instruction::Free { tensor, .. } => g
                .tensor_by_name(tensor)
                .is_some_and(|t| pp.inputs.contains(&t) || pp.outputs.contains(&t)),
            _ => false,
        };
        let moved: Vec<usize> = (e_p + 1..next)
            .filter(|&k| operand(&p.instructions[k]))
            .collect();
        let mut m = p.clone();
        m.instructions.clear();
        for (k, i) in p.instructions.iter().enumerate() {
            if !moved.contains(&k) {
                m.instructions.push(i.clone());
            }
            if k == e_r {
                m.instructions.push(p.instructions[e_p].clone());
                m.instructions
                    .extend(moved.iter().map(|&k| p.instructions[k].clone()));
            }
        }
        let what = format!(
            "alloc {tensor} inplace_of {d}; exec {}; exec {} (again); {} frees moved after",
            r.name,
            pp.name,
            moved.len()
        );
        return Some((m, what));
    }
    None
}

#[test]
fn rerunning_a_donors_producer_while_its_in_place_taker_lives_is_rejected_and_corrupts() {
    // resnet18.1.inference (a found hole: relu in place of native_batch_norm.0, then
    // native_batch_norm again); the bundled sample when ../shared is not there.
    let path = shared::zoo_path("resnet18.1.inference");
    let g = match &path {
        Some(p) => Graph::parse(&std::fs::read_to_string(p).unwrap()).unwrap(),
        None => Graph::parse(memplan::graph::SAMPLE_JSON).unwrap(),
    };
    let opts = PipelineOptions {
        order: OrderMode::Given,
        strategy: Strategy::Heuristic,
        inplace: true,
        ..PipelineOptions::default()
    };
    let p = pipeline::run(&g, &opts, &Control::default()).unwrap().plan;
    validate(&g, &p, None).unwrap();
    let (m, what) = rerun_donor_producer(&g, &p).expect("an in-place alloc");
    let v = validate(&g, &m, None).expect_err(&format!("accepted: {what}"));
    assert!(
        matches!(v.kind, ViolationKind::BadInplace { .. }),
        "{what}: {v}"
    );
    let run = execute(&g, &m, &mix()).unwrap();
    assert!(
        !run.outputs_equal,
        "{what}: the run matches the reference, so it does not show the corruption"
    );
}

#[test]
fn an_in_place_donor_that_does_not_die_at_the_op_is_rejected_by_the_validator() {
    let g = kinds::graph();
    for c in kinds::cases()
        .into_iter()
        .filter(|c| c.name.starts_with("an in-place donor"))
    {
        let v = validate(&g, &c.plan, None).expect_err(c.name);
        assert!(
            matches!(v.kind, ViolationKind::BadInplace { .. }),
            "{}: {v}",
            c.name
        );
    }
}

#[test]
fn an_input_freed_and_allocated_again_is_not_valid_for_either_checker() {
    let g = kinds::graph();
    let c = kinds::cases()
        .into_iter()
        .find(|c| c.name.starts_with("an input freed"))
        .unwrap();
    let v = validate(&g, &c.plan, None).expect_err("the validator accepts it");
    assert!(
        matches!(&v.kind, ViolationKind::InputNotValid { tensor, .. } if tensor == "x"),
        "{v}"
    );
    if let Some((mut py, _dir, path)) = python(&g) {
        let r = py.check(&path, &c.plan, None).unwrap();
        assert!(!r.valid, "check_plan.py accepts it");
    }
}

#[test]
fn a_tensor_spilled_again_gives_back_its_first_host_range_as_check_plan_py_does() {
    // `a` is spilled to host [0, 1000), allocated again (not spilled in), recomputed and
    // spilled to [1024, 2024); `x` then spills to [0, 1000). check_plan.py keeps one host
    // range per tensor and accepts; the executor runs it.
    let g = kinds::graph();
    let p = kinds::spilled_twice();
    let run = execute(&g, &p, &mix()).unwrap();
    assert!(run.outputs_equal, "{:?}", run.first_mismatch);
    if let Some((mut py, _dir, path)) = python(&g) {
        let r = py.check(&path, &p, None).unwrap();
        assert!(r.valid, "check_plan.py: {}", r.error);
    }
    let r = validate(&g, &p, None);
    assert!(r.is_ok(), "the validator rejects it: {}", r.unwrap_err());
}

#[test]
fn a_donor_spilled_while_its_in_place_taker_is_reserved_is_rejected() {
    // alloc b inplace_of a; spill_out a; spill_in a elsewhere; exec relu. The rule (README,
    // "The inplace_of rule"): a donor cannot be spilled while its taker is reserved in its
    // bytes; the executor refuses the same spill.
    let g = kinds::graph();
    let mut p = kinds::inplace();
    p.host_bytes = 1000;
    let i = kinds::at(&p, "exec relu");
    p.instructions.splice(
        i..i,
        [
            kinds::ins(serde_json::json!({"op": "spill_out", "tensor": "a", "host_offset": 0})),
            kinds::ins(serde_json::json!({"op": "spill_in", "tensor": "a", "offset": 2048})),
        ],
    );
    let v = validate(&g, &p, None).unwrap_err();
    assert!(
        matches!(&v.kind, ViolationKind::BadInplace { tensor, donor, reason }
            if tensor == "b" && donor == "a" && reason.contains("spilled")),
        "{v}"
    );
    assert!(
        execute(&g, &p, &mix()).is_err(),
        "the executor refuses it too"
    );
}
