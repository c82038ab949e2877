//! The independent checker (`../shared/tools/check_plan.py`) on an in-memory graph and plan,
//! shared by the black-box tests. It brings `shared.rs` along (`check_plan::shared`).
#![allow(dead_code)]

#[path = "shared.rs"]
pub mod shared;

use memplan::{Graph, Plan};
use std::process::Command;

/// [`python_check_within`] without a budget.
#[track_caller]
pub fn python_check(graph: &Graph, plan: &Plan, tag: &str) {
    python_check_within(graph, plan, None, tag)
}

/// Writes `graph` and `plan` to temporary files, runs check_plan.py on them (with
/// `--budget BYTES` when `budget` is given) and asserts that the plan is valid (within the
/// budget) and that the checker's peak is the plan's `stats.peak_bytes`. Without the checker
/// or python3: see [`shared::skip`].
#[track_caller]
pub fn python_check_within(graph: &Graph, plan: &Plan, budget: Option<u64>, tag: &str) {
    let Some(script) = shared::check_plan_py() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let base = format!("{}-{tag}", graph.name);
    let (gp, pp) = (
        dir.path().join(format!("{base}.graph.json")),
        dir.path().join(format!("{base}.plan.json")),
    );
    std::fs::write(&gp, graph.to_json()).unwrap();
    std::fs::write(&pp, plan.to_json()).unwrap();
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(&gp).arg(&pp);
    if let Some(b) = budget {
        cmd.args(["--budget", &b.to_string()]);
    }
    let r = cmd.output().expect("python3 runs");
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap_or_else(|_| {
        panic!(
            "check_plan.py ({tag}): {}",
            String::from_utf8_lossy(&r.stderr)
        )
    });
    assert_eq!(
        v["valid"], true,
        "{} ({tag}, budget {budget:?}): {}",
        graph.name, v["error"]
    );
    assert_eq!(v["peak"], plan.stats.peak_bytes, "{} ({tag})", graph.name);
}
