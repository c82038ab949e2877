//! `memplan check` on the hand-corrupted plans of `tests/support/kinds.rs` (one per validator
//! error kind): exit 1 for each, 0 for the valid ones; an unknown exec `algo` is an invalid
//! plan (1), not a usage error (2).

#[path = "../../tests/support/kinds.rs"]
mod kinds;

use memplan::plan::{Instruction, Plan};
use std::path::Path;
use std::process::Command;

/// `memplan check GRAPH PLAN [--budget B]`: exit code and stderr.
fn check(dir: &Path, plan: &Plan, budget: Option<u64>) -> (Option<i32>, String) {
    let g = dir.join("kinds.graph.json");
    let p = dir.join("kinds.plan.json");
    std::fs::write(&g, kinds::graph().to_json()).unwrap();
    std::fs::write(&p, plan.to_json()).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memplan"));
    cmd.arg("check").arg(&g).arg(&p);
    if let Some(b) = budget {
        cmd.arg("--budget").arg(b.to_string());
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn memplan_check_exits_0_for_the_valid_hand_written_plans() {
    let dir = tempfile::tempdir().unwrap();
    for p in [kinds::plain(), kinds::inplace()] {
        let (code, err) = check(dir.path(), &p, None);
        assert_eq!(code, Some(0), "{err}");
    }
}

#[test]
fn memplan_check_exits_1_for_every_corrupted_plan() {
    let dir = tempfile::tempdir().unwrap();
    for c in kinds::cases() {
        let (code, err) = check(dir.path(), &c.plan, c.budget);
        assert_eq!(code, Some(1), "{}: {err}", c.name);
        assert!(err.starts_with("invalid"), "{}: {err}", c.name);
    }
}

#[test]
fn memplan_check_exits_1_for_an_exec_with_an_unknown_conv_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = kinds::plain();
    let i = kinds::at(&p, "exec conv");
    if let Instruction::Exec { algo, .. } = &mut p.instructions[i] {
        *algo = Some("no_such_algo".into());
    }
    let (code, err) = check(dir.path(), &p, None);
    assert_eq!(code, Some(1), "{err}");
}
