//! Shared by the CLI's tests: the bundled sample graph, `../shared` and python3 (the
//! workspace's tests/support/shared.rs: skip with a note, or fail under
//! `MEMPLAN_REQUIRE_SHARED=1`) and the independent checker on plan files.
#![allow(dead_code)]

#[path = "../../../tests/support/shared.rs"]
pub mod shared;

use std::path::Path;
use std::process::{Command, Output};

/// Runs the `memplan` binary built for these tests with `args`.
pub fn memplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .output()
        .unwrap()
}

/// The path of the sample graph (samples/resnet_block.train.json, the one `sample` names on
/// the command line) as a command-line argument.
pub fn sample() -> String {
    format!(
        "{}/../samples/resnet_block.train.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The sample graph (see [`sample`]) as JSON.
pub fn sample_json() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(sample()).unwrap()).unwrap()
}

/// The zoo graph `../shared/zoo/NAME.json` as a command-line argument, if present (see
/// [`shared::skip`]).
#[track_caller]
pub fn zoo(name: &str) -> Option<String> {
    shared::zoo_path(name).map(|p| p.to_string_lossy().into_owned())
}

/// Runs `check_plan.py GRAPH PLAN` (with `--budget BYTES` when `budget` is given), asserts
/// that the plan is valid (within the budget) and returns the checker's report; `None` when
/// the checker or python3 is missing (see [`shared::skip`]).
#[track_caller]
pub fn check_plan_py(
    graph: impl AsRef<Path>,
    plan: impl AsRef<Path>,
    budget: Option<u64>,
) -> Option<serde_json::Value> {
    let script = shared::check_plan_py()?;
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(graph.as_ref()).arg(plan.as_ref());
    if let Some(b) = budget {
        cmd.args(["--budget", &b.to_string()]);
    }
    let r = cmd.output().expect("python3 runs");
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap_or_else(|_| {
        panic!(
            "check_plan.py on {}: {}",
            plan.as_ref().display(),
            String::from_utf8_lossy(&r.stderr)
        )
    });
    assert_eq!(
        v["valid"],
        true,
        "check_plan.py on {} (budget {budget:?}): {}",
        plan.as_ref().display(),
        v["error"]
    );
    assert!(r.status.success(), "check_plan.py exits 0 on a valid plan");
    Some(v)
}
