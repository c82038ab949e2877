//! Every plan `memplan plan` writes, `memplan check` reads: op figures too large to sum and
//! percentages outside (0, 100] are refused naming the culprit, and the largest figures
//! accepted give finite stats.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::sample_json;

fn memplan() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
}

/// The sample with `field` = `value` on every op, written into `dir`.
fn sample_with(dir: &Path, field: &str, value: f64) -> PathBuf {
    let mut g = sample_json();
    for op in g["ops"].as_array_mut().unwrap() {
        op[field] = serde_json::json!(value);
    }
    let path = dir.join(format!("{field}.json"));
    std::fs::write(&path, g.to_string()).unwrap();
    path
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn op_figures_too_large_to_sum_are_refused_naming_the_op_and_field() {
    let dir = tempfile::tempdir().unwrap();
    for field in ["time_us", "flops"] {
        let graph = sample_with(dir.path(), field, 1e308);
        let o = memplan()
            .arg("plan")
            .arg(&graph)
            .args(["--budget", "60%", "-o"])
            .arg(dir.path().join("plan.json"))
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{field}: {err}");
        assert!(
            err.contains(&format!(
                "op \"l0.conv0\" {field}: 1e308 is over the largest accepted"
            )),
            "{err}"
        );
    }
}

#[test]
fn a_budgeted_plan_of_the_largest_accepted_figures_passes_check() {
    let dir = tempfile::tempdir().unwrap();
    for (field, value) in [
        ("time_us", memplan::graph::MAX_OP_TIME_US),
        ("flops", memplan::graph::MAX_OP_FLOPS),
    ] {
        let graph = sample_with(dir.path(), field, value);
        let plan = dir.path().join(format!("{field}.plan.json"));
        let o = memplan()
            .arg("plan")
            .arg(&graph)
            .args(["--budget", "60%", "--strategy", "heuristic", "-o"])
            .arg(&plan)
            .output()
            .unwrap();
        assert!(o.status.success(), "{field}: {}", stderr(&o));
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
        let b = &doc["stats"]["budget"];
        for k in ["base_step_us", "step_us", "overhead_us", "overhead_pct"] {
            assert!(
                b[k].as_f64().is_some_and(f64::is_finite),
                "{field}: {k} = {}",
                b[k]
            );
        }
        let o = memplan()
            .arg("check")
            .arg(&graph)
            .arg(&plan)
            .output()
            .unwrap();
        assert!(o.status.success(), "{field}: {}", stderr(&o));
    }
}

#[test]
fn a_percentage_budget_outside_0_to_100_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // The one grammar of every front end: also spaces, signs, leading zeros and exponents.
    for bad in ["1e308%", "150%", "0%", "60 %", "060%", "+60%", "1e1%"] {
        let o = memplan()
            .args(["plan", "sample", "--budget", bad, "-o"])
            .arg(dir.path().join("plan.json"))
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.contains(&memplan::budget::BudgetError::Parse(bad.into()).to_string()),
            "{err}"
        );
        assert!(!dir.path().join("plan.json").exists());
    }
}
