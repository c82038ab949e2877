//! The independent checker (`../shared/tools/check_plan.py`) on an in-memory graph and plan,
//! shared by the black-box tests.
#![allow(dead_code)]

use memplan::{Graph, Plan};
use std::path::PathBuf;
use std::process::Command;

/// Writes `graph` and `plan` to temporary files, runs check_plan.py on them and asserts that
/// the plan is valid and that the checker's peak is the plan's `stats.peak_bytes`.
pub fn python_check(graph: &Graph, plan: &Plan, tag: &str) {
    let shared = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared");
    let dir = std::env::temp_dir().join(format!("memplan-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = format!("{}-{tag}", graph.name);
    let (gp, pp) = (
        dir.join(format!("{base}.graph.json")),
        dir.join(format!("{base}.plan.json")),
    );
    std::fs::write(&gp, graph.to_json()).unwrap();
    std::fs::write(&pp, plan.to_json()).unwrap();
    let r = Command::new("python3")
        .arg(shared.join("tools/check_plan.py"))
        .arg(&gp)
        .arg(&pp)
        .output()
        .expect("python3 runs");
    let _ = (std::fs::remove_file(&gp), std::fs::remove_file(&pp));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap_or_else(|_| {
        panic!(
            "check_plan.py ({tag}): {}",
            String::from_utf8_lossy(&r.stderr)
        )
    });
    assert_eq!(v["valid"], true, "{} ({tag}): {}", graph.name, v["error"]);
    assert_eq!(v["peak"], plan.stats.peak_bytes, "{} ({tag})", graph.name);
}
